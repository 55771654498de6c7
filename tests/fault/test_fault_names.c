/*
 * test_fault_names.c — bad names in, clean outputs out (docs/reliability.md, "Names"): the
 * one limit behaviour of every name table, the same cut for every kind of name, and every
 * output valid UTF-8 with no control character but line breaks, whatever bytes the names
 * held. Also the regression for a crafted span blob (signed overflow, found by UBSan).
 */
#include "fault_util.h"

#include "runfile/run_store.h"
#include "stepwatch/analysis.h"

/* stderr into path while a call runs. */
static int g_saved = -1;
static void quiet_into(const char *path) {
    fflush(stderr);
    g_saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}
static void loud_again(void) {
    fflush(stderr);
    dup2(g_saved, 2);
    close(g_saved);
}

/* Every table folds new names past its cap into its overflow name and keeps recording:
 * 100,000 distinct action names (a name made per step with a format string) inside steps,
 * 42 phases, 266 counters: every call gets an id, every span is counted (the overflow row
 * holds exactly the spans of the names past the cap), one stderr line per table, a note per
 * table, and the run file keeps them. */
static void test_table_limits(void **state) {
    char err[300], run[300];
    fault_path(err, sizeof err, "limits.txt");
    fault_path(run, sizeof run, "limits.db");
    sw_options o = SW_OPTIONS_INIT;
    o.run_file = run;
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    quiet_into(err);
    char name[32];
    enum { NAMES = 100000 };
    int refused = 0;
    /* Built in: none, fit, epoch, train, valid (phases, so actions too) and step. */
    for (int i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "action %d", i);
        sw_step_begin(p, 1);
        sw_id id = sw_action(p, name);
        refused += id == SW_ID_NONE;
        sw_begin(p, id);
        sw_end(p, id);
        sw_step_end(p);
    }
    int phases = 0, counters = 0;
    SW_TEST_PROFILER(q, 0);
    for (int i = 0; i < SW_MAX_PHASES + 10; i++) {
        snprintf(name, sizeof name, "phase %d", i);
        sw_phase ph = sw_phase_id(q, name);
        phases += ph != SW_PHASE_NONE;
        sw_phase_begin(q, ph);
        sw_phase_end(q, ph);
    }
    for (int i = 0; i < SW_MAX_COUNTERS + 10; i++) {
        snprintf(name, sizeof name, "counter %d", i);
        sw_id c = sw_counter_id(q, name);
        counters += c != SW_ID_NONE;
        sw_counter(q, c, i);
    }
    loud_again();
    assert_int_equal(refused, 0);
    assert_int_equal(phases, SW_MAX_PHASES + 10);
    assert_int_equal(counters, SW_MAX_COUNTERS + 10);
    /* A name already in the table still has its id; the overflow name has the last slot. */
    assert_int_equal(sw_action(p, "action 0"), 6);
    sw_id other = sw_action(p, "action 99999");
    assert_int_equal(other, SW_MAX_ACTIONS - 1);
    assert_string_equal(sw_action_name(p, other), SW_OTHER_ACTIONS);
    assert_int_equal(sw_action_with_category(p, "a data name", SW_CAT_DATA), other);
    assert_string_equal(sw_phase_name(q, sw_phase_id(q, "phase 40")), SW_OTHER_PHASES);
    assert_string_equal(sw_counter_name(q, sw_counter_id(q, "counter 300")), SW_OTHER_COUNTERS);
    const char *said = fault_read_text(err);
    assert_int_equal(fault_count_in(said, "the action table is full (4096 names): 'action 4089' "
                                          "and every later new action name are recorded "
                                          "together as '(other actions)'"),
                     1);
    assert_int_equal(fault_count_in(said, "the phase table is full (32 names): 'phase 26'"), 1);
    assert_int_equal(fault_count_in(said, "the counter table is full (256 names): 'counter 255'"),
                     1);
    /* Names past the cap: 100,000 less the 4,095 - 6 that got a slot of their own. */
    const int past = NAMES - (SW_MAX_ACTIONS - 1 - 6);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->misuse.bad_id, 0);
    const sw_row *row = sw_snapshot_find(s, SW_OTHER_ACTIONS, "all");
    assert_non_null(row);
    assert_int_equal(row->stats.count + row->warmup.count, past);
    const sw_row *step = sw_snapshot_find(s, "step", "all");
    assert_int_equal(step->stats.count + step->warmup.count, NAMES);
    char want[64];
    snprintf(want, sizeof want, "%d lookups of new action names", past + 2);
    assert_non_null(strstr(sw_snapshot_note(s, "limit.actions"), want));
    sw_snapshot_free(s);
    assert_int_equal(sw_snapshot_take(q, &s), 0);
    row = sw_snapshot_find(s, SW_OTHER_PHASES, "all");
    assert_non_null(row);
    assert_int_equal(row->stats.count, 16); /* phases 26..41: past the 26 that got a slot */
    assert_non_null(sw_snapshot_note(s, "limit.phases"));
    assert_non_null(sw_snapshot_note(s, "limit.counters"));
    sw_snapshot_free(s);
    sw_profiler_free(p);
    sw_profiler_free(q);
    /* The run file keeps the overflow row and the note. */
    sw_run *r = NULL;
    assert_int_equal(sw_run_open(run, &r), 0);
    assert_int_equal(sw_run_snapshot(r, &s), 0);
    row = sw_snapshot_find(s, SW_OTHER_ACTIONS, "all");
    assert_non_null(row);
    assert_int_equal(row->stats.count + row->warmup.count, past);
    assert_non_null(strstr(sw_snapshot_note(s, "limit.actions"), "'(other actions)'"));
    sw_snapshot_free(s);
    /* diagnose says so */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_diagnose_write(r, SW_FORMAT_TABLE, out), 0);
    fclose(out);
    assert_non_null(strstr(text, "The actions table is full: new names share one row"));
    free(text);
    sw_run_close(r);
}

