/*
 * test_run_fixture.h — a deterministic run file built by hand (no clock involved), written
 * through the same store functions as the journal. Used by the reader and CLI tests.
 */
#ifndef SW_TEST_RUN_FIXTURE_H
#define SW_TEST_RUN_FIXTURE_H

#include "runfile/run_store.h"

#include <string.h>

/* Rank `rank` of a 2-rank run: 8 train steps of data/forward/backward/optimizer, a counter,
 * a timeline. Rank 1 is slower in data. Returns 0 or SW_E*. */
static inline int sw_test_write_fixture(const char *path, int rank) {
    static const char *const actions[] = {"step", "data", "forward", "backward", "optimizer"};
    static const uint64_t base_ns[] = {0, 2000000, 5000000, 9000000, 1000000};
    enum { NSTEPS = 8, NACTIONS = 5 };
    sw__store *st = NULL;
    int rc = sw__store_create(path, NULL, &st);
    if (rc != 0)
        return rc;
    sw_snapshot *s = sw__snapshot_new();
    sw__run_meta m = {.rank = rank,
                      .world_size = 2,
                      .name = "fixture",
                      .host = "node-a",
                      .command = "train.py --lr 0.1",
                      .pid = 1000 + rank,
                      .start_unix_ns = 1700000000000000000ull + (uint64_t)rank * 1000000,
                      .origin_ns = 5000,
                      .options_json = "{}"};
    uint64_t step_ns[NSTEPS] = {0};
    sw_row row;
    for (int a = 1; a < NACTIONS; a++) {
        memset(&row, 0, sizeof row);
        row.action = (sw_id)a, row.action_name = actions[a];
        row.phase = SW_PHASE_TRAIN, row.phase_name = "train";
        row.category = sw_category_of(actions[a]);
        sw_stats_init(&row.stats);
        sw_stats_init(&row.warmup);
        for (int i = 0; i < NSTEPS; i++) {
            uint64_t ns = base_ns[a] + (uint64_t)i * 10000 +
                          (a == 1 ? (uint64_t)rank * 3000000 : 0);
            sw_stats_add(&row.stats, ns, ns, i, 32);
            sw_hist_add(&row.hist, ns);
            step_ns[i] += ns;
        }
        sw__snapshot_add_row(s, &row);
    }
    memset(&row, 0, sizeof row);
    row.action = 0, row.action_name = "step", row.phase = SW_PHASE_TRAIN, row.phase_name = "train";
    row.category = SW_CAT_OTHER;
    sw_stats_init(&row.stats);
    sw_stats_init(&row.warmup);
    for (int i = 0; i < NSTEPS; i++) {
        sw_stats_add(&row.stats, step_ns[i] + 100000, 100000, i, 32);
        sw_hist_add(&row.hist, step_ns[i] + 100000);
    }
    sw__snapshot_add_row(s, &row);
    sw_counter_summary c = {
        .name = "gpu \"util\" %", .count = NSTEPS, .last = 80, .min = 10, .max = 90, .mean = 50};
    sw__snapshot_add_counter(s, &c);
    rc = sw__snapshot_finish(s);
    s->elapsed_ns = s->wall_ns = 200000000;
    s->steps = NSTEPS;
    s->threads = 1;
    s->misuse.end_without_begin = (uint64_t)rank;
    if (rc == 0)
        rc = sw__store_begin(st);
    if (rc == 0)
        rc = sw__store_write_meta(st, &m);
    for (int a = 0; rc == 0 && a < NACTIONS; a++)
        rc = sw__store_write_name(st, rank, "action", (uint32_t)a, actions[a]);
    if (rc == 0)
        rc = sw__store_write_name(st, rank, "counter", 0, c.name);
    uint64_t t = 1000;
    for (int i = 0; rc == 0 && i < NSTEPS; i++) {
        sw_step_record r = {.step = (uint64_t)i,
                            .phase = SW_PHASE_TRAIN,
                            .batch_size = 32,
                            .warmup = 0,
                            .thread = 0,
                            .start_ns = t,
                            .duration_ns = step_ns[i] + 100000};
        sw_span_record spans[NACTIONS];
        uint64_t at = t;
        for (int a = 1; a < NACTIONS; a++) {
            uint64_t ns = base_ns[a] + (uint64_t)i * 10000 +
                          (a == 1 ? (uint64_t)rank * 3000000 : 0);
            r.category_ns[sw_category_of(actions[a])] += ns;
            spans[a] = (sw_span_record){.action = (sw_id)a,
                                        .phase = SW_PHASE_TRAIN,
                                        .depth = 1,
                                        .step = i,
                                        .start_ns = at,
                                        .duration_ns = ns};
            at += ns;
        }
        r.category_ns[SW_CAT_OTHER] = 100000;
        spans[0] = (sw_span_record){.action = 0,
                                    .phase = SW_PHASE_TRAIN,
                                    .depth = 0,
                                    .step = i,
                                    .start_ns = t,
                                    .duration_ns = r.duration_ns};
        rc = sw__store_add_step(st, rank, &r);
        if (rc == 0)
            rc = sw__store_add_spans(st, rank, 0, spans, NACTIONS);
        sw_counter_record cr = {.counter = 0, .thread = 0, .time_ns = t, .value = 10.0 * i};
        if (rc == 0)
            rc = sw__store_add_counter(st, rank, &cr);
        t += r.duration_ns + 50000;
    }
    if (rc == 0)
        rc = sw__store_write_snapshot(st, rank, s, 1, "exit");
    if (rc == 0)
        rc = sw__store_commit(st);
    sw_snapshot_free(s);
    sw__store_close(st);
    return rc;
}

#endif
