/*
 * test_device_time.c — GPU time per phase (stepwatch/device.h) on a machine without a GPU:
 * STEPWATCH_CUDART points stepwatch at a fake CUDA runtime (tests/device/fake_cudart.c)
 * whose one stream runs queued kernels in real time. Loops with known kernel and host
 * times check the device times, that nothing ever synchronizes or leaves an error behind,
 * that a GPU far behind never makes the host wait, graph capture, runtime failures, and a
 * missing runtime.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_helpers.h"
#include "fake_gpu.h"

#define MS 1000000ull

static void sleep_ns(uint64_t ns) {
    sleep_until(sw_now_ns() + ns);
}

/* One phase of a step: host_ns on the host, gpu_ns of kernels launched at its start. */
typedef struct part {
    const char *action;
    uint64_t host_ns, gpu_ns;
    int sync; /* the host waits for the GPU at its end (loss.item()) */
} part;

/* What the fake GPU's clock makes each part's device time, bounded by the test's own clock
 * around the calls that record its events (the fake's clock is CLOCK_MONOTONIC): a part's
 * begin event is recorded between the start of the call before it (it may share that end's
 * event, or the step's begin) and the return of its sw_begin, its end event within its
 * sw_end; nothing is launched in either stretch, so the GPU's queue end q is fixed there and
 * the event's time lies in [max(from, q), max(to, q)]. A preempted host widens the bounds
 * where the GPU was idle, as it changes the device time itself. Summed over the steps after
 * the first `warm` of a run_steps (run_steps fills it when truth points at one). */
#define MAX_PARTS 8
typedef struct part_truth {
    int warm, step;
    int n[MAX_PARTS];
    double lo_sum[MAX_PARTS], hi_sum[MAX_PARTS], lo_min[MAX_PARTS], hi_min[MAX_PARTS]; /* ns */
    double host_sum[MAX_PARTS]; /* from sw_begin's return to sw_end's call */
} part_truth;
static part_truth *truth;
static uint64_t truth_from; /* when the call that may record the next begin's event began */

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double at_least(uint64_t t, uint64_t q) {
    return (double)(t > q ? t : q);
}

static void truth_add(size_t i, uint64_t begun, uint64_t q0, uint64_t ending, uint64_t ended,
                      uint64_t q1) {
    if (truth == NULL || truth->step < truth->warm || i >= MAX_PARTS)
        return;
    double lo = at_least(ending, q1) - at_least(begun, q0);
    double hi = at_least(ended, q1) - at_least(truth_from, q0);
    int first = truth->n[i]++ == 0;
    truth->lo_sum[i] += lo;
    truth->hi_sum[i] += hi;
    truth->host_sum[i] += (double)(ending - begun);
    truth->lo_min[i] = first || lo < truth->lo_min[i] ? lo : truth->lo_min[i];
    truth->hi_min[i] = first || hi < truth->hi_min[i] ? hi : truth->hi_min[i];
}

static void run_part(sw_profiler *p, const part *pt, size_t i) {
    sw_id id = sw_action(p, pt->action);
    sw_begin(p, id);
    uint64_t begun = mono_ns(), q0 = gpu.idle_at();
    if (pt->gpu_ns)
        gpu.launch(pt->gpu_ns);
    sleep_ns(pt->host_ns);
    if (pt->sync)
        sleep_until(gpu.idle_at() + 50000);
    uint64_t ending = mono_ns(), q1 = gpu.idle_at();
    sw_end(p, id);
    truth_add(i, begun, q0, ending, mono_ns(), q1);
    truth_from = ending;
}

static void run_steps(sw_profiler *p, int steps, const part *parts, size_t nparts) {
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int s = 0; s < steps; s++) {
        truth_from = mono_ns();
        sw_step_begin(p, 32);
        for (size_t i = 0; i < nparts; i++)
            run_part(p, &parts[i], i);
        sw_step_end(p);
        if (truth)
            truth->step++;
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
}

static double mean_ms(const sw_snapshot *s, const char *name) {
    const sw_counter_summary *c = sw_test_counter(s, name);
    assert_non_null(c);
    return c->mean / 1e6;
}

static double host_ms(const sw_snapshot *s, const char *action) {
    const sw_row *r = sw_snapshot_find(s, action, "train");
    assert_non_null(r);
    return r->stats.mean_ns / 1e6;
}

