/* test_fault_hostile.c — run files crafted to hurt their reader (docs/reliability.md, "Hostile
 * run files"): a table replaced by a recursive view, a view handing out a 450 MB blob, a
 * trigger, a table of someone else's. Every reader (sw_run_open and so report, export, html,
 * diagnose, compare; sw_run_merge; the commands as real processes under a memory and time
 * limit) refuses them before any query, naming the file and what is wrong; the guard's time
 * budget stops a query that works without end. */
#include "fault_util.h"
#include "runfile/run_guard.h"

/* A real run file: a profiler, a few steps of two actions. */
static void make_run(const char *path) {
    SW_TEST_PROFILER(p, .run_file = path);
    sw_id fwd = sw_action(p, "forward"), bwd = sw_action(p, "backward");
    for (int i = 0; i < 5; i++) {
        sw_step_begin(p, 8);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_begin(p, bwd);
        sw_end(p, bwd);
        sw_step_end(p);
    }
    sw_profiler_free(p);
}

/* path: a copy of the good run file with sql applied by plain SQLite (as an attacker would). */
static void craft(const char *good, const char *path, const char *sql) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", good, path);
    assert_int_equal(system(cmd), 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("crafting %s: %s", path, err);
    sqlite3_close(db);
}

static const struct {
    const char *name, *sql, *says;
} CRAFTS[] = {
    {"recursive-view.db",
     "DROP TABLE steps; CREATE VIEW steps AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT"
     " x + 1 FROM r) SELECT 0 AS rank, x AS step, 0 AS phase, 1 AS batch_size, 0 AS warmup, 0"
     " AS thread, x AS start_ns, 1 AS duration_ns, 0 AS data_ns, 0 AS forward_ns, 0 AS loss_ns,"
     " 0 AS backward_ns, 0 AS optimizer_ns, 0 AS zero_grad_ns, 0 AS callback_ns, 0 AS other_ns"
     " FROM r",
     "view steps"},
    {"huge-view.db",
     "DROP TABLE names; CREATE VIEW names AS SELECT 0 AS rank, 'action' AS kind, 0 AS id,"
     " zeroblob(450000000) AS name",
     "view names"},
    {"trigger.db", "CREATE TRIGGER t AFTER INSERT ON steps BEGIN DELETE FROM counters; END",
     "trigger t"},
    {"extra-table.db", "CREATE TABLE payload(x)", "table payload"},
    {"changed-view.db",
     "DROP VIEW actions; CREATE VIEW actions AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL"
     " SELECT x + 1 FROM r) SELECT 0 AS rank, x AS id, 'a' AS name FROM r",
     "view actions defined otherwise"},
    {"generated.db", "ALTER TABLE counters ADD COLUMN big AS (zeroblob(450000000))",
     "table counters defined otherwise"},
};
#define NCRAFTS (sizeof CRAFTS / sizeof *CRAFTS)

static char g_good[300];

static int setup(void **state) {
    if (fault_make_dir(state) != 0)
        return -1;
    fault_path(g_good, sizeof g_good, "good.db");
    make_run(g_good);
    return 0;
}

static void test_every_crafted_file_is_refused_at_open(void **state) {
    (void)state;
    for (size_t i = 0; i < NCRAFTS; i++) {
        char path[300];
        fault_path(path, sizeof path, CRAFTS[i].name);
        craft(g_good, path, CRAFTS[i].sql);
        sw_run *run = NULL;
        assert_int_equal(sw_run_open(path, &run), SW_ECORRUPT);
        assert_null(run);
        if (strstr(sw_last_error(), path) == NULL ||
            strstr(sw_last_error(), CRAFTS[i].says) == NULL)
            fail_msg("%s: \"%s\" does not name the file and \"%s\"", CRAFTS[i].name,
                     sw_last_error(), CRAFTS[i].says);
    }
    /* The good file itself opens and reads. */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(g_good, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->steps, 5);
    sw_snapshot_free(s);
    sw_run_close(run);
}

static void test_merge_refuses_crafted_inputs_and_writes_nothing(void **state) {
    (void)state;
    int before = fault_dir_entries();
    for (size_t i = 0; i < NCRAFTS; i++) {
        char path[300], out[300];
        fault_path(path, sizeof path, CRAFTS[i].name);
        fault_path(out, sizeof out, "merged.db");
        const char *inputs[1] = {path};
        assert_int_equal(sw_run_merge(inputs, 1, out), SW_ECORRUPT);
        assert_non_null(strstr(sw_last_error(), path));
        assert_int_equal(access(out, F_OK), -1);
    }
    assert_int_equal(fault_dir_entries(), before); /* no temporary file left behind */
}

