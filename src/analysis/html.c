/*
 * html.c — the self-contained HTML report: the run's data as one JSON document inside a
 * <script type="application/json"> element, drawn as inline SVG by the script in
 * src/analysis/html/report.js (embedded at build time, cmake/embed.cmake). Nothing is
 * fetched from the network: the Content-Security-Policy forbids every request.
 *
 * Bounded for any run length: steps and counter samples are downsampled into series of at
 * most 2000 points (min / median / mean / max and the wall-time span per point, see
 * series.h), so a chart of 10^6 steps draws a band per pixel column, not 10^6 elements;
 * histograms are embedded for the steady train and valid step time and the SW__HTML_HISTS
 * largest actions per phase only.
 *
 * A comparison page (sw_html_write_compare) carries a second run's document under "other"
 * and compare's verdicts under "compare"; the same script draws both.
 */
#include "analysis_internal.h"
#include "report/json_out.h"
#include "report/writer.h"
#include "series.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW__HTML_HISTS 12 /* action histograms embedded */
#define SW__HTML_HIST_MIN_CALLS 5
#define SW__HTML_COUNTERS 64       /* counter series drawn (all are in the table) */
#define SW__HTML_MEMORY_POINTS 500 /* points of each memory-per-step series */
#define SW__HTML_COUNTER_POINTS 500
#define SW__HTML_RANKS 1024 /* ranks in the cross-rank heatmap */

/* The page around the data; its style sheet and scripts come from src/analysis/html/. */
static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<meta name=\"generator\" content=\"stepwatch\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";
/* The live page (docs/live.md) may fetch its data from where it came from, nothing else. */
static const char page_csp_end[] = "\">\n";
static const char page_csp_live_end[] = "; connect-src 'self'\">\n";
static const char page_body[] =
    "</head>\n<body>\n<div id=\"sw-error\"></div>\n<main id=\"sw-main\"></main>\n"
    "<div id=\"sw-tip\" class=\"tip\"></div>\n"
    "<noscript>This report draws its charts with JavaScript; please enable it.</noscript>\n";

typedef struct counter_series {
    char name[256];
    sw__series series; /* x = ns since start, y = value */
} counter_series;

/* The step-time chart draws train and valid steps apart (other phases with train). */
enum { PHASE_TRAIN = 0, PHASE_VALID, NPHASES };
static const char *const phase_names[NPHASES] = {"train", "valid"};

/* The steady (not warm-up) steps of one phase, for the breakdown at the top of the page. */
typedef struct steady_sums {
    uint64_t steps, samples;
    double step_ns, category_ns[SW_CAT_COUNT];
    double sized_ns; /* time of the steps that gave a batch size (the samples/s denominator) */
} steady_sums;

/* One rank's steady steps, for the cross-rank heatmap. */
typedef struct rank_sums {
    uint64_t steps;
    double step_ns, category_ns[SW_CAT_COUNT];
} rank_sums;

/* Memory per step (sw_step_record): one series per figure, x = step index, y = bytes. Ranks
 * share them (a point's mean is over the ranks' steps in it). */
enum { MEM_RSS = 0, MEM_ALLOCATED, MEM_PEAK, MEM_RESERVED, NMEMORY };
static const char *const memory_names[NMEMORY] = {"RSS", "allocated", "peak allocated", "reserved"};

typedef struct html_ctx {
    const sw__input *in;
    sw__series memory[NMEMORY];
    sw__series steps;                /* x = step index, y = duration, sums = per-category ns */
    sw__series phase_steps[NPHASES]; /* the same, per phase, with medians, without the sums */
    sw_hist *step_hist;              /* NPHASES histograms of the steady steps */
    sw_stats step_range[NPHASES];    /* min/max of those steps, to clamp their quantiles */
    steady_sums steady[NPHASES];
    rank_sums *ranks; /* SW__HTML_RANKS */
    int max_rank;     /* highest rank seen, -1 before any */
    uint64_t step_records;
    counter_series *counters;
    size_t ncounters;
    int err;
} html_ctx;

