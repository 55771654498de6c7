/*
 * bench_journal.c — what the run file costs: CPU of the flusher thread while the training
 * thread produces 10^5 events per second (spans with the timeline on, steps, counter
 * samples), and the file's size per step.
 *
 * The training thread emits the events in bursts every millisecond and sleeps in between,
 * so the process's CPU time minus the training thread's own (CLOCK_THREAD_CPUTIME_ID) is
 * the flusher's: it is the only other thread. Budget: <= 5 % of one core.
 *
 * usage: bench_journal [OUT.json] [SECONDS]      (defaults: build/bench/journal.json, 3)
 */
#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EVENTS_PER_S 100000.0
#define BUDGET_PERCENT 5.0

static double cpu_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double process_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

int main(int argc, char **argv) {
    const char *json_path = argc > 1 ? argv[1] : "build/bench/journal.json";
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    char run_path[] = "/tmp/sw_bench_journal_XXXXXX";
    int fd = mkstemp(run_path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    unlink(run_path);

    sw_options opts = {
        .size = sizeof(sw_options), .run_file = run_path, .timeline = 1, .name = "bench_journal"};
    sw_profiler *p = NULL;
    int rc = sw_profiler_new(&opts, &p);
    if (rc != 0) {
        fprintf(stderr, "bench_journal: %s\n", sw_strerror(rc));
        return 1;
    }
    static const char *const names[] = {"data",     "forward",   "loss",
                                        "backward", "optimizer", "zero_grad"};
    enum { NACTIONS = 6 };
    sw_id ids[NACTIONS];
    for (int k = 0; k < NACTIONS; k++)
        ids[k] = sw_action(p, names[k]);
    sw_id loss = sw_counter_id(p, "loss");
    /* A step: 6 spans + the "step" span + the step record + 1 counter sample = 9 events. */
    const int events_per_step = NACTIONS + 3;
    const double steps_per_s = EVENTS_PER_S / events_per_step;
    sw_phase_begin(p, SW_PHASE_TRAIN);

    double cpu0 = process_cpu_s(), self0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    uint64_t start = sw_now_ns();
    uint64_t steps = 0;
    for (;;) {
        double elapsed = (double)(sw_now_ns() - start) / 1e9;
        if (elapsed >= seconds)
            break;
        uint64_t due = (uint64_t)(elapsed * steps_per_s);
        for (; steps < due; steps++) {
            sw_step_begin(p, 64);
            for (int k = 0; k < NACTIONS; k++) {
                sw_begin(p, ids[k]);
                sw_end(p, ids[k]);
            }
            sw_counter(p, loss, 1.0 / (double)(steps + 1));
            sw_step_end(p);
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    double wall = (double)(sw_now_ns() - start) / 1e9;
    double flusher_cpu = (process_cpu_s() - cpu0) - (cpu_s(CLOCK_THREAD_CPUTIME_ID) - self0);
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_snapshot *snap = NULL;
    uint64_t dropped = 0;
    if (sw_snapshot_take(p, &snap) == 0)
        dropped = snap->dropped_events;
    sw_snapshot_free(snap);
    sw_profiler_free(p);

    double events_per_s = (double)steps * events_per_step / wall;
    double percent = 100.0 * flusher_cpu / wall;
    long long bytes = file_size(run_path);
    double bytes_per_step = steps ? (double)bytes / (double)steps : 0;
    printf("%-34s %12s %10s %10s %12s %8s\n", "benchmark", "events/s", "flusher", "budget",
           "bytes/step", "dropped");
    printf("%-34s %12.0f %9.2f%% %9.1f%% %12.1f %8llu  %s\n", "journal (timeline on)", events_per_s,
           percent, BUDGET_PERCENT, bytes_per_step, (unsigned long long)dropped,
           percent <= BUDGET_PERCENT ? "ok" : "OVER BUDGET");

    FILE *f = fopen(json_path, "w");
    if (f != NULL) {
        fprintf(f,
                "{\"benchmark\":\"journal\",\"seconds\":%.3f,\"events_per_s\":%.0f,"
                "\"steps\":%llu,\"events_per_step\":%d,\"flusher_cpu_s\":%.4f,"
                "\"flusher_cpu_percent\":%.3f,\"budget_percent\":%.1f,\"file_bytes\":%lld,"
                "\"bytes_per_step\":%.1f,\"dropped_events\":%llu}\n",
                wall, events_per_s, (unsigned long long)steps, events_per_step, flusher_cpu,
                percent, BUDGET_PERCENT, bytes, bytes_per_step, (unsigned long long)dropped);
        fclose(f);
    } else {
        fprintf(stderr, "bench_journal: cannot write %s\n", json_path);
    }
    unlink(run_path);
    return percent <= BUDGET_PERCENT ? 0 : 1;
}
