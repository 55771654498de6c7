/* test_clock.c — the profiler clock: CLOCK_MONOTONIC by default, the TSC clock on request
 * (SW_CLOCK=tsc, sw_options.clock) calibrated against CLOCK_MONOTONIC, the fallbacks; the tick
 * counter the function profiler reads (sw__ticks), calibrated the same way.
 * The tests run in order: the switch to the TSC is for the rest of the process, so the
 * fallbacks come first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "stepwatch.h"

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void test_monotonic_by_default_and_bad_kinds_refused(void **state) {
    (void)state;
    unsetenv("SW_CLOCK");
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0);
    assert_int_equal(sw_clock_in_use(), SW_CLOCK_MONOTONIC);
    uint64_t before = mono_ns(), t = sw_now_ns(), after = mono_ns();
    assert_true(before <= t && t <= after);
    sw_profiler_free(p);
    sw_options bad = {.size = sizeof(sw_options), .clock = (sw_clock_kind)7};
    assert_int_equal(sw_profiler_new(&bad, &p), SW_EINVAL);
    assert_null(p);
}

static void test_a_bad_environment_value_keeps_monotonic(void **state) {
    (void)state;
    setenv("SW_CLOCK", "sundial", 1);
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0); /* said on stderr, never fatal */
    assert_int_equal(sw_clock_in_use(), SW_CLOCK_MONOTONIC);
    sw_profiler_free(p);
    unsetenv("SW_CLOCK");
}

static void test_a_counter_not_invariant_is_not_used(void **state) {
    (void)state;
    assert_int_equal(sw__clock_use_tsc(0), 0);
    assert_int_equal(sw_clock_in_use(), SW_CLOCK_MONOTONIC);
    uint64_t before = mono_ns(), t = sw_now_ns(), after = mono_ns();
    assert_true(before <= t && t <= after);
}

static void test_tsc_clock_is_calibrated_against_monotonic(void **state) {
    (void)state;
    if (!sw__tsc_invariant())
        skip(); /* not x86-64, or a CPU (or hypervisor) without an invariant TSC */
    setenv("SW_CLOCK", "tsc", 1);
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0);
    unsetenv("SW_CLOCK");
    assert_int_equal(sw_clock_in_use(), SW_CLOCK_TSC);

    /* It continues CLOCK_MONOTONIC: a TSC read between two monotonic reads lies between them
     * (give or take the half bracket it starts ahead, and a little drift). */
    uint64_t m0 = mono_ns(), t0 = sw_now_ns(), m1 = mono_ns();
    assert_true(t0 + 20000 >= m0 && t0 <= m1 + 20000);
    /* The rate: over 200 ms both clocks agree to 0.5 % (calibration is good to ppm; the
     * margin is for a preemption between the reads on a loaded machine). */
    sleep_ms(200);
    uint64_t m2 = mono_ns(), t1 = sw_now_ns(), m3 = mono_ns();
    double mono_span = (double)(m2 - m1), tsc_span = (double)(t1 - t0);
    assert_true(tsc_span >= mono_span * 0.995 && tsc_span <= (double)(m3 - m0) * 1.005);
    /* Never backwards. */
    uint64_t last = sw_now_ns();
    for (int i = 0; i < 100000; i++) {
        uint64_t now = sw_now_ns();
        assert_true(now >= last);
        last = now;
    }
    /* Spans are timed on it: a 20 ms sleep inside one takes at least 20 ms. */
    sw_id id = sw_action(p, "sleep");
    sw_begin(p, id);
    sleep_ms(20);
    sw_end(p, id);
    sw_snapshot *snap = NULL;
    assert_int_equal(sw_snapshot_take(p, &snap), 0);
    const sw_row *row = sw_snapshot_find(snap, "sleep", "all");
    assert_non_null(row);
    assert_int_equal(row->stats.count, 1);
    assert_true(row->stats.total_ns >= 20000000u && row->stats.total_ns < 5000000000u);
    sw_snapshot_free(snap);
    /* Asking for CLOCK_MONOTONIC now changes nothing: the clock is the process's. */
    sw_options mono = {.size = sizeof(sw_options), .clock = SW_CLOCK_MONOTONIC};
    sw_profiler *q = NULL;
    assert_int_equal(sw_profiler_new(&mono, &q), 0);
    assert_int_equal(sw_clock_in_use(), SW_CLOCK_TSC);
    sw_profiler_free(q);
    sw_profiler_free(p);
}

/* The tick counter: the TSC exactly where the TSC clock may be used, and its unit, asked for
 * at once, still spans 20 ms and turns ticks into ns as CLOCK_MONOTONIC counts them. */
static void test_tick_counter_is_calibrated_as_the_tsc_clock(void **state) {
    (void)state;
    uint64_t m0 = mono_ns(); /* before the start: the 20 ms count from after it */
    sw__ticks_start();
    assert_int_equal(sw__ticks_state.tsc, sw__tsc_invariant());
    double unit = sw__ticks_unit();
    if (!sw__ticks_state.tsc) {
        assert_true(unit == 1.0); /* ticks are ns */
        return;
    }
    assert_true(mono_ns() - m0 >= 20000000u && unit > 0); /* slept to 20 ms */
    uint64_t k0 = sw__ticks();
    m0 = mono_ns();
    sleep_ms(100);
    uint64_t k1 = sw__ticks(), m1 = mono_ns();
    unit = sw__ticks_unit(); /* now over 100 ms and more */
    double ticks_ns = (double)(k1 - k0) * unit, mono = (double)(m1 - m0);
    assert_true(ticks_ns >= mono * 0.99 && ticks_ns <= mono * 1.01);
    /* The same rate as the TSC clock's calibration (on by now: the test above). */
    if (sw_clock_in_use() == SW_CLOCK_TSC) {
        double clock_unit = (double)sw__tsc.mult / 4294967296.0;
        assert_true(unit >= clock_unit * 0.995 && unit <= clock_unit * 1.005);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monotonic_by_default_and_bad_kinds_refused),
        cmocka_unit_test(test_a_bad_environment_value_keeps_monotonic),
        cmocka_unit_test(test_a_counter_not_invariant_is_not_used),
        cmocka_unit_test(test_tsc_clock_is_calibrated_against_monotonic),
        cmocka_unit_test(test_tick_counter_is_calibrated_as_the_tsc_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
