/* stats_dump.c — feed durations (ns, one per line) through stepwatch two ways and print the
 * figures of each as JSON; tests/tools/check_stats.py compares them with Python's statistics
 * module.
 *   "stats":    sw_stats/sw_hist directly, split over two partial results merged with Chan;
 *   "recorder": a profiler, one sw_record per step, read back from a snapshot (the recorder
 *               batches values before folding them in, so counts that are not a multiple of
 *               its batch exercise the reader's fold too). */
#include "stepwatch.h"

#include <stdlib.h>

static void print_figures(const char *key, const sw_stats *s, const sw_hist *h) {
    printf("\"%s\": {\"count\": %llu, \"mean\": %.17g, \"stdev\": %.17g, \"pstdev\": %.17g, "
           "\"min\": %llu, \"max\": %llu, \"min_index\": %lld, \"max_index\": %lld, "
           "\"p50\": %llu, \"p90\": %llu, \"p99\": %llu}",
           key, (unsigned long long)s->count, s->mean_ns, sw_stats_stddev(s), sw_stats_pstddev(s),
           (unsigned long long)s->min_ns, (unsigned long long)s->max_ns, (long long)s->min_step,
           (long long)s->max_step, (unsigned long long)sw_hist_quantile(h, 0.5),
           (unsigned long long)sw_hist_quantile(h, 0.9),
           (unsigned long long)sw_hist_quantile(h, 0.99));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stats_dump FILE\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "r");
    if (in == NULL) {
        perror(argv[1]);
        return 2;
    }
    sw_profiler *p = NULL;
    sw_snapshot *snap = NULL;
    sw_hist *h = calloc(1, sizeof *h);
    if (h == NULL || sw_profiler_new(NULL, &p) != 0) {
        fprintf(stderr, "stats_dump: out of memory\n");
        return 1;
    }
    sw_id action = sw_action(p, "value");
    sw_stats a, b;
    sw_stats_init(&a);
    sw_stats_init(&b);
    unsigned long long v;
    long long i = 0;
    while (fscanf(in, "%llu", &v) == 1) {
        sw_stats_add(i % 2 ? &a : &b, v, v, i, 0);
        sw_hist_add(h, v);
        sw_step_begin(p, 0); /* step i, so min/max indices match the line numbers */
        sw_record(p, action, 1000, 1000 + v);
        sw_step_end(p);
        i++;
    }
    fclose(in);
    sw_stats_merge(&a, &b);
    const sw_row *row = NULL;
    if (sw_snapshot_take(p, &snap) != 0 || (row = sw_snapshot_find(snap, "value", "all")) == NULL) {
        fprintf(stderr, "stats_dump: no snapshot row for the recorded values\n");
        return 1;
    }
    printf("{");
    print_figures("stats", &a, h);
    printf(", ");
    print_figures("recorder", &row->stats, &row->hist);
    printf("}\n");
    sw_snapshot_free(snap);
    sw_profiler_free(p);
    free(h);
    return 0;
}
