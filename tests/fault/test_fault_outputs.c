/* test_fault_outputs.c — outputs safe to open (issue 29 item 8): names a spreadsheet would run
 * as formulas, HTML in names, and bidirectional controls (U+202E reverses the text after it)
 * through every writer of a real run file: report (table, markdown, CSV), compare (table,
 * markdown, CSV), export --steps-csv, diagnose (table, markdown), HTML. One rule per format:
 * no CSV field starts with = + - @ or a tab, markdown shows HTML as text, and no output holds
 * a live bidirectional control. */
#include "fault_util.h"

static const char *const NAMES[] = {"=HYPERLINK(\"http://x\",\"y\")",
                                    "+1+1",
                                    "-2+3",
                                    "@SUM(A1:A2)",
                                    "\tcmd",
                                    "safe\xE2\x80\xAEtxt.exe",
                                    "<svg onload=alert(1)>",
                                    "<img src=x onerror=alert(1)>"};
#define NNAMES (sizeof NAMES / sizeof *NAMES)

static char g_run[300];

static int setup(void **state) {
    if (fault_make_dir(state) != 0)
        return -1;
    fault_path(g_run, sizeof g_run, "names.db");
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = g_run,
                    .no_signal_handlers = 1,
                    .name = "=cmd\xE2\x80\xAE"};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        return -1;
    sw_phase train = sw_phase_id(p, "-phase\xE2\x81\xA6");
    sw_phase_begin(p, train);
    for (int i = 0; i < 20; i++) {
        sw_step_begin(p, 1);
        for (size_t k = 0; k < NNAMES; k++) {
            sw_id a = sw_action(p, NAMES[k]);
            sw_begin(p, a);
            sw_end(p, a);
        }
        sw_step_end(p);
    }
    sw_phase_end(p, train);
    sw_profiler_free(p);
    return 0;
}

typedef enum { TEXT, CSV, MARKDOWN, HTML } kind;

/* No live bidirectional control (E2 80 AA-AE, E2 81 A6-A9, E2 80 8E/8F) anywhere. */
static void no_bidi(const char *what, const char *text) {
    for (const unsigned char *s = (const unsigned char *)text; *s; s++)
        if (s[0] == 0xE2 &&
            ((s[1] == 0x80 && ((s[2] >= 0xAA && s[2] <= 0xAE) || s[2] == 0x8E || s[2] == 0x8F)) ||
             (s[1] == 0x81 && s[2] >= 0xA6 && s[2] <= 0xA9)))
            fail_msg("%s holds a live bidirectional control: %.80s", what, (const char *)s);
}

/* No field of any line starts a formula: after an optional opening quote, not = + - @ tab. */
static void no_formula(const char *what, const char *csv) {
    const char *field = csv;
    int in_quotes = 0;
    for (const char *s = csv;; s++) {
        if (s == field) {
            const char *start = *field == '"' ? field + 1 : field;
            /* (a number of ours, unquoted, may start with a minus) */
            int number = *field != '"' && start[0] == '-' && start[1] >= '0' && start[1] <= '9';
            if (*start && strchr("=+-@\t", *start) && !number)
                fail_msg("%s: a field starts a formula: %.60s", what, field);
        }
        if (*s == '\0')
            break;
        if (*s == '"')
            in_quotes = !in_quotes;
        else if (!in_quotes && (*s == ',' || *s == '\n'))
            field = s + 1;
    }
}

static char *capture(int (*fn)(void *ctx, FILE *out), void *ctx) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(fn(ctx, out), 0);
    fclose(out);
    return text;
}

typedef struct job {
    sw_run *run;
    sw_snapshot *snap;
    sw_format fmt;
} job;

static int report(void *ctx, FILE *out) {
    job *j = ctx;
    return sw_snapshot_write(j->snap, j->fmt, out);
}
static int compare(void *ctx, FILE *out) {
    job *j = ctx;
    return sw_compare_write(j->snap, j->snap, j->fmt, out);
}
static int steps_csv(void *ctx, FILE *out) {
    return sw_run_export_steps_csv(((job *)ctx)->run, out);
}
static int diagnose(void *ctx, FILE *out) {
    job *j = ctx;
    return sw_diagnose_write(j->run, j->fmt, out);
}
static int html(void *ctx, FILE *out) {
    return sw_html_write(((job *)ctx)->run, out);
}

static void check(const char *what, kind k, const char *text) {
    no_bidi(what, text);
    if (k == CSV)
        no_formula(what, text);
    if (k == MARKDOWN || k == HTML) {
        if (strstr(text, "<svg") || strstr(text, "<img"))
            fail_msg("%s holds live HTML from a name", what);
    }
    if (k == MARKDOWN && strstr(text, "&lt;svg onload=alert(1)&gt;") == NULL &&
        strstr(text, "HYPERLINK") != NULL)
        fail_msg("%s does not show the HTML name as text", what);
    /* The names are still there, readable: the bidi control as an escape. */
    if (k != HTML && strstr(text, "HYPERLINK") && !strstr(text, "\\u202E"))
        fail_msg("%s lost the escaped control", what);
}

static void test_every_writer_is_safe_to_open(void **state) {
    (void)state;
    job j = {0};
    assert_int_equal(sw_run_open(g_run, &j.run), 0);
    assert_int_equal(sw_run_snapshot(j.run, &j.snap), 0);
    const struct {
        const char *what;
        int (*fn)(void *, FILE *);
        sw_format fmt;
        kind k;
    } CASES[] = {
        {"report table", report, SW_FORMAT_TABLE, TEXT},
        {"report md", report, SW_FORMAT_MARKDOWN, MARKDOWN},
        {"report csv", report, SW_FORMAT_CSV, CSV},
        {"compare table", compare, SW_FORMAT_TABLE, TEXT},
        {"compare md", compare, SW_FORMAT_MARKDOWN, MARKDOWN},
        {"compare csv", compare, SW_FORMAT_CSV, CSV},
        {"export --steps-csv", steps_csv, SW_FORMAT_CSV, CSV},
        {"diagnose table", diagnose, SW_FORMAT_TABLE, TEXT},
        {"diagnose md", diagnose, SW_FORMAT_MARKDOWN, MARKDOWN},
        {"html", html, SW_FORMAT_TABLE, HTML},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        j.fmt = CASES[i].fmt;
        char *text = capture(CASES[i].fn, &j);
        check(CASES[i].what, CASES[i].k, text);
        free(text);
    }
    /* CSV: a formula-looking name reads back as itself behind one quote. */
    j.fmt = SW_FORMAT_CSV;
    char *csv = capture(report, &j);
    assert_non_null(strstr(csv, "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""));
    assert_non_null(strstr(csv, "\"'@SUM(A1:A2)\""));
    assert_non_null(strstr(csv, "safe\\u202Etxt.exe"));
    free(csv);
    sw_snapshot_free(j.snap);
    sw_run_close(j.run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_writer_is_safe_to_open),
    };
    return cmocka_run_group_tests(tests, setup, fault_remove_dir);
}
