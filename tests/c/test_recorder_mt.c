/* test_recorder_mt.c — many threads record at once while snapshots are taken; nothing is lost,
 * exiting threads keep their statistics. Runs under ThreadSanitizer too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>

#include "test_helpers.h"

#define THREADS 4
#define SPANS 20000

typedef struct worker {
    sw_profiler *p;
    sw_id outer, inner;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int i = 0; i < SPANS; i++) {
        sw_begin(w->p, w->outer);
        sw_begin(w->p, w->inner);
        sw_end(w->p, w->inner);
        sw_end(w->p, w->outer);
    }
    return NULL;
}

static void test_threads_record_concurrently(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    worker w = {p, sw_action(p, "outer"), sw_action(p, "inner")};
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, work, &w), 0);
    /* Snapshots taken while the threads run are consistent: inner never exceeds outer by
     * more than the spans open at that moment, and counts only grow. */
    uint64_t last = 0;
    for (int k = 0; k < 20; k++) {
        sw_snapshot *s = NULL;
        assert_int_equal(sw_snapshot_take(p, &s), 0);
        const sw_row *o = sw_snapshot_find(s, "outer", "all");
        if (o) {
            assert_true(o->stats.count >= last);
            assert_int_equal(o->hist.count, o->stats.count);
            last = o->stats.count;
        }
        sw_snapshot_free(s);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    /* The threads have exited: their statistics were folded in, none lost. */
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_snapshot_find(s, "outer", "all")->stats.count, THREADS * SPANS);
    assert_int_equal(sw_snapshot_find(s, "inner", "all")->stats.count, THREADS * SPANS);
    assert_int_equal(sw_snapshot_find(s, "inner", "all")->hist.count, THREADS * SPANS);
    assert_int_equal(s->misuse.end_without_begin + s->misuse.mismatched_end, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void *intern_many(void *arg) {
    sw_profiler *p = arg;
    char name[32];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "action%d", i);
        sw_id id = sw_action(p, name);
        sw_begin(p, id);
        sw_end(p, id);
    }
    return NULL;
}

static void test_threads_intern_concurrently(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, intern_many, p), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_snapshot_find(s, "action0", "all")->stats.count, THREADS);
    assert_int_equal(sw_snapshot_find(s, "action199", "all")->stats.count, THREADS);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_record_concurrently),
        cmocka_unit_test(test_threads_intern_concurrently),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
