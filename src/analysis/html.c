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

/* ---- JSON pieces ---- */

static void key(FILE *out, const char *k) {
    fprintf(out, "\"%s\": ", k);
}

static void kv_num(FILE *out, const char *k, double v, int comma) {
    key(out, k);
    sw__json_number(out, v);
    if (comma)
        fputs(", ", out);
}

static void kv_str(FILE *out, const char *k, const char *v, int comma) {
    key(out, k);
    sw__json_display_string(out, v ? v : "");
    if (comma)
        fputs(", ", out);
}

/* A quantile of calls st summarizes, null when there are none. */
static void json_quantile(FILE *out, const sw_stats *st, const sw_hist *h, double q) {
    sw__json_number(out, st->count ? (double)sw_stats_quantile(st, h, q) : NAN);
}

/* Non-empty buckets as [low, high, count]; st gives the calls' range. */
static void json_hist(FILE *out, const sw_stats *st, const sw_hist *h) {
    fputs("{\"p50\": ", out);
    json_quantile(out, st, h, 0.5);
    fputs(", \"p99\": ", out);
    json_quantile(out, st, h, 0.99);
    fputs(", \"buckets\": [", out);
    int first = 1;
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        if (!h->buckets[i])
            continue;
        fprintf(out, "%s[%llu, %llu, %u]", first ? "" : ", ",
                (unsigned long long)sw_hist_bucket_low(i),
                (unsigned long long)sw_hist_bucket_high(i), h->buckets[i]);
        first = 0;
    }
    fputs("]}", out);
}

static void json_run(FILE *out, const sw_snapshot *s, int nranks, uint64_t step_records) {
    fputs("\"run\": {", out);
    kv_str(out, "name", s->name ? s->name : "stepwatch", 1);
    kv_str(out, "host", s->host, 1);
    kv_str(out, "command", s->command, 1);
    kv_num(out, "pid", (double)s->pid, 1);
    kv_num(out, "rank", s->rank, 1);
    kv_num(out, "world_size", s->world_size, 1);
    kv_num(out, "ranks", nranks, 1);
    kv_num(out, "start_unix_ns", (double)s->start_unix_ns, 1);
    kv_num(out, "elapsed_ns", (double)s->elapsed_ns, 1);
    kv_num(out, "wall_ns", (double)s->wall_ns, 1);
    kv_num(out, "steps", (double)s->steps, 1);
    kv_num(out, "step_records", (double)step_records, 1);
    kv_num(out, "warmup_steps", s->warmup_steps, 1);
    kv_num(out, "threads", (double)s->threads, 1);
    kv_num(out, "dropped_events", (double)s->dropped_events, 0);
    fputs("}", out);
}

/* The points of a series: [first step, count, min, mean, max, median, first start, last
 * end] (times in ns since the run started) and, with sums, the mean per category. */
static void json_points(FILE *out, const sw__series *st, int sums) {
    kv_num(out, "first", (double)st->origin, 1);
    kv_num(out, "width", (double)st->width, 1);
    fputs("\"points\": [", out);
    int first = 1;
    for (size_t i = 0; i < st->npoints; i++) {
        const sw__point *p = &st->points[i];
        if (p->count == 0)
            continue;
        fprintf(out, "%s[%llu, %llu, ", first ? "" : ",\n  ",
                (unsigned long long)(st->origin + i * st->width), (unsigned long long)p->count);
        sw__json_number(out, p->min);
        fputs(", ", out);
        sw__json_number(out, p->sum / (double)p->count);
        fputs(", ", out);
        sw__json_number(out, p->max);
        fputs(", ", out);
        sw__json_number(out, round(sw__series_median(st, i)));
        fprintf(out, ", %llu, %llu", (unsigned long long)p->t_lo, (unsigned long long)p->t_hi);
        for (int k = 0; sums && k < SW_CAT_COUNT; k++) {
            fputs(", ", out);
            sw__json_number(out, round(p->sums[k] / (double)p->count));
        }
        fputc(']', out);
        first = 0;
    }
    fputs("]", out);
}

