/*
 * test_fault_disk.c — writing the run file fails while training goes on (docs/reliability.md,
 * "Write failures"): a full disk (a small tmpfs, where mounting is allowed), a file-size limit
 * (anywhere), the file removed underneath. Each time: training never stops, one warning
 * names the cause, the events that could not be written are counted as dropped so that
 * steps in the file + dropped_events = steps recorded, writing resumes when it can, and the
 * file stays readable.
 */
#include "fault_util.h"

#include <sys/mount.h>
#include <sys/resource.h>

/* Record steps of ~0.5 ms for ms milliseconds; between the moments at and back (ms from the
 * start) call hurt(), then heal() (either may be NULL). */
static void train_for(sw_profiler *p, long ms, long at, void (*hurt)(void), long back,
                      void (*heal)(void)) {
    sw_id fwd = sw_action(p, "forward");
    uint64_t start = sw_now_ns();
    int hurt_done = 0, healed = 0;
    for (;;) {
        long now = (long)((sw_now_ns() - start) / 1000000);
        if (now >= ms)
            break;
        if (!hurt_done && now >= at) {
            hurt_done = 1;
            if (hurt)
                hurt();
        }
        if (!healed && now >= back) {
            healed = 1;
            if (heal)
                heal();
        }
        sw_step_begin(p, 1);
        sw_begin(p, fwd);
        fault_sleep_us(500);
        sw_end(p, fwd);
        sw_step_end(p);
    }
}

/* stderr goes into a file of the test directory between capture_stderr and end_capture,
 * which echoes and returns what was said. */
static int g_saved_stderr = -1;
static char g_said[300];