static int on_step(void *ctx, int rank, const sw_step_record *s) {
    html_ctx *h = ctx;
    int phase = s->phase == SW_PHASE_VALID ? PHASE_VALID : PHASE_TRAIN;
    uint64_t end = s->start_ns + s->duration_ns;
    double cats[SW_CAT_COUNT];
    for (int k = 0; k < SW_CAT_COUNT; k++)
        cats[k] = (double)s->category_ns[k];
    sw__series_add(&h->steps, s->step, (double)s->duration_ns, s->start_ns, end, cats);
    sw__series_add(&h->phase_steps[phase], s->step, (double)s->duration_ns, s->start_ns, end, NULL);
    if (!s->warmup) {
        sw_hist_add(&h->step_hist[phase], s->duration_ns);
        sw_stats_add(&h->step_range[phase], s->duration_ns, s->duration_ns, (int64_t)s->step, 0);
        steady_sums *st = &h->steady[phase];
        st->steps++;
        st->samples += s->batch_size;
        st->sized_ns += s->batch_size ? (double)s->duration_ns : 0;
        st->step_ns += (double)s->duration_ns;
        for (int k = 0; k < SW_CAT_COUNT; k++)
            st->category_ns[k] += cats[k];
        if (rank >= 0 && rank < SW__HTML_RANKS) {
            rank_sums *r = &h->ranks[rank];
            r->steps++;
            r->step_ns += (double)s->duration_ns;
            for (int k = 0; k < SW_CAT_COUNT; k++)
                r->category_ns[k] += cats[k];
            h->max_rank = rank > h->max_rank ? rank : h->max_rank;
        }
    }
    if (s->rss_bytes != 0)
        sw__series_add(&h->memory[MEM_RSS], s->step, (double)s->rss_bytes, s->start_ns, end, NULL);
    if (s->has_allocator) {
        const double v[] = {(double)s->allocated_bytes, (double)s->peak_allocated_bytes,
                            (double)s->reserved_bytes};
        for (int k = 0; k < 3; k++)
            sw__series_add(&h->memory[MEM_ALLOCATED + k], s->step, v[k], s->start_ns, end, NULL);
    }
    h->step_records++;
    return 0;
}

static int on_counter(void *ctx, int rank, const sw_counter_record *c) {
    html_ctx *h = ctx;
    const char *name = h->in->counter_name ? h->in->counter_name(h->in->src, rank, c->counter)
                                           : NULL;
    if (!name || !isfinite(c->value))
        return 0;
    /* Ranks share a series per counter name. */
    counter_series *cs = NULL;
    for (size_t i = 0; i < h->ncounters && !cs; i++)
        if (strcmp(h->counters[i].name, name) == 0)
            cs = &h->counters[i];
    if (!cs) {
        if (h->ncounters >= SW__HTML_COUNTERS)
            return 0;
        cs = &h->counters[h->ncounters];
        snprintf(cs->name, sizeof cs->name, "%s", name);
        if (sw__series_init(&cs->series, SW__HTML_COUNTER_POINTS, 0) != 0) {
            h->err = SW_ENOMEM;
            return SW_ENOMEM;
        }
        h->ncounters++;
    }
    sw__series_add(&cs->series, c->time_ns, c->value, c->time_ns, c->time_ns, NULL);
    return 0;
}

/* ---- JSON pieces, through the report layer's streaming writer (report/json_out.h) ---- */

/* A string the page shows, cleaned (sw__jw_display_string); NULL shows as "". */
static void kv_shown(sw__jw *w, const char *k, const char *v) {
    sw__jw_key(w, k);
    sw__jw_display_string(w, v ? v : "");
}

/* A quantile of calls st summarizes, null when there are none. */
static void json_quantile(sw__jw *w, const char *k, const sw_stats *st, const sw_hist *h,
                          double q) {
    sw__jw_kv_double(w, k, st->count ? (double)sw_stats_quantile(st, h, q) : NAN);
}

/* Non-empty buckets as [low, high, count]; st gives the calls' range. */
static void json_hist(sw__jw *w, const sw_stats *st, const sw_hist *h) {
    sw__jw_object_begin(w);
    json_quantile(w, "p50", st, h, 0.5);
    json_quantile(w, "p99", st, h, 0.99);
    sw__jw_key(w, "buckets");
    sw__jw_array_begin(w);
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        if (!h->buckets[i])
            continue;
        sw__jw_array_begin(w);
        sw__jw_uint(w, sw_hist_bucket_low(i));
        sw__jw_uint(w, sw_hist_bucket_high(i));
        sw__jw_uint(w, h->buckets[i]);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}

