/*
 * test_run_cli.c — the stepwatch command on deterministic run files: a golden file per
 * report format, merge, exports, and the exit codes for bad input.
 *
 * It leaves its files in $SW_BUILD_DIR/tests/cli_fixture/ for tests/cli.cmake (the Chrome
 * trace checked with Python's json module). SW_UPDATE_GOLDEN=1 rewrites the golden files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../cli/commands.h" /* the exit codes */
#include "test_run_fixture.h"

static char g_dir[512], g_cli[512], g_rank0[600], g_rank1[600];

static int setup(void **state) {
    const char *build = getenv("SW_BUILD_DIR");
    if (build == NULL)
        build = ".";
    snprintf(g_cli, sizeof g_cli, "%s/stepwatch", build);
    snprintf(g_dir, sizeof g_dir, "%s/tests/cli_fixture", build);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd) != 0)
        return -1;
    snprintf(g_rank0, sizeof g_rank0, "%s/rank0.db", g_dir);
    snprintf(g_rank1, sizeof g_rank1, "%s/rank1.db", g_dir);
    return sw_test_write_fixture(g_rank0, 0) || sw_test_write_fixture(g_rank1, 1);
}

/* Run "stepwatch ARGS" with stdout to out (may be NULL); returns the exit code. */
static int cli(const char *out, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s/stderr.txt'", g_cli, args,
             out ? out : "/dev/null", g_dir);
    int status = system(cmd);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

static void check_golden(const char *produced, const char *golden_name) {
    char golden[600];
    snprintf(golden, sizeof golden, "%s/%s", SW_TEST_GOLDEN_DIR, golden_name);
    char *got = slurp(produced);
    assert_non_null(got);
    const char *update = getenv("SW_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(golden, "wb");
        assert_non_null(f);
        fputs(got, f);
        fclose(f);
    }
    char *want = slurp(golden);
    if (want == NULL)
        fail_msg("missing golden file %s (run with SW_UPDATE_GOLDEN=1)", golden);
    if (strcmp(got, want) != 0)
        fail_msg("%s differs from %s", produced, golden);
    free(got);
    free(want);
}

/* Every format the library writes (sw_format_name from 0: its writer table is the one list),
 * each against its golden file. */
static void test_report_formats(void **state) {
    for (sw_format f = 0; sw_format_name(f) != NULL; f++) {
        const char *name = f == SW_FORMAT_MARKDOWN ? "md" : sw_format_name(f);
        const char *ext = f == SW_FORMAT_MARKDOWN ? "md"
                          : f == SW_FORMAT_CSV    ? "csv"
                          : f == SW_FORMAT_JSON   ? "json"
                                                  : "txt";
        char out[600], args[800], golden[64];
        snprintf(out, sizeof out, "%s/report_%s.%s", g_dir, name, ext);
        snprintf(args, sizeof args, "report '%s' --format %s", g_rank0, name);
        assert_int_equal(cli(out, args), 0);
        snprintf(golden, sizeof golden, "cli_report_%s.%s", name, ext);
        check_golden(out, golden);
    }
}

static void test_merge_and_export(void **state) {
    char merged[600], args[2000], out[600];
    snprintf(merged, sizeof merged, "%s/merged.db", g_dir);
    snprintf(args, sizeof args, "merge '%s' '%s' -o '%s'", g_rank0, g_rank1, merged);
    assert_int_equal(cli(NULL, args), 0);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_IO); /* exists */
    snprintf(args, sizeof args, "merge '%s' '%s' -o '%s' --force", g_rank0, g_rank1, merged);
    assert_int_equal(cli(NULL, args), 0);

    snprintf(out, sizeof out, "%s/merged_table.txt", g_dir);
    snprintf(args, sizeof args, "report '%s'", merged);
    assert_int_equal(cli(out, args), 0);
    check_golden(out, "cli_report_merged_table.txt");

    snprintf(out, sizeof out, "%s/rank1_table.txt", g_dir);
    snprintf(args, sizeof args, "report '%s' --rank 1", merged);
    assert_int_equal(cli(out, args), 0);
    snprintf(args, sizeof args, "report '%s' --rank 5", merged);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_DATA);

    char trace[600], csv[600];
    snprintf(trace, sizeof trace, "%s/trace.json", g_dir);
    snprintf(csv, sizeof csv, "%s/steps.csv", g_dir);
    snprintf(args, sizeof args, "export '%s' --chrome '%s' --steps-csv '%s'", merged, trace, csv);
    assert_int_equal(cli(NULL, args), 0);
    check_golden(csv, "cli_export_steps.csv");
    char *json = slurp(trace);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"pid\":1"));
    free(json);
}

