/*
 * test_compare.c — sw_compare_write and sw_compare_regressions on hand-built snapshots.
 * The Mann-Whitney p-values are checked against scipy.stats.mannwhitneyu (asymptotic, with
 * continuity correction) on the same samples, computed once and written down here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "analysis_test_util.h"

#include <math.h>

/* A row holding exactly these sample values. */
static sw_row exact_row(const char *action, const uint64_t *v, size_t n) {
    sw_row r = at_row(action, "all", 0, 0, 0, 1);
    for (size_t i = 0; i < n; i++) {
        sw_stats_add(&r.stats, v[i], v[i], (int64_t)i, 0);
        sw_hist_add(&r.hist, v[i]);
    }
    return r;
}

/* The CSV line of an action: its z and p-value and verdict (the columns after the two
 * names: ..., 12 z, 13 p_value, 14 verdict, ..., 19 decided_by). by may be NULL. */
static void csv_result_by(const char *csv, const char *action, double *z, double *p, char *verdict,
                          char *by) {
    char key[128];
    snprintf(key, sizeof key, "\nall,%s,", action);
    const char *line = strstr(csv, key);
    assert_non_null(line);
    const char *field = line + strlen(key);
    const char *end = strchr(field, '\n');
    assert_non_null(end);
    for (int k = 0; k < 20; k++) {
        const char *next = memchr(field, ',', (size_t)(end - field));
        const char *stop = next ? next : end;
        if (k == 12)
            *z = strtod(field, NULL);
        if (k == 13)
            *p = strtod(field, NULL);
        if (k == 14 || (k == 19 && by)) {
            char *to = k == 14 ? verdict : by;
            memcpy(to, field, (size_t)(stop - field));
            to[stop - field] = 0;
        }
        assert_true(next != NULL || k == 19);
        field = stop + 1;
    }
}

/* Field k (after the two names) of an action's roll-up CSV line, as a number. */
static double csv_number_at(const char *csv, const char *action, int k) {
    char key[128];
    snprintf(key, sizeof key, "\nall,%s,", action);
    const char *field = strstr(csv, key);
    assert_non_null(field);
    field += strlen(key);
    for (; k > 0; k--) {
        field = strchr(field, ',');
        assert_non_null(field);
        field++;
    }
    return strtod(field, NULL);
}

static void csv_result(const char *csv, const char *action, double *z, double *p, char *verdict) {
    csv_result_by(csv, action, z, p, verdict, NULL);
}

static char *compare_text(const sw_snapshot *a, const sw_snapshot *b, sw_format fmt) {
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw_compare_write(a, b, fmt, c.f), 0);
    return at_capture_end(&c);
}

static void test_mann_whitney_matches_scipy(void **state) {
    (void)state;
    const uint64_t a1[] = {1, 2, 3, 4, 5}, b1[] = {6, 7, 8, 9, 10};
    /* With ties across and within the samples. */
    const uint64_t a2[] = {1, 2, 3, 3, 4, 5, 6}, b2[] = {3, 4, 5, 6, 7, 7, 8};
    sw_row ra[] = {exact_row("shift", a1, 5), exact_row("ties", a2, 7)};
    sw_row rb[] = {exact_row("shift", b1, 5), exact_row("ties", b2, 7)};
    sw_snapshot a = at_snapshot("a", ra, 2, 5, 1000), b = at_snapshot("b", rb, 2, 5, 1000);
    char *csv = compare_text(&a, &b, SW_FORMAT_CSV);
    double z, p;
    char verdict[32];
    csv_result(csv, "shift", &z, &p, verdict);
    assert_true(fabs(p - 0.012185780355344813) < 1e-9);
    assert_true(z > 2.5 && z < 2.51);     /* (25 - 12.5 - 0.5) / sqrt(25 * 11 / 12) = 2.5067 */
    assert_string_equal(verdict, "same"); /* p >= 0.01: not significant at alpha 0.01 */
    csv_result(csv, "ties", &z, &p, verdict);
    assert_true(fabs(p - 0.045699153226012125) < 1e-9);
    assert_true(z > 0);
    free(csv);
}

/* Baseline and new runs: forward 20 % slower, backward 25 % faster, data unchanged,
 * a 2 % shift of optimizer (real but too small to matter), loss with 3 calls only,
 * callback:ckpt only in the baseline, callback:log only in the new run. */
