/*
 * test_slow_os.c — how a slow step lost its time (docs/slow-steps.md): the off-CPU time split
 * into runnable (preempted) and not runnable (blocked) by /proc/thread-self/schedstat's run
 * delay, with ground truth from a C loop (a busy process pinned to the loop's CPU; a sleep),
 * and the synchronizing-call and GPU-throttle causes, by the rule and through a run file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stepwatch.h"
#include "stepwatch/device.h"
#include "test_helpers.h"

#define MS 1000000ull

static const char *text_of(sw_step_record *r, char *line, size_t size) {
    r->cause = sw_slow_cause(r, 0, &r->explained_ns);
    return sw_slow_step_text(r, line, size);
}

/* With the run delay read, the off-CPU time splits: runnable is preempted, the rest blocked;
 * a span loses only the runnable part (a Hugging Face save of 400 ms in a step with more
 * involuntary switches than voluntary ones was "preempted" by the switches alone). */
static void test_split_rule(void **state) {
    (void)state;
    char line[300];
    sw_step_record r = sw_test_slow_record(977, 64 * MS, 4 * MS);
    r.signals.os_wall_ns = 66 * MS;
    r.signals.cpu_ns = 6 * MS; /* 60 ms off the CPU */
    r.signals.voluntary_switches = 50;
    r.signals.involuntary_switches = 4;
    r.signals.has_runnable = 1;
    r.signals.runnable_ns = 33 * MS;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 977: 64.0 ms (median 4.00 ms): preempted: 33.0 ms off-CPU while "
                        "runnable, 27.0 ms blocked, 4 involuntary switches");
    assert_int_equal(r.explained_ns, 60 * MS);
    r.signals.runnable_ns = 20 * MS;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 977: 64.0 ms (median 4.00 ms): blocked: 40.0 ms off-CPU, not "
                        "runnable (20.0 ms more runnable), 50 voluntary switches");
    /* Switches alone say preempted; the run delay says blocked. */
    r.signals.voluntary_switches = 2;
    r.signals.involuntary_switches = 73;
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_BLOCKED);
    /* The machine's steal is not blocking: 40 ms not runnable, 50 % of 66 ms stolen. */
    r.signals.steal_permille = 500;
    assert_int_equal(sw_step_runnable_ns(&r), 53 * MS);
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_PREEMPTED);
    r.signals.steal_permille = 0;
    r.signals.has_runnable = 0;
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_PREEMPTED); /* the fallback */
    /* A save that blocked on its writes, a little preempted: the checkpoint's. */
    r = sw_test_slow_record(977, 450 * MS, 50 * MS);
    r.signals.checkpoint_ns = 400 * MS;
    r.signals.os_wall_ns = 450 * MS;
    r.signals.cpu_ns = 70 * MS;
    r.signals.voluntary_switches = 40;
    r.signals.involuntary_switches = 73;
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_PREEMPTED); /* switches only */
    r.signals.has_runnable = 1;
    r.signals.runnable_ns = 30 * MS;
    uint64_t ns = 0;
    assert_int_equal(sw_slow_cause(&r, 0, &ns), SW_CAUSE_CHECKPOINT);
    assert_int_equal(ns, 370 * MS);
}

/* The OS is read at most so often: a reading that covers steps before the slow one says so
 * beside its counts (a 4.7 ms step once read "28 ms in the kernel"); one about as long as
 * the step says nothing more. */
static void test_reading_wider_than_the_step(void **state) {
    (void)state;
    char line[300];
    sw_step_record r = sw_test_slow_record(11, 5 * MS, 1 * MS);
    r.signals.os_wall_ns = 40 * MS;
    r.signals.cpu_ns = 39 * MS;
    r.signals.sys_ns = 28 * MS;
    r.signals.minor_faults = 785;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 11: 5.00 ms (median 1.00 ms): page faults: 785 minor, 0 major, "
                        "28.0 ms in the kernel, counted over 40.0 ms with the steps before it");
    r.signals.os_wall_ns = 6 * MS;
    r.signals.cpu_ns = 5 * MS;
    r.signals.sys_ns = 4 * MS;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 11: 5.00 ms (median 1.00 ms): page faults: 785 minor, 0 major, "
                        "4.00 ms in the kernel");
    /* Off the CPU: the switches are the reading's too. */
    r.signals.minor_faults = 0;
    r.signals.sys_ns = 0;
    r.signals.os_wall_ns = 30 * MS;
    r.signals.cpu_ns = 20 * MS;
    r.signals.voluntary_switches = 12;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 11: 5.00 ms (median 1.00 ms): blocked: 5.00 ms off-CPU, not "
                        "runnable, 12 voluntary switches, counted over 30.0 ms with the steps "
                        "before it");
}

