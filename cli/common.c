/* common.c — error messages, exit codes and files shared by the subcommands. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

void swcli_verror(const char *fmt, va_list ap) {
    fputs("stepwatch: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void swcli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    swcli_verror(fmt, ap);
    va_end(ap);
}

int swcli_exit_code(int rc) {
    switch (rc) {
    case 0:
        return SWCLI_EXIT_OK;
    case SW_EINVAL:
    case SW_EFORMAT:
        return SWCLI_EXIT_USAGE;
    case SW_EIO:
    case SW_EEXISTS:
        return SWCLI_EXIT_IO;
    default:
        return SWCLI_EXIT_DATA;
    }
}

int swcli_input_error(const char *path, int rc) {
    /* The library's sentence names the file and the cause ("run.db: truncated: ..."). */
    if (*sw_last_error())
        swcli_error("%s", sw_last_error());
    else
        swcli_error("%s: %s", path, sw_strerror(rc));
    int code = swcli_exit_code(rc);
    return code == SWCLI_EXIT_IO ? SWCLI_EXIT_DATA : code;
}

int swcli_open_run(const char *path, sw_run **out) {
    int rc = sw_run_open(path, out);
    if (rc != 0)
        return swcli_input_error(path, rc);
    /* A run that was killed (or still runs) is readable; say what it lacks. */
    char what[1024];
    if (sw_run_incomplete(*out, what, sizeof what) > 0)
        fprintf(stderr, "stepwatch: %s: note: %s\n", path, what);
    return SWCLI_EXIT_OK;
}

int swcli_write_output(const char *path, const char *input, swcli_writer write, void *ctx) {
    sw_output *o = NULL;
    int rc = sw_output_open(path, &o);
    if (rc != 0) {
        swcli_error("cannot write %s", *sw_last_error() ? sw_last_error() : path);
        return SWCLI_EXIT_IO;
    }
    FILE *out = sw_output_stream(o);
    errno = 0;
    rc = write(ctx, out);
    int err = errno;
    if (rc != 0 && ferror(out)) {
        sw_output_abort(o);
        swcli_error("cannot write %s: %s", path, strerror(err ? err : EIO));
        return SWCLI_EXIT_IO;
    }
    if (rc != 0) {
        sw_output_abort(o);
        return swcli_input_error(input, rc);
    }
    if (sw_output_commit(o) != 0) {
        swcli_error("cannot write %s", sw_last_error());
        return SWCLI_EXIT_IO;
    }
    return SWCLI_EXIT_OK;
}

static void draw_progress(void *ctx, const char *stage, uint64_t done, uint64_t total) {
    swcli_progress *pr = ctx;
    uint64_t now = sw_now_ns();
    if (pr->drawn_ns != 0 && now - pr->drawn_ns < 100000000u && done != 0 && done != total)
        return;
    pr->drawn_ns = now;
    /* \r back to the line's start; \033[K erases what a longer line left after it. */
    fprintf(stderr, "\rstepwatch %s: %s %3llu%% (%llu of %llu)\033[K", pr->command, stage,
            (unsigned long long)(done * 100 / total), (unsigned long long)done,
            (unsigned long long)total);
    fflush(stderr);
}

void swcli_progress_begin(swcli_progress *pr, sw_run *run, const char *command) {
    *pr = (swcli_progress){.run = run, .command = command};
    if (isatty(STDERR_FILENO))
        sw_run_set_progress(run, draw_progress, pr);
}

void swcli_progress_end(swcli_progress *pr) {
    sw_run_set_progress(pr->run, NULL, NULL);
    if (pr->drawn_ns != 0)
        fputs("\r\033[K", stderr);
}
