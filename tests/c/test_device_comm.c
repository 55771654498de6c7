/*
 * test_device_comm.c — communication on the device and its exposed part
 * (sw_device_interval_on, include/stepwatch/device.h) on a machine without a GPU: the fake
 * CUDA runtime (tests/device/fake_cudart.c) with several streams on a simulated clock, so
 * kernels of known durations overlap across streams at known times and every figure is
 * exact whatever the machine's load. Partly exposed, fully hidden, fully exposed (the
 * step's stream waiting for a collective), hidden by compute on another stream, unions of
 * overlapping collectives; resolved steps later without a synchronizing call; the figures
 * in the run file, the text report's line and the JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_helpers.h"
#include "fake_gpu.h"

#define US 1000ull
#define MS 1000000ull
#define STEP_ROOM (100 * MS) /* the clock moves this far after each step: every stream idle */

/* Host time passes, so the step stream's next boundary never shares the event before it
 * (the GPU's simulated clock does not move). */
static void host_gap(void) {
    sleep_until(sw_now_ns() + 30 * US);
}

/* An interval of kind on a stream of its own (a collective's NCCL stream), running from
 * at to at + ns after the step's begin on the device. Each on its own stream. */
typedef struct ival {
    unsigned kind;
    uint64_t at, ns;
} ival;

static void *stream_of(int i) {
    return (void *)(uintptr_t)(0x1000 + 0x100 * i);
}

/* One step: forward then backward on the step's stream (fwd + bwd ns of kernels from the
 * step's begin), and the intervals v on their streams; then the clock moves STEP_ROOM on. */
static void step_with(sw_profiler *p, sw_device_timing *t, uint64_t fwd, uint64_t bwd,
                      const ival *v, int n) {
    sw_id forward = sw_action(p, "forward"), backward = sw_action(p, "backward");
    sw_step_begin(p, 1);
    sw_begin(p, forward);
    gpu.launch(fwd);
    host_gap();
    sw_end(p, forward);
    sw_begin(p, backward);
    gpu.launch(bwd);
    host_gap();
    for (int i = 0; i < n; i++) {
        gpu.launch_on(stream_of(i), v[i].at); /* what the stream runs first */
        uint64_t token = sw_device_interval_on(t, 0, 0, stream_of(i), v[i].kind);
        assert_true(token != 0);
        gpu.launch_on(stream_of(i), v[i].ns);
        sw_device_interval_end(t, token);
    }
    sw_end(p, backward);
    sw_step_end(p);
    gpu.advance(STEP_ROOM);
}

/* The train phase's end and the figures: the snapshot after one more step (the last one
 * timed resolves at the next's begin). */
static sw_snapshot *finish(sw_profiler *p) {
    sw_step_begin(p, 1);
    sw_step_end(p);
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    return s;
}

/* Steps of one kind, then the figures: the snapshot after one more step (the last one
 * resolves at the next's begin). */
static sw_snapshot *run(sw_profiler *p, int steps, uint64_t fwd, uint64_t bwd, const ival *v,
                        int n) {
    sw_device_timing *t = sw_device_timing_of(p);
    assert_non_null(t);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < steps; i++)
        step_with(p, t, fwd, bwd, v, n);
    return finish(p);
}

static void expect(const sw_snapshot *s, uint64_t count, double comm_ns, double exposed_ns) {
    const sw_counter_summary *comm = sw_test_counter(s, "device:train/comm");
    const sw_counter_summary *exposed = sw_test_counter(s, "device:train/comm_exposed");
    assert_non_null(comm);
    assert_non_null(exposed);
    assert_int_equal(comm->count, count);
    assert_int_equal(exposed->count, count);
    assert_true(comm->min == comm_ns && comm->max == comm_ns);
    assert_true(exposed->min == exposed_ns && exposed->max == exposed_ns);
}

static int setup(void **state) {
    fake_gpu_setup(state);
    return 0;
}

static int each(void **state) {
    (void)state;
    gpu.simulate(1);
    return 0;
}

static int after_each(void **state) {
    (void)state;
    gpu.simulate(0);
    return 0;
}

