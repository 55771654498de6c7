/*
 * html.c — the self-contained HTML report: the run's data as one JSON document inside a
 * <script type="application/json"> element, drawn as inline SVG by the script in
 * html_assets.c. Nothing is fetched from the network.
 *
 * Bounded for any run length: steps and counter samples are downsampled into series of at
 * most 2000 points (min / mean / max per point, see series.h), and histograms are embedded
 * for the step time and the SW__HTML_HISTS largest actions only.
 */
#include "analysis_internal.h"
#include "report/writer.h"
#include "series.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW__HTML_HISTS 12       /* action histograms embedded */
#define SW__HTML_HIST_MIN_CALLS 5
#define SW__HTML_COUNTERS 64    /* counter series drawn (all are in the table) */
#define SW__HTML_COUNTER_POINTS 500

/* The HTML and script around the data (html_assets.c). */
extern const char sw__html_head[];
extern const char sw__html_tail[];

typedef struct counter_series {
    char name[256];
    sw__series series; /* x = ns since start, y = value */
} counter_series;

/* The step-time chart draws train and valid steps apart (other phases with train). */
enum { PHASE_TRAIN = 0, PHASE_VALID, NPHASES };
static const char *const phase_names[NPHASES] = {"train", "valid"};

typedef struct html_ctx {
    const sw__input *in;
    sw__series steps;  /* x = step index, y = duration, sums = per-category ns */
    sw__series phase_steps[NPHASES]; /* the same, per phase, without the sums */
    sw_hist *step_hist;
    sw_stats step_range; /* min/max of the steady-state steps, to clamp their quantiles */
    uint64_t step_records;
    counter_series *counters;
    size_t ncounters;
    int err;
} html_ctx;

static int on_step(void *ctx, int rank, const sw_step_record *s)
{
    html_ctx *h = ctx;
    double cats[SW_CAT_COUNT];
    for (int k = 0; k < SW_CAT_COUNT; k++)
        cats[k] = (double)s->category_ns[k];
    sw__series_add(&h->steps, s->step, (double)s->duration_ns, cats);
    sw__series_add(&h->phase_steps[s->phase == SW_PHASE_VALID ? PHASE_VALID : PHASE_TRAIN],
                   s->step, (double)s->duration_ns, NULL);
    if (!s->warmup) {
        sw_hist_add(h->step_hist, s->duration_ns);
        sw_stats_add(&h->step_range, s->duration_ns, s->duration_ns, (int64_t)s->step, 0);
    }
    h->step_records++;
    return 0;
}

static int on_counter(void *ctx, int rank, const sw_counter_record *c)
{
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
        if (sw__series_init(&cs->series, SW__HTML_COUNTER_POINTS) != 0) {
            h->err = SW_ENOMEM;
            return SW_ENOMEM;
        }
        h->ncounters++;
    }
    sw__series_add(&cs->series, c->time_ns, c->value, NULL);
    return 0;
}

/* ---- JSON pieces ---- */

static void key(FILE *out, const char *k) { fprintf(out, "\"%s\": ", k); }

static void kv_num(FILE *out, const char *k, double v, int comma)
{
    key(out, k);
    sw__json_number(out, v);
    if (comma)
        fputs(", ", out);
}

static void kv_str(FILE *out, const char *k, const char *v, int comma)
{
    key(out, k);
    sw__json_display_string(out, v ? v : "");
    if (comma)
        fputs(", ", out);
}

/* A quantile of calls st summarizes, null when there are none. */
static void json_quantile(FILE *out, const sw_stats *st, const sw_hist *h, double q)
{
    sw__json_number(out, st->count ? (double)sw_stats_quantile(st, h, q) : NAN);
}

