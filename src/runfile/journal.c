/*
 * journal.c — the run file writer: a sink (core/sink.h) whose background flusher thread
 * drains the recorder's event rings into SQLite, one transaction per flush.
 *
 * Every flush_interval_ms the flusher writes new names, every drained step/counter/span, and
 * once a second (and at the end) the aggregates of a fresh snapshot. A SIGKILL therefore
 * loses at most the last interval of records and the last second of aggregates; the steps
 * table is complete up to the last flush.
 */
#include "journal.h"
#include "run_store.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AGGREGATE_PERIOD_NS 1000000000ull

/* Spans of one recording thread waiting to be packed into one row. */
typedef struct span_buffer {
    uint32_t thread;
    size_t n;
    sw_span_record spans[SW__SPAN_CHUNK_MAX];
} span_buffer;

typedef struct sw__journal {
    sw__sink sink;             /* first: the core hands this back to the ops below */
    sw_profiler *p;
    sw__store *store;
    int rank;
    uint32_t flush_ms;
    int wake[2];               /* a byte here wakes the flusher early */
    int signals_watched;       /* a SIGINT/SIGTERM writes on wake[1] (signals.c) */
    pthread_t thread;
    int thread_running;
    atomic_int stop;
    pthread_mutex_t lock;      /* the store: flusher vs. finish */
    int finished;              /* store closed, file complete */
    unsigned signals_seen;
    uint64_t last_aggregate_ns;
    uint32_t names_written[3]; /* actions, phases, counters already in the file */
    uint64_t lost_events;      /* drained but not written (a failed transaction) */
    int flush_rc;              /* the last flush's result, for tests and close */
    size_t nbuffers;
    span_buffer **buffers;
    sw__event *events;         /* what the last drain handed over */
    size_t nevents, events_cap;
    sw_fprofile *functions;    /* the function profile to keep (sw_run_add_functions) */
    int functions_dirty;       /* changed since it was last written */
} sw__journal;

/* ---- writing one flush ---- */

static int flush_spans(sw__journal *j, span_buffer *b) {
    int rc = sw__store_add_spans(j->store, j->rank, b->thread, b->spans, b->n);
    b->n = 0;
    return rc;
}

static span_buffer *buffer_for(sw__journal *j, uint32_t thread) {
    for (size_t i = 0; i < j->nbuffers; i++)
        if (j->buffers[i]->thread == thread)
            return j->buffers[i];
    span_buffer **grown = realloc(j->buffers, (j->nbuffers + 1) * sizeof *grown);
    if (grown == NULL)
        return NULL;
    j->buffers = grown;
    span_buffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->thread = thread;
    j->buffers[j->nbuffers++] = b;
    return b;
}

/* sw__drain holds the profiler's lock while it hands events over, so they are only copied
 * here (into a buffer reused across flushes) and written to SQLite after the lock is gone. */
static void collect(void *ctx, const sw__event *e) {
    sw__journal *j = ctx;
    if (j->nevents == j->events_cap) {
        size_t cap = j->events_cap ? j->events_cap * 2 : 1024;
        sw__event *grown = realloc(j->events, cap * sizeof *grown);
        if (grown == NULL) {
            j->lost_events++;
            return;
        }
        j->events = grown;
        j->events_cap = cap;
    }
    j->events[j->nevents++] = *e;
}

static int write_event(sw__journal *j, const sw__event *e) {
    switch (e->kind) {
    case SW__EVENT_STEP:
        return sw__store_add_step(j->store, j->rank, &e->u.step);
    case SW__EVENT_COUNTER:
        return sw__store_add_counter(j->store, j->rank, &e->u.counter);
    case SW__EVENT_SPAN: {
        span_buffer *b = buffer_for(j, e->u.span.thread);
        if (b == NULL)
            return SW_ENOMEM;
        b->spans[b->n++] = e->u.span;
        return b->n == SW__SPAN_CHUNK_MAX ? flush_spans(j, b) : 0;
    }
    }
    return 0;
}

/* Names are append-only in the profiler: write the ids added since the last flush. */
static int write_new_names(sw__journal *j) {
    static const char *const KIND[3] = {"action", "phase", "counter"};
    uint32_t counts[3] = {sw__action_count(j->p), sw__phase_count(j->p),
                          sw__counter_count(j->p)};
    for (int k = 0; k < 3; k++) {
        for (uint32_t id = j->names_written[k]; id < counts[k]; id++) {
            const char *name = k == 0   ? sw_action_name(j->p, id)
                               : k == 1 ? sw_phase_name(j->p, id)
                                        : sw__counter_name(j->p, id);
            int rc = sw__store_write_name(j->store, j->rank, KIND[k], id, name);
            if (rc != 0)
                return rc;
        }
        j->names_written[k] = counts[k];
    }
    return 0;
}

