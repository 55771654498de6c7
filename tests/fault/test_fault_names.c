/*
 * test_fault_names.c — bad names in, clean outputs out (docs/reliability.md, "Names"): the
 * one limit behaviour of every name table, the same cut for every kind of name, and every
 * output valid UTF-8 with no control character but line breaks, whatever bytes the names
 * held. Also the regression for a crafted span blob (signed overflow, found by UBSan).
 */
#include "fault_util.h"

#include "runfile/run_store.h"

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

static void test_table_limits(void **state) {
    char err[300];
    fault_path(err, sizeof err, "limits.txt");
    SW_TEST_PROFILER(p, 0);
    quiet_into(err);
    char name[32];
    int accepted = 0;
    /* Built in: none, fit, epoch, train, valid (phases, so actions too) and step. */
    for (int i = 0; i < SW_MAX_ACTIONS + 10; i++) {
        snprintf(name, sizeof name, "action %d", i);
        accepted += sw_action(p, name) != SW_ID_NONE;
    }
    int phases = 0, counters = 0;
    SW_TEST_PROFILER(q, 0);
    for (int i = 0; i < SW_MAX_PHASES + 10; i++) {
        snprintf(name, sizeof name, "phase %d", i);
        phases += sw_phase_id(q, name) != SW_PHASE_NONE;
    }
    for (int i = 0; i < SW_MAX_COUNTERS + 10; i++) {
        snprintf(name, sizeof name, "counter %d", i);
        counters += sw_counter_id(q, name) != SW_ID_NONE;
    }
    loud_again();
    assert_int_equal(accepted, SW_MAX_ACTIONS - 6);
    assert_int_equal(phases, SW_MAX_PHASES - 5);
    assert_int_equal(counters, SW_MAX_COUNTERS);
    /* A name already in the table still has its id; the full table said so once. */
    assert_int_equal(sw_action(p, "action 0"), 6);
    const char *said = fault_read_text(err);
    assert_int_equal(fault_count_in(said, "the action table is full (4096 names): 'action 4090'"),
                     1);
    assert_int_equal(fault_count_in(said, "the phase table is full (32 names)"), 1);
    assert_int_equal(fault_count_in(said, "the counter table is full (256 names)"), 1);
    /* Spans of the name that got no id are counted, not timed. */
    sw_id none = sw_action(p, "one too many");
    sw_begin(p, none);
    sw_end(p, none);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->misuse.bad_id, 2); /* the begin and the end */
    sw_snapshot_free(s);
    sw_profiler_free(p);
    sw_profiler_free(q);
}

static void test_one_cut_for_every_name(void **state) {
    SW_TEST_PROFILER(p, 0);
    char ascii[400], accented[400];
    memset(ascii, 'a', 300);
    ascii[300] = '\0';
    for (int i = 0; i < 150; i++)
        memcpy(accented + 2 * i, "\xC3\xA9", 2); /* é, 2 bytes: 300 bytes in all */
    accented[300] = '\0';
    sw_id a = sw_action(p, ascii);
    assert_int_equal(strlen(sw_action_name(p, a)), SW_NAME_MAX);
    ascii[SW_NAME_MAX] = 'b'; /* differs only after the cut: the same name */
    assert_int_equal(sw_action(p, ascii), a);
    /* Never inside a character: 127 é are 254 bytes. */
    sw_id e = sw_action(p, accented);
    assert_int_equal(strlen(sw_action_name(p, e)), 254);
    /* Phases and counters are cut the same way. */
    sw_phase ph = sw_phase_id(p, accented);
    assert_int_equal(strlen(sw_phase_name(p, ph)), 254);
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
        cmocka_unit_test(test_one_cut_for_every_name),
        cmocka_unit_test(test_hostile_names_in_every_output),
        cmocka_unit_test(test_crafted_span_blob),
        cmocka_unit_test(test_span_encoding_extremes),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
