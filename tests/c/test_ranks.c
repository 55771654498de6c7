/*
 * test_ranks.c — the cross-rank view: payloads made by real profilers whose steps have known
 * parts (recorded with sw_record at known times), their byte layout, the reduction (the
 * straggler and its blame: data, compute with the part, collectives; lockstep ranks; ranks
 * that did not answer), the writers, the run file's rounds, a merged file's view, and the
 * transport sink's final round on sw_profiler_free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_helpers.h"

#define MS 1000000ull
#define STEPS 12

/* What one rank's steps are made of, in ms. */
typedef struct parts {
    double data, forward, backward, optimizer, collective;
    const char *collective_as; /* the collective's name, given its category (NULL: the DDP
                                  hook's "collective:allreduce", category from the name) */
} parts;

/* Record STEPS training steps of the given parts into p: each step begins at a time in the
 * past so that its parts, recorded at known times, end now. */
static void record_steps(sw_profiler *p, parts t) {
    sw_id data = sw_action(p, "data"), fwd = sw_action(p, "forward"),
          bwd = sw_action(p, "backward"), opt = sw_action(p, "optimizer"),
          coll = t.collective_as ? sw_action_with_category(p, t.collective_as, SW_CAT_COLLECTIVE)
                                 : sw_action(p, "collective:allreduce");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < STEPS; i++) {
        double ms[] = {t.data, t.forward, t.backward, t.collective, t.optimizer};
        sw_id ids[] = {data, fwd, bwd, coll, opt};
        uint64_t total = 0;
        for (int k = 0; k < 5; k++)
            total += (uint64_t)(ms[k] * MS);
        uint64_t start = sw_now_ns() - total, at = start;
        sw_step_begin_at(p, 8, start);
        for (int k = 0; k < 5; k++) {
            uint64_t d = (uint64_t)(ms[k] * MS);
            if (d > 0)
                sw_record(p, ids[k], at, at + d);
            at += d;
        }
        sw_step_end_at(p, at); /* not now: a preemption here would add to compute */
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
}

/* The payloads of world ranks with the given parts, in one buffer. */
static unsigned char *payloads_of(int world, const parts *t) {
    unsigned char *all = calloc((size_t)world, SW_RANK_PAYLOAD_SIZE);
    assert_non_null(all);
    for (int r = 0; r < world; r++) {
        SW_TEST_PROFILER(p, .rank = r, .world_size = world, .local_rank = r % 2);
        record_steps(p, t[r]);
        assert_int_equal(
            sw_rank_payload(p, 0, 0, all + (size_t)r * SW_RANK_PAYLOAD_SIZE, SW_RANK_PAYLOAD_SIZE),
            0);
        sw_profiler_free(p);
    }
    return all;
}

/* The view of world ranks with the given parts. */
static sw_ranks *reduce_parts(int world, const parts *t) {
    unsigned char *all = payloads_of(world, t);
    sw_ranks *r = NULL;
    assert_int_equal(sw_ranks_reduce(all, world, &r), 0);
    free(all);
    return r;
}

static const sw_rank_stat *stat_of(const sw_ranks *r, const char *name) {
    for (size_t i = 0; i < r->nstats; i++)
        if (strcmp(r->stats[i].name, name) == 0)
            return &r->stats[i];
    fail_msg("no row %s", name);
    return NULL;
}

static char *write_to_string(const sw_ranks *r, sw_format fmt) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_int_equal(sw_ranks_write(r, fmt, 0, f), 0);
    fclose(f);
    return text;
}

static void assert_near_ms(double ns, double ms, double tolerance_ms) {
    if (fabs(ns / 1e6 - ms) > tolerance_ms)
        fail_msg("%.3f ms, expected %.3f +- %.3f", ns / 1e6, ms, tolerance_ms);
}

/* DDP in lockstep: rank 1 waits 40 ms longer for data; the others wait for it in the
 * all-reduce. */
