/* test_fault_drops.c — nothing recorded is lost silently (issue 29 item 7: under
 * `ulimit -v` a training exited 0 with an empty stderr, no step rows and dropped_events=100).
 * Every drop is said on stderr, from the flusher or the profiler's end (never the hot path),
 * and diagnose computes no timing finding over a run whose events were dropped. */
#include "fault_util.h"

#include <sys/resource.h>

static char g_path[300];

static void record(sw_profiler *p, int steps, int spans_per_step) {
    sw_id fwd = sw_action(p, "forward");
    for (int i = 0; i < steps; i++) {
        sw_step_begin(p, 1);
        for (int k = 0; k < spans_per_step; k++) {
            sw_begin(p, fwd);
            sw_end(p, fwd);
        }
        sw_step_end(p);
    }
}

/* A ring of 64 events and a flusher that runs once a second: most spans find it full. */
static void ring_full_child(void) {
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = g_path,
                    .timeline = 1,
                    .ring_capacity = 64,
                    .flush_interval_ms = 1000,
                    .no_signal_handlers = 1};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(3);
    record(p, 50, 100);
    fault_sleep_ms(1300); /* a flush sees the drops while the run goes on */
    record(p, 50, 100);
    sw_profiler_free(p);
}

/* The largest ring under a 300 MB address-space limit: no memory for it. */
static void no_memory_child(void) {
    struct rlimit lim = {300u << 20, 300u << 20};
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        _exit(4);
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = g_path,
                    .ring_capacity = SW_MAX_RING_CAPACITY,
                    .no_signal_handlers = 1};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(3);
    record(p, 100, 0);
    sw_profiler_free(p);
}

static void test_a_full_ring_is_said(void **state) {
    (void)state;
    fault_path(g_path, sizeof g_path, "full-ring.db");
    static char err[8192];
    assert_int_equal(sw_test_in_child(ring_full_child, err, sizeof err), 0);
    /* Said while the run went on, once, and the total at the end: two lines, not one a drop. */
    assert_int_equal(fault_count_in(err, "events dropped so far (an event ring was full"), 1);
    assert_int_equal(fault_count_in(err, "events were dropped in all"), 1);
    assert_true(fault_count_in(err, "stepwatch:") <= 3);
    long long dropped = query_int(g_path, "SELECT dropped_events FROM ranks");
    assert_true(dropped > 0);
    char said[64];
    snprintf(said, sizeof said, "%lld events were dropped in all", dropped);
    if (strstr(err, said) == NULL)
        fail_msg("stderr \"%s\" does not say \"%s\"", err, said);
}

static void test_no_memory_is_said_and_diagnose_says_partial(void **state) {
    (void)state;
    if (FAULT_UNDER_ASAN)
        skip(); /* memory cannot run out under RLIMIT_AS there: the process cannot start */
    fault_path(g_path, sizeof g_path, "no-memory.db");
    static char err[8192];
    assert_int_equal(sw_test_in_child(no_memory_child, err, sizeof err), 0);
    if (strstr(err, "memory ran out for a thread's event ring") == NULL)
        fail_msg("stderr says \"%s\"", err);
    assert_true(query_int(g_path, "SELECT dropped_events FROM ranks") > 0);
    /* diagnose: the data is partial, and no finding is computed over what was dropped. */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(g_path, &run), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_diagnose_write(run, SW_FORMAT_JSON, out), 0);
    fclose(out);
    assert_non_null(strstr(text, "\"dropped-events\""));
    assert_non_null(strstr(text, "partial"));
    assert_null(strstr(text, "\"idle-between-steps\""));
    assert_null(strstr(text, "\"input-bound\""));
    assert_null(strstr(text, "\"tail-stalls\""));
    free(text);
    sw_run_close(run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_full_ring_is_said),
        cmocka_unit_test(test_no_memory_is_said_and_diagnose_says_partial),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
