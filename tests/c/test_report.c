/*
 * test_report.c — the report writers on a hand-built snapshot: a golden file per format,
 * the terminal-width rules, empty snapshots, bad arguments, write errors, CSV shape,
 * sw_format_parse/name, sw_format_duration, sw_format_scale_time and Ignite's layouts
 * (sw_ignite_write_*).
 *
 * Golden files: tests/golden/report_*. Regenerate with SW_UPDATE_GOLDEN=1 and review the
 * diff. The JSON and CSV outputs are also written under $SW_BUILD_DIR/report_out/ where
 * tests/report_json.cmake reads them back with Python's json and csv modules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stepwatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the fixture: a small two-epoch run with phases, warm-up and awkward names ---- */

#define MAX_ROWS 64
#define NSEC 1000000000ull
#define MSEC 1000000ull

/* The name with quotes, a newline, a tab, a backslash, non-ASCII text and one byte that is
 * not UTF-8. tests/report_json.cmake expects it back with \xff as U+FFFD. */
static const char weird_name[] = "say \"hi\"\n\tback\\slash \xc3\xbcn\xc3\xaf"
                                 "c\xc3\xb6"
                                 "de "
                                 "\xc2\xb5 \xe6\x97\xa5\xe6\x9c\xac \xff!";
static const char long_name[] =
    "callback:ModelCheckpoint.on_train_batch_end.with_a_really_long_suffix_that_goes_on";

typedef struct fixture {
    sw_snapshot snap;
    sw_row rows[MAX_ROWS];
    sw_counter_summary counters[1];
} fixture;

static const char *phase_name_of(sw_phase p) {
    static const char *const names[] = {"none", "fit", "epoch", "train", "valid"};
    return p < 5 ? names[p] : "?";
}

static sw_row *row_for(fixture *f, const char *action, sw_phase phase) {
    for (size_t i = 0; i < f->snap.nrows; i++)
        if (strcmp(f->rows[i].action_name, action) == 0 && f->rows[i].phase == phase)
            return &f->rows[i];
    assert_true(f->snap.nrows < MAX_ROWS);
    sw_row *r = &f->rows[f->snap.nrows++];
    memset(r, 0, sizeof *r);
    r->action = (sw_id)f->snap.nrows;
    r->action_name = action;
    r->phase = phase;
    r->phase_name = phase_name_of(phase);
    r->category = sw_category_of(action);
    sw_stats_init(&r->stats);
    sw_stats_init(&r->warmup);
    return r;
}

/* One call of action in phase: ns long, self_ns of it outside nested spans. */
static void call(fixture *f, const char *action, sw_phase phase, uint64_t ns, uint64_t self_ns,
                 int64_t step, uint32_t batch, int warmup) {
    sw_row *r = row_for(f, action, phase);
    if (warmup) {
        sw_stats_add(&r->warmup, ns, self_ns, step, batch);
    } else {
        sw_stats_add(&r->stats, ns, self_ns, step, batch);
        sw_hist_add(&r->hist, ns);
    }
}

/* The all-phase roll-ups, as the recorder appends them after the per-phase rows. */
static void add_rollups(fixture *f) {
    size_t nphase = f->snap.nrows;
    for (size_t i = 0; i < nphase; i++) {
        sw_row *src = &f->rows[i];
        sw_row *into = NULL;
        for (size_t j = nphase; j < f->snap.nrows; j++)
            if (strcmp(f->rows[j].action_name, src->action_name) == 0)
                into = &f->rows[j];
        if (into == NULL) {
            assert_true(f->snap.nrows < MAX_ROWS);
            into = &f->rows[f->snap.nrows++];
            *into = *src;
            into->phase = SW_PHASE_ALL;
            into->phase_name = "all";
            continue;
        }
        sw_stats_merge(&into->stats, &src->stats);
        sw_stats_merge(&into->warmup, &src->warmup);
        sw_hist_merge(&into->hist, &src->hist);
    }
}

static void train_step(fixture *f, sw_phase phase, int64_t step, uint64_t k, int warmup) {
    uint64_t data = (warmup ? 400 : 9) * MSEC + k * 137000;
    uint64_t fwd = 21 * MSEC + (k % 5) * 410000, loss = 700000 + (k % 3) * 21000;
    uint64_t bwd = 38 * MSEC + (k % 7) * 520000, opt = 6 * MSEC + (k % 4) * 90000;
    uint64_t zero = 150000 + (k % 2) * 7000, cb = 80000 + (k % 6) * 3000;
    uint64_t total = data + fwd + loss + bwd + opt + zero + cb + 250000;
    call(f, "step", phase, total, total - data - fwd - loss - bwd - opt - zero - cb, step, 64,
         warmup);
    call(f, "data", phase, data, data, step, 64, warmup);
    call(f, "forward", phase, fwd, fwd - loss, step, 64, warmup);
    call(f, "loss", phase, loss, loss, step, 64, warmup);
    call(f, "backward", phase, bwd, bwd, step, 64, warmup);
    call(f, "optimizer", phase, opt, opt, step, 64, warmup);
    call(f, "zero_grad", phase, zero, zero, step, 64, warmup);
    call(f, long_name, phase, cb, cb, step, 64, warmup);
}