static void test_data_straggler_in_lockstep(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 41};
    parts slow = {.data = 41, .forward = 4, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[4] = {fast, slow, fast, fast};
    sw_ranks *r = reduce_parts(4, t);
    assert_int_equal(r->world_size, 4);
    assert_int_equal(r->answered, 4);
    assert_int_equal(r->nmissing, 0);
    assert_int_equal(r->min_steps, STEPS);
    assert_int_equal(r->max_steps, STEPS);
    assert_string_equal(r->phase, "train");
    assert_int_equal(r->collective_ranks, 4);
    const sw_rank_stat *data = stat_of(r, "data");
    assert_int_equal(data->ranks, 4);
    assert_int_equal(data->max_rank, 1);
    assert_near_ms(data->max_ns, 41, 0.5);
    assert_near_ms(data->median_ns, 1, 0.5);
    assert_int_equal(data->calls, 4 * STEPS);
    const sw_rank_stat *coll = stat_of(r, "collective");
    assert_int_equal(coll->min_rank, 1);
    assert_int_equal(coll->max_rank, 0); /* the lowest of the ranks at the maximum */
    assert_near_ms(stat_of(r, "step")->median_ns, 52, 1.0);
    assert_near_ms(stat_of(r, "compute")->max_ns, 10, 1.0);
    assert_int_equal(r->nstragglers, 1);
    const sw_rank_straggler *s = &r->stragglers[0];
    assert_int_equal(s->rank, 1);
    assert_int_equal(s->local_rank, 1);
    assert_int_equal(s->blame, SW_BLAME_DATA);
    assert_near_ms(s->excess_ns, 40, 1.0);
    assert_near_ms(s->blame_ns, 40, 1.0);
    assert_null(s->part);
    assert_near_ms(s->data_ns, 41, 0.5);
    char host[256];
    gethostname(host, sizeof host);
    assert_string_equal(s->host, host);
    /* the others waited for it in the all-reduce: the one line says so */
    assert_int_equal(r->nops, 1);
    assert_string_equal(r->ops[0].name, "allreduce");
    assert_int_equal(r->ops[0].min_rank, 1);
    assert_near_ms(r->ops[0].median_ns, 41, 0.5);
    assert_int_equal(r->ops[0].bw_ranks, 0); /* no bytes recorded */
    assert_int_equal(r->wait_rank, 1);
    assert_string_equal(r->wait_op, "allreduce");
    assert_near_ms(r->wait_ns, 40, 1.0);
    assert_int_equal(r->waiting_ranks, 3);
    assert_int_equal(r->wait_blame, SW_BLAME_DATA);
    char line[256];
    sw_ranks_wait_sentence(r, line, sizeof line);
    assert_non_null(strstr(line, "rank 1 made the other 3 ranks wait 40"));
    assert_non_null(strstr(line, " per step in allreduce (its own blame: data)"));
    char *text = write_to_string(r, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Waiting: rank 1 made the other 3 ranks wait"));
    free(text);
    assert_int_equal(r->nrows, 4);
    assert_near_ms(r->rows[0].op_ns[0], 41, 0.5);
    assert_near_ms(r->rows[1].op_ns[0], 1, 0.5);
    assert_true(isnan(r->rows[1].tflops));
    assert_int_equal(r->tflops.ranks, 0);
    sw_ranks_free(r);
}

/* Two collective ops with their bytes (the counter "comm:<op>:bytes", a running total) and FLOPs per
 * step in the notes: the ops by time, the bandwidth of the slowest rank, TFLOP/s and MFU
 * per rank and the job's. Rank 1's all-gather takes 3x as long: its bandwidth is a third. */
static void test_ops_bandwidth_and_flops(void **state) {
    unsigned char *all = calloc(3, SW_RANK_PAYLOAD_SIZE);
    for (int r = 0; r < 3; r++) {
        SW_TEST_PROFILER(p, .rank = r, .world_size = 3);
        sw_id ag = sw_action(p, "collective:all_gather"), br = sw_action(p, "collective:broadcast");
        sw_id bytes = sw_counter_id(p, "comm:all_gather:bytes");
        sw_phase_begin(p, SW_PHASE_TRAIN);
        for (int i = 0; i < STEPS; i++) {
            uint64_t ag_ns = (r == 1 ? 3 : 1) * 4 * MS, br_ns = MS;
            uint64_t start = sw_now_ns() - ag_ns - br_ns;
            sw_step_begin_at(p, 8, start);
            sw_record(p, ag, start, start + ag_ns);
            sw_record(p, br, start + ag_ns, start + ag_ns + br_ns);
            sw_counter(p, bytes, 8e6 * (i + 1));      /* 8 MB a call, so far */
            sw_step_end_at(p, start + ag_ns + br_ns); /* not now: the TFLOP/s use it */
        }
        sw_phase_end(p, SW_PHASE_TRAIN);
        assert_int_equal(sw_set_note(p, "flops_per_step", "5e10"), 0);
        if (r != 2)
            assert_int_equal(sw_set_note(p, "peak_flops", "1e14"), 0);
        assert_int_equal(
            sw_rank_payload(p, 0, 0, all + (size_t)r * SW_RANK_PAYLOAD_SIZE, SW_RANK_PAYLOAD_SIZE),
            0);
        sw_profiler_free(p);
    }
    sw_ranks *r = NULL;
    assert_int_equal(sw_ranks_reduce(all, 3, &r), 0);
    free(all);
    assert_int_equal(r->nops, 2);
    const sw_rank_op *ag = &r->ops[0], *br = &r->ops[1];
    assert_string_equal(ag->name, "all_gather"); /* the most time first */
    assert_string_equal(br->name, "broadcast");
    assert_int_equal(ag->calls, 3 * STEPS);
    assert_int_equal(ag->max_rank, 1);
    assert_int_equal(ag->bw_ranks, 3);
    assert_int_equal(ag->min_bw_rank, 1);
    assert_true(fabs(ag->median_bw - 8e6 / 4e-3) / 2e9 < 0.01); /* 2 GB/s */
    assert_true(fabs(ag->min_bw - 8e6 / 12e-3) / 6.7e8 < 0.01); /* a third */
    assert_true(fabs(ag->bytes_per_step - 8e6) < 1);
    assert_int_equal(br->bw_ranks, 0);
    /* 5e10 FLOPs over a 5 ms step (13 ms on rank 1): 10 TFLOP/s, 3.85 on rank 1 */
    assert_int_equal(r->tflops.ranks, 3);
    assert_int_equal(r->tflops.min_rank, 1);
    assert_true(fabs(r->tflops.max - 10) < 0.3);
    assert_true(fabs(r->tflops.min - 5e10 / 13e-3 / 1e12) < 0.1);
    assert_true(
        fabs(r->tflops.total - (r->rows[0].tflops + r->rows[1].tflops + r->rows[2].tflops)) < 1e-9);
    assert_int_equal(r->mfu.ranks, 2); /* rank 2 has no peak */
    assert_true(fabs(r->mfu.max - 0.1) < 0.003);
    char *text = write_to_string(r, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Collectives by op"));
    assert_non_null(strstr(text, "all_gather"));
    assert_non_null(strstr(text, "MB/s (rank 1)"));
    assert_non_null(strstr(text, "FLOP/s per rank: 3.85 TFLOP/s (rank 1) to 10"));
    assert_non_null(strstr(text, "over 3 ranks; MFU "));
    free(text);
    char *json = write_to_string(r, SW_FORMAT_JSON);
    assert_non_null(strstr(json, "\"min_bw_rank\":1"));
    assert_non_null(strstr(json, "\"tflops\": {"));
    free(json);
    sw_ranks_free(r);
}

/* Three ranks, rank 2's forward is 30 ms longer: compute, and the part is forward. */
static void test_compute_straggler_names_the_part(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 31};
    parts slow = {.data = 1, .forward = 34, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[3] = {fast, fast, slow};
    sw_ranks *r = reduce_parts(3, t);
    assert_int_equal(r->nstragglers, 1);
    const sw_rank_straggler *s = &r->stragglers[0];
    assert_int_equal(s->rank, 2);
    assert_int_equal(s->blame, SW_BLAME_COMPUTE);
    assert_near_ms(s->blame_ns, 30, 1.0);
    assert_non_null(s->part);
    assert_string_equal(s->part, "forward");
    assert_near_ms(s->part_ns, 30, 1.0);
    assert_string_equal(sw_blame_name(s->blame), "compute");
    sw_ranks_free(r);
}

/* Ranks that do not wait for each other; rank 0's collectives take 20 ms longer and make
 * its steps longer: collectives. */
static void test_collective_straggler(void **state) {
    parts slow = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 21};
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[2] = {slow, fast};
    sw_ranks *r = reduce_parts(2, t);
    assert_int_equal(r->nstragglers, 1);
    assert_int_equal(r->stragglers[0].rank, 0);
    assert_int_equal(r->stragglers[0].blame, SW_BLAME_COLLECTIVE);
    assert_near_ms(r->stragglers[0].blame_ns, 20, 1.0);
    sw_ranks_free(r);
}

/* Without collective waits, lockstep ranks look alike: nobody is blamed, and the view says
 * why. Ranks within the threshold are no stragglers either. */
static void test_lockstep_without_collective_blames_nobody(void **state) {
    parts a = {.data = 41, .forward = 4, .backward = 4, .optimizer = 2};
    parts b = {.data = 1, .forward = 4, .backward = 44, .optimizer = 2};
    parts t[3] = {b, a, b};
    sw_ranks *r = reduce_parts(3, t);
    assert_int_equal(r->collective_ranks, 0);
    assert_int_equal(r->nstragglers, 0);
    char *text = write_to_string(r, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Collective waits were not measured"));
    assert_non_null(strstr(text, "No straggler"));
    free(text);
    sw_ranks_free(r);
}

/* A zeroed slot, a damaged payload and a payload in the wrong slot are ranks that did not
 * answer; the others are reduced. */
static void test_missing_ranks(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 21};
    parts slow = {.data = 21, .forward = 4, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[5] = {fast, fast, slow, fast, fast};
    unsigned char *all = payloads_of(5, t);
    memset(all + 1 * SW_RANK_PAYLOAD_SIZE, 0, SW_RANK_PAYLOAD_SIZE);   /* rank 1: none */
    all[3 * SW_RANK_PAYLOAD_SIZE + 4] = 99;                            /* rank 3: version */
    memcpy(all + 4 * SW_RANK_PAYLOAD_SIZE, all, SW_RANK_PAYLOAD_SIZE); /* rank 4: rank 0's */
    sw_ranks *r = NULL;
    assert_int_equal(sw_ranks_reduce(all, 5, &r), 0);
    assert_int_equal(r->answered, 2);
    assert_int_equal(r->nmissing, 3);
    assert_int_equal(r->missing[0], 1);
    assert_int_equal(r->missing[1], 3);
    assert_int_equal(r->missing[2], 4);
    assert_int_equal(r->nstragglers, 1);
    assert_int_equal(r->stragglers[0].rank, 2);
    char *text = write_to_string(r, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Across ranks: 2 of 5 answered"));
    assert_non_null(strstr(text, "Did not answer: ranks 1, 3, 4"));
    assert_non_null(strstr(text, "rank 2 ("));
    assert_non_null(strstr(text, "blame: data"));
    free(text);
    sw_ranks_free(r);
    /* nobody answered */
    memset(all, 0, 5 * SW_RANK_PAYLOAD_SIZE);
    assert_int_equal(sw_ranks_reduce(all, 5, &r), 0);
    assert_int_equal(r->answered, 0);
    assert_int_equal(r->nstragglers, 0);
    sw_ranks_free(r);
    free(all);
}

/* The byte layout: the header fields where docs/ranks.md puts them. */
static void test_payload_layout(void **state) {
    SW_TEST_PROFILER(p, .rank = 3, .world_size = 8, .local_rank = 1);
    record_steps(p, (parts){.data = 1, .forward = 2, .backward = 3, .optimizer = 1});
    unsigned char buf[SW_RANK_PAYLOAD_SIZE];
    assert_int_equal(sw_rank_payload(p, 0, 0, buf, sizeof buf - 1), SW_EINVAL);
    assert_int_equal(sw_rank_payload(NULL, 0, 0, buf, sizeof buf), SW_EINVAL);
    assert_int_equal(sw_rank_payload(p, 4, 4, buf, sizeof buf), SW_EINVAL);
    assert_int_equal(sw_rank_payload(p, 2, 4, buf, sizeof buf), 0);
    assert_int_equal(buf[8], 2); /* the transport's rank and world size */
    assert_int_equal(buf[12], 4);
    assert_int_equal(sw_rank_payload(p, 0, 0, buf, sizeof buf), 0);
    assert_memory_equal(buf, "swrk", 4);
    assert_int_equal(buf[4] | buf[5] << 8, 2); /* version */
    assert_int_equal(buf[6] | buf[7] << 8, 9); /* slots */
    assert_int_equal(buf[8], 3);               /* rank */
    assert_int_equal(buf[12], 8);              /* world size */
    assert_int_equal(buf[16], 1);              /* local rank */
    assert_int_equal(buf[20], 1);              /* flags: train phase */
    assert_int_equal(buf[24], STEPS);          /* steps */
    uint64_t data_count = 0;                   /* slot 1 (data), first field */
    for (int i = 0; i < 8; i++)
        data_count |= (uint64_t)buf[128 + 64 + i] << (8 * i);
    assert_int_equal(data_count, STEPS);
    sw_profiler_free(p);
}

/* A collective under a framework's own name, given the category collective: the rank's
 * collective time and an op of that name, so its compute leaves the wait out. */
static void test_collective_by_category(void **state) {
    parts t = {.data = 1, .forward = 4, .collective = 6, .collective_as = "[Strategy]reduce"};
    parts both[2] = {t, t};
    sw_ranks *r = reduce_parts(2, both);
    assert_int_equal(r->collective_ranks, 2);
    assert_near_ms(stat_of(r, "collective")->median_ns, 6, 0.5);
    assert_near_ms(stat_of(r, "compute")->median_ns, 4, 0.5);
    assert_int_equal(r->nops, 1);
    assert_string_equal(r->ops[0].name, "[Strategy]reduce");
    sw_ranks_free(r);
}

static void test_writers(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 21};
    parts slow = {.data = 21, .forward = 4, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[2] = {slow, fast};
    sw_ranks *r = reduce_parts(2, t);
    char *json = write_to_string(r, SW_FORMAT_JSON);
    assert_non_null(strstr(json, "\"world_size\": 2"));
    assert_non_null(strstr(json, "\"blame\":\"data\""));
    assert_non_null(strstr(json, "\"rank\":0"));
    char *md = write_to_string(r, SW_FORMAT_MARKDOWN);
    assert_non_null(strstr(md, "| action | min | median | max | calls |"));
    assert_non_null(strstr(md, "- rank 0 ("));
    char *text = write_to_string(r, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "12 steady training steps each"));
    assert_non_null(strstr(text, "Stragglers (worst first"));
    assert_int_equal(sw_ranks_write(r, SW_FORMAT_CSV, 0, stdout), SW_EFORMAT);
    assert_int_equal(sw_ranks_reduce(NULL, 2, &r), SW_EINVAL);
    free(json);
    free(md);
    free(text);
    sw_ranks_free(r);
    sw_ranks_free(NULL);
}

/* ---- run files ---- */

/* diagnose's text of a run file. */
static char *diagnosis_of(const char *path) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_TABLE, f), 0);
    fclose(f);
    sw_run_close(run);
    return text;
}

