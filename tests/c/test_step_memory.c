/*
 * test_step_memory.c — memory per step: sw_step_memory's allocator figures and the RSS the
 * profiler reads itself, in the snapshot's summary, in the run file's step rows and back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stepwatch.h"
#include "test_helpers.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static sw_snapshot *take(sw_profiler *p) {
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    return s;
}

/* The allocator's figures of the last step, the largest peak and reservation; nothing from a
 * call outside a step; a peak never below what is allocated. */
static void test_allocator_summary(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, .step_memory = SW_STEP_MEMORY_OFF);
    sw_step_memory(p, 1, 2, 3); /* outside a step: ignored */
    sw_step_begin(p, 0);
    sw_step_memory(p, 100, 500, 1000);
    sw_step_end(p);
    sw_step_begin(p, 0);
    sw_step_memory(p, 300, 200, 800); /* a peak below allocated reads as allocated */
    sw_step_end(p);
    sw_step_begin(p, 0); /* a step without figures */
    sw_step_end(p);
    sw_snapshot *s = take(p);
    assert_int_equal(s->memory.allocator_steps, 2);
    assert_int_equal(s->memory.allocated_last, 300);
    assert_int_equal(s->memory.peak_allocated_max, 500);
    assert_int_equal(s->memory.reserved_max, 1000);
    assert_int_equal(s->memory.reserved_last, 800);
    assert_int_equal(s->memory.rss_steps, 0); /* SW_STEP_MEMORY_OFF: no RSS */
    sw_snapshot_free(s);
    sw_profiler_free(p);
    sw_options bad = {.size = sizeof(sw_options), .step_memory = (sw_step_memory_mode)7};
    assert_int_equal(sw_profiler_new(&bad, &p), SW_EINVAL);
}

/* By default every step has an RSS; memory the step touches shows in it (read at most every
 * SW_STEP_RSS_EVERY_MS: the steps here last longer). */
static void test_rss_follows_memory(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    enum { MB = 1 << 20, STEPS = 4 };
    char *blocks[STEPS];
    uint64_t first = 0;
    for (int i = 0; i < STEPS; i++) {
        sw_step_begin(p, 0);
        blocks[i] = malloc(16 * MB);
        assert_non_null(blocks[i]);
        memset(blocks[i], i + 1, 16 * MB); /* touched: resident */
        sleep_ms(SW_STEP_RSS_EVERY_MS + 2);
        sw_step_end(p);
        if (i == 0) {
            sw_snapshot *s = take(p);
            first = s->memory.rss_last;
            sw_snapshot_free(s);
        }
    }
    sw_snapshot *s = take(p);
    assert_int_equal(s->memory.rss_steps, STEPS);
    assert_true(first > 0);
    assert_true(s->memory.rss_last >= first + 3 * 15 * (uint64_t)MB);
    assert_int_equal(s->memory.rss_max, s->memory.rss_last);
    assert_int_equal(s->memory.allocator_steps, 0);
    sw_snapshot_free(s);
    for (int i = 0; i < STEPS; i++)
        free(blocks[i]);
    sw_profiler_free(p);
}

static int collect(void *ctx, int rank, const sw_step_record *step) {
    (void)rank;
    sw_step_record *into = ctx;
    into[step->step] = *step;
    return 0;
}

/* The run file keeps each step's memory (and that a step had no allocator figures) and the
 * summary; reading it back gives them again. */
static void test_run_file_round_trip(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/memory.sqlite", sw_test_dir);
    SW_TEST_PROFILER(p, .run_file = path);
    sw_step_begin(p, 0);
    sw_step_memory(p, 0, 4096, 1 << 21); /* 0 allocated is a reading, not "none" */
    sw_step_end(p);
    sw_step_begin(p, 0);
    sw_step_end(p);
    sw_step_begin(p, 0);
    sw_step_memory(p, 7000, 9000, 1 << 22);
    sw_step_end(p);
    sw_snapshot *live = take(p);
    sw_profiler_free(p);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_step_record steps[3];
    memset(steps, 0, sizeof steps);
    assert_int_equal(sw_run_foreach_step(run, -1, collect, steps), 0);
    assert_true(steps[0].has_allocator);
    assert_int_equal(steps[0].allocated_bytes, 0);
    assert_int_equal(steps[0].peak_allocated_bytes, 4096);
    assert_int_equal(steps[0].reserved_bytes, 1 << 21);
    assert_false(steps[1].has_allocator);
    assert_int_equal(steps[1].peak_allocated_bytes, 0);
    assert_int_equal(steps[2].allocated_bytes, 7000);
    for (int i = 0; i < 3; i++)
        assert_true(steps[i].rss_bytes > 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_memory_equal(&s->memory, &live->memory, sizeof s->memory);
    assert_int_equal(s->memory.allocator_steps, 2);
    assert_int_equal(s->memory.peak_allocated_max, 9000);
    sw_snapshot_free(s);
    sw_snapshot_free(live);
    sw_run_close(run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocator_summary),
        cmocka_unit_test(test_rss_follows_memory),
        cmocka_unit_test(test_run_file_round_trip),
    };
    return cmocka_run_group_tests(tests, sw_test_make_dir, sw_test_remove_dir);
}
