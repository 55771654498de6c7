/*
 * engine_csv.c — Ignite's BasicTimeProfiler.write_results CSV, streamed.
 *
 * Columns (as Ignite): epoch, iteration, processing_stats, dataflow_stats, Event_STARTED,
 * Event_COMPLETED, Event_EPOCH_STARTED, Event_EPOCH_COMPLETED, Event_ITERATION_STARTED,
 * Event_ITERATION_COMPLETED, Event_GET_BATCH_STARTED, Event_GET_BATCH_COMPLETED.
 *
 * Ignite keeps every iteration in memory and writes at the end. Here a row is written as
 * its iteration completes, so memory stays flat however long the run. Two columns are not
 * known yet at that moment (the epoch's EPOCH_COMPLETED handler time, the run's COMPLETED
 * handler time, which Ignite repeats on every row): every field has a fixed width
 * (zero-padded numbers, which any CSV reader parses as plain numbers), so those two are
 * patched in place when the epoch and the run end. Until then they read 0.
 */
#include "engine_internal.h"

#include <errno.h>

#include <inttypes.h>
#include <string.h>

#define SW__CSV_INT_W 10 /* epoch, iteration */
#define SW__CSV_NUM_W 16 /* seconds: "%016.9f", up to 999999.999999999 s */
#define SW__CSV_VALUES 10
#define SW__CSV_ROW_LEN (2 * SW__CSV_INT_W + 1 + SW__CSV_VALUES * (SW__CSV_NUM_W + 1) + 1)

enum { SW__COL_COMPLETED = 3, SW__COL_EPOCH_COMPLETED = 5 };

static const char sw__csv_header[] =
    "epoch,iteration,processing_stats,dataflow_stats,Event_STARTED,Event_COMPLETED,"
    "Event_EPOCH_STARTED,Event_EPOCH_COMPLETED,Event_ITERATION_STARTED,"
    "Event_ITERATION_COMPLETED,Event_GET_BATCH_STARTED,Event_GET_BATCH_COMPLETED\n";

/* One fixed-width number; out must hold SW__CSV_NUM_W + 1 bytes. */
static void sw__csv_num(char *out, double seconds) {
    if (!(seconds >= 0))
        seconds = 0; /* also NaN */
    if (seconds > 999999.999999999)
        seconds = 999999.999999999;
    snprintf(out, SW__CSV_NUM_W + 1, "%0*.9f", SW__CSV_NUM_W, seconds);
}

int sw__csv_open(sw__csv *c, const char *path) {
    memset(c, 0, sizeof *c);
    c->path = path;
    /* Rows are appended and two columns rewritten in place later: the stream of a regular
     * file is opened "w+"; the file replaces the old one only when complete. */
    int rc = sw_output_open(path, &c->out);
    if (rc != 0)
        return rc;
    c->file = sw_output_stream(c->out);
    if (fputs(sw__csv_header, c->file) == EOF) {
        int err = errno ? errno : EIO;
        sw_output_abort(c->out);
        c->out = NULL;
        c->file = NULL;
        return sw__error(SW_EIO, "%s: cannot write: %s", path, strerror(err));
    }
    c->header_len = (long)(sizeof sw__csv_header - 1);
    return 0;
}

void sw__csv_row(sw__csv *c, const sw_engine *e, double processing_s, double dataflow_s) {
    if (!c->file || c->failed)
        return;
    double values[SW__CSV_VALUES] = {
        processing_s,
        dataflow_s,
        e->last_event_s[SW_EVENT_STARTED],
        0, /* COMPLETED: patched at the end */
        e->last_event_s[SW_EVENT_EPOCH_STARTED],
        0, /* EPOCH_COMPLETED: patched when the epoch ends */
        e->last_event_s[SW_EVENT_ITERATION_STARTED],
        e->last_event_s[SW_EVENT_ITERATION_COMPLETED],
        e->last_event_s[SW_EVENT_GET_BATCH_STARTED],
        e->last_event_s[SW_EVENT_GET_BATCH_COMPLETED],
    };
    char row[SW__CSV_ROW_LEN + 1];
    int n = snprintf(row, sizeof row, "%0*" PRIu64 ",%0*" PRIu64, SW__CSV_INT_W, e->state.epoch,
                     SW__CSV_INT_W, e->state.iteration);
    for (int i = 0; i < SW__CSV_VALUES; i++) {
        row[n++] = ',';
        sw__csv_num(row + n, values[i]);
        n += SW__CSV_NUM_W;
    }
    row[n++] = '\n';
    if (n != SW__CSV_ROW_LEN || fseek(c->file, 0, SEEK_END) != 0 ||
        fwrite(row, 1, (size_t)n, c->file) != (size_t)n) {
        c->failed = errno ? errno : EIO;
        return;
    }
    c->rows++;
}

/* Write value into column col of rows [first, c->rows). */
static void sw__csv_patch(sw__csv *c, uint64_t first, int col, double seconds) {
    char num[SW__CSV_NUM_W + 1];
    sw__csv_num(num, seconds);
    long col_off = 2 * SW__CSV_INT_W + 1 + col * (SW__CSV_NUM_W + 1) + 1;
    for (uint64_t r = first; r < c->rows && !c->failed; r++) {
        long off = c->header_len + (long)r * SW__CSV_ROW_LEN + col_off;
        if (fseek(c->file, off, SEEK_SET) != 0 ||
            fwrite(num, 1, SW__CSV_NUM_W, c->file) != SW__CSV_NUM_W)
            c->failed = errno ? errno : EIO;
    }
}

void sw__csv_epoch_done(sw__csv *c, double epoch_completed_s) {
    if (!c->file || c->failed)
        return;
    sw__csv_patch(c, c->epoch_first_row, SW__COL_EPOCH_COMPLETED, epoch_completed_s);
    c->epoch_first_row = c->rows;
}

int sw__csv_close(sw__csv *c, double completed_s) {
    if (!c->file)
        return 0;
    if (!c->failed)
        sw__csv_patch(c, 0, SW__COL_COMPLETED, completed_s);
    int rc = 0;
    if (c->failed) {
        sw_output_abort(c->out); /* the old file, if any, stays */
        rc = sw__error(SW_EIO, "%s: cannot write: %s; the file was not replaced", c->path,
                       strerror(c->failed));
    } else {
        rc = sw_output_commit(c->out);
    }
    c->out = NULL;
    c->file = NULL;
    return rc;
}
