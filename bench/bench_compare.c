/*
 * bench_compare.c — `stepwatch compare` as the number of actions grows (issue 29 item 11: it
 * paired rows by a search through all rows, n^2; 4,000 actions x 5 phases took 6.9 s where
 * report took 0.18 s, 100k rows over 20 s). Two snapshots of n actions x 5 phases (the base,
 * and the new with every mean 10 % slower), compared to CSV in memory; beside it, in the same
 * run, the report of the same snapshot, the baseline the issue measured against. The time
 * for 2n rows over the time for n says how it grows: about 2 for n log n, 4 for n^2.
 *
 * usage: bench_compare [OUT.json]      (default: build/bench/compare.json)
 */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* n actions x 5 phases (and their roll-ups), each with 100 calls around mean_ns. */
static sw_snapshot *make(int nactions, double mean_ns) {
    static const char *const PHASES[5] = {"fit", "epoch", "train", "valid", "test"};
    sw_snapshot *s = sw__snapshot_new();
    sw_row *row = calloc(1, sizeof *row);
    if (s == NULL || row == NULL)
        exit(1);
    char name[32];
    for (int a = 0; a < nactions; a++) {
        snprintf(name, sizeof name, "action%05d", a);
        for (int p = 0; p <= 5; p++) {
            memset(row, 0, sizeof *row);
            row->action = (sw_id)a;
            row->action_name = name;
            row->phase = p == 5 ? SW_PHASE_ALL : (sw_phase)(p + 1);
            row->phase_name = p == 5 ? "all" : PHASES[p];
            for (int k = 0; k < 100; k++) {
                uint64_t v = (uint64_t)(mean_ns * (0.9 + 0.002 * k));
                sw_stats_add(&row->stats, v, v, k, 0);
                sw_hist_add(&row->hist, v);
            }
            if (sw__snapshot_add_row(s, row) != 0)
                exit(1);
        }
    }
    free(row);
    return s;
}

/* Seconds for fn's write of (a, b) into a memory stream: the best of 3. */
static double timed(int compare, const sw_snapshot *a, const sw_snapshot *b) {
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        double t0 = now_s();
        int rc = compare ? sw_compare_write(a, b, SW_FORMAT_CSV, out)
                         : sw_snapshot_write(b, SW_FORMAT_CSV, out);
        double t = now_s() - t0;
        fclose(out);
        free(text);
        if (rc != 0)
            exit(1);
        if (t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *json = argc > 1 ? argv[1] : "build/bench/compare.json";
    static const int SIZES[] = {2000, 4000, 8000, 16667}; /* 16,667 x 6 = 100k rows */
    FILE *f = fopen(json, "w");
    printf("%8s %8s %12s %12s %8s %14s\n", "actions", "rows", "compare s", "report s", "ratio",
           "vs half size");
    if (f)
        fprintf(f, "{\"bench\": \"compare\", \"runs\": [");
    double previous = 0;
    for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++) {
        sw_snapshot *a = make(SIZES[i], 1e6), *b = make(SIZES[i], 1.1e6);
        double c = timed(1, a, b), r = timed(0, a, b);
        size_t rows = a->nrows;
        char growth[32] = "-";
        if (i > 0 && SIZES[i] == 2 * SIZES[i - 1])
            snprintf(growth, sizeof growth, "%.2fx", c / previous);
        printf("%8d %8zu %12.3f %12.3f %8.2f %14s\n", SIZES[i], rows, c, r, c / r, growth);
        if (f)
            fprintf(f,
                    "%s{\"actions\": %d, \"rows\": %zu, \"compare_s\": %.4f, \"report_s\": %.4f}",
                    i ? ", " : "", SIZES[i], rows, c, r);
        previous = c;
        sw_snapshot_free(a);
        sw_snapshot_free(b);
    }
    if (f) {
        fprintf(f, "]}\n");
        fclose(f);
    }
    return 0;
}
