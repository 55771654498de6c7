/* cmd_export.c — stepwatch export RUN --chrome OUT.json | --steps-csv OUT.csv |
 * --collapsed OUT.txt */
#include "options.h"

static const char HELP[] =
    "usage: stepwatch export RUN [--chrome OUT.json] [--steps-csv OUT.csv]\n"
    "                            [--collapsed OUT.txt]\n\n"
    "Write a run file's records in other tools' formats (OUT '-' is standard output).\n\n"
    "  --chrome OUT     Chrome Trace Event JSON: spans per thread, counter tracks, one\n"
    "                   process per rank; open it in https://ui.perfetto.dev or\n"
    "                   chrome://tracing (spans need the run's timeline: run --timeline);\n"
    "                   on a terminal, a progress line shows on standard error\n"
    "  --steps-csv OUT  one row per step, Ignite's write_results columns (epoch, iteration,\n"
    "                   processing_stats, dataflow_stats) then stepwatch's breakdown\n"
    "  --collapsed OUT  the function profiles (run --functions) as collapsed stacks, one\n"
    "                   line per call path and its self time in ns: flamegraph.pl OUT >\n"
    "                   f.svg, or open it in https://speedscope.app\n"
    "  -h, --help       this help\n";

typedef struct export_job {
    sw_run *run;
    int (*fn)(sw_run *run, FILE *out);
} export_job;

static int write_export(void *ctx, FILE *out) {
    export_job *job = ctx;
    swcli_progress progress;
    swcli_progress_begin(&progress, job->run, "export");
    int rc = job->fn(job->run, out);
    swcli_progress_end(&progress);
    return rc;
}

static int export_to(sw_run *run, const char *input, int (*fn)(sw_run *, FILE *),
                     const char *path) {
    if (fn == sw_run_export_collapsed) {
        /* Said before OUT is touched: a run without function profiles has nothing to give. */
        sw_fprofile *profiles = NULL;
        int rc = sw_run_functions(run, -1, &profiles);
        sw_fprofile_free(profiles);
        if (rc == SW_ENOTFOUND) {
            swcli_error("the run file holds no function profiles (record them with "
                        "'stepwatch run --functions ACTIONS')");
            return swcli_exit_code(rc);
        }
    }
    export_job job = {.run = run, .fn = fn};
    return swcli_write_output(path, input, write_export, &job);
}

int swcli_cmd_export(int argc, char **argv) {
    enum { OPT_CHROME = 1000, OPT_STEPS_CSV, OPT_COLLAPSED };
    static const struct option options[] = {{"chrome", required_argument, NULL, OPT_CHROME},
                                            {"steps-csv", required_argument, NULL, OPT_STEPS_CSV},
                                            {"collapsed", required_argument, NULL, OPT_COLLAPSED},
                                            SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "export", .help = HELP};
    const char *chrome = NULL, *csv = NULL, *collapsed = NULL;
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
        case OPT_COLLAPSED:
            collapsed = optarg;
            break;
        default:
            if ((code = swcli_option(&args, opt, optarg)) != SWCLI_NEXT)
                return code;
        }
    }
    if (argc - optind != 1)
        return swcli_usage(&args, "export takes one run file");
    if (chrome == NULL && csv == NULL && collapsed == NULL)
        return swcli_usage(&args, "export needs --chrome OUT, --steps-csv OUT or --collapsed OUT");
    sw_run *run = NULL;
    code = swcli_open_run(argv[optind], &run);
    if (code == SWCLI_EXIT_OK && chrome != NULL)
        code = export_to(run, argv[optind], sw_run_export_chrome, chrome);
    if (code == SWCLI_EXIT_OK && csv != NULL)
        code = export_to(run, argv[optind], sw_run_export_steps_csv, csv);
    if (code == SWCLI_EXIT_OK && collapsed != NULL)
        code = export_to(run, argv[optind], sw_run_export_collapsed, collapsed);
    sw_run_close(run);
    return code;
}
