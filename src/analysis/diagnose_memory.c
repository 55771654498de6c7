/*
 * diagnose_memory.c — memory drift: memory that rises steadily across the steady steps, a
 * leak (a tensor kept in a list every step, a history that holds the graph).
 *
 * The series is the allocator's bytes allocated at each step's end (torch's CUDA caching
 * allocator, sw_step_memory) when the run has them, else the RSS. Per rank (the first
 * SW__DRIFT_RANKS), the steady steps are downsampled to at most SW__DRIFT_POINTS points (the
 * mean of the steps each covers), so memory stays bounded however long the run.
 *
 * Why this method. Memory per step is noisy (the allocator's caching, malloc arenas, the RSS
 * read every 10 ms) and often has a ramp at the start (optimizer state made at the first
 * step, cached blocks, workspaces) and single jumps (a larger batch, a new cached block):
 * none of them is a leak. So:
 *   - the slope is Theil–Sen's (the median of the slopes between every pair of points): up to
 *     29 % of the points may sit anywhere (a warm-up ramp, spikes) without moving it, where a
 *     least-squares line follows them;
 *   - the rising part starts at the last point still within a tenth of the total rise of
 *     the start level (the median of the first tenth of the points); the line is fitted
 *     again over the points from there, and the rise began at the earliest point before
 *     which the line stops fitting (three robust deviations of its residuals);
 *   - a leak must be sustained: the medians of the three thirds of the rising part must each
 *     rise by at least a quarter of what the line says; a single jump (one step that adds a
 *     block and then stays flat) has flat thirds after it and is not a leak;
 *   - and large enough to matter: a total rise of at least SW__DRIFT_MIN_SHARE of the start
 *     level and SW__DRIFT_MIN_BYTES, so noise and a slow creep of a few pages are not.
 * Thresholds are in docs/diagnose.md.
 */
#include "analysis_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SW__DRIFT_POINTS 128        /* points per series: 8,128 pairs for Theil–Sen */
#define SW__DRIFT_MIN_STEPS 50      /* fewer steady steps with memory: no finding */
#define SW__DRIFT_MIN_POINTS 12     /* the rising part must span at least this many points */
#define SW__DRIFT_MIN_SHARE 0.05    /* the rise: at least 5 % of the start level... */
#define SW__DRIFT_MIN_BYTES 4194304 /* ...and 4 MiB */

void sw__drift_init(sw__drift *m) {
    memset(m, 0, sizeof *m);
}

void sw__drift_free(sw__drift *m) {
    for (int r = 0; r < SW__DRIFT_RANKS; r++) {
        sw__series_free(&m->rss[r]);
        sw__series_free(&m->allocated[r]);
    }
}

static void add(sw__series *s, int *err, uint64_t step, double bytes) {
    if (s->points == NULL && sw__series_init(s, SW__DRIFT_POINTS, 0) != 0) {
        *err = SW_ENOMEM;
        return;
    }
    sw__series_add(s, step, bytes, 0, 0, NULL);
}

void sw__drift_add(sw__drift *m, int rank, const sw_step_record *s) {
    if (rank < 0 || rank >= SW__DRIFT_RANKS)
        return;
    if (s->has_allocator)
        add(&m->allocated[rank], &m->err, s->step, (double)s->allocated_bytes);
    if (s->rss_bytes != 0)
        add(&m->rss[rank], &m->err, s->step, (double)s->rss_bytes);
}

/* ---- the fit ---- */

typedef struct point {
    double x, y; /* step index (the middle of the steps the point covers), bytes */
} point;

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorted in place); 0 for n = 0. */
static double median(double *v, size_t n) {
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Theil–Sen over p[0..n): the median pairwise slope, the median intercept. scratch holds
 * n * (n - 1) / 2 values. */
static void theil_sen(const point *p, size_t n, double *scratch, double *slope, double *icept) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (p[j].x > p[i].x)
                scratch[k++] = (p[j].y - p[i].y) / (p[j].x - p[i].x);
    *slope = median(scratch, k);
    for (size_t i = 0; i < n; i++)
        scratch[i] = p[i].y - *slope * p[i].x;
    *icept = median(scratch, n);
}

/* The median of the y of p[from..to). */
static double median_y(const point *p, size_t from, size_t to, double *scratch) {
    for (size_t i = from; i < to; i++)
        scratch[i - from] = p[i].y;
    return median(scratch, to - from);
}

typedef struct drift {
    int found;
    double slope;      /* bytes per step over the rising part */
    double begin_step; /* where the rise began */
    double start, end; /* start level, end level (bytes) */
    uint64_t steps;    /* steady steps in the series */
    double first_x, last_x;
} drift;

