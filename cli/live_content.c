/*
 * live_content.c — the live server's three documents (live_content.h), from a run file or a
 * set of rank files (a directory's, or those `stepwatch run`'s run-file name gives its
 * ranks). Several files are merged into one scratch file first (sw_run_merge_replace), so
 * the page shows every rank of them; one file is read as it is
 * (rank 0's file of a job that aggregated online carries the cross-rank rounds). The files
 * are opened read-only: SQLite's WAL lets this reader run beside the run's writer.
 */
#include "live_content.h"

#include "stepwatch.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SWCLI_DIR_FILES 4096 /* rank files of a directory merged at most */

const char *swcli_run_state_name(swcli_run_state state) {
    return state == SWCLI_RUN_COMPLETE  ? "complete"
           : state == SWCLI_RUN_RUNNING ? "running"
                                        : "waiting";
}

void swcli_live_docs_free(swcli_live_docs *d) {
    free(d->page);
    free(d->data);
    free(d->metrics);
    *d = (swcli_live_docs){0};
}

static int recent(const char *path, time_t not_before) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= not_before;
}

/* A recent stepwatch run file (another program's SQLite file in the directory is left out). */
static int rank_file(const char *path, time_t not_before) {
    sw_run *run = NULL;
    if (!recent(path, not_before) || sw_run_open(path, &run) != 0)
        return 0;
    sw_run_close(run);
    return 1;
}

/* The run of src, opened: *run NULL (and 0) when there is none yet. */
static int open_source(const swcli_live_source *src, sw_run **run) {
    *run = NULL;
    if (!src->pattern) {
        /* A file that cannot be read yet (being created) is a run not there yet. */
        if (recent(src->path, src->not_before) && sw_run_open(src->path, run) != 0)
            *run = NULL;
        return 0;
    }
    glob_t g = {0};
    if (glob(src->pattern, 0, NULL, &g) != 0) {
        globfree(&g);
        return 0;
    }
    const char **paths = calloc(g.gl_pathc, sizeof *paths);
    size_t n = 0;
    for (size_t i = 0; paths && i < g.gl_pathc && n < SWCLI_DIR_FILES; i++)
        if (rank_file(g.gl_pathv[i], src->not_before))
            paths[n++] = g.gl_pathv[i];
    int rc = paths ? 0 : SW_ENOMEM;
    if (rc == 0 && n == 1 && sw_run_open(paths[0], run) != 0)
        *run = NULL;
    else if (rc == 0 && n > 1 &&
             (sw_run_merge_replace(paths, n, src->scratch) != 0 ||
              sw_run_open(src->scratch, run) != 0))
        *run = NULL;
    free(paths);
    globfree(&g);
    return rc;
}

typedef int (*write_fn)(sw_run *run, FILE *out);

/* What write gives, in memory (*text malloc'd). */
static int to_memory(write_fn write, sw_run *run, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    FILE *out = open_memstream(text, len);
    if (!out)
        return SW_ENOMEM;
    int rc = write(run, out);
    if (fclose(out) != 0 && rc == 0)
        rc = SW_ENOMEM;
    if (rc != 0) {
        free(*text);
        *text = NULL;
        *len = 0;
    }
    return rc;
}

static int write_null(sw_run *run, FILE *out) {
    (void)run;
    return fputs("null\n", out) < 0 ? SW_EIO : 0;
}

static int write_no_metrics(sw_run *run, FILE *out) {
    (void)run;
    fputs("# HELP stepwatch_run_complete 1 once every rank completed its file (the run ended), "
          "else 0.\n# TYPE stepwatch_run_complete gauge\nstepwatch_run_complete 0\n",
          out);
    return 0;
}

int swcli_live_build(const swcli_live_source *src, swcli_live_docs *out) {
    *out = (swcli_live_docs){0};
    sw_run *run = NULL;
    int rc = open_source(src, &run);
    if (rc != 0)
        return rc;
    out->state = !run                                   ? SWCLI_RUN_WAITING
                 : sw_run_incomplete(run, NULL, 0) == 0 ? SWCLI_RUN_COMPLETE
                                                        : SWCLI_RUN_RUNNING;
    rc = to_memory(sw_html_write_live, run, &out->page, &out->page_len);
    if (rc == 0)
        rc = to_memory(run ? sw_html_write_data : write_null, run, &out->data, &out->data_len);
    if (rc == 0)
        rc = to_memory(run ? sw_metrics_write : write_no_metrics, run, &out->metrics,
                       &out->metrics_len);
    sw_run_close(run);
    if (rc != 0)
        swcli_live_docs_free(out);
    return rc;
}
