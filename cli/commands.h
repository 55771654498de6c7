/*
 * commands.h — the stepwatch command's subcommands, one file each (cli/cmd_<name>.c).
 * main.c dispatches argv[1] to these. Each returns the process exit code below.
 * The command's own names start with swcli_ / SWCLI_: it is a client of the library, whose
 * names are sw_ (public) and sw__ (private to the library).
 */
#ifndef SWCLI_COMMANDS_H
#define SWCLI_COMMANDS_H

enum {
    SWCLI_EXIT_OK = 0,       /* done */
    SWCLI_EXIT_FINDINGS = 1, /* compare: a significant regression; diagnose: findings (--check) */
    SWCLI_EXIT_USAGE = 2,    /* bad command line */
    SWCLI_EXIT_DATA = 3,     /* a file is missing, foreign, corrupt or of an unknown version */
    SWCLI_EXIT_IO = 4        /* cannot write the output */
};

int swcli_cmd_run(int argc, char **argv);      /* run -- CMD...: profile a program */
int swcli_cmd_report(int argc, char **argv);   /* report RUN [--format F] */
int swcli_cmd_export(int argc, char **argv);   /* export RUN --chrome OUT | --steps-csv OUT */
int swcli_cmd_merge(int argc, char **argv);    /* merge RUN... -o OUT */
int swcli_cmd_html(int argc, char **argv);     /* html RUN -o OUT */
int swcli_cmd_compare(int argc, char **argv);  /* compare A B [--format F] */
int swcli_cmd_diagnose(int argc, char **argv); /* diagnose RUN [--format F] */
int swcli_cmd_serve(int argc, char **argv);    /* serve RUN|DIR [--port P] [--bind A] */

#endif
