/*
 * series.c — the bounded, downsampled series of series.h.
 */
#include "series.h"

#include <stdlib.h>
#include <string.h>

int sw__series_init(sw__series *s, size_t max_points, int with_hist) {
    memset(s, 0, sizeof *s);
    s->max_points = max_points && max_points <= SW__SERIES_MAX ? max_points : SW__SERIES_MAX;
    s->max_points &= ~(size_t)1; /* even, so points merge in pairs */
    if (s->max_points < 2)
        s->max_points = 2;
    s->width = 1;
    s->points = calloc(s->max_points, sizeof *s->points);
    if (with_hist)
        s->hists = calloc(s->max_points, sizeof *s->hists);
    if (!s->points || (with_hist && !s->hists)) {
        sw__series_free(s);
        return SW_ENOMEM;
    }
    return 0;
}

void sw__series_free(sw__series *s) {
    free(s->points);
    free(s->hists);
    s->points = NULL;
    s->hists = NULL;
}

static void merge_point(sw__point *into, const sw__point *from) {
    if (from->count == 0)
        return;
    if (into->count == 0) {
        *into = *from;
        return;
    }
    into->count += from->count;
    into->min = from->min < into->min ? from->min : into->min;
    into->max = from->max > into->max ? from->max : into->max;
    into->sum += from->sum;
    for (int k = 0; k < SW__SERIES_SUMS; k++)
        into->sums[k] += from->sums[k];
    into->t_lo = from->t_lo < into->t_lo ? from->t_lo : into->t_lo;
    into->t_hi = from->t_hi > into->t_hi ? from->t_hi : into->t_hi;
}

/* Halve the resolution: point i takes points 2i and 2i+1. */
static void coarsen(sw__series *s) {
    size_t half = s->max_points / 2;
    for (size_t i = 0; i < half; i++) {
        sw__point merged = s->points[2 * i];
        merge_point(&merged, &s->points[2 * i + 1]);
        s->points[i] = merged;
        if (s->hists) {
            sw_hist h = s->hists[2 * i];
            sw_hist_merge(&h, &s->hists[2 * i + 1]);
            s->hists[i] = h;
        }
    }
    memset(s->points + half, 0, half * sizeof *s->points);
    if (s->hists)
        memset(s->hists + half, 0, half * sizeof *s->hists);
    s->npoints = (s->npoints + 1) / 2;
    s->width *= 2;
}

void sw__series_add(sw__series *s, uint64_t x, double y, uint64_t t_lo, uint64_t t_hi,
                    const double *sums) {
    if (!s->points)
        return;
    if (!s->started) {
        s->started = 1;
        s->origin = x;
    }
    uint64_t offset = x > s->origin ? x - s->origin : 0;
    while (offset / s->width >= s->max_points)
        coarsen(s);
    size_t i = (size_t)(offset / s->width);
    sw__point *p = &s->points[i];
    if (p->count == 0) {
        p->min = p->max = y;
        p->t_lo = t_lo;
        p->t_hi = t_hi;
    } else {
        p->min = y < p->min ? y : p->min;
        p->max = y > p->max ? y : p->max;
        p->t_lo = t_lo < p->t_lo ? t_lo : p->t_lo;
        p->t_hi = t_hi > p->t_hi ? t_hi : p->t_hi;
    }
    if (s->hists)
        sw_hist_add(&s->hists[i], y > 0 ? (uint64_t)y : 0);
    p->count++;
    p->sum += y;
    if (sums)
        for (int k = 0; k < SW__SERIES_SUMS; k++)
            p->sums[k] += sums[k];
    if (i + 1 > s->npoints)
        s->npoints = i + 1;
}

double sw__series_median(const sw__series *s, size_t i) {
    const sw__point *p = &s->points[i];
    if (p->count == 0)
        return 0;
    if (!s->hists)
        return p->sum / (double)p->count;
    double m = (double)sw_hist_quantile(&s->hists[i], 0.5);
    return m < p->min ? p->min : m > p->max ? p->max : m;
}
