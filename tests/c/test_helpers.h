/* test_helpers.h — small things the C tests share. */
#ifndef SW_TEST_HELPERS_H
#define SW_TEST_HELPERS_H

#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A private temporary directory for the tests of one file: sw_test_make_dir and
 * sw_test_remove_dir are its cmocka group setup and teardown. */
static char sw_test_dir[256] __attribute__((unused));

static inline int sw_test_make_dir(void **state) {
    (void)state;
    snprintf(sw_test_dir, sizeof sw_test_dir, "/tmp/sw_test_XXXXXX");
    return mkdtemp(sw_test_dir) ? 0 : -1;
}

static inline int sw_test_remove_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sw_test_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A slow step's record as the rule sees it: step, its duration and median, no signals yet
 * (no GC generation). */
static inline sw_step_record sw_test_slow_record(uint64_t step, uint64_t duration,
                                                 uint64_t median) {
    sw_step_record r;
    memset(&r, 0, sizeof r);
    r.step = step;
    r.duration_ns = duration;
    r.median_ns = median;
    r.signals.gc_generation = -1;
    return r;
}

/* Busy-wait ns nanoseconds on the profiler clock (sleeping would be too coarse). */
static inline void sw_test_spin(uint64_t ns) {
    uint64_t end = sw_now_ns() + ns;
    while (sw_now_ns() < end) {
    }
}

/* A fresh profiler or a failed test. */
#define SW_TEST_PROFILER(var, ...)                                            \
    sw_profiler *var = NULL;                                                  \
    do {                                                                      \
        sw_options sw__test_opts = {.size = sizeof(sw_options), __VA_ARGS__}; \
        assert_int_equal(sw_profiler_new(&sw__test_opts, &var), 0);           \
        assert_non_null(var);                                                 \
    } while (0)

/* Run fn in a child process whose stderr goes into buf (NUL-terminated); its exit status
 * (128 + N when killed by signal N). */
static inline int sw_test_in_child(void (*fn)(void), char *buf, size_t size) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n < size - 1 && (got = read(fds[0], buf + n, size - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The snapshot's counter called name, or NULL. */
static inline const sw_counter_summary *sw_test_counter(const sw_snapshot *s, const char *name) {
    for (size_t i = 0; i < s->ncounters; i++)
        if (strcmp(s->counters[i].name, name) == 0)
            return &s->counters[i];
    return NULL;
}

/* The snapshot written in fmt, as a malloc'ed string (free it). Needs cmocka.h. Not inlined:
 * GCC then takes the memstream's buffer for a pointer to a local (-Wdangling-pointer). */
__attribute__((noinline, unused)) static char *sw_test_report(const sw_snapshot *s, sw_format fmt) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_int_equal(sw_snapshot_write(s, fmt, out), 0);
    fclose(out);
    return text;
}

#endif
