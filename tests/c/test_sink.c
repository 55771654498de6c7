/*
 * test_sink.c — the core's sink interface (src/core/sink.h) with a sink that is not the run
 * file: the core calls each op at its moment (free, a full ring under SW_FULL_BLOCK, a fork
 * child, exit without free), so any later sink can rely on them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sink.h"

/* A sink that counts its calls; it drains the rings itself when woken. */
typedef struct counting_sink {
    sw__sink sink; /* first: the ops get this pointer back */
    sw_profiler *p;
    int wakes, exits, fork_children;
    size_t drained;
    int exit_fd; /* on_exit writes a byte here, when >= 0 */
    int *closed; /* set by on_close, which frees the sink */
} counting_sink;

static void count_event(void *ctx, const sw__event *e) {
    (void)e;
    ((counting_sink *)ctx)->drained++;
}

static void on_wake(sw__sink *s) {
    counting_sink *c = (counting_sink *)s;
    c->wakes++;
    sw__drain(c->p, count_event, c); /* the recording thread waits for this room */
}

static void on_exit_unfreed(sw__sink *s) {
    counting_sink *c = (counting_sink *)s;
    c->exits++;
    if (c->exit_fd >= 0) {
        ssize_t n = write(c->exit_fd, "e", 1);
        (void)n;
    }
}

static void on_close(sw__sink *s) {
    counting_sink *c = (counting_sink *)s;
    *c->closed += 1;
    free(c);
}

static void on_fork_child(sw__sink *s) {
    ((counting_sink *)s)->fork_children++;
}

static const sw__sink_ops counting_ops = {
    .wake = on_wake,
    .on_exit = on_exit_unfreed,
    .on_close = on_close,
    .on_fork_child = on_fork_child,
};

/* A core profiler: no sink attached but the test's own. */
static sw_profiler *core_profiler(const sw_options *o) {
    sw_profiler *p = NULL;
    assert_int_equal(sw__profiler_new(o, &p), 0);
    return p;
}

static counting_sink *attach_counting(sw_profiler *p, int *closed) {
    counting_sink *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->sink.ops = &counting_ops;
    c->p = p;
    c->exit_fd = -1;
    c->closed = closed;
    sw__sink_attach(p, &c->sink);
    return c;
}

static void test_free_closes_every_sink_once(void **state) {
    (void)state;
    sw_profiler *p = core_profiler(NULL);
    int closed_a = 0, closed_b = 0;
    counting_sink *a = attach_counting(p, &closed_a);
    counting_sink *b = attach_counting(p, &closed_b);
    sw_id id = sw_action(p, "forward");
    sw_begin(p, id);
    sw_end(p, id);
    /* Events are off (no sink turned them on): nothing woke or exited. */
    assert_int_equal(a->wakes + a->exits + a->fork_children, 0);
    assert_int_equal(b->wakes + b->exits + b->fork_children, 0);
    sw_profiler_free(p);
    assert_int_equal(closed_a, 1);
    assert_int_equal(closed_b, 1);
}

static void test_detached_sink_is_not_closed(void **state) {
    (void)state;
    sw_profiler *p = core_profiler(NULL);
    int closed = 0;
    counting_sink *c = attach_counting(p, &closed);
    sw__sink_detach(p, &c->sink);
    sw_profiler_free(p);
    assert_int_equal(closed, 0);
    free(c);
}

/* A ring of 8 slots under SW_FULL_BLOCK: every span waits for room, and the wake op is how
 * the consumer learns of it. Nothing is dropped. */
static void test_full_ring_wakes_the_sink(void **state) {
    (void)state;
    sw_options o = {
        .size = sizeof(sw_options), .timeline = 1, .ring_capacity = 8, .on_full = SW_FULL_BLOCK};
    sw_profiler *p = core_profiler(&o);
    int closed = 0;
    counting_sink *c = attach_counting(p, &closed);
    sw__events_enable(p);
    sw_id id = sw_action(p, "forward");
    const int spans = 100;
    for (int i = 0; i < spans; i++) {
        sw_begin(p, id);
        sw_end(p, id);
    }
    sw__drain(p, count_event, c);
    assert_true(c->wakes >= spans / 8 - 1);
    assert_int_equal(c->drained, (size_t)spans);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->dropped_events, 0);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    assert_int_equal(closed, 1);
}

/* In a fork child the sink is let go (on_fork_child, never on_close); the parent's stays. */
static void test_fork_child_lets_go(void **state) {
    (void)state;
    sw_profiler *p = core_profiler(NULL);
    int closed = 0;
    counting_sink *c = attach_counting(p, &closed);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int ok = c->fork_children == 1 && c->exits == 0;
        sw_profiler_free(p); /* the sink is no longer attached: not closed here */
        ok = ok && closed == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(c->fork_children, 0);
    sw_profiler_free(p);
    assert_int_equal(closed, 1);
}

/* A process that exits without freeing its profiler: the core's atexit hook calls on_exit. */
static void test_exit_reaches_unfreed_sinks(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL); /* the child's exit flushes stdio: nothing of ours is printed twice */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        sw_profiler *p = NULL;
        static int closed;
        if (sw__profiler_new(NULL, &p) != 0)
            _exit(1);
        counting_sink *c = attach_counting(p, &closed);
        c->exit_fd = fds[1];
        exit(0); /* without sw_profiler_free */
    }
    close(fds[1]);
    char buf[8];
    ssize_t n = read(fds[0], buf, sizeof buf);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(n, 1);
    assert_int_equal(buf[0], 'e');
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_closes_every_sink_once),
        cmocka_unit_test(test_detached_sink_is_not_closed),
        cmocka_unit_test(test_full_ring_wakes_the_sink),
        cmocka_unit_test(test_fork_child_lets_go),
        cmocka_unit_test(test_exit_reaches_unfreed_sinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