/* Close p once the GPU ran everything, so every step resolves; the snapshot of before. */
static sw_snapshot *finish(sw_profiler *p, sw_device_time_info *info) {
    sleep_until(gpu.idle_at() + 1 * MS);
    sw_step_begin(p, 0); /* one more step: the last timed one resolves without waiting */
    sw_step_end(p);
    assert_int_equal(sw_device_time_info_get(p, info), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    sw_profiler_free(p);
    return s;
}

/* ---- a missing runtime (first: its message is once per process, checked in a child) ---- */

static void without_runtime(void) {
    setenv("STEPWATCH_CUDART", "/nonexistent/libcudart.so.12", 1);
    sw_profiler *p = NULL;
    if (sw_profiler_new(NULL, &p) != 0 || sw_device_time_cuda(p, NULL) != SW_EUNSUPPORTED)
        _exit(3);
    sw_profiler_free(p);
    /* Asked through the options: the profiler works, without device time. */
    sw_options o = {.size = sizeof(sw_options), .device_time = 1};
    if (sw_profiler_new(&o, &p) != 0)
        _exit(4);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    if (sw_device_time_info_get(p, &info) != SW_ENOTFOUND)
        _exit(5);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_step_begin(p, 1);
    sw_step_end(p);
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_snapshot *s = NULL;
    if (sw_snapshot_take(p, &s) != 0 || s->ncounters != 0 || s->steps != 1)
        _exit(6); /* nothing changes without CUDA */
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_without_runtime(void **state) {
    (void)state;
    char err[2048];
    assert_int_equal(sw_test_in_child(without_runtime, err, sizeof err), 0);
    assert_non_null(strstr(err, "stepwatch: no device time (/nonexistent/libcudart.so.12"));
    assert_null(strstr(strstr(err, "no device time") + 1, "no device time")); /* once */
}

/* ---- the times ---- */

/* GPU-bound: the host waits for the GPU in loss (loss.item()), kernels queue behind each
 * other, so each phase's device time is its kernels' time; the data wait is hidden behind
 * the previous step's backward and optimizer. */
static void test_gpu_bound_times(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1, .warmup_steps = 1);
    const part parts[] = {{"data", 2 * MS, 0, 0},
                          {"forward", 1 * MS, 10 * MS, 0},
                          {"loss", 0, 0, 1},
                          {"backward", 2 * MS, 20 * MS, 0},
                          {"optimizer", MS / 2, 5 * MS, 0}};
    uint64_t syncs = count(SYNCS);
    part_truth t = {.warm = 1};
    truth = &t;
    run_steps(p, 12, parts, sizeof parts / sizeof *parts);
    truth = NULL;
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    printf("device ms: data %.3f forward %.3f loss %.3f backward %.3f optimizer %.3f step %.3f "
           "(host step %.3f, data %.3f)\n",
           mean_ms(s, "device:train/data"), mean_ms(s, "device:train/forward"),
           mean_ms(s, "device:train/loss"), mean_ms(s, "device:train/backward"),
           mean_ms(s, "device:train/optimizer"), mean_ms(s, "device:train/step"),
           host_ms(s, "step"), host_ms(s, "data"));
    /* Each phase's device time is what the GPU's clock says between its events, held to the
     * bounds the test's clock puts on it (part_truth): its kernels' time when the host runs
     * as planned, the bounds then a few us apart; a host stalled between a phase's begin and
     * its launch while the GPU is idle (a loaded machine stalls for ms) adds the stall, as
     * on a real GPU, and the bounds move with it. Data: hidden behind the kernels queued
     * before it (0 when the host keeps up). */
    const char *const phases[] = {"device:train/data", "device:train/forward", NULL,
                                  "device:train/backward", "device:train/optimizer"};
    const double kernels_ms[] = {0, 10, 0, 20, 5};
    for (int i = 0; i < 5; i++) {
        if (phases[i] == NULL)
            continue;
        const sw_counter_summary *c = sw_test_counter(s, phases[i]);
        assert_non_null(c);
        double eps = 0.01e6; /* the fake's float ms */
        printf("%s: mean %.3f in [%.3f, %.3f] ms, min %.3f in [%.3f, %.3f] ms\n", phases[i],
               c->mean / 1e6, t.lo_sum[i] / t.n[i] / 1e6, t.hi_sum[i] / t.n[i] / 1e6, c->min / 1e6,
               t.lo_min[i] / 1e6, t.hi_min[i] / 1e6);
        assert_int_equal(t.n[i], 11);
        assert_true(c->mean >= t.lo_sum[i] / t.n[i] - eps);
        assert_true(c->mean <= t.hi_sum[i] / t.n[i] + eps);
        assert_true(c->min >= t.lo_min[i] - eps && c->min <= t.hi_min[i] + eps);
        assert_true(c->min / 1e6 >= kernels_ms[i] - 0.3); /* the kernels lie between */
    }
    double step = mean_ms(s, "device:train/step");
    assert_true(step >= 35 && fabs(step - host_ms(s, "step")) <= 0.1 * host_ms(s, "step"));
    /* Every step but the warm-up one resolved; nothing waited, nothing was left behind. */
    assert_int_equal(info.warmup_steps, 1);
    assert_int_equal(sw_test_counter(s, "device:train/forward")->count, 11);
    assert_int_equal(info.steps_dropped, 0);
    assert_int_equal(info.failed, 0);
    assert_int_equal(count(SYNCS), syncs);
    assert_int_equal(gpu.peek_error(), 0);              /* every NotReady was cleared */
    assert_int_equal(count(CREATED), count(DESTROYED)); /* freed with the profiler */
    sw_snapshot_free(s);
}

/* Host-bound: the GPU waits for launches, so a phase's device time is its host time, and
 * the data wait is GPU idle time, not hidden. */
static void test_host_bound_times(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {
        {"data", 4 * MS, 0, 0}, {"forward", 3 * MS, 1 * MS, 0}, {"backward", 3 * MS, 2 * MS, 0}};
    run_steps(p, 10, parts, sizeof parts / sizeof *parts);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        char name[64];
        snprintf(name, sizeof name, "device:train/%s", parts[i].action);
        double device = mean_ms(s, name), host = host_ms(s, parts[i].action);
        printf("%s: host %.3f ms, device %.3f ms\n", parts[i].action, host, device);
        assert_true(fabs(device - host) <= 0.1 * host);
    }
    sw_snapshot_free(s);
}

