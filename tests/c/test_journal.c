/*
 * test_journal.c — the run file written by a real profiler: round trip, SIGKILL recovery,
 * SIGTERM/SIGINT completion with the previous handler still run, completion at exit, and
 * refusal to overwrite a file that is not a run file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stepwatch.h"
#include "test_helpers.h"
#include "test_sqlite.h"

static void path_in_dir(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", sw_test_dir, name);
}

/* One training step: data, forward, backward, optimizer, a counter sample. */
static void one_step(sw_profiler *p, sw_id ids[4], sw_id counter, uint64_t spin_ns) {
    sw_step_begin(p, 32);
    for (int k = 0; k < 4; k++) {
        sw_begin(p, ids[k]);
        sw_test_spin(spin_ns);
        sw_end(p, ids[k]);
    }
    sw_counter(p, counter, 1.5);
    sw_step_end(p);
}

static void intern(sw_profiler *p, sw_id ids[4], sw_id *counter) {
    static const char *const names[4] = {"data", "forward", "backward", "optimizer"};
    for (int k = 0; k < 4; k++)
        ids[k] = sw_action(p, names[k]);
    *counter = sw_counter_id(p, "loss \"scaled\"");
}

typedef struct counts {
    int steps, spans, counters;
    int64_t last_step;
    int in_order;
} counts;

static int count_step(void *ctx, int rank, const sw_step_record *s) {
    counts *c = ctx;
    c->in_order &= (int64_t)s->step == c->last_step + 1;
    c->last_step = (int64_t)s->step;
    c->steps++;
    return 0;
}
static int count_span(void *ctx, int rank, const sw_span_record *s) {
    ((counts *)ctx)->spans++;
    return 0;
}
static int count_counter(void *ctx, int rank, const sw_counter_record *s) {
    ((counts *)ctx)->counters++;
    return 0;
}

static counts count_records(sw_run *run) {
    counts c = {.last_step = -1, .in_order = 1};
    assert_int_equal(sw_run_foreach_step(run, -1, count_step, &c), 0);
    assert_int_equal(sw_run_foreach_span(run, -1, count_span, &c), 0);
    assert_int_equal(sw_run_foreach_counter(run, -1, count_counter, &c), 0);
    return c;
}

static void test_round_trip(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "round.db");
    SW_TEST_PROFILER(p, .run_file = path, .timeline = 1, .flush_interval_ms = 20,
                     .name = "round trip");
    sw_id ids[4], counter;
    intern(p, ids, &counter);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 50; i++)
        one_step(p, ids, counter, 2000);
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_snapshot *live = NULL;
    assert_int_equal(sw_snapshot_take(p, &live), 0);
    sw_profiler_free(p);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    assert_int_equal(sw_run_rank_count(run), 1);
    sw_snapshot *back = NULL;
    assert_int_equal(sw_run_snapshot(run, &back), 0);
    assert_string_equal(back->name, "round trip");
    const sw_row *fwd = sw_snapshot_find(back, "forward", "train");
    const sw_row *fwd_live = sw_snapshot_find(live, "forward", "train");
    assert_non_null(fwd);
    assert_non_null(fwd_live);
    assert_int_equal(fwd->stats.count, 50);
    assert_int_equal(fwd->stats.total_ns, fwd_live->stats.total_ns);
    assert_int_equal(fwd->hist.count, fwd_live->hist.count);
    assert_true(sw_hist_quantile(&fwd->hist, 0.5) >= 1000);
    assert_non_null(sw_snapshot_find(back, "forward", "all"));
    assert_int_equal(back->steps, 50);
    assert_int_equal(back->ncounters, 1);
    assert_string_equal(back->counters[0].name, "loss \"scaled\"");

    counts c = count_records(run);
    assert_int_equal(c.steps, 50);
    assert_true(c.in_order);
    assert_int_equal(c.counters, 50);
    /* 4 actions + the "step" span + the "train" phase span, at least */
    assert_true(c.spans >= 50 * 5);
    assert_string_equal(sw_run_action_name(run, 0, ids[1]), "forward");
    assert_string_equal(sw_run_counter_name(run, 0, counter), "loss \"scaled\"");
    assert_string_equal(sw_run_phase_name(run, 0, SW_PHASE_TRAIN), "train");
    sw_snapshot_free(back);
    sw_snapshot_free(live);
    sw_run_close(run);

    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    char reason[64];
    query_text(path, "SELECT end_reason FROM ranks", reason, sizeof reason);
    assert_string_equal(reason, "exit");
    /* finished: one self-contained file, and reading it (above) left nothing beside it */
    query_text(path, "PRAGMA journal_mode", reason, sizeof reason);
    assert_string_equal(reason, "delete");
    char side[320];
    snprintf(side, sizeof side, "%s-wal", path);
    assert_int_equal(access(side, F_OK), -1);
    snprintf(side, sizeof side, "%s-shm", path);
    assert_int_equal(access(side, F_OK), -1);
}