static void capture_stderr(const char *name) {
    fault_path(g_said, sizeof g_said, name);
    fflush(stderr);
    g_saved_stderr = dup(2);
    int fd = open(g_said, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}

static const char *end_capture(void) {
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    const char *text = fault_read_text(g_said);
    fprintf(stderr, "%s", text);
    return text;
}

/* The file's accounting: every event recorded (a step, and with the timeline its two spans:
 * "step" and "forward") is in the file or counted as dropped; returns the number dropped. */
static long long check_accounting(const char *path, int timeline) {
    long long steps = query_int(path, "SELECT steps FROM ranks");
    long long rows = query_int(path, "SELECT count(*) FROM steps");
    long long spans = query_int(path, "SELECT coalesce(sum(count), 0) FROM span_chunks");
    long long dropped = query_int(path, "SELECT dropped_events FROM ranks");
    long long events = steps * (timeline ? 3 : 1);
    fprintf(stderr,
            "[  INFO    ] %lld steps, %lld events: %lld steps and %lld spans in the "
            "file, %lld dropped\n",
            steps, events, rows, spans, dropped);
    assert_int_equal(rows + spans + dropped, events);
    /* And stepwatch reads it back. */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal((long long)s->steps, steps);
    sw_snapshot_free(s);
    sw_run_close(run);
    return dropped;
}

/* ---- a full disk: a small tmpfs, filled by another file for a while ---- */

static char g_mount[300], g_filler[320];

static void fill_disk(void) {
    int fd = open(g_filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static char block[4096];
    while (write(fd, block, sizeof block) > 0) {
    }
    close(fd);
}

static void free_disk(void) {
    unlink(g_filler);
}

/* A failed check must not leave the small disk mounted. */
static int unmount_and_remove_dir(void **state) {
    if (g_mount[0] != '\0')
        umount2(g_mount, MNT_DETACH);
    return fault_remove_dir(state);
}

static void test_full_disk(void **state) {
    fault_path(g_mount, sizeof g_mount, "small-disk");
    assert_int_equal(mkdir(g_mount, 0700), 0);
    /* Room for the run file's WAL to grow until its first checkpoint (4 MB). */
    if (mount("tmpfs", g_mount, "tmpfs", 0, "size=8m") != 0) {
        fprintf(stderr,
                "[  SKIP    ] mount tmpfs: %s: full-disk checks skipped (the file-size "
                "limit test below covers write failures)\n",
                strerror(errno));
        rmdir(g_mount);
        skip();
    }
    snprintf(g_filler, sizeof g_filler, "%s/filler", g_mount);
    char path[320];
    snprintf(path, sizeof path, "%s/run.db", g_mount);

    /* Full for a second, then room again: writing resumes and the file completes. */
    capture_stderr("full-disk.txt");
    SW_TEST_PROFILER(p, .run_file = path, .flush_interval_ms = 50);
    train_for(p, 2000, 400, fill_disk, 1200, free_disk);
    sw_profiler_free(p);
    const char *text = end_capture();
    assert_non_null(strstr(text, "No space left on device"));
    assert_non_null(strstr(text, "writing again"));
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_true(check_accounting(path, 0) > 0);

    /* Full until the end: the file stays readable, incomplete, and says so. */
    unlink(path);
    capture_stderr("full-to-the-end.txt");
    SW_TEST_PROFILER(q, .run_file = path, .flush_interval_ms = 50);
    train_for(q, 1500, 500, fill_disk, 100000, NULL);
    sw_profiler_free(q);
    text = end_capture();
    assert_non_null(strstr(text, "it stays incomplete"));
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    char what[512];
    assert_int_equal(sw_run_incomplete(run, what, sizeof what), 1);
    assert_non_null(strstr(what, "incomplete"));
    sw_run_close(run);
    free_disk();
}

/* ---- a file-size limit: writes fail with EFBIG, then the limit is lifted ---- */

static void limit_file_size(void) {
    struct rlimit limit;
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 64 * 1024; /* below what the file holds by then */
    setrlimit(RLIMIT_FSIZE, &limit);
}

static void lift_file_size_limit(void) {
    struct rlimit limit;
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_FSIZE, &limit);
}

static void test_write_errors_then_recovery(void **state) {
    char path[300];
    fault_path(path, sizeof path, "limited.db");
    capture_stderr("limited.txt");
    pid_t pid = fork(); /* the limit and its signal stay in the child */
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        sw_options o = {
            .size = sizeof(sw_options), .run_file = path, .flush_interval_ms = 50, .timeline = 1};
        sw_profiler *p = NULL;
        if (sw_profiler_new(&o, &p) != 0)
            _exit(3);
        train_for(p, 2400, 800, limit_file_size, 1600, lift_file_size_limit);
        sw_profiler_free(p);
        _exit(0);
    }
    assert_int_equal(fault_wait(pid), 0); /* training was never stopped */
    const char *text = end_capture();
    assert_non_null(strstr(text, "File too large"));
    assert_non_null(strstr(text, "writing again"));
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    assert_true(check_accounting(path, 1) > 0);
}

/* ---- the file removed underneath ---- */

static char g_removed[300];

static void remove_run_file(void) {
    unlink(g_removed);
}

static void test_file_removed_underneath(void **state) {
    fault_path(g_removed, sizeof g_removed, "removed.db");
    capture_stderr("removed.txt");
    SW_TEST_PROFILER(p, .run_file = g_removed, .flush_interval_ms = 50);
    train_for(p, 2200, 1000, remove_run_file, 100000, NULL);
    assert_int_equal(sw_profiler_run_file(p, NULL), 0);
    sw_profiler_free(p);
    const char *text = end_capture();
    assert_non_null(strstr(text, "was removed while the run went on"));
    assert_int_equal(query_int(g_removed, "SELECT complete FROM ranks"), 1);
    long long dropped = check_accounting(g_removed, 0);
    /* What the removed file held is lost, and only that: about a second of steps. */
    assert_true(dropped > 100);
    assert_true(query_int(g_removed, "SELECT count(*) FROM steps") > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_write_errors_then_recovery),
        cmocka_unit_test(test_file_removed_underneath),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, unmount_and_remove_dir);
}