/* A loop that begins a step once its batch arrived (Ignite, stepwatch.torch): the data wait
 * lies between two steps and is recorded after the fact; the GPU's idle time there is the
 * step's device data. */
static void test_data_between_steps(void **state) {
    (void)state;
    /* The first step has no gap before it: a warm-up step for both clocks. */
    SW_TEST_PROFILER(p, .device_time = 1, .warmup_steps = 1);
    sw_id data = sw_action(p, "data"), fwd = sw_action(p, "forward");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 10; i++) {
        uint64_t fetch = sw_now_ns();
        sleep_ns(5 * MS);
        sw_step_begin_at(p, 16, fetch);
        sw_record(p, data, fetch, sw_now_ns());
        sw_begin(p, fwd);
        gpu.launch(1 * MS);
        sleep_ns(2 * MS);
        sw_end(p, fwd);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    double device = mean_ms(s, "device:train/data"), host = host_ms(s, "data");
    printf("data between steps: host %.3f ms, device (GPU idle) %.3f ms\n", host, device);
    assert_true(fabs(device - host) <= 0.15 * host);
    /* The step's device time takes the fetch in, as its host time does. */
    assert_true(fabs(mean_ms(s, "device:train/step") - host_ms(s, "step")) <=
                0.1 * host_ms(s, "step"));
    sw_snapshot_free(s);
}

/* The batch's copy (h2d_copy): made before its step begins (stepwatch.torch holds the batch
 * until its forward), its events join that step; made inside a step, it is timed there and
 * counts in the step's device data. */
static void test_copy_timed(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1, .warmup_steps = 1);
    sw_id data = sw_action(p, "data"), copy = sw_action(p, "h2d_copy"),
          fwd = sw_action(p, "forward");
    assert_int_equal(sw_action_category(p, copy), SW_CAT_DATA);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 10; i++) { /* the copy between steps: 3 ms on the GPU */
        uint64_t fetch = sw_now_ns();
        sleep_ns(1 * MS);
        uint64_t fetched = sw_now_ns();
        sw_device_mark(p, copy, 1);
        gpu.launch(3 * MS);
        sleep_ns(MS / 2);
        sw_device_mark(p, copy, 0);
        uint64_t copied = sw_now_ns();
        sw_step_begin_at(p, 16, fetch);
        sw_record(p, data, fetch, fetched);
        sw_record(p, copy, fetched, copied);
        sw_begin(p, fwd);
        gpu.launch(1 * MS);
        sleep_ns(6 * MS); /* the GPU idles before the next copy */
        sw_end(p, fwd);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    /* A copy's device time is its kernel's, or its host time when the host took longer (a
     * preempted host records the end event late). */
    double gap_copy = mean_ms(s, "device:train/h2d_copy"), host_copy = host_ms(s, "h2d_copy");
    printf("copy between steps: host %.3f ms, device %.3f ms\n", host_copy, gap_copy);
    assert_true(gap_copy >= 2.7 && gap_copy <= 3.3 + host_copy);
    sw_snapshot_free(s);

    SW_TEST_PROFILER(q, .device_time = 1, .warmup_steps = 1);
    part parts[] = {
        {"data", 1 * MS, 0, 0}, {"h2d_copy", MS / 2, 2 * MS, 0}, {"forward", 5 * MS, 1 * MS, 0}};
    run_steps(q, 10, parts, 3);
    s = finish(q, &info);
    double in_step = mean_ms(s, "device:train/h2d_copy");
    printf("copy in the step: device %.3f ms, device data %.3f ms\n", in_step,
           mean_ms(s, "device:train/data"));
    assert_true(in_step >= 1.8 && in_step <= 2.3 + host_ms(s, "h2d_copy"));
    /* the step's device data: the fetch's span (the GPU idle: its host time) and the copy */
    double data_ms = mean_ms(s, "device:train/data");
    assert_true(data_ms >= in_step && data_ms <= 1.15 * (host_ms(s, "data") + in_step));
    sw_snapshot_free(s);
}

/* ---- in the reports and the run file ---- */

