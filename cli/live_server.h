/*
 * live_server.h — the read-only HTTP server of the live report (`stepwatch serve`,
 * `stepwatch run --serve`; docs/live.md), on libmicrohttpd. It serves three things and
 * nothing else: the live page ("/"), the run's data ("/data.json") and Prometheus' text
 * ("/metrics"), under "/TOKEN/" when it listens beyond the loopback. A thread of its own
 * rebuilds the three from the run file every two seconds; the connections are served from
 * those buffers by libmicrohttpd's thread, with limits on connections, request size and time.
 * Built without libmicrohttpd, swcli_server_start says so and fails.
 */
#ifndef SWCLI_LIVE_SERVER_H
#define SWCLI_LIVE_SERVER_H

#include <time.h>

typedef struct swcli_server swcli_server;

typedef struct swcli_server_options {
    const char *source; /* a run file, or a directory of rank files */
    /* Instead of source: a glob(3) pattern of the rank files (`stepwatch run --serve`: its
     * run-file name, each placeholder a number), merged into one page of every rank. */
    const char *pattern;
    const char *bind; /* the address to listen on; NULL: 127.0.0.1 */
    int port;         /* 0: any free port (the URL printed names it) */
    /* Nonzero: the run goes on until swcli_server_finish (stepwatch run's program ends),
     * whatever the file says; a file older than not_before is an earlier run's (waiting). */
    int follow;
    time_t not_before;
} swcli_server_options;

/* Listen and start serving; prints the URL once on stderr. 0, or -1 after printing why. */
int swcli_server_start(const swcli_server_options *o, swcli_server **out);
/* The program ended: build the final report once more and stop rebuilding. */
void swcli_server_finish(swcli_server *s);
/* Stop serving and free (NULL is fine). */
void swcli_server_stop(swcli_server *s);
/* Wait for Ctrl-C (SIGINT) or SIGTERM, which then end nothing else, or seconds at most (a
 * negative value: no limit). */
void swcli_server_wait(double seconds);

/* --port P and --bind ADDR (getopt_long results 'p' and SWCLI_OPT_BIND) into o, for `serve`
 * and `run --serve` (cmd_serve.c): SWCLI_NEXT, or the exit code after a usage error; any
 * other opt goes to swcli_option. */
#define SWCLI_OPT_BIND 1100
struct swcli_args;
int swcli_serve_option(struct swcli_args *args, swcli_server_options *o, int opt, const char *arg);

/* The port `serve` and `run --serve` listen on unless told. */
#define SWCLI_SERVE_PORT 8765

#endif