static void valid_step(fixture *f, int64_t step, uint64_t k, int warmup) {
    uint64_t data = (warmup ? 300 : 5) * MSEC + k * 90000, fwd = 12 * MSEC + (k % 4) * 300000;
    uint64_t total = data + fwd + 120000;
    call(f, "step", SW_PHASE_VALID, total, total - data - fwd, step, 128, warmup);
    call(f, "data", SW_PHASE_VALID, data, data, step, 128, warmup);
    call(f, "forward", SW_PHASE_VALID, fwd, fwd, step, 128, warmup);
    if (k % 5 == 0)
        call(f, weird_name, SW_PHASE_VALID, 33000 + k * 1000, 33000 + k * 1000, step, 128, warmup);
}

static void build_fixture(fixture *f) {
    memset(f, 0, sizeof *f);
    sw_snapshot *s = &f->snap;
    s->rows = f->rows;
    s->name = "demo \"run\"";
    s->host = "testhost";
    s->command = "./train --epochs 2";
    s->pid = 4242;
    s->rank = 0;
    s->world_size = 1;
    s->start_unix_ns = 1700000000123456789ull;
    s->warmup_steps = 1;
    s->threads = 2;

    int64_t step = 0;
    uint64_t train_ns[2] = {0}, valid_ns[2] = {0};
    for (int epoch = 0; epoch < 2; epoch++) {
        for (uint64_t k = 0; k < 12; k++) {
            train_step(f, SW_PHASE_TRAIN, step++, k + 12 * (uint64_t)epoch, k == 0);
            train_ns[epoch] += row_for(f, "step", SW_PHASE_TRAIN)->stats.total_ns;
        }
        for (uint64_t k = 0; k < 6; k++)
            valid_step(f, step++, k + 6 * (uint64_t)epoch, k == 0);
    }
    /* Phase spans: each a little longer than what ran inside it. */
    const sw_row *ts = row_for(f, "step", SW_PHASE_TRAIN), *vs = row_for(f, "step", SW_PHASE_VALID);
    uint64_t train_all = ts->stats.total_ns + ts->warmup.total_ns;
    uint64_t valid_all = vs->stats.total_ns + vs->warmup.total_ns;
    (void)train_ns;
    (void)valid_ns;
    uint64_t tr[2] = {train_all / 2 + 3 * MSEC, train_all - train_all / 2 + 4 * MSEC};
    uint64_t va[2] = {valid_all / 2 + 1 * MSEC, valid_all - valid_all / 2 + 2 * MSEC};
    uint64_t fit_ns = 0;
    for (int e = 0; e < 2; e++) {
        uint64_t cb = 41 * MSEC + (uint64_t)e * 3 * MSEC;
        uint64_t ep = tr[e] + va[e] + cb + 2 * MSEC;
        call(f, "train", SW_PHASE_EPOCH, tr[e], 3 * MSEC, -1, 0, 0);
        call(f, "valid", SW_PHASE_EPOCH, va[e], 1 * MSEC, -1, 0, 0);
        call(f, "callback:checkpoint", SW_PHASE_EPOCH, cb, cb, -1, 0, 0);
        call(f, "epoch", SW_PHASE_FIT, ep, 2 * MSEC, -1, 0, 0);
        fit_ns += ep;
    }
    fit_ns += 150 * MSEC; /* setup before the first epoch */
    call(f, "fit", SW_PHASE_NONE, fit_ns, 150 * MSEC, -1, 0, 0);
    add_rollups(f);

    s->elapsed_ns = fit_ns + 20 * MSEC;
    s->wall_ns = fit_ns;
    s->steps = (uint64_t)step;
    s->misuse.end_without_begin = 2;
    s->misuse.mismatched_end = 1;
    s->dropped_events = 17;
    f->counters[0] = (sw_counter_summary){"gpu_util", 5, 93.5, 12.0, 100.0, 80.25};
    s->counters = f->counters;
    s->ncounters = 1;
}

/* ---- helpers ---- */

/* The report of s in fmt, as a malloc'ed string. */
static char *render(const sw_snapshot *s, sw_format fmt) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    assert_int_equal(sw_snapshot_write(s, fmt, mem), 0);
    assert_int_equal(fclose(mem), 0);
    return buf;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, mem);
    fclose(f);
    fclose(mem);
    return buf;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Keep a copy of an output under $SW_BUILD_DIR/report_out/ (for the Python checks and for
 * looking at a failed comparison). */
static void keep_output(const char *file, const char *text) {
    const char *dir = getenv("SW_BUILD_DIR");
    if (dir == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/report_out", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/report_out/%s", dir, file);
    write_file(path, text);
}