static int write_aggregates(sw__journal *j, int complete, const char *reason) {
    sw_snapshot *snap = NULL;
    int rc = sw_snapshot_take(j->p, &snap);
    if (rc != 0)
        return rc;
    snap->dropped_events += j->lost_events;
    rc = sw__store_write_snapshot(j->store, j->rank, snap, complete, reason);
    sw_snapshot_free(snap);
    j->last_aggregate_ns = sw_now_ns();
    return rc;
}

/* One transaction: names, drained events, and the aggregates when asked. Called with
 * j->lock held. */
static int flush(sw__journal *j, int aggregates, int complete, const char *reason) {
    int rc = sw__store_begin(j->store);
    if (rc == 0)
        rc = write_new_names(j);
    j->nevents = 0;
    sw__drain(j->p, collect, j);
    for (size_t i = 0; rc == 0 && i < j->nevents; i++)
        rc = write_event(j, &j->events[i]);
    for (size_t i = 0; rc == 0 && i < j->nbuffers; i++)
        rc = flush_spans(j, j->buffers[i]);
    if (rc == 0 && aggregates)
        rc = write_aggregates(j, complete, reason);
    int functions = j->functions_dirty;
    if (rc == 0 && functions)
        rc = sw__store_write_functions(j->store, j->rank, j->functions);
    if (rc == 0)
        rc = sw__store_commit(j->store);
    if (rc == 0 && functions)
        j->functions_dirty = 0;
    if (rc != 0) {
        /* Disk full or similar: what this flush drained is lost; count it, keep going. */
        sw__store_rollback(j->store);
        j->lost_events += j->nevents;
        for (size_t i = 0; i < j->nbuffers; i++)
            j->buffers[i]->n = 0;
        j->names_written[0] = j->names_written[1] = j->names_written[2] = 0;
    }
    j->flush_rc = rc;
    return rc;
}

static const char *signal_reason(int signo) {
    return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "signal";
}

static void *flusher_main(void *arg) {
    sw__journal *j = arg;
    char sink[64];
    while (!atomic_load(&j->stop)) {
        struct pollfd pfd = {.fd = j->wake[0], .events = POLLIN};
        poll(&pfd, 1, (int)j->flush_ms);
        while (read(j->wake[0], sink, sizeof sink) > 0) {
        }
        if (atomic_load(&j->stop))
            break;
        unsigned signals = sw__signal_count();
        pthread_mutex_lock(&j->lock);
        if (signals != j->signals_seen) {
            /* A SIGINT/SIGTERM handler waits for this: complete the file now. */
            j->signals_seen = signals;
            flush(j, 1, 1, signal_reason(sw__signal_last()));
            sw__signal_done();
        } else {
            int due = sw_now_ns() - j->last_aggregate_ns >= AGGREGATE_PERIOD_NS;
            flush(j, due, 0, NULL);
        }
        pthread_mutex_unlock(&j->lock);
    }
    return NULL;
}

/* ---- metadata ---- */

static char *options_json(const sw_options *o) {
    char *json = malloc(320);
    if (json == NULL)
        return NULL;
    snprintf(json, 320,
             "{\"warmup_steps\":%u,\"max_depth\":%u,\"timeline\":%s,\"ring_capacity\":%u,"
             "\"on_full\":\"%s\",\"flush_interval_ms\":%u,\"signal_handlers\":%s}",
             o->warmup_steps, o->max_depth ? o->max_depth : 64, o->timeline ? "true" : "false",
             o->ring_capacity ? o->ring_capacity : 65536,
             o->on_full == SW_FULL_BLOCK ? "block" : "drop",
             o->flush_interval_ms ? o->flush_interval_ms : 200,
             o->no_signal_handlers ? "false" : "true");
    return json;
}

static int write_start(sw__journal *j) {
    sw_snapshot *snap = NULL;
    int rc = sw_snapshot_take(j->p, &snap);
    if (rc != 0)
        return rc;
    const sw_options *o = sw__options(j->p);
    char *options = options_json(o);
    j->rank = snap->rank;
    sw__run_meta m = {.rank = snap->rank,
                      .world_size = snap->world_size,
                      .name = snap->name,
                      .host = snap->host,
                      .command = snap->command,
                      .pid = snap->pid,
                      .start_unix_ns = sw__origin_unix_ns(j->p),
                      .origin_ns = sw__origin_ns(j->p),
                      .warmup_steps = o->warmup_steps,
                      .timeline = o->timeline,
                      .options_json = options};
    rc = sw__store_begin(j->store);
    if (rc == 0)
        rc = sw__store_write_meta(j->store, &m);
    if (rc == 0)
        rc = sw__store_write_snapshot(j->store, j->rank, snap, 0, NULL);
    if (rc == 0)
        rc = sw__store_commit(j->store);
    else
        sw__store_rollback(j->store);
    free(options);
    sw_snapshot_free(snap);
    j->last_aggregate_ns = sw_now_ns();
    return rc;
}

