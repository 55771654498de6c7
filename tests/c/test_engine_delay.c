/*
 * test_engine_delay.c — the data wait is measured right: the example's loader sleeps a known
 * 20 ms per batch, and the engine (Ignite's dataflow), the profiler's "data" action (mean
 * and median) and thunder's "avg train downtime" must all read 20 ms within ±10 %.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dataset.h"
#include "stepwatch.h"

#include <math.h>

#define DELAY_NS 20000000.0

static int process_noop(sw_engine *e, void *b, uint32_t size, void *user)
{
    return 0;
}

static void assert_near_delay(const char *what, double ns)
{
    double rel = fabs(ns - DELAY_NS) / DELAY_NS;
    print_message("%-28s %.3f ms (%.1f %% off)\n", what, ns / 1e6, 100 * rel);
    assert_true(rel <= 0.10);
}

static void test_known_delay_is_measured(void **state)
{
    dataset ds;
    assert_int_equal(dataset_generate(&ds, 25 * 16, 10, 1, 2), 0);
    loader l;
    assert_int_equal(loader_init(&l, &ds, 16, 1, (uint64_t)DELAY_NS, 3), 0);

    sw_options po = {0}; /* no warm-up: every batch counts */
    sw_engine_options eo = {0};
    eo.profiler_options = &po;
    eo.max_epochs = 1;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&eo, &e), 0);
    sw_data_source src = {loader_next, loader_reset, &l, loader_length(&l)};
    assert_int_equal(sw_engine_set_train(e, &src, process_noop, NULL), 0);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(l.batches, 25);

    const sw_stats *df = sw_engine_measure_stats(e, SW_MEASURE_DATAFLOW);
    assert_int_equal(df->count, 25);
    assert_near_delay("engine dataflow mean", df->mean_ns);
    assert_true(df->min_ns >= DELAY_NS); /* a sleep never ends early */

    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(sw_engine_profiler(e), &s), 0);
    const sw_row *data = sw_snapshot_find(s, "data", "train");
    assert_non_null(data);
    assert_int_equal(data->stats.count, 25);
    assert_near_delay("profiler data mean", data->stats.mean_ns);
    assert_near_delay("profiler data p50", (double)sw_hist_quantile(&data->hist, 0.5));
    /* The measured wait and the loader's own truth (time really slept) agree closely. */
    double truth = (double)l.slept_ns / (double)l.batches;
    print_message("loader truth (slept)         %.3f ms\n", truth / 1e6);
    assert_true(fabs(data->stats.mean_ns - truth) / truth <= 0.05);
    sw_snapshot_free(s);

    sw_time_profiler tp;
    sw_time_profiler_init(&tp);
    double v = 0;
    assert_int_equal(sw_time_profiler_value(&tp, e, "avg train downtime", &v), 0);
    assert_near_delay("thunder avg train downtime", v * 1e9);

    sw_engine_free(e);
    loader_free(&l);
    dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_delay_is_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
