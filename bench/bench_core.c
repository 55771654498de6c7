/*
 * bench_core.c — the cost of the hot path against its floor, measured side by side.
 *
 *   floor:  ns per pair of reads of the clock the recorder uses (sw_now_ns)
 *   pair:   ns per sw_begin/sw_end pair (nested in an open step, as in training)
 * Both on one thread, then on two threads at once. Then the process's resident memory before
 * and after 10^7 spans over 10 actions. Last, where the CPU has an invariant TSC, the same
 * with the TSC clock (SW_CLOCK_TSC; the switch is for the rest of the process): the pair
 * against both floors, two clock_gettime(CLOCK_MONOTONIC) reads and two TSC clock reads.
 * Then the slow steps' system calls (docs/slow-steps.md): ns per getrusage(RUSAGE_THREAD)
 * and per pread of /proc/thread-self/schedstat (read with it),
 * which instruction counts do not see, and ns per empty step with the OS reads on and off
 * (SW_STEP_OS=0): their difference is what the reads cost a step (budget: 1 us).
 * Each figure is the median of 7 rounds.
 * Usage: bench_core [OUT.json]
 */
#include "stepwatch.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#define PAIRS 2000000
#define ROUNDS 7

static volatile uint64_t sink;

static double floor_ns(void) {
    uint64_t start = sw_now_ns(), acc = 0;
    for (int i = 0; i < PAIRS; i++) {
        acc += sw_now_ns();
        acc += sw_now_ns();
    }
    sink = acc;
    return (double)(sw_now_ns() - start) / PAIRS;
}

/* Two clock_gettime(CLOCK_MONOTONIC) reads, whatever clock the profiler uses. */
static double monotonic_floor_ns(void) {
    struct timespec ts;
    uint64_t start = sw_now_ns(), acc = 0;
    for (int i = 0; i < PAIRS; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        acc += (uint64_t)ts.tv_nsec;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        acc += (uint64_t)ts.tv_nsec;
    }
    sink = acc;
    return (double)(sw_now_ns() - start) / PAIRS;
}

static double pair_ns(sw_profiler *p, sw_id id) {
    uint64_t start = sw_now_ns();
    for (int i = 0; i < PAIRS; i++) {
        sw_begin(p, id);
        sw_end(p, id);
    }
    return (double)(sw_now_ns() - start) / PAIRS;
}

#define SYSCALLS 200000
#define STEPS 200000

static double getrusage_ns(void) {
    struct rusage ru;
    uint64_t start = sw_now_ns();
    for (int i = 0; i < SYSCALLS; i++)
        getrusage(RUSAGE_THREAD, &ru);
    return (double)(sw_now_ns() - start) / SYSCALLS;
}

static double schedstat_ns(void) {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY);
    if (fd < 0)
        return 0;
    char buf[96];
    uint64_t start = sw_now_ns();
    for (int i = 0; i < SYSCALLS; i++)
        if (pread(fd, buf, sizeof buf, 0) <= 0)
            break;
    close(fd);
    return (double)(sw_now_ns() - start) / SYSCALLS;
}

/* ns per empty step of a new profiler, the OS reads on or off. */
static double step_ns(int os) {
    if (!os)
        setenv("SW_STEP_OS", "0", 1);
    sw_profiler *p = NULL;
    int rc = sw_profiler_new(NULL, &p);
    unsetenv("SW_STEP_OS");
    if (rc != 0)
        return 0;
    uint64_t start = sw_now_ns();
    for (int i = 0; i < STEPS; i++) {
        sw_step_begin(p, 1);
        sw_step_end(p);
    }
    double ns = (double)(sw_now_ns() - start) / STEPS;
    sw_profiler_free(p);
    return ns;
}

typedef struct slow_costs {
    double rusage, schedstat, step_on, step_off;
} slow_costs;

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return v[n / 2];
}

typedef struct job {
    sw_profiler *p;
    sw_id id;
    double floor[ROUNDS], pair[ROUNDS];
    pthread_barrier_t *barrier;
} job;