/* ---- lifetime ---- */

static void free_journal(sw__journal *j) {
    sw_fprofile_free(j->functions);
    for (size_t i = 0; i < j->nbuffers; i++)
        free(j->buffers[i]);
    free(j->buffers);
    free(j->events);
    if (j->wake[0] >= 0)
        close(j->wake[0]);
    if (j->wake[1] >= 0)
        close(j->wake[1]);
    free(j);
}

/* Start the flusher with SIGINT/SIGTERM blocked, so a signal never lands on the thread the
 * handler waits for. */
static int start_flusher(sw__journal *j) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int err = pthread_create(&j->thread, NULL, flusher_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return SW_ENOMEM;
    j->thread_running = 1;
    return 0;
}

/* The sink's wake op (a thread waits on a full ring), and how finish stops the flusher:
 * drain now instead of at the next period. */
static void wake_flusher(sw__sink *sink) {
    sw__journal *j = (sw__journal *)sink;
    ssize_t n = write(j->wake[1], "x", 1); /* a full pipe already holds a wake-up */
    (void)n;
}

/* Complete the file now (final aggregates, complete=1) and stop the flusher; the struct
 * stays valid until it is freed. */
static void finish(sw__journal *j, const char *reason) {
    if (j->signals_watched) {
        sw__signal_unwatch(j->wake[1]);
        j->signals_watched = 0;
    }
    if (j->thread_running) {
        atomic_store(&j->stop, 1);
        wake_flusher(&j->sink);
        pthread_join(j->thread, NULL);
        j->thread_running = 0;
    }
    pthread_mutex_lock(&j->lock);
    if (!j->finished) {
        flush(j, 1, 1, reason);
        sw__store_close(j->store);
        j->store = NULL;
        j->finished = 1;
    }
    pthread_mutex_unlock(&j->lock);
}

/* ---- the sink's other ops ---- */

static void exit_unfreed(sw__sink *sink) {
    finish((sw__journal *)sink, "exit (profiler not freed)");
}

static void close_sink(sw__sink *sink) {
    sw__journal *j = (sw__journal *)sink;
    finish(j, "exit");
    pthread_mutex_destroy(&j->lock);
    free_journal(j);
}

static void forget_in_child(sw__sink *sink) {
    /* The parent's SQLite connection must not be used or closed here (closing could
     * checkpoint or remove the parent's WAL); the store's memory is leaked on purpose. The
     * flusher thread does not exist in the child. */
    free_journal((sw__journal *)sink);
}

static const sw__sink_ops journal_ops = {
    .wake = wake_flusher,
    .on_exit = exit_unfreed,
    .on_close = close_sink,
    .on_fork_child = forget_in_child,
};

int sw_run_add_functions(sw_profiler *p, const sw_fprofile *fp) {
    if (p == NULL || fp == NULL)
        return SW_EINVAL;
    sw__journal *j = (sw__journal *)sw__sink_find(p, &journal_ops);
    if (j == NULL)
        return SW_ENOTFOUND;
    pthread_mutex_lock(&j->lock);
    int rc = j->finished ? SW_ESTATE : 0;
    if (rc == 0 && j->functions == NULL)
        rc = sw_fprofile_new(&j->functions);
    if (rc == 0)
        rc = sw_fprofile_merge_into(j->functions, fp);
    if (rc == 0)
        j->functions_dirty = 1;
    pthread_mutex_unlock(&j->lock);
    if (rc == 0)
        wake_flusher(&j->sink);
    return rc;
}

int sw__journal_open(sw_profiler *p, const char *path) {
    if (p == NULL || path == NULL)
        return SW_EINVAL;
    sw__journal *j = calloc(1, sizeof *j);
    if (j == NULL)
        return SW_ENOMEM;
    j->sink.ops = &journal_ops;
    j->p = p;
    j->wake[0] = j->wake[1] = -1;
    const sw_options *o = sw__options(p);
    j->flush_ms = o->flush_interval_ms ? o->flush_interval_ms : 200;
    pthread_mutex_init(&j->lock, NULL);
    int rc = pipe2(j->wake, O_NONBLOCK | O_CLOEXEC) == 0 ? 0 : SW_EIO;
    if (rc == 0)
        rc = sw__store_create(path, &j->store);
    if (rc == 0)
        rc = write_start(j);
    if (rc == 0 && !o->no_signal_handlers) {
        rc = sw__signal_watch(j->wake[1]);
        j->signals_watched = rc == 0;
    }
    if (rc == 0) {
        sw__events_enable(p);
        rc = start_flusher(j);
    }
    if (rc != 0) {
        if (j->signals_watched)
            sw__signal_unwatch(j->wake[1]);
        sw__store_close(j->store);
        pthread_mutex_destroy(&j->lock);
        free_journal(j);
        return rc;
    }
    sw__sink_attach(p, &j->sink);
    return 0;
}
