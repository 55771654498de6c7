/* test_fault_signals.c — the signals a cluster sends, as real signals to real processes
 * (issue 29 items 3 and 4): SIGTERM while the profiler is being freed (Profiler.close) left
 * the file incomplete; SIGHUP was not handled at all (a hangup lost the last steps, and
 * report found no actions). Now both leave a complete file with every step, and a handler
 * of the program's own still runs. */
#include "fault_util.h"

enum { STEPS = 300 };

static void record_steps(sw_profiler *p, int n) {
    sw_id fwd = sw_action(p, "forward");
    for (int i = 0; i < n; i++) {
        sw_step_begin(p, 1);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_step_end(p);
    }
}

static volatile sig_atomic_t g_own_handler_ran;
static long g_close_delay_us; /* varied by round: the signal lands before or inside the free */
static void own_handler(int signo) {
    (void)signo;
    g_own_handler_ran = 1;
}

/* Child: record, then tell the parent on `ready` and either free the profiler (closing: the
 * signal lands in the free) or wait for the signal. own: install a SIGHUP handler of the
 * program's own first (it exits 7 after the signal). */
static void child(const char *path, int ready, int closing, int own) {
    if (own)
        signal(SIGHUP, own_handler);
    /* A long flush interval: every step is still to be written when the signal comes. */
    sw_options o = {.size = sizeof(sw_options), .run_file = path, .flush_interval_ms = 60000};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(3);
    record_steps(p, STEPS);
    if (write(ready, "r", 1) != 1)
        _exit(3);
    if (closing) {
        fault_sleep_us(g_close_delay_us); /* the parent's kill is on its way */
        sw_profiler_free(p);
        fault_sleep_ms(2000); /* the signal, held during the free, ends us here */
        _exit(0);
    }
    for (int i = 0; i < 400 && !g_own_handler_ran; i++)
        fault_sleep_ms(10);
    _exit(g_own_handler_ran ? 7 : 0);
}

/* Start the child, send signo when it is ready; its exit status. g_died_ms: how long it
 * took to die after the signal. */
static double g_died_ms;

static int run_child(const char *path, int signo, int closing, int own) {
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        child(path, pipefd[1], closing, own);
    }
    close(pipefd[1]);
    char c;
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    close(pipefd[0]);
    uint64_t sent = sw_now_ns();
    kill(pid, signo);
    int status = fault_wait(pid);
    g_died_ms = (double)(sw_now_ns() - sent) / 1e6;
    return status;
}

static void expect_complete(const char *path, const char *reason) {
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), STEPS);
    if (reason != NULL) {
        char got[64];
        query_text(path, "SELECT end_reason FROM ranks", got, sizeof got);
        assert_string_equal(got, reason);
    }
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->steps, STEPS);
    assert_non_null(sw_snapshot_find(s, "forward", "all"));
    sw_snapshot_free(s);
    sw_run_close(run);
}

/* The signal handler's bound on waiting for the flushers (signals.c). */
#define SIGNAL_WAIT_MS 5000

static void test_sigterm_while_closing(void **state) {
    (void)state;
    int expired = 0;
    for (int round = 0; round < 20; round++) {
        char path[300], name[32];
        snprintf(name, sizeof name, "closing-%d.db", round);
        fault_path(path, sizeof path, name);
        g_close_delay_us = 100 + 150 * round;
        int status = run_child(path, SIGTERM, 1, 0);
        assert_int_equal(status, 128 + SIGTERM); /* it still dies of SIGTERM */
        /* Incomplete only when the machine held the final flush past the handler's bound
         * (the child's own time to die says so); else every step, complete. */
        if (query_int(path, "SELECT complete FROM ranks") == 0 && g_died_ms >= SIGNAL_WAIT_MS) {
            print_message("round %d: the final flush outlasted the %d ms bound (%.0f ms)\n", round,
                          SIGNAL_WAIT_MS, g_died_ms);
            expired++;
            continue;
        }
        expect_complete(path, NULL);
    }
    assert_true(expired < 10);
}

static void test_sighup_completes_the_file(void **state) {
    (void)state;
    char path[300];
    fault_path(path, sizeof path, "hangup.db");
    assert_int_equal(run_child(path, SIGHUP, 0, 0), 128 + SIGHUP);
    expect_complete(path, "SIGHUP");
}

static void test_sighup_keeps_the_programs_handler(void **state) {
    (void)state;
    char path[300];
    fault_path(path, sizeof path, "hangup-own.db");
    assert_int_equal(run_child(path, SIGHUP, 0, 1), 7);
    expect_complete(path, "SIGHUP");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_while_closing),
        cmocka_unit_test(test_sighup_completes_the_file),
        cmocka_unit_test(test_sighup_keeps_the_programs_handler),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
