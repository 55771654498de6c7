/* test_recorder.c — spans, nesting, self time, phases, steps, warm-up, misuse, off switch,
 * the step's split by category. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "test_helpers.h"

static sw_snapshot *take(sw_profiler *p) {
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_non_null(s);
    return s;
}

static void test_new_and_free(void **state) {
    (void)state;
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0);
    assert_non_null(p);
    sw_profiler_free(p);
    sw_profiler_free(NULL);
    assert_int_equal(sw_profiler_new(NULL, NULL), SW_EINVAL);
    assert_string_equal(sw_strerror(SW_EINVAL), "invalid argument");
    assert_string_equal(sw_err_name(SW_ECORRUPT), "CORRUPT");
    assert_string_equal(sw_strerror(0), "success");
    assert_string_equal(sw_strerror(-999), "unknown error");
}

static void test_intern(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id a = sw_action(p, "forward");
    assert_int_not_equal(a, SW_ID_NONE);
    assert_int_equal(sw_action(p, "forward"), a);
    assert_int_not_equal(sw_action(p, "backward"), a);
    assert_string_equal(sw_action_name(p, a), "forward");
    assert_null(sw_action_name(p, 99999));
    assert_int_equal(sw_action(p, NULL), SW_ID_NONE);
    assert_int_equal(sw_action(NULL, "x"), SW_ID_NONE);
    assert_int_equal(sw_phase_id(p, "train"), SW_PHASE_TRAIN);
    assert_int_equal(sw_phase_id(p, "fit"), SW_PHASE_FIT);
    sw_phase custom = sw_phase_id(p, "test");
    assert_true(custom >= SW_PHASE_FIRST_USER);
    assert_string_equal(sw_phase_name(p, custom), "test");
    assert_int_equal(sw_category_of("forward"), SW_CAT_FORWARD);
    assert_int_equal(sw_category_of("callback:ckpt"), SW_CAT_CALLBACK);
    assert_int_equal(sw_category_of("zero_grad"), SW_CAT_ZERO_GRAD);
    assert_int_equal(sw_category_of("h2d_copy"), SW_CAT_DATA);
    assert_int_equal(sw_category_of("model_forward"), SW_CAT_OTHER);
    assert_string_equal(sw_category_name(SW_CAT_OPTIMIZER), "optimizer");
    /* a collective by its name, its wait too; other stays the last category */
    assert_int_equal(sw_category_of("collective:all_reduce:wait"), SW_CAT_COLLECTIVE);
    assert_int_equal(sw_category_of("collective"), SW_CAT_COLLECTIVE);
    assert_int_equal(sw_category_of("collectives"), SW_CAT_OTHER);
    assert_string_equal(sw_category_name(SW_CAT_COLLECTIVE), "collective");
    assert_int_equal(SW_CAT_OTHER, SW_CAT_COUNT - 1);
    sw_profiler_free(p);
}

