/*
 * test_ranks_select.c — the cross-rank reduction's selections (src/ranks/select.c) against a
 * sort, on random inputs with and without ties: the k-th smallest, the median, the median of
 * every value but one; and a whole reduction of random payloads against medians and
 * stragglers worked out here by sorting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranks/ranks.h"

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Random values; with ties, drawn from only a few distinct ones. */
static void random_values(double *v, size_t n, int ties) {
    for (size_t i = 0; i < n; i++)
        v[i] = ties ? (double)(rand() % 4) : (double)rand() / RAND_MAX * 1e6;
}

static double sorted_median(const double *s, size_t n) {
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void test_select_matches_a_sort(void **state) {
    (void)state;
    srand(41);
    static const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 100, 1001, 4096};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        double *v = malloc(n * sizeof *v), *sorted = malloc(n * sizeof *v),
               *work = malloc(n * sizeof *v);
        for (int ties = 0; ties < 2; ties++) {
            random_values(v, n, ties);
            memcpy(sorted, v, n * sizeof *v);
            qsort(sorted, n, sizeof *sorted, by_double);
            for (size_t k = 0; k<n; k += n> 64 ? n / 17 + 1 : 1) {
                memcpy(work, v, n * sizeof *v);
                assert_true(sw__select(work, n, k) == sorted[k]);
                for (size_t i = 0; i <= k; i++) /* reordered around it */
                    assert_true(work[i] <= sorted[k]);
                for (size_t i = k; i < n; i++)
                    assert_true(work[i] >= sorted[k]);
            }
            memcpy(work, v, n * sizeof *v);
            assert_true(sw__median(work, n) == sorted_median(sorted, n));
        }
        free(v);
        free(sorted);
        free(work);
    }
    /* already sorted, reversed and all equal: no quadratic case, still right */
    size_t n = 200000;
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)i;
    assert_true(sw__median(v, n) == (double)(n - 1) / 2);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)(n - i);
    assert_true(sw__select(v, n, 10) == 11);
    for (size_t i = 0; i < n; i++)
        v[i] = 7;
    assert_true(sw__median(v, n) == 7);
    free(v);
}

/* The median of the others, for every value, against removing it and sorting the rest. */
static void test_median_of_others_matches_a_sort(void **state) {
    (void)state;
    srand(7);
    for (size_t n = 2; n < 40; n++) {
        for (int ties = 0; ties < 2; ties++) {
            double v[40], work[40], rest[40];
            random_values(v, n, ties);
            memcpy(work, v, sizeof v);
            sw__others o;
            sw__others_prepare(&o, work, n);
            for (size_t i = 0; i < n; i++) {
                size_t m = 0;
                for (size_t j = 0; j < n; j++)
                    if (j != i)
                        rest[m++] = v[j];
                qsort(rest, m, sizeof *rest, by_double);
                assert_true(sw__median_of_others(&o, v[i]) == sorted_median(rest, m));
            }
        }
    }
    sw__others one;
    double x = 3;
    sw__others_prepare(&one, &x, 1);
    assert_true(isnan(sw__median_of_others(&one, 3)));
}

/* The median of the whole column from the prepared order statistics, and a column of equal
 * values prepared without a selection, against a sort. */
static void test_prepared_median_and_constant_columns(void **state) {
    (void)state;
    srand(11);
    for (size_t n = 0; n < 60; n++) {
        for (int ties = 0; ties < 2; ties++) {
            double v[60] = {0}, work[60], sorted[60];
            random_values(v, n, ties);
            memcpy(work, v, sizeof v);
            memcpy(sorted, v, sizeof v);
            qsort(sorted, n, sizeof *sorted, by_double);
            sw__others o;
            sw__others_prepare(&o, work, n);
            assert_true(sw__others_median(&o) == (n ? sorted_median(sorted, n) : 0));
        }
        sw__others same, prepared;
        double equal[60];
        for (size_t i = 0; i < n; i++)
            equal[i] = 5;
        sw__others_constant(&same, n, 5);
        sw__others_prepare(&prepared, equal, n);
        assert_true(sw__others_median(&same) == sw__others_median(&prepared));
        if (n >= 2) {
            assert_true(sw__median_of_others(&same, 5) == 5);
            assert_true(sw__median_of_others(&same, 5) == sw__median_of_others(&prepared, 5));
        }
    }
}

