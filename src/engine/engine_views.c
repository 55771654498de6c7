/*
 * engine_views.c — the engine's timing as Ignite and fastxtend users know it:
 * BasicTimeProfiler.print_results, HandlersTimeProfiler.print_results and
 * show_training_loop. The figures come from the engine's own sw_stats, made into Ignite's
 * cells and written by Ignite's layouts (src/report/ignite_layout.c, which stepwatch.ignite
 * writes through too); what the C engine has beyond Ignite (the batch fetch events, the
 * validation loop) comes after Ignite's layout.
 */
#include "engine_internal.h"

#include "report/writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static double sw__s(double ns) {
    return ns / 1e9;
}

/* The handlers of ev: as a Python list literal ['a', 'b'] (Ignite's print_results), or
 * [a, b (every 5)] (show_training_loop). */
static void sw__print_handler_list(FILE *out, const sw_engine *e, sw_event ev, int python) {
    int first = 1;
    fputc('[', out);
    for (int i = 0; i < e->nhandlers; i++) {
        const sw__handler *h = &e->handlers[i];
        if (h->event != ev)
            continue;
        fprintf(out, python ? "%s'%s'" : "%s%s", first ? "" : ", ", h->name);
        if (!python && h->every > 1)
            fprintf(out, " (every %" PRIu32 ")", h->every);
        first = 0;
    }
    fputc(']', out);
}

/* ev's handlers as Ignite lists them ("['a', 'b']"), malloc'ed; NULL when out of memory. */
static char *sw__handler_list(const sw_engine *e, sw_event ev) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL)
        return NULL;
    sw__print_handler_list(f, e, ev, 1);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Ignite's six events first (its layout), then the ones the C engine adds after it: the
 * batch fetch (Ignite times it too and writes it to its CSV) and, when there was one, the
 * validation loop's start and end. */
static const sw_event sw__basic_events[] = {
    SW_EVENT_STARTED,
    SW_EVENT_EPOCH_STARTED,
    SW_EVENT_ITERATION_STARTED,
    SW_EVENT_ITERATION_COMPLETED,
    SW_EVENT_EPOCH_COMPLETED,
    SW_EVENT_COMPLETED,
    SW_EVENT_GET_BATCH_STARTED,
    SW_EVENT_GET_BATCH_COMPLETED,
    SW_EVENT_VALIDATION_STARTED,
    SW_EVENT_VALIDATION_COMPLETED,
};
enum { SW__BASIC_EVENTS = sizeof sw__basic_events / sizeof sw__basic_events[0] };

/* The C engine's validation loop (in Ignite a separate evaluator engine), after Ignite's
 * layout: its processing, dataflow and batch events, blocks as in that layout. */
static int sw__print_valid_blocks(const sw_engine *e, FILE *out) {
    char cell[256];
    sw__ignite_stats_cell(&e->measure[SW_MEASURE_VALID_PROCESSING], cell, sizeof cell);
    fprintf(out, "\nValidation processing function:\n%s\n", cell);
    sw__ignite_stats_cell(&e->measure[SW_MEASURE_VALID_DATAFLOW], cell, sizeof cell);
    fprintf(out, "\nValidation dataflow:\n%s\n", cell);
    static const sw_event batch_events[] = {
        SW_EVENT_GET_BATCH_STARTED,
        SW_EVENT_GET_BATCH_COMPLETED,
        SW_EVENT_ITERATION_STARTED,
        SW_EVENT_ITERATION_COMPLETED,
    };
    for (size_t k = 0; k < 4; k++) {
        char *names = sw__handler_list(e, batch_events[k]);
        if (names == NULL)
            return SW_ENOMEM;
        sw__ignite_stats_cell(&e->event_stats[0][batch_events[k]], cell, sizeof cell);
        fprintf(out, "\n- Validation Events.%s: %s\n%s\n", sw_event_name(batch_events[k]), names,
                cell);
        free(names);
    }
    return 0;
}