static void test_reports_and_run_file(void **state) {
    (void)state;
    char dir[] = "/tmp/sw_device_time_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.db", dir);
    SW_TEST_PROFILER(p, .device_time = 1, .run_file = path);
    const part parts[] = {{"forward", 1 * MS, 4 * MS, 0}, {"zero_grad", MS / 2, 0, 0}};
    /* The GPU busy from the start: every forward begins on the GPU when the kernels before it
     * end, so its device time is its kernels' 4 ms exactly, however late the host runs. */
    gpu.launch(100 * MS);
    run_steps(p, 6, parts, 2);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot_free(finish(p, &info)); /* the run file completes */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_true(fabs(mean_ms(s, "device:train/forward") - 4) <= 0.5);

    assert_null(sw_test_counter(s, "device:train/data")); /* no data wait in this loop */
    char *table = sw_test_report(s, SW_FORMAT_TABLE);
    const char *section = strstr(table, "Device time (GPU events, per call):");
    assert_non_null(section);
    assert_non_null(strstr(section, "Host mean  Device mean"));
    const char *step = strstr(section, "train/step"), *fwd = strstr(section, "train/forward");
    assert_true(step != NULL && fwd != NULL && step < fwd); /* the step first */
    assert_non_null(strstr(fwd, "4.00 ms"));                /* 4 ms of kernels launched in 1 ms */
    /* which steps: all 7 (6 and finish()'s), said after the table */
    assert_non_null(strstr(section, "\nSteps timed on the GPU: 7 of 7 (every step).\n"));
    /* the Counters lines leave the phases' nanoseconds to the Device table */
    const char *counters = strstr(table, "\nCounters:\n");
    assert_true(counters == NULL || strstr(counters, "device:train/") == NULL ||
                strstr(counters, "device:train/") > section);
    assert_null(strstr(table, "e+06"));
    free(table);
    char *md = sw_test_report(s, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(md, "#### Device time (GPU events, per call)"));
    assert_non_null(strstr(md, "| train/zero\\_grad |")); /* escaped as the table's cells */
    free(md);
    char *lightning = sw_test_report(s, SW_FORMAT_LIGHTNING);
    assert_non_null(strstr(lightning, "Device time (GPU events, per call):"));
    free(lightning);
    char *csv = sw_test_report(s, SW_FORMAT_CSV);
    /* the device columns, then the memory per step's (the RSS is on by default) */
    assert_non_null(
        strstr(csv, ",device_count,device_mean_s,device_min_s,device_max_s,rss_max_bytes,"));
    assert_non_null(strstr(csv, "\nforward,train,forward,6,"));
    free(csv);
    char *json = sw_test_report(s, SW_FORMAT_JSON);
    assert_non_null(strstr(json, "\"device\": {\"count\":6,\"mean_ns\":4"));
    free(json);
    sw_snapshot_free(s);
    sw_run_close(run);
    unlink(path);
    rmdir(dir);
}

/* diagnose's JSON for a loop of parts run with device time into a run file. */
static char *diagnose_run(const part *parts, size_t nparts, int steps, int wait) {
    char dir[] = "/tmp/sw_device_diag_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.db", dir);
    SW_TEST_PROFILER(p, .device_time = 1, .run_file = path, .warmup_steps = 1);
    run_steps(p, steps, parts, nparts);
    if (wait)
        sleep_until(gpu.idle_at() + 1 * MS);
    sw_profiler_free(p);
    if (!wait)
        sleep_until(gpu.idle_at()); /* the next test's GPU starts idle */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_JSON, out), 0);
    fclose(out);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_TABLE, stdout), 0); /* for the log */
    sw_run_close(run);
    unlink(path);
    rmdir(dir);
    return text;
}

/* The same, for the loop as planned: a host that overran its parts (a loaded machine preempts
 * it for ms at a time) ran another loop (a GPU-bound one turned launch-bound, say), so such a
 * run is made again, 4 runs at most; the findings of the last are checked. Overran: a part's
 * host time (part_truth), the sync's wait aside, 3 ms above plan on average (launch-bound
 * needs 5.5 ms on forward and on backward). */
static char *diagnose_loop(const part *parts, size_t nparts, int steps, int wait) {
    for (int run = 1;; run++) {
        part_truth t = {.warm = 1};
        truth = &t;
        char *json = diagnose_run(parts, nparts, steps, wait);
        truth = NULL;
        double worst = 0;
        for (size_t i = 0; i < nparts && i < MAX_PARTS; i++) {
            double over = t.n[i] ? t.host_sum[i] / t.n[i] - (double)parts[i].host_ns : 0;
            worst = !parts[i].sync && over > worst ? over : worst;
        }
        if (worst <= 3e6 || run == 4)
            return json;
        printf("run %d: the host overran a part by %.1f ms a step: run again\n", run, worst / 1e6);
        free(json);
    }
}

/* The number after "KEY": in json's first object for phase (its "phase" member first). */
static double json_phase_number(const char *json, const char *phase, const char *key) {
    char at[64], name[64];
    snprintf(at, sizeof at, "\"phase\":\"%s\"", phase);
    snprintf(name, sizeof name, "\"%s\":", key);
    const char *p = strstr(json, at);
    assert_non_null(p);
    const char *end = strchr(p, '}'), *v = strstr(p, name);
    assert_true(v != NULL && v < end);
    return strtod(v + strlen(name), NULL);
}

/* Per-phase FLOP/s on device time (src/report/efficiency_phases.c): the FLOPs per step the
 * front end noted over the phase's GPU time per timed step, exactly, beside the host rate;
 * MFU against the noted peak, none for the optimizer. */
