/*
 * test_run.c — the run file reader: round trip of a hand-built file, rank merge, exports,
 * and every kind of bad file (missing, foreign, truncated, corrupted, wrong version) giving
 * a clear error and never a crash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_run_fixture.h"

static char g_dir[256];
static char g_rank0[300], g_rank1[300];

static int setup(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sw_run_XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    snprintf(g_rank0, sizeof g_rank0, "%s/rank0.db", g_dir);
    snprintf(g_rank1, sizeof g_rank1, "%s/rank1.db", g_dir);
    return sw_test_write_fixture(g_rank0, 0) || sw_test_write_fixture(g_rank1, 1);
}

static int teardown(void **state) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in_dir(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_dir, name);
}

static void test_snapshot_round_trip(void **state) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(g_rank0, &run), 0);
    assert_int_equal(sw_run_rank_count(run), 1);
    assert_int_equal(sw_run_rank_id(run, 0), 0);
    assert_int_equal(sw_run_rank_id(run, 1), -1);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_string_equal(s->name, "fixture");
    assert_string_equal(s->host, "node-a");
    assert_int_equal(s->pid, 1000);
    assert_int_equal(s->world_size, 2);
    assert_int_equal(s->steps, 8);
    /* 5 per-phase rows then 5 roll-ups, in the order written */
    assert_int_equal(s->nrows, 10);
    assert_string_equal(s->rows[0].action_name, "data");
    assert_int_equal(s->rows[9].phase, SW_PHASE_ALL);
    const sw_row *data = sw_snapshot_find(s, "data", "train");
    assert_non_null(data);
    assert_int_equal(data->stats.count, 8);
    /* 2 ms + i * 10 us, i = 0..7 */
    assert_int_equal(data->stats.total_ns, 8 * 2000000 + 280000);
    assert_int_equal(data->stats.min_ns, 2000000);
    assert_int_equal(data->stats.max_step, 7);
    assert_int_equal(data->hist.count, 8);
    assert_int_equal(s->ncounters, 1);
    assert_string_equal(s->counters[0].name, "gpu \"util\" %");
    assert_true(s->counters[0].max == 90.0);
    sw_snapshot_free(s);
    assert_int_equal(sw_run_rank_snapshot(run, 7, &s), SW_ENOTFOUND);
    assert_null(s);
    sw_run_close(run);
}

typedef struct seen {
    int n;
    uint64_t last_start;
    int sorted;
    int ranks[2];
} seen;

static int on_span(void *ctx, int rank, const sw_span_record *span) {
    seen *s = ctx;
    s->sorted &= span->start_ns >= s->last_start;
    s->last_start = span->start_ns;
    s->ranks[rank & 1]++;
    s->n++;
    return 0;
}

static int stop_at_three(void *ctx, int rank, const sw_step_record *step) {
    return ++*(int *)ctx == 3 ? 77 : 0;
}

static int stop_span_at_three(void *ctx, int rank, const sw_span_record *span) {
    return ++*(int *)ctx == 3 ? 77 : 0;
}