/* Is the series a steady rise? scratch: SW__DRIFT_POINTS^2 / 2 doubles. */
static drift fit(const sw__series *s, double *scratch) {
    drift out = {0};
    point p[SW__DRIFT_POINTS];
    size_t n = 0;
    for (size_t i = 0; i < s->npoints && s->points; i++) {
        const sw__point *pt = &s->points[i];
        if (pt->count == 0)
            continue;
        p[n].x = (double)s->origin + ((double)i + 0.5) * (double)s->width;
        p[n].y = pt->sum / (double)pt->count;
        out.steps += pt->count;
        n++;
    }
    if (out.steps < SW__DRIFT_MIN_STEPS || n < 2 * SW__DRIFT_MIN_POINTS)
        return out;
    out.first_x = p[0].x;
    out.last_x = p[n - 1].x;
    size_t tenth = n / 10 > 3 ? n / 10 : 3;
    out.start = median_y(p, 0, tenth, scratch);
    out.end = median_y(p, n - tenth, n, scratch);
    double rise = out.end - out.start;
    if (!(rise >= SW__DRIFT_MIN_BYTES && rise >= SW__DRIFT_MIN_SHARE * out.start))
        return out;
    /* Where the rise began: the last point within a tenth of the rise of the start level. */
    size_t from = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].y <= out.start + 0.1 * rise)
            from = i;
    size_t m = n - from;
    if (m < SW__DRIFT_MIN_POINTS)
        return out; /* a rise at the very end, or a jump: too short to call a trend */
    double slope, icept;
    theil_sen(p + from, m, scratch, &slope, &icept);
    if (!(slope > 0))
        return out;
    double fitted = slope * (p[n - 1].x - p[from].x);
    if (!(fitted >= SW__DRIFT_MIN_BYTES && fitted >= SW__DRIFT_MIN_SHARE * out.start))
        return out; /* the points after the start are flat: a jump, or a ramp that ended */
    /* Sustained: each third of the rising part higher than the one before. */
    double third[3];
    for (int t = 0; t < 3; t++)
        third[t] = median_y(p, from + m * (size_t)t / 3, from + m * (size_t)(t + 1) / 3, scratch);
    double step_rise = 0.25 * fitted / 3.0;
    if (third[1] - third[0] < step_rise || third[2] - third[1] < step_rise)
        return out;
    /* Where it began: back from `from`, the points the line still fits (within three
     * robust deviations of its residuals over the rising part) belong to the rise. A leak
     * from the start fits the line from the first point; before a late leak the flat points
     * lie above the line's backward extension. */
    for (size_t i = 0; i < m; i++)
        scratch[i] = fabs(p[from + i].y - (icept + slope * p[from + i].x));
    double tol = 3 * 1.4826 * median(scratch, m);
    size_t begin = from;
    while (begin > 0 && fabs(p[begin - 1].y - (icept + slope * p[begin - 1].x)) <= tol)
        begin--;
    out.found = 1;
    out.slope = slope;
    out.begin_step = p[begin].x - 0.5 * (double)s->width; /* the first step of that point */
    return out;
}

static const char *mib(double bytes, char *buf, size_t size) {
    snprintf(buf, size, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void sw__diagnose_drift(sw__diagnosis *d, const sw__drift *m) {
    /* The allocator's series where the run has one: what the program allocates, without the
     * allocator's caching or the process's other memory. */
    int allocator = 0;
    for (int r = 0; r < SW__DRIFT_RANKS; r++)
        allocator |= m->allocated[r].points != NULL;
    double *scratch = malloc(SW__DRIFT_POINTS * SW__DRIFT_POINTS / 2 * sizeof *scratch);
    if (scratch == NULL)
        return;
    drift worst = {0};
    int worst_rank = -1;
    for (int r = 0; r < SW__DRIFT_RANKS; r++) {
        drift one = fit(allocator ? &m->allocated[r] : &m->rss[r], scratch);
        /* The rank whose memory grows fastest against its own level. */
        if (one.found &&
            (worst_rank < 0 || one.slope / one.start > worst.slope / fmax(worst.start, 1)))
            worst = one, worst_rank = r;
    }
    free(scratch);
    if (worst_rank < 0)
        return;
    sw__finding *f = sw__finding_add(d, "memory-drift", SW__SEV_WARNING);
    if (f == NULL)
        return;
    const char *what = allocator ? "allocated memory" : "resident memory (RSS)";
    double per_k = worst.slope * 1000.0;
    double steps_left = worst.last_x - worst.begin_step;
    char a[32], b[32], c[32], rank[32] = "";
    if (d->nranks > 1)
        snprintf(rank, sizeof rank, " on rank %d", worst_rank);
    snprintf(f->title, sizeof f->title, "Memory drift: %s grows %s per 1,000 steps",
             allocator ? "allocated memory" : "RSS", mib(per_k, a, sizeof a));
    snprintf(f->sentence, sizeof f->sentence,
             "The %s%s rose steadily from step %.0f on, %s per 1,000 steps (from %s to %s over "
             "%.0f steps), while noise and warm-up stay flat: something keeps memory every "
             "step, such as a tensor appended to a list or a loss kept with its graph (keep "
             "loss.item() or .detach() instead).",
             what, rank, worst.begin_step, mib(per_k, a, sizeof a), mib(worst.start, b, sizeof b),
             mib(worst.end, c, sizeof c), steps_left);
    sw__finding_number(f, "slope per 1,000 steps", per_k, "bytes");
    sw__finding_number(f, "rise began at step", worst.begin_step, "");
    sw__finding_number(f, "start level", worst.start, "bytes");
    sw__finding_number(f, "end level", worst.end, "bytes");
    sw__finding_number(f, "steady steps", (double)worst.steps, "");
    if (d->nranks > 1)
        sw__finding_number(f, "rank", worst_rank, "");
}