static void json_run(sw__jw *w, const sw_snapshot *s, int nranks, uint64_t step_records) {
    sw__jw_key(w, "run");
    sw__jw_object_begin(w);
    kv_shown(w, "name", s->name ? s->name : "stepwatch");
    kv_shown(w, "host", s->host);
    kv_shown(w, "command", s->command);
    sw__jw_kv_int(w, "pid", s->pid);
    sw__jw_kv_int(w, "rank", s->rank);
    sw__jw_kv_int(w, "world_size", s->world_size);
    sw__jw_kv_int(w, "ranks", nranks);
    sw__jw_kv_uint(w, "start_unix_ns", s->start_unix_ns);
    sw__jw_kv_uint(w, "elapsed_ns", s->elapsed_ns);
    sw__jw_kv_uint(w, "wall_ns", s->wall_ns);
    sw__jw_kv_uint(w, "steps", s->steps);
    sw__jw_kv_uint(w, "step_records", step_records);
    sw__jw_kv_uint(w, "warmup_steps", s->warmup_steps);
    sw__jw_kv_uint(w, "threads", s->threads);
    sw__jw_kv_uint(w, "dropped_events", s->dropped_events);
    sw__jw_object_end(w);
}

/* The points of a series: [first step, count, min, mean, max, median, first start, last
 * end] (times in ns since the run started) and, with sums, the mean per category. */
static void json_points(sw__jw *w, const sw__series *st, int sums) {
    sw__jw_kv_uint(w, "first", st->origin);
    sw__jw_kv_uint(w, "width", st->width);
    sw__jw_key(w, "points");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < st->npoints; i++) {
        const sw__point *p = &st->points[i];
        if (p->count == 0)
            continue;
        sw__jw_array_begin(w);
        sw__jw_uint(w, st->origin + i * st->width);
        sw__jw_uint(w, p->count);
        sw__jw_double(w, p->min);
        sw__jw_double(w, p->sum / (double)p->count);
        sw__jw_double(w, p->max);
        sw__jw_double(w, round(sw__series_median(st, i)));
        sw__jw_uint(w, p->t_lo);
        sw__jw_uint(w, p->t_hi);
        for (int k = 0; sums && k < SW_CAT_COUNT; k++)
            sw__jw_double(w, round(p->sums[k] / (double)p->count));
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
}

static void json_steps(sw__jw *w, const sw__series *st) {
    sw__jw_key(w, "steps");
    sw__jw_object_begin(w);
    json_points(w, st, 1);
    sw__jw_object_end(w);
}

