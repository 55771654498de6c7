/* cmd_export.c — stepwatch export RUN --chrome OUT.json | --steps-csv OUT.csv */
#include "options.h"

static const char HELP[] =
    "usage: stepwatch export RUN [--chrome OUT.json] [--steps-csv OUT.csv]\n\n"
    "Write a run file's records in other tools' formats (OUT '-' is standard output).\n\n"
    "  --chrome OUT     Chrome Trace Event JSON: spans per thread, counter tracks, one\n"
    "                   process per rank; open it in https://ui.perfetto.dev or\n"
    "                   chrome://tracing (spans need the run's timeline: run --timeline);\n"
    "                   on a terminal, a progress line shows on standard error\n"
    "  --steps-csv OUT  one row per step, Ignite's write_results columns (epoch, iteration,\n"
    "                   processing_stats, dataflow_stats) then stepwatch's breakdown\n"
    "  -h, --help       this help\n";

typedef struct export_job {
    sw_run *run;
    int (*fn)(sw_run *run, FILE *out);
} export_job;

static int write_export(void *ctx, FILE *out) {
    export_job *job = ctx;
    sw__cli_progress progress;
    sw__cli_progress_begin(&progress, job->run, "export");
    int rc = job->fn(job->run, out);
    sw__cli_progress_end(&progress);
    return rc;
}

static int export_to(sw_run *run, const char *input, int (*fn)(sw_run *, FILE *),
                     const char *path) {
    export_job job = {.run = run, .fn = fn};
    return sw__cli_write_output(path, input, write_export, &job);
}

int sw_cmd_export(int argc, char **argv) {
    enum { OPT_CHROME = 1000, OPT_STEPS_CSV };
    static const struct option options[] = {{"chrome", required_argument, NULL, OPT_CHROME},
                                            {"steps-csv", required_argument, NULL, OPT_STEPS_CSV},
                                            SW_CLI_OPTION_HELP, SW_CLI_OPTION_END};
    sw__cli_args args = {.command = "export", .help = HELP};
    const char *chrome = NULL, *csv = NULL;
    int code;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "h", options, NULL)) != -1;) {
        switch (opt) {
        case OPT_CHROME:
            chrome = optarg;
            break;
        case OPT_STEPS_CSV:
            csv = optarg;
            break;
        default:
            if ((code = sw__cli_option(&args, opt, optarg)) != SW_CLI_NEXT)
                return code;
        }
    }
    if (argc - optind != 1)
        return sw__cli_usage(&args, "export takes one run file");
    if (chrome == NULL && csv == NULL)
        return sw__cli_usage(&args, "export needs --chrome OUT or --steps-csv OUT");
    sw_run *run = NULL;
    code = sw__cli_open_run(argv[optind], &run);
    if (code == SW_EXIT_OK && chrome != NULL)
        code = export_to(run, argv[optind], sw_run_export_chrome, chrome);
    if (code == SW_EXIT_OK && csv != NULL)
        code = export_to(run, argv[optind], sw_run_export_steps_csv, csv);
    sw_run_close(run);
    return code;
}
