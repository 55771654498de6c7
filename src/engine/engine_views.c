/*
 * engine_views.c — the engine's timing as Ignite and fastxtend users know it:
 * BasicTimeProfiler.print_results, HandlersTimeProfiler.print_results and
 * show_training_loop. The figures come from the engine's own sw_stats (seconds printed
 * with 5 decimals, as Ignite rounds them).
 */
#include "engine_internal.h"

#include <inttypes.h>
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

/* "total | min/index | max/index | mean | std", or only the total for one-off events. */
static void sw__print_stats_line(FILE *out, const sw_stats *s, int total_only) {
    if (total_only || s->count == 0) {
        fprintf(out, "%.5f\n", sw__s((double)s->total_ns));
        return;
    }
    fprintf(out, "%.5f | %.5f/%" PRId64 " | %.5f/%" PRId64 " | %.5f | %.5f\n",
            sw__s((double)s->total_ns), sw__s((double)s->min_ns), s->min_step,
            sw__s((double)s->max_ns), s->max_step, sw__s(s->mean_ns), sw__s(sw_stats_stddev(s)));
}

/* Events in the order Ignite's BasicTimeProfiler prints them (GET_BATCH added: Ignite
 * measures them too and writes them to its CSV). */
static const sw_event sw__basic_events[] = {
    SW_EVENT_STARTED,
    SW_EVENT_EPOCH_STARTED,
    SW_EVENT_GET_BATCH_STARTED,
    SW_EVENT_GET_BATCH_COMPLETED,
    SW_EVENT_ITERATION_STARTED,
    SW_EVENT_ITERATION_COMPLETED,
    SW_EVENT_VALIDATION_STARTED,
    SW_EVENT_VALIDATION_COMPLETED,
    SW_EVENT_EPOCH_COMPLETED,
    SW_EVENT_COMPLETED,
};

int sw_engine_print_basic(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    fputs("\n ----------------------------------------------------\n"
          "| Time profiling stats (in seconds):                 |\n"
          " ----------------------------------------------------\n"
          "total  |  min/index  |  max/index  |  mean  |  std\n\n",
          out);
    fputs("Processing function:\n", out);
    sw__print_stats_line(out, &e->measure[SW_MEASURE_PROCESSING], 0);
    fputs("\nDataflow:\n", out);
    sw__print_stats_line(out, &e->measure[SW_MEASURE_DATAFLOW], 0);

    uint64_t total = 0;
    for (int i = 0; i < SW_EVENT_COUNT; i++)
        total += e->event_stats[1][i].total_ns;
    fprintf(out, "\nEvent handlers:\n%.5f\n", sw__s((double)total));
    for (size_t k = 0; k < sizeof sw__basic_events / sizeof sw__basic_events[0]; k++) {
        sw_event ev = sw__basic_events[k];
        const sw_stats *s = &e->event_stats[1][ev];
        if ((ev == SW_EVENT_VALIDATION_STARTED || ev == SW_EVENT_VALIDATION_COMPLETED) &&
            s->count == 0)
            continue; /* no validation loop: keep Ignite's list */
        fprintf(out, "\n- Events.%s: ", sw_event_name(ev));
        sw__print_handler_list(out, e, ev, 1);
        fputc('\n', out);
        sw__print_stats_line(out, s, ev == SW_EVENT_STARTED || ev == SW_EVENT_COMPLETED);
    }

    /* The validation loop (in Ignite a separate evaluator engine). */
    if (e->measure[SW_MEASURE_VALID_EPOCH].count > 0) {
        fputs("\nValidation processing function:\n", out);
        sw__print_stats_line(out, &e->measure[SW_MEASURE_VALID_PROCESSING], 0);
        fputs("\nValidation dataflow:\n", out);
        sw__print_stats_line(out, &e->measure[SW_MEASURE_VALID_DATAFLOW], 0);
        static const sw_event batch_events[] = {
            SW_EVENT_GET_BATCH_STARTED,
            SW_EVENT_GET_BATCH_COMPLETED,
            SW_EVENT_ITERATION_STARTED,
            SW_EVENT_ITERATION_COMPLETED,
        };
        for (size_t k = 0; k < 4; k++) {
            const sw_stats *s = &e->event_stats[0][batch_events[k]];
            fprintf(out, "\n- Validation Events.%s: ", sw_event_name(batch_events[k]));
            sw__print_handler_list(out, e, batch_events[k], 1);
            fputc('\n', out);
            sw__print_stats_line(out, s, 0);
        }
    }
    fputc('\n', out);
    return ferror(out) ? SW_EIO : 0;
}