/* Each command as a real process, limited to 1 GB of address space (not under ASan) and 60 s:
 * a refusal (exit status neither 0 nor the timeout's 124) that names the file. */
static void test_commands_refuse_crafted_files(void **state) {
    (void)state;
    static const char *const COMMANDS[] = {
        "report '%s'",
        "report '%s' -f csv",
        "export '%1$s' --steps-csv '%1$s.csv' --chrome '%1$s.json'",
        "html '%1$s' -o '%1$s.html'",
        "diagnose '%s'",
        "compare '%1$s' '%1$s'",
        "merge '%1$s' -o '%1$s.merged'"};
    const char *build = getenv("SW_BUILD_DIR");
    for (size_t i = 0; i < NCRAFTS; i++) {
        char path[300], err[300];
        fault_path(path, sizeof path, CRAFTS[i].name);
        fault_path(err, sizeof err, "stderr.txt");
        for (size_t c = 0; c < sizeof COMMANDS / sizeof *COMMANDS; c++) {
            char args[1200], cmd[2000];
            snprintf(args, sizeof args, COMMANDS[c], path);
            snprintf(cmd, sizeof cmd, "%s timeout 60 '%s/stepwatch' %s 2>'%s' >/dev/null",
                     FAULT_UNDER_ASAN ? "" : "ulimit -v 1000000;", build ? build : ".", args, err);
            int status = system(cmd);
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            if (code == 0 || code == 124 || code == -1)
                fail_msg("stepwatch %s: exit status %d", args, code);
            const char *said = fault_read_text(err);
            if (strstr(said, path) == NULL || strstr(said, CRAFTS[i].says) == NULL)
                fail_msg("stepwatch %s says \"%s\"", args, said);
        }
    }
}

/* Values no reader may trust: a function node numbered 2^62 (the reader once sized a map by
 * it, and the size wrapped to nothing). Refused as damaged; nothing is read out of bounds. */
static void test_function_node_numbers_are_not_trusted(void **state) {
    (void)state;
    char path[300];
    fault_path(path, sizeof path, "nodes.db");
    craft(g_good, path,
          "INSERT INTO functions VALUES(0, 0, 'f.c', 1, 'f');"
          "INSERT INTO function_nodes VALUES(0, 'forward', 0, 0, -1, 1, 10, 5, 0);"
          "INSERT INTO function_nodes VALUES(0, 'forward', 4611686018427387904, 0, 0, 1, 5, 5, 0)");
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_run_functions(run, -1, &fp), SW_ECORRUPT);
    assert_null(fp);
    sw_run_close(run);
}

static double elapsed_s(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The time budget itself: a guarded connection running a query with no end is interrupted
 * once it worked the budget without handing back a row. */
static void test_time_budget_stops_endless_work(void **state) {
    (void)state;
    setenv("STEPWATCH_READ_BUDGET_S", "0.3", 1);
    sqlite3 *db = NULL;
    sw__guard g;
    assert_int_equal(sw__guard_open(":memory:", SQLITE_OPEN_READWRITE, &db, &g), 0);
    unsetenv("STEPWATCH_READ_BUDGET_S");
    assert_true(g.budget_s > 0.29 && g.budget_s < 0.31);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = sqlite3_exec(db,
                          "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)"
                          " SELECT count(*) FROM r",
                          NULL, NULL, NULL);
    assert_int_equal(rc, SQLITE_INTERRUPT);
    assert_true(g.tripped);
    assert_true(elapsed_s(&t0) < 30); /* bounded: without the budget it never returns */
    /* Rows handed back reset the budget: a long query that keeps producing rows runs on. */
    g.tripped = 0;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1"
                                        " FROM r LIMIT 200000) SELECT x FROM r",
                                        -1, &q, NULL),
                     SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW)
        rows++;
    sqlite3_finalize(q);
    assert_int_equal(rows, 200000);
    assert_false(g.tripped);
    /* Defensive: the schema cannot be written by hand on this connection. */
    assert_int_not_equal(sqlite3_exec(db,
                                      "PRAGMA writable_schema = ON; CREATE TABLE t(x);"
                                      " UPDATE sqlite_master SET sql = 'x'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_crafted_file_is_refused_at_open),
        cmocka_unit_test(test_merge_refuses_crafted_inputs_and_writes_nothing),
        cmocka_unit_test(test_commands_refuse_crafted_files),
        cmocka_unit_test(test_function_node_numbers_are_not_trusted),
        cmocka_unit_test(test_time_budget_stops_endless_work),
    };
    return cmocka_run_group_tests(tests, setup, fault_remove_dir);
}
