/* stats_dump.c — feed durations (ns, one per line) through sw_stats and sw_hist, splitting them
 * over two partial results merged with Chan's formula, and print the figures as JSON.
 * tests/tools/check_stats.py compares them with Python's statistics module. */
#include "stepwatch.h"

#include <stdlib.h>

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
    sw_stats a, b;
    sw_stats_init(&a);
    sw_stats_init(&b);
    sw_hist *h = calloc(1, sizeof *h);
    unsigned long long v;
    long long i = 0;
    while (h && fscanf(in, "%llu", &v) == 1) {
        sw_stats_add(i % 2 ? &a : &b, v, v, i, 0);
        sw_hist_add(h, v);
        i++;
    }
    fclose(in);
    sw_stats_merge(&a, &b);
    printf("{\"count\": %llu, \"mean\": %.17g, \"stdev\": %.17g, \"pstdev\": %.17g, "
           "\"min\": %llu, \"max\": %llu, \"min_index\": %lld, \"max_index\": %lld, "
           "\"p50\": %llu, \"p90\": %llu, \"p99\": %llu}\n",
           (unsigned long long)a.count, a.mean_ns, sw_stats_stddev(&a), sw_stats_pstddev(&a),
           (unsigned long long)a.min_ns, (unsigned long long)a.max_ns, (long long)a.min_step,
           (long long)a.max_step, (unsigned long long)sw_hist_quantile(h, 0.5),
           (unsigned long long)sw_hist_quantile(h, 0.9), (unsigned long long)sw_hist_quantile(h, 0.99));
    free(h);
    return 0;
}