/* The host waited in a synchronizing call; a GPU that slowed its clocks is why. */
static void test_sync_and_throttle_rule(void **state) {
    (void)state;
    char line[300];
    sw_step_record r = sw_test_slow_record(977, 150 * MS, 25 * MS);
    r.signals.sync_ns = 120 * MS;
    snprintf(r.signals.sync_call, sizeof r.signals.sync_call, "sync .item()");
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 977: 150 ms (median 25.0 ms): sync: blocked 120 ms in .item()");
    r.signals.clock_reasons = 0x1; /* idle: not a slowdown */
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_SYNC);
    r.signals.clock_reasons = SW_CLOCK_HW_THERMAL | SW_CLOCK_POWER_CAP;
    assert_string_equal(text_of(&r, line, sizeof line),
                        "step 977: 150 ms (median 25.0 ms): throttled: the GPU slowed its "
                        "clocks (thermal, power cap), blocked 120 ms in synchronizing calls");
    assert_int_equal(r.explained_ns, 120 * MS);
    /* Nothing timed, but a throttled sample: the excess is the GPU's. */
    r.signals.sync_ns = 0;
    uint64_t ns = 0;
    assert_int_equal(sw_slow_cause(&r, 0, &ns), SW_CAUSE_THROTTLED);
    assert_int_equal(ns, 125 * MS);
    /* A program cause the throttle does not take. */
    r.signals.gc_ns = 100 * MS;
    assert_int_equal(sw_slow_cause(&r, 0, NULL), SW_CAUSE_GC);
    assert_int_equal(sw_cause_of("sync .item()"), SW_CAUSE_SYNC);
    assert_int_equal(sw_cause_of("sync"), SW_CAUSE_SYNC);
    assert_int_equal(sw_cause_of("synchronize"), SW_CAUSE_NONE);
    assert_string_equal(sw_cause_name(SW_CAUSE_THROTTLED), "throttled");
}

typedef struct seen {
    sw_step_record steps[256];
    int n;
} seen;

static int on_slow(void *ctx, int rank, const sw_step_record *r) {
    (void)rank;
    seen *s = ctx;
    if (s->n < 256)
        s->steps[s->n++] = *r;
    return 0;
}

static const sw_step_record *find(const seen *s, uint64_t step) {
    for (int i = 0; i < s->n; i++)
        if (s->steps[i].step == step)
            return &s->steps[i];
    return NULL;
}

static void read_slow(const char *path, seen *s) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    memset(s, 0, sizeof *s);
    assert_int_equal(sw_run_foreach_slow_step(run, -1, on_slow, s), 0);
    sw_run_close(run);
}

/* A C loop whose step 40 waits 30 ms in "sync .item()": found as sync through the run file,
 * the call named (the loop's short "sync .cpu()" spans of every step are not the longest). */
static void test_sync_loop(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/sync.db", sw_test_dir);
    SW_TEST_PROFILER(p, .run_file = path, .warmup_steps = 2);
    sw_id item = sw_action(p, "sync .item()"), cpu = sw_action(p, "sync .cpu()");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (uint64_t i = 0; i < 60; i++) {
        sw_step_begin(p, 8);
        sw_test_spin(MS);
        sw_begin(p, cpu);
        sw_test_spin(MS / 10);
        sw_end(p, cpu);
        if (i == 40) {
            sw_begin(p, item);
            sw_test_spin(30 * MS);
            sw_end(p, item);
        }
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p);
    static seen s;
    read_slow(path, &s);
    const sw_step_record *r = find(&s, 40);
    assert_non_null(r);
    char line[300];
    print_message("%s\n", sw_slow_step_text(r, line, sizeof line));
    assert_true(r->signals.sync_ns >= 30 * MS);
    assert_string_equal(r->signals.sync_call, "sync .item()");
    uint64_t taken = sw_step_runnable_ns(r), sync = r->signals.sync_ns;
    /* The sync explains it unless the machine preempted the spin for more than half; then
     * the machine's cause (preempted, or unknown when neither explains half). */
    if (2 * (sync - (taken < sync ? taken : sync)) >= r->duration_ns - r->median_ns)
        assert_int_equal(r->cause, SW_CAUSE_SYNC);
    else
        assert_true(r->cause == SW_CAUSE_PREEMPTED || r->cause == SW_CAUSE_UNKNOWN);
}