typedef struct pair {
    sw_row ra[8], rb[8];
    sw_snapshot a, b;
} pair;

static void make_pair(pair *p) {
    p->ra[0] = at_row("forward", "all", 400, 10e6, 0.05, 1);
    p->ra[1] = at_row("backward", "all", 400, 20e6, 0.05, 2);
    p->ra[2] = at_row("data", "all", 400, 2e6, 0.10, 3);
    p->ra[3] = at_row("optimizer", "all", 4000, 1e6, 0.01, 4);
    p->ra[4] = at_row("loss", "all", 3, 1e5, 0.0, 5);
    p->ra[5] = at_row("callback:ckpt", "all", 10, 5e6, 0.1, 6);
    p->ra[6] = at_row("forward", "train", 400, 10e6, 0.05, 1);
    p->rb[0] = at_row("forward", "all", 400, 12e6, 0.05, 11);
    p->rb[1] = at_row("backward", "all", 400, 15e6, 0.05, 12);
    p->rb[2] = at_row("data", "all", 400, 2e6, 0.10, 13);
    p->rb[3] = at_row("optimizer", "all", 4000, 1.02e6, 0.01, 14);
    p->rb[4] = at_row("loss", "all", 3, 3e5, 0.0, 15);
    p->rb[5] = at_row("callback:log|\"x\"</script>", "all", 400, 1e5, 0.1, 16);
    p->rb[6] = at_row("forward", "train", 400, 12e6, 0.05, 11);
    p->a = at_snapshot("baseline", p->ra, 7, 400, 14000000000ull);
    p->b = at_snapshot("new", p->rb, 7, 400, 12900000000ull);
}

static void test_verdicts(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    char *csv = compare_text(&p.a, &p.b, SW_FORMAT_CSV);
    double z, pv;
    char verdict[32];
    csv_result(csv, "forward", &z, &pv, verdict);
    assert_string_equal(verdict, "slower");
    assert_true(pv < 1e-6 && z > 0);
    csv_result(csv, "backward", &z, &pv, verdict);
    assert_string_equal(verdict, "faster");
    assert_true(z < 0);
    csv_result(csv, "data", &z, &pv, verdict);
    assert_string_equal(verdict, "same");
    csv_result(csv, "optimizer", &z, &pv, verdict);
    assert_string_equal(verdict, "same"); /* significant, but a 2 % change */
    assert_true(pv < 0.01);
    csv_result(csv, "loss", &z, &pv, verdict);
    assert_string_equal(verdict, "unclear");
    assert_non_null(strstr(csv, "all,callback:ckpt,10,,"));
    assert_non_null(strstr(csv, ",gone,"));
    assert_non_null(strstr(csv, ",new,"));
    /* Per-phase rows come after all roll-up rows. */
    const char *phase_row = strstr(csv, "\ntrain,forward,");
    assert_non_null(phase_row);
    assert_null(strstr(phase_row, "\nall,"));
    /* What matters first: the regression is the first row. */
    assert_non_null(strstr(csv, "decided_by\nall,forward,"));
    free(csv);

    size_t n = 99;
    assert_int_equal(sw_compare_regressions(&p.a, &p.b, &n), 0);
    assert_int_equal(n, 2); /* forward, all phases and train */
    assert_int_equal(sw_compare_regressions(&p.a, &p.a, &n), 0);
    assert_int_equal(n, 0);
}

/* n calls around base_ns (+-5 %), of which the last `stalls` take stall_ns. */
static sw_row stalled_row(const char *action, size_t n, double base_ns, size_t stalls,
                          double stall_ns, uint64_t seed) {
    sw_row r = at_row(action, "all", 0, 0, 0, 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t ns = i >= n - stalls ? (uint64_t)stall_ns
                                      : (uint64_t)(base_ns * (0.95 + 0.1 * at_rand(&seed)));
        sw_stats_add(&r.stats, ns, ns, (int64_t)i, 32);
        sw_hist_add(&r.hist, ns);
    }
    return r;
}

/* The case: a data wait whose bulk is unchanged but whose stalls grew (mean +22 %,
 * p99 2.25x) was "same"; the tail test calls it slower, decided by p99. The reverse is faster
 * by p99, and the same stalls on both sides stay "same". */
