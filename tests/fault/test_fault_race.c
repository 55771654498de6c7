/* test_fault_race.c — two processes given one explicit run-file path where an earlier run file
 * is (issue 29 item 2: both took it, the loser's steps were lost, and the file could hold one
 * process's header and the other's steps). Real processes, started at the same moment: one
 * gets the file, the other says so on stderr and records without one, its report whole. */
#include "fault_util.h"

enum { STEPS = 300, ROUNDS = 20 };

/* A child: wait for the start, profile STEPS steps on path, print its report, exit with 0
 * when it got the file, 1 when refused with SW_EBUSY, 2 for anything else. */
static void child(const char *path, int start_fd) {
    char go;
    if (read(start_fd, &go, 1) != 1)
        _exit(3);
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = path,
                    .no_signal_handlers = 1,
                    .flush_interval_ms = 5};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(3);
    sw_id fwd = sw_action(p, "forward");
    for (int i = 0; i < STEPS; i++) {
        sw_step_begin(p, 1);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_step_end(p);
        if (i % 50 == 0)
            fault_sleep_ms(2); /* a few flushes while the other one runs */
    }
    const char *written = NULL;
    int rc = sw_profiler_run_file(p, &written);
    sw_snapshot *s = NULL;
    if (sw_snapshot_take(p, &s) == 0)
        sw_snapshot_write(s, SW_FORMAT_CSV, stdout);
    fflush(stdout);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    _exit(rc == 0 ? 0 : rc == SW_EBUSY ? 1 : 2);
}

static void test_two_processes_one_path(void **state) {
    (void)state;
    char path[300], out[2][300], err[2][300];
    fault_path(path, sizeof path, "shared.db");
    for (int round = 0; round < ROUNDS; round++) {
        /* An earlier run file at the path, finished: both may replace it, one does. */
        {
            SW_TEST_PROFILER(p, .run_file = path, .no_signal_handlers = 1);
            sw_step_begin(p, 1);
            sw_step_end(p);
            sw_profiler_free(p);
        }
        int start[2];
        assert_int_equal(pipe(start), 0);
        pid_t pids[2];
        for (int c = 0; c < 2; c++) {
            char name[32];
            snprintf(name, sizeof name, "out-%d.txt", c);
            fault_path(out[c], sizeof out[c], name);
            snprintf(name, sizeof name, "err-%d.txt", c);
            fault_path(err[c], sizeof err[c], name);
            pids[c] = fork();
            assert_true(pids[c] >= 0);
            if (pids[c] == 0) {
                close(start[1]);
                freopen(out[c], "w", stdout);
                freopen(err[c], "w", stderr);
                child(path, start[0]);
            }
        }
        close(start[0]);
        assert_int_equal(write(start[1], "gg", 2), 2); /* both go at once */
        close(start[1]);
        int status[2] = {fault_wait(pids[0]), fault_wait(pids[1])};
        int winner = status[0] == 0 ? 0 : 1, loser = 1 - winner;
        if (status[winner] != 0 || status[loser] != 1)
            fail_msg("round %d: exit statuses %d and %d (want one 0, one 1)", round, status[0],
                     status[1]);
        /* The loser said so, naming the path, and still reported all its steps. */
        const char *said = fault_read_text(err[loser]);
        if (strstr(said, path) == NULL || strstr(said, "a running process writes") == NULL)
            fail_msg("round %d: the loser said \"%s\"", round, said);
        assert_non_null(strstr(fault_read_text(out[loser]), "forward"));
        assert_non_null(strstr(fault_read_text(out[winner]), "forward"));
        /* The file is the winner's alone: its header, all its steps, complete. */
        sw_run *run = NULL;
        assert_int_equal(sw_run_open(path, &run), 0);
        sw_snapshot *s = NULL;
        assert_int_equal(sw_run_snapshot(run, &s), 0);
        assert_int_equal(s->pid, pids[winner]);
        assert_int_equal(s->steps, STEPS);
        sw_snapshot_free(s);
        assert_int_equal(sw_run_incomplete(run, NULL, 0), 0);
        assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), STEPS);
        assert_int_equal(query_int(path, "SELECT count(DISTINCT pid) FROM ranks"), 1);
        sw_run_close(run);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes_one_path),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