static void check_golden(const char *file, const char *actual) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", SW_TEST_GOLDEN_DIR, file);
    const char *update = getenv("SW_UPDATE_GOLDEN");
    if (update != NULL && strcmp(update, "1") == 0) {
        write_file(path, actual);
        return;
    }
    keep_output(file, actual);
    char *expected = read_file(path);
    if (expected == NULL)
        fail_msg("golden file %s missing (run with SW_UPDATE_GOLDEN=1)", path);
    if (strcmp(expected, actual) != 0) {
        size_t line = 1, i = 0;
        for (; expected[i] && expected[i] == actual[i]; i++)
            line += expected[i] == '\n';
        free(expected);
        fail_msg("%s differs from the golden file at line %zu (actual output kept in "
                 "$SW_BUILD_DIR/report_out/%s)",
                 file, line, file);
    }
    free(expected);
}

/* Columns of each line (code points), the widest. */
static size_t widest_line(const char *text) {
    size_t widest = 0, col = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '\n') {
            widest = col > widest ? col : widest;
            col = 0;
        } else if ((*p & 0xC0) != 0x80) {
            col++;
        }
    }
    return col > widest ? col : widest;
}

/* ---- golden files, one per format ---- */

static void golden(void **state, sw_format fmt, const char *file) {
    fixture *f = *state;
    setenv("COLUMNS", "80", 1);
    char *out = render(&f->snap, fmt);
    check_golden(file, out);
    free(out);
}

static void test_golden_table(void **state) {
    golden(state, SW_FORMAT_TABLE, "report_table.txt");
}
static void test_golden_lightning(void **state) {
    golden(state, SW_FORMAT_LIGHTNING, "report_lightning.txt");
}
static void test_golden_fastxtend(void **state) {
    golden(state, SW_FORMAT_FASTXTEND, "report_fastxtend.txt");
}
static void test_golden_ignite(void **state) {
    golden(state, SW_FORMAT_IGNITE, "report_ignite.txt");
}
static void test_golden_markdown(void **state) {
    golden(state, SW_FORMAT_MARKDOWN, "report_markdown.md");
}
static void test_golden_csv(void **state) {
    golden(state, SW_FORMAT_CSV, "report_csv.csv");
}
static void test_golden_json(void **state) {
    golden(state, SW_FORMAT_JSON, "report_json.json");
}

/* The Python checks read these back (tests/report_json.cmake). */
static void test_outputs_for_python(void **state) {
    fixture *f = *state;
    char *json = render(&f->snap, SW_FORMAT_JSON), *csv = render(&f->snap, SW_FORMAT_CSV);
    keep_output("report.json", json);
    keep_output("report.csv", csv);
    free(json);
    free(csv);
}

/* ---- the table's width rules ---- */

static void test_table_fits_width(void **state) {
    fixture *f = *state;
    const char *widths[] = {"50", "60", "80", "100"};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        setenv("COLUMNS", widths[i], 1);
        char *out = render(&f->snap, SW_FORMAT_TABLE);
        /* The table lines fit; the title and the lines under it (misuse, counters) are
         * prose. */
        char *table = strstr(out, "\nAction"), *table_end = strstr(out, "\nMisuse:");
        assert_non_null(table);
        assert_non_null(table_end);
        *table_end = '\0';
        size_t w = widest_line(table);
        if (w > (size_t)atoi(widths[i]))
            fail_msg("COLUMNS=%s: a line is %zu columns wide", widths[i], w);
        /* Names are shortened in the middle, keeping both ends. */
        if (strstr(out, "train/ca") == NULL)
            fail_msg("COLUMNS=%s: the long name lost its start:\n%s", widths[i], out);
        assert_non_null(strstr(out, "\xe2\x80\xa6"));
        free(out);
    }
    /* 80 columns: p50 goes first, the rest stays. */
    setenv("COLUMNS", "80", 1);
    char *out = render(&f->snap, SW_FORMAT_TABLE);
    assert_null(strstr(out, "p50"));
    assert_non_null(strstr(out, "p99"));
    assert_non_null(strstr(out, "Self"));
    free(out);
    /* Wide: every column and the full long name. */
    setenv("COLUMNS", "200", 1);
    out = render(&f->snap, SW_FORMAT_TABLE);
    assert_non_null(strstr(out, "p50"));
    assert_non_null(strstr(out, long_name));
    check_golden("report_table_w200.txt", out);
    free(out);
    setenv("COLUMNS", "60", 1);
    out = render(&f->snap, SW_FORMAT_TABLE);
    check_golden("report_table_w60.txt", out);
    free(out);
    /* Nonsense COLUMNS falls back to 80. */
    setenv("COLUMNS", "wide", 1);
    char *fallback = render(&f->snap, SW_FORMAT_TABLE);
    setenv("COLUMNS", "80", 1);
    out = render(&f->snap, SW_FORMAT_TABLE);
    assert_string_equal(fallback, out);
    free(out);
    free(fallback);
}