static void test_tail_regression_is_slower(void **state) {
    (void)state;
    sw_row ra[3], rb[3];
    ra[0] = stalled_row("data", 400, 2e6, 6, 5e6, 1);
    rb[0] = stalled_row("data", 400, 2e6, 20, 11.5e6, 2);
    ra[1] = stalled_row("forward", 400, 3e6, 4, 9e6, 3);
    rb[1] = stalled_row("forward", 400, 3e6, 4, 9e6, 4);
    sw_snapshot a = at_snapshot("a", ra, 2, 400, 4000000000ull);
    sw_snapshot b = at_snapshot("b", rb, 2, 400, 4000000000ull);
    double change = (rb[0].stats.mean_ns - ra[0].stats.mean_ns) / ra[0].stats.mean_ns;
    assert_true(change > 0.18 && change < 0.30);
    char *csv = compare_text(&a, &b, SW_FORMAT_CSV);
    double z, pv;
    char verdict[32], by[32];
    csv_result_by(csv, "data", &z, &pv, verdict, by);
    assert_true(pv > 0.01); /* the bulk test alone sees nothing */
    assert_string_equal(verdict, "slower");
    assert_string_equal(by, "p99");
    csv_result_by(csv, "forward", &z, &pv, verdict, by);
    assert_string_equal(verdict, "same");
    assert_string_equal(by, "");
    free(csv);
    size_t n = 0;
    assert_int_equal(sw_compare_regressions(&a, &b, &n), 0);
    assert_int_equal(n, 1);
    char *table = compare_text(&a, &b, SW_FORMAT_TABLE);
    assert_non_null(strstr(table, "x2.25  slower p99\n"));
    free(table);
    char *json = compare_text(&a, &b, SW_FORMAT_JSON);
    assert_non_null(strstr(json, "\"verdict\": \"slower\", \"decided_by\": \"p99\""));
    free(json);

    csv = compare_text(&b, &a, SW_FORMAT_CSV);
    csv_result_by(csv, "data", &z, &pv, verdict, by);
    assert_string_equal(verdict, "faster");
    assert_string_equal(by, "p99");
    free(csv);
}

/* The bulk of the calls took 3x longer, but one stall in the baseline dragged its mean above
 * the new one: U and the median agree, so the row is slower, decided by the p50 (a mean
 * alone would have said "faster" and the old rule "same"). */
static void test_bulk_moved_against_a_stalled_mean(void **state) {
    (void)state;
    sw_row ra[1], rb[1];
    ra[0] = stalled_row("forward", 30, 0.5e6, 1, 60e6, 1);
    rb[0] = stalled_row("forward", 30, 1.5e6, 0, 0, 2);
    assert_true(ra[0].stats.mean_ns > rb[0].stats.mean_ns);
    sw_snapshot a = at_snapshot("a", ra, 1, 30, 1), b = at_snapshot("b", rb, 1, 30, 1);
    char *csv = compare_text(&a, &b, SW_FORMAT_CSV);
    double z, pv;
    char verdict[32], by[32];
    csv_result_by(csv, "forward", &z, &pv, verdict, by);
    assert_true(pv < 1e-6 && z > 0);
    assert_string_equal(verdict, "slower");
    assert_string_equal(by, "p50");
    free(csv);
}

/* Fisher's exact test against an independent computation: with every call at 1 ms or 10 ms
 * the table is exactly [4 396; 20 380], whose two-sided p is 0.0013176969206547308 (summed
 * with Python's math.comb). */
static void test_tail_test_matches_exact_fisher(void **state) {
    (void)state;
    static uint64_t va[400], vb[400];
    for (int i = 0; i < 400; i++) {
        va[i] = i < 396 ? 1000000 : 10000000;
        vb[i] = i < 380 ? 1000000 : 10000000;
    }
    sw_row ra[1] = {exact_row("data", va, 400)}, rb[1] = {exact_row("data", vb, 400)};
    sw_snapshot a = at_snapshot("a", ra, 1, 400, 1), b = at_snapshot("b", rb, 1, 400, 1);
    char *csv = compare_text(&a, &b, SW_FORMAT_CSV);
    assert_true(fabs(csv_number_at(csv, "data", 18) - 0.0013176969206547308) < 1e-12);
    free(csv);
}

