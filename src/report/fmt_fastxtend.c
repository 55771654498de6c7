/*
 * fmt_fastxtend.c — SW_FORMAT_FASTXTEND, the report of fastxtend's Simple/Throughput
 * profilers as it prints it ("Profiling Results", then the table pandas prints).
 *
 * Columns: Phase, Action, Mean Duration, Duration Std Dev (population, like np.std),
 * Number of Calls, Samples/Second, Total Time, Percent of Total. Durations use fastxtend's
 * scale_time (sw_format_scale_time, units.c): four significant digits and an SI prefix
 * ("35.63 s", "838.2ms", "771.3µs"), "-" for zero. Percentages have no decimals ("71%"),
 * samples/s thousands separators.
 *
 * Rows, as fastxtend orders them: phase "fit" first with the run (fit) and the structural
 * actions (epoch, train, valid, user phases); then one group per phase (train, valid, then
 * the others) with step, data, forward, loss, backward, optimizer, zero_grad first and any
 * other action after, largest total first. Actions keep stepwatch's names (data is
 * fastxtend's draw, optimizer its opt_step). Samples/s of a phase row is the samples/s of
 * that phase's steps; only step, forward, loss, backward and optimizer rows have their
 * own (fastxtend shows "-" for zero_grad; its negative "draw" rate has no stepwatch
 * equivalent, so data shows "-" too).
 * When warm-up is on, fastxtend's "Batch dropped" line follows.
 */
#include "writer.h"
#include "core/core.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_COLS 40
#define NCOLS 8

static const char *const headers[NCOLS] = {
    "Phase",           "Action",         "Mean Duration", "Duration Std Dev",
    "Number of Calls", "Samples/Second", "Total Time",    "Percent of Total"};

typedef struct line {
    char v[NCOLS][SW__LABEL_MAX / 4];
} line;

typedef struct table {
    line *lines;
    size_t n, cap;
    size_t name_cols; /* NAME_MAX_COLS, or unlimited under full_names */
} table;

