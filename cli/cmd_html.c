/* cmd_html.c — stepwatch html RUN [NEW_RUN] -o OUT.html */
#include "options.h"

#include <string.h>
#include <sys/stat.h>

static const char HELP[] =
    "usage: stepwatch html RUN [NEW_RUN] -o OUT.html\n\n"
    "Write a self-contained HTML report of a run file (no network needed to view it): where\n"
    "the steady step goes at a glance, step time over the run (hover, zoom, step or wall-time\n"
    "axis), where each step's time goes (data, forward, loss, backward, optimizer, other),\n"
    "histograms with p50/p99, ranks, device time, the tables, counters and the diagnosis.\n"
    "Long runs are downsampled to at most 2000 points per chart.\n"
    "With two run files, one page compares them (RUN the baseline, NEW_RUN the new one):\n"
    "both breakdowns side by side, step-time distributions overlaid, compare's verdicts.\n\n"
    "  -o, --output OUT the HTML file to write ('-' for standard output)\n"
    "  -h, --help       this help\n\n"
    "Exit status: 0 done, 2 bad usage, 3 unreadable run file, 4 cannot write the output.\n";

typedef struct html_runs {
    sw_run *a, *b; /* b NULL: one run's page */
} html_runs;

static int write_html(void *ctx, FILE *out) {
    html_runs *r = ctx;
    return r->b ? sw_html_write_compare(r->a, r->b, out) : sw_html_write(r->a, out);
}

int swcli_cmd_html(int argc, char **argv) {
    static const struct option options[] = {SWCLI_OPTION_OUTPUT, SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "html", .help = HELP};
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "o:h", options, NULL)) != -1;) {
        int code = swcli_option(&args, opt, optarg);
        if (code != SWCLI_NEXT)
            return code;
    }
    int nruns = argc - optind;
    if (nruns != 1 && nruns != 2)
        return swcli_usage(&args, "html takes one run file, or two to compare");
    const char *output = args.output;
    if (output == NULL)
        return swcli_usage(&args, "html needs an output file: -o OUT.html");
    const char *path = argv[optind];
    html_runs runs = {0};
    int code = swcli_open_run(path, &runs.a);
    if (code == SWCLI_EXIT_OK && nruns == 2)
        code = swcli_open_run(argv[optind + 1], &runs.b);
    if (code == SWCLI_EXIT_OK)
        code = swcli_write_output(output, path, write_html, &runs);
    if (runs.b)
        sw_run_close(runs.b);
    if (runs.a)
        sw_run_close(runs.a);
    if (code == SWCLI_EXIT_OK && strcmp(output, "-") != 0) {
        struct stat st;
        if (stat(output, &st) == 0 && S_ISREG(st.st_mode))
            fprintf(stderr, "stepwatch: wrote %s (%lld kB)\n", output,
                    (long long)(st.st_size + 1023) / 1024);
    }
    return code;
}
