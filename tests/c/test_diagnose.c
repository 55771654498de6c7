/*
 * test_diagnose.c — the diagnosis on hand-built step records (each check, its threshold,
 * its numbers) and golden files of the text, markdown and JSON output.
 * test_diagnose_run.c runs the same through real profilers and run files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "analysis/analysis_internal.h"
#include "analysis_test_util.h"

#define MS 1000000ull

/* A training run of n steps on one rank: data, forward, backward, optimizer (ms each, with
 * +-2 % jitter), gap_ns idle between steps. */
static void add_steps(at_run *r, int rank, size_t n, double data, double fwd, double bwd,
                      double opt, uint64_t gap_ns, uint64_t seed) {
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t cat[SW_CAT_COUNT] = {0};
        double j = 1.0 + 0.02 * (2 * at_rand(&seed) - 1);
        cat[SW_CAT_DATA] = (uint64_t)(data * j * MS);
        cat[SW_CAT_FORWARD] = (uint64_t)(fwd * j * MS);
        cat[SW_CAT_BACKWARD] = (uint64_t)(bwd * j * MS);
        cat[SW_CAT_OPTIMIZER] = (uint64_t)(opt * j * MS);
        cat[SW_CAT_OTHER] = MS / 10;
        at_run_add(r, rank, i, t, cat, 0);
        t += r->steps[r->n - 1].duration_ns + gap_ns;
    }
}

/* Make step i of r take extra_ns more in category cat. */
static void slow_step(at_run *r, size_t i, sw_category cat, uint64_t extra_ns) {
    r->steps[i].category_ns[cat] += extra_ns;
    r->steps[i].duration_ns += extra_ns;
}

/* Later steps start later: keep the records contiguous (no idle); returns the end. */
static uint64_t contiguous(at_run *r) {
    uint64_t t = 0;
    for (size_t i = 0; i < r->n; i++) {
        r->steps[i].start_ns = t;
        t += r->steps[i].duration_ns;
    }
    return t;
}

static sw__diagnosis *diagnose(at_run *r, const sw_snapshot *snap, int nranks) {
    static sw__diagnosis d;
    sw__input in = at_input(r, snap, nranks);
    assert_int_equal(sw__diagnose(&in, &d), 0);
    return &d;
}

static const sw__finding *find(const sw__diagnosis *d, const char *id) {
    for (size_t i = 0; i < d->nfindings; i++)
        if (strcmp(d->findings[i].id, id) == 0)
            return &d->findings[i];
    return NULL;
}

static double number(const sw__finding *f, const char *name) {
    for (size_t i = 0; i < f->nnumbers; i++)
        if (strcmp(f->numbers[i].name, name) == 0)
            return f->numbers[i].value;
    fail_msg("finding %s has no number %s", f->id, name);
    return 0;
}

static char *write(const sw_snapshot *snap, const sw__diagnosis *d, sw_format fmt) {
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw__diagnosis_write(snap, d, fmt, c.f), 0);
    return at_capture_end(&c);
}

static void test_clean_run(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 200, 0.3, 3, 6, 1, 0, 1);
    sw_snapshot snap = at_snapshot("clean", NULL, 0, 200, 2100 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    assert_int_equal(d->nfindings, 0);
    assert_int_equal(d->steps, 200);
    char *text = write(&snap, d, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "No problems found."));
    assert_null(strstr(text, "nput-bound"));
    at_golden("diagnose_clean.txt", text);
    free(text);
    at_run_free(&r);
}

static void test_input_bound(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 200, 6, 1.5, 2, 0.4, 0, 2); /* data: 6 of 10 ms */
    sw_snapshot snap = at_snapshot("slow-loader", NULL, 0, 200, 2000 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "input-bound");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_CRITICAL);
    double share = number(f, "data share");
    assert_true(share > 59.0 && share < 61.0);
    double wait = number(f, "data wait per step");
    assert_true(wait > 5.9e6 && wait < 6.1e6);
    assert_ptr_equal(&d->findings[0], f); /* most severe first */
    char *text = write(&snap, d, SW_FORMAT_TABLE);
    at_golden("diagnose_input_bound.txt", text);
    free(text);
    at_run_free(&r);

    /* Just below the threshold: 14 % data wait says nothing. */
    add_steps(&r, 0, 200, 1.4, 3, 5.5, 0, 0, 3);
    d = diagnose(&r, &snap, 1);
    assert_null(find(d, "input-bound"));
    at_run_free(&r);
}

