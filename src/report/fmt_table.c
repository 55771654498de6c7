/*
 * fmt_table.c — SW_FORMAT_TABLE, stepwatch's own terminal table.
 *
 * Lightning's columns (Action, Mean, Num calls, Total, Percentage) with std (n - 1), p50,
 * p99 and self time, one row per action and phase ("train/forward"), largest total first,
 * a "Total" row first. Warm-up calls get a section of their own; misuse, dropped events,
 * the memory per step and counters are listed under the table when there are any.
 *
 * The table fits the terminal width (sw__term_width) or the width asked for
 * (sw_write_options): first the action column is shortened in the middle, down to
 * ACTION_MIN columns; when that is not enough, columns are dropped in the order p50, Self,
 * Std, p99. Mean, Calls, Total and % always stay, so below about 50 columns the names
 * shrink further (to 8 columns) and lines may overflow. Under full_names (a report for a
 * file) names are never shortened, and the width is unlimited unless one is given.
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define ACTION_MIN 16
#define GAP 2

static const int drop_order[] = {SW__COL_P50, SW__COL_SELF, SW__COL_STD, SW__COL_P99};

typedef struct layout {
    size_t action_width;
    size_t col_width[SW__NCOLS];
    int keep[SW__NCOLS];
} layout;

static void widen(layout *l, const sw__cells *c) {
    for (int k = 0; k < SW__NCOLS; k++) {
        size_t w = sw__text_width(c->v[k]);
        if (w > l->col_width[k])
            l->col_width[k] = w;
    }
}

static size_t kept_width(const layout *l) {
    size_t w = 0;
    for (int k = 0; k < SW__NCOLS; k++)
        if (l->keep[k])
            w += GAP + l->col_width[k];
    return w;
}

/* Choose the action column's width and the columns to keep for a terminal of width
 * columns, given the widest label. */
static void fit(layout *l, size_t natural_action, size_t width) {
    for (int k = 0; k < SW__NCOLS; k++)
        l->keep[k] = 1;
    size_t ndrop = sizeof drop_order / sizeof drop_order[0];
    for (size_t dropped = 0;; dropped++) {
        size_t cols = kept_width(l);
        if (natural_action + cols <= width) {
            l->action_width = natural_action;
            return;
        }
        if (ACTION_MIN + cols <= width) {
            l->action_width = width - cols;
            return;
        }
        if (dropped == ndrop) {
            /* Narrower than about 50 columns: the names give way, down to 8 columns. */
            size_t room = width > cols + 8 ? width - cols : 8;
            l->action_width = room < natural_action ? room : natural_action;
            return;
        }
        l->keep[drop_order[dropped]] = 0;
    }
}

static void put_line(FILE *out, const layout *l, const char *label, const char *const *cells) {
    char fitted[SW__LABEL_MAX];
    sw__text_fit(label, l->action_width, fitted, sizeof fitted);
    sw__put_padded(out, fitted, l->action_width, 0);
    for (int k = 0; k < SW__NCOLS; k++) {
        if (!l->keep[k])
            continue;
        fprintf(out, "%*s", GAP, "");
        sw__put_padded(out, cells[k], l->col_width[k], 1);
    }
    fputc('\n', out);
}

static void put_cells(FILE *out, const layout *l, const char *label, const sw__cells *c) {
    const char *cells[SW__NCOLS];
    for (int k = 0; k < SW__NCOLS; k++)
        cells[k] = c->v[k];
    put_line(out, l, label, cells);
}

static void put_rule(FILE *out, const layout *l) {
    size_t n = l->action_width + kept_width(l);
    for (size_t i = 0; i < n; i++)
        fputc('-', out);
    fputc('\n', out);
}

