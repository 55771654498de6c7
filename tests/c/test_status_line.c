/*
 * test_status_line.c — the live status line (live/status_line.c) when it cannot start: said
 * once on stderr, and nothing else changes (the profiler works, sw_last_error is the caller's).
 * Its drawing on a real terminal is tests/python/test_live.py's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_helpers.h"

/* Asked for (live on, to a pipe) with no file descriptor left for its wake-up pipe or its copy
 * of stderr: two profilers, one sentence; each one records its steps. */
static void without_descriptors(void) {
    struct rlimit lim = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
        _exit(2);
    while (fcntl(0, F_DUPFD, 3) >= 0) {
    }
    if (errno != EMFILE)
        _exit(3);
    for (int i = 0; i < 2; i++) {
        sw_options o = {.size = sizeof(sw_options), .live = SW_LIVE_ON};
        sw_profiler *p = NULL;
        if (sw_profiler_new(&o, &p) != 0)
            _exit(4);
        if (sw_last_error()[0] != '\0')
            _exit(5); /* the line's failure is not the profiler's error */
        sw_phase_begin(p, SW_PHASE_TRAIN);
        sw_step_begin(p, 1);
        sw_step_end(p);
        sw_phase_end(p, SW_PHASE_TRAIN);
        if (sw_step_count(p) != 1)
            _exit(6);
        sw_profiler_free(p);
    }
}

static void test_says_why_once(void **state) {
    (void)state;
    char err[4096];
    assert_int_equal(sw_test_in_child(without_descriptors, err, sizeof err), 0);
    const char *said = strstr(err, "stepwatch: no live status line: ");
    assert_non_null(said);
    assert_non_null(strstr(said, "Too many open files"));
    assert_null(strstr(strstr(said, "no live") + 1, "no live")); /* once */
}

/* The same asked for with descriptors to spare: it starts, and says nothing. */
static void with_descriptors(void) {
    sw_options o = {.size = sizeof(sw_options), .live = SW_LIVE_ON};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        _exit(4);
    sw_profiler_free(p);
}

static void test_silent_when_it_starts(void **state) {
    (void)state;
    char err[4096];
    assert_int_equal(sw_test_in_child(with_descriptors, err, sizeof err), 0);
    assert_null(strstr(err, "no live status line"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_says_why_once),
        cmocka_unit_test(test_silent_when_it_starts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