static char g_dir[64];

static int setup(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sw_ranks_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

/* The Chrome trace of the three ranks: one process per rank, threads by their names, and
 * rank 1's steps moved 5 s back onto rank 0's clock (they ran at the same time). */
static void check_chrome(sw_run *run) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_int_equal(sw_run_export_chrome(run, f), 0);
    fclose(f);
    assert_non_null(strstr(text, "rank 1 ("));
    assert_non_null(strstr(text, "\"name\":\"trainer one (thread 0)\""));
    assert_non_null(strstr(text, "\"name\":\"trainer (thread 0)\""));
    double first[3] = {-1, -1, -1}; /* each rank's first step, in us */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *ts = strstr(line, "\"ts\":"), *pid = strstr(line, "\"pid\":");
        if (!strstr(line, "\"ph\":\"X\"") || !ts || !pid)
            continue;
        int rank = atoi(pid + 6);
        if (rank >= 0 && rank < 3 && first[rank] < 0)
            first[rank] = atof(ts + 5);
    }
    free(text);
    /* recorded one after the other within a second, on clocks 5 s apart */
    assert_true(first[1] >= 0 && first[1] < 1e6);
    assert_true(first[0] > 4e6 && first[0] < 6e6);
    assert_true(first[2] > 4e6 && first[2] < 6e6);
}

