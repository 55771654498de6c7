/*
 * ticker.c — the thread a sink runs beside the program (core.h): the run file's flusher, the
 * device sampler and the status line each call their work every period on one of these.
 *
 * The thread sleeps in poll(2) on a pipe: a byte written to it (sw__ticker_wake) runs the
 * tick at once, which a recording thread waiting on a full ring and a signal handler can both
 * do without blocking. Every signal is blocked on the thread, so the program's handlers run
 * on the program's own threads (Python runs them on its main one) and never on the thread a
 * SIGINT/SIGTERM handler waits for.
 */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

int sw__ticker_open(sw__ticker *t) {
    t->wake[0] = t->wake[1] = -1;
    t->running = 0;
    atomic_init(&t->stop, 0);
    if (pipe2(t->wake, O_NONBLOCK | O_CLOEXEC) == 0)
        return 0;
    t->wake[0] = t->wake[1] = -1;
    return sw__error(errno == ENOMEM ? SW_ENOMEM : SW_EIO,
                     "cannot make its thread's wake-up pipe: %s", strerror(errno));
}

static void *ticker_main(void *arg) {
    sw__ticker *t = arg;
    char drained[64];
    while (!atomic_load(&t->stop)) {
        struct pollfd pfd = {.fd = t->wake[0], .events = POLLIN};
        poll(&pfd, 1, t->period_ms);
        while (read(t->wake[0], drained, sizeof drained) > 0) {
        }
        if (atomic_load(&t->stop) || t->tick(t->ctx) != 0)
            break;
    }
    return NULL;
}

int sw__ticker_start(sw__ticker *t, int period_ms, int (*tick)(void *ctx), void *ctx) {
    t->period_ms = period_ms;
    t->tick = tick;
    t->ctx = ctx;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&t->thread, NULL, ticker_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) /* EAGAIN under `ulimit -u` or a cgroup's pids.max: said as such */
        return sw__error(err == ENOMEM ? SW_ENOMEM : SW_EIO, "cannot start its thread: %s",
                         strerror(err));
    t->running = 1;
    return 0;
}

void sw__ticker_wake(sw__ticker *t) {
    if (t->wake[1] < 0)
        return;
    int saved = errno; /* async-signal-safe: a handler's errno stays the program's */
    ssize_t n = write(t->wake[1], "x", 1); /* a full pipe already holds a wake-up */
    (void)n;
    errno = saved;
}

void sw__ticker_stop(sw__ticker *t) {
    if (!t->running)
        return;
    atomic_store(&t->stop, 1);
    sw__ticker_wake(t);
    pthread_join(t->thread, NULL);
    t->running = 0;
}

void sw__ticker_close(sw__ticker *t) {
    for (int i = 0; i < 2; i++) {
        if (t->wake[i] >= 0)
            close(t->wake[i]);
        t->wake[i] = -1;
    }
}
