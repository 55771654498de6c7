/* test_fault_merge.c — merge (issue 29 item 6): every input is validated before anything is
 * written (one that opens but does not read is refused, naming it), the output appears whole
 * or not at all, an interrupted merge leaves no temporary file, and `-f json` of one file
 * prints. The command runs as a real process. */
#include "fault_util.h"

static char g_r0[300], g_r1[300];

static void make_rank(const char *path, int rank, int steps) {
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = path,
                    .rank = rank,
                    .world_size = 2,
                    .no_signal_handlers = 1,
                    .ring_capacity = 1 << 16};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    sw_id fwd = sw_action(p, "forward");
    for (int i = 0; i < steps; i++) {
        sw_step_begin(p, 1);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_step_end(p);
    }
    sw_profiler_free(p);
}

static int setup(void **state) {
    if (fault_make_dir(state) != 0)
        return -1;
    fault_path(g_r0, sizeof g_r0, "r0.db");
    fault_path(g_r1, sizeof g_r1, "r1.db");
    make_rank(g_r0, 0, 20);
    make_rank(g_r1, 1, 20);
    return 0;
}

/* Nothing beside the inputs but the files named. */
static void only_these_files(int expected) {
    int n = fault_dir_entries();
    if (n != expected) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "ls -la '%s' >&2", g_dir);
        assert_int_equal(system(cmd), 0);
        fail_msg("%d files in the directory, want %d", n, expected);
    }
}

static void test_one_file_json_prints(void **state) {
    (void)state;
    char out[300], err[300], text[300], args[1200];
    fault_path(out, sizeof out, "one.db");
    fault_path(err, sizeof err, "err.txt");
    fault_path(text, sizeof text, "out.txt");
    snprintf(args, sizeof args, "merge '%s' -o '%s' -f json >'%s'", g_r0, out, text);
    const char *build = getenv("SW_BUILD_DIR");
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "'%s/stepwatch' %s 2>'%s'", build ? build : ".", args, err);
    assert_int_equal(system(cmd), 0);
    assert_non_null(strstr(fault_read_text(text), "\"view\": null"));
    assert_non_null(strstr(fault_read_text(err), "merged 1 file into"));
    unlink(out);
    unlink(text);
    unlink(err);
}

static void test_two_ranks_merge_and_exit_0(void **state) {
    (void)state;
    char out[300], err[300], args[1000];
    fault_path(out, sizeof out, "both.db");
    fault_path(err, sizeof err, "err.txt");
    snprintf(args, sizeof args, "merge '%s' '%s' -o '%s'", g_r0, g_r1, out);
    assert_int_equal(fault_cli(args, err), 0);
    assert_int_equal(query_int(out, "SELECT count(*) FROM ranks"), 2);
    assert_int_equal(query_int(out, "SELECT count(*) FROM steps"), 40);
    unlink(out);
    unlink(err);
}

/* Inputs every reader refuses are refused first, naming the file: nothing is written. */
static void test_bad_inputs_write_nothing(void **state) {
    (void)state;
    char bad[300], out[300], err[300], args[1200];
    fault_path(bad, sizeof bad, "bad.db");
    fault_path(out, sizeof out, "merged.db");
    fault_path(err, sizeof err, "err.txt");
    /* Opens, but its aggregates do not read (a histogram blob stepwatch never writes). */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", g_r1, bad);
    assert_int_equal(system(cmd), 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(bad, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "UPDATE aggregates SET hist = x'ffffffffffffffffff'", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    int before = fault_dir_entries();
    const char *inputs[2] = {g_r0, bad};
    assert_int_equal(sw_run_merge(inputs, 2, out), SW_ECORRUPT);
    assert_non_null(strstr(sw_last_error(), bad));
    only_these_files(before);
    snprintf(args, sizeof args, "merge '%s' '%s' -o '%s'", g_r0, bad, out);
    assert_int_equal(fault_cli(args, err), 3);
    assert_non_null(strstr(fault_read_text(err), bad));
    assert_int_equal(access(out, F_OK), -1);
    /* The same rank twice: said with the file and the rank. */
    snprintf(args, sizeof args, "merge '%s' '%s' -o '%s'", g_r0, g_r0, out);
    assert_int_equal(fault_cli(args, err), 3);
    assert_non_null(strstr(fault_read_text(err), "holds rank 0, as an earlier input does"));
    assert_int_equal(access(out, F_OK), -1);
    unlink(err);
    only_these_files(before);
    unlink(bad);
}

/* SIGTERM while the merged file is being built: the temporary file and its -wal/-shm go. */
static void test_interrupted_merge_leaves_nothing(void **state) {
    (void)state;
    char big0[300], big1[300], out[300];
    fault_path(big0, sizeof big0, "big0.db");
    fault_path(big1, sizeof big1, "big1.db");
    fault_path(out, sizeof out, "merged.db");
    make_rank(big0, 0, 150000);
    make_rank(big1, 1, 150000);
    int before = fault_dir_entries();
    int caught = 0;
    for (int round = 0; round < 5 && !caught; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            const char *build = getenv("SW_BUILD_DIR");
            char exe[400];
            snprintf(exe, sizeof exe, "%s/stepwatch", build ? build : ".");
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            execl(exe, "stepwatch", "merge", big0, big1, "-o", out, (char *)NULL);
            _exit(127);
        }
        /* Wait until the temporary file is there, then interrupt. */
        for (int i = 0; i < 20000 && !caught; i++) {
            char cmd[400];
            snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q stepwatch-merge", g_dir);
            if (system(cmd) == 0) {
                kill(pid, SIGTERM);
                caught = 1;
            }
        }
        int status = fault_wait(pid);
        if (caught && status != 128 + SIGTERM)
            caught = 0; /* it finished just before the signal: try again */
        unlink(out);
    }
    if (!caught)
        skip(); /* the merge always finished before the poll saw it: nothing to check */
    only_these_files(before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_file_json_prints),
        cmocka_unit_test(test_two_ranks_merge_and_exit_0),
        cmocka_unit_test(test_bad_inputs_write_nothing),
        cmocka_unit_test(test_interrupted_merge_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, setup, fault_remove_dir);
}