int sw_engine_print_basic(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    char processing[256], dataflow[256], total_cell[32];
    sw__ignite_stats_cell(&e->measure[SW_MEASURE_PROCESSING], processing, sizeof processing);
    sw__ignite_stats_cell(&e->measure[SW_MEASURE_DATAFLOW], dataflow, sizeof dataflow);
    uint64_t total = 0;
    for (int i = 0; i < SW_EVENT_COUNT; i++)
        total += e->event_stats[1][i].total_ns;
    snprintf(total_cell, sizeof total_cell, "%.5f", sw__s((double)total));

    sw_ignite_event events[SW__BASIC_EVENTS];
    char stats[SW__BASIC_EVENTS][256];
    size_t n = 0;
    int rc = 0;
    for (size_t k = 0; k < SW__BASIC_EVENTS; k++) {
        sw_event ev = sw__basic_events[k];
        const sw_stats *s = &e->event_stats[1][ev];
        if ((ev == SW_EVENT_VALIDATION_STARTED || ev == SW_EVENT_VALIDATION_COMPLETED) &&
            s->count == 0)
            continue; /* no validation loop */
        sw__ignite_stats_cell(s, stats[n], sizeof stats[n]);
        events[n] = (sw_ignite_event){sw_event_name(ev), sw__handler_list(e, ev), stats[n]};
        if (events[n++].handlers == NULL)
            rc = SW_ENOMEM;
    }
    if (rc == 0)
        rc = sw_ignite_write_basic(out, processing, dataflow, total_cell, events, n);
    for (size_t k = 0; k < n; k++)
        free((char *)events[k].handlers);
    if (rc == 0 && e->measure[SW_MEASURE_VALID_EPOCH].count > 0)
        rc = sw__print_valid_blocks(e, out);
    if (rc != 0)
        return rc;
    fputc('\n', out); /* the line Ignite's print adds */
    return ferror(out) ? SW_EIO : 0;
}

/* A measure's row under the handlers table: "Processing", "None", its cells. */
static sw_ignite_row sw__measure_row(const sw_engine *e, int measure, const char *label,
                                     sw__ignite_cells *c) {
    sw__ignite_row_cells(&e->measure[measure], c);
    return sw__ignite_row_of(label, "None", c);
}

int sw_engine_print_handlers(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    size_t n = (size_t)e->nhandlers + 3;
    sw_ignite_row *rows = calloc(n, sizeof *rows);
    sw__ignite_cells *cells = calloc(n, sizeof *cells);
    if (!rows || !cells) {
        free(rows);
        free(cells);
        return SW_ENOMEM;
    }
    uint64_t total = 0;
    for (int i = 0; i < e->nhandlers; i++) {
        const sw__handler *h = &e->handlers[i];
        sw__ignite_row_cells(&h->stats, &cells[i]);
        rows[i] = sw__ignite_row_of(h->name, sw_event_name(h->event), &cells[i]);
        total += h->stats.total_ns;
    }
    size_t k = (size_t)e->nhandlers;
    sw__ignite_round5(sw__s((double)total), cells[k].total, sizeof cells[k].total);
    rows[k] = (sw_ignite_row){"Total", "", cells[k].total, "", NULL, "", NULL, "", ""};
    rows[k + 1] = sw__measure_row(e, SW_MEASURE_PROCESSING, "Processing", &cells[k + 1]);
    rows[k + 2] = sw__measure_row(e, SW_MEASURE_DATAFLOW, "Dataflow", &cells[k + 2]);
    int rc = sw_ignite_write_handlers(out, rows, n);
    if (rc == 0 && e->measure[SW_MEASURE_VALID_EPOCH].count > 0) {
        /* the C engine's validation loop, after Ignite's layout */
        sw_ignite_row r = sw__measure_row(e, SW_MEASURE_VALID_PROCESSING, "Validation processing",
                                          &cells[k]);
        sw__ignite_put_summary(out, &r);
        r = sw__measure_row(e, SW_MEASURE_VALID_DATAFLOW, "Validation dataflow", &cells[k]);
        sw__ignite_put_summary(out, &r);
    }
    free(rows);
    free(cells);
    if (rc != 0)
        return rc;
    fputc('\n', out); /* the line Ignite's print adds */
    return ferror(out) ? SW_EIO : 0;
}

