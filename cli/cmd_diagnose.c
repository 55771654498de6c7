/* cmd_diagnose.c — stepwatch diagnose RUN [--format F] [--check] [-o OUT] */
#include "options.h"

/* The formats the findings are written in. */
#define DIAGNOSE_FORMATS                                                \
    (SWCLI_FORMAT(SW_FORMAT_TABLE) | SWCLI_FORMAT(SW_FORMAT_MARKDOWN) | \
     SWCLI_FORMAT(SW_FORMAT_JSON))

static const char HELP[] =
    "usage: stepwatch diagnose RUN [--format F] [--check] [-o OUT]\n\n"
    "Plain-language findings about a run, with the numbers behind them: input-bound (time\n"
    "waiting for data), callback and logging overhead, warm-up outliers, tail stalls, idle\n"
    "time between steps, the straggler rank (run files with several ranks), misuse and\n"
    "dropped events. Prints 'No problems found.' for a clean run.\n\n"
    "  -f, --format F   " SWCLI_HELP_FORMATS " (default: table, plain text)\n"
    "      --check      exit with status 1 when there is a warning or a critical finding\n"
    "  -o, --output OUT write to OUT instead of standard output\n"
    "  -h, --help       this help\n\n"
    "Exit status: 0 done, 1 problems found (with --check), 2 bad usage, 3 unreadable run\n"
    "file, 4 cannot write the output.\n";

typedef struct diagnose_job {
    sw_run *run;
    sw_format format;
} diagnose_job;

static int write_findings(void *ctx, FILE *out) {
    diagnose_job *job = ctx;
    return sw_diagnose_write(job->run, job->format, out);
}

int swcli_cmd_diagnose(int argc, char **argv) {
    enum { OPT_CHECK = 1000 };
    static const struct option options[] = {SWCLI_OPTION_FORMAT,
                                            {"check", no_argument, NULL, OPT_CHECK},
                                            SWCLI_OPTION_OUTPUT,
                                            SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "diagnose",
                       .help = HELP,
                       .formats = DIAGNOSE_FORMATS,
                       .format = SW_FORMAT_TABLE,
                       .output = "-"};
    int check = 0, code;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "f:o:h", options, NULL)) != -1;) {
        switch (opt) {
        case OPT_CHECK:
            check = 1;
            break;
        default:
            if ((code = swcli_option(&args, opt, optarg)) != SWCLI_NEXT)
                return code;
        }
    }
    if (argc - optind != 1)
        return swcli_usage(&args, argc == optind ? "diagnose needs a run file"
                                                 : "diagnose takes one run file");
    const char *path = argv[optind];
    sw_run *run = NULL;
    code = swcli_open_run(path, &run);
    if (code != SWCLI_EXIT_OK)
        return code;
    size_t problems = 0;
    int rc = check ? sw_diagnose_count(run, &problems) : 0;
    if (rc != 0) {
        code = swcli_input_error(path, rc);
    } else {
        diagnose_job job = {.run = run, .format = args.format};
        code = swcli_write_output(args.output, path, write_findings, &job);
        if (code == SWCLI_EXIT_OK && problems > 0)
            code = SWCLI_EXIT_FINDINGS;
    }
    sw_run_close(run);
    return code;
}
