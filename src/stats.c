/*
 * stats.c — running statistics of durations: Welford's update for one value and Chan's
 * formula for merging two partial results (per-thread buffers, ranks, run files).
 */
#include "stepwatch.h"

#include <math.h>

void sw_stats_init(sw_stats *s) {
    *s = (sw_stats){0};
    s->min_ns = UINT64_MAX;
    s->min_step = -1;
    s->max_step = -1;
}

void sw_stats_add(sw_stats *s, uint64_t ns, uint64_t self_ns, int64_t step, uint64_t samples) {
    s->count++;
    s->total_ns += ns;
    s->self_ns += self_ns;
    s->samples += samples;
    /* Welford: M2 grows by (x - old mean)(x - new mean). The mean comes from the exact
     * integer total rather than an accumulated floating-point update. */
    double old_mean = s->mean_ns;
    s->mean_ns = (double)s->total_ns / (double)s->count;
    s->m2 += ((double)ns - old_mean) * ((double)ns - s->mean_ns);
    if (ns < s->min_ns) {
        s->min_ns = ns;
        s->min_step = step;
    }
    if (ns > s->max_ns || s->count == 1) {
        s->max_ns = ns;
        s->max_step = step;
    }
}

void sw_stats_merge(sw_stats *into, const sw_stats *from) {
    if (from->count == 0)
        return;
    if (into->count == 0) {
        *into = *from;
        return;
    }
    double n_a = (double)into->count, n_b = (double)from->count, n = n_a + n_b;
    double delta = from->mean_ns - into->mean_ns;
    into->mean_ns += delta * (n_b / n);
    into->m2 += from->m2 + delta * delta * (n_a * n_b / n);
    into->count += from->count;
    into->total_ns += from->total_ns;
    into->self_ns += from->self_ns;
    into->samples += from->samples;
    if (from->min_ns < into->min_ns) {
        into->min_ns = from->min_ns;
        into->min_step = from->min_step;
    }
    if (from->max_ns > into->max_ns) {
        into->max_ns = from->max_ns;
        into->max_step = from->max_step;
    }
}

double sw_stats_stddev(const sw_stats *s) {
    if (s->count < 2)
        return 0.0;
    return sqrt(s->m2 / (double)(s->count - 1));
}

double sw_stats_pstddev(const sw_stats *s) {
    if (s->count < 1)
        return 0.0;
    return sqrt(s->m2 / (double)s->count);
}

double sw_stats_samples_per_s(const sw_stats *s) {
    if (s->samples == 0 || s->total_ns == 0)
        return 0.0;
    return (double)s->samples * 1e9 / (double)s->total_ns;
}
