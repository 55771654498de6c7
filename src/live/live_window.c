/*
 * live_window.c — sw_live_*: the figures of the last few seconds of a run, from snapshots.
 *
 * The rings of step events have one consumer (the run file), so the window is built from
 * what any reader may take: snapshots. Each update keeps a mark — the cumulative step count,
 * step time, samples, time per category and the steady-state step histogram — and the
 * figures are the difference between the newest mark and the oldest one inside the window.
 * Histograms subtract bucket by bucket, so p50/p99 cover only the window's steps.
 */
#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LIVE_MARKS 64
#define LIVE_DEFAULT_WINDOW_S 10.0

typedef struct live_mark {
    uint64_t time_ns;
    uint64_t steps;                /* ended steps, warm-up included */
    uint64_t step_ns;              /* their time */
    uint64_t samples;              /* their batch sizes */
    uint64_t cat_ns[SW_CAT_COUNT]; /* time of the categorized actions (other: unused) */
    uint64_t min_ns, max_ns;       /* the steady-state steps' range so far */
    uint64_t train_steps;          /* ended steps of the "train" phase (all steps without one) */
    double flops_per_step;         /* the "flops_per_step" note; NaN: none */
    double peak_flops;             /* the "peak_flops" note; NaN: none */
    sw_hist hist;                  /* steady-state step durations */
} live_mark;

struct sw_live {
    sw_profiler *p;
    uint64_t window_ns;
    size_t newest, count; /* a ring of marks; count >= 1 */
    live_mark marks[LIVE_MARKS];
};

int sw_live_new(sw_profiler *p, double window_s, sw_live **out) {
    if (out != NULL)
        *out = NULL;
    if (p == NULL || out == NULL || isnan(window_s))
        return SW_EINVAL;
    sw_live *w = calloc(1, sizeof *w);
    if (w == NULL)
        return SW_ENOMEM;
    w->p = p;
    w->window_ns = (uint64_t)((window_s > 0 ? window_s : LIVE_DEFAULT_WINDOW_S) * 1e9);
    w->count = 1; /* an empty mark at the profiler's start: the first window starts there */
    w->marks[0].time_ns = sw__origin_ns(p);
    *out = w;
    return 0;
}

void sw_live_free(sw_live *w) {
    free(w);
}

/* A note as a positive number, else NaN. */
static double note_number(const sw_snapshot *s, const char *key) {
    const char *text = sw_snapshot_note(s, key);
    char *end;
    double v = text ? strtod(text, &end) : NAN;
    return text && end != text && *end == '\0' && v > 0 ? v : NAN;
}

/* The FLOP figures of a mark: the front end that counts FLOPs (python/stepwatch/flops.py)
 * notes the FLOPs per training step once counted and the device's peak; the rate is taken
 * over the training steps, not the validation ones. */
static void flops_of(const sw_snapshot *s, live_mark *m) {
    m->flops_per_step = note_number(s, "flops_per_step");
    m->peak_flops = note_number(s, "peak_flops");
    m->train_steps = m->steps;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->phase_name && strcmp(r->phase_name, "train") == 0 && r->action_name &&
            strcmp(r->action_name, "step") == 0)
            m->train_steps = r->stats.count + r->warmup.count;
    }
}

static void mark_of(const sw_snapshot *s, uint64_t now, live_mark *m) {
    memset(m, 0, sizeof *m);
    m->time_ns = now;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->phase != SW_PHASE_ALL || r->action_name == NULL)
            continue;
        uint64_t total = r->stats.total_ns + r->warmup.total_ns;
        if (strcmp(r->action_name, "step") == 0) {
            m->steps = r->stats.count + r->warmup.count;
            m->step_ns = total;
            m->samples = r->stats.samples + r->warmup.samples;
            m->min_ns = r->stats.min_ns;
            m->max_ns = r->stats.max_ns;
            m->hist = r->hist;
        } else if (r->category != SW_CAT_OTHER) {
            m->cat_ns[r->category] += total;
        }
    }
}

static uint64_t minus(uint64_t a, uint64_t b) {
    return a > b ? a - b : 0;
}