static void json_steps(FILE *out, const sw__series *st) {
    fputs("\"steps\": {", out);
    json_points(out, st, 1);
    fputs("}", out);
}

/* The step time per phase, for the step-time chart (phases without steps are left out). */
static void json_step_phases(FILE *out, const html_ctx *h) {
    fputs("\"step_phases\": [", out);
    int first = 1;
    for (int k = 0; k < NPHASES; k++) {
        if (h->phase_steps[k].npoints == 0)
            continue;
        fputs(first ? "\n  {" : ",\n  {", out);
        kv_str(out, "phase", phase_names[k], 1);
        json_points(out, &h->phase_steps[k], 0);
        fputc('}', out);
        first = 0;
    }
    fputs("]", out);
}

static void json_stats(FILE *out, const sw_row *r, const sw_snapshot *s) {
    const sw_stats *st = &r->stats;
    kv_num(out, "calls", (double)st->count, 1);
    kv_num(out, "total_ns", (double)st->total_ns, 1);
    kv_num(out, "self_ns", (double)st->self_ns, 1);
    /* null (shown "-") where a figure is undefined: a deviation of one call, the range and
     * quantiles of none, a rate without batch sizes. */
    double none = NAN;
    kv_num(out, "mean_ns", st->count ? st->mean_ns : none, 1);
    kv_num(out, "std_ns", st->count >= 2 ? sw_stats_stddev(st) : none, 1);
    kv_num(out, "min_ns", st->count ? (double)st->min_ns : none, 1);
    kv_num(out, "max_ns", st->count ? (double)st->max_ns : none, 1);
    key(out, "p50_ns");
    json_quantile(out, st, &r->hist, 0.5);
    fputs(", ", out);
    key(out, "p90_ns");
    json_quantile(out, st, &r->hist, 0.9);
    fputs(", ", out);
    key(out, "p99_ns");
    json_quantile(out, st, &r->hist, 0.99);
    fputs(", ", out);
    kv_num(out, "pct", s->wall_ns ? (double)st->total_ns / (double)s->wall_ns * 100.0 : NAN, 1);
    kv_num(out, "samples_per_s", st->samples ? sw_stats_samples_per_s(st) : none, 1);
    kv_num(out, "warmup_calls", (double)r->warmup.count, 1);
    kv_num(out, "warmup_total_ns", (double)r->warmup.total_ns, 0);
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

static void json_actions(FILE *out, const sw_snapshot *s) {
    fputs("\"actions\": [", out);
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        fputs(i ? ",\n  {" : "\n  {", out);
        kv_str(out, "action", r->action_name, 1);
        kv_str(out, "phase", r->phase_name, 1);
        kv_num(out, "rollup", r->phase == SW_PHASE_ALL, 1);
        kv_str(out, "category", sw_category_name(r->category), 1);
        sw_counter_summary device;
        if (sw__device_of(s, r, &device)) /* GPU time of the same calls (docs/device.md) */
            kv_num(out, "device_mean_ns", device.mean, 1);
        json_stats(out, r, s);
        if (among_largest(s, i, SW__HTML_HISTS)) {
            fputs(", \"hist\": ", out);
            json_hist(out, &r->stats, &r->hist);
        }
        fputc('}', out);
    }
    fputs("]", out);
}

/* A series' points with samples, as [origin of the point, min, mean, max] (the mean
 * rounded when the values are whole, as bytes are). */
static void json_min_mean_max(FILE *out, const sw__series *ser, int round_mean) {
    int first = 1;
    for (size_t p = 0; p < ser->npoints; p++) {
        const sw__point *pt = &ser->points[p];
        if (!pt->count)
            continue;
        double mean = pt->sum / (double)pt->count;
        fprintf(out, "%s[%llu, ", first ? "" : ", ",
                (unsigned long long)(ser->origin + p * ser->width));
        sw__json_number(out, pt->min);
        fputs(", ", out);
        sw__json_number(out, round_mean ? round(mean) : mean);
        fputs(", ", out);
        sw__json_number(out, pt->max);
        fputc(']', out);
        first = 0;
    }
}