/* The report of s in fmt with layout options, as a malloc'ed string. */
static char *render_ex(const sw_snapshot *s, sw_format fmt, const sw_write_options *opts) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    assert_int_equal(sw_snapshot_write_ex(s, fmt, mem, opts), 0);
    assert_int_equal(fclose(mem), 0);
    return buf;
}

/* sw_write_options: a width given instead of the terminal's, names kept whole for files,
 * Lightning's extended=False layout. */
static void test_write_options(void **state) {
    fixture *f = *state;
    setenv("COLUMNS", "80", 1);
    /* NULL and zeroed options are sw_snapshot_write's layout */
    const sw_write_options zero = SW_WRITE_OPTIONS_INIT;
    for (int fmt = SW_FORMAT_TABLE; fmt <= SW_FORMAT_JSON; fmt++) {
        char *plain = render(&f->snap, (sw_format)fmt);
        char *with_null = render_ex(&f->snap, (sw_format)fmt, NULL);
        char *with_zero = render_ex(&f->snap, (sw_format)fmt, &zero);
        assert_string_equal(plain, with_null);
        assert_string_equal(plain, with_zero);
        free(plain);
        free(with_null);
        free(with_zero);
    }
    /* a width asked for wins over $COLUMNS */
    char *w60 = render_ex(&f->snap, SW_FORMAT_TABLE,
                          &(sw_write_options){.size = sizeof(sw_write_options), .width = 60});
    setenv("COLUMNS", "60", 1);
    char *columns60 = render(&f->snap, SW_FORMAT_TABLE);
    setenv("COLUMNS", "80", 1);
    assert_string_equal(w60, columns60);
    free(w60);
    free(columns60);
    /* full_names: every layout that shortens names keeps this one whole; the table then
     * takes the room it needs (all its columns) */
    const sw_format shortening[] = {SW_FORMAT_TABLE, SW_FORMAT_LIGHTNING, SW_FORMAT_FASTXTEND};
    for (size_t i = 0; i < 3; i++) {
        char *cut = render(&f->snap, shortening[i]);
        char *whole = render_ex(
            &f->snap, shortening[i],
            &(sw_write_options){.size = sizeof(sw_write_options), .full_names = 1});
        if (strstr(cut, long_name) != NULL || strstr(whole, long_name) == NULL)
            fail_msg("%s: the long name should be cut by default, whole with full_names",
                     sw_format_name(shortening[i]));
        free(cut);
        free(whole);
    }
    char *table = render_ex(&f->snap, SW_FORMAT_TABLE,
                            &(sw_write_options){.size = sizeof(sw_write_options), .full_names = 1});
    assert_non_null(strstr(table, "p50"));
    free(table);
    /* brief: Lightning's extended=False (its log_row): three columns, largest mean first */
    char *brief = render_ex(&f->snap, SW_FORMAT_LIGHTNING,
                            &(sw_write_options){.size = sizeof(sw_write_options), .brief = 1});
    assert_null(strstr(brief, "Num calls"));
    assert_null(strstr(brief, "\n|  Total "));
    assert_non_null(strstr(brief, "Mean duration (s)"));
    assert_non_null(strstr(brief, "Total time (s)"));
    double last = 1e300;
    int rows = 0;
    for (char *line = strstr(brief, "\n|  "); line; line = strstr(line + 1, "\n|  ")) {
        char *cell = strstr(line, "\t|  ");
        if (strncmp(line, "\n|  Action", 10) == 0)
            continue;
        double mean = strtod(cell + 4, NULL);
        if (mean > last)
            fail_msg("brief rows not by mean: %g after %g", mean, last);
        last = mean;
        rows++;
    }
    assert_true(rows >= 8);
    check_golden("report_lightning_brief.txt", brief);
    free(brief);
}

/* Names never reach the terminal raw: no control characters but line breaks. */
static void test_text_formats_escape_names(void **state) {
    fixture *f = *state;
    const sw_format text[] = {SW_FORMAT_TABLE, SW_FORMAT_LIGHTNING, SW_FORMAT_FASTXTEND,
                              SW_FORMAT_IGNITE, SW_FORMAT_MARKDOWN};
    setenv("COLUMNS", "200", 1);
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++) {
        char *out = render(&f->snap, text[i]);
        for (const unsigned char *p = (const unsigned char *)out; *p; p++)
            if (*p < 0x20 && *p != '\n' && !(*p == '\t' && text[i] == SW_FORMAT_LIGHTNING))
                fail_msg("format %s printed control byte 0x%02x", sw_format_name(text[i]), *p);
        assert_null(strstr(out, "\xff"));
        if (text[i] != SW_FORMAT_MARKDOWN && text[i] != SW_FORMAT_FASTXTEND)
            assert_non_null(strstr(out, "say \"hi\"\\n\\tback\\slash"));
        free(out);
    }
}

/* ---- CSV shape ---- */

