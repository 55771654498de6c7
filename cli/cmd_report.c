/* cmd_report.c — stepwatch report RUN [--format F] [--rank N] [-o OUT] */
#include "common.h"

#include <getopt.h>
#include <stdlib.h>

static const char HELP[] =
    "usage: stepwatch report RUN [--format F] [--rank N] [-o OUT]\n\n"
    "Print the report of a run file (all ranks merged unless --rank is given).\n\n"
    "  -f, --format F   table (default), lightning, fastxtend, ignite, md, csv, json\n"
    "  -r, --rank N     only rank N\n"
    "  -o, --output OUT write to OUT instead of standard output\n"
    "  -h, --help       this help\n";

int sw_cmd_report(int argc, char **argv) {
    static const struct option options[] = {{"format", required_argument, NULL, 'f'},
                                            {"rank", required_argument, NULL, 'r'},
                                            {"output", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    sw_format format = SW_FORMAT_TABLE;
    const char *output = "-";
    int rank = -1;
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "f:r:o:h", options, NULL)) != -1;) {
        switch (opt) {
        case 'f':
            if (sw_format_parse(optarg, &format) != 0) {
                sw__cli_error("unknown format '%s' (table, lightning, fastxtend, ignite, md, "
                              "csv, json)", optarg);
                return SW_EXIT_USAGE;
            }
            break;
        case 'r': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 0 || v > 1000000) {
                sw__cli_error("--rank wants a rank number, not '%s'", optarg);
                return SW_EXIT_USAGE;
            }
            rank = (int)v;
            break;
        }
        case 'o':
            output = optarg;
            break;
        case 'h':
            fputs(HELP, stdout);
            return SW_EXIT_OK;
        default:
            return sw__cli_usage_error("report");
        }
    }
    if (argc - optind != 1) {
        sw__cli_error(argc == optind ? "report needs a run file" : "report takes one run file");
        return sw__cli_usage_error("report");
    }
    const char *path = argv[optind];
    sw_run *run = NULL;
    int code = sw__cli_open_run(path, &run);
    if (code != SW_EXIT_OK)
        return code;
    sw_snapshot *snap = NULL;
    int rc = rank < 0 ? sw_run_snapshot(run, &snap) : sw_run_rank_snapshot(run, rank, &snap);
    if (rc != 0) {
        if (rc == SW_ENOTFOUND)
            sw__cli_error("%s: no rank %d in this run file", path, rank);
        else
            sw__cli_error("%s: %s", path, sw_strerror(rc));
        sw_run_close(run);
        return SW_EXIT_DATA;
    }
    FILE *out = sw__cli_open_output(output);
    code = SW_EXIT_IO;
    if (out != NULL) {
        rc = sw_snapshot_write(snap, format, out);
        code = sw__cli_close_output(out, output);
        if (rc != 0 && code == SW_EXIT_OK) {
            sw__cli_error("cannot write the report: %s", sw_strerror(rc));
            code = sw__cli_exit_code(rc);
        }
    }
    sw_snapshot_free(snap);
    sw_run_close(run);
    return code;
}