/* Shared with the child: steps it completed, updated after each step. */
typedef struct shared {
    atomic_long steps_done;
    atomic_int handler_ran;
} shared;

static shared *map_shared(void) {
    shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    return s;
}

/* The child: record steps of ~1 ms until killed (or max_steps), then free or just exit. */
static void child_loop(shared *sh, const char *path, long max_steps, int free_at_end) {
    sw_options o = {
        .size = sizeof(sw_options), .run_file = path, .flush_interval_ms = 100, .timeline = 1};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(90);
    sw_id ids[4], counter;
    intern(p, ids, &counter);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (long i = 0; max_steps < 0 || i < max_steps; i++) {
        one_step(p, ids, counter, 250000);
        atomic_store(&sh->steps_done, i + 1);
    }
    if (free_at_end)
        sw_profiler_free(p);
    exit(0); /* without free: the atexit hook completes the file */
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_sigkill_recovery(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "killed.db");
    shared *sh = map_shared();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_loop(sh, path, -1, 1);
    /* Counted in steps, not in fixed sleeps: on a loaded machine the child may do far fewer
     * than a thousand steps a second. */
    sleep_ms(1000);
    long before_aggregates = atomic_load(&sh->steps_done);
    for (int waited = 0; atomic_load(&sh->steps_done) < before_aggregates + 100 && waited < 600;
         waited++)
        sleep_ms(100);
    long one_second_before = atomic_load(&sh->steps_done);
    sleep_ms(1000);
    long at_kill = atomic_load(&sh->steps_done);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_true(one_second_before >= before_aggregates + 100);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    counts c = count_records(run);
    /* Everything done a second before the kill is there; nothing that was not done. */
    assert_true(c.steps >= one_second_before);
    assert_true(c.steps <= at_kill + 1);
    assert_true(c.in_order);
    sw_snapshot *snap = NULL;
    assert_int_equal(sw_run_snapshot(run, &snap), 0);
    const sw_row *step = sw_snapshot_find(snap, "step", "train");
    assert_non_null(step);
    assert_true((long)step->stats.count >= before_aggregates);
    sw_snapshot_free(snap);
    sw_run_close(run);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 0);
    munmap(sh, sizeof *sh);
}

static shared *g_sh;

static void previous_handler(int signo) {
    atomic_store(&g_sh->handler_ran, signo);
    _exit(42);
}

/* SIGTERM, with a handler installed before the profiler: the file is complete and the
 * previous handler still runs (it exits with 42). */
static void test_sigterm_chains(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "term.db");
    g_sh = map_shared();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGTERM, previous_handler);
        child_loop(g_sh, path, -1, 1);
    }
    while (atomic_load(&g_sh->steps_done) < 200)
        sleep_ms(10);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 42);
    assert_int_equal(atomic_load(&g_sh->handler_ran), SIGTERM);
    long done = atomic_load(&g_sh->steps_done);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    char reason[64];
    query_text(path, "SELECT end_reason FROM ranks", reason, sizeof reason);
    assert_string_equal(reason, "SIGTERM");
    long rows = query_int(path, "SELECT count(*) FROM steps");
    /* The step in flight when the signal came may or may not be in. */
    assert_true(rows >= done - 1 && rows <= done + 1);
    munmap(g_sh, sizeof *g_sh);
}

/* SIGINT with the default disposition: the file is complete, then the process dies of
 * SIGINT as it would have without stepwatch. */
static void test_sigint_default(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "int.db");
    shared *sh = map_shared();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        child_loop(sh, path, -1, 1);
    }
    while (atomic_load(&sh->steps_done) < 100)
        sleep_ms(10);
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGINT);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_true(query_int(path, "SELECT count(*) FROM steps") >= 99);
    munmap(sh, sizeof *sh);
}

static void test_completed_at_exit(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "exit.db");
    shared *sh = map_shared();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_loop(sh, path, 30, 0);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), 30);
    assert_int_equal(query_int(path, "SELECT count FROM aggregates WHERE action_name = 'step'"
                                     " AND phase_name = 'train'"),
                     30);
    munmap(sh, sizeof *sh);
}