/* Split one RFC 4180 record at *p; returns its field count and moves *p past it. */
static int csv_record(const char **p, char fields[][512], int max) {
    int n = 0;
    const char *c = *p;
    for (;;) {
        char *f = fields[n < max ? n : max - 1];
        size_t k = 0;
        if (*c == '"') {
            for (c++;; c++) {
                if (*c == '\0')
                    fail_msg("unterminated quoted CSV field");
                if (*c == '"' && c[1] == '"')
                    c++;
                else if (*c == '"') {
                    c++;
                    break;
                }
                if (k < 511)
                    f[k++] = *c;
            }
        } else {
            for (; *c && *c != ',' && *c != '\n'; c++) {
                if (*c == '"')
                    fail_msg("quote inside an unquoted CSV field");
                if (k < 511)
                    f[k++] = *c;
            }
        }
        f[k] = '\0';
        n++;
        if (*c == ',') {
            c++;
            continue;
        }
        if (*c == '\n')
            c++;
        *p = c;
        return n;
    }
}

static void test_csv_shape(void **state) {
    fixture *f = *state;
    char *out = render(&f->snap, SW_FORMAT_CSV);
    static char fields[32][512];
    const char *p = out;
    int header = csv_record(&p, fields, 32);
    assert_int_equal(header, 22);
    assert_string_equal(fields[0], "action");
    assert_string_equal(fields[21], "warmup_mean_s");
    size_t records = 0;
    int saw_weird = 0, saw_rollup = 0;
    while (*p) {
        assert_int_equal(csv_record(&p, fields, 32), header);
        /* The name comes back whole, the byte that is not UTF-8 as U+FFFD. */
        if (strcmp(fields[0], "say \"hi\"\n\tback\\slash \xc3\xbcn\xc3\xaf"
                              "c\xc3\xb6"
                              "de "
                              "\xc2\xb5 \xe6\x97\xa5\xe6\x9c\xac \xef\xbf\xbd!") == 0)
            saw_weird = 1;
        if (strcmp(fields[0], "step") == 0 && strcmp(fields[1], "all") == 0) {
            saw_rollup = 1;
            /* 36 steps, 4 of them warm-up: 32 steady calls, 4 warm-up. */
            assert_string_equal(fields[3], "32");
            assert_string_equal(fields[19], "4");
        }
        records++;
    }
    assert_int_equal(records, f->snap.nrows);
    assert_true(saw_weird);
    assert_true(saw_rollup);
    free(out);
}

/* ---- empty snapshots, bad arguments, write errors ---- */

static void test_empty_snapshot(void **state) {
    (void)state;
    sw_snapshot empty = {0};
    const sw_format text[] = {SW_FORMAT_TABLE, SW_FORMAT_LIGHTNING, SW_FORMAT_FASTXTEND,
                              SW_FORMAT_IGNITE, SW_FORMAT_MARKDOWN};
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++) {
        char *out = render(&empty, text[i]);
        assert_string_equal(out, "stepwatch: no actions recorded\n");
        free(out);
    }
    char *csv = render(&empty, SW_FORMAT_CSV);
    assert_int_equal(strlen(csv), strcspn(csv, "\n") + 1); /* the header line only */
    free(csv);
    char *json = render(&empty, SW_FORMAT_JSON);
    assert_non_null(strstr(json, "\"rows\": []"));
    assert_non_null(strstr(json, "\"name\": null"));
    free(json);
}

static void test_bad_arguments(void **state) {
    fixture *f = *state;
    assert_int_equal(sw_snapshot_write(NULL, SW_FORMAT_TABLE, stdout), SW_EINVAL);
    assert_int_equal(sw_snapshot_write(&f->snap, SW_FORMAT_TABLE, NULL), SW_EINVAL);
    assert_int_equal(sw_snapshot_write(&f->snap, (sw_format)99, stdout), SW_EINVAL);
    sw_snapshot broken = {.nrows = 3, .rows = NULL};
    assert_int_equal(sw_snapshot_write(&broken, SW_FORMAT_JSON, stdout), SW_EINVAL);
}

static void test_write_error_is_eio(void **state) {
    fixture *f = *state;
    for (int fmt = SW_FORMAT_TABLE; fmt <= SW_FORMAT_JSON; fmt++) {
        FILE *full = fopen("/dev/full", "w");
        if (full == NULL)
            skip();
        assert_int_equal(sw_snapshot_write(&f->snap, (sw_format)fmt, full), SW_EIO);
        fclose(full);
    }
    /* Also the short message of an empty snapshot. */
    sw_snapshot empty = {0};
    FILE *full = fopen("/dev/full", "w");
    assert_non_null(full);
    assert_int_equal(sw_snapshot_write(&empty, SW_FORMAT_TABLE, full), SW_EIO);
    fclose(full);
    /* A stream opened for reading cannot be written. */
    FILE *ro = fopen("/dev/null", "r");
    assert_non_null(ro);
    assert_int_equal(sw_snapshot_write(&f->snap, SW_FORMAT_CSV, ro), SW_EIO);
    fclose(ro);
}

/* ---- names of formats ---- */

