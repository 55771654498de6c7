/* cmd_serve.c — stepwatch serve RUN.db|DIR [--port P] [--bind ADDR] */
#include "live_server.h"
#include "options.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char HELP[] =
    "usage: stepwatch serve RUN.db|DIR [--port P] [--bind ADDR]\n\n"
    "Serve the HTML report of a run as it goes on, kept current every two seconds without\n"
    "reloading the page (the zoom and the hover stay), until Ctrl-C. The data comes from the\n"
    "run file as it grows; a DIR's rank files are merged into one page with every rank. Once\n"
    "the run has ended the same URL shows its final report. Beside the page: data.json (the\n"
    "report's data) and metrics (Prometheus' text format; names in docs/live.md).\n\n"
    "  -p, --port P     the port (default 8765; 0: any free port, printed)\n"
    "      --bind ADDR  listen on ADDR instead of 127.0.0.1: every path then needs a random\n"
    "                   access token, printed once in the URL\n"
    "  -h, --help       this help\n\n"
    "Read-only: it answers the page, data.json and metrics, and nothing else.\n"
    "Exit status: 0 stopped by Ctrl-C or SIGTERM, 2 bad usage, 3 no such run file or\n"
    "directory, 4 cannot listen.\n";

/* --port and --bind, which `stepwatch run --serve` takes too: SWCLI_NEXT or an exit code. */
int swcli_serve_option(swcli_args *args, swcli_server_options *o, int opt, const char *arg) {
    long port;
    switch (opt) {
    case 'p':
        if (swcli_parse_number(arg, 0, 65535, &port) != 0)
            return swcli_usage(args, "--port takes a port number from 0 to 65535, not '%s'", arg);
        o->port = (int)port;
        return SWCLI_NEXT;
    case SWCLI_OPT_BIND:
        if (arg[0] == '\0')
            return swcli_usage(args, "--bind takes an address: 0.0.0.0, 10.1.2.3, ::");
        o->bind = arg;
        return SWCLI_NEXT;
    default:
        return swcli_option(args, opt, arg);
    }
}

int swcli_cmd_serve(int argc, char **argv) {
    static const struct option options[] = {{"port", required_argument, NULL, 'p'},
                                            {"bind", required_argument, NULL, SWCLI_OPT_BIND},
                                            SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {.command = "serve", .help = HELP};
    swcli_server_options o = {.port = SWCLI_SERVE_PORT};
    optind = 1;
    for (int opt; (opt = getopt_long(argc, argv, "p:h", options, NULL)) != -1;) {
        int code = swcli_serve_option(&args, &o, opt, optarg);
        if (code != SWCLI_NEXT)
            return code;
    }
    if (argc - optind != 1)
        return swcli_usage(&args, argc == optind ? "serve needs a run file or a directory"
                                                 : "serve takes one run file or directory");
    o.source = argv[optind];
    struct stat st;
    if (stat(o.source, &st) != 0) {
        swcli_error("%s: no such run file or directory", o.source);
        return SWCLI_EXIT_DATA;
    }
    swcli_server *server = NULL;
    if (swcli_server_start(&o, &server) != 0)
        return SWCLI_EXIT_IO;
    swcli_server_wait(-1);
    swcli_server_stop(server);
    return SWCLI_EXIT_OK;
}
