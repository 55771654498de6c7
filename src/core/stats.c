/*
 * stats.c — running statistics of durations: Welford's update for one value and Chan's
 * formula for merging two partial results (per-thread buffers, ranks, run files).
 */
#include "core.h"

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
    /* Welford (a block of one value); the mean comes from the exact integer total rather
     * than an accumulated floating-point update. */
    s->m2 = sw__m2_fold(s->count - 1, s->mean_ns, s->m2, &ns, 1);
    s->mean_ns = (double)s->total_ns / (double)s->count;
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

double sw__m2_fold(uint64_t n_a, double mean_a, double m2_a, const uint64_t *v, uint32_t n_b) {
    if (n_b == 0)
        return m2_a;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n_b; i++)
        sum += v[i];
    double mean_b = (double)sum / (double)n_b, m2_b = 0.0;
    for (uint32_t i = 0; i < n_b; i++) {
        double d = (double)v[i] - mean_b;
        m2_b += d * d;
    }
    if (n_a == 0)
        return m2_b;
    /* Chan: the two blocks' moments plus the spread between their means. */
    double delta = mean_b - mean_a;
    return m2_a + m2_b + delta * delta * ((double)n_a * (double)n_b / (double)(n_a + n_b));
}

uint64_t sw_stats_quantile(const sw_stats *s, const sw_hist *h, double q) {
    if (s == NULL || h == NULL || s->count == 0 || h->count == 0)
        return 0;
    uint64_t v = sw_hist_quantile(h, q);
    if (v < s->min_ns)
        return s->min_ns;
    return v > s->max_ns ? s->max_ns : v;
}