/* Rank 0 stores a round; the file gives it back, and the view from it. Rank files merged
 * give the same view from their own aggregates. The clock offset lands in the metadata. */
static void test_run_file_rounds_and_merge(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 21};
    parts slow = {.data = 21, .forward = 4, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[3] = {fast, slow, fast};
    char paths[3][128];
    unsigned char *all = calloc(3, SW_RANK_PAYLOAD_SIZE);
    sw_profiler *rank0 = NULL;
    for (int r = 0; r < 3; r++) {
        snprintf(paths[r], sizeof paths[r], "%s/rank%d.db", g_dir, r);
        SW_TEST_PROFILER(p, .rank = r, .world_size = 3, .run_file = paths[r],
                         .no_signal_handlers = 1);
        assert_int_equal(sw_thread_name(p, r == 1 ? "trainer one" : "trainer"), 0);
        sw_test_spin(60 * MS); /* the first step, begun in the past, begins after the start */
        record_steps(p, t[r]);
        assert_int_equal(
            sw_rank_payload(p, 0, 0, all + (size_t)r * SW_RANK_PAYLOAD_SIZE, SW_RANK_PAYLOAD_SIZE),
            0);
        /* rank 1's clock runs 5 s ahead of rank 0's */
        assert_int_equal(sw_run_set_clock_offset(p, r == 1 ? 5000000000 : 0), 0);
        if (r == 0)
            rank0 = p;
        else
            sw_profiler_free(p);
    }
    assert_int_equal(sw_run_add_ranks(rank0, all, SW_RANK_PAYLOAD_SIZE, 3, 0), 0);
    assert_int_equal(sw_run_add_ranks(rank0, all, SW_RANK_PAYLOAD_SIZE, 3, 1), 0);
    assert_int_equal(sw_run_add_ranks(rank0, all, SW_RANK_PAYLOAD_SIZE, 0, 1), SW_EINVAL);
    sw_profiler_free(rank0);
    SW_TEST_PROFILER(no_file);
    assert_int_equal(sw_run_add_ranks(no_file, all, SW_RANK_PAYLOAD_SIZE, 3, 1), SW_ENOTFOUND);
    assert_int_equal(sw_run_set_clock_offset(no_file, 5), SW_ENOTFOUND);
    sw_profiler_free(no_file);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(paths[0], &run), 0);
    void *stored = NULL;
    int world = 0, final = 0;
    uint64_t step = 0;
    assert_int_equal(sw_run_stored_ranks(run, &stored, &world, &step, &final), 0);
    assert_int_equal(world, 3);
    assert_int_equal(final, 1);
    assert_int_equal(step, STEPS);
    assert_memory_equal(stored, all, 3 * SW_RANK_PAYLOAD_SIZE);
    free(stored);
    sw_ranks *view = NULL;
    assert_int_equal(sw_run_ranks(run, &view), 0);
    assert_int_equal(view->answered, 3);
    assert_int_equal(view->nstragglers, 1);
    assert_int_equal(view->stragglers[0].rank, 1);
    assert_int_equal(view->stragglers[0].blame, SW_BLAME_DATA);
    sw_ranks_free(view);
    sw_run_close(run);
    /* diagnose names the straggler from rank 0's file alone */
    char *text = diagnosis_of(paths[0]);
    assert_non_null(strstr(text, "Straggler: rank 1, waiting for data"));
    assert_non_null(strstr(text, "its data wait is 20.0 ms longer per step"));
    assert_null(strstr(text, "missing"));
    free(text);

    /* a rank file without a stored round has no view */
    assert_int_equal(sw_run_open(paths[1], &run), 0);
    assert_int_equal(sw_run_ranks(run, &view), SW_ENOTFOUND);
    assert_int_equal(sw_run_stored_ranks(run, &stored, &world, NULL, NULL), SW_ENOTFOUND);
    sw_run_close(run);

    /* ranks 1 and 2 merged: the view from their aggregates, rank 0 missing */
    char merged[160];
    snprintf(merged, sizeof merged, "%s/merged12.db", g_dir);
    const char *two[] = {paths[1], paths[2]};
    assert_int_equal(sw_run_merge(two, 2, merged), 0);
    assert_int_equal(sw_run_open(merged, &run), 0);
    assert_int_equal(sw_run_ranks(run, &view), 0);
    assert_int_equal(view->world_size, 3);
    assert_int_equal(view->answered, 2);
    assert_int_equal(view->nmissing, 1);
    assert_int_equal(view->missing[0], 0);
    assert_int_equal(view->stragglers[0].rank, 1);
    sw_ranks_free(view);
    sw_run_close(run);
    text = diagnosis_of(merged);
    assert_non_null(strstr(text, "1 of 3 ranks missing"));
    assert_non_null(strstr(text, "Rank 0 did not answer"));
    free(text);

    /* all three merged: from the aggregates (rank 0's stored round ties, the files win) */
    snprintf(merged, sizeof merged, "%s/merged.db", g_dir);
    const char *three[] = {paths[0], paths[1], paths[2]};
    assert_int_equal(sw_run_merge(three, 3, merged), 0);
    assert_int_equal(sw_run_open(merged, &run), 0);
    assert_int_equal(sw_run_ranks(run, &view), 0);
    assert_int_equal(view->answered, 3);
    assert_int_equal(view->stragglers[0].rank, 1);
    assert_near_ms(view->stragglers[0].blame_ns, 20, 1.0);
    sw_ranks_free(view);
    check_chrome(run);
    sw_run_close(run);
    free(all);
}

