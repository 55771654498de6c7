/*
 * test_diagnose_run.c — diagnose, compare and the HTML report on run files written by real
 * profilers (recorder + journal), read back through sw_run_*.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "analysis_test_util.h"
#include "test_helpers.h"

#include <unistd.h>

#define US 1000ull

/* A training loop of nsteps steps: data, forward, backward, optimizer, each busy for the
 * given microseconds. Written to <sw_test_dir>/<name>; the path is returned in path. The
 * loop's own clock gives the share of the steps' time in data, in percent (a loaded machine
 * that preempts a spin stretches it): the truth the tests hold diagnose to. */
static double train(const char *name, int nsteps, uint64_t data_us, uint64_t fwd_us, char *path,
                    size_t size) {
    snprintf(path, size, "%s/%s", sw_test_dir, name);
    SW_TEST_PROFILER(p, .name = name, .run_file = path, .no_signal_handlers = 1);
    sw_id data = sw_action(p, "data"), fwd = sw_action(p, "forward");
    sw_id bwd = sw_action(p, "backward"), opt = sw_action(p, "optimizer");
    sw_phase_begin(p, SW_PHASE_FIT);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    uint64_t in_data = 0, in_steps = 0;
    for (int i = 0; i < nsteps; i++) {
        uint64_t t0 = sw_now_ns();
        sw_step_begin(p, 32);
        sw_begin(p, data);
        sw_test_spin(data_us * US);
        sw_end(p, data);
        in_data += sw_now_ns() - t0;
        sw_begin(p, fwd);
        sw_test_spin(fwd_us * US);
        sw_end(p, fwd);
        sw_begin(p, bwd);
        sw_test_spin(300 * US);
        sw_end(p, bwd);
        sw_begin(p, opt);
        sw_test_spin(100 * US);
        sw_end(p, opt);
        sw_step_end(p);
        in_steps += sw_now_ns() - t0;
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_phase_end(p, SW_PHASE_FIT);
    sw_profiler_free(p);
    return in_steps ? 100.0 * (double)in_data / (double)in_steps : 0;
}

static char *diagnose_json(const char *path) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_JSON, c.f), 0);
    sw_run_close(run);
    return at_capture_end(&c);
}

static void test_input_bound_run(void **state) {
    (void)state;
    char slow[512], fast[512];
    train("slow_loader.db", 40, 2000, 300, slow, sizeof slow); /* data ~ 74 % of a step */
    double fast_share = train("fast_loader.db", 40, 20, 1500, fast, sizeof fast); /* ~ 1 % */
    char *json = diagnose_json(slow);
    assert_non_null(strstr(json, "\"id\": \"input-bound\""));
    assert_non_null(strstr(json, "\"severity\": \"critical\""));
    free(json);
    json = diagnose_json(fast);
    /* Not input-bound, unless the machine's preemptions inside the 20 us data spins made it
     * so by the loop's own clock (diagnose flags 15 %; 5 points of slack for the few ns
     * between the loop's clock and stepwatch's) */
    if (fast_share < 10.0)
        assert_null(strstr(json, "input-bound"));
    else if (fast_share >= 20.0)
        assert_non_null(strstr(json, "input-bound"));
    assert_non_null(strstr(json, "\"steps\": 40"));
    free(json);

    sw_run *run = NULL;
    size_t n = 99;
    assert_int_equal(sw_run_open(slow, &run), 0);
    assert_int_equal(sw_diagnose_count(run, &n), 0);
    assert_true(n >= 1);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_CSV, stdout), SW_EFORMAT);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_TABLE, NULL), SW_EINVAL);
    assert_int_equal(sw_diagnose_count(run, NULL), SW_EINVAL);
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_TABLE, c.f), 0);
    char *text = at_capture_end(&c);
    assert_non_null(strstr(text, "[critical] Input-bound:"));
    free(text);
    /* The HTML report of a real run carries the finding and the steps. */
    at_capture_begin(&c);
    assert_int_equal(sw_html_write(run, c.f), 0);
    char *html = at_capture_end(&c);
    assert_non_null(strstr(html, "\"id\": \"input-bound\""));
    assert_non_null(strstr(html, "\"step_records\": 40"));
    free(html);
    sw_run_close(run);
    assert_int_equal(sw_diagnose_write(NULL, SW_FORMAT_TABLE, stdout), SW_EINVAL);
}

static void test_compare_runs(void **state) {
    (void)state;
    char base[512], slower[512];
    /* Forward 10x: a loaded machine stretches spins by milliseconds now and then, which
     * drowned a 3x change of 0.5 ms once under ASan at load 12. */
    train("base.db", 30, 50, 400, base, sizeof base);
    train("slower.db", 30, 50, 4000, slower, sizeof slower);
    sw_run *ra = NULL, *rb = NULL;
    sw_snapshot *a = NULL, *b = NULL;
    assert_int_equal(sw_run_open(base, &ra), 0);
    assert_int_equal(sw_run_open(slower, &rb), 0);
    assert_int_equal(sw_run_snapshot(ra, &a), 0);
    assert_int_equal(sw_run_snapshot(rb, &b), 0);
    size_t n = 0;
    assert_int_equal(sw_compare_regressions(a, b, &n), 0);
    assert_true(n >= 1);
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw_compare_write(a, b, SW_FORMAT_CSV, c.f), 0);
    char *csv = at_capture_end(&c);
    const char *fwd = strstr(csv, "\nall,forward,30,30,");
    assert_non_null(fwd);
    const char *eol = strchr(fwd + 1, '\n');
    assert_non_null(eol);
    const char *verdict = strstr(fwd, ",slower,"); /* the verdict, then the tails' columns */
    assert_true(verdict != NULL && verdict < eol);
    free(csv);
    /* A run against itself: nothing changed. */
    assert_int_equal(sw_compare_regressions(a, a, &n), 0);
    assert_int_equal(n, 0);
    sw_snapshot_free(a);
    sw_snapshot_free(b);
    sw_run_close(ra);
    sw_run_close(rb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_bound_run),
        cmocka_unit_test(test_compare_runs),
    };
    return cmocka_run_group_tests(tests, sw_test_make_dir, sw_test_remove_dir);
}