static void test_merge_two_ranks(void **state) {
    char merged[300];
    path_in_dir(merged, sizeof merged, "merged.db");
    const char *inputs[] = {g_rank0, g_rank1};
    assert_int_equal(sw_run_merge(inputs, 2, merged), 0);
    assert_int_equal(sw_run_merge(inputs, 2, merged), SW_EEXISTS);
    const char *twice[] = {g_rank0, g_rank0};
    char dup[300];
    path_in_dir(dup, sizeof dup, "dup.db");
    assert_int_equal(sw_run_merge(twice, 2, dup), SW_EINVAL);
    assert_int_equal(access(dup, F_OK), -1);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(merged, &run), 0);
    assert_int_equal(sw_run_rank_count(run), 2);
    assert_int_equal(sw_run_rank_id(run, 1), 1);
    sw_snapshot *all = NULL, *one = NULL;
    assert_int_equal(sw_run_snapshot(run, &all), 0);
    assert_int_equal(sw_run_rank_snapshot(run, 1, &one), 0);
    assert_int_equal(all->rank, -1);
    assert_int_equal(all->steps, 16);
    assert_int_equal(all->misuse.end_without_begin, 1);
    const sw_row *data = sw_snapshot_find(all, "data", "train");
    const sw_row *data1 = sw_snapshot_find(one, "data", "train");
    assert_int_equal(data->stats.count, 16);
    assert_int_equal(data->stats.max_ns, data1->stats.max_ns); /* rank 1 is slower */
    assert_int_equal(data->hist.count, 16);
    const sw_row *rollup = sw_snapshot_find(all, "data", "all");
    assert_non_null(rollup);
    assert_int_equal(rollup->stats.count, 16);
    assert_int_equal(all->ncounters, 1);
    assert_int_equal(all->counters[0].count, 16);
    assert_int_equal(all->wall_ns, 2 * 200000000ull);

    seen sp = {.sorted = 1};
    assert_int_equal(sw_run_foreach_span(run, -1, on_span, &sp), 0);
    assert_int_equal(sp.n, 2 * 8 * 5);
    assert_true(sp.sorted);
    assert_int_equal(sp.ranks[0], 40);
    assert_int_equal(sp.ranks[1], 40);
    /* A walk stopped early leaves nothing behind: the next one (of one rank) is whole. */
    int spans_visited = 0;
    assert_int_equal(sw_run_foreach_span(run, 0, stop_span_at_three, &spans_visited), 77);
    assert_int_equal(spans_visited, 3);
    seen one_rank = {.sorted = 1};
    assert_int_equal(sw_run_foreach_span(run, 1, on_span, &one_rank), 0);
    assert_int_equal(one_rank.n, 40);
    assert_int_equal(one_rank.ranks[1], 40);
    assert_true(one_rank.sorted);
    int visited = 0;
    assert_int_equal(sw_run_foreach_step(run, 1, stop_at_three, &visited), 77);
    sw_snapshot_free(all);
    sw_snapshot_free(one);
    sw_run_close(run);
}

/* Read a whole file into memory (caller frees). */
static char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void test_exports(void **state) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(g_rank1, &run), 0);
    char path[300];
    path_in_dir(path, sizeof path, "trace.json");
    FILE *f = fopen(path, "w");
    assert_int_equal(sw_run_export_chrome(run, f), 0);
    fclose(f);
    size_t n;
    char *json = slurp(path, &n);
    assert_non_null(strstr(json, "\"traceEvents\""));
    assert_non_null(strstr(json, "\"ph\":\"X\""));
    assert_non_null(strstr(json, "\"ph\":\"C\""));
    assert_non_null(strstr(json, "\"process_name\""));
    assert_non_null(strstr(json, "\"thread_name\""));
    assert_non_null(strstr(json, "\"gpu \\\"util\\\" %\"")); /* escaped quotes */
    free(json);

    path_in_dir(path, sizeof path, "steps.csv");
    f = fopen(path, "w");
    assert_int_equal(sw_run_export_steps_csv(run, f), 0);
    fclose(f);
    char *csv = slurp(path, &n);
    assert_true(strncmp(csv, "epoch,iteration,processing_stats,dataflow_stats,", 48) == 0);
    int lines = 0;
    for (char *c = csv; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 1 + 8);
    /* first step of rank 1: data = 2 ms + 3 ms = 0.005 s */
    assert_non_null(strstr(csv, "\n1,1,"));
    assert_non_null(strstr(csv, ",0.005000000,1,0,train,32,0,"));
    free(csv);
    sw_run_close(run);
}

/* ---- bad files ---- */

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *data = slurp(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    free(data);
}

static int open_rc(const char *path) {
    sw_run *run = NULL;
    int rc = sw_run_open(path, &run);
    assert_true(rc == 0 ? run != NULL : run == NULL);
    sw_run_close(run);
    return rc;
}

