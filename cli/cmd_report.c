/* cmd_report.c — stepwatch report RUN [--format F] [--rank N] [-o OUT] */
#include "options.h"

#include <string.h>

static const char HELP[] =
    "usage: stepwatch report RUN [--format F] [--rank N] [-o OUT]\n\n"
    "Print the report of a run file (all ranks merged unless --rank is given).\n\n"
    "  -f, --format F   " SWCLI_HELP_FORMATS " (default: table)\n"
    "  -r, --rank N     only rank N\n"
    "  -o, --output OUT write to OUT instead of standard output\n"
    "  -h, --help       this help\n";

typedef struct report_job {
    const sw_snapshot *snap;
    sw_format format;
    sw_write_options layout;
} report_job;

static int write_report(void *ctx, FILE *out) {
    const report_job *job = ctx;
    return sw_snapshot_write_ex(job->snap, job->format, out, &job->layout);
}

int swcli_cmd_report(int argc, char **argv) {
    static const struct option options[] = {SWCLI_OPTION_FORMAT, SWCLI_OPTION_RANK,
                                            SWCLI_OPTION_OUTPUT, SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "report",
                       .help = HELP,
                       .format = SW_FORMAT_TABLE,
                       .rank = -1 /* all ranks */,
                       .output = "-"};
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "f:r:o:h", options, NULL)) != -1;) {
        int code = swcli_option(&args, opt, optarg);
        if (code != SWCLI_NEXT)
            return code;
    }
    if (argc - optind != 1)
        return swcli_usage(&args, argc == optind ? "report needs a run file"
                                                 : "report takes one run file");
    const char *path = argv[optind];
    sw_run *run = NULL;
    int code = swcli_open_run(path, &run);
    if (code != SWCLI_EXIT_OK)
        return code;
    sw_snapshot *snap = NULL;
    int rc = args.rank < 0 ? sw_run_snapshot(run, &snap)
                           : sw_run_rank_snapshot(run, args.rank, &snap);
    if (rc != 0) {
        sw_run_close(run);
        return swcli_input_error(path, rc);
    }
    /* A report kept in a file keeps every name whole. */
    report_job job = {
        .snap = snap,
        .format = args.format,
        .layout = {.size = sizeof(sw_write_options), .full_names = strcmp(args.output, "-") != 0}};
    code = swcli_write_output(args.output, path, write_report, &job);
    sw_snapshot_free(snap);
    sw_run_close(run);
    return code;
}