static void test_format_parse(void **state) {
    (void)state;
    const struct {
        const char *name;
        sw_format fmt;
    } ok[] = {{"table", SW_FORMAT_TABLE},
              {"lightning", SW_FORMAT_LIGHTNING},
              {"fastxtend", SW_FORMAT_FASTXTEND},
              {"ignite", SW_FORMAT_IGNITE},
              {"md", SW_FORMAT_MARKDOWN},
              {"markdown", SW_FORMAT_MARKDOWN},
              {"csv", SW_FORMAT_CSV},
              {"json", SW_FORMAT_JSON}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sw_format fmt = (sw_format)-1;
        assert_int_equal(sw_format_parse(ok[i].name, &fmt), 0);
        assert_int_equal(fmt, ok[i].fmt);
    }
    for (int fmt = SW_FORMAT_TABLE; fmt <= SW_FORMAT_JSON; fmt++) {
        sw_format back;
        assert_non_null(sw_format_name((sw_format)fmt));
        assert_int_equal(sw_format_parse(sw_format_name((sw_format)fmt), &back), 0);
        assert_int_equal(back, fmt);
    }
    const char *bad[] = {"", "TABLE", "xml", "json ", "c", "markdown2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sw_format fmt = SW_FORMAT_CSV;
        assert_int_equal(sw_format_parse(bad[i], &fmt), SW_EFORMAT);
        assert_int_equal(fmt, SW_FORMAT_CSV); /* untouched on error */
    }
    sw_format fmt;
    assert_int_equal(sw_format_parse(NULL, &fmt), SW_EINVAL);
    assert_int_equal(sw_format_parse("csv", NULL), SW_EINVAL);
    assert_null(sw_format_name((sw_format)42));
    assert_string_equal(sw_strerror(SW_EFORMAT), "unknown format name");
}

/* ---- sw_format_duration ---- */