static void test_missing_and_foreign(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "nope.db");
    assert_int_equal(open_rc(path), SW_ENOTFOUND);
    assert_int_equal(open_rc(g_dir), SW_EFOREIGN); /* a directory */

    path_in_dir(path, sizeof path, "text.db");
    FILE *f = fopen(path, "w");
    fputs("epoch,iteration\n1,1\n", f);
    fclose(f);
    assert_int_equal(open_rc(path), SW_EFOREIGN);

    path_in_dir(path, sizeof path, "other.sqlite");
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(open_rc(path), SW_EFOREIGN);
}

static void test_wrong_version(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "v99.db");
    copy_file(g_rank0, path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(open_rc(path), SW_EVERSION);
    /* The previous version (10: collective time in other_ns) is refused, both named. */
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 10", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(open_rc(path), SW_EVERSION);
    assert_non_null(strstr(sw_last_error(), "schema version 10; this stepwatch reads versions 11"));
}

/* Notes go through the run file and a merge; a file without notes merges with one that has
 * them. */
static void test_notes(void **state) {
    char live[300], old[300], merged[300];
    path_in_dir(live, sizeof live, "notes.db");
    path_in_dir(old, sizeof old, "no-notes.db");
    path_in_dir(merged, sizeof merged, "notes-merged.db");
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = live,
                    .rank = 1,
                    .world_size = 2,
                    .no_signal_handlers = 1};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    assert_int_equal(sw_set_note(p, "step_rule", "optimizer"), 0);
    assert_int_equal(sw_set_note(p, "not_separated.data", "no DataLoader"), 0);
    sw_profiler_free(p);
    sw_run *run = NULL;
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_open(live, &run), 0);
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->nnotes, 2);
    assert_string_equal(sw_snapshot_note(s, "step_rule"), "optimizer");
    assert_string_equal(sw_snapshot_note(s, "not_separated.data"), "no DataLoader");
    sw_snapshot_free(s);
    sw_run_close(run);

    copy_file(g_rank0, old);
    assert_int_equal(sw_run_open(old, &run), 0);
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->nnotes, 0);
    assert_int_equal(s->steps, 8);
    sw_snapshot_free(s);
    sw_run_close(run);

    const char *inputs[] = {old, live};
    assert_int_equal(sw_run_merge(inputs, 2, merged), 0);
    assert_int_equal(sw_run_open(merged, &run), 0);
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->nnotes, 2);
    assert_string_equal(sw_snapshot_note(s, "step_rule"), "optimizer");
    sw_snapshot_free(s);
    sw_run_close(run);
}

static void test_truncated(void **state) {
    size_t n;
    char *data = slurp(g_rank0, &n);
    const size_t cuts[] = {0, 10, 99, 100, 1024, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char path[300];
        path_in_dir(path, sizeof path, "cut.db");
        FILE *f = fopen(path, "wb");
        fwrite(data, 1, cuts[i], f);
        fclose(f);
        assert_int_equal(open_rc(path), SW_ECORRUPT);
        unlink(path);
    }
    free(data);
}

/* Everything the reader offers, on a file that opened: errors allowed, crashes not. */
static int any_step(void *ctx, int rank, const sw_step_record *s) {
    return 0;
}
static int any_span(void *ctx, int rank, const sw_span_record *s) {
    return 0;
}
static int any_counter(void *ctx, int rank, const sw_counter_record *s) {
    return 0;
}

static void read_everything(sw_run *run) {
    sw_snapshot *s = NULL;
    int rc = sw_run_snapshot(run, &s);
    assert_true(rc <= 0);
    sw_snapshot_free(s);
    assert_true(sw_run_foreach_step(run, -1, any_step, NULL) <= 0);
    assert_true(sw_run_foreach_span(run, -1, any_span, NULL) <= 0);
    assert_true(sw_run_foreach_counter(run, -1, any_counter, NULL) <= 0);
    FILE *devnull = fopen("/dev/null", "w");
    assert_true(sw_run_export_chrome(run, devnull) <= 0);
    assert_true(sw_run_export_steps_csv(run, devnull) <= 0);
    fclose(devnull);
}