/* ---- the transport sink ---- */

/* A transport of one process playing rank 0 of three: ranks 1 and 2 are payloads made
 * beforehand (rank 2 never answers at the final round). */
typedef struct fake_transport {
    unsigned char others[3 * SW_RANK_PAYLOAD_SIZE];
    int calls, finals, released;
    double timeout_s;
} fake_transport;

static void fake_release(void *ctx) {
    ((fake_transport *)ctx)->released++;
}

static int fake_gather(void *ctx, const void *mine, void *all, size_t size, int final,
                       double timeout_s) {
    fake_transport *t = ctx;
    t->calls++;
    t->finals += final;
    t->timeout_s = timeout_s;
    memcpy(all, mine, size);
    memcpy((char *)all + size, t->others + size, size);
    if (!final)
        memcpy((char *)all + 2 * size, t->others + 2 * size, size);
    return 0;
}

static void test_attached_transport_aggregates_at_free(void **state) {
    parts fast = {.data = 1, .forward = 4, .backward = 4, .optimizer = 2, .collective = 21};
    parts slow = {.data = 1, .forward = 24, .backward = 4, .optimizer = 2, .collective = 1};
    parts t[3] = {fast, slow, fast};
    unsigned char *made = payloads_of(3, t);
    fake_transport tr = {0};
    memcpy(tr.others, made, sizeof tr.others);
    free(made);
    char path[128], out_path[128];
    snprintf(path, sizeof path, "%s/attached.db", g_dir);
    snprintf(out_path, sizeof out_path, "%s/view.txt", g_dir);
    FILE *out = fopen(out_path, "w");
    SW_TEST_PROFILER(p, .rank = 0, .world_size = 3, .run_file = path, .no_signal_handlers = 1);
    record_steps(p, fast);
    sw_ranks_options o = {.size = sizeof(sw_ranks_options),
                          .gather = fake_gather,
                          .ctx = &tr,
                          .out = out,
                          .release = fake_release};
    assert_int_equal(sw_ranks_aggregate(p, 0, NULL), SW_ENOTFOUND);
    assert_int_equal(sw_ranks_attach(p, &o), 0);
    assert_int_equal(sw_ranks_attach(p, &o), SW_ESTATE);
    sw_ranks *view = NULL;
    assert_int_equal(sw_ranks_aggregate(p, 0, &view), 0);
    assert_int_equal(tr.calls, 1);
    assert_int_equal(view->answered, 3);
    assert_int_equal(view->stragglers[0].rank, 1);
    assert_string_equal(view->stragglers[0].part, "forward");
    sw_ranks_free(view);
    assert_int_equal(sw_ranks_aggregate(p, 1, &view), 0); /* the final round: printed */
    assert_int_equal(view->answered, 2);
    sw_ranks_free(view);
    assert_int_equal(sw_ranks_aggregate(p, 1, &view), 0); /* it runs once */
    assert_null(view);
    assert_int_equal(tr.finals, 1);
    assert_int_equal(tr.released, 0);
    sw_profiler_free(p); /* the final round ran already: the transport is released */
    fclose(out);
    assert_int_equal(tr.calls, 2);
    assert_int_equal(tr.finals, 1);
    assert_int_equal(tr.released, 1);
    assert_true(tr.timeout_s == 30);
    FILE *f = fopen(out_path, "r");
    char text[4096] = {0};
    assert_true(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    assert_non_null(strstr(text, "Across ranks: 2 of 3 answered"));
    assert_non_null(strstr(text, "Did not answer: rank 2"));
    assert_non_null(strstr(text, "blame: compute"));
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    assert_int_equal(sw_run_ranks(run, &view), 0);
    assert_int_equal(view->answered, 2); /* the final round */
    sw_ranks_free(view);
    sw_run_close(run);
    /* bad options */
    SW_TEST_PROFILER(q, .rank = 0, .world_size = 2);
    assert_int_equal(sw_ranks_attach(q, &(sw_ranks_options)SW_RANKS_OPTIONS_INIT), SW_EINVAL);
    assert_int_equal(sw_ranks_attach(q, &(sw_ranks_options){.size = sizeof(sw_ranks_options),
                                                            .gather = fake_gather,
                                                            .format = SW_FORMAT_CSV}),
                     SW_EFORMAT);
    assert_int_equal(sw_ranks_attach(q, &(sw_ranks_options){.size = sizeof(sw_ranks_options),
                                                            .gather = fake_gather,
                                                            .rank = 2,
                                                            .world_size = 2}),
                     SW_EINVAL);
    sw_profiler_free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_straggler_in_lockstep),
        cmocka_unit_test(test_compute_straggler_names_the_part),
        cmocka_unit_test(test_ops_bandwidth_and_flops),
        cmocka_unit_test(test_collective_straggler),
        cmocka_unit_test(test_lockstep_without_collective_blames_nobody),
        cmocka_unit_test(test_missing_ranks),
        cmocka_unit_test(test_payload_layout),
        cmocka_unit_test(test_collective_by_category),
        cmocka_unit_test(test_writers),
        cmocka_unit_test(test_run_file_rounds_and_merge),
        cmocka_unit_test(test_attached_transport_aggregates_at_free),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