/* show_training_loop: "Start X" indents, "End X" dedents, an event lists its handlers. */
typedef enum { SW__LINE_START, SW__LINE_END, SW__LINE_NOTE, SW__LINE_EVENT } sw__line_kind;

typedef struct sw__loop_line {
    sw__line_kind kind;
    const char *text; /* START/END/NOTE text, or the fastai name of an EVENT */
    sw_event event;
} sw__loop_line;

static const sw__loop_line sw__loop_lines[] = {
    {SW__LINE_START, "Start Fit", 0},
    {SW__LINE_EVENT, "before_fit", SW_EVENT_STARTED},
    {SW__LINE_START, "Start Epoch Loop", 0},
    {SW__LINE_EVENT, "before_epoch", SW_EVENT_EPOCH_STARTED},
    {SW__LINE_START, "Start Train", 0},
    {SW__LINE_START, "Start Batch Loop", 0},
    {SW__LINE_EVENT, "before_draw", SW_EVENT_GET_BATCH_STARTED},
    {SW__LINE_EVENT, "before_batch", SW_EVENT_GET_BATCH_COMPLETED},
    {SW__LINE_EVENT, "before_batch", SW_EVENT_ITERATION_STARTED},
    {SW__LINE_NOTE, "(processing function: forward, loss, backward, optimizer, zero_grad)", 0},
    {SW__LINE_EVENT, "after_batch", SW_EVENT_ITERATION_COMPLETED},
    {SW__LINE_END, "End Batch Loop", 0},
    {SW__LINE_EVENT, "after_cancel_train", SW_EVENT_TERMINATE_SINGLE_EPOCH},
    {SW__LINE_END, "End Train", 0},
    {SW__LINE_START, "Start Valid", 0},
    {SW__LINE_EVENT, "before_validate", SW_EVENT_VALIDATION_STARTED},
    {SW__LINE_START, "Start Batch Loop", 0},
    {SW__LINE_NOTE, "**same batch events as train, state.training = 0**", 0},
    {SW__LINE_END, "End Batch Loop", 0},
    {SW__LINE_EVENT, "after_validate", SW_EVENT_VALIDATION_COMPLETED},
    {SW__LINE_END, "End Valid", 0},
    {SW__LINE_EVENT, "after_epoch", SW_EVENT_EPOCH_COMPLETED},
    {SW__LINE_END, "End Epoch Loop", 0},
    {SW__LINE_EVENT, "after_cancel_fit", SW_EVENT_TERMINATE},
    {SW__LINE_EVENT, "an exception", SW_EVENT_EXCEPTION_RAISED},
    {SW__LINE_EVENT, "after_fit", SW_EVENT_COMPLETED},
    {SW__LINE_END, "End Fit", 0},
};

int sw_engine_show_training_loop(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    int indent = 0;
    for (size_t k = 0; k < sizeof sw__loop_lines / sizeof sw__loop_lines[0]; k++) {
        const sw__loop_line *l = &sw__loop_lines[k];
        char label[64];
        switch (l->kind) {
        case SW__LINE_START:
            fprintf(out, "%*s%s\n", indent, "", l->text);
            indent += 2;
            break;
        case SW__LINE_END:
            indent -= 2;
            fprintf(out, "%*s%s\n", indent, "", l->text);
            break;
        case SW__LINE_NOTE:
            fprintf(out, "%*s - %s\n", indent, "", l->text);
            break;
        case SW__LINE_EVENT:
            snprintf(label, sizeof label, "%s (%s)", sw_event_name(l->event), l->text);
            fprintf(out, "%*s - %-40s: ", indent, "", label);
            sw__print_handler_list(out, e, l->event, 0);
            fputc('\n', out);
            break;
        }
    }
    return ferror(out) ? SW_EIO : 0;
}
