/*
 * ignite_layout.c — Ignite's two print_results layouts (sw_ignite_write_basic,
 * sw_ignite_write_handlers), written from cells, and the cells Ignite makes of a duration.
 * The C engine's views and stepwatch.ignite (through the extension) both write through
 * here; SW_FORMAT_IGNITE (fmt_ignite.c) shares the title and the stats cell.
 *
 * The layouts are Ignite 0.5's text, character for character: BasicTimeProfiler's is a
 * template of "label:\nvalue" blocks; HandlersTimeProfiler's is torch's build_table: the
 * name columns are 4 wider than their longest cell over every row (the Total, Processing
 * and Dataflow rows included, the header words not), the number columns 14, two spaces
 * after each column.
 */
#include "writer.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NUMBER_COLS 14 /* Ignite's DEFAULT_COLUMN_WIDTH */

void sw__ignite_put_title(FILE *out) {
    fputs("\n"
          " ----------------------------------------------------\n"
          "| Time profiling stats (in seconds):                 |\n"
          " ----------------------------------------------------\n"
          "total  |  min/index  |  max/index  |  mean  |  std\n",
          out);
}

static void put_index(char *buf, size_t size, int64_t step) {
    if (step < 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%" PRId64, step);
}

void sw__ignite_stats_cell(const sw_stats *st, char *buf, size_t size) {
    if (st->count == 0) {
        snprintf(buf, size, "not yet triggered");
        return;
    }
    if (st->count == 1) {
        snprintf(buf, size, "%.5f", (double)st->total_ns / 1e9);
        return;
    }
    char lo[24], hi[24];
    put_index(lo, sizeof lo, st->min_step);
    put_index(hi, sizeof hi, st->max_step);
    snprintf(buf, size, "%.5f | %.5f/%s | %.5f/%s | %.5f | %.5f", (double)st->total_ns / 1e9,
             (double)st->min_ns / 1e9, lo, (double)st->max_ns / 1e9, hi, st->mean_ns / 1e9,
             sw_stats_stddev(st) / 1e9);
}

void sw__ignite_round5(double seconds, char *buf, size_t size) {
    /* Python's str(round(x, 5)): the value to 5 decimals, shortest form. round() picks the
     * double nearest the 5-decimal text, whose shortest repr is that text without trailing
     * zeros (below 1e10 s no shorter text reads back as the same double); repr writes
     * values under 1e-4 as "5e-05". */
    char text[64];
    snprintf(text, sizeof text, "%.5f", seconds);
    double rounded = strtod(text, NULL);
    if (rounded != 0 && fabs(rounded) < 1e-4) {
        snprintf(buf, size, "%.0e", rounded);
        return;
    }
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '0' && text[n - 2] != '.')
        text[--n] = '\0';
    snprintf(buf, size, "%s", text);
}

void sw__ignite_row_cells(const sw_stats *st, sw__ignite_cells *c) {
    if (st->count == 0) {
        snprintf(c->total, sizeof c->total, "not triggered");
        snprintf(c->min, sizeof c->min, "None");
        snprintf(c->min_index, sizeof c->min_index, "None");
        snprintf(c->max, sizeof c->max, "None");
        snprintf(c->max_index, sizeof c->max_index, "None");
        snprintf(c->mean, sizeof c->mean, "None");
        snprintf(c->std, sizeof c->std, "None");
        return;
    }
    sw__ignite_round5((double)st->total_ns / 1e9, c->total, sizeof c->total);
    sw__ignite_round5((double)st->min_ns / 1e9, c->min, sizeof c->min);
    put_index(c->min_index, sizeof c->min_index, st->min_step);
    sw__ignite_round5((double)st->max_ns / 1e9, c->max, sizeof c->max);
    put_index(c->max_index, sizeof c->max_index, st->max_step);
    sw__ignite_round5(st->mean_ns / 1e9, c->mean, sizeof c->mean);
    if (st->count > 1)
        sw__ignite_round5(sw_stats_stddev(st) / 1e9, c->std, sizeof c->std);
    else
        snprintf(c->std, sizeof c->std, "None");
}

