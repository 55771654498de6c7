/*
 * engine_handlers_csv.c — Ignite's HandlersTimeProfiler.write_results CSV.
 *
 * Columns (as Ignite): "#", processing_stats, dataflow_stats, then "<handler> (<EVENT>)" per
 * handler. Row k holds the k-th duration of each column, in seconds, and 0 where a column has
 * fewer values (an epoch-level handler runs less often than the iterations). Ignite keeps
 * every duration until the end; here each column keeps its last options.handler_rows
 * (engine_history.c), so memory is bounded. Durations are written as exact decimal seconds,
 * as the CSV report writes them.
 */
#include "engine_internal.h"
#include "report/writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void sw__put_value(FILE *out, const sw__history *h, uint64_t row) {
    char text[40];
    sw__seconds_text(row < sw__history_len(h) ? sw__history_at(h, row) : 0, text, sizeof text);
    fputc(',', out);
    fputs(text, out);
}

int sw_engine_write_handlers_csv(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    if (e->opts.handler_rows == 0)
        return SW_ESTATE;
    fputs("#,processing_stats,dataflow_stats", out);
    uint64_t rows = sw__history_len(&e->processing_history);
    if (sw__history_len(&e->dataflow_history) > rows)
        rows = sw__history_len(&e->dataflow_history);
    for (int i = 0; i < e->nhandlers; i++) {
        const sw__handler *h = &e->handlers[i];
        const char *event = sw_event_name(h->event);
        size_t size = strlen(h->name) + strlen(event) + 4;
        char *column = malloc(size);
        if (column == NULL)
            return SW_ENOMEM;
        snprintf(column, size, "%s (%s)", h->name, event);
        fputc(',', out);
        sw__csv_put_text(out, column);
        free(column);
        if (sw__history_len(&h->history) > rows)
            rows = sw__history_len(&h->history);
    }
    fputc('\n', out);
    for (uint64_t r = 0; r < rows; r++) {
        fprintf(out, "%" PRIu64 ".0", r + 1);
        sw__put_value(out, &e->processing_history, r);
        sw__put_value(out, &e->dataflow_history, r);
        for (int i = 0; i < e->nhandlers; i++)
            sw__put_value(out, &e->handlers[i].history, r);
        fputc('\n', out);
    }
    return fflush(out) == 0 && !ferror(out) ? 0 : SW_EIO;
}
