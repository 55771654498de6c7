/* cmd_compare.c — stepwatch compare A B [--format F] [--fail-on-regression] [-o OUT] */
#include "options.h"

/* The formats a comparison is written in. */
#define COMPARE_FORMATS                                                 \
    (SWCLI_FORMAT(SW_FORMAT_TABLE) | SWCLI_FORMAT(SW_FORMAT_MARKDOWN) | \
     SWCLI_FORMAT(SW_FORMAT_CSV) | SWCLI_FORMAT(SW_FORMAT_JSON))

static const char HELP[] =
    "usage: stepwatch compare BASELINE NEW [--format F] [--fail-on-regression] [-o OUT]\n\n"
    "Compare two run files action by action (all phases, then per phase): mean, p50, p99 and\n"
    "total of each, the change of the mean, and a verdict. A change is 'slower' or 'faster'\n"
    "when a Mann-Whitney U test on the two histograms gives p < 0.01 and the mean moved by\n"
    "at least 5 %; actions in only one run are 'new' or 'gone'. Regressions come first.\n\n"
    "  -f, --format F          " SWCLI_HELP_FORMATS " (default: table)\n"
    "      --fail-on-regression  exit with status 1 when anything got significantly slower\n"
    "  -o, --output OUT        write to OUT instead of standard output\n"
    "  -h, --help              this help\n\n"
    "Exit status: 0 done, 1 regression found (with --fail-on-regression), 2 bad usage,\n"
    "3 unreadable run file, 4 cannot write the output.\n";

/* The snapshot of a run file; an exit code (and a message) on error. */
static int load(const char *path, sw_snapshot **snap) {
    sw_run *run = NULL;
    int code = swcli_open_run(path, &run);
    if (code != SWCLI_EXIT_OK)
        return code;
    int rc = sw_run_snapshot(run, snap);
    sw_run_close(run);
    if (rc != 0)
        return swcli_input_error(path, rc);
    return SWCLI_EXIT_OK;
}

typedef struct compare_job {
    const sw_snapshot *a, *b;
    sw_format format;
} compare_job;

static int write_comparison(void *ctx, FILE *out) {
    compare_job *job = ctx;
    return sw_compare_write(job->a, job->b, job->format, out);
}

int swcli_cmd_compare(int argc, char **argv) {
    enum { OPT_FAIL = 1000 };
    static const struct option options[] = {SWCLI_OPTION_FORMAT,
                                            {"fail-on-regression", no_argument, NULL, OPT_FAIL},
                                            SWCLI_OPTION_OUTPUT,
                                            SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "compare",
                       .help = HELP,
                       .formats = COMPARE_FORMATS,
                       .format = SW_FORMAT_TABLE,
                       .output = "-"};
    int fail_on_regression = 0, code;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "f:o:h", options, NULL)) != -1;) {
        switch (opt) {
        case OPT_FAIL:
            fail_on_regression = 1;
            break;
        default:
            if ((code = swcli_option(&args, opt, optarg)) != SWCLI_NEXT)
                return code;
        }
    }
    if (argc - optind != 2)
        return swcli_usage(&args, "compare needs two run files: the baseline and the new run");
    sw_snapshot *a = NULL, *b = NULL;
    code = load(argv[optind], &a);
    if (code == SWCLI_EXIT_OK)
        code = load(argv[optind + 1], &b);
    size_t regressions = 0;
    if (code == SWCLI_EXIT_OK && sw_compare_regressions(a, b, &regressions) != 0)
        code = SWCLI_EXIT_DATA;
    if (code == SWCLI_EXIT_OK) {
        compare_job job = {.a = a, .b = b, .format = args.format};
        code = swcli_write_output(args.output, argv[optind + 1], write_comparison, &job);
    }
    if (code == SWCLI_EXIT_OK && fail_on_regression && regressions > 0) {
        swcli_error("%zu significant regression%s", regressions, regressions == 1 ? "" : "s");
        code = SWCLI_EXIT_FINDINGS;
    }
    sw_snapshot_free(a);
    sw_snapshot_free(b);
    return code;
}
