/*
 * live_content.h — what the live server serves, built from the run as it stands: the live
 * page, the run's data (JSON) and its Prometheus text, in memory (live_content.c).
 */
#ifndef SWCLI_LIVE_CONTENT_H
#define SWCLI_LIVE_CONTENT_H

#include <stddef.h>
#include <time.h>

typedef enum swcli_run_state {
    SWCLI_RUN_WAITING = 0, /* no run file yet */
    SWCLI_RUN_RUNNING,
    SWCLI_RUN_COMPLETE
} swcli_run_state;

typedef struct swcli_live_docs {
    char *page, *data, *metrics; /* malloc'd; the caller frees them */
    size_t page_len, data_len, metrics_len;
    swcli_run_state state;
} swcli_live_docs;

/* Where the run is: a run file (path), or rank files (pattern, a glob(3) pattern: a
 * directory's .db files, or `stepwatch run`'s run-file name with its {rank} and {pid} as
 * "[0-9]*"), merged into scratch, a path in a directory of our own, each time. Files older than
 * not_before are ignored, and so are other programs' SQLite files the pattern matches. */
typedef struct swcli_live_source {
    const char *path;
    const char *pattern; /* NULL: path is the one run file */
    const char *scratch;
    time_t not_before;
} swcli_live_source;

/* Build the three documents from src now. 0, or a negative SW_E* code (nothing allocated). A
 * source with no run file yet is SWCLI_RUN_WAITING with a page that waits for it. */
int swcli_live_build(const swcli_live_source *src, swcli_live_docs *out);
void swcli_live_docs_free(swcli_live_docs *d);
/* The name of state for the X-Stepwatch-Run header: waiting, running, complete. */
const char *swcli_run_state_name(swcli_run_state state);

#endif
