/*
 * html_slow.c — the HTML report's slow steps (docs/slow-steps.md) as JSON beside the
 * report's other data, which html/slow.js draws: a mark per slow step on the step-time chart
 * (its cause and evidence on hover), a table of them, and on a click the kept spans of the
 * step and of the step before it (its window).
 *
 * Bounded for any run: the SW__HTML_SLOW costliest slow steps (by excess over their median)
 * and the spans of the SW__HTML_WINDOWS costliest kept windows; the counts of the whole run
 * come with them, so the page says how many it does not show.
 */
#include "analysis_internal.h"

#include <stdlib.h>

#define SW__HTML_SLOW 500   /* slow steps in the page */
#define SW__HTML_WINDOWS 64 /* windows whose spans are in the page */

typedef struct slow_pick {
    size_t n;
    sw__slow_entry *kept; /* SW__HTML_SLOW, largest excess first, then in time order */
    /* The windows embedded: (rank, step) of the costliest kept ones. */
    size_t nwindows;
    int window_rank[SW__HTML_WINDOWS];
    uint64_t window_step[SW__HTML_WINDOWS];
} slow_pick;

static int keep_slow(void *ctx, int rank, const sw_step_record *r) {
    slow_pick *p = ctx;
    p->n = sw__slow_keep(p->kept, p->n, SW__HTML_SLOW, rank, r);
    return 0;
}