/* Compute 0..10 ms; the collective 4..12 ms: 8 ms, 2 ms of it after the compute. */
static void test_partly_exposed(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    uint64_t syncs = count(SYNCS);
    const ival v[] = {{SW_DEVICE_COMM, 4 * MS, 8 * MS}};
    sw_snapshot *s = run(p, 4, 6 * MS, 4 * MS, v, 1);
    expect(s, 4, 8 * MS, 2 * MS);
    assert_int_equal(count(SYNCS), syncs); /* never a synchronizing call */
    /* communication is the steps', never a tag's sum (the modules' tag 0 stays empty) */
    sw_device_interval_sum sums[1] = {{0}};
    assert_int_equal(sw_device_intervals_take(sw_device_timing_of(p), sums, 1), 0);
    assert_int_equal(sums[0].count, 0);
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    assert_int_equal(sw_device_time_info_get(p, &info), 0);
    assert_int_equal(info.comm_intervals, 4);
    assert_int_equal(info.intervals, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* The collective 2..6 ms inside the compute 0..10 ms: all of it hidden. */
static void test_fully_hidden(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const ival v[] = {{SW_DEVICE_COMM, 2 * MS, 4 * MS}};
    sw_snapshot *s = run(p, 3, 5 * MS, 5 * MS, v, 1);
    expect(s, 3, 4 * MS, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* After the compute (0..3 ms), on its own stream: all of it exposed. */
static void test_fully_exposed_after_compute(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const ival v[] = {{SW_DEVICE_COMM, 5 * MS, 7 * MS}};
    sw_snapshot *s = run(p, 2, 1 * MS, 2 * MS, v, 1);
    expect(s, 2, 7 * MS, 7 * MS);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* Two collectives overlapping each other (8..12, 11..14 ms) count once where they overlap:
 * 6 ms, 4 of them after the compute (0..10 ms); compute on a third stream (12..13 ms)
 * hides one more. */
static void test_union_and_compute_elsewhere(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    const ival v[] = {{SW_DEVICE_COMM, 8 * MS, 4 * MS},
                      {SW_DEVICE_COMM, 11 * MS, 3 * MS},
                      {SW_DEVICE_COMPUTE, 12 * MS, 1 * MS}};
    sw_snapshot *s = run(p, 3, 4 * MS, 6 * MS, v, 3);
    expect(s, 3, 6 * MS, 3 * MS);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* One step whose stream waits for a collective: before ns of compute in action, then the
 * step's stream waits (a communication interval on it) for the collective's stream, which
 * runs comm ns from the step's begin (overlapped) or after waiting for the compute
 * (synchronous); then after ns of compute; extra: NCCL's own time of it, given. */
static void waiting_step(sw_profiler *p, sw_device_timing *t, const char *action, uint64_t before,
                         uint64_t comm, int overlapped, uint64_t after, uint64_t extra) {
    sw_id id = sw_action(p, action);
    sw_step_begin(p, 1);
    sw_begin(p, id);
    gpu.launch(before);
    host_gap();
    uint64_t token = sw_device_interval_on(t, 0, 0, NULL, SW_DEVICE_COMM);
    assert_true(token != 0);
    if (!overlapped)
        gpu.wait_for(stream_of(0), NULL); /* NCCL's stream waits for the compute ... */
    gpu.launch_on(stream_of(0), comm);
    gpu.wait_for(NULL, stream_of(0)); /* ... and the compute for NCCL's */
    host_gap();
    sw_device_interval_end(t, token);
    if (extra)
        sw_device_comm_ns(t, extra);
    if (after) {
        gpu.launch(after);
        host_gap();
    }
    sw_end(p, id);
    sw_step_end(p);
    gpu.advance(STEP_ROOM);
}

/* A synchronous collective: the step's stream waits for it (bracketed on the step's
 * stream): the 3 ms the collective's stream runs is all exposed though it lies inside the
 * forward span. */
static void test_step_stream_waiting_is_exposed(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_device_timing *t = sw_device_timing_of(p);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 3; i++)
        waiting_step(p, t, "forward", 5 * MS, 3 * MS, 0, 2 * MS, 0);
    sw_snapshot *s = finish(p);
    expect(s, 3, 3 * MS, 3 * MS);
    /* the forward's device time holds the wait: 5 + 3 + 2 ms */
    const sw_counter_summary *fwd = sw_test_counter(s, "device:train/forward");
    assert_non_null(fwd);
    assert_true(fwd->min == 10.0 * MS && fwd->max == 10.0 * MS);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* DDP's way: the step's stream waits for the last buckets' all-reduce from the last bucket's
 * hook to the backward's end (10..12 ms bracketed), and NCCL's own time of the all-reduces
 * (8 ms) comes from elsewhere: 8 ms, 2 exposed. */
static void test_comm_timed_elsewhere(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_device_timing *t = sw_device_timing_of(p);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 3; i++)
        waiting_step(p, t, "backward", 10 * MS, 12 * MS, 1, 0, 8 * MS);
    sw_device_comm_ns(t, 5 * MS); /* no step open: nowhere */
    sw_snapshot *s = finish(p);
    expect(s, 3, 8 * MS, 2 * MS);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* The GPU behind: nothing is waited for; the figures come once the clock reached them, a
 * collective's end and another stream's compute after the step's end included. */
static void test_resolved_later_without_waiting(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_device_timing *t = sw_device_timing_of(p);
    uint64_t syncs = count(SYNCS);
    sw_id forward = sw_action(p, "forward");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_step_begin(p, 1);
    sw_begin(p, forward);
    gpu.launch(4 * MS);
    host_gap();
    sw_end(p, forward);
    gpu.launch_on(stream_of(0), 3 * MS);
    uint64_t token = sw_device_interval_on(t, 0, 0, stream_of(0), SW_DEVICE_COMM);
    gpu.launch_on(stream_of(0), 5 * MS); /* 3..8 ms: 4 ms past the compute */
    sw_device_interval_end(t, token);
    uint64_t side = sw_device_interval_on(t, 0, 3, stream_of(1), SW_DEVICE_COMPUTE);
    gpu.launch_on(stream_of(1), 7 * MS); /* compute elsewhere, 0..7 ms: hides 3 of them */
    sw_device_interval_end(t, side);
    sw_step_end(p);
    gpu.advance(6 * MS); /* the step's end reached, the other streams' not */
    sw_device_interval_sum sums[4] = {{0}};
    assert_int_equal(sw_device_intervals_take(t, sums, 4), 0); /* not yet, not waited for */
    sw_step_begin(p, 1);
    sw_step_end(p);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_null(sw_test_counter(s, "device:train/comm"));
    sw_snapshot_free(s);
    gpu.advance(STEP_ROOM);
    assert_int_equal(sw_device_intervals_take(t, sums, 4), 1); /* the compute interval */
    assert_true(sums[3].count == 1 && sums[3].ns == 7 * MS);
    s = finish(p);
    expect(s, 1, 5 * MS, 1 * MS);
    assert_int_equal(count(SYNCS), syncs);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* No communication interval: no figure, and a compute interval on the step's stream (a
 * module's) changes nothing. */
static void test_no_comm_no_figure(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .device_time = 1);
    sw_device_timing *t = sw_device_timing_of(p);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_step_begin(p, 1);
    uint64_t token = sw_device_interval_on(t, 0, 0, NULL, SW_DEVICE_COMPUTE);
    gpu.launch(2 * MS);
    host_gap();
    sw_device_interval_end(t, token);
    assert_int_equal(sw_device_interval_on(t, 0, 0, NULL, 7), 0); /* a kind unknown */
    sw_step_end(p);
    gpu.advance(STEP_ROOM);
    sw_snapshot *s = finish(p);
    assert_null(sw_test_counter(s, "device:train/comm"));
    char *table = sw_test_report(s, SW_FORMAT_TABLE);
    assert_null(strstr(table, "Communication"));
    free(table);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* The figures in the run file, the text report's line, the markdown and the JSON. */
static void test_run_file_and_reports(void **state) {
    (void)state;
    char path[300];
    assert_int_equal(sw_test_make_dir(NULL), 0);
    snprintf(path, sizeof path, "%s/run.db", sw_test_dir);
    SW_TEST_PROFILER(p, .device_time = 1, .run_file = path);
    const ival v[] = {{SW_DEVICE_COMM, 4 * MS, 8 * MS}};
    sw_snapshot_free(run(p, 5, 6 * MS, 4 * MS, v, 1));
    sw_profiler_free(p);
    sw_run *rf = NULL;
    assert_int_equal(sw_run_open(path, &rf), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(rf, &s), 0);
    expect(s, 5, 8 * MS, 2 * MS);
    char *table = sw_test_report(s, SW_FORMAT_TABLE);
    assert_non_null(
        strstr(table, "\nCommunication: 8.00 ms per step on the device, 2.00 ms exposed (25 %)"));
    /* the Counters lines leave the ns to that line */
    const char *counters = strstr(table, "\nCounters:\n");
    assert_true(counters == NULL || strstr(counters, "device:train/comm") == NULL);
    free(table);
    char *md = sw_test_report(s, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(md, "Communication: 8.00 ms per step on the device, 2.00 ms exposed"));
    free(md);
    char *json = sw_test_report(s, SW_FORMAT_JSON);
    const char *at = strstr(json, "\"device_comm\": [");
    assert_non_null(at);
    assert_non_null(strstr(at, "\"phase\": \"train\",\n      \"steps\": 5,\n      "
                               "\"comm_ns\": 8000000,\n      \"exposed_ns\": 2000000,\n      "
                               "\"exposed_percent\": 25\n"));
    free(json);
    sw_snapshot_free(s);
    sw_run_close(rf);
    sw_test_remove_dir(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_partly_exposed, each, after_each),
        cmocka_unit_test_setup_teardown(test_fully_hidden, each, after_each),
        cmocka_unit_test_setup_teardown(test_fully_exposed_after_compute, each, after_each),
        cmocka_unit_test_setup_teardown(test_union_and_compute_elsewhere, each, after_each),
        cmocka_unit_test_setup_teardown(test_step_stream_waiting_is_exposed, each, after_each),
        cmocka_unit_test_setup_teardown(test_comm_timed_elsewhere, each, after_each),
        cmocka_unit_test_setup_teardown(test_resolved_later_without_waiting, each, after_each),
        cmocka_unit_test_setup_teardown(test_no_comm_no_figure, each, after_each),
        cmocka_unit_test_setup_teardown(test_run_file_and_reports, each, after_each),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
