/*
 * commands.h — the stepwatch command's subcommands, one file each (cli/cmd_<name>.c).
 * main.c dispatches argv[1] to these. Each returns the process exit code below.
 */
#ifndef SW_CLI_COMMANDS_H
#define SW_CLI_COMMANDS_H

enum {
    SW_EXIT_OK = 0,       /* done */
    SW_EXIT_FINDINGS = 1, /* compare: a significant regression; diagnose: findings (--check) */
    SW_EXIT_USAGE = 2,    /* bad command line */
    SW_EXIT_DATA = 3,     /* a file is missing, foreign, corrupt or of an unknown version */
    SW_EXIT_IO = 4        /* cannot write the output */
};

int sw_cmd_run(int argc, char **argv);      /* run -- CMD...: profile a program */
int sw_cmd_report(int argc, char **argv);   /* report RUN [--format F] */
int sw_cmd_export(int argc, char **argv);   /* export RUN --chrome OUT | --steps-csv OUT */
int sw_cmd_merge(int argc, char **argv);    /* merge RUN... -o OUT */
int sw_cmd_html(int argc, char **argv);     /* html RUN -o OUT */
int sw_cmd_compare(int argc, char **argv);  /* compare A B [--format F] */
int sw_cmd_diagnose(int argc, char **argv); /* diagnose RUN [--format F] */

#endif
