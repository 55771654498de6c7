/*
 * bench_device.c — what the device layer (stepwatch/device.h) costs the job it watches.
 *
 *   sampler:  the process's CPU time while only the sampler works (the main thread sleeps),
 *             as % of one core, at 2 Hz (the default interval, 500 ms) over 5 s; and the cost
 *             of one read (sw_device_read: /proc, and NVML when a GPU is here) over 2000 reads.
 *   device time: host ns per step of a loop of 5 phases (data, forward, loss, backward,
 *             optimizer, back to back), plain and with device timing
 *               - on a GPU clock whose calls return at once (events are numbers, always
 *                 reached): stepwatch's own bookkeeping on the training thread, per step and
 *                 per event recorded;
 *               - on the CUDA runtime (sw_device_time_cuda) that STEPWATCH_CUDART names
 *                 (scripts/bench.sh points it at the fake runtime of tests/device/, whose
 *                 calls take a mutex and read the clock: an upper bound of stepwatch's side
 *                 of a real runtime's calls, without the driver's own cost).
 *             And, when valgrind is on PATH, the instructions per event with callgrind: the
 *             instant clock's steps minus plain steps, each at 2000 and 4000 steps (the
 *             difference cancels start-up), over the events recorded per step.
 * Usage: bench_device [OUT.json]    bench_device --steps plain|instant|cudart N (for callgrind)
 */
#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STEPS 200000
#define READS 2000

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- a GPU clock that costs nothing: isolates stepwatch's own work ---------------------- */

static uintptr_t g_events;
static uint64_t g_records;
static int instant_new(void *ctx, void **event) {
    (void)ctx;
    *event = (void *)++g_events;
    return 0;
}
static int instant_record(void *ctx, void *event) {
    (void)ctx, (void)event;
    g_records++;
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

enum { PLAIN, INSTANT, CUDART };

/* A profiler timed as mode asks: NULL when the CUDA runtime cannot be loaded. */
static sw_profiler *profiler(int mode) {
    sw_profiler *p = NULL;
    if (sw_profiler_new(NULL, &p) != 0)
        exit(1);
    int rc = 0;
    if (mode == INSTANT) {
        sw_gpu_clock clock = {.size = sizeof(sw_gpu_clock),
                              .event_new = instant_new,
                              .record = instant_record,
                              .query = instant_query,
                              .elapsed_ns = instant_elapsed,
                              .event_free = instant_free};
        rc = sw_device_time_clock(p, &clock);
    } else if (mode == CUDART) {
        rc = sw_device_time_cuda(p, NULL);
    }
    if (rc != 0) {
        sw_profiler_free(p);
        return NULL;
    }
    return p;
}

static void run_steps(sw_profiler *p, const sw_id ids[5], long steps) {
    for (long s = 0; s < steps; s++) {
        sw_step_begin(p, 32);
        for (int i = 0; i < 5; i++) {
            sw_begin(p, ids[i]);
            sw_end(p, ids[i]);
        }
        sw_step_end(p);
    }
}

static void intern(sw_profiler *p, sw_id ids[5]) {
    const char *names[] = {"data", "forward", "loss", "backward", "optimizer"};
    for (int i = 0; i < 5; i++)
        ids[i] = sw_action(p, names[i]);
}

/* ns per step of the 5-phase loop in mode (best of 5 rounds); -1 without a runtime. */
static double step_ns(int mode) {
    sw_profiler *p = profiler(mode);
    if (p == NULL)
        return -1;
    sw_id ids[5];
    intern(p, ids);
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = now_s(CLOCK_MONOTONIC);
        run_steps(p, ids, STEPS);
        double ns = (now_s(CLOCK_MONOTONIC) - t0) * 1e9 / STEPS;
        best = ns < best ? ns : best;
    }
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    if (mode == INSTANT &&
        (sw_device_time_info_get(p, &info) != 0 || info.steps_timed + 1 < 5 * (uint64_t)STEPS)) {
        fprintf(stderr, "bench_device: the device timing timed %llu steps\n",
                (unsigned long long)info.steps_timed);
        exit(1);
    }
    sw_profiler_free(p);
    return best;
}