static int by_time(const void *a, const void *b) {
    const sw__slow_entry *x = a, *y = b;
    if (x->r.start_ns != y->r.start_ns)
        return x->r.start_ns < y->r.start_ns ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int window_embedded(const slow_pick *p, int rank, uint64_t step) {
    for (size_t i = 0; i < p->nwindows; i++)
        if (p->window_rank[i] == rank && p->window_step[i] == step)
            return 1;
    return 0;
}

static void json_summary(sw__jw *w, const sw_slow_summary *s, size_t shown) {
    sw__jw_kv_uint(w, "judged", s->judged);
    sw__jw_kv_uint(w, "slow", s->slow);
    sw__jw_kv_uint(w, "slow_ns", s->slow_ns);
    sw__jw_kv_uint(w, "excess_ns", s->excess_ns);
    sw__jw_kv_uint(w, "windows_kept", s->windows_kept);
    sw__jw_kv_uint(w, "windows_not_kept", s->windows_dropped);
    sw__jw_kv_uint(w, "shown", shown);
    sw__jw_kv_double(w, "factor", SW_SLOW_FACTOR);
    sw__jw_kv_uint(w, "floor_ns", SW_SLOW_FLOOR_NS);
    /* [cause, steps, what to do] of each cause that occurred */
    sw__jw_key(w, "causes");
    sw__jw_array_begin(w);
    for (int c = 1; c < SW_CAUSE_COUNT; c++) {
        if (s->by_cause[c] == 0)
            continue;
        sw__jw_array_begin(w);
        sw__jw_string(w, sw_cause_name((sw_cause)c));
        sw__jw_uint(w, s->by_cause[c]);
        sw__jw_string(w, sw__slow_advice((sw_cause)c));
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
}

static void json_slow_step(sw__jw *w, const sw__slow_entry *e, int embedded) {
    const sw_step_record *r = &e->r;
    char line[300];
    sw__jw_object_begin(w);
    sw__jw_kv_int(w, "rank", e->rank);
    sw__jw_kv_uint(w, "step", r->step);
    sw__jw_kv_string(w, "phase", r->phase == SW_PHASE_VALID ? "valid" : "train");
    sw__jw_kv_uint(w, "start_ns", r->start_ns);
    sw__jw_kv_uint(w, "duration_ns", r->duration_ns);
    sw__jw_kv_uint(w, "median_ns", r->median_ns);
    sw__jw_kv_string(w, "cause", sw_cause_name(r->cause));
    sw__jw_kv_uint(w, "explained_ns", r->explained_ns);
    sw__jw_key(w, "evidence");
    sw__jw_display_string(w, sw_slow_step_text(r, line, sizeof line));
    sw__jw_kv_uint(w, "window_kept", r->window_kept != 0);
    sw__jw_kv_uint(w, "window", embedded);
    sw__jw_object_end(w);
}

/* The spans of the embedded windows, one object per window: spans as [action, step, depth,
 * start_ns, duration_ns]. A window's spans come together (the reader's order), so one is
 * open at a time. */
typedef struct window_writer {
    sw__jw *w;
    const sw__input *in;
    const slow_pick *pick;
    int open, rank;
    uint64_t step;
} window_writer;

static void window_close(window_writer *ww) {
    if (!ww->open)
        return;
    sw__jw_array_end(ww->w);
    sw__jw_object_end(ww->w);
    ww->open = 0;
}

static int on_window_span(void *ctx, int rank, uint64_t window, const sw_span_record *span) {
    window_writer *ww = ctx;
    if (!window_embedded(ww->pick, rank, window))
        return 0;
    sw__jw *w = ww->w;
    if (!ww->open || ww->rank != rank || ww->step != window) {
        window_close(ww);
        sw__jw_object_begin(w);
        sw__jw_kv_int(w, "rank", rank);
        sw__jw_kv_uint(w, "step", window);
        sw__jw_key(w, "spans");
        sw__jw_array_begin(w);
        ww->open = 1;
        ww->rank = rank;
        ww->step = window;
    }
    const char *name = ww->in->action_name ? ww->in->action_name(ww->in->src, rank, span->action)
                                           : NULL;
    sw__jw_array_begin(w);
    sw__jw_display_string(w, name ? name : "?");
    sw__jw_int(w, span->step);
    sw__jw_uint(w, span->depth);
    sw__jw_uint(w, span->start_ns);
    sw__jw_uint(w, span->duration_ns);
    sw__jw_array_end(w);
    return 0;
}

/* The costliest kept windows of those picked, before the steps are put in time order. */
static void pick_windows(slow_pick *p) {
    for (size_t i = 0; i < p->n && p->nwindows < SW__HTML_WINDOWS; i++) {
        if (!p->kept[i].r.window_kept)
            continue;
        p->window_rank[p->nwindows] = p->kept[i].rank;
        p->window_step[p->nwindows] = p->kept[i].r.step;
        p->nwindows++;
    }
}

int sw__html_json_slow(sw__jw *w, const sw__input *in) {
    const sw_snapshot *snap = in->snap;
    slow_pick *p = calloc(1, sizeof *p);
    int rc = p ? 0 : SW_ENOMEM;
    if (rc == 0 && snap->slow.slow > 0 && in->foreach_slow_step) {
        p->kept = malloc(SW__HTML_SLOW * sizeof *p->kept);
        rc = p->kept ? in->foreach_slow_step(in->src, keep_slow, p) : SW_ENOMEM;
    }
    if (rc != 0) {
        if (p)
            free(p->kept);
        free(p);
        return rc;
    }
    pick_windows(p);
    if (p->n > 1)
        qsort(p->kept, p->n, sizeof *p->kept, by_time);
    sw__jw_key(w, "slow");
    sw__jw_object_begin(w);
    json_summary(w, &snap->slow, p->n);
    sw__jw_key(w, "steps");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < p->n; i++)
        json_slow_step(w, &p->kept[i], window_embedded(p, p->kept[i].rank, p->kept[i].r.step));
    sw__jw_array_end(w);
    sw__jw_key(w, "windows");
    sw__jw_array_begin(w);
    if (p->nwindows > 0 && in->foreach_window_span) {
        window_writer ww = {.w = w, .in = in, .pick = p};
        rc = in->foreach_window_span(in->src, on_window_span, &ww);
        window_close(&ww);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
    free(p->kept);
    free(p);
    return rc;
}