static void test_exit_codes(void **state) {
    char args[1200], text[600];
    assert_int_equal(cli(NULL, "--version"), 0);
    assert_int_equal(cli(NULL, "--help"), 0);
    assert_int_equal(cli(NULL, "frobnicate"), SWCLI_EXIT_USAGE);
    static const char *const commands[] = {"run", "report", "export", "merge"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "%s --help", commands[i]);
        assert_int_equal(cli(NULL, args), 0);
        snprintf(args, sizeof args, "help %s", commands[i]);
        assert_int_equal(cli(NULL, args), 0);
    }
    assert_int_equal(cli(NULL, "report"), SWCLI_EXIT_USAGE);
    snprintf(args, sizeof args, "report '%s' --format nope", g_rank0);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_USAGE);
    snprintf(args, sizeof args, "report '%s/missing.db'", g_dir);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_DATA);
    snprintf(text, sizeof text, "%s/stderr.txt", g_dir);
    char *err = slurp(text);
    assert_non_null(strstr(err, "no such file"));
    free(err);

    snprintf(text, sizeof text, "%s/notes.txt", g_dir);
    FILE *f = fopen(text, "w");
    fputs("hello\n", f);
    fclose(f);
    snprintf(args, sizeof args, "report '%s'", text);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_DATA);
    snprintf(args, sizeof args, "export '%s' --chrome -", text);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_DATA);
    snprintf(args, sizeof args, "export '%s'", g_rank0);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_USAGE);
    snprintf(args, sizeof args, "export '%s' --chrome /nonexistent/dir/x.json", g_rank0);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_IO);
    snprintf(args, sizeof args, "merge '%s' -o '%s/m2.db'", text, g_dir);
    assert_int_equal(cli(NULL, args), SWCLI_EXIT_DATA);
}

/* run: a program that is not Python gets STEPWATCH_RUN_FILE; its exit code comes back. */
static void test_run_command(void **state) {
    char out[600], args[1200];
    snprintf(out, sizeof out, "%s/run_env.txt", g_dir);
    snprintf(args, sizeof args,
             "run --run-file '%s/r{rank}.db' --timeline --on-full block --ring-capacity 512"
             " -- sh -c 'echo $STEPWATCH_RUN_FILE $STEPWATCH_TIMELINE $STEPWATCH_ON_FULL"
             " $STEPWATCH_RING_CAPACITY; exit 7'",
             g_dir);
    assert_int_equal(cli(out, args), 7);
    char *got = slurp(out);
    char want[700];
    snprintf(want, sizeof want, "%s/r{rank}.db 1 block 512\n", g_dir);
    assert_string_equal(got, want);
    free(got);
    assert_int_equal(cli(NULL, "run"), SWCLI_EXIT_USAGE);
    assert_int_equal(cli(NULL, "run --ring-capacity 99999999 -- true"), SWCLI_EXIT_USAGE);
    assert_int_equal(cli(NULL, "run --ring-capacity 12x -- true"), SWCLI_EXIT_USAGE);
    assert_int_equal(cli(NULL, "run -- /nonexistent/program"), 127);
}

/* "stepwatch ARGS" (printf's fmt and what follows) ends with exit code rc and exactly
 * stderr_text on standard error. */