/* Alternate floor and pair rounds so both see the same machine state. */
static void *run_job(void *arg) {
    job *j = arg;
    for (int r = 0; r < ROUNDS; r++) {
        if (j->barrier)
            pthread_barrier_wait(j->barrier);
        j->floor[r] = floor_ns();
        if (j->barrier)
            pthread_barrier_wait(j->barrier);
        j->pair[r] = pair_ns(j->p, j->id);
    }
    return NULL;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

static slow_costs slow_step_costs(void) {
    double ru[ROUNDS], ss[ROUNDS], on[ROUNDS], off[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        ru[r] = getrusage_ns();
        ss[r] = schedstat_ns();
        on[r] = step_ns(1);
        off[r] = step_ns(0);
    }
    return (slow_costs){median(ru, ROUNDS), median(ss, ROUNDS), median(on, ROUNDS),
                        median(off, ROUNDS)};
}

int main(int argc, char **argv) {
    sw_profiler *p = NULL;
    if (sw_profiler_new(NULL, &p) != 0)
        return 1;
    sw_id id = sw_action(p, "bench");
    sw_step_begin(p, 1);

    job one = {.p = p, .id = id};
    run_job(&one);
    double floor1 = median(one.floor, ROUNDS), pair1 = median(one.pair, ROUNDS);

    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    job two[2] = {{.p = p, .id = id, .barrier = &barrier}, {.p = p, .id = id, .barrier = &barrier}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, run_job, &two[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    double floors[2 * ROUNDS], pairs[2 * ROUNDS];
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < ROUNDS; r++) {
            floors[i * ROUNDS + r] = two[i].floor[r];
            pairs[i * ROUNDS + r] = two[i].pair[r];
        }
    double floor2 = median(floors, 2 * ROUNDS), pair2 = median(pairs, 2 * ROUNDS);
    sw_step_end(p);

    /* Memory: 10^7 spans over 10 actions must not grow the process. */
    sw_id ids[10];
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "action%d", i);
        ids[i] = sw_action(p, name);
        sw_begin(p, ids[i]);
        sw_end(p, ids[i]);
    }
    long before = rss_kib();
    for (int i = 0; i < 10000000; i++) {
        sw_begin(p, ids[i % 10]);
        sw_end(p, ids[i % 10]);
    }
    long after = rss_kib();
    sw_profiler_free(p);

    /* The TSC clock: a profiler that asks for it switches the process. */
    double tsc_pair = 0, tsc_floor = 0, mono_floor = 0;
    sw_options tsc_opts = {.size = sizeof(sw_options), .clock = SW_CLOCK_TSC};
    int tsc = 0;
    if (sw_profiler_new(&tsc_opts, &p) == 0) {
        tsc = sw_clock_in_use() == SW_CLOCK_TSC;
        id = sw_action(p, "bench");
        sw_step_begin(p, 1);
        double pairs_t[ROUNDS], floors_t[ROUNDS], floors_m[ROUNDS];
        for (int r = 0; tsc && r < ROUNDS; r++) {
            floors_m[r] = monotonic_floor_ns();
            floors_t[r] = floor_ns();
            pairs_t[r] = pair_ns(p, id);
        }
        if (tsc) {
            tsc_pair = median(pairs_t, ROUNDS);
            tsc_floor = median(floors_t, ROUNDS);
            mono_floor = median(floors_m, ROUNDS);
        }
        sw_step_end(p);
        sw_profiler_free(p);
    }

    slow_costs slow = slow_step_costs();
    printf("%-34s %10s %10s %8s %8s\n", "core (C)", "stepwatch", "floor", "ratio", "budget");
    printf("%-34s %8.1f ns %8.1f ns %7.2fx %8s\n", "begin/end pair, 1 thread", pair1, floor1,
           pair1 / floor1, "<=1.5x");
    printf("%-34s %8.1f ns %8.1f ns %7.2fx %8s\n", "begin/end pair, 2 threads at once", pair2,
           floor2, pair2 / floor2, "<=1.5x");
    printf("%-34s %7ld KiB %7ld KiB %+7ld %8s\n", "RSS before/after 1e7 spans", after, before,
           after - before, "flat");
    if (tsc) {
        printf("%-34s %8.1f ns %8.1f ns %7.2fx %8s\n", "TSC clock: pair vs 2 clock_gettime",
               tsc_pair, mono_floor, tsc_pair / mono_floor, "<1x goal");
        printf("%-34s %8.1f ns %8.1f ns %7.2fx\n", "TSC clock: pair vs 2 TSC reads", tsc_pair,
               tsc_floor, tsc_pair / tsc_floor);
    } else {
        printf("TSC clock: not measured (no invariant time-stamp counter here)\n");
    }
    printf("%-34s %8.1f ns\n", "getrusage(RUSAGE_THREAD)", slow.rusage);
    printf("%-34s %8.1f ns\n", "pread(/proc/thread-self/schedstat)", slow.schedstat);
    printf("%-34s %8.1f ns %8.1f ns %+7.1f ns %8s\n", "empty step: OS reads on vs off",
           slow.step_on, slow.step_off, slow.step_on - slow.step_off, "<=1 us");
    if (argc > 1) {
        FILE *out = fopen(argv[1], "w");
        if (out == NULL) {
            perror(argv[1]);
            return 1;
        }
        fprintf(
            out,
            "{\"pair_ns_1thread\": %.2f, \"floor_ns_1thread\": %.2f, \"ratio_1thread\": %.3f,\n"
            " \"pair_ns_2threads\": %.2f, \"floor_ns_2threads\": %.2f, \"ratio_2threads\": %.3f,\n"
            " \"rss_kib_before\": %ld, \"rss_kib_after\": %ld, \"spans\": 10000000,\n"
            " \"tsc\": %d, \"tsc_pair_ns\": %.2f, \"tsc_floor_ns\": %.2f,"
            " \"monotonic_floor_ns\": %.2f,\n \"getrusage_ns\": %.1f, \"step_ns_os_on\": %.1f,"
            " \"step_ns_os_off\": %.1f, \"schedstat_ns\": %.1f}\n",
            pair1, floor1, pair1 / floor1, pair2, floor2, pair2 / floor2, before, after, tsc,
            tsc_pair, tsc_floor, mono_floor, slow.rusage, slow.step_on, slow.step_off,
            slow.schedstat);
        fclose(out);
    }
    return 0;
}
