/*
 * select.c — order statistics without a sort, for the cross-rank view's medians: the k-th
 * smallest of n values in O(n) on average (quickselect with Hoare's partition, which stays
 * linear when many values are equal, as lockstep ranks' are), and the median of every
 * value but one in O(1) from three order statistics. A range that does not shrink fast
 * enough is sorted instead, so no input is quadratic.
 */
#include "ranks.h"

#include <math.h>
#include <stdlib.h>

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void swap(double *v, size_t i, size_t j) {
    double t = v[i];
    v[i] = v[j];
    v[j] = t;
}

/* v[lo..hi] partitioned around the median of its first, middle and last values (Hoare):
 * on return every value at or before *left_end is <= every value after it. */
static size_t partition(double *v, size_t lo, size_t hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < v[lo])
        swap(v, mid, lo);
    if (v[hi] < v[lo])
        swap(v, hi, lo);
    if (v[hi] < v[mid])
        swap(v, hi, mid);
    double pivot = v[mid];
    size_t i = lo - 1, j = hi + 1;
    for (;;) {
        do
            i++;
        while (v[i] < pivot);
        do
            j--;
        while (v[j] > pivot);
        if (i >= j)
            return j;
        swap(v, i, j);
    }
}

double sw__select(double *v, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1, budget = 64; /* rounds before sorting what is left */
    while (lo < hi) {
        if (budget-- == 0) {
            qsort(v + lo, hi - lo + 1, sizeof *v, by_double);
            break;
        }
        size_t p = partition(v, lo, hi);
        if (k <= p)
            hi = p;
        else
            lo = p + 1;
    }
    return v[k];
}

double sw__median(double *v, size_t n) {
    if (n == 0)
        return 0;
    size_t k = (n - 1) / 2;
    double m = sw__select(v, n, k);
    if (n % 2)
        return m;
    double next = v[k + 1]; /* the smallest of the upper part */
    for (size_t i = k + 2; i < n; i++)
        if (v[i] < next)
            next = v[i];
    return (m + next) / 2;
}

/* The first of the three order statistics kept (the lo-th smallest): the median of the n - 1
 * others sits at most one place past the middle of n - 1 values, so lo, lo + 1 and lo + 2
 * hold it whichever value goes. */
static size_t others_lo(size_t n) {
    return n < 2 ? 0 : (n - 1) % 2 ? (n - 2) / 2 : (n - 1) / 2 - 1;
}

void sw__others_prepare(sw__others *o, double *v, size_t n) {
    o->n = n;
    o->lo = others_lo(n);
    o->v[0] = n == 1 ? v[0] : INFINITY;
    o->v[1] = o->v[2] = INFINITY;
    if (n < 2)
        return;
    o->v[0] = sw__select(v, n, o->lo);
    /* the next two order statistics: the two smallest after lo */
    double a = INFINITY, b = INFINITY;
    for (size_t i = o->lo + 1; i < n; i++) {
        if (v[i] < a) {
            b = a;
            a = v[i];
        } else if (v[i] < b) {
            b = v[i];
        }
    }
    o->v[1] = a;
    o->v[2] = b;
}

/* The idx-th smallest of the values without one copy of x: removing the first copy of x
 * shifts exactly the order statistics at or after it, i.e. those not below x. */
static double other(const sw__others *o, size_t idx, double x) {
    const double *v = o->v + (idx - o->lo);
    return v[0] < x ? v[0] : v[1];
}

double sw__median_of_others(const sw__others *o, double x) {
    size_t k = o->n - 1; /* the others */
    if (o->n < 2)
        return NAN;
    if (k % 2)
        return other(o, (k - 1) / 2, x);
    return (other(o, k / 2 - 1, x) + other(o, k / 2, x)) / 2;
}

void sw__others_constant(sw__others *o, size_t n, double x) {
    o->n = n;
    o->lo = others_lo(n);
    for (size_t j = 0; j < 3; j++)
        o->v[j] = o->lo + j < n ? x : INFINITY;
}

/* The median of all n values, from the same three: the middle one (n odd) or the two
 * middle ones (n even) are among them. */
double sw__others_median(const sw__others *o) {
    size_t n = o->n;
    if (n == 0)
        return 0;
    if (n % 2)
        return o->v[(n - 1) / 2 - o->lo];
    return (o->v[n / 2 - 1 - o->lo] + o->v[n / 2 - o->lo]) / 2;
}
