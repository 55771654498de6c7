/*
 * options.h — the options the subcommands share (-f/--format, -r/--rank, -o/--output,
 * -h/--help), number checks and usage errors, so that every subcommand accepts and refuses
 * them the same way, with the same messages.
 *
 * glibc's getopt_long stays the parser and each subcommand keeps its own loop: it handles its
 * own options in its switch and hands every other getopt_long result to swcli_option, which
 * stores a common option, or prints the help or why the command line is wrong and gives the
 * exit code to end with (cmd_diagnose.c):
 *
 *     static const struct option options[] = {SWCLI_OPTION_FORMAT,
 *                                             {"check", no_argument, NULL, OPT_CHECK},
 *                                             SWCLI_OPTION_OUTPUT, SWCLI_OPTION_HELP,
 *                                             SWCLI_OPTION_END};
 *     swcli_args args = {.command = "diagnose", .help = HELP, .formats = DIAGNOSE_FORMATS,
 *                          .format = SW_FORMAT_TABLE, .output = "-"};
 *     optind = 1;
 *     for (int opt; (opt = getopt_long(argc, argv, "f:o:h", options, NULL)) != -1;) {
 *         switch (opt) {
 *         case OPT_CHECK:                       (its own option)
 *             check = 1;
 *             break;
 *         default:                              (-f, -o, -h, or what getopt_long refused)
 *             if ((code = swcli_option(&args, opt, optarg)) != SWCLI_NEXT)
 *                 return code;
 *         }
 *     }
 *     if (argc - optind != 1)
 *         return swcli_usage(&args, argc == optind ? "diagnose needs a run file"
 *                                                    : "diagnose takes one run file");
 */
#ifndef SWCLI_OPTIONS_H
#define SWCLI_OPTIONS_H

#include "common.h"

#include <getopt.h>

/* The common options' entries for a subcommand's getopt_long table (and its short options
 * "f:", "r:", "o:", "h"): swcli_option knows them by these values. */
#define SWCLI_OPTION_FORMAT \
    { "format", required_argument, NULL, 'f' }
#define SWCLI_OPTION_RANK \
    { "rank", required_argument, NULL, 'r' }
#define SWCLI_OPTION_OUTPUT \
    { "output", required_argument, NULL, 'o' }
#define SWCLI_OPTION_HELP \
    { "help", no_argument, NULL, 'h' }
#define SWCLI_OPTION_END \
    { NULL, 0, NULL, 0 }

/* A set of report formats, for swcli_args.formats: SWCLI_FORMAT(SW_FORMAT_CSV) | ... */
#define SWCLI_FORMAT(f) (1u << (f))

/* Where a help text names the formats -f takes: -h prints the ones the subcommand writes
 * there, from the library's list (sw_format_name), so no help text lists them by hand. */
#define SWCLI_HELP_FORMATS "{formats}"

/* One subcommand's common options: preset the defaults, then swcli_option fills them in. */
typedef struct swcli_args {
    const char *command; /* "report": names the subcommand in messages */
    const char *help;    /* printed on standard output by -h/--help (SWCLI_HELP_FORMATS) */
    unsigned formats;    /* what -f accepts, a set of SWCLI_FORMAT(f); 0: every format */
    sw_format format;    /* -f/--format F */
    int rank;            /* -r/--rank N, from 0 to SWCLI_MAX_RANK */
    const char *output;  /* -o/--output OUT */
} swcli_args;

#define SWCLI_MAX_RANK 1000000

/* swcli_option's answer when parsing goes on. */
#define SWCLI_NEXT (-1)

/* Handle opt, one getopt_long result with its argument arg, that the subcommand did not
 * handle itself: store -f, -r or -o in args and return SWCLI_NEXT. Otherwise return the
 * exit code to end with: SWCLI_EXIT_OK after printing the help for -h; SWCLI_EXIT_USAGE after
 * "Try 'stepwatch CMD --help'.", which follows one line saying why for a bad format or rank,
 * or what getopt_long printed for an option it refused. */
int swcli_option(swcli_args *args, int opt, const char *arg);

/* text as a decimal number from min to max (min >= 0), written in digits only, without a
 * sign, blanks or leading zeros (" 1", "+1" and "01" are refused): 0 and *out set, or -1. */
int swcli_parse_number(const char *text, long min, long max, long *out);

/* A bad command line: "stepwatch: " + message, then "Try 'stepwatch CMD --help'." on
 * stderr; returns SWCLI_EXIT_USAGE. */
int swcli_usage(const swcli_args *args, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* SWCLI_OPTIONS_H */