/* Display columns of the longest line (UTF-8 code points). */
static int widest_line(const char *text) {
    int widest = 0, w = 0;
    for (const char *c = text; *c; c++) {
        if (*c == '\n') {
            widest = w > widest ? w : widest;
            w = 0;
        } else {
            w += ((unsigned char)*c & 0xC0) != 0x80;
        }
    }
    return w > widest ? w : widest;
}

static void test_table_fits_100_columns(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    p.ra[4] = at_row("an_action_name_far_longer_than_any_column_could_hold", "a_long_phase_name",
                     400, 1234567, 0.5, 7);
    p.rb[4] = at_row("an_action_name_far_longer_than_any_column_could_hold", "a_long_phase_name",
                     400, 98765432, 0.5, 8);
    char *table = compare_text(&p.a, &p.b, SW_FORMAT_TABLE);
    assert_true(widest_line(table) <= 100);
    assert_non_null(strstr(table, "+7927 %")); /* four digits, no decimal */
    free(table);
}

static void test_identical_runs_are_same(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    char *csv = compare_text(&p.a, &p.a, SW_FORMAT_CSV);
    assert_null(strstr(csv, ",slower,"));
    assert_null(strstr(csv, ",faster,"));
    assert_null(strstr(csv, ",new,"));
    free(csv);
}

static void test_escaping(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    char *json = compare_text(&p.a, &p.b, SW_FORMAT_JSON);
    assert_null(strstr(json, "</script>"));
    assert_non_null(strstr(json, "\"callback:log|\\\"x\\\"\\u003c/script\\u003e\""));
    free(json);
    char *md = compare_text(&p.a, &p.b, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(md, "| callback:log\\|\"x\"&lt;/script&gt; |")); /* as report -f md */
    free(md);
    char *csv = compare_text(&p.a, &p.b, SW_FORMAT_CSV);
    assert_non_null(strstr(csv, "\"callback:log|\"\"x\"\"</script>\""));
    free(csv);
}

static void test_golden(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    const struct {
        sw_format fmt;
        const char *file;
    } cases[] = {{SW_FORMAT_TABLE, "compare_table.txt"},
                 {SW_FORMAT_MARKDOWN, "compare_markdown.md"},
                 {SW_FORMAT_CSV, "compare_csv.csv"},
                 {SW_FORMAT_JSON, "compare_json.json"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = compare_text(&p.a, &p.b, cases[i].fmt);
        at_golden(cases[i].file, text);
        free(text);
    }
}

static void test_bad_arguments(void **state) {
    (void)state;
    pair p;
    make_pair(&p);
    size_t n;
    assert_int_equal(sw_compare_write(NULL, &p.b, SW_FORMAT_TABLE, stdout), SW_EINVAL);
    assert_int_equal(sw_compare_write(&p.a, NULL, SW_FORMAT_TABLE, stdout), SW_EINVAL);
    assert_int_equal(sw_compare_write(&p.a, &p.b, SW_FORMAT_TABLE, NULL), SW_EINVAL);
    assert_int_equal(sw_compare_write(&p.a, &p.b, SW_FORMAT_LIGHTNING, stdout), SW_EFORMAT);
    assert_int_equal(sw_compare_write(&p.a, &p.b, (sw_format)77, stdout), SW_EFORMAT);
    assert_int_equal(sw_compare_regressions(&p.a, &p.b, NULL), SW_EINVAL);
    assert_int_equal(sw_compare_regressions(NULL, &p.b, &n), SW_EINVAL);
    /* Empty snapshots compare fine. */
    sw_snapshot e1 = at_snapshot("e", NULL, 0, 0, 0);
    char *text = compare_text(&e1, &e1, SW_FORMAT_JSON);
    assert_non_null(strstr(text, "\"rows\": []"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mann_whitney_matches_scipy),
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_tail_regression_is_slower),
        cmocka_unit_test(test_tail_test_matches_exact_fisher),
        cmocka_unit_test(test_bulk_moved_against_a_stalled_mean),
        cmocka_unit_test(test_table_fits_100_columns),
        cmocka_unit_test(test_identical_runs_are_same),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
