/*
 * test_fault_threads_mt.c — thread churn with a run file and the timeline on
 * (docs/reliability.md, "Threads"): thousands of short-lived threads, each recording a few
 * spans and a counter sample, then exiting. Memory must follow the threads alive, not every
 * thread there ever was; the report counts every thread that recorded; every span is in the
 * file or counted as dropped. SW_FAULT_THREADS sets the number of threads (2000 here;
 * `make fault-long` runs 8000).
 */
#include "fault_util.h"

#include <pthread.h>
#include <sys/resource.h>

#define SPANS_PER_THREAD 20

typedef struct worker {
    sw_profiler *p;
    sw_id action;
    sw_id counter;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int i = 0; i < SPANS_PER_THREAD; i++) {
        sw_begin(w->p, w->action);
        sw_end(w->p, w->action);
    }
    sw_counter(w->p, w->counter, 1.0);
    return NULL;
}

/* The most memory this process has held resident so far, in kB: a peak, so a transient
 * pile-up between flushes counts too. */
static long peak_rss_kb(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

static void test_thread_churn(void **state) {
    int nthreads = fault_count("SW_FAULT_THREADS", 2000);
    char path[300];
    fault_path(path, sizeof path, "churn.db");
    SW_TEST_PROFILER(p, .run_file = path, .timeline = 1, .flush_interval_ms = 10);
    worker w = {p, sw_action(p, "load"), sw_counter_id(p, "queue")};
    /* A first wave warms up what stays (the flusher's buffers, SQLite's cache). */
    long before = 0;
    for (int i = 0; i < nthreads; i++) {
        if (i == 200) {
            fault_sleep_ms(100);
            before = peak_rss_kb();
        }
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, work, &w), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
    }
    fault_sleep_ms(100); /* a few flushes: the exited threads' events are written */
    long after = peak_rss_kb();
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    uint64_t threads = s->threads;
    const sw_row *load = sw_snapshot_find(s, "load", "all");
    assert_non_null(load);
    assert_int_equal(load->stats.count, (uint64_t)nthreads * SPANS_PER_THREAD);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    long growth = after - before;
    fprintf(stderr,
            "[  INFO    ] %d threads: peak resident memory %ld kB -> %ld kB (%.1f kB "
            "per thread after the first 200)\n",
            nthreads, before, after, (double)growth / (nthreads - 200));
    /* Bounded: what stays (SQLite's 2 MB page cache, the WAL index, malloc's arenas) levels
     * off whatever the number of threads (peak 22 MB in all after 32,000 threads). With a
     * span buffer kept for every thread there ever was, it grew by 35 kB a thread: 70 MB for
     * 2000 threads. */
    assert_true(growth < 32 * 1024);
    assert_int_equal(threads, (uint64_t)nthreads);
    long long spans = query_int(path, "SELECT coalesce(sum(count), 0) FROM span_chunks");
    long long counters = query_int(path, "SELECT count(*) FROM counters");
    long long dropped = query_int(path, "SELECT dropped_events FROM ranks");
    assert_int_equal(spans + counters + dropped, (long long)nthreads * (SPANS_PER_THREAD + 1));
    assert_int_equal(query_int(path, "SELECT threads FROM ranks"), nthreads);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_thread_churn)};
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