static void test_efficiency_on_device_time(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {{"forward", 1 * MS, 4 * MS, 0},
                          {"backward", 1 * MS, 8 * MS, 0},
                          {"optimizer", MS / 2, 1 * MS, 0}};
    /* busy from the start (and ahead of a loaded host): each phase's device time is its
     * kernels' */
    gpu.launch(200 * MS);
    run_steps(p, 6, parts, 3);
    /* what python/stepwatch/flops.py notes: FLOPs per step, host rates, the peak */
    const char *notes[][2] = {
        {"flops_forward", "4e9"}, {"flops_backward", "8e9"}, {"flops_optimizer", "2e6"},
        {"tflops_forward", "4"},  {"tflops_backward", "8"},  {"tflops_optimizer", "0.004"},
        {"mfu_forward", "0.4"},   {"mfu_backward", "0.8"},   {"peak_flops", "10000000000000"}};
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++)
        assert_int_equal(sw_set_note(p, notes[i][0], notes[i][1]), 0);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    const sw_counter_summary *steps = sw_test_counter(s, "device:train/step");
    assert_non_null(steps);
    char *json = sw_test_report(s, SW_FORMAT_JSON);
    double forward_rate = 0;
    static const struct {
        const char *phase;
        double flops, kernels_ns;
    } want[] = {{"forward", 4e9, 4e6}, {"backward", 8e9, 8e6}, {"optimizer", 2e6, 1e6}};
    for (size_t i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "device:train/%s", want[i].phase);
        const sw_counter_summary *d = sw_test_counter(s, name);
        assert_non_null(d);
        double ns = d->mean * (double)d->count / (double)steps->count;
        double rate = json_phase_number(json, want[i].phase, "flops_per_s_device");
        assert_true(rate == want[i].flops / ns * 1e9); /* exactly */
        forward_rate = i == 0 ? rate : forward_rate;
        assert_true(json_phase_number(json, want[i].phase, "device_ns_per_step") == ns);
        /* the kernels' time, within 10 %: the rate is the FLOPs over it */
        assert_true(fabs(ns - want[i].kernels_ns) <= 0.1 * want[i].kernels_ns);
        /* the host rate as noted, beside it */
        assert_true(json_phase_number(json, want[i].phase, "flops_per_s") == (i == 0   ? 4e12
                                                                              : i == 1 ? 8e12
                                                                                       : 4e9));
        if (i < 2)
            assert_true(json_phase_number(json, want[i].phase, "mfu_device") == rate / 1e13);
    }
    assert_non_null(strstr(json, "\"mfu_device\":null")); /* the optimizer's: no model FLOPs */
    free(json);
    char *table = sw_test_report(s, SW_FORMAT_TABLE);
    const char *block = strstr(table, "efficiency per phase (host and device time):\n");
    assert_non_null(block);
    fputs(block, stdout); /* for the log */
    assert_non_null(strstr(block, "FLOP/s dev   MFU dev"));
    /* forward: 4 GFLOP in ~4 ms of kernels = ~1 TFLOP/s, 10 % of the 10 TFLOP/s peak; the
     * host's own (noted) 4 T and 40 % beside it */
    const char *fwd = strstr(block, "\n  forward ");
    assert_non_null(fwd);
    assert_non_null(strstr(fwd, "4 T    40.0 %"));
    char cells[64];
    char mfu[16];
    snprintf(mfu, sizeof mfu, "%.1f %%", 100 * forward_rate / 1e13);
    char three[32]; /* the rate to three digits, in T or G as the report's prefix goes */
    snprintf(three, sizeof three, "%.3g", forward_rate);
    double r = strtod(three, NULL);
    snprintf(cells, sizeof cells, "%.3g %s %9s\n", r >= 1e12 ? r / 1e12 : r / 1e9,
             r >= 1e12 ? "T" : "G", mfu);
    assert_non_null(strstr(fwd, cells));
    const char *opt = strstr(block, "\n  optimizer ");
    assert_non_null(opt);
    assert_true(strstr(opt, "n/a") < strchr(opt + 1, '\n'));
    free(table);
    sw_snapshot_free(s);
}

static void test_diagnose_findings(void **state) {
    (void)state;
    /* The GPU waits for the host: idle, launch-bound, nothing hidden. (Data and the
     * launching phases take half the step each, so host stalls in either, on a loaded
     * machine, leave the GPU idle share above 25 % and the launches above 20 % of a step.) */
    const part host_bound[] = {
        {"data", 6 * MS, 0, 0}, {"forward", 3 * MS, 1 * MS, 0}, {"backward", 3 * MS, 2 * MS, 0}};
    char *json = diagnose_loop(host_bound, 3, 12, 1);
    assert_non_null(strstr(json, "\"id\": \"host-bound\""));
    assert_non_null(strstr(json, "\"id\": \"launch-bound\""));
    assert_null(strstr(json, "\"id\": \"data-hidden\""));
    free(json);
    /* The host waits for the GPU: the data wait runs beside the previous step's kernels. */
    /* (57 ms of kernels left behind a 15 ms data wait: hidden also when the host stalls.) */
    const part gpu_bound[] = {{"data", 15 * MS, 0, 0},
                              {"forward", 1 * MS, 10 * MS, 0},
                              {"loss", 0, 0, 1},
                              {"backward", 2 * MS, 20 * MS, 0},
                              {"optimizer", MS / 2, 40 * MS, 0}};
    json = diagnose_loop(gpu_bound, 5, 12, 1);
    assert_non_null(strstr(json, "\"id\": \"data-hidden\""));
    assert_null(strstr(json, "\"id\": \"host-bound\""));
    assert_null(strstr(json, "\"id\": \"launch-bound\""));
    free(json);
    /* The run ends with the GPU 12 steps behind: the unresolved steps are named. */
    const part behind[] = {{"forward", 1 * MS, 20 * MS, 0}};
    json = diagnose_loop(behind, 1, 12, 0);
    assert_non_null(strstr(json, "\"id\": \"device-dropped\""));
    free(json);
}

