/* cmd_merge.c — stepwatch merge RUN... -o OUT */
#include "options.h"

static const char HELP[] =
    "usage: stepwatch merge RUN... -o OUT [--force] [-f F]\n\n"
    "Merge run files (one per rank) into one file that keeps every rank; report, html and\n"
    "diagnose then show all ranks together and the slowest ones. The cross-rank view\n"
    "(per action the time per step across ranks, the stragglers and their blame) is\n"
    "printed on standard output.\n\n"
    "  -o, --output OUT the merged run file (must not exist unless --force)\n"
    "  --force          replace OUT if it is an earlier stepwatch run file\n"
    "  -f, --format F   the cross-rank view: " SWCLI_HELP_FORMATS " (default: table)\n"
    "  -h, --help       this help\n";

/* The cross-rank view of the merged file on standard output; for a single rank, a line (an
 * object in JSON) saying there is none. The file is written and whole by now (sw_run_merge
 * read it back): a view that cannot be shown is said, and the merge still succeeded. */
static int print_view(const char *path, sw_format fmt) {
    sw_run *run = NULL;
    sw_ranks *view = NULL;
    int rc = sw_run_open(path, &run);
    int nranks = sw_run_rank_count(run);
    if (rc == 0)
        rc = sw_run_ranks(run, &view);
    if (rc == 0)
        rc = sw_ranks_write(view, fmt, 0, stdout);
    sw_ranks_free(view);
    sw_run_close(run);
    const char *why = nranks == 1 ? "the merged file holds one rank" : "no rank stored a payload";
    if (rc == SW_ENOTFOUND && fmt == SW_FORMAT_JSON)
        printf("{\"ranks\": %d, \"view\": null, \"why\": \"no cross-rank view: %s\"}\n", nranks,
               why);
    else if (rc == SW_ENOTFOUND)
        printf("No cross-rank view: %s.\n", why);
    else if (rc != 0)
        swcli_error("merged into %s, but its cross-rank view cannot be shown: %s", path,
                    *sw_last_error() ? sw_last_error() : sw_strerror(rc));
    return fflush(stdout) == 0 && !ferror(stdout) ? SWCLI_EXIT_OK : swcli_exit_code(SW_EIO);
}

int swcli_cmd_merge(int argc, char **argv) {
    enum { OPT_FORCE = 1000 };
    static const struct option options[] = {SWCLI_OPTION_OUTPUT,
                                            SWCLI_OPTION_FORMAT,
                                            {"force", no_argument, NULL, OPT_FORCE},
                                            SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "merge",
                       .help = HELP,
                       .formats = SWCLI_FORMAT(SW_FORMAT_TABLE) | SWCLI_FORMAT(SW_FORMAT_MARKDOWN) |
                                  SWCLI_FORMAT(SW_FORMAT_JSON),
                       .format = SW_FORMAT_TABLE};
    int force = 0, code;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "o:f:h", options, NULL)) != -1;) {
        switch (opt) {
        case OPT_FORCE:
            force = 1;
            break;
        default:
            if ((code = swcli_option(&args, opt, optarg)) != SWCLI_NEXT)
                return code;
        }
    }
    const char *output = args.output;
    if (output == NULL)
        return swcli_usage(&args, "merge needs -o OUT");
    if (optind == argc)
        return swcli_usage(&args, "merge needs run files");
    /* Check each input first, so the error names the file at fault. */
    for (int i = optind; i < argc; i++) {
        sw_run *run = NULL;
        code = swcli_open_run(argv[i], &run);
        sw_run_close(run);
        if (code != SWCLI_EXIT_OK)
            return code;
    }
    const char *const *inputs = (const char *const *)argv + optind;
    size_t ninputs = (size_t)(argc - optind);
    int rc = force ? sw_run_merge_replace(inputs, ninputs, output)
                   : sw_run_merge(inputs, ninputs, output);
    if (rc == SW_EINVAL) { /* sw_last_error names the input and its rank */
        swcli_error("%s", *sw_last_error() ? sw_last_error()
                                           : "two inputs hold the same rank: merge files of "
                                             "different ranks");
        return SWCLI_EXIT_DATA;
    }
    if (rc != 0) {
        char why[640];
        snprintf(why, sizeof why, "%s", *sw_last_error() ? sw_last_error() : sw_strerror(rc));
        sw_run *existing = NULL;
        int earlier_run = rc == SW_EEXISTS && !force && sw_run_open(output, &existing) == 0;
        sw_run_close(existing);
        swcli_error("cannot merge into %s%s", why,
                    earlier_run ? " (an earlier run file: --force replaces it)" : "");
        return swcli_exit_code(rc);
    }
    fprintf(stderr, "stepwatch: merged %d file%s into %s\n", argc - optind,
            argc - optind == 1 ? "" : "s", output);
    return print_view(output, args.format);
}