/* A C loop sampled with the fake NVML (tests/device/fake_nvml.c): its GPUs report a hardware
 * thermal slowdown during step 40 alone, a step that waits 40 ms (a sleep: blocked, as a
 * host waiting for a slow GPU is). The sampler's reading reaches that step's signals, and
 * the step is throttled; the steps before it carry no reasons. */
static void test_throttled_gpu_from_the_sampler(void **state) {
    (void)state;
    setenv("STEPWATCH_NVML", SW_FAKE_NVML, 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    void *nvml = dlopen(SW_FAKE_NVML, RTLD_NOW);
    assert_non_null(nvml);
    void (*set_reasons)(unsigned long long) = (void (*)(unsigned long long))dlsym(
        nvml, "fake_nvml_set_clock_reasons");
    assert_non_null(set_reasons);
    set_reasons(0);
    char path[300];
    snprintf(path, sizeof path, "%s/throttled.db", sw_test_dir);
    SW_TEST_PROFILER(p, .run_file = path, .warmup_steps = 2);
    assert_int_equal(sw_device_stats_start(p, 5), 0);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (uint64_t i = 0; i < 60; i++) {
        if (i == 40)
            set_reasons(SW_CLOCK_HW_THERMAL | 0x1); /* and GPU idle, not a slowdown */
        sw_step_begin(p, 8);
        sw_test_spin(MS);
        if (i == 40)
            nanosleep(&(struct timespec){0, 40 * (long)MS}, NULL);
        sw_step_end(p);
        if (i == 40)
            set_reasons(0);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p);
    dlclose(nvml);
    unsetenv("STEPWATCH_NVML");
    static seen s;
    read_slow(path, &s);
    const sw_step_record *r = find(&s, 40);
    assert_non_null(r);
    char line[300];
    print_message("%s\n", sw_slow_step_text(r, line, sizeof line));
    assert_true(r->signals.clock_reasons & SW_CLOCK_HW_THERMAL);
    /* throttled, unless the machine kept the loop off its CPU for more than half of it */
    if (2 * sw_step_runnable_ns(r) < r->duration_ns - r->median_ns)
        assert_int_equal(r->cause, SW_CAUSE_THROTTLED);
    for (int i = 0; i < s.n; i++)
        if (s.steps[i].step < 39)
            assert_int_equal(s.steps[i].signals.clock_reasons, 0);
}

/* ---- ground truth for the split: a competitor on the loop's CPU, and a sleep ------------- */

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin until this thread has had ns of CPU time (however long the wall clock takes). */
static void spin_cpu(uint64_t ns) {
    uint64_t end = thread_cpu_ns() + ns;
    while (thread_cpu_ns() < end) {
    }
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

/* A process pinned to cpu that spins 30 ms of its own CPU time per byte read from pipe
 * fds[c]; it ends when that pipe is closed (it closes its copies of every write end). */
static pid_t start_competitor(int cpu, int fds[2][2], int c) {
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    close(fds[0][1]);
    close(fds[1][1]);
    int fd = fds[c][0];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    char byte;
    while (read(fd, &byte, 1) == 1)
        spin_cpu(30 * MS);
    _exit(0);
}

static int schedstat_here(void) {
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f)
        fclose(f);
    return f != NULL;
}

static void test_split_ground_truth(void **state) {
    (void)state;
    if (!schedstat_here())
        skip(); /* no schedstat (a kernel without CONFIG_SCHED_INFO): the fallback rule */
    cpu_set_t was, one;
    assert_int_equal(sched_getaffinity(0, sizeof was, &was), 0);
    int cpu = sched_getcpu();
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    /* Two competitors: the loop gets a third of the CPU, off it two thirds of the step (with
     * one, half: the rule's very edge). */
    int pipefd[2][2];
    pid_t competitor[2];
    assert_int_equal(pipe(pipefd[0]), 0);
    assert_int_equal(pipe(pipefd[1]), 0);
    for (int c = 0; c < 2; c++) {
        competitor[c] = start_competitor(cpu, pipefd, c);
        assert_true(competitor[c] > 0);
    }
    close(pipefd[0][0]);
    close(pipefd[1][0]);

    char path[300];
    snprintf(path, sizeof path, "%s/split.db", sw_test_dir);
    SW_TEST_PROFILER(p, .run_file = path, .warmup_steps = 2);
    static const uint64_t busy[] = {20, 30, 40}, asleep[] = {25, 35, 45};
    /* The sleep: 40 ms, or longer on a machine so loaded that the usual step (the first 15,
     * by the test's own clock) is slow: a sleep still 3x it. */
    uint64_t sleep = 40 * MS, t0 = 0;
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (uint64_t i = 0; i < 60; i++) {
        if (i == 2)
            t0 = sw_now_ns();
        if (i == 17 && (sw_now_ns() - t0) / 15 * 8 > sleep)
            sleep = (sw_now_ns() - t0) / 15 * 8;
        sw_step_begin(p, 8);
        spin_cpu(MS);
        if (i == busy[0] || i == busy[1] || i == busy[2]) {
            /* The loop joins the competitors on their CPU for this step: all want it. */
            assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
            assert_int_equal(write(pipefd[0][1], "x", 1), 1);
            assert_int_equal(write(pipefd[1][1], "x", 1), 1);
            spin_cpu(30 * MS);
            assert_int_equal(sched_setaffinity(0, sizeof was, &was), 0);
        }
        if (i == asleep[0] || i == asleep[1] || i == asleep[2])
            sleep_ns(sleep);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p);
    for (int c = 0; c < 2; c++) {
        close(pipefd[c][1]);
        waitpid(competitor[c], NULL, 0);
    }

    static seen s;
    read_slow(path, &s);
    int preempted = 0, blocked = 0;
    char line[300];
    for (int k = 0; k < 3; k++) {
        /* Preempted: the competitor had the CPU while the loop was runnable. */
        const sw_step_record *r = find(&s, busy[k]);
        assert_non_null(r);
        print_message("%s\n", sw_slow_step_text(r, line, sizeof line));
        assert_true(r->signals.has_runnable);
        assert_true(r->signals.runnable_ns >= 10 * MS);
        /* (Under a sanitizer the first competed step can fault in fresh shadow memory: its
         * kernel time explaining half the excess is the page faults' by the rule.) */
        preempted += r->cause == SW_CAUSE_PREEMPTED ||
                     (r->cause == SW_CAUSE_PAGE_FAULTS &&
                      2 * r->signals.sys_ns >= r->duration_ns - r->median_ns);
        /* Blocked: asleep, not runnable, over the reading (however loaded the CPU). */
        r = find(&s, asleep[k]);
        assert_non_null(r);
        print_message("%s\n", sw_slow_step_text(r, line, sizeof line));
        assert_true(r->signals.has_runnable);
        const sw_step_signals *g = &r->signals;
        assert_true(g->os_wall_ns - g->cpu_ns - g->runnable_ns >= sleep - MS);
        uint64_t off = sw_step_off_cpu_ns(r);
        if (2 * g->runnable_ns > off) { /* the wake-up waited longer than the sleep: loaded */
            print_message("step %llu: woke to %llu ms runnable\n", (unsigned long long)r->step,
                          (unsigned long long)(g->runnable_ns / MS));
            continue;
        }
        assert_int_equal(r->cause, SW_CAUSE_BLOCKED);
        blocked++;
    }
    /* Every competed step is preempted: nothing in it slept. */
    assert_int_equal(preempted, 3);
    print_message("preempted %d of 3, blocked %d of 3\n", preempted, blocked);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_reading_wider_than_the_step),
        cmocka_unit_test(test_sync_and_throttle_rule),
        cmocka_unit_test(test_sync_loop),
        cmocka_unit_test(test_throttled_gpu_from_the_sampler),
        cmocka_unit_test(test_split_ground_truth),
    };
    return cmocka_run_group_tests(tests, sw_test_make_dir, sw_test_remove_dir);
}
