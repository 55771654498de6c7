/*
 * analysis_test_util.h — what the compare, diagnose and HTML tests share: hand-built
 * snapshot rows, capturing output in memory, and golden files.
 * Include after <cmocka.h>.
 */
#ifndef SW_ANALYSIS_TEST_UTIL_H
#define SW_ANALYSIS_TEST_UTIL_H

#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A deterministic pseudo-random number in [0, 1) (a 64-bit LCG; tests must be repeatable). */
static inline double at_rand(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* A row of action/phase with n calls of base_ns x (1 +- jitter), seeded. */
static inline sw_row at_row(const char *action, const char *phase, size_t n, double base_ns,
                            double jitter, uint64_t seed) {
    sw_row r;
    memset(&r, 0, sizeof r);
    r.action_name = action;
    r.phase_name = phase;
    r.phase = strcmp(phase, "all") == 0 ? SW_PHASE_ALL : SW_PHASE_TRAIN;
    r.category = sw_category_of(action);
    sw_stats_init(&r.stats);
    sw_stats_init(&r.warmup);
    for (size_t i = 0; i < n; i++) {
        uint64_t ns = (uint64_t)(base_ns * (1.0 + jitter * (2.0 * at_rand(&seed) - 1.0)));
        sw_stats_add(&r.stats, ns, ns, (int64_t)i, 32);
        sw_hist_add(&r.hist, ns);
    }
    return r;
}

/* A snapshot over rows (not copied: rows must outlive it). */
static inline sw_snapshot at_snapshot(const char *name, sw_row *rows, size_t nrows, uint64_t steps,
                                      uint64_t wall_ns) {
    sw_snapshot s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.host = "testhost";
    s.world_size = 1;
    s.rows = rows;
    s.nrows = nrows;
    s.steps = steps;
    s.wall_ns = wall_ns;
    s.elapsed_ns = wall_ns;
    return s;
}

/* Output captured in memory. */
typedef struct at_capture {
    char *text;
    size_t size;
    FILE *f;
} at_capture;

static inline void at_capture_begin(at_capture *c) {
    c->text = NULL;
    c->size = 0;
    c->f = open_memstream(&c->text, &c->size);
    assert_non_null(c->f);
}

static inline char *at_capture_end(at_capture *c) {
    assert_int_equal(fclose(c->f), 0);
    return c->text; /* caller frees */
}

static inline char *at_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&text, &size);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(f);
    fclose(m);
    return text;
}

/* Compare text with tests/golden/<name>; SW_UPDATE_GOLDEN=1 rewrites the file instead. */
static inline void at_golden(const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SW_TEST_GOLDEN_DIR, name);
    const char *update = getenv("SW_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
        return;
    }
    char *expected = at_read_file(path);
    if (!expected)
        fail_msg("missing golden file %s (run with SW_UPDATE_GOLDEN=1)", path);
    if (strcmp(expected, text) != 0) {
        fprintf(stderr, "--- expected %s\n%s\n--- got\n%s\n", path, expected, text);
        free(expected);
        fail_msg("output differs from %s", path);
    }
    free(expected);
}

/* ---- hand-built step records, seen through the library's sw__input view ---- */
#ifdef SW_ANALYSIS_INTERNAL_H

typedef struct at_run {
    sw_step_record *steps;
    int *ranks;
    size_t n, cap;
} at_run;

/* Append a step of rank whose categories take cat[k] ns each (duration = their sum). */
static inline void at_run_add(at_run *r, int rank, uint64_t step, uint64_t start_ns,
                              const uint64_t cat[SW_CAT_COUNT], int warmup) {
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->steps = realloc(r->steps, r->cap * sizeof *r->steps);
        r->ranks = realloc(r->ranks, r->cap * sizeof *r->ranks);
        assert_non_null(r->steps);
        assert_non_null(r->ranks);
    }
    sw_step_record *s = &r->steps[r->n];
    memset(s, 0, sizeof *s);
    s->step = step;
    s->phase = SW_PHASE_TRAIN;
    s->batch_size = 32;
    s->warmup = warmup;
    s->start_ns = start_ns;
    for (int k = 0; k < SW_CAT_COUNT; k++) {
        s->category_ns[k] = cat[k];
        s->duration_ns += cat[k];
    }
    r->ranks[r->n++] = rank;
}

static inline void at_run_free(at_run *r) {
    free(r->steps);
    free(r->ranks);
    memset(r, 0, sizeof *r);
}

static inline int at_run_foreach(void *src, sw_step_fn fn, void *ctx) {
    at_run *r = src;
    for (size_t i = 0; i < r->n; i++) {
        int rc = fn(ctx, r->ranks[i], &r->steps[i]);
        if (rc)
            return rc;
    }
    return 0;
}

static inline sw__input at_input(at_run *r, const sw_snapshot *snap, int nranks) {
    sw__input in;
    memset(&in, 0, sizeof in);
    in.snap = snap;
    in.nranks = nranks;
    in.src = r;
    in.foreach_step = at_run_foreach;
    return in;
}

#endif /* SW_ANALYSIS_INTERNAL_H */
#endif
