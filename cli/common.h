/*
 * common.h — what the stepwatch subcommands share: error messages, exit codes, files
 * (their options: options.h).
 */
#ifndef SWCLI_COMMON_H
#define SWCLI_COMMON_H

#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <stepwatch.h>

/* "stepwatch: " + message + newline on stderr. */
void swcli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void swcli_verror(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* The exit code for an SW_E* code: SWCLI_EXIT_DATA for bad input files, SWCLI_EXIT_IO for
 * output errors, SWCLI_EXIT_USAGE for bad arguments. */
int swcli_exit_code(int rc);

/* Open a run file; on error print "stepwatch: PATH: why" and return the exit code. A run
 * that did not complete its file (killed, or still running) opens, with a note saying so. */
int swcli_open_run(const char *path, sw_run **out);
/* Say why reading the input at path failed (sw_last_error's sentence, else the code's
 * message); the exit code for it (SWCLI_EXIT_DATA, or SWCLI_EXIT_USAGE for a bad argument). */
int swcli_input_error(const char *path, int rc);

/* Write an output file all or nothing (stepwatch/output.h: "-" is standard output, a
 * device or FIFO is written as a stream, a regular file is replaced only once complete):
 * write(ctx, stream) writes it and returns 0 or SW_E*. On failure the old file is untouched
 * and one line says whose fault it was: the output's ("cannot write OUT: why") or, for a
 * write that failed without an output error, the input's ("INPUT: why"). Returns the exit
 * code. */
typedef int (*swcli_writer)(void *ctx, FILE *out);
int swcli_write_output(const char *path, const char *input, swcli_writer write, void *ctx);

/* A progress line for the long walks over a run file (sw_run_set_progress), redrawn in place
 * on stderr at most ten times a second, and only when stderr is a terminal: logs and pipes
 * get nothing. _end clears the line and detaches it from the run. */
typedef struct swcli_progress {
    sw_run *run;
    const char *command;
    uint64_t drawn_ns; /* when the line was last drawn; 0 = never */
} swcli_progress;
void swcli_progress_begin(swcli_progress *pr, sw_run *run, const char *command);
void swcli_progress_end(swcli_progress *pr);

#endif /* SWCLI_COMMON_H */