static void json_counters(FILE *out, const sw_snapshot *s, const html_ctx *h) {
    fputs("\"counters\": [", out);
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        fputs(i ? ",\n  {" : "\n  {", out);
        kv_str(out, "name", c->name, 1);
        kv_num(out, "count", (double)c->count, 1);
        kv_num(out, "last", c->last, 1);
        kv_num(out, "min", c->min, 1);
        kv_num(out, "max", c->max, 1);
        kv_num(out, "mean", c->mean, 1);
        fputs("\"points\": [", out);
        const sw__series *ser = NULL;
        for (size_t j = 0; j < h->ncounters && !ser; j++)
            if (c->name && strcmp(h->counters[j].name, c->name) == 0)
                ser = &h->counters[j].series;
        if (ser)
            json_min_mean_max(out, ser, 0); /* [time ns, min, mean, max] */
        fputs("]}", out);
    }
    fputs("]", out);
}

/* "memory": the memory per step's series, [first step, min, mean, max] per point (those
 * with steps), and the summary line the reports print. */
static void json_memory(FILE *out, const sw_snapshot *s, const html_ctx *h) {
    char line[256];
    sw__memory_text(&s->memory, line, sizeof line);
    fputs("\"memory\": {\"summary\": ", out);
    sw__json_string(out, line);
    fputs(", \"series\": [", out);
    int any = 0;
    for (int k = 0; k < NMEMORY; k++) {
        const sw__series *ser = &h->memory[k];
        if (!ser->started)
            continue;
        fprintf(out, "%s{\"name\": \"%s\", \"width\": %llu, \"points\": [", any ? ", " : "",
                memory_names[k], (unsigned long long)ser->width);
        json_min_mean_max(out, ser, 1);
        fputs("]}", out);
        any = 1;
    }
    fputs("]}", out);
}

static void json_misuse(FILE *out, const sw_misuse *m) {
    fputs("\"misuse\": {", out);
    kv_num(out, "end_without_begin", (double)m->end_without_begin, 1);
    kv_num(out, "mismatched_end", (double)m->mismatched_end, 1);
    kv_num(out, "depth_overflow", (double)m->depth_overflow, 1);
    kv_num(out, "bad_id", (double)m->bad_id, 1);
    kv_num(out, "phase_mismatch", (double)m->phase_mismatch, 1);
    kv_num(out, "step_overlap", (double)m->step_overlap, 1);
    kv_num(out, "bad_record", (double)m->bad_record, 1);
    kv_num(out, "open_at_snapshot", (double)m->open_at_snapshot, 0);
    fputs("}", out);
}

static void json_findings(FILE *out, const sw__diagnosis *d) {
    fputs("\"findings\": [", out);
    for (size_t i = 0; i < d->nfindings; i++) {
        const sw__finding *f = &d->findings[i];
        fputs(i ? ",\n  {" : "\n  {", out);
        kv_str(out, "id", f->id, 1);
        kv_str(out, "severity", sw__severity_name(f->severity), 1);
        kv_str(out, "title", f->title, 1);
        kv_str(out, "sentence", f->sentence, 1);
        fputs("\"numbers\": [", out);
        for (size_t k = 0; k < f->nnumbers; k++) {
            char text[48];
            sw__number_text(&f->numbers[k], text, sizeof text);
            fputs(k ? ", [" : "[", out);
            sw__json_string(out, f->numbers[k].name);
            fputs(", ", out);
            sw__json_string(out, text);
            fputc(']', out);
        }
        fputs("]}", out);
    }
    fputs("]", out);
}

/* The steady steps of each phase: mean step time, mean per category, samples/s. */
static void json_breakdown(FILE *out, const html_ctx *h) {
    fputs("\"breakdown\": [", out);
    int first = 1;
    for (int k = 0; k < NPHASES; k++) {
        const steady_sums *st = &h->steady[k];
        if (!st->steps)
            continue;
        fputs(first ? "\n  {" : ",\n  {", out);
        kv_str(out, "phase", phase_names[k], 1);
        kv_num(out, "steps", (double)st->steps, 1);
        kv_num(out, "step_ns", st->step_ns / (double)st->steps, 1);
        kv_num(out, "samples_per_s",
               st->sized_ns > 0 ? (double)st->samples / st->sized_ns * 1e9 : NAN, 1);
        fputs("\"category_ns\": [", out);
        for (int c = 0; c < SW_CAT_COUNT; c++) {
            fputs(c ? ", " : "", out);
            sw__json_number(out, round(st->category_ns[c] / (double)st->steps));
        }
        fputs("]}", out);
        first = 0;
    }
    fputs("]", out);
}