int sw_ignite_write_basic(FILE *out, const char *processing, const char *dataflow,
                          const char *handlers_total, const sw_ignite_event *events,
                          size_t nevents) {
    if (!out || !processing || !dataflow || !handlers_total || (nevents > 0 && !events))
        return SW_EINVAL;
    for (size_t i = 0; i < nevents; i++)
        if (!events[i].event || !events[i].handlers || !events[i].stats)
            return SW_EINVAL;
    sw__ignite_put_title(out);
    fprintf(out, "\nProcessing function:\n%s\n\nDataflow:\n%s\n\nEvent handlers:\n%s\n", processing,
            dataflow, handlers_total);
    for (size_t i = 0; i < nevents; i++)
        fprintf(out, "\n- Events.%s: %s\n%s\n", events[i].event, events[i].handlers,
                events[i].stats);
    return ferror(out) ? SW_EIO : 0;
}

static void put_sep(FILE *out, const size_t *widths) {
    for (int c = 0; c < 7; c++) {
        for (size_t i = 0; i < widths[c]; i++)
            fputc('-', out);
        fputs("  ", out);
    }
    fputc('\n', out);
}

/* One cell padded to width: text, or "text/index" when index is not NULL (Ignite's
 * "{}/{}" of a (value, index) pair); right-aligned or left-aligned. */
static void put_cell(FILE *out, const char *text, const char *index, size_t width, int right) {
    size_t have = sw__text_width(text) + (index ? 1 + sw__text_width(index) : 0);
    size_t pad = have < width ? width - have : 0;
    if (right)
        fprintf(out, "%*s", (int)pad, "");
    fputs(text, out);
    if (index)
        fprintf(out, "/%s", index);
    if (!right)
        fprintf(out, "%*s", (int)pad, "");
    fputs("  ", out);
}

/* One table row: the name columns left-aligned, the rest right-aligned. */
static void put_row(FILE *out, const size_t *widths, const sw_ignite_row *r) {
    put_cell(out, r->handler, NULL, widths[0], 0);
    put_cell(out, r->event, NULL, widths[1], 0);
    put_cell(out, r->total, NULL, widths[2], 1);
    put_cell(out, r->min, r->min_index, widths[3], 1);
    put_cell(out, r->max, r->max_index, widths[4], 1);
    put_cell(out, r->mean, NULL, widths[5], 1);
    put_cell(out, r->std, NULL, widths[6], 1);
    fputc('\n', out);
}

static int row_ok(const sw_ignite_row *r) {
    return r->handler && r->event && r->total && r->min && r->max && r->mean && r->std;
}

void sw__ignite_put_summary(FILE *out, const sw_ignite_row *r) {
    fprintf(out, "%s took total %ss [min/index: %ss/%s, max/index: %ss/%s, mean: %ss, std: %ss]\n",
            r->handler, r->total, r->min, r->min_index ? r->min_index : "", r->max,
            r->max_index ? r->max_index : "", r->mean, r->std);
}

int sw_ignite_write_handlers(FILE *out, const sw_ignite_row *rows, size_t n) {
    if (!out || !rows || n < 3)
        return SW_EINVAL;
    size_t widths[7] = {0, 0, NUMBER_COLS, NUMBER_COLS, NUMBER_COLS, NUMBER_COLS, NUMBER_COLS};
    for (size_t i = 0; i < n; i++) {
        if (!row_ok(&rows[i]))
            return SW_EINVAL;
        size_t h = sw__text_width(rows[i].handler) + 4, e = sw__text_width(rows[i].event) + 4;
        widths[0] = h > widths[0] ? h : widths[0];
        widths[1] = e > widths[1] ? e : widths[1];
    }
    static const sw_ignite_row header = {"Handler",    "Event Name", "Total(s)", "Min(s)/IDX", NULL,
                                         "Max(s)/IDX", NULL,         "Mean(s)",  "Std(s)"};
    fputc('\n', out);
    put_sep(out, widths);
    put_row(out, widths, &header);
    put_sep(out, widths);
    for (size_t i = 0; i < n - 2; i++) {
        if (i == n - 3) /* the Total row, between rules */
            put_sep(out, widths);
        put_row(out, widths, &rows[i]);
    }
    put_sep(out, widths);
    sw__ignite_put_summary(out, &rows[n - 2]);
    sw__ignite_put_summary(out, &rows[n - 1]);
    return ferror(out) ? SW_EIO : 0;
}

sw_ignite_row sw__ignite_row_of(const char *handler, const char *event, const sw__ignite_cells *c) {
    return (sw_ignite_row){handler, event,        c->total, c->min, c->min_index,
                           c->max,  c->max_index, c->mean,  c->std};
}