/* The step time per phase, for the step-time chart (phases without steps are left out). */
static void json_step_phases(sw__jw *w, const html_ctx *h) {
    sw__jw_key(w, "step_phases");
    sw__jw_array_begin(w);
    for (int k = 0; k < NPHASES; k++) {
        if (h->phase_steps[k].npoints == 0)
            continue;
        sw__jw_object_begin(w);
        kv_shown(w, "phase", phase_names[k]);
        json_points(w, &h->phase_steps[k], 0);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

static void json_stats(sw__jw *w, const sw_row *r, const sw_snapshot *s) {
    const sw_stats *st = &r->stats;
    sw__jw_kv_uint(w, "calls", st->count);
    sw__jw_kv_uint(w, "total_ns", st->total_ns);
    sw__jw_kv_uint(w, "self_ns", st->self_ns);
    /* null (shown "-") where a figure is undefined: a deviation of one call, the range and
     * quantiles of none, a rate without batch sizes. */
    double none = NAN;
    sw__jw_kv_double(w, "mean_ns", st->count ? st->mean_ns : none);
    sw__jw_kv_double(w, "std_ns", st->count >= 2 ? sw_stats_stddev(st) : none);
    sw__jw_kv_double(w, "min_ns", st->count ? (double)st->min_ns : none);
    sw__jw_kv_double(w, "max_ns", st->count ? (double)st->max_ns : none);
    json_quantile(w, "p50_ns", st, &r->hist, 0.5);
    json_quantile(w, "p90_ns", st, &r->hist, 0.9);
    json_quantile(w, "p99_ns", st, &r->hist, 0.99);
    sw__jw_kv_double(w, "pct",
                     s->wall_ns ? (double)st->total_ns / (double)s->wall_ns * 100.0 : none);
    sw__jw_kv_double(w, "samples_per_s", st->samples ? sw_stats_samples_per_s(st) : none);
    sw__jw_kv_uint(w, "warmup_calls", r->warmup.count);
    sw__jw_kv_uint(w, "warmup_total_ns", r->warmup.total_ns);
}

/* A row of one phase (not the roll-up, not calls outside any phase) with enough calls for a
 * histogram to say something: histograms never mix train and validation calls. */
static int wants_hist(const sw_row *r) {
    return r->phase != SW_PHASE_ALL && r->phase != SW_PHASE_NONE &&
           r->hist.count >= SW__HTML_HIST_MIN_CALLS;
}

/* Is row i among the n largest such roll-ups by total time? */
static int among_largest(const sw_snapshot *s, size_t i, size_t n) {
    if (!wants_hist(&s->rows[i]))
        return 0;
    size_t larger = 0;
    for (size_t j = 0; j < s->nrows; j++)
        if (j != i && wants_hist(&s->rows[j]) &&
            (s->rows[j].stats.total_ns > s->rows[i].stats.total_ns ||
             (s->rows[j].stats.total_ns == s->rows[i].stats.total_ns && j < i)))
            larger++;
    return larger < n;
}

static void json_actions(sw__jw *w, const sw_snapshot *s) {
    sw__jw_key(w, "actions");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        sw__jw_object_begin(w);
        kv_shown(w, "action", r->action_name);
        kv_shown(w, "phase", r->phase_name);
        sw__jw_kv_uint(w, "rollup", r->phase == SW_PHASE_ALL);
        kv_shown(w, "category", sw_category_name(r->category));
        sw_counter_summary device;
        if (sw__device_of(s, r, &device)) /* GPU time of the same calls (docs/device.md) */
            sw__jw_kv_double(w, "device_mean_ns", device.mean);
        json_stats(w, r, s);
        if (among_largest(s, i, SW__HTML_HISTS)) {
            sw__jw_key(w, "hist");
            json_hist(w, &r->stats, &r->hist);
        }
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* A series' points with samples, as [origin of the point, min, mean, max] (the mean
 * rounded when the values are whole, as bytes are), under key "points". */
static void json_min_mean_max(sw__jw *w, const sw__series *ser, int round_mean) {
    sw__jw_key(w, "points");
    sw__jw_array_begin(w);
    for (size_t p = 0; ser && p < ser->npoints; p++) {
        const sw__point *pt = &ser->points[p];
        if (!pt->count)
            continue;
        double mean = pt->sum / (double)pt->count;
        sw__jw_array_begin(w);
        sw__jw_uint(w, ser->origin + p * ser->width);
        sw__jw_double(w, pt->min);
        sw__jw_double(w, round_mean ? round(mean) : mean);
        sw__jw_double(w, pt->max);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
}

static void json_counters(sw__jw *w, const sw_snapshot *s, const html_ctx *h) {
    sw__jw_key(w, "counters");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        sw__jw_object_begin(w);
        kv_shown(w, "name", c->name);
        sw__jw_kv_uint(w, "count", c->count);
        sw__jw_kv_double(w, "last", c->last);
        sw__jw_kv_double(w, "min", c->min);
        sw__jw_kv_double(w, "max", c->max);
        sw__jw_kv_double(w, "mean", c->mean);
        const sw__series *ser = NULL;
        for (size_t j = 0; j < h->ncounters && !ser; j++)
            if (c->name && strcmp(h->counters[j].name, c->name) == 0)
                ser = &h->counters[j].series;
        json_min_mean_max(w, ser, 0); /* [time ns, min, mean, max] */
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* "memory": the memory per step's series, [first step, min, mean, max] per point (those
 * with steps), and the summary line the reports print. */
static void json_memory(sw__jw *w, const sw_snapshot *s, const html_ctx *h) {
    char line[256];
    sw__memory_text(&s->memory, line, sizeof line);
    sw__jw_key(w, "memory");
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "summary", line);
    sw__jw_key(w, "series");
    sw__jw_array_begin(w);
    for (int k = 0; k < NMEMORY; k++) {
        const sw__series *ser = &h->memory[k];
        if (!ser->started)
            continue;
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "name", memory_names[k]);
        sw__jw_kv_uint(w, "width", ser->width);
        json_min_mean_max(w, ser, 1);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}

/* A pair [a, b] of strings (a finding's number and its text, a note's key and value). */
static void string_pair(sw__jw *w, const char *a, const char *b) {
    sw__jw_array_begin(w);
    sw__jw_string(w, a ? a : "");
    sw__jw_string(w, b ? b : "");
    sw__jw_array_end(w);
}

/* A finding's sentence line by line, each cleaned for display (the slow-steps finding puts
 * its costliest steps and its advice on lines of their own). */
static void json_lines(sw__jw *w, const char *text) {
    char line[sizeof((sw__finding *)0)->sentence];
    sw__jw_key(w, "lines");
    sw__jw_array_begin(w);
    for (const char *at = text; at;) {
        const char *nl = strchr(at, '\n');
        size_t len = nl ? (size_t)(nl - at) : strlen(at);
        snprintf(line, sizeof line, "%.*s", (int)len, at);
        sw__jw_display_string(w, line);
        at = nl ? nl + 1 : NULL;
    }
    sw__jw_array_end(w);
}

static void json_findings(sw__jw *w, const sw__diagnosis *d) {
    sw__jw_key(w, "findings");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < d->nfindings; i++) {
        const sw__finding *f = &d->findings[i];
        sw__jw_object_begin(w);
        kv_shown(w, "id", f->id);
        kv_shown(w, "severity", sw__severity_name(f->severity));
        kv_shown(w, "title", f->title);
        kv_shown(w, "sentence", f->sentence);
        json_lines(w, f->sentence);
        sw__jw_key(w, "numbers");
        sw__jw_array_begin(w);
        for (size_t k = 0; k < f->nnumbers; k++) {
            char text[48];
            sw__number_text(&f->numbers[k], text, sizeof text);
            string_pair(w, f->numbers[k].name, text);
        }
        sw__jw_array_end(w);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* The mean per category of steps whose category times sum to category_ns, rounded. */
static void category_means(sw__jw *w, const double *category_ns, uint64_t steps) {
    for (int c = 0; c < SW_CAT_COUNT; c++)
        sw__jw_double(w, round(category_ns[c] / (double)steps));
}

/* The steady steps of each phase: mean step time, mean per category, samples/s. */
static void json_breakdown(sw__jw *w, const html_ctx *h) {
    sw__jw_key(w, "breakdown");
    sw__jw_array_begin(w);
    for (int k = 0; k < NPHASES; k++) {
        const steady_sums *st = &h->steady[k];
        if (!st->steps)
            continue;
        sw__jw_object_begin(w);
        kv_shown(w, "phase", phase_names[k]);
        sw__jw_kv_uint(w, "steps", st->steps);
        sw__jw_kv_double(w, "step_ns", st->step_ns / (double)st->steps);
        sw__jw_kv_double(w, "samples_per_s",
                         st->sized_ns > 0 ? (double)st->samples / st->sized_ns * 1e9 : NAN);
        sw__jw_key(w, "category_ns");
        sw__jw_array_begin(w);
        category_means(w, st->category_ns, st->steps);
        sw__jw_array_end(w);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* The steady steps' histogram per phase. */
static void json_step_hists(sw__jw *w, const html_ctx *h) {
    sw__jw_key(w, "step_hists");
    sw__jw_array_begin(w);
    for (int k = 0; k < NPHASES; k++) {
        if (!h->steady[k].steps)
            continue;
        sw__jw_object_begin(w);
        kv_shown(w, "phase", phase_names[k]);
        sw__jw_kv_uint(w, "steps", h->steady[k].steps);
        sw__jw_key(w, "hist");
        json_hist(w, &h->step_range[k], &h->step_hist[k]);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* The cross-rank view's stragglers with their blame. */
static void json_stragglers(sw__jw *w, const sw_ranks *v) {
    sw__jw_key(w, "stragglers");
    sw__jw_array_begin(w);
    for (size_t i = 0; v && i < v->nstragglers; i++) {
        const sw_rank_straggler *g = &v->stragglers[i];
        sw__jw_object_begin(w);
        sw__jw_kv_int(w, "rank", g->rank);
        kv_shown(w, "host", g->host);
        sw__jw_kv_double(w, "excess_ns", g->excess_ns);
        kv_shown(w, "blame", sw_blame_name(g->blame));
        sw__jw_kv_double(w, "blame_ns", g->blame_ns);
        kv_shown(w, "part", g->part);
        sw__jw_kv_double(w, "part_ns", g->part ? g->part_ns : NAN);
        sw__jw_kv_double(w, "step_ns", g->step_ns);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* The peak FLOP/s the ranks' MFU is taken against, for the heatmap's MFU column (each
 * rank's TFLOP/s over it): the view keeps MFU's lowest and highest rank, and their TFLOP/s
 * over their MFU is the peak of each; NAN (no column) unless both give the same one, as on
 * a job of one device kind. */
static double common_peak(const sw_ranks *v) {
    double at[2] = {NAN, NAN};
    const int rank[2] = {v->mfu.min_rank, v->mfu.max_rank};
    const double mfu[2] = {v->mfu.min, v->mfu.max};
    if (v->mfu.ranks <= 0)
        return NAN;
    for (size_t i = 0; i < v->nrows; i++)
        for (int k = 0; k < 2; k++)
            if (v->rows[i].rank == rank[k] && mfu[k] > 0)
                at[k] = v->rows[i].tflops * 1e12 / mfu[k];
    return isfinite(at[0]) && fabs(at[0] - at[1]) <= 1e-9 * at[0] ? at[0] : NAN;
}

/* The cross-rank view's collectives by op and TFLOP/s per rank (the heatmap's extra
 * columns: rows [rank, TFLOP/s or null, time per step in each op]), and its wait line. */
static void json_rank_ops(sw__jw *w, const sw_ranks *v) {
    sw__jw_key(w, "ops");
    sw__jw_array_begin(w);
    for (size_t k = 0; k < v->nops; k++) {
        const sw_rank_op *op = &v->ops[k];
        sw__jw_object_begin(w);
        kv_shown(w, "name", op->name);
        sw__jw_kv_double(w, "median_ns", op->median_ns);
        sw__jw_kv_double(w, "min_bw", op->bw_ranks ? op->min_bw : NAN);
        sw__jw_kv_int(w, "min_bw_rank", op->bw_ranks ? op->min_bw_rank : -1);
        sw__jw_kv_double(w, "median_bw", op->bw_ranks ? op->median_bw : NAN);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_key(w, "view_rows");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < v->nrows && i < SW__HTML_RANKS; i++) {
        const sw_rank_row *row = &v->rows[i];
        sw__jw_array_begin(w);
        sw__jw_int(w, row->rank);
        sw__jw_double(w, row->tflops);
        for (size_t k = 0; k < v->nops; k++)
            sw__jw_double(w, row->op_ns[k]);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_kv_double(w, "mfu_peak", common_peak(v));
    char line[256];
    kv_shown(w, "wait", sw_ranks_wait_sentence(v, line, sizeof line)[0] ? line : NULL);
}

/* Per rank, the mean steady step and its categories (ranks x categories heatmap), and the
 * stragglers; only for a run of several ranks. */
static void json_ranks(sw__jw *w, const html_ctx *h) {
    sw__jw_key(w, "ranks");
    sw__jw_object_begin(w);
    sw__jw_key(w, "per_rank");
    sw__jw_array_begin(w);
    for (int r = 0; h->max_rank > 0 && r <= h->max_rank; r++) {
        const rank_sums *rs = &h->ranks[r];
        if (!rs->steps)
            continue;
        sw__jw_array_begin(w);
        sw__jw_int(w, r);
        sw__jw_uint(w, rs->steps);
        sw__jw_double(w, round(rs->step_ns / (double)rs->steps));
        category_means(w, rs->category_ns, rs->steps);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
    const sw_ranks *v = h->in->ranks;
    json_stragglers(w, v);
    if (v) {
        sw__jw_kv_int(w, "world_size", v->world_size);
        sw__jw_kv_double(w, "threshold_ns", v->threshold_ns);
        json_rank_ops(w, v);
    }
    sw__jw_object_end(w);
}

/* One module's byte counts; unknown ones (negative) are null. */
static void module_bytes(sw__jw *w, const sw_module_row *m) {
    const int64_t bytes[] = {m->param_bytes, m->grad_bytes, m->optimizer_bytes,
                             m->activation_bytes};
    static const char *const names[] = {"params", "grads", "optimizer", "activations"};
    for (int k = 0; k < 4; k++)
        sw__jw_kv_double(w, names[k], bytes[k] < 0 ? NAN : (double)bytes[k]);
}

/* The module table (sw_set_modules): every module, in the report's order (most self time
 * first); the page's table sorts on any column. Unknown byte counts are null. GPU times
 * (device_*) only when some module has them. */
static void json_modules(sw__jw *w, const sw_snapshot *s) {
    int device = sw__modules_have_device(s);
    sw__jw_key(w, "modules");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < s->nmodules; i++) {
        const sw_module_row *m = &s->modules[i];
        sw__jw_object_begin(w);
        kv_shown(w, "path", m->path[0] ? m->path : "(model)");
        kv_shown(w, "class", m->kind);
        sw__jw_kv_uint(w, "forward_calls", m->forward_calls);
        sw__jw_kv_uint(w, "forward_self", m->forward_self_ns);
        sw__jw_kv_uint(w, "forward_total", m->forward_ns);
        sw__jw_kv_uint(w, "backward_calls", m->backward_calls);
        sw__jw_kv_uint(w, "backward_self", m->backward_self_ns);
        sw__jw_kv_uint(w, "backward_total", m->backward_ns);
        sw__jw_kv_uint(w, "self", m->forward_self_ns + m->backward_self_ns);
        if (device) {
            sw__jw_kv_uint(w, "device_forward_calls", m->device_forward_calls);
            sw__jw_kv_uint(w, "device_forward_self", m->device_forward_self_ns);
            sw__jw_kv_uint(w, "device_forward_total", m->device_forward_ns);
            sw__jw_kv_uint(w, "device_backward_calls", m->device_backward_calls);
            sw__jw_kv_uint(w, "device_backward_self", m->device_backward_self_ns);
            sw__jw_kv_uint(w, "device_backward_total", m->device_backward_ns);
            sw__jw_kv_uint(w, "device_self",
                           m->device_forward_self_ns + m->device_backward_self_ns);
        }
        module_bytes(w, m);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}

/* The run's notes (sw_set_note): the step rule, what could not be separated, ... */
static void json_notes(sw__jw *w, const sw_snapshot *s) {
    sw__jw_key(w, "notes");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < s->nnotes; i++)
        string_pair(w, s->notes[i].key, s->notes[i].value);
    sw__jw_array_end(w);
}

static void json_categories(sw__jw *w) {
    sw__jw_key(w, "categories");
    sw__jw_array_begin(w);
    for (int k = 0; k < SW_CAT_COUNT; k++)
        sw__jw_string(w, sw_category_name((sw_category)k));
    sw__jw_array_end(w);
}

/* The members of one run's document ("run", "steps", ...: everything the script draws), in
 * the object open in w, from what h gathered. */
static int json_members(sw__jw *w, const sw__input *in, const html_ctx *h, const sw__diagnosis *d) {
    const sw_snapshot *s = in->snap;
    json_run(w, s, d->nranks ? d->nranks : in->nranks, h->step_records);
    json_categories(w);
    json_breakdown(w, h);
    json_steps(w, &h->steps);
    json_step_hists(w, h);
    json_step_phases(w, h);
    json_actions(w, s);
    json_counters(w, s, h);
    json_memory(w, s, h);
    sw__json_put_misuse(w, &s->misuse);
    json_findings(w, d);
    json_ranks(w, h);
    json_notes(w, s);
    sw__json_put_goodput(w, s);
    sw__json_put_efficiency(w, s);
    json_modules(w, s);
    int rc = sw__html_json_slow(w, in);
    return rc != 0 ? rc : sw__html_json_flames(w, in->functions);
}

/* One run's document's members, into the object open in w. */
static int json_document(const sw__input *in, sw__jw *w) {
    if (!in || !in->snap || !in->foreach_step)
        return SW_EINVAL;
    html_ctx h = {.in = in, .max_rank = -1};
    sw__diagnosis *d = calloc(1, sizeof *d);
    h.step_hist = calloc(NPHASES, sizeof *h.step_hist);
    h.ranks = calloc(SW__HTML_RANKS, sizeof *h.ranks);
    h.counters = calloc(SW__HTML_COUNTERS, sizeof *h.counters);
    int rc = d && h.step_hist && h.ranks && h.counters ? 0 : SW_ENOMEM;
    for (int k = 0; k < NPHASES; k++)
        sw_stats_init(&h.step_range[k]);
    if (rc == 0)
        rc = sw__series_init(&h.steps, SW__SERIES_MAX, 0);
    for (int k = 0; k < NPHASES && rc == 0; k++)
        rc = sw__series_init(&h.phase_steps[k], SW__SERIES_MAX, 1);
    for (int k = 0; k < NMEMORY && rc == 0; k++)
        rc = sw__series_init(&h.memory[k], SW__HTML_MEMORY_POINTS, 0);
    if (rc == 0)
        rc = in->foreach_step(in->src, on_step, &h);
    if (rc == 0 && in->foreach_counter)
        rc = in->foreach_counter(in->src, on_counter, &h);
    if (rc == 0 && h.err)
        rc = h.err;
    if (rc == 0)
        rc = sw__diagnose(in, d);
    if (rc == 0)
        rc = json_members(w, in, &h, d);
    for (size_t i = 0; i < h.ncounters; i++)
        sw__series_free(&h.counters[i].series);
    sw__series_free(&h.steps);
    for (int k = 0; k < NPHASES; k++)
        sw__series_free(&h.phase_steps[k]);
    for (int k = 0; k < NMEMORY; k++)
        sw__series_free(&h.memory[k]);
    free(h.counters);
    free(h.ranks);
    free(h.step_hist);
    free(d);
    return rc;
}

static int has_flames(const sw__input *in) {
    return in && in->functions && sw_fprofile_tree_count(in->functions) > 0;
}

/* compare's verdicts of a -> b, its JSON document as a value of the page's. */
typedef struct compare_pair {
    const sw_snapshot *a, *b;
} compare_pair;

static int write_compare(void *ctx, FILE *out) {
    const compare_pair *pair = ctx;
    return sw_compare_write(pair->a, pair->b, SW_FORMAT_JSON, out);
}

/* The page's data: a's document (with b, b's under "other" and compare's verdicts of a -> b
 * under "compare"); null when there is no run yet (the live page before its run file
 * exists). html_safe: inside <script>, <, > and & escaped too, so no string can end the
 * element. Each member down to the rows' objects (a step point, an action) on a line of its
 * own. */
static int write_data(const sw__input *a, const sw__input *b, int html_safe, FILE *out) {
    if (!a) {
        fputs("null\n", out);
        return 0;
    }
    sw__jw w;
    sw__jw_init(&w, out, 3);
    w.html_safe = html_safe;
    sw__jw_object_begin(&w);
    int rc = json_document(a, &w);
    if (rc == 0 && b) {
        sw__jw_key(&w, "other");
        sw__jw_object_begin(&w);
        rc = json_document(b, &w);
        sw__jw_object_end(&w);
        sw__jw_key(&w, "compare");
        compare_pair pair = {a->snap, b->snap};
        if (rc == 0)
            sw__jw_value_by(&w, write_compare, &pair);
    }
    sw__jw_object_end(&w);
    int written = sw__jw_finish(&w);
    return rc == 0 ? written : rc;
}

/* The page: head, style, the data (a's document; with b, b's under "other" and compare's
 * verdicts of a -> b under "compare"), then the scripts. live: the live page, whose script
 * (html/live.js) fetches the data again and redraws; a may then be NULL (no run file yet: the
 * data is null until the first fetch finds one). */
static int write_page(const sw__input *a, const sw__input *b, int live, FILE *out) {
    if ((!live && (!a || !a->snap)) || (a && !a->snap) || !out || (b && !b->snap))
        return SW_EINVAL;
    fputs(page_head, out);
    fputs(live ? page_csp_live_end : page_csp_end, out);
    fprintf(out, "<style>\n%s</style>\n<title>stepwatch: ", sw__html_report_css);
    sw__html_text(out, a && a->snap->name ? a->snap->name : "stepwatch");
    if (b) {
        fputs(" vs ", out);
        sw__html_text(out, b->snap->name ? b->snap->name : "stepwatch");
    }
    fputs("</title>\n<script type=\"application/json\" id=\"sw-data\">\n", out);
    int rc = write_data(a, b, 1, out);
    fputs("</script>\n", out);
    fputs(page_body, out);
    if (live || has_flames(a) || has_flames(b))
        fprintf(out, "<script>\n%s</script>\n", sw__html_flame_js);
    /* slow.js first, in the drawing script's element: report.js calls it */
    fprintf(out, "<script>\n%s%s</script>\n", sw__html_slow_js, sw__html_report_js);
    if (live) /* after report.js, whose window.swReport it calls */
        fprintf(out, "<script>\n%s</script>\n", sw__html_live_js);
    fputs("</body>\n</html>\n", out);
    if (rc == 0 && ferror(out))
        rc = SW_EIO;
    return rc;
}

int sw__html_write_input(const sw__input *in, FILE *out) {
    return write_page(in, NULL, 0, out);
}

int sw__html_write_compare_input(const sw__input *a, const sw__input *b, FILE *out) {
    return b ? write_page(a, b, 0, out) : SW_EINVAL;
}

int sw__html_write_live_input(const sw__input *in, FILE *out) {
    return write_page(in, NULL, 1, out);
}

int sw__html_json_input(const sw__input *in, FILE *out) {
    if (!in || !in->snap || !out)
        return SW_EINVAL;
    int rc = write_data(in, NULL, 0, out);
    return rc == 0 && ferror(out) ? SW_EIO : rc;
}