static int phase_in(const char *name, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (names[i] && name && strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

static line *add_line(table *t) {
    if (sw__grow(&t->lines, sizeof *t->lines, &t->cap, t->n + 1, 32) != 0)
        return NULL;
    line *l = &t->lines[t->n++];
    memset(l, 0, sizeof *l);
    return l;
}

static void put_name(const table *t, char *out, size_t size, const char *raw) {
    char clean[SW__LABEL_MAX];
    sw__text_clean(raw, clean, sizeof clean);
    sw__text_fit(clean, t->name_cols, out, size);
}

static void samples_cell(const sw_stats *st, char *out, size_t size) {
    double v = sw_stats_samples_per_s(st);
    if (v <= 0) {
        snprintf(out, size, "-");
        return;
    }
    sw__with_commas((uint64_t)llround(v), out, size);
}

/* Fill the numeric cells of l from st; samples NULL shows "-". */
static void fill(const sw_snapshot *s, line *l, const sw_stats *st, const sw_stats *samples) {
    size_t sz = sizeof l->v[0];
    sw_format_scale_time(st->mean_ns / 1e9, l->v[2], sz);
    sw_format_scale_time(sw_stats_pstddev(st) / 1e9, l->v[3], sz);
    snprintf(l->v[4], sz, "%" PRIu64, st->count);
    if (samples != NULL)
        samples_cell(samples, l->v[5], sz);
    else
        snprintf(l->v[5], sz, "-");
    sw_format_scale_time((double)st->total_ns / 1e9, l->v[6], sz);
    snprintf(l->v[7], sz, "%.0f%%", sw__percent(s, st->total_ns));
}

/* Rank of an action inside its phase group: fastxtend's order, then the rest (fastxtend has
 * no callback or collective action: those come with the other actions). */
static int detail_rank(const sw_row *r) {
    if (r->action_name && strcmp(r->action_name, "step") == 0)
        return 0;
    if (r->category == SW_CAT_CALLBACK || r->category == SW_CAT_COLLECTIVE ||
        r->category == SW_CAT_OTHER)
        return 100;
    return 1 + (int)r->category;
}

static int by_detail_order(const void *a, const void *b) {
    const sw_row *x = *(const sw_row *const *)a, *y = *(const sw_row *const *)b;
    int rx = detail_rank(x), ry = detail_rank(y);
    if (rx != ry)
        return rx - ry;
    if (x->stats.total_ns != y->stats.total_ns)
        return x->stats.total_ns > y->stats.total_ns ? -1 : 1;
    return strcmp(x->action_name ? x->action_name : "", y->action_name ? y->action_name : "");
}

/* fastxtend shows samples/s for the step and the compute actions only. */
static int has_rate(const sw_row *r) {
    if (r->action_name && strcmp(r->action_name, "step") == 0)
        return 1;
    return r->category == SW_CAT_FORWARD || r->category == SW_CAT_LOSS ||
           r->category == SW_CAT_BACKWARD || r->category == SW_CAT_OPTIMIZER;
}

static int build(const sw_snapshot *s, table *t) {
    /* Phase names in play: the built-ins and every phase a row was recorded in. */
    const char **phases = calloc(s->nrows + 4, sizeof *phases);
    const sw_row **group = calloc(s->nrows + 1, sizeof *group);
    if (phases == NULL || group == NULL) {
        free(phases);
        free(group);
        return SW_ENOMEM;
    }
    size_t nphases = 0;
    static const char *const builtin[] = {"fit", "epoch", "train", "valid"};
    for (size_t i = 0; i < 4; i++)
        phases[nphases++] = builtin[i];
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->phase != SW_PHASE_ALL && r->phase != SW_PHASE_NONE && r->phase_name &&
            !phase_in(r->phase_name, phases, nphases))
            phases[nphases++] = r->phase_name;
    }

    /* The "fit" group: the run, then the structural actions (roll-ups). */
    line *l = add_line(t);
    if (l == NULL)
        goto nomem;
    const sw_row *fit = sw_snapshot_find(s, "fit", "all");
    snprintf(l->v[0], sizeof l->v[0], "fit");
    fill(s, l, fit ? &fit->stats : &(sw_stats){.count = 1, .total_ns = s->wall_ns}, NULL);
    snprintf(l->v[2], sizeof l->v[0], "-");
    snprintf(l->v[3], sizeof l->v[0], "-");
    for (size_t p = 1; p < nphases; p++) {
        const sw_row *r = sw_snapshot_find(s, phases[p], "all");
        if (r == NULL || r->stats.count == 0)
            continue;
        const sw_row *step = sw_snapshot_find(s, "step", phases[p]);
        if ((l = add_line(t)) == NULL)
            goto nomem;
        put_name(t, l->v[1], sizeof l->v[1], phases[p]);
        fill(s, l, &r->stats, step && p >= 2 ? &step->stats : NULL);
    }

    /* One group per phase, in the order of phases[], then actions outside any phase
     * ("none"); structural actions are left out (they are in the fit group). */
    for (size_t p = 0; p <= nphases; p++) {
        size_t n = 0;
        for (size_t i = 0; i < s->nrows; i++) {
            const sw_row *r = &s->rows[i];
            int in_group = p == nphases ? r->phase == SW_PHASE_NONE
                                        : r->phase != SW_PHASE_ALL && r->phase_name &&
                                              strcmp(r->phase_name, phases[p]) == 0;
            if (in_group && r->stats.count > 0 && !phase_in(r->action_name, phases, nphases))
                group[n++] = r;
        }
        qsort(group, n, sizeof *group, by_detail_order);
        for (size_t i = 0; i < n; i++) {
            if ((l = add_line(t)) == NULL)
                goto nomem;
            if (i == 0)
                put_name(t, l->v[0], sizeof l->v[0], p == nphases ? "none" : phases[p]);
            put_name(t, l->v[1], sizeof l->v[1],
                     group[i]->action_name ? group[i]->action_name : "?");
            fill(s, l, &group[i]->stats, has_rate(group[i]) ? &group[i]->stats : NULL);
        }
    }
    free(phases);
    free(group);
    return 0;
nomem:
    free(phases);
    free(group);
    return SW_ENOMEM;
}

static int write_fastxtend(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    table t = {.name_cols = sw__name_cols(opts, NAME_MAX_COLS)};
    int rc = build(s, &t);
    if (rc != 0) {
        free(t.lines);
        return rc;
    }
    size_t width[NCOLS];
    for (int c = 0; c < NCOLS; c++) {
        width[c] = strlen(headers[c]);
        for (size_t i = 0; i < t.n; i++) {
            size_t w = sw__text_width(t.lines[i].v[c]);
            width[c] = w > width[c] ? w : width[c];
        }
    }
    fputs("Profiling Results\n", out);
    for (int c = 0; c < NCOLS; c++) {
        fputs(c ? "  " : "", out);
        sw__put_padded(out, headers[c], width[c], 1);
    }
    fputc('\n', out);
    for (size_t i = 0; i < t.n; i++) {
        for (int c = 0; c < NCOLS; c++) {
            fputs(c ? "  " : "", out);
            sw__put_padded(out, t.lines[i].v[c], width[c], 1);
        }
        fputc('\n', out);
    }
    if (s->warmup_steps == 1)
        fputs("Batch dropped. train and valid phases show 1 less batch than fit.\n", out);
    else if (s->warmup_steps > 1)
        fprintf(out,
                "Batches dropped. train and valid phases show %" PRIu32 " less batches than fit.\n",
                s->warmup_steps);
    free(t.lines);
    return 0;
}

const sw__writer sw__writer_fastxtend = {SW_FORMAT_FASTXTEND, "fastxtend", 0, write_fastxtend};