/* Steps of 150 us where 10 of 100 take 830 us (the machine's hiccups): 5.5x the median, but
 * 0.68 ms over it, under the floor: no stall, and the tail is a note, never critical. The
 * same tail on 150 ms steps (830 ms) is critical. */
static void test_tail_floor_for_microsecond_steps(void **state) {
    (void)state;
    for (int scale = 0; scale < 2; scale++) {
        at_run r = {0};
        uint64_t t = 0, unit = scale ? 1000 * 1000 : 1000; /* us, or ms */
        for (size_t i = 0; i < 100; i++) {
            uint64_t cat[SW_CAT_COUNT] = {0};
            cat[SW_CAT_FORWARD] = (i % 10 == 9 ? 830 : 150) * unit;
            at_run_add(&r, 0, i, t, cat, 0);
            t += r.steps[r.n - 1].duration_ns;
        }
        sw_snapshot snap = at_snapshot("hiccups", NULL, 0, 100, t);
        sw__diagnosis *d = diagnose(&r, &snap, 1);
        const sw__finding *f = find(d, "tail-stalls");
        assert_non_null(f);
        if (scale == 0) {
            assert_int_equal(f->severity, SW__SEV_INFO);
            assert_int_equal((int)number(f, "stalled steps"), 0);
            assert_non_null(strstr(f->sentence, "hiccups"));
        } else {
            assert_int_equal(f->severity, SW__SEV_CRITICAL);
            assert_int_equal((int)number(f, "stalled steps"), 10);
        }
        at_run_free(&r);
    }
}

/* The DataLoader's start-up, timed as its own data action, is named as the cause. */
static void test_loader_startup_named(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 40, 0.5, 3, 6, 0.4, 0, 5);
    sw_row rows[] = {at_row("dataloader_startup", "all", 4, 60 * MS, 0.0, 1)};
    rows[0].category = SW_CAT_DATA;
    sw_snapshot snap = at_snapshot("startup", rows, 1, 40, 700 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "loader-startup");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_CRITICAL); /* 240 of 700 ms */
    assert_int_equal((int)number(f, "start-ups"), 4);
    assert_non_null(strstr(f->sentence, "persistent_workers=True"));
    rows[0] = at_row("dataloader_startup", "all", 1, 10 * MS, 0.0, 1);
    d = diagnose(&r, &snap, 1);
    assert_null(find(d, "loader-startup")); /* 1.4 %: nothing to say */
    at_run_free(&r);
}

/* A size class whose mean bus bandwidth is far below its best call's is named (the worst
 * one); a class near its best, or of too few calls, is not. */
static void test_slow_collective(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 40, 0.5, 3, 6, 0.4, 0, 5);
    sw_snapshot snap = at_snapshot("comm", NULL, 0, 40, 700 * MS);
    sw_counter_summary c[] = {
        {"comm:all_reduce:1MiB:algbw", 40, 1, 0.5, 12, 2},
        {"comm:all_reduce:1MiB:busbw", 40, 1, 0.5, 12, 2}, /* 1/6 of its best */
        {"comm:all_gather_single:64KiB:algbw", 40, 1, 1, 1.2, 1},
        {"comm:all_gather_single:64KiB:busbw", 40, 0.5, 0.5, 0.6, 0.5}, /* near its best */
        {"comm:broadcast:4KiB:algbw", 4, 0.01, 0.01, 1, 0.01},
        {"comm:broadcast:4KiB:busbw", 4, 0.01, 0.01, 1, 0.01}, /* too few calls */
    };
    snap.counters = c;
    snap.ncounters = sizeof c / sizeof *c;
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "slow-collective");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_WARNING);
    assert_non_null(strstr(f->title, "all_reduce of 1MiB"));
    assert_true(number(f, "share of best") > 16 && number(f, "share of best") < 17);
    assert_int_equal((int)number(f, "calls"), 40);
    c[1].mean = 5; /* 42 % of its best: fine */
    assert_null(find(diagnose(&r, &snap, 1), "slow-collective"));
    at_run_free(&r);
}