static void test_format_duration(void **state) {
    (void)state;
    const struct {
        double ns;
        const char *text;
    } cases[] = {
        {0, "0 ns"},
        {5, "5 ns"},
        {1.5, "1.50 ns"},
        {12.34, "12.3 ns"},
        {812, "812 ns"},
        {999, "999 ns"},
        {999.4, "999 ns"},
        {999.6, "1.00 \xc2\xb5s"},
        {1000, "1.00 \xc2\xb5s"},
        {3410, "3.41 \xc2\xb5s"},
        {9990, "9.99 \xc2\xb5s"},
        {10000, "10.0 \xc2\xb5s"},
        {99940, "99.9 \xc2\xb5s"},
        {99960, "100 \xc2\xb5s"},
        {999400, "999 \xc2\xb5s"},
        {999600, "1.00 ms"},
        {12.7e6, "12.7 ms"},
        {999.7e6, "1.00 s"},
        {4.2e9, "4.20 s"},
        {42e9, "42.0 s"},
        {420e9, "420 s"},
        {4.2e12, "4200 s"},
        {-3410, "-3.41 \xc2\xb5s"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_format_duration(cases[i].ns, buf, sizeof buf);
        if (strcmp(buf, cases[i].text) != 0)
            fail_msg("%g ns: got \"%s\", want \"%s\"", cases[i].ns, buf, cases[i].text);
    }
    assert_string_equal(sw_format_duration(0.0 / 0.0, buf, sizeof buf), "-");
    /* Short buffers are cut, never overrun. */
    char tiny[4] = {'x', 'x', 'x', 'x'};
    assert_ptr_equal(sw_format_duration(812, tiny, sizeof tiny), tiny);
    assert_string_equal(tiny, "812");
    char none[1] = {'x'};
    sw_format_duration(812, none, 0);
    assert_int_equal(none[0], 'x');
    assert_null(sw_format_duration(1, NULL, 8));
}

/* ---- sw_format_scale_time: fastxtend's scale_time (its expected texts are what
 * fastxtend 0.1.7's own scale_time writes; tests/python/test_fastai.py compares the two) ---- */

static void test_format_scale_time(void **state) {
    (void)state;
    const struct {
        double s;
        const char *text;
    } cases[] = {
        {1e-9, "1.000ns"},
        {5e-10, "500.0ps"},
        {1.5e-7, "150.0ns"},
        {0.0009999, "999.9\xc2\xb5s"},
        {0.00099995, "1000.\xc2\xb5s"},
        {0.8382, "838.2ms"},
        {1.0, "1.000 s"},
        {35.63, "35.63 s"},
        {999.96, "1000. s"},
        {1234.5, "1.234ks"},
        {2592000.0, "2.592Ms"},
        {1e-21, "1.000zs"},
        {3e20, "300.0Es"},
        {0, "-"},
        {-0.0015, "-1.500ms"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_format_scale_time(cases[i].s, buf, sizeof buf);
        if (strcmp(buf, cases[i].text) != 0)
            fail_msg("%g s: got \"%s\", want \"%s\"", cases[i].s, buf, cases[i].text);
    }
    assert_string_equal(sw_format_scale_time(0.0 / 0.0, buf, sizeof buf), "-");
    assert_string_equal(sw_format_scale_time(1.0 / 0.0, buf, sizeof buf), "-");
    char tiny[4] = {'x', 'x', 'x', 'x'};
    assert_ptr_equal(sw_format_scale_time(0.8382, tiny, sizeof tiny), tiny);
    assert_string_equal(tiny, "838");
    assert_null(sw_format_scale_time(1, NULL, 8));
}

/* ---- sw_ignite_write_*: Ignite's print_results layouts from cells (their texts against
 * Ignite's own print_results: tests/python/test_ignite.py) ---- */

static char *ignite_text(int (*write)(FILE *, const sw_ignite_row *, size_t),
                         const sw_ignite_row *rows, size_t n, int *rc) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    *rc = write(f, rows, n);
    fclose(f);
    return buf;
}

static void test_ignite_layouts(void **state) {
    (void)state;
    /* A name column is 4 wider than its longest cell in any row, in code points: 14 for
     * "Processing", 13 for "COMPLETED"; "\u03bbmbda" (5 code points, 6 bytes) gets 9
     * spaces of padding. */
    sw_ignite_row rows[] = {
        {"\xce\xbbmbda", "COMPLETED", "0.5", "0.5", "0", "0.5", "0", "0.5", "None"},
        {"Total", "", "0.5", "", NULL, "", NULL, "", ""},
        {"Processing", "None", "1.0", "0.1", "3", "0.5", "0", "0.25", "0.1"},
        {"Dataflow", "None", "not triggered", "None", "None", "None", "None", "None", "None"},
    };
    int rc;
    char *text = ignite_text(sw_ignite_write_handlers, rows, 4, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "\n--------------  -------------  --------------  "));
    assert_non_null(
        strstr(text, "\n\xce\xbbmbda           COMPLETED                 0.5           0.5/0"));
    assert_non_null(strstr(text, "\nProcessing took total 1.0s [min/index: 0.1s/3, max/index: "
                                 "0.5s/0, mean: 0.25s, std: 0.1s]\n"));
    free(text);
    /* Ignite's rows end with Total, Processing and Dataflow: fewer is refused, as are NULL
     * cells (an index may be NULL). */
    free(ignite_text(sw_ignite_write_handlers, rows, 2, &rc));
    assert_int_equal(rc, SW_EINVAL);
    rows[0].mean = NULL;
    free(ignite_text(sw_ignite_write_handlers, rows, 4, &rc));
    assert_int_equal(rc, SW_EINVAL);
    assert_int_equal(sw_ignite_write_handlers(NULL, rows, 4), SW_EINVAL);

    sw_ignite_event ev[] = {{"STARTED", "[]", "0.00001"},
                            {"COMPLETED", "['a']", "not yet triggered"}};
    assert_int_equal(sw_ignite_write_basic(stdout, "p", NULL, "t", ev, 2), SW_EINVAL);
    ev[1].handlers = NULL;
    assert_int_equal(sw_ignite_write_basic(stdout, "p", "d", "t", ev, 2), SW_EINVAL);
    FILE *full = fopen("/dev/full", "w");
    if (full) { /* a write error is SW_EIO */
        setvbuf(full, NULL, _IONBF, 0);
        assert_int_equal(sw_ignite_write_basic(full, "p", "d", "t", ev, 1), SW_EIO);
        fclose(full);
    }
}

static int setup(void **state) {
    fixture *f = malloc(sizeof *f);
    if (f == NULL)
        return -1;
    build_fixture(f);
    *state = f;
    return 0;
}

/* The memory per step: a line in the table and markdown, six columns in CSV (on the "step"
 * roll-up row), an object in JSON; nothing at all in a run without it (the golden files). */
static void test_memory_in_every_format(void **state) {
    fixture *f = *state;
    sw_snapshot s = f->snap;
    s.memory = (sw_memory_summary){.rss_steps = 16,
                                   .rss_max = 3ull << 30,
                                   .rss_last = 2ull << 30,
                                   .allocator_steps = 16,
                                   .peak_allocated_max = 5ull << 29,
                                   .allocated_last = 1ull << 20,
                                   .reserved_max = 6ull << 30,
                                   .reserved_last = 6ull << 30};
    char *text = render(&s, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "\nMemory per step: RSS max 3.00 GiB, at the end 2.00 GiB; "
                                 "allocated peak 2.50 GiB, at the end 1.00 MiB; reserved max "
                                 "6.00 GiB, at the end 6.00 GiB\n"));
    free(text);
    text = render(&s, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(text, "\n- Memory per step: RSS max 3.00 GiB"));
    free(text);
    text = render(&s, SW_FORMAT_JSON);
    assert_non_null(strstr(text, "\"memory\": {"));
    assert_non_null(strstr(text, "\"rss_max\": 3221225472"));
    assert_non_null(strstr(text, "\"peak_allocated_max\": 2684354560"));
    free(text);
    text = render(&s, SW_FORMAT_CSV);
    assert_non_null(strstr(text, ",rss_max_bytes,rss_last_bytes,peak_allocated_max_bytes,"
                                 "allocated_last_bytes,reserved_max_bytes,reserved_last_bytes\n"));
    assert_non_null(
        strstr(text, ",3221225472,2147483648,2684354560,1048576,6442450944,6442450944\n"));
    free(text);
    /* Only the RSS: no allocator part. */
    s.memory.allocator_steps = 0;
    text = render(&s, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Memory per step: RSS max 3.00 GiB, at the end 2.00 GiB\n"));
    assert_null(strstr(text, "allocated"));
    free(text);
    /* None: nothing (the fixture of the golden files). */
    text = render(&f->snap, SW_FORMAT_TABLE);
    assert_null(strstr(text, "Memory"));
    free(text);
}

