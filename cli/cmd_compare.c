/* cmd_compare.c — stepwatch compare A B [--format F] [--fail-on-regression] [-o OUT] */
#include "common.h"

#include <getopt.h>
#include <string.h>

static const char HELP[] =
    "usage: stepwatch compare BASELINE NEW [--format F] [--fail-on-regression] [-o OUT]\n\n"
    "Compare two run files action by action (all phases, then per phase): mean, p50, p99 and\n"
    "total of each, the change of the mean, and a verdict. A change is 'slower' or 'faster'\n"
    "when a Mann-Whitney U test on the two histograms gives p < 0.01 and the mean moved by\n"
    "at least 5 %; actions in only one run are 'new' or 'gone'. Regressions come first.\n\n"
    "  -f, --format F          table (default), md, csv, json\n"
    "      --fail-on-regression  exit with status 1 when anything got significantly slower\n"
    "  -o, --output OUT        write to OUT instead of standard output\n"
    "  -h, --help              this help\n\n"
    "Exit status: 0 done, 1 regression found (with --fail-on-regression), 2 bad usage,\n"
    "3 unreadable run file, 4 cannot write the output.\n";

/* The snapshot of a run file; an exit code (and a message) on error. */
static int load(const char *path, sw_snapshot **snap)
{
    sw_run *run = NULL;
    int code = sw__cli_open_run(path, &run);
    if (code != SW_EXIT_OK)
        return code;
    int rc = sw_run_snapshot(run, snap);
    sw_run_close(run);
    if (rc != 0) {
        sw__cli_error("%s: %s", path, sw_strerror(rc));
        return SW_EXIT_DATA;
    }
    return SW_EXIT_OK;
}

int sw_cmd_compare(int argc, char **argv)
{
    enum { OPT_FAIL = 1000 };
    static const struct option options[] = {{"format", required_argument, NULL, 'f'},
                                            {"fail-on-regression", no_argument, NULL, OPT_FAIL},
                                            {"output", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    sw_format format = SW_FORMAT_TABLE;
    const char *output = "-";
    int fail_on_regression = 0;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "f:o:h", options, NULL)) != -1;) {
        switch (opt) {
        case 'f':
            if (sw_format_parse(optarg, &format) != 0 ||
                (format != SW_FORMAT_TABLE && format != SW_FORMAT_MARKDOWN &&
                 format != SW_FORMAT_CSV && format != SW_FORMAT_JSON)) {
                sw__cli_error("compare cannot write format '%s' (table, md, csv, json)", optarg);
                return SW_EXIT_USAGE;
            }
            break;
        case OPT_FAIL:
            fail_on_regression = 1;
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            fputs(HELP, stdout);
            return SW_EXIT_OK;
        default:
            return sw__cli_usage_error("compare");
        }
    }
    if (argc - optind != 2) {
        sw__cli_error("compare needs two run files: the baseline and the new run");
        return sw__cli_usage_error("compare");
    }
    sw_snapshot *a = NULL, *b = NULL;
    int code = load(argv[optind], &a);
    if (code == SW_EXIT_OK)
        code = load(argv[optind + 1], &b);
    size_t regressions = 0;
    if (code == SW_EXIT_OK && sw_compare_regressions(a, b, &regressions) != 0)
        code = SW_EXIT_DATA;
    FILE *out = code == SW_EXIT_OK ? sw__cli_open_output(output) : NULL;
    if (code == SW_EXIT_OK && !out)
        code = SW_EXIT_IO;
    if (out) {
        int rc = sw_compare_write(a, b, format, out);
        code = sw__cli_close_output(out, output);
        if (rc != 0 && code == SW_EXIT_OK) {
            sw__cli_error("cannot write the comparison: %s", sw_strerror(rc));
            code = sw__cli_exit_code(rc);
        }
    }
    if (code == SW_EXIT_OK && fail_on_regression && regressions > 0) {
        sw__cli_error("%zu significant regression%s", regressions, regressions == 1 ? "" : "s");
        code = SW_EXIT_FINDINGS;
    }
    sw_snapshot_free(a);
    sw_snapshot_free(b);
    return code;
}
