/*
 * signals.c — completing run files when the process gets SIGINT, SIGTERM or SIGHUP (batch
 * schedulers and closed terminals send SIGHUP).
 *
 * The handler never touches SQLite. It wakes every watched flusher through its pipe, waits
 * (bounded, 5 s) until each wrote its final transaction, then hands the signal to whatever
 * handler was installed before ours: calls it, ignores the signal if it was ignored, or
 * restores the default and re-raises so the exit status is the usual one. A SIGHUP ignored
 * when the first file is watched (nohup) is left ignored: it ends nothing.
 *
 * A file being completed by its owner (sw_profiler_free, Profiler.close) is not woken: the
 * closing thread blocks these signals until it is done (sw__signal_finishing_begin/end), and
 * a handler running on another thread waits for it, bounded like the rest.
 *
 * A merge's temporary files are removed by the handler before it hands the signal on
 * (sw__signal_temp_add), so an interrupted merge leaves nothing behind.
 *
 * fork(): the child forgets every watched pipe (they belong to the parent's flushers).
 * exit() is not handled here: the core's atexit hook reaches every sink (core/sink.h).
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WATCHED 64
/* How long a handler waits for the flushers: long enough for a final transaction on a
 * loaded node (under ASan on a CI machine at load 12, 2 s once ran out), short beside the
 * grace periods between SIGTERM and SIGKILL (Slurm, Kubernetes: 30 s). */
#define SIGNAL_WAIT_MS 5000

/* Watching and unwatching take this lock (never the signal handler). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* What the signal handler may touch: lock-free slots holding wake fds (-1 = empty). */
static atomic_int g_wake_fds[MAX_WATCHED];
static int g_done_pipe[2] = {-1, -1};
static atomic_uint g_signal_count;
static volatile sig_atomic_t g_last_signal;

#define NHANDLED 3
static const int HANDLED[NHANDLED] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction g_previous[NHANDLED];
static volatile sig_atomic_t g_in_handler;
static atomic_int g_finishing; /* files being completed by their owners right now */
/* Files that a signal removes before handing on (a merge's temporary file, its -wal, -shm):
 * strings owned by whoever added them, until removed. */
#define MAX_TEMP 8
static _Atomic(const char *) g_temp[MAX_TEMP];

/* Bytes on the done pipe: a flusher completed its file, or an owner completed one. */
#define DONE_FLUSHER 'd'
#define DONE_FINISH 'f'

void sw__signal_block(sigset_t *old) {
    sigset_t block;
    sigemptyset(&block);
    for (int i = 0; i < NHANDLED; i++)
        sigaddset(&block, HANDLED[i]);
    pthread_sigmask(SIG_BLOCK, &block, old);
}

unsigned sw__signal_count(void) {
    return atomic_load(&g_signal_count);
}
int sw__signal_last(void) {
    return g_last_signal;
}

static void tell_done(char byte) {
    if (g_done_pipe[1] < 0)
        return;
    ssize_t n = write(g_done_pipe[1], &byte, 1);
    (void)n; /* a full pipe means the handler already has more than it waits for */
}

void sw__signal_done(void) {
    tell_done(DONE_FLUSHER);
}

void sw__signal_finishing_begin(sigset_t *old) {
    sw__signal_block(old);
    atomic_fetch_add(&g_finishing, 1);
}

void sw__signal_finishing_end(const sigset_t *old) {
    atomic_fetch_sub(&g_finishing, 1);
    tell_done(DONE_FINISH);
    pthread_sigmask(SIG_SETMASK, old, NULL); /* a signal held meanwhile is delivered now */
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Hand the signal on as if we had never been installed. */
static void chain(int index, int signo, siginfo_t *info, void *ucontext) {
    const struct sigaction *prev = &g_previous[index];
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction)
            prev->sa_sigaction(signo, info, ucontext);
    } else if (prev->sa_handler == SIG_IGN) {
        return;
    } else if (prev->sa_handler == SIG_DFL) {
        /* Default action (terminate): restore it and re-raise; the signal is blocked while
         * we run, so it is delivered as soon as this handler returns. */
        sigaction(signo, prev, NULL);
        raise(signo);
    } else {
        prev->sa_handler(signo);
    }
}

