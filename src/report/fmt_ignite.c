/*
 * fmt_ignite.c — SW_FORMAT_IGNITE, the summary Ignite's BasicTimeProfiler.print_results
 * prints: a boxed title, the column line "total  |  min/index  |  max/index  |  mean  |
 * std", then one block per action with seconds to 5 decimals, min and max with the step
 * index where they happened ("-" outside steps), and the sample standard deviation (n - 1,
 * as torch.std). An action called once shows only its total, as Ignite shows STARTED.
 *
 * Rows are the all-phase roll-ups, largest total first; callbacks ("callback:<name>")
 * come last under "Event handlers:" with their sum, each as "- <name>:", the way Ignite
 * lists the handlers of each event.
 */
#include "writer.h"

#include <stdlib.h>

static void put_stats(FILE *out, const sw_stats *st) {
    char cell[256];
    sw__ignite_stats_cell(st, cell, sizeof cell);
    fprintf(out, "%s\n", cell);
}

static int write_ignite(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    (void)opts;
    const sw_row **rows = NULL;
    long n = sw__rows_select(s, 1, &rows);
    if (n < 0)
        return SW_ENOMEM;
    sw__ignite_put_title(out);
    char name[SW__LABEL_MAX];
    uint64_t handlers_ns = 0;
    int handlers = 0;
    for (long i = 0; i < n; i++) {
        if (rows[i]->stats.count == 0)
            continue;
        if (rows[i]->category == SW_CAT_CALLBACK) {
            handlers_ns += rows[i]->stats.total_ns;
            handlers++;
            continue;
        }
        sw__row_action(rows[i], name, sizeof name);
        fprintf(out, "\n%s:\n", name);
        put_stats(out, &rows[i]->stats);
    }
    if (handlers > 0) {
        fprintf(out, "\nEvent handlers:\n%.5f\n", (double)handlers_ns / 1e9);
        for (long i = 0; i < n; i++) {
            if (rows[i]->stats.count == 0 || rows[i]->category != SW_CAT_CALLBACK)
                continue;
            sw__row_action(rows[i], name, sizeof name);
            fprintf(out, "\n- %s:\n", name);
            put_stats(out, &rows[i]->stats);
        }
    }
    free(rows);
    return 0;
}

const sw__writer sw__writer_ignite = {SW_FORMAT_IGNITE, "ignite", 0, write_ignite};