/* The collectives' bandwidth counters (python/stepwatch/collectives.py: GB/s, one sample a
 * call) become one Collectives block by op and size class, left out of the Counters lines,
 * and the JSON report's "collectives" rows. */
static void test_collectives_bandwidth(void **state) {
    fixture *f = *state;
    sw_snapshot s = f->snap;
    sw_counter_summary c[] = {
        {"comm:all_reduce:1MiB:algbw", 10, 1.0, 0.5, 2.0, 1.5},
        {"comm:all_reduce:1MiB:busbw", 10, 1.5, 0.75, 3.0, 2.25},
        {"comm:all_reduce:4KiB:algbw", 4, 0.1, 0.1, 0.1, 0.1},
        {"comm:all_reduce:4KiB:busbw", 4, 0.15, 0.15, 0.15, 0.15},
        {"comm:all_reduce:bytes", 14, 10502144, 4096, 10502144, 5e6},
        {"comm:all_gather_single:64KiB:busbw", 3, 0.2, 0.2, 0.375, 0.25},
        {"comm:all_gather_single:64KiB:algbw", 3, 0.4, 0.4, 0.75, 0.5},
        {"gpu_util", 5, 93.5, 12.0, 100.0, 80.25},
    };
    s.counters = c;
    s.ncounters = sizeof c / sizeof *c;
    char *text = render(&s, SW_FORMAT_TABLE);
    const char *block = strstr(text, "\nCollectives (bandwidth per op and size class");
    assert_non_null(block);
    /* by op, then by size: all_gather first, all_reduce's 4KiB before its 1MiB */
    const char *ag = strstr(block, "all_gather_single"), *small = strstr(block, "4KiB");
    const char *large = strstr(block, "1MiB");
    assert_true(ag != NULL && small != NULL && large != NULL && ag < small && small < large);
    assert_non_null(strstr(block, "  all_reduce                   1MiB       10       1.5      2.25"
                                  "           3\n"));
    /* the bandwidth counters are not listed again; the bytes and others are */
    assert_null(strstr(text, "comm:all_reduce:1MiB"));
    assert_non_null(strstr(text, "  comm:all_reduce:bytes: last 1.05021e+07"));
    assert_non_null(strstr(text, "  gpu_util: last"));
    free(text);
    text = render(&s, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(text, "| all_gather_single | 64KiB | 3 | 0.5 | 0.25 | 0.375 |\n"));
    free(text);
    text = render(&s, SW_FORMAT_JSON);
    const char *rows = strstr(text,
                              "\"collectives\": [\n    {\n      \"op\": \"all_gather_single\",");
    assert_non_null(rows);
    assert_non_null(strstr(rows, "\"size_class\": \"64KiB\",\n      \"calls\": 3,\n      "
                                 "\"algbw_gbps\": 0.5,\n      \"busbw_gbps\": 0.25,\n      "
                                 "\"best_busbw_gbps\": 0.375\n"));
    free(text);
    /* without them: no block, no member */
    text = render(&f->snap, SW_FORMAT_TABLE);
    assert_null(strstr(text, "Collectives"));
    free(text);
    text = render(&f->snap, SW_FORMAT_JSON);
    assert_null(strstr(text, "\"collectives\""));
    free(text);
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_table),
        cmocka_unit_test(test_golden_lightning),
        cmocka_unit_test(test_golden_fastxtend),
        cmocka_unit_test(test_golden_ignite),
        cmocka_unit_test(test_golden_markdown),
        cmocka_unit_test(test_golden_csv),
        cmocka_unit_test(test_golden_json),
        cmocka_unit_test(test_outputs_for_python),
        cmocka_unit_test(test_table_fits_width),
        cmocka_unit_test(test_write_options),
        cmocka_unit_test(test_text_formats_escape_names),
        cmocka_unit_test(test_csv_shape),
        cmocka_unit_test(test_empty_snapshot),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_write_error_is_eio),
        cmocka_unit_test(test_format_parse),
        cmocka_unit_test(test_format_duration),
        cmocka_unit_test(test_format_scale_time),
        cmocka_unit_test(test_ignite_layouts),
        cmocka_unit_test(test_memory_in_every_format),
        cmocka_unit_test(test_collectives_bandwidth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
