/* test_stats.c — Welford/Chan statistics, the histogram and its error bound, the Timer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "test_helpers.h"

static void test_stats_known_values(void **state) {
    (void)state;
    sw_stats s;
    sw_stats_init(&s);
    const uint64_t v[] = {2, 4, 4, 4, 5, 5, 7, 9};
    for (int i = 0; i < 8; i++)
        sw_stats_add(&s, v[i], v[i], i, 10);
    assert_int_equal(s.count, 8);
    assert_int_equal(s.total_ns, 40);
    assert_true(fabs(s.mean_ns - 5.0) < 1e-12);
    assert_true(fabs(sw_stats_pstddev(&s) - 2.0) < 1e-12);
    assert_true(fabs(sw_stats_stddev(&s) - sqrt(32.0 / 7.0)) < 1e-12);
    assert_int_equal(s.min_ns, 2);
    assert_int_equal(s.min_step, 0);
    assert_int_equal(s.max_ns, 9);
    assert_int_equal(s.max_step, 7);
    assert_true(fabs(sw_stats_samples_per_s(&s) - 80.0 * 1e9 / 40.0) < 1e-3);
    sw_stats empty;
    sw_stats_init(&empty);
    assert_true(sw_stats_stddev(&empty) == 0.0 && sw_stats_samples_per_s(&empty) == 0.0);
}

static void test_chan_merge_equals_sequential(void **state) {
    (void)state;
    sw_stats all, a, b;
    sw_stats_init(&all);
    sw_stats_init(&a);
    sw_stats_init(&b);
    srand(7);
    for (int i = 0; i < 10000; i++) {
        uint64_t x = 1000000000ull + (uint64_t)(rand() % 100000);
        sw_stats_add(&all, x, x, i, 0);
        sw_stats_add(i % 3 ? &a : &b, x, x, i, 0);
    }
    sw_stats_merge(&a, &b);
    assert_int_equal(a.count, all.count);
    assert_int_equal(a.total_ns, all.total_ns);
    assert_true(fabs(a.mean_ns - all.mean_ns) / all.mean_ns < 1e-12);
    /* Large offset, small spread: the naive sum-of-squares formula would lose this. */
    assert_true(fabs(sw_stats_stddev(&a) - sw_stats_stddev(&all)) / sw_stats_stddev(&all) < 1e-9);
    assert_int_equal(a.min_ns, all.min_ns);
    assert_int_equal(a.max_ns, all.max_ns);
    sw_stats empty;
    sw_stats_init(&empty);
    sw_stats_merge(&empty, &all);
    assert_int_equal(empty.count, all.count);
}

static void test_hist_buckets(void **state) {
    (void)state;
    for (uint64_t v = 0; v < 16; v++)
        assert_int_equal(sw_hist_bucket_of(v), v);
    /* Every bucket's bounds contain the values that map to it, and buckets tile the line. */
    for (uint32_t i = 0; i + 1 < SW_HIST_BUCKETS; i++) {
        uint64_t low = sw_hist_bucket_low(i), high = sw_hist_bucket_high(i);
        assert_int_equal(sw_hist_bucket_of(low), i);
        assert_int_equal(sw_hist_bucket_of(high), i);
        assert_int_equal(sw_hist_bucket_low(i + 1), high + 1);
        /* Width at most 1/16 of the lower bound: the midpoint is within 3.2 %. */
        if (low >= 16)
            assert_true((double)(high - low + 1) <= (double)low / 16.0 + 1e-9);
    }
    assert_int_equal(sw_hist_bucket_of(UINT64_MAX), SW_HIST_BUCKETS - 1);
}

static void test_hist_quantiles_within_bound(void **state) {
    (void)state;
    sw_hist *h = calloc(1, sizeof *h), *h2 = calloc(1, sizeof *h2);
    assert_non_null(h);
    for (uint64_t i = 1; i <= 1000; i++)
        sw_hist_add(i <= 500 ? h : h2, i * 1000); /* 1 µs .. 1 ms */
    sw_hist_merge(h, h2);
    assert_int_equal(h->count, 1000);
    const double qs[] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        double truth = qs[k] * 1000.0 * 1000.0;
        double got = (double)sw_hist_quantile(h, qs[k]);
        assert_true(fabs(got - truth) / truth <= 1.0 / 32.0 + 0.002);
    }
    assert_int_equal(sw_hist_quantile(h2, 0.0) > 0, 1);
    sw_hist empty = {0};
    assert_int_equal(sw_hist_quantile(&empty, 0.5), 0);
    free(h);
    free(h2);
}

static void test_timer_like_ignite(void **state) {
    (void)state;
    sw_timer t;
    sw_timer_init(&t, 0);
    sw_test_spin(2000000);
    sw_timer_pause(&t);
    double paused = sw_timer_value(&t);
    assert_true(paused >= 0.002);
    sw_test_spin(2000000);
    assert_true(sw_timer_value(&t) == paused); /* paused: no time passes */
    sw_timer_resume(&t);
    sw_test_spin(2000000);
    assert_true(sw_timer_value(&t) >= paused + 0.002);
    sw_timer avg;
    sw_timer_init(&avg, 1);
    sw_test_spin(1000000);
    sw_timer_pause(&avg);
    double total = sw_timer_value(&avg);
    sw_timer_step(&avg);
    sw_timer_step(&avg);
    assert_true(fabs(sw_timer_value(&avg) - total / 2) < 1e-12);
    sw_timer_reset(&avg);
    assert_int_equal(avg.steps, 0);
    assert_true(sw_timer_value(&avg) < total);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_known_values),
        cmocka_unit_test(test_chan_merge_equals_sequential),
        cmocka_unit_test(test_hist_buckets),
        cmocka_unit_test(test_hist_quantiles_within_bound),
        cmocka_unit_test(test_timer_like_ignite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
