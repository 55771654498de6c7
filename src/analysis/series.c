/*
 * series.c — the bounded, downsampled series of series.h.
 */
#include "series.h"

#include <stdlib.h>
#include <string.h>

int sw__series_init(sw__series *s, size_t max_points)
{
    memset(s, 0, sizeof *s);
    s->max_points = max_points && max_points <= SW__SERIES_MAX ? max_points : SW__SERIES_MAX;
    s->max_points &= ~(size_t)1; /* even, so points merge in pairs */
    if (s->max_points < 2)
        s->max_points = 2;
    s->width = 1;
    s->points = calloc(s->max_points, sizeof *s->points);
    return s->points ? 0 : SW_ENOMEM;
}

void sw__series_free(sw__series *s)
{
    free(s->points);
    s->points = NULL;
}

static void merge_point(sw__point *into, const sw__point *from)
{
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
}

/* Halve the resolution: point i takes points 2i and 2i+1. */
static void coarsen(sw__series *s)
{
    size_t half = s->max_points / 2;
    for (size_t i = 0; i < half; i++) {
        sw__point merged = s->points[2 * i];
        merge_point(&merged, &s->points[2 * i + 1]);
        s->points[i] = merged;
    }
    memset(s->points + half, 0, half * sizeof *s->points);
    s->npoints = (s->npoints + 1) / 2;
    s->width *= 2;
}

void sw__series_add(sw__series *s, uint64_t x, double y, const double *sums)
{
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
    } else {
        p->min = y < p->min ? y : p->min;
        p->max = y > p->max ? y : p->max;
    }
    p->count++;
    p->sum += y;
    if (sums)
        for (int k = 0; k < SW__SERIES_SUMS; k++)
            p->sums[k] += sums[k];
    if (i + 1 > s->npoints)
        s->npoints = i + 1;
}