/* A model of more modules than the table holds: the first 4,095 rows stay, the last row
 * sums the calls and self times of the rest, one stderr line says so (it cut them off). */
static void test_module_table_folds(void **state) {
    char err[300];
    fault_path(err, sizeof err, "modules.txt");
    SW_TEST_PROFILER(p, 0);
    enum { N = SW_MAX_MODULES + 904 };
    sw_module_row *rows = calloc(N, sizeof *rows);
    char(*paths)[24] = calloc(N, sizeof *paths);
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "layers.%d", i);
        rows[i] = (sw_module_row){.path = paths[i],
                                  .kind = "Linear",
                                  .forward_calls = 2,
                                  .forward_ns = 30,
                                  .forward_self_ns = 10,
                                  .backward_calls = 1,
                                  .backward_self_ns = 5,
                                  .param_bytes = 64};
    }
    quiet_into(err);
    assert_int_equal(sw_set_modules(p, rows, N), 0);
    assert_int_equal(sw_set_modules(p, rows, N), 0);
    loud_again();
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->nmodules, SW_MAX_MODULES);
    assert_string_equal(s->modules[SW_MAX_MODULES - 2].path, "layers.4094");
    const sw_module_row *other = &s->modules[SW_MAX_MODULES - 1];
    const int folded = N - (SW_MAX_MODULES - 1);
    assert_string_equal(other->path, SW_OTHER_MODULES);
    assert_string_equal(other->kind, "905 modules");
    assert_int_equal(other->forward_calls, 2 * folded);
    assert_int_equal(other->forward_self_ns, 10 * folded);
    assert_int_equal(other->forward_ns, 10 * folded);
    assert_int_equal(other->backward_self_ns, 5 * folded);
    assert_int_equal(other->param_bytes, -1);
    assert_int_equal(fault_count_in(fault_read_text(err), "the module table is full (4096 rows): "
                                                          "the 905 modules after 'layers.4094'"),
                     1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    free(rows);
    free(paths);
}