/* The steady steps' histogram per phase. */
static void json_step_hists(FILE *out, const html_ctx *h) {
    fputs("\"step_hists\": [", out);
    int first = 1;
    for (int k = 0; k < NPHASES; k++) {
        if (!h->steady[k].steps)
            continue;
        fputs(first ? "\n  {" : ",\n  {", out);
        kv_str(out, "phase", phase_names[k], 1);
        kv_num(out, "steps", (double)h->steady[k].steps, 1);
        fputs("\"hist\": ", out);
        json_hist(out, &h->step_range[k], &h->step_hist[k]);
        fputc('}', out);
        first = 0;
    }
    fputs("]", out);
}

/* Per rank, the mean steady step and its categories (ranks x categories heatmap), and the
 * cross-rank view's stragglers with their blame; only for a run of several ranks. */
static void json_ranks(FILE *out, const html_ctx *h) {
    fputs("\"ranks\": {\"per_rank\": [", out);
    int first = 1;
    for (int r = 0; h->max_rank > 0 && r <= h->max_rank; r++) {
        const rank_sums *rs = &h->ranks[r];
        if (!rs->steps)
            continue;
        fprintf(out, "%s[%d, %llu, ", first ? "\n  " : ",\n  ", r, (unsigned long long)rs->steps);
        sw__json_number(out, round(rs->step_ns / (double)rs->steps));
        for (int c = 0; c < SW_CAT_COUNT; c++) {
            fputs(", ", out);
            sw__json_number(out, round(rs->category_ns[c] / (double)rs->steps));
        }
        fputc(']', out);
        first = 0;
    }
    fputs("], \"stragglers\": [", out);
    const sw_ranks *v = h->in->ranks;
    for (size_t i = 0; v && i < v->nstragglers; i++) {
        const sw_rank_straggler *g = &v->stragglers[i];
        fputs(i ? ",\n  {" : "\n  {", out);
        kv_num(out, "rank", g->rank, 1);
        kv_str(out, "host", g->host, 1);
        kv_num(out, "excess_ns", g->excess_ns, 1);
        kv_str(out, "blame", sw_blame_name(g->blame), 1);
        kv_num(out, "blame_ns", g->blame_ns, 1);
        kv_str(out, "part", g->part, 1);
        kv_num(out, "part_ns", g->part ? g->part_ns : NAN, 1);
        kv_num(out, "step_ns", g->step_ns, 0);
        fputc('}', out);
    }
    fputs("]", out);
    if (v) {
        fputs(", ", out);
        kv_num(out, "world_size", v->world_size, 1);
        kv_num(out, "threshold_ns", v->threshold_ns, 0);
    }
    fputs("}", out);
}

/* The module table (sw_set_modules): every module, in the report's order (most self time
 * first); the page's table sorts on any column. Unknown byte counts are null. GPU times
 * (device_*) only when some module has them. */