static void test_refuses_foreign_file(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "notes.txt");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("my precious notes\n", f);
    fclose(f);
    /* The profiler works without the file (training goes on); the file is left alone. */
    SW_TEST_PROFILER(p, .run_file = path);
    const char *written = NULL;
    assert_int_equal(sw_profiler_run_file(p, &written), SW_EEXISTS);
    assert_string_equal(written, path);
    sw_step_begin(p, 1);
    sw_step_end(p);
    sw_profiler_free(p);
    f = fopen(path, "r");
    char line[64] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "my precious notes\n");
}

/* A run file is replaced by the next run writing to the same path. */
static void test_replaces_old_run_file(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "again.db");
    for (int round = 1; round <= 2; round++) {
        SW_TEST_PROFILER(p, .run_file = path);
        for (int i = 0; i < round * 3; i++) {
            sw_step_begin(p, 1);
            sw_step_end(p);
        }
        sw_profiler_free(p);
    }
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), 6);
}

/* A reader open when the run ends keeps the file in WAL mode (leaving it needs the only
 * connection); the file stays whole and readable. */
static void test_reader_open_at_the_end(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "watched.db");
    SW_TEST_PROFILER(p, .run_file = path, .flush_interval_ms = 10);
    for (int i = 0; i < 5; i++) {
        sw_step_begin(p, 1);
        sw_step_end(p);
    }
    sw_run *watching = NULL;
    assert_int_equal(sw_run_open(path, &watching), 0);
    sw_profiler_free(p);
    char mode[16];
    query_text(path, "PRAGMA journal_mode", mode, sizeof mode);
    assert_string_equal(mode, "wal");
    sw_run_close(watching);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), 5);
}

/* `stepwatch run --on-full block --ring-capacity N` reaches a program through the
 * environment: with a ring of 8 events that blocks when full, a timeline many times larger
 * than the ring arrives whole. Values out of range are refused by sw_profiler_new. */
static void test_blocking_ring_from_the_environment(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "blocking.db");
    setenv("STEPWATCH_RUN_FILE", path, 1);
    setenv("STEPWATCH_TIMELINE", "1", 1);
    setenv("STEPWATCH_ON_FULL", "block", 1);
    setenv("STEPWATCH_RING_CAPACITY", "8", 1);
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0);
    unsetenv("STEPWATCH_RUN_FILE");
    unsetenv("STEPWATCH_TIMELINE");
    unsetenv("STEPWATCH_ON_FULL");
    unsetenv("STEPWATCH_RING_CAPACITY");
    sw_id ids[4], counter;
    intern(p, ids, &counter);
    for (int i = 0; i < 500; i++)
        one_step(p, ids, counter, 0);
    sw_profiler_free(p);
    char options[320];
    query_text(path, "SELECT options FROM ranks", options, sizeof options);
    assert_non_null(strstr(options, "\"ring_capacity\":8,\"on_full\":\"block\""));
    assert_int_equal(query_int(path, "SELECT dropped_events FROM ranks"), 0);
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), 500);
    assert_int_equal(query_int(path, "SELECT sum(count) FROM span_chunks"), 500 * 5);

    sw_options too_big = {.size = sizeof(sw_options), .ring_capacity = SW_MAX_RING_CAPACITY + 1};
    sw_options unknown_policy = {.size = sizeof(sw_options), .on_full = (sw_full_policy)2};
    assert_int_equal(sw_profiler_new(&too_big, &p), SW_EINVAL);
    assert_null(p);
    assert_int_equal(sw_profiler_new(&unknown_policy, &p), SW_EINVAL);
    assert_null(p);
}

/* Thread names reach the file as they change: a thread's system name when it first records;
 * a later sw_thread_name of that thread after its name was written (rewritten), and a new
 * thread's (added), while the names written before stay. */
static void *named_worker(void *arg) {
    sw_profiler *p = arg;
    pthread_setname_np(pthread_self(), "loader-7");
    sw_id id = sw_action(p, "load");
    sw_begin(p, id);
    sw_end(p, id);
    return NULL;
}

static void test_thread_names_follow_changes(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "names.db");
    SW_TEST_PROFILER(p, .run_file = path, .flush_interval_ms = 10);
    pthread_setname_np(pthread_self(), "trainer-main");
    sw_id id = sw_action(p, "step work");
    sw_begin(p, id);
    sw_end(p, id);
    /* wait (at most 10 s) until a flush wrote thread 0's system name */
    long long written = 0;
    for (int i = 0; i < 1000 && !written; i++) {
        sleep_ms(10);
        written = query_int(path, "SELECT count(*) FROM threads WHERE thread = 0 AND "
                                  "name = 'trainer-main'");
    }
    assert_int_equal(written, 1);
    assert_int_equal(sw_thread_name(p, "renamed after a flush"), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, named_worker, p), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    sw_profiler_free(p);
    char name[64];
    query_text(path, "SELECT name FROM threads WHERE thread = 0", name, sizeof name);
    assert_string_equal(name, "renamed after a flush");
    query_text(path, "SELECT name FROM threads WHERE thread = 1", name, sizeof name);
    assert_string_equal(name, "loader-7");
    assert_int_equal(query_int(path, "SELECT count(*) FROM threads"), 2);
}