/* A payload of rank r of world, with the given step, data and collective times per step. */
static void make_payload(unsigned char *buf, int r, int world, double step, double data,
                         double coll) {
    sw__payload pl = {.rank = r, .world_size = world, .steps = 10, .flags = 1};
    snprintf(pl.host, sizeof pl.host, "h%d", r / 8);
    uint64_t v[] = {(uint64_t)(step * 10), (uint64_t)(data * 10), (uint64_t)(coll * 10)};
    sw__slot k[] = {SW__SLOT_STEP, SW__SLOT_DATA, SW__SLOT_COLLECTIVE};
    for (int i = 0; i < 3; i++) {
        pl.slots[k[i]].count = 10;
        pl.slots[k[i]].total_ns = pl.slots[k[i]].self_ns = v[i];
    }
    snprintf(pl.ops[0].name, sizeof pl.ops[0].name, "allreduce");
    pl.ops[0].count = 10;
    pl.ops[0].total_ns = v[2];
    sw__payload_encode(&pl, buf);
}

/* Random ranks reduced, against the medians and the stragglers worked out by sorting. */
static void test_reduction_matches_a_sort(void **state) {
    (void)state;
    srand(3);
    for (int round = 0; round < 6; round++) {
        int world = 2 + rand() % 300;
        unsigned char *all = calloc((size_t)world, SW_RANK_PAYLOAD_SIZE);
        double *step = malloc((size_t)world * sizeof *step), *own = malloc(world * sizeof *own);
        double *rest = malloc((size_t)world * sizeof *rest);
        for (int r = 0; r < world; r++) {
            double data = 1e5 * (rand() % 5), coll = 1e6 * (rand() % 20) / 10;
            if (rand() % 40 == 0)
                data += 5e6; /* a few stragglers */
            step[r] = 10e6 + data + coll;
            own[r] = step[r] - coll;
            make_payload(all + (size_t)r * SW_RANK_PAYLOAD_SIZE, r, world, step[r], data, coll);
        }
        sw_ranks *v = NULL;
        assert_int_equal(sw_ranks_reduce(all, world, &v), 0);
        memcpy(rest, step, (size_t)world * sizeof *rest);
        qsort(rest, (size_t)world, sizeof *rest, by_double);
        assert_true(fabs(v->stats[SW__SLOT_STEP].median_ns - sorted_median(rest, world)) < 1e-6);
        assert_int_equal(v->nrows, world);
        assert_int_equal(v->nops, 1);
        /* the stragglers: own work or step past the others' median by the threshold */
        size_t expected = 0;
        for (int r = 0; r < world; r++) {
            double med[2];
            const double *cols[2] = {own, step};
            for (int c = 0; c < 2; c++) {
                size_t m = 0;
                for (int j = 0; j < world; j++)
                    if (j != r)
                        rest[m++] = cols[c][j];
                qsort(rest, m, sizeof *rest, by_double);
                med[c] = sorted_median(rest, m);
            }
            double excess = fmax(own[r] - med[0], step[r] - med[1]);
            int found = 0;
            for (size_t i = 0; i < v->nstragglers; i++)
                if (v->stragglers[i].rank == r) {
                    found = 1;
                    assert_true(fabs(v->stragglers[i].excess_ns - excess) < 1e-3);
                }
            assert_int_equal(found, excess >= v->threshold_ns);
            expected += found;
        }
        assert_int_equal(v->nstragglers, expected);
        for (size_t i = 1; i < v->nstragglers; i++)
            assert_true(v->stragglers[i - 1].excess_ns >= v->stragglers[i].excess_ns);
        sw_ranks_free(v);
        free(all);
        free(step);
        free(own);
        free(rest);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_matches_a_sort),
        cmocka_unit_test(test_median_of_others_matches_a_sort),
        cmocka_unit_test(test_prepared_median_and_constant_columns),
        cmocka_unit_test(test_reduction_matches_a_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