/* ---- never waiting ---- */

/* The GPU falls ever further behind (50 ms of kernels per 1 ms step): the host never
 * waits, every step waits for the GPU in the pool; those the GPU has not reached when the
 * run ends are dropped and counted. */
static void test_gpu_far_behind(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_id fwd = sw_action(p, "forward");
    /* The test's clock: time spent inside stepwatch's calls (waiting for the GPU would be
     * there: 1.5 s of kernels), and how many steps the GPU had not reached at the last end
     * (their ends queued behind kernels still to run), whatever the host's own stalls. */
    uint64_t in_calls = 0, queued_end[30];
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 30; i++) {
        uint64_t t0 = mono_ns();
        sw_step_begin(p, 32);
        sw_begin(p, fwd);
        in_calls += mono_ns() - t0;
        gpu.launch(50 * MS);
        sleep_ns(1 * MS);
        t0 = mono_ns();
        sw_end(p, fwd);
        sw_step_end(p);
        in_calls += mono_ns() - t0;
        queued_end[i] = gpu.idle_at();
    }
    uint64_t now = mono_ns();
    sw_phase_end(p, SW_PHASE_TRAIN);
    int unreached = 0;
    for (int i = 0; i < 30; i++)
        unreached += queued_end[i] > now;
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    assert_int_equal(sw_device_time_info_get(p, &info), 0);
    uint64_t t0 = mono_ns();
    sw_profiler_free(p); /* does not wait for the 1.5 s of queued kernels either */
    in_calls += mono_ns() - t0;
    printf("30 steps, 1.5 s of kernels: %.1f ms in stepwatch's calls, waiting %llu of %d the "
           "GPU had not reached, timed %llu\n",
           (double)in_calls / 1e6, (unsigned long long)info.most_behind, unreached,
           (unsigned long long)info.steps_timed);
    assert_true(unreached >= 20);              /* the loop as planned: the GPU far behind */
    assert_true((double)in_calls / 1e6 < 500); /* 1.5 s if it waited */
    assert_int_equal(info.steps_dropped, 0);   /* none lost while the run went on */
    assert_true(info.most_behind >= (uint64_t)unreached - 1); /* all waiting (one may resolve) */
    assert_int_equal(info.sample_every, 1);
    sleep_until(gpu.idle_at());
}

/* While the stream is captured into a CUDA graph nothing is recorded, and nothing is queried
 * in a way that would invalidate the capture; the steps begun then are counted. */
static void test_graph_capture(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {{"forward", 1 * MS, 5 * MS, 0}};
    run_steps(p, 3, parts, 1); /* kernels still queued: steps wait to be resolved */
    uint64_t records = count(RECORDS);
    gpu.set_capturing(1);
    run_steps(p, 3, parts, 1);
    assert_int_equal(count(RECORDS), records);
    gpu.set_capturing(0);
    assert_int_equal(count(INVALIDATED), 0);
    run_steps(p, 3, parts, 1);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    assert_int_equal(sw_test_counter(s, "device:train/forward")->count, 6);
    assert_int_equal(info.steps_captured, 3);
    assert_int_equal(info.failed, 0);
    sw_snapshot_free(s);
}

/* An error the program has not read yet is left for it: nothing is queried meanwhile. */
static void test_program_error_kept(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {{"forward", 1 * MS, 2 * MS, 0}};
    run_steps(p, 3, parts, 1);
    gpu.set_error(719); /* cudaErrorLaunchFailure, say */
    run_steps(p, 3, parts, 1);
    assert_int_equal(gpu.peek_error(), 719);
    gpu.set_error(0);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    assert_int_equal(info.failed, 0);
    sw_snapshot_free(s);
}

static void failing_records(void) {
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {{"forward", 1 * MS, 1 * MS, 0}};
    run_steps(p, 3, parts, 1);
    gpu.set_fail_records(1);
    run_steps(p, 3, parts, 1); /* the training goes on */
    gpu.set_fail_records(0);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_device_time_info_get(p, &info);
    sw_snapshot *s = NULL;
    sw_snapshot_take(p, &s);
    int bad = !info.failed || s->steps != 6;
    sw_snapshot_free(s);
    sw_profiler_free(p);
    if (bad)
        _exit(3);
}

static void test_runtime_failure(void **state) {
    (void)state;
    char err[2048];
    assert_int_equal(sw_test_in_child(failing_records, err, sizeof err), 0);
    assert_non_null(strstr(err, "stepwatch: device time stopped: the GPU runtime failed to "
                                "record an event"));
}

/* ---- a GPU steps behind: a clock whose events complete `lag` steps after their record ---- */

typedef struct lag_event {
    uint64_t step, at; /* recorded during that step, at that fake GPU time */
} lag_event;