static void test_tail_stalls(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 1000, 0.5, 3, 6, 0.4, 0, 4);
    /* Every 50th step waits 40 ms more for data: 20 stalls. */
    for (size_t i = 0; i < r.n; i += 50)
        slow_step(&r, i, SW_CAT_DATA, 40 * MS);
    uint64_t t = contiguous(&r);
    sw_snapshot snap = at_snapshot("stalls", NULL, 0, 1000, t);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "tail-stalls");
    assert_non_null(f);
    assert_int_equal((int)number(f, "stalled steps"), 20);
    assert_true(number(f, "p99/p50") > 3.0);
    assert_non_null(strstr(f->sentence, "in those steps data took"));
    assert_null(find(d, "input-bound")); /* 1.3 ms of 11 ms on average */
    assert_null(find(d, "idle-between-steps"));
    at_run_free(&r);
}

/* torch.compile recompiling in a later step: 7.4 s in step 500's forward. Noted as compiled,
 * the step is named as compilation and kept out of the tail statistics, like warm-up. */
static void test_compiled_steps_kept_out(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 1000, 0.5, 3, 6, 0.4, 0, 6);
    slow_step(&r, 0, SW_CAT_FORWARD, 2000 * MS);   /* the first compilation */
    slow_step(&r, 500, SW_CAT_FORWARD, 7400 * MS); /* a recompilation */
    uint64_t t = contiguous(&r);
    sw_snapshot snap = at_snapshot("compile", NULL, 0, 1000, t);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *stall = find(d, "tail-stalls");
    assert_non_null(stall); /* without the note: the stall the issue saw */
    assert_int_equal(stall->severity, SW__SEV_CRITICAL);
    assert_null(find(d, "compilation"));

    sw_note note = {"compiled_steps", "500:7399000000,0:1998000000"};
    snap.notes = &note, snap.nnotes = 1;
    d = diagnose(&r, &snap, 1);
    assert_null(find(d, "tail-stalls"));
    assert_null(find(d, "warmup")); /* step 0's compilation is no warm-up outlier either */
    assert_int_equal((int)d->steps, 998);
    const sw__finding *f = find(d, "compilation");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_INFO);
    assert_int_equal((int)number(f, "compiled steps"), 2);
    assert_int_equal((int)number(f, "kept out"), 2);
    assert_true(number(f, "compile time") == 9397.0 * MS);
    assert_non_null(strstr(f->title, "compiled in 2 steps, for 9.40 s"));
    assert_non_null(strstr(f->sentence, "Steps 0, 500 spent"));
    assert_non_null(strstr(f->sentence, "recompilation"));

    /* A stall in another step is still one; a malformed note is read up to the fault. */
    slow_step(&r, 700, SW_CAT_DATA, 900 * MS);
    note.value = "500:7399000000,x";
    d = diagnose(&r, &snap, 1);
    stall = find(d, "tail-stalls");
    assert_non_null(stall);
    assert_int_equal((int)number(stall, "stalled steps"), 2); /* 0 and 700 */
    assert_int_equal((int)number(find(d, "compilation"), "compiled steps"), 1);
    at_run_free(&r);
}

