/*
 * bench_device.c — what the device layer (stepwatch/device.h) costs the job it watches.
 *
 *   sampler:  the process's CPU time while only the sampler works (the main thread sleeps),
 *             as % of one core, at 2 Hz (the default interval, 500 ms) over 5 s; and the cost
 *             of one read (sw_device_read: /proc, and NVML when a GPU is here) over 2000 reads.
 *   device time: host ns per step of a loop of 5 phases, with and without device timing, on
 *             a GPU clock whose calls return at once (events are numbers, always reached): the
 *             bookkeeping stepwatch adds on the training thread, without the runtime's own
 *             cost of an event record (a few microseconds each on a real GPU, not measured
 *             here: no GPU in CI).
 * Usage: bench_device [OUT.json]
 */
#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define STEPS 200000
#define READS 2000

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- a GPU clock that costs nothing: isolates stepwatch's own work ---------------------- */

static uintptr_t g_events;
static int instant_new(void *ctx, void **event) {
    (void)ctx;
    *event = (void *)++g_events;
    return 0;
}
static int instant_record(void *ctx, void *event) {
    (void)ctx, (void)event;
    return 0;
}
static int instant_query(void *ctx, void *event) {
    (void)ctx, (void)event;
    return 1;
}
static int instant_elapsed(void *ctx, void *start, void *end, uint64_t *ns) {
    (void)ctx;
    *ns = (uint64_t)((uintptr_t)end - (uintptr_t)start);
    return 0;
}
static void instant_free(void *ctx, void *event) {
    (void)ctx, (void)event;
}

/* ns per step of a 5-phase loop; timed: with device time on the instant clock. */
static double step_ns(int timed) {
    sw_profiler *p = NULL;
    if (sw_profiler_new(NULL, &p) != 0)
        exit(1);
    if (timed) {
        sw_gpu_clock clock = {.event_new = instant_new, .record = instant_record,
                              .query = instant_query, .elapsed_ns = instant_elapsed,
                              .event_free = instant_free};
        if (sw_device_time_clock(p, &clock) != 0)
            exit(1);
    }
    const char *names[] = {"data", "forward", "loss", "backward", "optimizer"};
    sw_id ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = sw_action(p, names[i]);
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = now_s(CLOCK_MONOTONIC);
        for (int s = 0; s < STEPS; s++) {
            sw_step_begin(p, 32);
            for (int i = 0; i < 5; i++) {
                sw_begin(p, ids[i]);
                sw_end(p, ids[i]);
            }
            sw_step_end(p);
        }
        double ns = (now_s(CLOCK_MONOTONIC) - t0) * 1e9 / STEPS;
        best = ns < best ? ns : best;
    }
    sw_device_time_info info = {0};
    if (timed && (sw_device_time_info_get(p, &info) != 0 || info.steps_timed < STEPS)) {
        fprintf(stderr, "bench_device: the device timing timed %llu steps\n",
                (unsigned long long)info.steps_timed);
        exit(1);
    }
    sw_profiler_free(p);
    return best;
}

int main(int argc, char **argv) {
    /* One read's cost. */
    sw_device_reader *r = NULL;
    if (sw_device_reader_new(1, &r) != 0)
        return 1;
    sw_device_stats st;
    double t0 = now_s(CLOCK_MONOTONIC);
    for (int i = 0; i < READS; i++)
        sw_device_read(r, &st);
    double read_us = (now_s(CLOCK_MONOTONIC) - t0) * 1e6 / READS;
    int gpus = st.ngpus;
    sw_device_reader_free(r);

    /* The sampler at 2 Hz: the process's CPU while the main thread sleeps. */
    sw_profiler *p = NULL;
    sw_options o = {.device_stats = 1, .device_stats_ms = 500};
    double cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID), wall0 = now_s(CLOCK_MONOTONIC);
    if (sw_profiler_new(&o, &p) != 0)
        return 1;
    struct timespec five = {5, 0};
    nanosleep(&five, NULL);
    sw_profiler_free(p);
    double sampler_pct = (now_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) /
                         (now_s(CLOCK_MONOTONIC) - wall0) * 100;

    double plain = step_ns(0), timed = step_ns(1);

    printf("%-38s %12s %12s %8s\n", "device layer (C)", "measured", "anchor", "budget");
    printf("%-38s %10.3f %% %12s %8s\n", "sampler at 2 Hz, % of one core", sampler_pct,
           "", "<=1%");
    printf("%-38s %9.1f us %12s %8s\n", gpus >= 0 ? "one read (/proc + NVML)" : "one read (/proc)",
           read_us, "", "");
    printf("%-38s %9.1f ns %9.1f ns %8s\n", "step of 5 phases, device time on/off", timed, plain,
           "");
    if (argc > 1) {
        FILE *out = fopen(argv[1], "w");
        if (out == NULL) {
            perror(argv[1]);
            return 1;
        }
        fprintf(out,
                "{\"sampler_cpu_percent_2hz\": %.4f, \"read_us\": %.2f, \"gpus\": %d,\n"
                " \"step_ns_device_time\": %.1f, \"step_ns_plain\": %.1f}\n",
                sampler_pct, read_us, gpus, timed, plain);
        fclose(out);
    }
    return 0;
}