/* The oldest mark at most window_ns older than the newest; at least the one before it. */
static const live_mark *window_start(const sw_live *w) {
    const live_mark *newest = &w->marks[w->newest];
    const live_mark *start = NULL;
    for (size_t k = w->count - 1; k >= 1; k--) {
        const live_mark *m = &w->marks[(w->newest + LIVE_MARKS - k) % LIVE_MARKS];
        if (start == NULL && (newest->time_ns - m->time_ns <= w->window_ns || k == 1))
            start = m;
    }
    return start;
}

static void values_of(const live_mark *from, const live_mark *to, sw_live_values *v) {
    *v = (sw_live_values)SW_LIVE_VALUES_INIT;
    double dt = (double)minus(to->time_ns, from->time_ns) / 1e9;
    v->window_s = dt;
    v->steps = minus(to->steps, from->steps);
    v->total_steps = to->steps;
    v->steps_per_s = dt > 0 ? (double)v->steps / dt : NAN;
    uint64_t samples = minus(to->samples, from->samples);
    v->samples_per_s = samples > 0 && dt > 0 ? (double)samples / dt : NAN;
    sw_hist h = {0};
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        h.buckets[i] = to->hist.buckets[i] > from->hist.buckets[i]
                           ? to->hist.buckets[i] - from->hist.buckets[i]
                           : 0;
        h.count += h.buckets[i];
    }
    /* Clamped like every printed quantile, to the range the steps have shown so far. */
    sw_stats range = {.count = h.count, .min_ns = to->min_ns, .max_ns = to->max_ns};
    v->step_p50_ns = h.count ? (double)sw_stats_quantile(&range, &h, 0.50) : NAN;
    v->step_p99_ns = h.count ? (double)sw_stats_quantile(&range, &h, 0.99) : NAN;
    double step_ns = (double)minus(to->step_ns, from->step_ns), covered = 0;
    double cat[SW_CAT_COUNT];
    for (int k = 0; k < SW_CAT_COUNT; k++) {
        cat[k] = k == SW_CAT_OTHER ? 0 : (double)minus(to->cat_ns[k], from->cat_ns[k]);
        covered += cat[k];
    }
    cat[SW_CAT_OTHER] = step_ns > covered ? step_ns - covered : 0;
    uint64_t train = minus(to->train_steps, from->train_steps);
    v->flops_per_s = dt > 0 && train > 0 ? to->flops_per_step * (double)train / dt : NAN;
    v->mfu = v->flops_per_s / to->peak_flops; /* NaN without either */
    v->slowest = SW_CAT_COUNT;
    v->data_share = v->slowest_share = NAN;
    if (step_ns <= 0)
        return;
    v->data_share = fmin(1.0, cat[SW_CAT_DATA] / step_ns);
    for (int k = 0; k < SW_CAT_COUNT; k++)
        if (cat[k] > 0 && (v->slowest == SW_CAT_COUNT || cat[k] > cat[v->slowest]))
            v->slowest = (sw_category)k;
    if (v->slowest != SW_CAT_COUNT)
        v->slowest_share = fmin(1.0, cat[v->slowest] / step_ns);
}

int sw_live_update(sw_live *w, sw_live_values *out) {
    if (w == NULL || out == NULL)
        return SW_EINVAL;
    sw_snapshot *s = NULL;
    int rc = sw_snapshot_take(w->p, &s);
    if (rc != 0)
        return rc;
    w->newest = (w->newest + 1) % LIVE_MARKS;
    if (w->count < LIVE_MARKS)
        w->count++;
    mark_of(s, sw_now_ns(), &w->marks[w->newest]);
    flops_of(s, &w->marks[w->newest]);
    sw_snapshot_free(s);
    sw_live_values v;
    values_of(window_start(w), &w->marks[w->newest], &v);
    /* Into the caller's struct, of whatever stepwatch/live.h it was built with. */
    return sw__sized_out(out, &v, sizeof v, SW__END_OF(sw_live_values, slowest_share),
                         "sw_live_values");
}