/* Non-empty buckets as [low, high, count]; st gives the calls' range. */
static void json_hist(FILE *out, const sw_stats *st, const sw_hist *h)
{
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

static void json_run(FILE *out, const sw_snapshot *s, int nranks, uint64_t step_records)
{
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

/* The points of a series: [first step, count, min, mean, max] and, with sums, the mean
 * per category. */
static void json_points(FILE *out, const sw__series *st, int sums)
{
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
        for (int k = 0; sums && k < SW_CAT_COUNT; k++) {
            fputs(", ", out);
            sw__json_number(out, round(p->sums[k] / (double)p->count));
        }
        fputc(']', out);
        first = 0;
    }
    fputs("]", out);
}

static void json_steps(FILE *out, const sw__series *st)
{
    fputs("\"steps\": {", out);
    json_points(out, st, 1);
    fputs("}", out);
}

/* The step time per phase, for the step-time chart (phases without steps are left out). */
static void json_step_phases(FILE *out, const html_ctx *h)
{
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

static void json_stats(FILE *out, const sw_row *r, const sw_snapshot *s)
{
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

/* A roll-up with enough calls for a histogram to say something. */
static int wants_hist(const sw_row *r)
{
    return r->phase == SW_PHASE_ALL && r->hist.count >= SW__HTML_HIST_MIN_CALLS;
}

/* Is row i among the n largest such roll-ups by total time? */
static int among_largest(const sw_snapshot *s, size_t i, size_t n)
{
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

static void json_actions(FILE *out, const sw_snapshot *s)
{
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

static void json_counters(FILE *out, const sw_snapshot *s, const html_ctx *h)
{
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
        int first = 1;
        for (size_t p = 0; ser && p < ser->npoints; p++) {
            const sw__point *pt = &ser->points[p];
            if (!pt->count)
                continue;
            /* [time ns, min, mean, max] */
            fprintf(out, "%s[%llu, ", first ? "" : ", ",
                    (unsigned long long)(ser->origin + p * ser->width));
            sw__json_number(out, pt->min);
            fputs(", ", out);
            sw__json_number(out, pt->sum / (double)pt->count);
            fputs(", ", out);
            sw__json_number(out, pt->max);
            fputc(']', out);
            first = 0;
        }
        fputs("]}", out);
    }
    fputs("]", out);
}

static void json_misuse(FILE *out, const sw_misuse *m)
{
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

static void json_findings(FILE *out, const sw__diagnosis *d)
{
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

int sw__html_write_input(const sw__input *in, FILE *out)
{
    if (!in || !in->snap || !in->foreach_step || !out)
        return SW_EINVAL;
    const sw_snapshot *s = in->snap;
    html_ctx h = {.in = in};
    sw__diagnosis *d = calloc(1, sizeof *d);
    h.step_hist = calloc(1, sizeof *h.step_hist);
    h.counters = calloc(SW__HTML_COUNTERS, sizeof *h.counters);
    int rc = d && h.step_hist && h.counters ? 0 : SW_ENOMEM;
    sw_stats_init(&h.step_range);
    if (rc == 0)
        rc = sw__series_init(&h.steps, SW__SERIES_MAX);
    for (int k = 0; k < NPHASES && rc == 0; k++)
        rc = sw__series_init(&h.phase_steps[k], SW__SERIES_MAX);
    if (rc == 0)
        rc = in->foreach_step(in->src, on_step, &h);
    if (rc == 0 && in->foreach_counter)
        rc = in->foreach_counter(in->src, on_counter, &h);
    if (rc == 0 && h.err)
        rc = h.err;
    if (rc == 0)
        rc = sw__diagnose(in, d);
    if (rc == 0) {
        fputs(sw__html_head, out);
        fputs("<title>stepwatch: ", out);
        sw__html_text(out, s->name ? s->name : "stepwatch");
        fputs("</title>\n<script type=\"application/json\" id=\"sw-data\">\n{", out);
        json_run(out, s, d->nranks ? d->nranks : in->nranks, h.step_records);
        fputs(",\n\"categories\": [", out);
        for (int k = 0; k < SW_CAT_COUNT; k++)
            fprintf(out, "%s\"%s\"", k ? ", " : "", sw_category_name((sw_category)k));
        fputs("],\n", out);
        json_steps(out, &h.steps);
        fputs(",\n\"step_hist\": ", out);
        json_hist(out, &h.step_range, h.step_hist);
        fputs(",\n", out);
        json_step_phases(out, &h);
        fputs(",\n", out);
        json_actions(out, s);
        fputs(",\n", out);
        json_counters(out, s, &h);
        fputs(",\n", out);
        json_misuse(out, &s->misuse);
        fputs(",\n", out);
        json_findings(out, d);
        fputs(",\n", out);
        rc = sw__html_json_flames(out, in->functions);
        fputs("\n}\n</script>\n", out);
        if (in->functions && sw_fprofile_tree_count(in->functions) > 0)
            fputs(sw__html_flame_script, out);
        fputs(sw__html_tail, out);
        if (rc == 0 && ferror(out))
            rc = SW_EIO;
    }
    for (size_t i = 0; i < h.ncounters; i++)
        sw__series_free(&h.counters[i].series);
    sw__series_free(&h.steps);
    for (int k = 0; k < NPHASES; k++)
        sw__series_free(&h.phase_steps[k]);
    free(h.counters);
    free(h.step_hist);
    free(d);
    return rc;
}
