/*
 * series.h — a bounded, downsampled series: at most SW__SERIES_MAX points whatever the
 * length of the run. Each point covers `width` consecutive x values (step indices or
 * nanoseconds) and keeps count, min, max, sums and the time span of its values (so a chart
 * can put it on a wall-time axis), optionally a histogram of its values (for the median);
 * when a value lands beyond the last point, neighbouring points are merged in pairs and the
 * width doubles, so a single streaming pass needs no idea of the final length.
 */
#ifndef SW_ANALYSIS_SERIES_H
#define SW_ANALYSIS_SERIES_H

#include "stepwatch.h"

#define SW__SERIES_MAX 2000
#define SW__SERIES_SUMS SW_CAT_COUNT /* extra sums per point (the per-category times) */

typedef struct sw__point {
    uint64_t count;
    double min, max, sum;
    double sums[SW__SERIES_SUMS];
    uint64_t t_lo, t_hi; /* earliest start and latest end of its values (ns since start) */
} sw__point;

typedef struct sw__series {
    int started;
    uint64_t origin;   /* x of the first point's start */
    uint64_t width;    /* x values per point (a power of two) */
    size_t npoints;    /* points in use (the last one with data, plus one) */
    size_t max_points; /* <= SW__SERIES_MAX */
    sw__point *points; /* max_points of them, allocated by sw__series_init */
    sw_hist *hists;    /* with_hist: one histogram per point (y as ns), else NULL */
} sw__series;

/* 0 or SW_ENOMEM. max_points 0 = SW__SERIES_MAX. with_hist keeps a histogram per point
 * (about 2.4 kB each), for sw__series_median. */
int sw__series_init(sw__series *s, size_t max_points, int with_hist);
void sw__series_free(sw__series *s);
/* Add value y at x, which spans times [t_lo, t_hi], with optional extra sums (NULL, or
 * SW__SERIES_SUMS values). x below the origin of the first point counts into the first
 * point. */
void sw__series_add(sw__series *s, uint64_t x, double y, uint64_t t_lo, uint64_t t_hi,
                    const double *sums);
/* The median of point i's values, within the histogram's 3.1 % and clamped to its range;
 * the mean without histograms. */
double sw__series_median(const sw__series *s, size_t i);

#endif
