/* cmd_html.c — stepwatch html RUN -o OUT.html */
#include "options.h"

#include <string.h>
#include <sys/stat.h>

static const char HELP[] =
    "usage: stepwatch html RUN -o OUT.html\n\n"
    "Write a self-contained HTML report of a run file (no network needed to view it): step\n"
    "time over the run, where each step's time goes (data, forward, loss, backward,\n"
    "optimizer, other), histograms with p50/p99, the tables, counters and the diagnosis.\n"
    "Long runs are downsampled to at most 2000 points per chart.\n\n"
    "  -o, --output OUT the HTML file to write ('-' for standard output)\n"
    "  -h, --help       this help\n\n"
    "Exit status: 0 done, 2 bad usage, 3 unreadable run file, 4 cannot write the output.\n";

static int write_html(void *run, FILE *out) {
    return sw_html_write(run, out);
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
    if (argc - optind != 1)
        return swcli_usage(&args, "html takes one run file");
    const char *output = args.output;
    if (output == NULL)
        return swcli_usage(&args, "html needs an output file: -o OUT.html");
    const char *path = argv[optind];
    sw_run *run = NULL;
    int code = swcli_open_run(path, &run);
    if (code != SWCLI_EXIT_OK)
        return code;
    code = swcli_write_output(output, path, write_html, run);
    sw_run_close(run);
    if (code == SWCLI_EXIT_OK && strcmp(output, "-") != 0) {
        struct stat st;
        if (stat(output, &st) == 0 && S_ISREG(st.st_mode))
            fprintf(stderr, "stepwatch: wrote %s (%lld kB)\n", output,
                    (long long)(st.st_size + 1023) / 1024);
    }
    return code;
}