static void expect(int rc, const char *stderr_text, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect(int rc, const char *stderr_text, const char *fmt, ...) {
    char args[2000], path[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int got = cli(NULL, args);
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    char *err = slurp(path);
    assert_non_null(err);
    if (got != rc || strcmp(err, stderr_text) != 0)
        fail_msg("stepwatch %s: exit %d, stderr:\n%s\nwanted exit %d, stderr:\n%s", args, got, err,
                 rc, stderr_text);
    free(err);
}

#define TRY(cmd) "Try 'stepwatch " cmd " --help'.\n"

/* The options the subcommands share (cli/options.c) with their exact messages: help, unknown
 * options, the operands, --rank, --format, and the number checks. */
static void test_common_options(void **state) {
    static const char *const commands[] = {"run",  "report",  "export",   "merge",
                                           "html", "compare", "diagnose", "serve"};
    char args[1000], out[600], want[1000], merged[600];
    snprintf(out, sizeof out, "%s/help.txt", g_dir);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        static const char *const forms[] = {"%s --help", "%s -h", "help %s"};
        for (size_t f = 0; f < 3; f++) {
            snprintf(args, sizeof args, forms[f], commands[i]);
            assert_int_equal(cli(out, args), SWCLI_EXIT_OK);
            char *help = slurp(out);
            snprintf(want, sizeof want, "usage: stepwatch %s ", commands[i]);
            assert_true(strncmp(help, want, strlen(want)) == 0);
            assert_null(strstr(help, "{formats}")); /* the list is filled in */
            if (strcmp(commands[i], "report") == 0) /* it writes every format: names each */
                for (sw_format fmt = 0; sw_format_name(fmt) != NULL; fmt++)
                    assert_non_null(
                        strstr(help, fmt == SW_FORMAT_MARKDOWN ? "md" : sw_format_name(fmt)));
            free(help);
        }
        /* getopt_long names the bad option; the subcommand points at its help. */
        snprintf(want, sizeof want,
                 "%s: unrecognized option '--no-such-option'\nTry 'stepwatch %s --help'.\n",
                 commands[i], commands[i]);
        expect(SWCLI_EXIT_USAGE, want, "%s --no-such-option", commands[i]);
    }
    expect(SWCLI_EXIT_USAGE, "report: option '--output' requires an argument\n" TRY("report"),
           "report '%s' --output", g_rank0);

    /* The operands each subcommand wants, and its required options. */
    expect(2, "stepwatch: report needs a run file\n" TRY("report"), "report");
    expect(2, "stepwatch: report takes one run file\n" TRY("report"), "report '%s' '%s'", g_rank0,
           g_rank0);
    expect(2, "stepwatch: diagnose needs a run file\n" TRY("diagnose"), "diagnose");
    expect(2, "stepwatch: diagnose takes one run file\n" TRY("diagnose"), "diagnose '%s' '%s'",
           g_rank0, g_rank0);
    expect(2,
           "stepwatch: compare needs two run files: the baseline and the new run\n" TRY("compare"),
           "compare '%s'", g_rank0);
    expect(2, "stepwatch: html takes one run file, or two to compare\n" TRY("html"),
           "html -o x.html");
    expect(2, "stepwatch: html needs an output file: -o OUT.html\n" TRY("html"), "html '%s'",
           g_rank0);
    expect(2, "stepwatch: export takes one run file\n" TRY("export"), "export --chrome -");
    expect(
        2,
        "stepwatch: export needs --chrome OUT, --steps-csv OUT or --collapsed OUT\n" TRY("export"),
        "export '%s'", g_rank0);
    expect(2, "stepwatch: merge needs -o OUT\n" TRY("merge"), "merge '%s'", g_rank0);
    expect(2, "stepwatch: merge needs run files\n" TRY("merge"), "merge -o m.db");
    expect(2,
           "stepwatch: run needs a command: stepwatch run -- CMD ARGS... (or -m MODULE, -c "
           "CODE)\n" TRY("run"),
           "run");

    /* --rank: a number from 0 to 1000000, in digits only (strtol alone takes " 1", "+1"). */
    static const char *const bad_ranks[] = {"x",  "-1",  "1000001", "1x",
                                            "",   "1.0", " 1",      "+1",
                                            "01", "1 ",  "\t1",     "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_ranks / sizeof *bad_ranks; i++) {
        snprintf(
            want, sizeof want,
            "stepwatch: --rank takes a rank number from 0 to 1000000, not '%s'\n" TRY("report"),
            bad_ranks[i]);
        expect(SWCLI_EXIT_USAGE, want, "report '%s' --rank '%s'", g_rank0, bad_ranks[i]);
    }
    expect(SWCLI_EXIT_USAGE,
           "stepwatch: --rank takes a rank number from 0 to 1000000, not '+1'\n" TRY("report"),
           "report '%s' -r +1", g_rank0);
    snprintf(merged, sizeof merged, "%s/merged.db", g_dir); /* test_merge_and_export's */
    snprintf(want, sizeof want, "stepwatch: %s: no rank 1000000 in this run file\n", merged);
    expect(SWCLI_EXIT_DATA, want, "report '%s' -r 1000000", merged);

    /* --format: what each subcommand writes, named in the message. */
    expect(2,
           "stepwatch: unknown format 'nope' (table, lightning, fastxtend, ignite, md, csv, "
           "json)\n" TRY("report"),
           "report '%s' --format nope", g_rank0);
    expect(
        2,
        "stepwatch: compare cannot write format 'ignite' (table, md, csv, json)\n" TRY("compare"),
        "compare '%s' '%s' -f ignite", g_rank0, g_rank0);
    expect(2, "stepwatch: diagnose cannot write format 'csv' (table, md, json)\n" TRY("diagnose"),
           "diagnose '%s' --format=csv", g_rank0);
    expect(2, "stepwatch: merge cannot write format 'csv' (table, md, json)\n" TRY("merge"),
           "merge '%s' -o m.db -f csv", g_rank0);
    static const char *const run_format_forms[] = {"-f", "--format"};
    for (size_t i = 0; i < 2; i++)
        expect(2,
               "stepwatch: unknown format 'nope' (table, lightning, fastxtend, ignite, md, csv, "
               "json)\n" TRY("run"),
               "run %s nope -- true", run_format_forms[i]);
    snprintf(out, sizeof out, "%s/diagnose.md", g_dir);
    snprintf(args, sizeof args, "diagnose '%s' --format markdown", g_rank0);
    assert_int_equal(cli(out, args), SWCLI_EXIT_OK);

    /* run's checked values. */
    static const unsigned bad_capacities[] = {0, SW_MAX_RING_CAPACITY + 1};
    for (size_t i = 0; i < 2; i++) {
        snprintf(want, sizeof want,
                 "stepwatch: --ring-capacity takes a number of events from 1 to %u, not '%u'\n" TRY(
                     "run"),
                 SW_MAX_RING_CAPACITY, bad_capacities[i]);
        expect(2, want, "run --ring-capacity %u -- true", bad_capacities[i]);
    }
    expect(2, "stepwatch: --on-full takes drop or block, not 'wait'\n" TRY("run"),
           "run --on-full wait -- true");
    static const char *const bad_warmups[] = {"-1", "+1", " 1", "01"};
    for (size_t i = 0; i < sizeof bad_warmups / sizeof *bad_warmups; i++) {
        snprintf(want, sizeof want,
                 "stepwatch: --warmup takes a number of steps, not '%s'\n" TRY("run"),
                 bad_warmups[i]);
        expect(2, want, "run --warmup '%s' -- true", bad_warmups[i]);
    }
    expect(
        2,
        "stepwatch: --ring-capacity takes a number of events from 1 to 4194304, not '+512'\n" TRY(
            "run"),
        "run --ring-capacity +512 -- true");
    expect(
        2,
        "stepwatch: --device-stats takes an interval in seconds from 0.01 to 3600, not ' 1'\n" TRY(
            "run"),
        "run '--device-stats= 1' -- true");
    expect(2, "stepwatch: --forward takes patch or hooks, not 'hook'\n" TRY("run"),
           "run --forward hook -- true");
    snprintf(args, sizeof args, "run --ring-capacity %u --run-file '%s/r.db' -- true",
             SW_MAX_RING_CAPACITY, g_dir);
    assert_int_equal(cli(NULL, args), 0);
}

/* At the end `run` names the run files the program wrote, {rank} expanded, or says that none
 * was written; the exit status is the program's. */
static void test_run_names_the_files_written(void **state) {
    char want[1200];
    snprintf(want, sizeof want, "stepwatch: no run file was written (%s/none-{rank}.db)\n", g_dir);
    expect(3, want, "run --run-file '%s/none-{rank}.db' -- sh -c 'exit 3'", g_dir);
    snprintf(want, sizeof want,
             "stepwatch: run file: %s/r-0.db, %s/r-12.db (2 files: 'stepwatch merge' joins "
             "ranks)\n",
             g_dir, g_dir);
    expect(0, want,
           "run --run-file '%s/r-{rank}.db' -- sh -c 'touch %s/r-0.db %s/r-12.db "
           "%s/r-x.db %s/r-.db'",
           g_dir, g_dir, g_dir, g_dir, g_dir);
    snprintf(want, sizeof want, "stepwatch: run file: %s/one.db\n", g_dir);
    expect(0, want, "run --run-file '%s/one.db' -- touch '%s/one.db'", g_dir, g_dir);
    snprintf(want, sizeof want, "stepwatch: run file: %s/p-7-1234.db\n", g_dir);
    expect(0, want, "run --run-file '%s/p-{rank}-{pid}.db' -- touch '%s/p-7-1234.db' '%s/p-7-.db'",
           g_dir, g_dir, g_dir);
}

/* -f is --format in run as in every command; the old "run -f PATH" (the run file) is refused
 * naming --run-file, and nothing runs. */
static void test_run_f_is_format(void **state) {
    char out[600], want[1200];
    snprintf(out, sizeof out, "%s/run_format.txt", g_dir);
    assert_int_equal(cli(out, "run -f md -- sh -c 'echo $STEPWATCH_FORMAT'"), 0);
    char *got = slurp(out);
    assert_string_equal(got, "md\n");
    free(got);
    /* -o is --output as in every command: the Python command's report goes there. */
    assert_int_equal(cli(out, "run -o rep.txt -- sh -c 'echo $STEPWATCH_OUTPUT'"), 0);
    got = slurp(out);
    assert_string_equal(got, "rep.txt\n");
    free(got);
    assert_int_equal(cli(out, "run --output rep.csv -- sh -c 'echo $STEPWATCH_OUTPUT'"), 0);
    got = slurp(out);
    assert_string_equal(got, "rep.csv\n");
    free(got);
    snprintf(want, sizeof want,
             "stepwatch: -f is --format, a report format, not '%s/old.db'; the run file is "
             "--run-file %s/old.db\n" TRY("run"),
             g_dir, g_dir);
    expect(2, want, "run -f '%s/old.db' -- touch '%s/old-ran'", g_dir, g_dir);
    snprintf(out, sizeof out, "%s/old-ran", g_dir);
    assert_int_equal(access(out, F_OK), -1); /* the program did not run */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_formats),  cmocka_unit_test(test_merge_and_export),
        cmocka_unit_test(test_exit_codes),      cmocka_unit_test(test_run_names_the_files_written),
        cmocka_unit_test(test_run_command),     cmocka_unit_test(test_common_options),
        cmocka_unit_test(test_run_f_is_format),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