/* Garbage over each page in turn (the SQLite header's page included). */
static void test_corrupted(void **state) {
    size_t n;
    char *data = slurp(g_rank0, &n);
    size_t page = 4096;
    int refused = 0, pages = 0;
    srand(1234);
    for (size_t off = 0; off + 64 <= n; off += page, pages++) {
        char path[300];
        path_in_dir(path, sizeof path, "garbage.db");
        char *copy = malloc(n);
        memcpy(copy, data, n);
        for (size_t k = 0; k < 512 && off + 100 + k < n; k++)
            copy[off + 100 + k] = (char)rand(); /* skip page 1's 100-byte file header */
        FILE *f = fopen(path, "wb");
        fwrite(copy, 1, n, f);
        fclose(f);
        free(copy);
        sw_run *run = NULL;
        int rc = sw_run_open(path, &run);
        if (rc == 0)
            read_everything(run);
        else
            refused++;
        assert_true(rc == 0 || rc == SW_ECORRUPT);
        sw_run_close(run);
        unlink(path);
    }
    assert_true(pages > 3);
    assert_true(refused > 0);
    free(data);
}

/* A writer killed just after it created (or replaced) its file: the file holds a run, its
 * metadata and no steps, marked incomplete; never "holds no run" (the metadata is in the
 * file from its first byte: run_create.c). The child stops where a SIGKILL could. */
static void test_killed_right_after_creation(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "created.db");
    assert_int_equal(sw_test_write_fixture(path, 0), 0); /* an earlier run, replaced below */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sw__run_meta m = {
            .rank = 0, .world_size = 1, .name = "just-made", .host = "h", .options_json = "{}"};
        sw__store *st = NULL;
        _exit(sw__store_create(path, &m, &st) == 0 ? 0 : 1); /* never closed: killed here */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    char why[600];
    assert_int_equal(sw_run_incomplete(run, why, sizeof why), 1);
    assert_non_null(strstr(why, "killed right after creating it"));
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_string_equal(s->name, "just-made");
    assert_int_equal(s->steps, 0);
    sw_snapshot_free(s);
    sw_run_close(run);
    /* A file made without metadata (an older stepwatch's, read at that moment) says so. */
    sw__store *st = NULL;
    path_in_dir(path, sizeof path, "bare.db");
    assert_int_equal(sw__store_create(path, NULL, &st), 0);
    sw__store_close(st);
    assert_int_equal(sw_run_open(path, &run), SW_ECORRUPT);
    assert_non_null(strstr(sw_last_error(), "holds no run"));
}

/* The world size learned after the profiler was made (Lightning's first rank): the snapshot
 * and the file's metadata say it, on the live profiler and after it closed. */
static void test_world_size_learned_later(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "later.db");
    sw_options o = {.size = sizeof o, .run_file = path, .rank = 0, .world_size = 1};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    sw_step_begin(p, 1);
    sw_step_end(p);
    assert_int_equal(sw_set_world_size(p, 0), SW_EINVAL);
    assert_int_equal(sw_set_world_size(NULL, 2), SW_EINVAL);
    assert_int_equal(sw_set_world_size(p, 4), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->world_size, 4);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->world_size, 4);
    assert_int_equal(s->steps, 1);
    sw_snapshot_free(s);
    sw_run_close(run);
}

static void test_bad_arguments(void **state) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(NULL, &run), SW_EINVAL);
    assert_int_equal(sw_run_open(g_rank0, NULL), SW_EINVAL);
    assert_int_equal(sw_run_merge(NULL, 0, "x"), SW_EINVAL);
    assert_int_equal(sw_run_snapshot(NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_run_foreach_step(NULL, -1, any_step, NULL), SW_EINVAL);
    assert_null(sw_run_action_name(NULL, 0, 0));
    sw_run_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_merge_two_ranks),
        cmocka_unit_test(test_exports),
        cmocka_unit_test(test_missing_and_foreign),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupted),
        cmocka_unit_test(test_killed_right_after_creation),
        cmocka_unit_test(test_world_size_learned_later),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
