/*
 * test_engine_delay.c — the data wait is measured right: the example's loader sleeps a known
 * 20 ms per batch and times its own sleeps (the truth: a loaded machine oversleeps), and the
 * engine (Ignite's dataflow), the profiler's "data" action (mean and median) and thunder's
 * "avg train downtime" must all read that truth within ±10 %.
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

static int process_noop(sw_engine *e, void *b, uint32_t size, void *user) {
    return 0;
}

static void assert_near(const char *what, double ns, double truth_ns) {
    double rel = fabs(ns - truth_ns) / truth_ns;
    print_message("%-28s %.3f ms (%.1f %% off the loader's %.3f ms)\n", what, ns / 1e6, 100 * rel,
                  truth_ns / 1e6);
    assert_true(rel <= 0.10);
}

static void test_known_delay_is_measured(void **state) {
    dataset ds;
    assert_int_equal(dataset_generate(&ds, 25 * 16, 10, 1, 2), 0);
    loader l;
    assert_int_equal(loader_init(&l, &ds, 16, 1, (uint64_t)DELAY_NS, 3), 0);

    sw_options po = SW_OPTIONS_INIT; /* no warm-up: every batch counts */
    sw_engine_options eo = SW_ENGINE_OPTIONS_INIT;
    eo.profiler_options = &po;
    eo.max_epochs = 1;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&eo, &e), 0);
    sw_data_source src = {sizeof(sw_data_source), loader_next, loader_reset, &l, loader_length(&l)};
    assert_int_equal(sw_engine_set_train(e, &src, process_noop, NULL), 0);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(l.batches, 25);

    /* The loader's own timer: the mean time it really slept per batch. */
    double truth = (double)l.slept_ns / (double)l.batches;
    assert_true(truth >= DELAY_NS);

    const sw_stats *df = sw_engine_measure_stats(e, SW_MEASURE_DATAFLOW);
    assert_int_equal(df->count, 25);
    assert_near("engine dataflow mean", df->mean_ns, truth);
    assert_true(df->min_ns >= DELAY_NS); /* a sleep never ends early */

    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(sw_engine_profiler(e), &s), 0);
    const sw_row *data = sw_snapshot_find(s, "data", "train");
    assert_non_null(data);
    assert_int_equal(data->stats.count, 25);
    assert_near("profiler data mean", data->stats.mean_ns, truth);
    assert_true(fabs(data->stats.mean_ns - truth) / truth <= 0.05);
    /* The median lies between the asked sleep and the mean (oversleeping skews right). */
    double p50 = (double)sw_hist_quantile(&data->hist, 0.5);
    print_message("profiler data p50            %.3f ms\n", p50 / 1e6);
    assert_true(p50 >= 0.97 * DELAY_NS && p50 <= 1.10 * truth);
    sw_snapshot_free(s);

    sw_time_profiler tp;
    sw_time_profiler_init(&tp);
    double v = 0;
    assert_int_equal(sw_time_profiler_value(&tp, e, "avg train downtime", &v), 0);
    assert_near("thunder avg train downtime", v * 1e9, truth);

    sw_engine_free(e);
    loader_free(&l);
    dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_delay_is_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