static void test_one_cut_for_every_name(void **state) {
    SW_TEST_PROFILER(p, 0);
    enum { LONG = SW_NAME_MAX + 45, EVEN = SW_NAME_MAX - SW_NAME_MAX % 2 };
    static char ascii[LONG + 1], accented[LONG + 1];
    memset(ascii, 'a', LONG);
    ascii[LONG] = '\0';
    for (int i = 0; i < LONG / 2; i++)
        memcpy(accented + 2 * i, "\xC3\xA9", 2); /* é, 2 bytes */
    accented[LONG / 2 * 2] = '\0';
    sw_id a = sw_action(p, ascii);
    assert_int_equal(strlen(sw_action_name(p, a)), SW_NAME_MAX);
    ascii[SW_NAME_MAX] = 'b'; /* differs only after the cut: the same name */
    assert_int_equal(sw_action(p, ascii), a);
    /* Never inside a character: the é that would be split is left out. */
    sw_id e = sw_action(p, accented);
    assert_int_equal(strlen(sw_action_name(p, e)), EVEN);
    /* Phases and counters are cut the same way. */
    sw_phase ph = sw_phase_id(p, accented);
    assert_int_equal(strlen(sw_phase_name(p, ph)), EVEN);
    sw_id c = sw_counter_id(p, ascii);
    assert_int_not_equal(c, SW_ID_NONE);
    assert_int_equal(sw_counter_id(p, ascii), c);
    sw_counter(p, c, 1.0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(strlen(s->counters[0].name), SW_NAME_MAX);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* A long name (a Lightning hook's, a module path: 600 bytes, over the 255 names were cut to)
 * is kept whole in the run file and shortened only where it is shown. */
static void test_a_long_name_is_kept_whole(void **state) {
    char run[300];
    fault_path(run, sizeof run, "long.db");
    char name[601];
    for (int i = 0; i < 600; i++)
        name[i] = (char)('a' + i % 26);
    name[600] = '\0';
    sw_options o = SW_OPTIONS_INIT;
    o.run_file = run;
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    sw_id id = sw_action(p, name);
    sw_step_begin(p, 1);
    sw_begin(p, id);
    sw_end(p, id);
    sw_step_end(p);
    sw_profiler_free(p);
    sw_run *r = NULL;
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_open(run, &r), 0);
    assert_int_equal(sw_run_snapshot(r, &s), 0);
    assert_non_null(sw_snapshot_find(s, name, "all")); /* whole, all 600 bytes */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_snapshot_write(s, SW_FORMAT_TABLE, out), 0);
    fclose(out);
    assert_null(strstr(text, name)); /* shortened on screen */
    assert_non_null(strstr(text, "abcdefghij"));
    free(text);
    sw_snapshot_free(s);
    sw_run_close(r);
}

/* ---- hostile names: every output is valid UTF-8 without control characters ---- */

/* Is the file valid UTF-8, with no control character but \n (and \t in CSV-like text)? */
static void check_clean_output(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0);
    for (size_t i = 0; i < n;) {
        unsigned char c = buf[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
                fail_msg("%s: control byte 0x%02X at %zu", path, c, i);
            i++;
            continue;
        }
        /* A lead byte and its continuation bytes, not overlong, no surrogate, no C1. */
        size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || i + len > n)
            fail_msg("%s: not UTF-8 at %zu (0x%02X)", path, i, c);
        uint32_t cp = c & (0x7F >> len);
        for (size_t k = 1; k < len; k++) {
            if ((buf[i + k] & 0xC0) != 0x80)
                fail_msg("%s: not UTF-8 at %zu", path, i + k);
            cp = cp << 6 | (buf[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            fail_msg("%s: overlong or invalid code point at %zu", path, i);
        if (cp >= 0x80 && cp <= 0x9F)
            fail_msg("%s: C1 control U+%04X at %zu", path, (unsigned)cp, i);
        i += len;
    }
}

/* A strict JSON parser (Python's) accepts the file. */
static void check_json(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; json.loads(open(sys.argv[1],\"rb\").read()"
             ".decode(\"utf-8\",\"strict\"))' '%s'",
             path);
    assert_int_equal(system(cmd), 0);
}

static const char *const HOSTILE[] = {
    "\x1b[31mred\x1b[0m", /* a terminal escape */
    "bad \xff\xfe bytes", /* not UTF-8 */
    "c1 \xc2\x9b"
    "31m control",              /* U+009B, a C1 control that starts an escape */
    "</script><b>x</b>",        /* HTML */
    "line\nbreak\ttab\rreturn", /* layout characters */
    "cut \xe2\x82",             /* a character cut short */
    "\xed\xa0\x80 surrogate",   /* an encoded surrogate */
    "\"quote\\ and | pipe,",    /* JSON, markdown and CSV syntax */
};
#define NHOSTILE (sizeof HOSTILE / sizeof *HOSTILE)

static void make_hostile_run(const char *path) {
    SW_TEST_PROFILER(p, .run_file = path, .timeline = 1, .name = "run \x1b]0;title\x07 \xff");
    sw_id ids[NHOSTILE];
    for (size_t k = 0; k < NHOSTILE; k++)
        ids[k] = sw_action(p, HOSTILE[k]);
    sw_id counter = sw_counter_id(p, "\x1b[2Jcounter \xc0\x80");
    sw_phase phase = sw_phase_id(p, "phase \x1b[1m\xfe");
    sw_phase_begin(p, phase);
    for (int step = 0; step < 20; step++) {
        sw_step_begin(p, 4);
        for (size_t k = 0; k < NHOSTILE; k++) {
            sw_begin(p, ids[k]);
            sw_test_spin(20000 * (k + 1));
            sw_end(p, ids[k]);
        }
        sw_counter(p, counter, step);
        sw_step_end(p);
    }
    sw_phase_end(p, phase);
    sw_profiler_free(p);
}

/* `stepwatch COMMAND` writing OUT (named in command as %s): clean, and strict JSON if json. */
static void check_command(const char *command, int json) {
    char out[300], err[300], args[1400];
    fault_path(out, sizeof out, "out");
    fault_path(err, sizeof err, "err.txt");
    snprintf(args, sizeof args, command, out);
    assert_int_equal(fault_cli(args, err), 0);
    check_clean_output(out);
    if (json)
        check_json(out);
}

static void test_hostile_names_in_every_output(void **state) {
    char run[300], command[1000];
    fault_path(run, sizeof run, "hostile.db");
    make_hostile_run(run);
    /* Every subcommand that writes, in every format it writes. */
    static const char *const jobs[][2] = {
        {"report", "table"},  {"report", "lightning"}, {"report", "fastxtend"},
        {"report", "ignite"}, {"report", "md"},        {"report", "csv"},
        {"report", "json"},   {"diagnose", "table"},   {"diagnose", "md"},
        {"diagnose", "json"}, {"compare", "table"},    {"compare", "md"},
        {"compare", "csv"},   {"compare", "json"},
    };
    for (size_t i = 0; i < sizeof jobs / sizeof *jobs; i++) {
        int twice = strcmp(jobs[i][0], "compare") == 0;
        snprintf(command, sizeof command, "%s '%s' %s%s%s -f %s -o '%%s'", jobs[i][0], run,
                 twice ? "'" : "", twice ? run : "", twice ? "'" : "", jobs[i][1]);
        check_command(command, strcmp(jobs[i][1], "json") == 0);
    }
    snprintf(command, sizeof command, "html '%s' -o '%%s'", run);
    check_command(command, 0);
    char page[300];
    fault_path(page, sizeof page, "out");
    assert_null(strstr(fault_read_text(page), "</script><b>")); /* inert inside the page */
    snprintf(command, sizeof command, "export '%s' --chrome '%%s'", run);
    check_command(command, 1);
    snprintf(command, sizeof command, "export '%s' --steps-csv '%%s'", run);
    check_command(command, 0);
}

/* Found by UBSan: span deltas that overflow int64 gave undefined behaviour in the decoder;
 * they are a corrupt blob. */
static void test_crafted_span_blob(void **state) {
    unsigned char blob[64];
    size_t n = 0;
    /* action 0, phase 0, depth 0, step delta zigzag(INT64_MAX) twice, start 0, duration 1 */
    for (int span = 0; span < 2; span++) {
        blob[n++] = 0;
        blob[n++] = 0;
        blob[n++] = 0;
        for (int k = 0; k < 9; k++) /* 0xFFFFFFFFFFFFFFFE: zigzag of INT64_MAX */
            blob[n++] = k == 0 ? 0xFE : 0xFF;
        blob[n++] = 0x01;
        blob[n++] = 0;
        blob[n++] = 1;
    }
    sw_span_record spans[4];
    size_t got = 0;
    assert_int_equal(sw__spans_decode(blob, n, 0, spans, 4, &got), SW_ECORRUPT);
}

/* Found by fuzz_decode's round trip: a span of step INT64_MAX next to one outside any step
 * (-1) made the encoder's delta overflow. Extremes encode and decode back unchanged. */
static void test_span_encoding_extremes(void **state) {
    sw_span_record spans[4] = {
        {.action = 1, .step = -1, .start_ns = 0, .duration_ns = 1},
        {.action = 2, .step = INT64_MAX, .start_ns = (uint64_t)INT64_MAX, .duration_ns = 2},
        {.action = 3, .step = -1, .start_ns = 0, .duration_ns = (uint64_t)INT64_MAX},
        {.action = 4, .step = 0, .start_ns = 5, .duration_ns = 0},
    };
    unsigned char *blob = NULL;
    size_t size = 0, n = 0;
    assert_int_equal(sw__spans_encode(spans, 4, &blob, &size), 0);
    sw_span_record back[4];
    assert_int_equal(sw__spans_decode(blob, size, 0, back, 4, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(back, spans, sizeof spans);
    free(blob);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_limits),
        cmocka_unit_test(test_module_table_folds),
        cmocka_unit_test(test_one_cut_for_every_name),
        cmocka_unit_test(test_a_long_name_is_kept_whole),
        cmocka_unit_test(test_hostile_names_in_every_output),
        cmocka_unit_test(test_crafted_span_blob),
        cmocka_unit_test(test_span_encoding_extremes),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