static struct {
    uint64_t step, lag, gpu_ns;
    int drained;            /* the program synchronized: everything reached */
    int fail_new_after;     /* event_new fails once this many were made (0: never) */
    int capture_from;       /* records answer "captured" once this many were made (0: never) */
    int made, records, gil; /* events made; records; "GIL" takes (always 0: none exist) */
} lag;

static int lag_new(void *ctx, void **event) {
    (void)ctx;
    if (lag.fail_new_after && lag.made >= lag.fail_new_after)
        return -1;
    lag.made++;
    *event = calloc(1, sizeof(lag_event));
    return *event ? 0 : -1;
}
static int lag_record(void *ctx, void *event) {
    (void)ctx;
    if (lag.capture_from && lag.made >= lag.capture_from)
        return 1;
    lag_event *e = event;
    e->step = lag.step;
    e->at = lag.gpu_ns;
    lag.records++;
    return 0;
}
static int lag_query(void *ctx, void *event) {
    (void)ctx;
    const lag_event *e = event;
    return lag.drained || lag.step >= e->step + lag.lag;
}
static int lag_elapsed(void *ctx, void *start, void *end, uint64_t *ns) {
    if (!lag_query(ctx, start) || !lag_query(ctx, end))
        return 1;
    *ns = ((lag_event *)end)->at - ((lag_event *)start)->at;
    return 0;
}
static void lag_free(void *ctx, void *event) {
    (void)ctx;
    free(event);
}

static int attach_lag_clock(sw_profiler *p) {
    sw_gpu_clock clock = {.size = sizeof(sw_gpu_clock),
                          .event_new = lag_new,
                          .record = lag_record,
                          .query = lag_query,
                          .elapsed_ns = lag_elapsed,
                          .event_free = lag_free};
    return sw_device_time_clock(p, &clock);
}

/* steps steps of data, forward, loss, backward, optimizer on the lagging clock. */
static sw_profiler *lagging_loop(uint64_t behind, int steps, sw_device_time_info *info) {
    memset(&lag, 0, sizeof lag);
    lag.lag = behind;
    SW_TEST_PROFILER(p);
    assert_int_equal(attach_lag_clock(p), 0);
    const char *names[] = {"data", "forward", "loss", "backward", "optimizer"};
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int s = 0; s < steps; s++, lag.step++) {
        sw_step_begin(p, 32);
        for (int i = 0; i < 5; i++) {
            sw_id id = sw_action(p, names[i]);
            sw_begin(p, id);
            lag.gpu_ns += 10000; /* its kernels */
            sw_end(p, id);
        }
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    lag.drained = 1;     /* the program's final synchronize */
    sw_step_begin(p, 0); /* resolves what waits */
    sw_step_end(p);
    assert_int_equal(sw_device_time_info_get(p, info), 0);
    return p;
}

/* 100 steps behind: every step timed, from a pool of events made once. */
static void test_every_step_timed_100_behind(void **state) {
    (void)state;
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_profiler *p = lagging_loop(100, 1500, &info);
    printf("100 behind: timed %llu of 1500, events made %llu, records %d (%.1f per step)\n",
           (unsigned long long)info.steps_timed, (unsigned long long)info.events, lag.records,
           lag.records / 1501.0);
    assert_int_equal(info.steps_timed, 1500); /* the last waits for the next step's begin */
    assert_int_equal(info.steps_sampled_out + info.steps_dropped, 0);
    assert_int_equal(info.sample_every, 1);
    assert_true(info.most_behind >= 100 && info.most_behind <= 102);
    /* pooled: made for the steps in flight only (12 at most per step), not 9000 */
    assert_true(info.events <= 102 * 12);
    /* One event per boundary: the step's 5 spans back to back share their ends and begins
     * (a host stalled between two of them, on a loaded machine, records both: most share) */
    assert_true(lag.records >= 6 * 1500 + 2 && lag.records <= 9 * 1500);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_test_counter(s, "device:train/backward")->count, 1500);
    assert_true(fabs(sw_test_counter(s, "device:train/backward")->mean - 10000) < 1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* 2000 steps behind, more than the pool holds: a regular sample, said. */
static void test_sampled_2000_behind(void **state) {
    (void)state;
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_profiler *p = lagging_loop(2000, 5000, &info);
    printf("2000 behind: timed %llu of 5000, sampled out %llu, every %llu, dropped %llu\n",
           (unsigned long long)info.steps_timed, (unsigned long long)info.steps_sampled_out,
           (unsigned long long)info.sample_every, (unsigned long long)info.steps_dropped);
    assert_true(info.sample_every >= 2 && info.sample_every <= 16);
    /* the last step waits for the next step's begin: in none of the three */
    assert_int_equal(info.steps_timed + info.steps_sampled_out + info.steps_dropped, 5000);
    assert_int_equal(info.steps_dropped, 0);
    assert_true(info.steps_timed >= 5000 / info.sample_every);
    assert_true(info.most_behind < 1024); /* never full: no step lost to a full pool */
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_test_counter(s, "device:train/forward")->count, info.steps_timed);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    assert_true(lag.gil == 0);
}

/* An event factory that fails in the middle of a step (at a span's end, where it once
 * crashed): the timing stops, the loop and its host times go on. */