static void json_modules(FILE *out, const sw_snapshot *s) {
    int device = sw__modules_have_device(s);
    fputs("\"modules\": [", out);
    for (size_t i = 0; i < s->nmodules; i++) {
        const sw_module_row *m = &s->modules[i];
        fputs(i ? ",\n{" : "{", out);
        kv_str(out, "path", m->path[0] ? m->path : "(model)", 1);
        kv_str(out, "class", m->kind, 1);
        kv_num(out, "forward_calls", (double)m->forward_calls, 1);
        kv_num(out, "forward_self", (double)m->forward_self_ns, 1);
        kv_num(out, "forward_total", (double)m->forward_ns, 1);
        kv_num(out, "backward_calls", (double)m->backward_calls, 1);
        kv_num(out, "backward_self", (double)m->backward_self_ns, 1);
        kv_num(out, "backward_total", (double)m->backward_ns, 1);
        kv_num(out, "self", (double)(m->forward_self_ns + m->backward_self_ns), 1);
        if (device) {
            kv_num(out, "device_forward_calls", (double)m->device_forward_calls, 1);
            kv_num(out, "device_forward_self", (double)m->device_forward_self_ns, 1);
            kv_num(out, "device_forward_total", (double)m->device_forward_ns, 1);
            kv_num(out, "device_backward_calls", (double)m->device_backward_calls, 1);
            kv_num(out, "device_backward_self", (double)m->device_backward_self_ns, 1);
            kv_num(out, "device_backward_total", (double)m->device_backward_ns, 1);
            kv_num(out, "device_self",
                   (double)(m->device_forward_self_ns + m->device_backward_self_ns), 1);
        }
        const int64_t bytes[] = {m->param_bytes, m->grad_bytes, m->optimizer_bytes,
                                 m->activation_bytes};
        static const char *const names[] = {"params", "grads", "optimizer", "activations"};
        for (int k = 0; k < 4; k++)
            kv_num(out, names[k], bytes[k] < 0 ? NAN : (double)bytes[k], k < 3);
        fputc('}', out);
    }
    fputs("]", out);
}

/* The run's notes (sw_set_note): the step rule, what could not be separated, ... */
static void json_notes(FILE *out, const sw_snapshot *s) {
    fputs("\"notes\": [", out);
    for (size_t i = 0; i < s->nnotes; i++) {
        fputs(i ? ", [" : "[", out);
        sw__json_string(out, s->notes[i].key);
        fputs(", ", out);
        sw__json_string(out, s->notes[i].value);
        fputc(']', out);
    }
    fputs("]", out);
}

/* One run's document without its braces: "run": ..., "steps": ..., everything the script
 * draws. */
static int json_document(const sw__input *in, FILE *out) {
    if (!in || !in->snap || !in->foreach_step)
        return SW_EINVAL;
    const sw_snapshot *s = in->snap;
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
    if (rc == 0) {
        json_run(out, s, d->nranks ? d->nranks : in->nranks, h.step_records);
        fputs(",\n\"categories\": [", out);
        for (int k = 0; k < SW_CAT_COUNT; k++)
            fprintf(out, "%s\"%s\"", k ? ", " : "", sw_category_name((sw_category)k));
        fputs("],\n", out);
        json_breakdown(out, &h);
        fputs(",\n", out);
        json_steps(out, &h.steps);
        fputs(",\n", out);
        json_step_hists(out, &h);
        fputs(",\n", out);
        json_step_phases(out, &h);
        fputs(",\n", out);
        json_actions(out, s);
        fputs(",\n", out);
        json_counters(out, s, &h);
        fputs(",\n", out);
        json_memory(out, s, &h);
        fputs(",\n", out);
        json_misuse(out, &s->misuse);
        fputs(",\n", out);
        json_findings(out, d);
        fputs(",\n", out);
        json_ranks(out, &h);
        fputs(",\n", out);
        json_notes(out, s);
        fputs(",\n", out);
        json_modules(out, s);
        fputs(",\n", out);
        rc = sw__html_json_flames(out, in->functions);
    }
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
    fputs(a ? "{" : "null", out);
    int rc = a ? json_document(a, out) : 0;
    if (rc == 0 && b) {
        fputs(",\n\"other\": {", out);
        rc = json_document(b, out);
        fputs("},\n\"compare\": ", out);
        if (rc == 0)
            rc = sw_compare_write(a->snap, b->snap, SW_FORMAT_JSON, out);
    }
    fputs(a ? "\n}\n</script>\n" : "\n</script>\n", out);
    fputs(page_body, out);
    if (live || has_flames(a) || has_flames(b))
        fprintf(out, "<script>\n%s</script>\n", sw__html_flame_js);
    fprintf(out, "<script>\n%s</script>\n", sw__html_report_js);
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
    fputs("{", out);
    int rc = json_document(in, out);
    fputs("\n}\n", out);
    return rc == 0 && ferror(out) ? SW_EIO : rc;
}