static void put_counters(const sw_snapshot *s, FILE *out) {
    size_t shown = 0;
    for (size_t i = 0; i < s->ncounters; i++)
        shown += !sw__device_phase_time(s->counters[i].name) &&
                 !sw__comm_bw_counter(s->counters[i].name);
    if (shown == 0)
        return;
    fputs("\nCounters:\n", out);
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        if (sw__device_phase_time(c->name))
            continue; /* nanoseconds: the Device table shows them in time units */
        if (sw__comm_bw_counter(c->name))
            continue; /* the Collectives section shows them */
        char name[SW__LABEL_MAX];
        sw__text_clean(c->name ? c->name : "?", name, sizeof name);
        fprintf(out, "  %s: last %.6g, min %.6g, max %.6g, mean %.6g (%" PRIu64 " sample%s)\n",
                name, c->last, c->min, c->max, c->mean, c->count, c->count == 1 ? "" : "s");
    }
}

static int write_table(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    const sw_row **rows = NULL;
    long n = sw__rows_select(s, 0, &rows);
    if (n < 0)
        return SW_ENOMEM;
    sw__cells *cells = calloc((size_t)n + 1, sizeof *cells);
    sw__cells *warm = calloc((size_t)n + 1, sizeof *warm);
    if (cells == NULL || warm == NULL) {
        free(rows);
        free(cells);
        free(warm);
        return SW_ENOMEM;
    }

    layout l = {0};
    for (int k = 0; k < SW__NCOLS; k++)
        l.col_width[k] = strlen(sw__col_header[k]);
    size_t natural = strlen("Action");
    uint64_t calls = 0;
    char label[SW__LABEL_MAX];
    for (long i = 0; i < n; i++) {
        sw__cells_of(s, &rows[i]->stats, &rows[i]->hist, &cells[i]);
        widen(&l, &cells[i]);
        if (rows[i]->warmup.count > 0) {
            sw__cells_of(s, &rows[i]->warmup, NULL, &warm[i]);
            widen(&l, &warm[i]);
        }
        sw__row_label(rows[i], label, sizeof label);
        size_t w = sw__text_width(label);
        natural = w > natural ? w : natural;
        calls += rows[i]->stats.count;
    }
    sw__cells total;
    sw__cells_total(s, calls, &total);
    widen(&l, &total);
    /* A report for a file (full_names) takes the room its names need. */
    size_t width = opts->width ? opts->width : opts->full_names ? SIZE_MAX : sw__term_width(out);
    fit(&l, natural, width);
    if (opts->full_names)
        l.action_width = natural;

    char name[SW__LABEL_MAX], summary[256];
    sw__text_clean(s->name ? s->name : "stepwatch", name, sizeof name);
    sw__run_summary(s, summary, sizeof summary);
    fprintf(out, "stepwatch report: %s (%s)\n", name, summary);
    sw__put_efficiency(s, out, "");
    sw__put_efficiency_phases(s, out);
    fputc('\n', out);

    put_line(out, &l, "Action", sw__col_header);
    put_rule(out, &l);
    put_cells(out, &l, "Total", &total);
    put_rule(out, &l);
    for (long i = 0; i < n; i++) {
        sw__row_label(rows[i], label, sizeof label);
        put_cells(out, &l, label, &cells[i]);
    }
    put_rule(out, &l);

    if (sw__has_warmup(s)) {
        fprintf(out, "\nWarm-up (first %" PRIu32 " step%s per phase):\n", s->warmup_steps,
                s->warmup_steps == 1 ? "" : "s");
        put_line(out, &l, "Action", sw__col_header);
        put_rule(out, &l);
        for (long i = 0; i < n; i++) {
            if (rows[i]->warmup.count == 0)
                continue;
            sw__row_label(rows[i], label, sizeof label);
            put_cells(out, &l, label, &warm[i]);
        }
        put_rule(out, &l);
    }

    sw__put_problems(s, out, "");
    sw__put_memory(s, out, "");
    sw__put_slow(s, out, "");
    sw__put_comm_bw(s, out, 0);
    put_counters(s, out);

    free(rows);
    free(cells);
    free(warm);
    return 0;
}

const sw__writer sw__writer_table = {SW_FORMAT_TABLE, "table", 0, write_table};
