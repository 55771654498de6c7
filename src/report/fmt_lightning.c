/*
 * fmt_lightning.c — SW_FORMAT_LIGHTNING, the layout of Lightning's SimpleProfiler
 * (extended=True) as it prints it: a "Profiler Report" title, tab-separated cells padded
 * to 15 characters, dashed rules as long as the header line with tabs expanded plus one,
 * a "Total" row with the wall time and the number of calls, then one row per action,
 * largest percentage first. Numbers are seconds written the way Python's f"{x:.5}" does.
 *
 * Rows are the all-phase roll-ups, so names are plain action names as Lightning shows
 * them. Only names longer than NAME_MAX_COLS columns differ from Lightning: they are
 * shortened in the middle so a rogue name cannot push the table across the screen, unless
 * full_names asks for every name whole (a report kept in a file). brief is Lightning's
 * extended=False: Action, Mean duration and Total time, largest mean first, no Total row.
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_COLS 48

/* Python's format(x, ".5"): %.5g, but a number printed without a point or an exponent
 * gets ".0" (Python shows 100.0, not 100). */
static void py_g5(double x, char *out, size_t size) {
    snprintf(out, size, "%.5g", x);
    if (strpbrk(out, ".eni") == NULL) /* not "1e-05", "nan", "inf" */
        strncat(out, ".0", size - strlen(out) - 1);
}

/* Columns a line takes with its tabs expanded to multiples of 8 (str.expandtabs). */
static size_t expanded_width(const char *line) {
    size_t col = 0;
    for (const unsigned char *p = (const unsigned char *)line; *p; p++) {
        if (*p == '\t')
            col = (col / 8 + 1) * 8;
        else if ((*p & 0xC0) != 0x80)
            col++;
    }
    return col;
}

/* One row as Lightning's log_row_extended builds it (without the leading line break); a
 * NULL calls is log_row's (extended=False): Action, Mean duration, Total time. */
static void format_row(char *out, size_t size, size_t key_width, const char *action,
                       const char *mean, const char *calls, const char *total,
                       const char *percent) {
    size_t w = sw__text_width(action);
    int pad = w < key_width ? (int)(key_width - w) : 0;
    if (calls == NULL)
        snprintf(out, size, "|  %s%*s\t|  %-15s\t|  %-15s\t|", action, pad, "", mean, total);
    else
        snprintf(out, size, "|  %s%*s\t|  %-15s\t|  %-15s\t|  %-15s\t|  %-15s\t|", action, pad, "",
                 mean, calls, total, percent);
}

static void put_rule(FILE *out, size_t n) {
    fputc('\n', out);
    for (size_t i = 0; i < n; i++)
        fputc('-', out);
}

/* extended=False sorts by mean duration, largest first (ties by name, for stable output). */
static int by_mean(const void *a, const void *b) {
    const sw_row *x = *(const sw_row *const *)a, *y = *(const sw_row *const *)b;
    if (x->stats.mean_ns != y->stats.mean_ns)
        return x->stats.mean_ns < y->stats.mean_ns ? 1 : -1;
    return strcmp(x->action_name ? x->action_name : "", y->action_name ? y->action_name : "");
}

static int write_lightning(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    const sw_row **rows = NULL;
    long n = sw__rows_select(s, 1, &rows);
    if (n < 0)
        return SW_ENOMEM;
    int extended = !opts->brief;
    if (!extended)
        qsort(rows, (size_t)n, sizeof *rows, by_mean);
    size_t name_cols = sw__name_cols(opts, NAME_MAX_COLS);
    size_t key_width = 0;
    uint64_t calls = 0;
    char name[SW__LABEL_MAX], fitted[SW__LABEL_MAX];
    for (long i = 0; i < n; i++) {
        if (rows[i]->stats.count == 0)
            continue; /* only warm-up calls: Lightning has no such rows */
        sw__row_action(rows[i], name, sizeof name);
        sw__text_fit(name, name_cols, fitted, sizeof fitted);
        size_t w = sw__text_width(fitted);
        key_width = w > key_width ? w : key_width;
        calls += rows[i]->stats.count;
    }

    char line[2 * SW__LABEL_MAX], a[32], b[32], c[32], d[32];
    format_row(line, sizeof line, key_width, "Action", "Mean duration (s)",
               extended ? "Num calls" : NULL, "Total time (s)", "Percentage %");
    /* Lightning measures the header with its leading line break: one more dash. */
    size_t rule = expanded_width(line) + 1;

    fputs("Profiler Report\n", out);
    put_rule(out, rule);
    fprintf(out, "\n%s", line);
    put_rule(out, rule);
    if (extended) {
        snprintf(a, sizeof a, "%" PRIu64, calls);
        py_g5((double)s->wall_ns / 1e9, b, sizeof b);
        format_row(line, sizeof line, key_width, "Total", "-", a, b, "100 %");
        fprintf(out, "\n%s", line);
        put_rule(out, rule);
    }
    for (long i = 0; i < n; i++) {
        const sw_stats *st = &rows[i]->stats;
        if (st->count == 0)
            continue;
        sw__row_action(rows[i], name, sizeof name);
        sw__text_fit(name, name_cols, fitted, sizeof fitted);
        py_g5(st->mean_ns / 1e9, a, sizeof a);
        snprintf(b, sizeof b, "%" PRIu64, st->count);
        py_g5((double)st->total_ns / 1e9, c, sizeof c);
        py_g5(sw__percent(s, st->total_ns), d, sizeof d);
        format_row(line, sizeof line, key_width, fitted, a, extended ? b : NULL, c, d);
        fprintf(out, "\n%s", line);
    }
    put_rule(out, rule);
    fputc('\n', out);
    free(rows);
    return 0;
}

const sw__writer sw__writer_lightning = {SW_FORMAT_LIGHTNING, "lightning", 0, write_lightning};