typedef struct {
    sw_step_record last;
    int steps;
} breakdown;
static int keep_step(void *ctx, int rank, const sw_step_record *s) {
    breakdown *b = ctx;
    b->last = *s;
    b->steps++;
    return 0;
}

/* The per-step breakdown counts each category's own time: Lightning's optimizer_step runs
 * the forward and the backward in its closure, and its hooks are callbacks; an "other" span
 * inside a categorized one is that one's. The spans carry given times (sw_begin_at/end_at),
 * a second in the past, so the expected times are exact on any machine. */
static void test_step_breakdown_own_time(void **state) {
    char path[300];
    path_in_dir(path, sizeof path, "breakdown.db");
    SW_TEST_PROFILER(p, .run_file = path, .flush_interval_ms = 20);
    sw_id data = sw_action_with_category(p, "[Loop].train_dataloader_next", SW_CAT_DATA);
    sw_id opt = sw_action_with_category(p, "[LightningModule]M.optimizer_step", SW_CAT_OPTIMIZER);
    sw_id fwd = sw_action_with_category(p, "[Strategy]S.training_step", SW_CAT_FORWARD);
    sw_id bwd = sw_action_with_category(p, "[Strategy]S.backward", SW_CAT_BACKWARD);
    sw_id cb = sw_action_with_category(p, "[Callback]Cb.on_before_backward", SW_CAT_CALLBACK);
    sw_id glue = sw_action(p, "closure glue"), batch = sw_action(p, "run_training_batch");
    const uint64_t MS = 1000000, t = sw_now_ns() - 1000 * MS;
    sw_phase_begin(p, SW_PHASE_TRAIN);
    sw_step_begin_at(p, 8, t);
    sw_begin_at(p, data, t), sw_end_at(p, data, t + 2 * MS);        /* data 2 */
    sw_begin_at(p, batch, t + 2 * MS);                              /* batch's own 1 */
    sw_begin_at(p, opt, t + 3 * MS);                                /* optimizer 3 + 1 */
    sw_begin_at(p, fwd, t + 4 * MS), sw_end_at(p, fwd, t + 8 * MS); /* forward 4 */
    sw_begin_at(p, bwd, t + 8 * MS);                                /* backward 5 - 2 */
    sw_begin_at(p, cb, t + 9 * MS), sw_end_at(p, cb, t + 11 * MS);  /* callback 2 */
    sw_end_at(p, bwd, t + 13 * MS);
    sw_begin_at(p, glue, t + 13 * MS), sw_end_at(p, glue, t + 14 * MS); /* the optimizer's */
    sw_end_at(p, opt, t + 16 * MS);
    sw_end_at(p, batch, t + 16 * MS);
    sw_step_end(p); /* now: other = the step less the 16 ms, plus batch's 1 ms */
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p);

    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    breakdown b = {0};
    assert_int_equal(sw_run_foreach_step(run, -1, keep_step, &b), 0);
    sw_run_close(run);
    assert_int_equal(b.steps, 1);
    const uint64_t *c = b.last.category_ns;
    assert_int_equal(c[SW_CAT_DATA], 2 * MS);
    assert_int_equal(c[SW_CAT_FORWARD], 4 * MS);
    assert_int_equal(c[SW_CAT_BACKWARD], 3 * MS);
    assert_int_equal(c[SW_CAT_CALLBACK], 2 * MS);
    assert_int_equal(c[SW_CAT_OPTIMIZER], 4 * MS);
    assert_int_equal(c[SW_CAT_LOSS] + c[SW_CAT_ZERO_GRAD], 0);
    assert_true(b.last.duration_ns >= 1000 * MS);
    assert_int_equal(c[SW_CAT_OTHER], b.last.duration_ns - 15 * MS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocking_ring_from_the_environment),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_step_breakdown_own_time),
        cmocka_unit_test(test_sigkill_recovery),
        cmocka_unit_test(test_sigterm_chains),
        cmocka_unit_test(test_sigint_default),
        cmocka_unit_test(test_completed_at_exit),
        cmocka_unit_test(test_refuses_foreign_file),
        cmocka_unit_test(test_replaces_old_run_file),
        cmocka_unit_test(test_thread_names_follow_changes),
        cmocka_unit_test(test_reader_open_at_the_end),
    };
    return cmocka_run_group_tests(tests, sw_test_make_dir, sw_test_remove_dir);
}