static void test_nesting_and_self_time(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id outer = sw_action(p, "outer"), inner = sw_action(p, "inner");
    for (int i = 0; i < 3; i++) {
        sw_begin(p, outer);
        sw_test_spin(200000);
        sw_begin(p, inner);
        sw_test_spin(300000);
        sw_end(p, inner);
        sw_end(p, outer);
    }
    sw_snapshot *s = take(p);
    const sw_row *o = sw_snapshot_find(s, "outer", "all");
    const sw_row *i = sw_snapshot_find(s, "inner", "all");
    assert_non_null(o);
    assert_non_null(i);
    assert_int_equal(o->stats.count, 3);
    assert_int_equal(i->stats.count, 3);
    assert_true(o->stats.total_ns >= i->stats.total_ns + 3 * 200000);
    /* Self time of outer is its total minus inner's total, exactly. */
    assert_int_equal(o->stats.self_ns, o->stats.total_ns - i->stats.total_ns);
    assert_int_equal(i->stats.self_ns, i->stats.total_ns);
    assert_true(i->stats.min_ns >= 300000);
    assert_true(i->stats.max_ns >= i->stats.min_ns);
    assert_int_equal(i->hist.count, 3);
    assert_int_equal(s->misuse.end_without_begin, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_phases_steps_and_samples(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .warmup_steps = 2);
    sw_id data = sw_action(p, "data"), fwd = sw_action(p, "forward");
    sw_phase_begin(p, SW_PHASE_FIT);
    for (int epoch = 0; epoch < 2; epoch++) {
        sw_phase_begin(p, SW_PHASE_EPOCH);
        sw_phase_begin(p, SW_PHASE_TRAIN);
        for (int i = 0; i < 5; i++) {
            sw_step_begin(p, 0);
            sw_begin(p, data);
            sw_test_spin(20000);
            sw_end(p, data);
            sw_step_set_batch_size(p, 16);
            assert_true(sw_step_index(p) >= 0);
            sw_begin(p, fwd);
            sw_test_spin(40000);
            sw_end(p, fwd);
            sw_step_end(p);
        }
        sw_phase_end(p, SW_PHASE_TRAIN);
        sw_phase_begin(p, SW_PHASE_VALID);
        for (int i = 0; i < 3; i++) {
            sw_step_begin(p, 8);
            sw_begin(p, fwd);
            sw_end(p, fwd);
            sw_step_end(p);
        }
        sw_phase_end(p, SW_PHASE_VALID);
        sw_phase_end(p, SW_PHASE_EPOCH);
    }
    sw_phase_end(p, SW_PHASE_FIT);
    assert_int_equal(sw_step_count(p), 16);
    assert_int_equal(sw_step_index(p), -1);

    sw_snapshot *s = take(p);
    /* Phases are actions recorded in the enclosing phase. */
    assert_non_null(sw_snapshot_find(s, "fit", "none"));
    assert_non_null(sw_snapshot_find(s, "epoch", "fit"));
    assert_non_null(sw_snapshot_find(s, "train", "epoch"));
    const sw_row *valid = sw_snapshot_find(s, "valid", "epoch");
    assert_non_null(valid);
    assert_int_equal(valid->stats.count, 2);
    /* Warm-up: the first 2 steps of each phase are kept apart. */
    const sw_row *train_steps = sw_snapshot_find(s, "step", "train");
    assert_non_null(train_steps);
    assert_int_equal(train_steps->stats.count, 8);
    assert_int_equal(train_steps->warmup.count, 2);
    assert_int_equal(train_steps->hist.count, 8);
    const sw_row *valid_steps = sw_snapshot_find(s, "step", "valid");
    assert_int_equal(valid_steps->stats.count, 4);
    assert_int_equal(valid_steps->warmup.count, 2);
    /* Samples: 16 per train step, 8 per valid step. */
    assert_int_equal(train_steps->stats.samples, 8 * 16);
    assert_int_equal(valid_steps->stats.samples, 4 * 8);
    const sw_row *train_fwd = sw_snapshot_find(s, "forward", "train");
    assert_int_equal(train_fwd->stats.samples, 8 * 16);
    assert_true(sw_stats_samples_per_s(&train_fwd->stats) > 0);
    /* The data spans ended before the batch size was known: no samples. */
    assert_int_equal(sw_snapshot_find(s, "data", "train")->stats.samples, 0);
    /* The train phase span saw its 5 steps of 16. */
    assert_int_equal(sw_snapshot_find(s, "train", "epoch")->stats.samples, 2 * 5 * 16);
    /* Min/max remember their step. */
    assert_true(train_steps->stats.min_step >= 0 && train_steps->stats.min_step < 16);
    /* Percentages are of the fit total. */
    const sw_row *fit = sw_snapshot_find(s, "fit", "all");
    assert_int_equal(s->wall_ns, fit->stats.total_ns);
    assert_int_equal(s->steps, 16);
    assert_int_equal(s->misuse.phase_mismatch + s->misuse.step_overlap, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* A step begun after its batch arrived, at the time the fetch started: the step covers the
 * data wait recorded into it, and a fetch that found no batch opened no step. */
static void test_step_begin_at(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id data = sw_action(p, "data");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    uint64_t first_fetch = sw_now_ns();
    for (int i = 0; i < 4; i++) {
        uint64_t fetch = sw_now_ns();
        sw_test_spin(200000);
        uint64_t arrived = sw_now_ns();
        if (i == 3)
            break; /* the epoch's last fetch: no batch, no step */
        sw_step_begin_at(p, 32, fetch);
        sw_record(p, data, fetch, arrived);
        sw_test_spin(100000);
        sw_step_end(p);
    }
    uint64_t before = sw_now_ns();
    sw_step_begin_at(p, 1, sw_now_ns() + 1000000000u); /* a start to come is taken as now */
    sw_step_end(p);
    uint64_t ended = sw_now_ns();
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_snapshot *s = take(p);
    const sw_row *steps = sw_snapshot_find(s, "step", "train");
    const sw_row *waits = sw_snapshot_find(s, "data", "train");
    assert_non_null(steps);
    assert_non_null(waits);
    assert_int_equal(steps->stats.count, 4);
    assert_int_equal(waits->stats.count, 3);
    assert_int_equal(waits->stats.samples, 3 * 32);
    /* Each step holds its data wait: steps minus waits is the compute, at least 3 spins. */
    assert_true(steps->stats.total_ns >= waits->stats.total_ns);
    assert_true(steps->stats.self_ns + waits->stats.total_ns == steps->stats.total_ns);
    /* the last step from now, not from a second ahead (the test's clock bounds it: a
     * preempted thread makes it longer; taken from a second ahead, it would wrap) */
    assert_true(steps->stats.min_ns <= ended - before);
    assert_true(steps->stats.max_ns <= ended - first_fetch);
    assert_int_equal(s->misuse.step_overlap + s->misuse.bad_record, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* A step ended later, at the time its last event ended: the step stops there, and an end
 * before its start or still to come is clamped. Each step is held to the bounds the test's
 * own clock puts on it in this run (a preempted thread makes any step longer): the first
 * ends at `last`, before the spin that follows it, and one ended "to come" ends at the call. */
static void test_step_end_at(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id fwd = sw_action(p, "forward");
    sw_phase_begin(p, SW_PHASE_VALID);
    uint64_t before = sw_now_ns();
    sw_step_begin(p, 8);
    uint64_t begun = sw_now_ns();
    sw_begin(p, fwd);
    sw_test_spin(200000);
    sw_end(p, fwd);
    uint64_t last = sw_now_ns();
    sw_test_spin(2000000); /* after the step's last event: not the step's time */
    sw_step_end_at(p, last);
    sw_snapshot *s = take(p); /* the first step alone */
    const sw_row *steps = sw_snapshot_find(s, "step", "valid");
    assert_non_null(steps);
    assert_int_equal(steps->stats.count, 1);
    assert_true(steps->stats.max_ns >= 200000);
    assert_true(steps->stats.max_ns >= last - begun && steps->stats.max_ns <= last - before);
    sw_snapshot_free(s);
    uint64_t start = sw_now_ns();
    sw_step_begin_at(p, 8, start);
    sw_step_end_at(p, start - 1000); /* before the start: a step of no time */
    uint64_t third = sw_now_ns();
    sw_step_begin(p, 8);
    sw_step_end_at(p, sw_now_ns() + 1000000000u); /* to come: now */
    uint64_t ended = sw_now_ns();
    sw_phase_end(p, SW_PHASE_VALID);
    s = take(p);
    steps = sw_snapshot_find(s, "step", "valid");
    assert_non_null(steps);
    assert_int_equal(steps->stats.count, 3);
    assert_int_equal(steps->stats.min_ns, 0);
    /* the third step: at most from its begin to the call's return, not a second */
    uint64_t first = last - before, third_most = ended - third;
    assert_true(steps->stats.max_ns <= (first > third_most ? first : third_most));
    assert_true(steps->stats.total_ns <= first + third_most);
    assert_int_equal(s->misuse.step_overlap + s->misuse.mismatched_end, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* Notes: set, replaced, removed (order kept), limits, values cut at a character. */
static void test_notes(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    assert_int_equal(sw_set_note(p, "step_rule", "backward"), 0);
    assert_int_equal(sw_set_note(p, "not_separated.loss", "inside the forward"), 0);
    assert_int_equal(sw_set_note(p, "step_rule", "optimizer"), 0);
    assert_int_equal(sw_set_note(p, "gone", "soon"), 0);
    assert_int_equal(sw_set_note(p, "gone", NULL), 0);
    assert_int_equal(sw_set_note(p, "never", NULL), 0);
    assert_int_equal(sw_set_note(NULL, "k", "v"), SW_EINVAL);
    assert_int_equal(sw_set_note(p, NULL, "v"), SW_EINVAL);
    assert_int_equal(sw_set_note(p, "", "v"), SW_EINVAL);
    char key[SW_NOTE_KEY_MAX + 2];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    assert_int_equal(sw_set_note(p, key, "v"), SW_EINVAL);
    /* A long value of two-byte characters is cut at a character, within the limit. */
    char value[2 * SW_NOTE_VALUE_MAX];
    for (size_t i = 0; i + 1 < sizeof value; i += 2)
        memcpy(value + i, "\xc3\xa9", 2);
    value[sizeof value - 1] = '\0';
    assert_int_equal(sw_set_note(p, "long", value), 0);
    sw_snapshot *s = take(p);
    assert_int_equal(s->nnotes, 3);
    assert_string_equal(s->notes[0].key, "step_rule");
    assert_string_equal(s->notes[0].value, "optimizer");
    assert_string_equal(s->notes[1].key, "not_separated.loss");
    assert_string_equal(sw_snapshot_note(s, "not_separated.loss"), "inside the forward");
    assert_null(sw_snapshot_note(s, "gone"));
    assert_null(sw_snapshot_note(NULL, "step_rule"));
    size_t cut = strlen(sw_snapshot_note(s, "long"));
    assert_true(cut <= SW_NOTE_VALUE_MAX && cut % 2 == 0 && cut > SW_NOTE_VALUE_MAX - 2);
    sw_snapshot_free(s);
    for (int i = 3; i < SW_MAX_NOTES; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(sw_set_note(p, k, "v"), 0);
    }
    assert_int_equal(sw_set_note(p, "one_too_many", "v"), SW_ELIMIT);
    assert_int_equal(sw_set_note(p, "step_rule", "manual"), 0); /* replacing still works */
    sw_profiler_free(p);
}

static void test_misuse_is_counted_not_fatal(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .max_depth = 4);
    sw_id a = sw_action(p, "a"), b = sw_action(p, "b");
    sw_end(p, a); /* end without begin */
    sw_begin(p, a);
    sw_begin(p, b);
    sw_end(p, a);               /* closes b too: mismatched */
    sw_begin(p, SW_ID_NONE);    /* bad id */
    sw_end(p, 12345);           /* bad id */
    for (int i = 0; i < 6; i++) /* 2 beyond max_depth */
        sw_begin(p, a);
    for (int i = 0; i < 6; i++)
        sw_end(p, a);
    sw_step_end(p); /* no step open */
    sw_step_begin(p, 1);
    sw_step_begin(p, 1); /* step open: the first ends */
    sw_step_end(p);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_phase_end(p, SW_PHASE_VALID); /* not open */
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_record(p, a, 100, 50); /* end before start */
    sw_begin(p, b);           /* left open */
    sw_begin(NULL, a);
    sw_end(NULL, a);
    sw_step_begin(NULL, 1);
    sw_snapshot *s = take(p);
    assert_int_equal(s->misuse.end_without_begin, 1);
    assert_int_equal(s->misuse.mismatched_end, 1);
    assert_int_equal(s->misuse.bad_id, 2);
    assert_int_equal(s->misuse.depth_overflow, 2);
    assert_int_equal(s->misuse.step_overlap, 2);
    assert_int_equal(s->misuse.phase_mismatch, 1);
    assert_int_equal(s->misuse.bad_record, 1);
    assert_int_equal(s->misuse.open_at_snapshot, 1);
    /* The spans that did balance were recorded: 1 + 1 (a) + 4 nested a's. */
    assert_int_equal(sw_snapshot_find(s, "a", "all")->stats.count, 1 + 4);
    assert_int_equal(sw_snapshot_find(s, "b", "all")->stats.count, 1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_record_and_enabled(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id a = sw_action(p, "measured");
    sw_record(p, a, 1000, 5000);
    sw_record(p, a, 0, 2000);
    sw_set_enabled(p, 0);
    assert_int_equal(sw_enabled(p), 0);
    sw_begin(p, a);
    sw_end(p, a);
    sw_record(p, a, 0, 1);
    sw_set_enabled(p, 1);
    sw_snapshot *s = take(p);
    const sw_row *r = sw_snapshot_find(s, "measured", "none");
    assert_int_equal(r->stats.count, 2);
    assert_int_equal(r->stats.total_ns, 6000);
    assert_int_equal(r->stats.min_ns, 2000);
    assert_int_equal(r->stats.max_ns, 4000);
    assert_int_equal(s->misuse.end_without_begin, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_macros_cache_per_profiler(void **state) {
    (void)state;
    for (int round = 0; round < 2; round++) {
        SW_TEST_PROFILER(p, 0);
        sw_action(p, "padding"); /* ids differ between the two profilers */
        for (int i = 0; i < round + 2; i++) {
            SW_BEGIN(p, "macro");
            SW_END(p, "macro");
            SW_SCOPE(p, "scoped") {
                sw_test_spin(1000);
            }
        }
        sw_snapshot *s = take(p);
        assert_int_equal(sw_snapshot_find(s, "macro", "all")->stats.count, (uint64_t)round + 2);
        assert_int_equal(sw_snapshot_find(s, "scoped", "all")->stats.count, (uint64_t)round + 2);
        assert_int_equal(s->misuse.end_without_begin + s->misuse.bad_id, 0);
        sw_snapshot_free(s);
        sw_profiler_free(p);
    }
}

static void test_step_breakdown_counters(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id gpu = sw_counter_id(p, "gpu_util");
    assert_int_not_equal(gpu, SW_ID_NONE);
    assert_int_equal(sw_counter_id(p, "gpu_util"), gpu);
    sw_counter(p, gpu, 10.0);
    sw_counter(p, gpu, 30.0);
    sw_counter(p, 77, 1.0); /* bad id */
    sw_snapshot *s = take(p);
    assert_int_equal(s->ncounters, 1);
    assert_string_equal(s->counters[0].name, "gpu_util");
    assert_int_equal(s->counters[0].count, 2);
    assert_true(s->counters[0].mean == 20.0 && s->counters[0].min == 10.0 &&
                s->counters[0].max == 30.0 && s->counters[0].last == 30.0);
    assert_int_equal(s->misuse.bad_id, 1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* A framework's own names keep their names and get the category the front end gives. */
static void test_explicit_category(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id bwd = sw_action_with_category(p, "[Strategy]DDPStrategy.backward", SW_CAT_BACKWARD);
    assert_int_not_equal(bwd, SW_ID_NONE);
    assert_int_equal(sw_action_category(p, bwd), SW_CAT_BACKWARD);
    /* the same name and category again, or the plain lookup: the same id */
    assert_int_equal(sw_action_with_category(p, "[Strategy]DDPStrategy.backward", SW_CAT_BACKWARD),
                     bwd);
    assert_int_equal(sw_action(p, "[Strategy]DDPStrategy.backward"), bwd);
    /* a name has one category: another one is refused, the first one stays */
    assert_int_equal(sw_action_with_category(p, "[Strategy]DDPStrategy.backward", SW_CAT_FORWARD),
                     SW_ID_NONE);
    sw_id fwd = sw_action(p, "forward");
    assert_int_equal(sw_action_with_category(p, "forward", SW_CAT_OTHER), SW_ID_NONE);
    assert_int_equal(sw_action_with_category(p, "forward", SW_CAT_FORWARD), fwd);
    /* "other" is a category like the rest, and bad arguments are refused */
    sw_id hook = sw_action_with_category(p, "data_like_hook", SW_CAT_OTHER);
    assert_int_equal(sw_action_category(p, hook), SW_CAT_OTHER);
    assert_int_equal(sw_action_with_category(p, "x", SW_CAT_COUNT), SW_ID_NONE);
    assert_int_equal(sw_action_with_category(p, "x", (sw_category)-1), SW_ID_NONE);
    assert_int_equal(sw_action_with_category(p, NULL, SW_CAT_DATA), SW_ID_NONE);
    assert_int_equal(sw_action_with_category(NULL, "x", SW_CAT_DATA), SW_ID_NONE);
    assert_int_equal(sw_action_category(p, 99999), SW_CAT_OTHER);
    assert_int_equal(sw_action_category(NULL, 0), SW_CAT_OTHER);
    /* the snapshot's rows carry it */
    sw_begin(p, bwd);
    sw_end(p, bwd);
    sw_snapshot *s = take(p);
    const sw_row *r = sw_snapshot_find(s, "[Strategy]DDPStrategy.backward", "all");
    assert_non_null(r);
    assert_int_equal(r->category, SW_CAT_BACKWARD);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* sw_begin_at/sw_end_at record the times given, nested spans included. */
static void test_begin_end_at(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id outer = sw_action(p, "outer"), inner = sw_action(p, "inner");
    uint64_t t = sw_now_ns();
    sw_begin_at(p, outer, t);
    sw_begin_at(p, inner, t + 1000);
    sw_end_at(p, inner, t + 4000);
    sw_end_at(p, outer, t + 10000);
    sw_begin_at(p, inner, t + 20000);
    sw_end_at(p, inner, t + 19000); /* an end before its begin: a zero duration */
    sw_snapshot *s = take(p);
    const sw_row *o = sw_snapshot_find(s, "outer", "all"), *i = sw_snapshot_find(s, "inner", "all");
    /* outer: 10 us, 3 of them in inner; inner: 3 us and 0 */
    assert_true(o->stats.total_ns == 10000 && o->stats.self_ns == 7000);
    assert_true(i->stats.count == 2 && i->stats.total_ns == 3000 && i->stats.min_ns == 0);
    assert_int_equal(s->misuse.end_without_begin + s->misuse.mismatched_end, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* A run file's step record, kept (the test records one step). */
static int keep_step(void *ctx, int rank, const sw_step_record *r) {
    (void)rank;
    *(sw_step_record *)ctx = *r;
    return 0;
}

/* The step's split by category, read back from the run file: a collective inside backward
 * takes its own time out of backward's into collective; the hook's "collective:allreduce"
 * recorded after the fact (sw_record) inside backward's span too; an "other" span inside
 * backward stays backward's; the rest of the step is other. */
static void test_category_split_collective(void **state) {
    (void)state;
    assert_int_equal(sw_test_make_dir(NULL), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/split.sqlite", sw_test_dir);
    SW_TEST_PROFILER(p, .run_file = path, .no_signal_handlers = 1);
    sw_id fwd = sw_action(p, "forward"), bwd = sw_action(p, "backward");
    sw_id ar = sw_action(p, "collective:all_reduce"), hook = sw_action(p, "collective:allreduce");
    sw_id misc = sw_action(p, "bucket_copy");
    assert_int_equal(sw_action_category(p, ar), SW_CAT_COLLECTIVE);
    assert_int_equal(sw_action_category(p, hook), SW_CAT_COLLECTIVE);
    uint64_t t = sw_now_ns();
    sw_test_spin(200000); /* every time below is past: an end still to come would be now */
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_step_begin_at(p, 8, t);
    sw_begin_at(p, fwd, t + 1000);
    sw_end_at(p, fwd, t + 21000);   /* forward: 20 us */
    sw_begin_at(p, bwd, t + 21000); /* backward: 100 us in all */
    sw_begin_at(p, ar, t + 31000);  /* 30 us in an all-reduce */
    sw_end_at(p, ar, t + 61000);
    sw_begin_at(p, misc, t + 61000); /* 5 us of other: backward's */
    sw_end_at(p, misc, t + 66000);
    sw_record(p, hook, t + 70000, t + 80000); /* 10 us in the comm hook */
    sw_end_at(p, bwd, t + 121000);
    sw_step_end_at(p, t + 130000); /* 9 us after backward, 1 us before the forward */
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p);
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_step_record r;
    memset(&r, 0, sizeof r);
    assert_int_equal(sw_run_foreach_step(run, -1, keep_step, &r), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    const sw_row *row = sw_snapshot_find(s, "collective:all_reduce", "all");
    assert_non_null(row);
    assert_int_equal(row->category, SW_CAT_COLLECTIVE);
    sw_snapshot_free(s);
    sw_run_close(run);
    assert_int_equal(sw_test_remove_dir(NULL), 0);
    assert_int_equal(r.duration_ns, 130000);
    assert_int_equal(r.category_ns[SW_CAT_FORWARD], 20000);
    assert_int_equal(r.category_ns[SW_CAT_COLLECTIVE], 40000);
    assert_int_equal(r.category_ns[SW_CAT_BACKWARD], 60000);
    assert_int_equal(r.category_ns[SW_CAT_OTHER], 10000);
    uint64_t sum = 0;
    for (int c = 0; c < SW_CAT_COUNT; c++)
        sum += r.category_ns[c];
    assert_int_equal(sum, r.duration_ns);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_and_free),
        cmocka_unit_test(test_intern),
        cmocka_unit_test(test_nesting_and_self_time),
        cmocka_unit_test(test_phases_steps_and_samples),
        cmocka_unit_test(test_step_begin_at),
        cmocka_unit_test(test_step_end_at),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_misuse_is_counted_not_fatal),
        cmocka_unit_test(test_record_and_enabled),
        cmocka_unit_test(test_macros_cache_per_profiler),
        cmocka_unit_test(test_step_breakdown_counters),
        cmocka_unit_test(test_explicit_category),
        cmocka_unit_test(test_begin_end_at),
        cmocka_unit_test(test_category_split_collective),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