static void test_warmup(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 100, 0.3, 3, 6, 1, 0, 5);
    for (size_t i = 0; i < 3; i++) {
        r.steps[i].category_ns[SW_CAT_FORWARD] += 200 * MS; /* compilation */
        r.steps[i].duration_ns += 200 * MS;
    }
    sw_snapshot snap = at_snapshot("warm", NULL, 0, 100, 2000 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "warmup");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_WARNING);
    assert_true(number(f, "ratio") > 15.0);
    /* The same steps flagged as warm-up: kept apart, reported as information. */
    for (size_t i = 0; i < 3; i++)
        r.steps[i].warmup = 1;
    snap.warmup_steps = 3;
    d = diagnose(&r, &snap, 1);
    f = find(d, "warmup");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_INFO);
    assert_int_equal((int)number(f, "warm-up steps"), 3);
    assert_int_equal(d->steps, 97);
    char *text = write(&snap, d, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "No problems found."));
    assert_non_null(strstr(text, "[info] Warm-up steps took"));
    free(text);
    at_run_free(&r);
}

static void test_idle(void **state) {
    (void)state;
    at_run r = {0};
    add_steps(&r, 0, 100, 0.3, 3, 6, 0.6, 3 * MS, 6); /* 10 ms steps, 3 ms gaps */
    sw_snapshot snap = at_snapshot("idle", NULL, 0, 100, 1300 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "idle-between-steps");
    assert_non_null(f);
    double share = number(f, "idle share");
    assert_true(share > 22.0 && share < 24.0); /* 3 / 13 */
    at_run_free(&r);
}

static void test_straggler(void **state) {
    (void)state;
    at_run r = {0};
    for (int rank = 0; rank < 4; rank++)
        add_steps(&r, rank, 100, 0.5, rank == 2 ? 6 : 3, 6, 0.5, 0, 10 + (uint64_t)rank);
    sw_snapshot snap = at_snapshot("ddp", NULL, 0, 400, 1000 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 4);
    const sw__finding *f = find(d, "straggler-rank");
    assert_non_null(f);
    assert_int_equal((int)number(f, "rank"), 2);
    assert_int_equal((int)number(f, "ranks"), 4);
    assert_true(number(f, "ratio") > 1.25 && number(f, "ratio") < 1.35);
    assert_non_null(strstr(f->sentence, "its forward time is"));
    assert_int_equal(d->nranks, 4);
    /* Equal ranks: no straggler. */
    at_run_free(&r);
    for (int rank = 0; rank < 4; rank++)
        add_steps(&r, rank, 100, 0.5, 3, 6, 0.5, 0, 10 + (uint64_t)rank);
    d = diagnose(&r, &snap, 4);
    assert_null(find(d, "straggler-rank"));
    at_run_free(&r);
    /* A rank slower by its time in collectives waited there: it is not what to blame. */
    for (int rank = 0; rank < 4; rank++)
        add_steps(&r, rank, 100, 0.5, 3, 6, 0.5, 0, 10 + (uint64_t)rank);
    for (size_t i = 0; i < r.n; i++)
        if (r.ranks[i] == 1)
            slow_step(&r, i, SW_CAT_COLLECTIVE, 3 * MS);
    contiguous(&r);
    d = diagnose(&r, &snap, 4);
    f = find(d, "straggler-rank");
    assert_non_null(f);
    assert_int_equal((int)number(f, "rank"), 1);
    assert_non_null(strstr(f->sentence, "its collective time is 3.0"));
    assert_non_null(strstr(f->sentence, "waited there for other ranks"));
    assert_null(strstr(f->sentence, "so look there first"));
    at_run_free(&r);
}