static void factory_fails(void) {
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    lag.fail_new_after = 0;
    memset(&lag, 0, sizeof lag);
    lag.lag = 1;
    lag.fail_new_after = 3; /* step begin, forward's end, then loss's end fails */
    SW_TEST_PROFILER(p);
    if (attach_lag_clock(p) != 0)
        _exit(2);
    const part parts[] = {{"forward", 0, 0, 0}, {"loss", 100000, 0, 0}, {"backward", 0, 0, 0}};
    run_steps(p, 5, parts, 3);
    sw_device_time_info_get(p, &info);
    sw_snapshot *s = NULL;
    sw_snapshot_take(p, &s);
    int bad = !info.failed || s->steps != 5 || info.steps_timed != 0;
    sw_snapshot_free(s);
    sw_profiler_free(p);
    if (bad)
        _exit(3);
}

static void test_event_factory_fails(void **state) {
    (void)state;
    char err[2048];
    assert_int_equal(sw_test_in_child(factory_fails, err, sizeof err), 0);
    assert_non_null(strstr(err, "device time stopped: the GPU runtime failed to create"));
}

/* A capture begins in the middle of a step: that span is not timed, counted; the others
 * and later steps are. */
static void test_capture_mid_step(void **state) {
    (void)state;
    memset(&lag, 0, sizeof lag);
    lag.lag = 1;
    lag.capture_from = 2; /* once 2 events exist: the step's first two boundaries only */
    SW_TEST_PROFILER(p);
    assert_int_equal(attach_lag_clock(p), 0);
    const part parts[] = {{"forward", 0, 0, 0}, {"loss", 100000, 0, 0}};
    run_steps(p, 3, parts, 2);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    assert_int_equal(sw_device_time_info_get(p, &info), 0);
    assert_int_equal(info.failed, 0);
    assert_true(info.boundaries_captured >= 2);
    sw_profiler_free(p);
}

/* ---- living beside the rest ---- */

static int watched_calls;
static void count_watch(void *ctx, sw_id action, int begins) {
    (void)ctx;
    (void)action;
    (void)begins;
    watched_calls++;
}

/* The function profilers' watcher and device time watch the same action. */
static void test_beside_public_watcher(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_id fwd = sw_action(p, "forward");
    assert_int_equal(sw_watcher_set(p, count_watch, NULL), 0);
    assert_int_equal(sw_watch(p, fwd, 1), 0);
    const part parts[] = {{"forward", 1 * MS, 1 * MS, 0}};
    run_steps(p, 4, parts, 1);
    assert_int_equal(watched_calls, 8);
    assert_int_equal(sw_watched(p, fwd), 1);
    assert_int_equal(sw_watched(p, sw_action(p, "step")), 0); /* watched by device time only */
    assert_int_equal(sw_watch(p, fwd, 0), 0);
    run_steps(p, 2, parts, 1);
    assert_int_equal(watched_calls, 8);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    assert_int_equal(sw_test_counter(s, "device:train/forward")->count, 6); /* still timed */
    sw_snapshot_free(s);
    assert_int_equal(sw_device_time_cuda(NULL, NULL), SW_EINVAL);
}

static void test_once_per_profiler(void **state) {
    (void)state;
    SW_TEST_PROFILER(p);
    assert_int_equal(sw_device_time_cuda(p, NULL), 0);
    assert_int_equal(sw_device_time_cuda(p, NULL), SW_ESTATE);
    sw_profiler_free(p);
}

/* A fork child neither records nor frees the parent's events. */
static void test_fork_child(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const part parts[] = {{"forward", 1 * MS, 1 * MS, 0}};
    run_steps(p, 2, parts, 1);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t records = count(RECORDS), destroyed = count(DESTROYED);
        run_steps(p, 3, parts, 1);
        sw_profiler_free(p);
        _exit(count(RECORDS) != records || count(DESTROYED) != destroyed);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    sw_snapshot *s = finish(p, &info);
    assert_int_equal(sw_test_counter(s, "device:train/forward")->count, 2);
    sw_snapshot_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_runtime),
        cmocka_unit_test(test_gpu_bound_times),
        cmocka_unit_test(test_host_bound_times),
        cmocka_unit_test(test_data_between_steps),
        cmocka_unit_test(test_copy_timed),
        cmocka_unit_test(test_reports_and_run_file),
        cmocka_unit_test(test_efficiency_on_device_time),
        cmocka_unit_test(test_diagnose_findings),
        cmocka_unit_test(test_gpu_far_behind),
        cmocka_unit_test(test_graph_capture),
        cmocka_unit_test(test_every_step_timed_100_behind),
        cmocka_unit_test(test_sampled_2000_behind),
        cmocka_unit_test(test_event_factory_fails),
        cmocka_unit_test(test_capture_mid_step),
        cmocka_unit_test(test_program_error_kept),
        cmocka_unit_test(test_runtime_failure),
        cmocka_unit_test(test_beside_public_watcher),
        cmocka_unit_test(test_once_per_profiler),
        cmocka_unit_test(test_fork_child),
    };
    return cmocka_run_group_tests(tests, fake_gpu_setup, NULL);
}
