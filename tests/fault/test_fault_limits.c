/*
 * test_fault_limits.c — the process runs out of what the run file's writer needs
 * (docs/reliability.md, "Resource limits"): file descriptors (RLIMIT_NOFILE), a thread
 * (pthread_create failing: an address-space limit leaves no room for the writer thread's
 * stack, as `ulimit -u` would for a user other than root, which it does not bind), room in a
 * file (RLIMIT_FSIZE, SIGXFSZ ignored). Each time training goes on, and the one line said
 * names the file and the cause: never a bare "input/output error".
 *
 * Each case runs in a child process, whose limits end with it; its stderr goes to a file of
 * the test directory.
 */
#include "fault_util.h"

#include <sys/resource.h>

#define STEPS 40

/* In a forked child: stderr to err_path, limit `resource` to `limit`, a profiler with a run
 * file at path and STEPS steps. Exits 0 when every step was counted (the run file written
 * or not), 2 otherwise; 3 when the profiler could not be made at all. */
static void train_limited(const char *path, const char *err_path, int resource, rlim_t limit) {
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    struct rlimit l;
    getrlimit(resource, &l);
    l.rlim_cur = limit;
    setrlimit(resource, &l);
    sw_options o = {.size = sizeof(sw_options), .run_file = path, .flush_interval_ms = 20};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(3);
    sw_id fwd = sw_action(p, "forward");
    for (int i = 0; i < STEPS; i++) {
        sw_step_begin(p, 1);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_step_end(p);
    }
    int counted = sw_step_count(p) == STEPS;
    sw_profiler_free(p);
    _exit(counted ? 0 : 2);
}

/* The lowest descriptor free now: what the process holds before a profiler opens any. */
static int lowest_free_fd(void) {
    int fd = dup(0);
    close(fd);
    return fd;
}

/* Out of descriptors at every point of making the run file: the SQLite file, its WAL, the
 * writer thread's wake-up pipe, the signal handlers' pipe. */
static void test_out_of_descriptors(void **state) {
    (void)state;
    int base = lowest_free_fd(), failed = 0, written = 0;
    for (int extra = 0; extra <= 12; extra++) {
        char path[300], err_path[300];
        snprintf(path, sizeof path, "%s/nofile-%d.db", g_dir, extra);
        snprintf(err_path, sizeof err_path, "%s/nofile-%d.txt", g_dir, extra);
        pid_t pid = fork();
        if (pid == 0)
            train_limited(path, err_path, RLIMIT_NOFILE, (rlim_t)(base + extra));
        assert_int_equal(fault_wait(pid), 0); /* every step counted */
        const char *said = fault_read_text(err_path);
        if (strstr(said, "run file not written") == NULL) {
            written++;
            continue;
        }
        failed++;
        fprintf(stderr, "[  INFO    ] %d descriptors: %s", base + extra, said);
        assert_non_null(strstr(said, path));
        assert_non_null(strstr(said, strerror(EMFILE)));
        assert_null(strstr(said, sw_strerror(SW_EIO)));
        assert_non_null(strstr(said, "training goes on without it"));
    }
    /* The limits reached each of the four places, and with enough the file is written. */
    assert_true(failed >= 4);
    assert_true(written >= 1);
}

/* The writer thread cannot start: its stack cannot be mapped under the address-space
 * limit (pthread_create: EAGAIN). The file made for it is removed, the steps are counted. */
static void test_writer_thread_cannot_start(void **state) {
    (void)state;
    if (FAULT_UNDER_ASAN) {
        fprintf(stderr, "[  SKIP    ] an address-space limit: not under AddressSanitizer\n");
        skip();
    }
    char path[300], err_path[300];
    fault_path(path, sizeof path, "nothread.db");
    fault_path(err_path, sizeof err_path, "nothread.txt");
    pid_t pid = fork();
    if (pid == 0) {
        /* What the process maps now, and 2 MB: room for SQLite's file, not for a thread's
         * 8 MB stack. */
        long pages = 0;
        FILE *statm = fopen("/proc/self/statm", "r");
        if (statm == NULL || fscanf(statm, "%ld", &pages) != 1)
            _exit(4);
        fclose(statm);
        train_limited(path, err_path, RLIMIT_AS,
                      (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (2u << 20));
    }
    int status = fault_wait(pid);
    const char *said = fault_read_text(err_path);
    fprintf(stderr, "[  INFO    ] %s", said);
    assert_int_equal(status, 0);
    assert_non_null(strstr(said, path));
    assert_non_null(strstr(said, "cannot start its thread"));
    assert_non_null(strstr(said, strerror(EAGAIN)));
    assert_non_null(strstr(said, "training goes on without it"));
    assert_int_equal(access(path, F_OK), -1); /* not left behind half made */
}

/* The engine's Ignite CSV cannot be written (a file-size limit): the run's error names the
 * file and the cause, the old file stays. */
static int engine_source_next(void *src, void **batch, uint32_t *size) {
    int *left = src;
    if (*left == 0)
        return 0;
    (*left)--;
    *batch = left;
    *size = 1;
    return 1;
}

static int engine_step(sw_engine *e, void *batch, uint32_t size, void *user) {
    (void)e, (void)batch, (void)size, (void)user;
    return 0;
}

static void test_engine_csv_too_large(void **state) {
    (void)state;
    char path[300], err_path[300];
    fault_path(path, sizeof path, "iterations.csv");
    fault_path(err_path, sizeof err_path, "csv.txt");
    fault_write_text(path, "the old file\n");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG */
        struct rlimit l;
        getrlimit(RLIMIT_FSIZE, &l);
        l.rlim_cur = 4096;
        setrlimit(RLIMIT_FSIZE, &l);
        sw_engine_options eo = {.size = sizeof(sw_engine_options), .csv_path = path};
        sw_engine *e = NULL;
        if (sw_engine_new(&eo, &e) != 0)
            _exit(3);
        int left = 500;
        sw_data_source ds = {
            .size = sizeof(sw_data_source), .next = engine_source_next, .ctx = &left};
        sw_engine_set_train(e, &ds, engine_step, NULL);
        int rc = sw_engine_run(e);
        FILE *f = fopen(err_path, "w");
        fprintf(f, "%d %s\n", rc, sw_last_error());
        fclose(f);
        sw_engine_free(e);
        _exit(left == 0 ? 0 : 2); /* every batch trained */
    }
    assert_int_equal(fault_wait(pid), 0);
    const char *said = fault_read_text(err_path);
    fprintf(stderr, "[  INFO    ] %s", said);
    assert_int_equal(atoi(said), SW_EIO);
    assert_non_null(strstr(said, path));
    assert_non_null(strstr(said, strerror(EFBIG)));
    assert_string_equal(fault_read_text(path), "the old file\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_descriptors),
        cmocka_unit_test(test_writer_thread_cannot_start),
        cmocka_unit_test(test_engine_csv_too_large),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