static void on_signal(int signo, siginfo_t *info, void *ucontext) {
    /* A handler installed over ours that chains back to us must not loop. */
    if (g_in_handler)
        return;
    g_in_handler = 1;
    int saved_errno = errno;
    int index = 0;
    while (index < NHANDLED - 1 && HANDLED[index] != signo)
        index++;
    char sink[64];
    while (read(g_done_pipe[0], sink, sizeof sink) > 0) {
        /* stale acknowledgements from an earlier signal */
    }
    g_last_signal = signo;
    atomic_fetch_add(&g_signal_count, 1);
    int woken = 0;
    for (int i = 0; i < MAX_WATCHED; i++) {
        int fd = atomic_load(&g_wake_fds[i]);
        if (fd >= 0 && write(fd, "s", 1) == 1)
            woken++;
    }
    /* Wait for the flushers and for files being completed by their owners, bounded: a
     * flusher stuck on a lock held by the interrupted thread must not keep the process from
     * ending. */
    int64_t deadline = now_ms() + SIGNAL_WAIT_MS;
    while (woken > 0 || atomic_load(&g_finishing) > 0) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = g_done_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, left < 50 ? (int)left : 50) <= 0)
            continue;
        ssize_t n = read(g_done_pipe[0], sink, sizeof sink);
        for (ssize_t i = 0; i < n; i++)
            woken -= sink[i] == DONE_FLUSHER;
    }
    for (int i = 0; i < MAX_TEMP; i++) {
        const char *temp = atomic_load(&g_temp[i]);
        if (temp != NULL)
            unlink(temp); /* async-signal-safe */
    }
    chain(index, signo, info, ucontext);
    g_in_handler = 0;
    errno = saved_errno;
}

static void in_child(void) {
    /* The parent's flushers are not ours: forget their pipes. */
    pthread_mutex_init(&g_lock, NULL);
    for (int i = 0; i < MAX_WATCHED; i++)
        atomic_store(&g_wake_fds[i], -1);
    for (int i = 0; i < MAX_TEMP; i++) /* nor are the parent's temporary files */
        atomic_store(&g_temp[i], NULL);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_once_rc;

static void setup_once(void) {
    for (int i = 0; i < MAX_WATCHED; i++)
        atomic_store(&g_wake_fds[i], -1);
    if (pthread_atfork(NULL, NULL, in_child) != 0)
        g_once_rc = SW_ENOMEM;
}

/* The done pipe, made by the first watch that can (with g_lock held, before any handler is
 * ours): out of descriptors is said, and the next watch tries again. */
static int make_done_pipe(void) {
    if (g_done_pipe[0] >= 0)
        return 0;
    if (pipe2(g_done_pipe, O_NONBLOCK | O_CLOEXEC) == 0)
        return 0;
    return sw__error(errno == ENOMEM ? SW_ENOMEM : SW_EIO,
                     "cannot make the pipe its SIGINT/SIGTERM/SIGHUP handler waits on: %s",
                     strerror(errno));
}

/* Install our handlers, saving the ones in place. Also when a handler was installed over
 * ours since: it becomes the one we chain to. Called with g_lock held. */
static int install_handlers(void) {
    for (int i = 0; i < NHANDLED; i++) {
        struct sigaction current;
        if (sigaction(HANDLED[i], NULL, &current) != 0)
            return sw__error(SW_EIO, "cannot read the handler of signal %d: %s", HANDLED[i],
                             strerror(errno));
        if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_signal)
            continue;
        if (HANDLED[i] == SIGHUP && !(current.sa_flags & SA_SIGINFO) &&
            current.sa_handler == SIG_IGN)
            continue; /* nohup: a hangup ends nothing, so there is nothing to complete */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(HANDLED[i], &sa, &g_previous[i]) != 0)
            return sw__error(SW_EIO, "cannot handle signal %d: %s", HANDLED[i], strerror(errno));
    }
    return 0;
}

int sw__signal_watch(int wake_fd) {
    pthread_once(&g_once, setup_once);
    if (g_once_rc != 0)
        return g_once_rc;
    pthread_mutex_lock(&g_lock);
    int rc = make_done_pipe();
    if (rc == 0)
        rc = install_handlers();
    int slot = -1;
    for (int i = 0; rc == 0 && i < MAX_WATCHED && slot < 0; i++)
        if (atomic_load(&g_wake_fds[i]) < 0)
            slot = i;
    if (rc == 0 && slot < 0)
        rc = sw__error(SW_ELIMIT,
                       "%d run files are written at once already, the most whose "
                       "signals are handled",
                       MAX_WATCHED);
    if (rc == 0)
        atomic_store(&g_wake_fds[slot], wake_fd);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int sw__signal_temp_add(const char *path) {
    pthread_once(&g_once, setup_once);
    if (g_once_rc != 0)
        return g_once_rc;
    pthread_mutex_lock(&g_lock);
    int rc = make_done_pipe(), slot = -1;
    if (rc == 0)
        rc = install_handlers();
    for (int i = 0; rc == 0 && i < MAX_TEMP && slot < 0; i++)
        if (atomic_load(&g_temp[i]) == NULL)
            slot = i;
    if (rc == 0 && slot < 0)
        rc = sw__error(SW_ELIMIT, "%d temporary files are kept for removal on a signal already",
                       MAX_TEMP);
    if (rc == 0)
        atomic_store(&g_temp[slot], path);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void sw__signal_temp_remove(const char *path) {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_TEMP; i++)
        if (atomic_load(&g_temp[i]) == path)
            atomic_store(&g_temp[i], NULL);
    pthread_mutex_unlock(&g_lock);
}

void sw__signal_unwatch(int wake_fd) {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_WATCHED; i++)
        if (atomic_load(&g_wake_fds[i]) == wake_fd)
            atomic_store(&g_wake_fds[i], -1);
    pthread_mutex_unlock(&g_lock);
}