/* A run with everything wrong, for the golden files of every format. */
static void test_problems_golden(void **state) {
    (void)state;
    at_run r = {0};
    for (int rank = 0; rank < 2; rank++)
        add_steps(&r, rank, 100, 4, rank ? 4 : 2, 3, 0.5, 2 * MS, 20 + (uint64_t)rank);
    sw_row rows[] = {at_row("callback:log_metrics", "all", 100, 1.5 * MS, 0.0, 1),
                     at_row("callback:checkpoint", "all", 2, 10 * MS, 0.0, 2)};
    sw_snapshot snap = at_snapshot("everything \"wrong\" </script>", rows, 2, 200, 1500 * MS);
    snap.misuse.end_without_begin = 2;
    snap.misuse.mismatched_end = 1;
    sw__diagnosis *d = diagnose(&r, &snap, 2);
    const char *expect[] = {"input-bound", "callback-overhead", "idle-between-steps",
                            "straggler-rank", "misuse"};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        if (!find(d, expect[i]))
            fail_msg("no %s finding", expect[i]);
    const sw__finding *cb = find(d, "callback-overhead");
    assert_true(number(cb, "callback share") > 11.0 && number(cb, "callback share") < 11.5);
    assert_non_null(strstr(cb->sentence, "callback:log_metrics"));
    for (size_t i = 1; i < d->nfindings; i++)
        assert_true(d->findings[i - 1].severity >= d->findings[i].severity);
    const struct {
        sw_format fmt;
        const char *file;
    } cases[] = {{SW_FORMAT_TABLE, "diagnose_problems.txt"},
                 {SW_FORMAT_MARKDOWN, "diagnose_problems.md"},
                 {SW_FORMAT_JSON, "diagnose_problems.json"}};
    for (size_t i = 0; i < 3; i++) {
        char *text = write(&snap, d, cases[i].fmt);
        at_golden(cases[i].file, text);
        if (cases[i].fmt == SW_FORMAT_JSON)
            assert_null(strstr(text, "</script>"));
        free(text);
    }
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw__diagnosis_write(&snap, d, SW_FORMAT_CSV, c.f), SW_EFORMAT);
    free(at_capture_end(&c));
    at_run_free(&r);
}

/* Events dropped: the same run says its data is partial, and nothing computed over the steps
 * that were kept (issue 29 item 7). */