/* "Processing took total 48.99836s [min/index: ..., max/index: ..., mean: ..s, std: ..s]" */
static void sw__print_summary(FILE *out, const char *what, const sw_stats *s) {
    fprintf(out,
            "%s took total %.5fs [min/index: %.5fs/%" PRId64 ", max/index: %.5fs/%" PRId64
            ", mean: %.5fs, std: %.5fs]\n",
            what, sw__s((double)s->total_ns), sw__s((double)s->min_ns), s->min_step,
            sw__s((double)s->max_ns), s->max_step, sw__s(s->mean_ns), sw__s(sw_stats_stddev(s)));
}

static void sw__print_sep(FILE *out, const int *widths, int ncols) {
    for (int c = 0; c < ncols; c++) {
        for (int i = 0; i < widths[c]; i++)
            fputc('-', out);
        fputs("  ", out);
    }
    fputc('\n', out);
}

/* One row; the first two columns left-aligned, the rest right-aligned (as Ignite). */
static void sw__print_row(FILE *out, const int *widths, const char *const *cells) {
    for (int c = 0; c < 7; c++)
        fprintf(out, c < 2 ? "%-*s  " : "%*s  ", widths[c], cells[c]);
    fputc('\n', out);
}

int sw_engine_print_handlers(const sw_engine *e, FILE *out) {
    if (!e || !out)
        return SW_EINVAL;
    /* Ignite: the name columns are 4 wider than their longest entry, numbers 14 wide. */
    int widths[7] = {(int)strlen("Handler") + 4, (int)strlen("Event Name") + 4, 14, 14, 14, 14, 14};
    for (int i = 0; i < e->nhandlers; i++) {
        int n = (int)strlen(e->handlers[i].name) + 4;
        int m = (int)strlen(sw_event_name(e->handlers[i].event)) + 4;
        if (n > widths[0])
            widths[0] = n;
        if (m > widths[1])
            widths[1] = m;
    }
    static const char *const headers[7] = {"Handler",    "Event Name", "Total(s)", "Min(s)/IDX",
                                           "Max(s)/IDX", "Mean(s)",    "Std(s)"};
    fputc('\n', out);
    sw__print_sep(out, widths, 7);
    sw__print_row(out, widths, headers);
    sw__print_sep(out, widths, 7);
    uint64_t total = 0;
    for (int i = 0; i < e->nhandlers; i++) {
        const sw__handler *h = &e->handlers[i];
        const sw_stats *s = &h->stats;
        char tot[32], mn[48], mx[48], mean[32], sd[32];
        snprintf(tot, sizeof tot, "%.5f", sw__s((double)s->total_ns));
        if (s->count > 0) {
            snprintf(mn, sizeof mn, "%.5f/%" PRId64, sw__s((double)s->min_ns), s->min_step);
            snprintf(mx, sizeof mx, "%.5f/%" PRId64, sw__s((double)s->max_ns), s->max_step);
            snprintf(mean, sizeof mean, "%.5f", sw__s(s->mean_ns));
        } else {
            snprintf(mn, sizeof mn, "None");
            snprintf(mx, sizeof mx, "None");
            snprintf(mean, sizeof mean, "None");
        }
        if (s->count > 1)
            snprintf(sd, sizeof sd, "%.5f", sw__s(sw_stats_stddev(s)));
        else
            snprintf(sd, sizeof sd, "None");
        const char *cells[7] = {h->name, sw_event_name(h->event), tot, mn, mx, mean, sd};
        sw__print_row(out, widths, cells);
        total += s->total_ns;
    }
    sw__print_sep(out, widths, 7);
    char tot[32];
    snprintf(tot, sizeof tot, "%.5f", sw__s((double)total));
    const char *cells[7] = {"Total", "", tot, "", "", "", ""};
    sw__print_row(out, widths, cells);
    sw__print_sep(out, widths, 7);
    sw__print_summary(out, "Processing", &e->measure[SW_MEASURE_PROCESSING]);
    sw__print_summary(out, "Dataflow", &e->measure[SW_MEASURE_DATAFLOW]);
    if (e->measure[SW_MEASURE_VALID_EPOCH].count > 0) {
        sw__print_summary(out, "Validation processing", &e->measure[SW_MEASURE_VALID_PROCESSING]);
        sw__print_summary(out, "Validation dataflow", &e->measure[SW_MEASURE_VALID_DATAFLOW]);
    }
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
