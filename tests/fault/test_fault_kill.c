/*
 * test_fault_kill.c — a training process killed at a random moment (docs/reliability.md,
 * "Kills and signals"). The child trains in rounds at one run-file path: make a profiler
 * (creating or replacing the file), train a random number of ~1 ms steps, free it (the last
 * flush, the WAL checkpoint). A kill may land anywhere: in creation, in a flush, in the
 * checkpoint. After each kill:
 *   - the file is there (or was never made) and stepwatch reads it; `stepwatch report` too;
 *   - an interrupted file says it is incomplete;
 *   - the steps in it are the first steps of the round, in order, and what is missing is at
 *     most the last flush interval and a bit (figures printed: steps and ms lost per kill);
 *   - the next run at the same path is not blocked.
 * Every fifth round sends SIGTERM to a child with a handler of its own instead: the file is
 * complete and the handler ran. SW_FAULT_KILLS sets the rounds (8 here; `make fault-kill`
 * runs 60).
 */
#include "fault_util.h"

#include <stdatomic.h>
#include <sys/mman.h>

#define MAX_STEPS 200000
#define FLUSH_MS 200

/* What the child tells the parent, in shared memory. */
typedef struct progress {
    atomic_int round;           /* the profiler (file) the child is on, from 1 */
    atomic_long steps;          /* steps completed in that round */
    atomic_int term_handled;    /* the child's own SIGTERM handler ran */
    uint64_t end_ns[MAX_STEPS]; /* when each step of the round ended (sw_now_ns) */
} progress;

static progress *g_progress;

static void own_term_handler(int signo) {
    atomic_store(&g_progress->term_handled, signo);
    _exit(42);
}

static void child(const char *path, unsigned seed, int with_term_handler) {
    if (with_term_handler)
        signal(SIGTERM, own_term_handler);
    srand(seed);
    for (int round = 1;; round++) {
        atomic_store(&g_progress->steps, 0);
        atomic_store(&g_progress->round, round);
        sw_options o = {.size = sizeof(sw_options),
                        .run_file = path,
                        .timeline = 1,
                        .flush_interval_ms = FLUSH_MS};
        sw_profiler *p = NULL;
        if (sw_profiler_new(&o, &p) != 0 || sw_profiler_run_file(p, NULL) != 0)
            _exit(90);
        sw_id fwd = sw_action(p, "forward");
        long steps = rand() % 600;
        for (long i = 0; i < steps && i < MAX_STEPS; i++) {
            sw_step_begin(p, 8);
            sw_begin(p, fwd);
            fault_sleep_us(1000);
            sw_end(p, fwd);
            sw_step_end(p);
            g_progress->end_ns[i] = sw_now_ns();
            atomic_store(&g_progress->steps, i + 1);
        }
        sw_profiler_free(p);
    }
}

typedef struct figures {
    int kills, never_made, incomplete;
    long lost_steps_max;
    double lost_ms_max, lost_ms_sum;
    long steps_total, steps_kept;
} figures;

/* After a kill: the file reads, its steps are the round's first ones, little is lost. */
static void check_killed_file(const char *path, figures *f) {
    int round = atomic_load(&g_progress->round);
    long done = atomic_load(&g_progress->steps);
    sw_run *run = NULL;
    int rc = sw_run_open(path, &run);
    if (rc == SW_ENOTFOUND && round <= 1) { /* killed before its first file existed */
        f->never_made++;
        return;
    }
    if (rc != 0)
        fail_msg("round %d: %s does not open: %s (%s)", round, path, sw_strerror(rc),
                 sw_last_error());
    f->incomplete += sw_run_incomplete(run, NULL, 0) > 0;
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    sw_snapshot_free(s);
    sw_run_close(run);
    /* The file may still be the previous round's (killed while replacing it): then the
     * round's steps are all missing, and there were none yet (creation comes first). */
    long rows = query_int(path, "SELECT count(*) FROM steps");
    long in_order = query_int(path, "SELECT count(*) = coalesce(max(step) + 1, 0) FROM steps");
    assert_true(in_order);
    assert_true(rows <= done || done == 0);
    long lost = rows <= done ? done - rows : 0;
    double lost_ms = 0;
    if (lost > 0) {
        uint64_t last_kept = rows > 0 ? g_progress->end_ns[rows - 1] : g_progress->end_ns[0];
        lost_ms = (double)(g_progress->end_ns[done - 1] - last_kept) / 1e6;
    }
    f->kills++;
    f->steps_total += done;
    f->steps_kept += rows <= done ? rows : done;
    if (lost > f->lost_steps_max)
        f->lost_steps_max = lost;
    if (lost_ms > f->lost_ms_max)
        f->lost_ms_max = lost_ms;
    f->lost_ms_sum += lost_ms;
    /* At most the last flush interval, with room for a slow machine. */
    if (lost_ms > FLUSH_MS + 400)
        fail_msg("round %d: %ld steps (%.0f ms) lost", round, lost, lost_ms);
    char args[700], err[300];
    fault_path(err, sizeof err, "report-err.txt");
    snprintf(args, sizeof args, "report '%s'", path);
    assert_int_equal(fault_cli(args, err), 0);
}

static void test_random_kills(void **state) {
    int rounds = fault_count("SW_FAULT_KILLS", 8);
    g_progress = mmap(NULL, sizeof *g_progress, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
    assert_true(g_progress != MAP_FAILED);
    char path[300];
    fault_path(path, sizeof path, "killed.db");
    figures f = {0};
    int terms = 0;
    srand((unsigned)time(NULL));
    for (int r = 0; r < rounds; r++) {
        int term = r % 5 == 4;
        memset(g_progress, 0, sizeof *g_progress);
        unsigned seed = (unsigned)rand();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            child(path, seed, term);
        fault_sleep_ms(100 + rand() % 1400);
        kill(pid, term ? SIGTERM : SIGKILL);
        int code = fault_wait(pid);
        if (term) {
            /* The handler installed before stepwatch ran after the file was completed. */
            assert_int_equal(code, 42);
            assert_int_equal(atomic_load(&g_progress->term_handled), SIGTERM);
            if (access(path, F_OK) == 0 && atomic_load(&g_progress->round) > 0) {
                sw_run *run = NULL;
                assert_int_equal(sw_run_open(path, &run), 0);
                sw_run_close(run);
            }
            terms++;
            continue;
        }
        assert_int_equal(code, 128 + SIGKILL);
        check_killed_file(path, &f);
        /* The next run at this path is never blocked by what the kill left. */
        SW_TEST_PROFILER(next, .run_file = path);
        assert_int_equal(sw_profiler_run_file(next, NULL), 0);
        sw_profiler_free(next);
    }
    fprintf(stderr,
            "[  INFO    ] %d SIGKILLs (%d before any file, %d files incomplete), %d SIGTERMs: "
            "steps lost per kill at most %ld (%.0f ms), mean %.0f ms; %ld of %ld steps kept\n",
            f.kills + f.never_made, f.never_made, f.incomplete, terms, f.lost_steps_max,
            f.lost_ms_max, f.kills ? f.lost_ms_sum / f.kills : 0.0, f.steps_kept, f.steps_total);
    munmap(g_progress, sizeof *g_progress);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_kills)};
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
