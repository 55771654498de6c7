/*
 * engine_handlers_csv.c — Ignite's HandlersTimeProfiler.write_results CSV.
 *
 * Columns (as Ignite): "#", processing_stats, dataflow_stats, then "<handler> (<EVENT>)" per
 * handler. Row k holds the k-th duration of each column, in seconds, and 0 where a column has
 * fewer values (an epoch-level handler runs less often than the iterations). Ignite keeps
 * every duration until the end; here each column keeps its last options.handler_rows, in a
 * ring that grows as values come, so memory is bounded and nothing is allocated when the
 * option is 0. Durations are written as exact decimal seconds, as the CSV report writes them.
 */
#include "engine_internal.h"
#include "report/writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void sw__history_init(sw__history *h, uint32_t cap)
{
    memset(h, 0, sizeof *h);
    h->cap = cap;
}

void sw__history_add(sw__history *h, uint64_t ns)
{
    if (h->cap == 0)
        return;
    uint32_t slot = (uint32_t)(h->count % h->cap);
    if (slot >= h->allocated) {
        /* Still filling up: grow by doubling, up to cap. Out of memory drops the value. */
        uint32_t grown = h->allocated ? h->allocated * 2 : 64;
        if (grown > h->cap)
            grown = h->cap;
        uint64_t *values = realloc(h->values, (size_t)grown * sizeof *values);
        if (values == NULL)
            return;
        h->values = values;
        h->allocated = grown;
    }
    h->values[slot] = ns;
    h->count++;
}

void sw__history_free(sw__history *h)
{
    free(h->values);
    memset(h, 0, sizeof *h);
}

static uint64_t sw__history_len(const sw__history *h)
{
    return h->count < h->cap ? h->count : h->cap;
}

/* The k-th kept value, oldest first (k < sw__history_len). */
static uint64_t sw__history_at(const sw__history *h, uint64_t k)
{
    uint64_t first = h->count < h->cap ? 0 : h->count % h->cap;
    return h->values[(first + k) % h->cap];
}

static void sw__put_value(FILE *out, const sw__history *h, uint64_t row)
{
    char text[40];
    sw__seconds_text(row < sw__history_len(h) ? sw__history_at(h, row) : 0, text, sizeof text);
    fputc(',', out);
    fputs(text, out);
}

int sw_engine_write_handlers_csv(const sw_engine *e, FILE *out)
{
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