/* Instructions of `bench_device --steps mode steps` under callgrind; -1 when it cannot run. */
static double instructions(const char *self, const char *mode, long steps) {
    char out[64], cmd[1024];
    snprintf(out, sizeof out, "/tmp/sw_bench_cg.%d", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "valgrind --tool=callgrind --callgrind-out-file=%s %s --steps %s %ld "
             ">/dev/null 2>&1",
             out, self, mode, steps);
    double ir = -1;
    if (system(cmd) == 0) {
        FILE *f = fopen(out, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, "summary:", 8) == 0)
                ir = strtod(line + 8, NULL);
        if (f)
            fclose(f);
    }
    unlink(out);
    return ir;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--steps") == 0) { /* one loop, for callgrind */
        int mode = strcmp(argv[2], "instant") == 0  ? INSTANT
                   : strcmp(argv[2], "cudart") == 0 ? CUDART
                                                    : PLAIN;
        sw_profiler *p = profiler(mode);
        if (p == NULL)
            return 1;
        sw_id ids[5];
        intern(p, ids);
        run_steps(p, ids, atol(argv[3]));
        sw_profiler_free(p);
        return 0;
    }
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
    sw_options o = {.size = sizeof(sw_options), .device_stats = 1, .device_stats_ms = 500};
    double cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID), wall0 = now_s(CLOCK_MONOTONIC);
    if (sw_profiler_new(&o, &p) != 0)
        return 1;
    struct timespec five = {5, 0};
    nanosleep(&five, NULL);
    sw_profiler_free(p);
    double sampler_pct = (now_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) /
                         (now_s(CLOCK_MONOTONIC) - wall0) * 100;

    double plain = step_ns(PLAIN);
    g_records = 0;
    double timed = step_ns(INSTANT);
    double per_step = (double)g_records / (5.0 * STEPS); /* events recorded per step */
    double cudart = step_ns(CUDART);
    double per_event = (timed - plain) / per_step;
    /* Instructions per event: (instant - plain) at 4000 minus at 2000 steps, per event. */
    double ir[2][2] = {{-1, -1}, {-1, -1}};
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 2; k++)
            ir[m][k] = instructions(argv[0], m ? "instant" : "plain", 2000L * (k + 1));
    double ir_event = -1;
    if (ir[0][0] > 0 && ir[0][1] > 0 && ir[1][0] > 0 && ir[1][1] > 0)
        ir_event = ((ir[1][1] - ir[1][0]) - (ir[0][1] - ir[0][0])) / 2000.0 / per_step;

    printf("%-40s %12s %12s %8s\n", "device layer (C)", "measured", "anchor", "budget");
    printf("%-40s %10.3f %% %12s %8s\n", "sampler at 2 Hz, % of one core", sampler_pct, "", "<=1%");
    printf("%-40s %9.1f us %12s %8s\n", gpus >= 0 ? "one read (/proc + NVML)" : "one read (/proc)",
           read_us, "", "");
    printf("%-40s %9.1f ns %9.1f ns %8s\n", "step of 5 phases, device time on/off", timed, plain,
           "");
    printf("%-40s %12.2f %12s %8s\n", "events recorded per step (shared)", per_step, "12 unshared",
           "");
    printf("%-40s %9.1f ns %12s %8s\n", "bookkeeping per event (wall)", per_event, "", "");
    if (ir_event > 0)
        printf("%-40s %12.0f %12s %8s\n", "instructions per event (callgrind)", ir_event, "", "");
    else
        printf("%-40s %12s %12s %8s\n", "instructions per event (callgrind)", "n/a",
               "(no valgrind)", "");
    if (cudart > 0)
        printf("%-40s %9.1f ns %9.1f ns %8s\n", "step on the CUDA runtime (STEPWATCH_CUDART)",
               cudart, plain, "");
    if (argc > 1) {
        FILE *out = fopen(argv[1], "w");
        if (out == NULL) {
            perror(argv[1]);
            return 1;
        }
        fprintf(out,
                "{\"sampler_cpu_percent_2hz\": %.4f, \"read_us\": %.2f, \"gpus\": %d,\n"
                " \"step_ns_device_time\": %.1f, \"step_ns_plain\": %.1f,\n"
                " \"events_per_step\": %.3f, \"ns_per_event\": %.1f,\n"
                " \"instructions_per_event\": %.0f, \"step_ns_cudart\": %.1f}\n",
                sampler_pct, read_us, gpus, timed, plain, per_step, per_event, ir_event, cudart);
        fclose(out);
    }
    return 0;
}
