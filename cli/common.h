/*
 * common.h — what the stepwatch subcommands share: error messages, exit codes, files.
 */
#ifndef SW_CLI_COMMON_H
#define SW_CLI_COMMON_H

#include "commands.h"

#include <stdio.h>
#include <stepwatch.h>

/* "stepwatch: " + message + newline on stderr. */
void sw__cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The exit code for an SW_E* code: SW_EXIT_DATA for bad input files, SW_EXIT_IO for
 * output errors, SW_EXIT_USAGE for bad arguments. */
int sw__cli_exit_code(int rc);

/* Open a run file; on error print "stepwatch: PATH: why" and return the exit code. */
int sw__cli_open_run(const char *path, sw_run **out);

/* An output file, "-" meaning stdout. NULL after printing why. */
FILE *sw__cli_open_output(const char *path);
/* Close it (not stdout) and report a write error; returns an exit code. */
int sw__cli_close_output(FILE *f, const char *path);

/* "Try 'stepwatch CMD --help'." on stderr; returns SW_EXIT_USAGE. */
int sw__cli_usage_error(const char *command);

#endif /* SW_CLI_COMMON_H */