static void test_dropped_events_make_the_data_partial(void **state) {
    (void)state;
    at_run r = {0};
    for (int rank = 0; rank < 2; rank++)
        add_steps(&r, rank, 100, 4, rank ? 4 : 2, 3, 0.5, 2 * MS, 20 + (uint64_t)rank);
    sw_row rows[] = {at_row("callback:log_metrics", "all", 100, 1.5 * MS, 0.0, 1)};
    sw_snapshot snap = at_snapshot("dropped", rows, 1, 200, 1500 * MS);
    snap.misuse.end_without_begin = 2;
    snap.dropped_events = 1234;
    sw__diagnosis *d = diagnose(&r, &snap, 2);
    const sw__finding *f = find(d, "dropped-events");
    assert_non_null(f);
    assert_non_null(strstr(f->title, "the data is partial"));
    assert_non_null(find(d, "misuse")); /* what does not rest on the steps is still said */
    const char *absent[] = {"input-bound",    "callback-overhead", "idle-between-steps",
                            "straggler-rank", "tail-stalls",       "warmup"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        if (find(d, absent[i]))
            fail_msg("a %s finding over dropped steps", absent[i]);
    at_run_free(&r);
}

static void test_no_steps_and_bad_input(void **state) {
    (void)state;
    at_run r = {0};
    /* No step records: the aggregates still show the data wait. */
    sw_row rows[] = {at_row("data", "all", 50, 8 * MS, 0.0, 1),
                     at_row("step", "all", 50, 10 * MS, 0.0, 2)};
    sw_snapshot snap = at_snapshot("aggregates-only", rows, 2, 50, 500 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "input-bound");
    assert_non_null(f);
    assert_true(number(f, "data share") > 79.0 && number(f, "data share") < 81.0);
    /* A run without steps says so, never "No problems found". */
    sw_snapshot empty = at_snapshot("empty", NULL, 0, 0, 0);
    d = diagnose(&r, &empty, 1);
    assert_int_equal(d->nfindings, 1);
    assert_int_equal(d->findings[0].severity, SW__SEV_WARNING);
    assert_string_equal(d->findings[0].id, "no-steps");
    /* Negative ranks are counted as rank 0; absurd ranks are ignored, not allocated. */
    uint64_t cat[SW_CAT_COUNT] = {[SW_CAT_FORWARD] = MS};
    at_run_add(&r, 1 << 30, 0, 0, cat, 0);
    d = diagnose(&r, &empty, 1);
    assert_int_equal(d->steps, 0);
    at_run_free(&r);
    sw__input in = at_input(&r, &snap, 1);
    assert_int_equal(sw__diagnose(NULL, d), SW_EINVAL);
    assert_int_equal(sw__diagnose(&in, NULL), SW_EINVAL);
    in.foreach_step = NULL;
    assert_int_equal(sw__diagnose(&in, d), SW_EINVAL);
}

/* What could not be measured: no steps (with the front end's reason, or the calls it did
 * time), categories not timed apart (the notes), and the text never says "No problems
 * found" then. */
static void test_unseen(void **state) {
    (void)state;
    at_run r = {0};
    sw_row rows[] = {at_row("forward", "all", 7, 7 * MS, 0.0, 1)};
    sw_note why = {"no_steps", "no DataLoader batch, model call, backward or optimizer step ran"};
    sw_snapshot snap = at_snapshot("no-steps", rows, 1, 0, 100 * MS);
    sw__diagnosis *d = diagnose(&r, &snap, 1);
    const sw__finding *f = find(d, "no-steps");
    assert_non_null(f);
    assert_non_null(strstr(f->sentence, "though it timed"));
    assert_non_null(strstr(f->sentence, "stepwatch.step()"));
    assert_int_equal((int)number(f, "timed calls"), 7);
    snap.notes = &why, snap.nnotes = 1;
    d = diagnose(&r, &snap, 1);
    assert_non_null(strstr(find(d, "no-steps")->sentence, "no DataLoader batch, model call"));

    add_steps(&r, 0, 60, 0.3, 3, 6, 1, 0, 1);
    sw_note notes[] = {{"step_rule", "optimizer"},
                       {"not_separated.data", "no DataLoader: batches are in \"other\""},
                       {"not_separated.loss", "the loss is computed inside the forward"}};
    sw_snapshot clean = at_snapshot("nanogpt", NULL, 0, 60, 700 * MS);
    clean.notes = notes, clean.nnotes = 3;
    d = diagnose(&r, &clean, 1);
    assert_int_equal(d->nfindings, 2);
    assert_int_equal(d->findings[0].severity, SW__SEV_INFO);
    assert_string_equal(d->findings[1].id, "not-separated");
    assert_string_equal(d->findings[1].title, "loss could not be timed apart");
    char *text = write(&clean, d, SW_FORMAT_TABLE);
    assert_null(strstr(text, "No problems found"));
    assert_non_null(strstr(text, "not all of it could be"));
    assert_non_null(strstr(text, "steps by the rule: optimizer"));
    assert_non_null(strstr(text, "stepwatch.action(\"data\")"));
    free(text);
    text = write(&clean, d, SW_FORMAT_MARKDOWN);
    assert_null(strstr(text, "No problems found"));
    free(text);
    at_run_free(&r);
}

/* ---- memory drift ---- */

#define MIB 1048576.0

/* A clean run of n steps whose step i has memory bytes(i) (RSS, or the allocator's). */
typedef double (*memory_fn)(size_t i, uint64_t *seed);

static sw__diagnosis *diagnose_memory(size_t n, memory_fn bytes, int allocator) {
    static at_run r;
    at_run_free(&r);
    memset(&r, 0, sizeof r);
    add_steps(&r, 0, n, 0.3, 3, 6, 1, 0, 7);
    uint64_t seed = 11;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = (uint64_t)bytes(i, &seed);
        if (allocator) {
            r.steps[i].has_allocator = 1;
            r.steps[i].allocated_bytes = b;
            r.steps[i].peak_allocated_bytes = b + 64 * (uint64_t)MIB;
        }
        r.steps[i].rss_bytes = allocator ? 3000 * (uint64_t)MIB : b; /* a flat RSS beside */
    }
    static sw_snapshot snap;
    snap = at_snapshot("memory", NULL, 0, n, n * 10 * MS);
    return diagnose(&r, &snap, 1);
}

/* 2 GiB with +-1.5 % noise each step (the RSS read every 10 ms, malloc's arenas). */
static double flat_noise(size_t i, uint64_t *seed) {
    (void)i;
    return 2048 * MIB * (1.0 + 0.015 * (2 * at_rand(seed) - 1));
}
/* A warm-up ramp from 1 to 2 GiB over the first 15 % of the steps, then flat with noise. */
static double warmup_ramp(size_t i, uint64_t *seed) {
    double level = i < 300 ? 1024 * MIB + 1024 * MIB * (double)i / 300 : 2048 * MIB;
    return level * (1.0 + 0.01 * (2 * at_rand(seed) - 1));
}
/* A leak of 1 MiB a step (a 1 MiB tensor kept every step) on 2 GiB, with noise. */
static double steady_leak(size_t i, uint64_t *seed) {
    return 2048 * MIB + (double)i * MIB + 20 * MIB * (2 * at_rand(seed) - 1);
}
/* Flat until step 1000, then a leak of 0.5 MiB a step. */
static double late_leak(size_t i, uint64_t *seed) {
    return 2048 * MIB + (i > 1000 ? (double)(i - 1000) * 0.5 * MIB : 0) +
           10 * MIB * (2 * at_rand(seed) - 1);
}
/* One jump of 512 MiB at step 900 (a bigger batch, a new cached block), flat around it. */
static double single_jump(size_t i, uint64_t *seed) {
    return 2048 * MIB + (i >= 900 ? 512 * MIB : 0) + 10 * MIB * (2 * at_rand(seed) - 1);
}

static void test_memory_drift(void **state) {
    (void)state;
    enum { N = 2000 };
    /* Neither noise, nor warm-up, nor one jump is a leak. */
    memory_fn quiet[] = {flat_noise, warmup_ramp, single_jump};
    for (size_t k = 0; k < 3; k++)
        for (int allocator = 0; allocator < 2; allocator++)
            assert_null(find(diagnose_memory(N, quiet[k], allocator), "memory-drift"));

    /* A steady leak: found, with its slope per 1,000 steps and where it began. */
    sw__diagnosis *d = diagnose_memory(N, steady_leak, 0);
    const sw__finding *f = find(d, "memory-drift");
    assert_non_null(f);
    assert_int_equal(f->severity, SW__SEV_WARNING);
    double slope = number(f, "slope per 1,000 steps") / MIB;
    assert_true(slope > 950 && slope < 1050);
    assert_true(number(f, "rise began at step") < 50);
    assert_non_null(strstr(f->title, "RSS"));
    /* In the allocator's figures, which come first when the run has them. */
    d = diagnose_memory(N, steady_leak, 1);
    f = find(d, "memory-drift");
    assert_non_null(f);
    assert_non_null(strstr(f->title, "allocated memory"));

    /* A leak that starts halfway: the step where it began. */
    d = diagnose_memory(N, late_leak, 0);
    f = find(d, "memory-drift");
    assert_non_null(f);
    slope = number(f, "slope per 1,000 steps") / MIB;
    assert_true(slope > 450 && slope < 550);
    double began = number(f, "rise began at step");
    assert_true(began > 950 && began < 1100);
    char *text = write(&(sw_snapshot){.name = "memory"}, d, SW_FORMAT_TABLE);
    assert_non_null(strstr(text, "Memory drift"));
    assert_non_null(strstr(text, "MiB per 1,000 steps"));
    free(text);

    /* Too few steady steps to tell. */
    assert_null(find(diagnose_memory(40, steady_leak, 0), "memory-drift"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_run),
        cmocka_unit_test(test_input_bound),
        cmocka_unit_test(test_tail_stalls),
        cmocka_unit_test(test_tail_floor_for_microsecond_steps),
        cmocka_unit_test(test_loader_startup_named),
        cmocka_unit_test(test_slow_collective),
        cmocka_unit_test(test_compiled_steps_kept_out),
        cmocka_unit_test(test_warmup),
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_straggler),
        cmocka_unit_test(test_problems_golden),
        cmocka_unit_test(test_dropped_events_make_the_data_partial),
        cmocka_unit_test(test_no_steps_and_bad_input),
        cmocka_unit_test(test_unseen),
        cmocka_unit_test(test_memory_drift),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
