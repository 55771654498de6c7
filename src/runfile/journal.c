/*
 * journal.c — the run file writer: a sink (core/sink.h) whose background flusher thread
 * drains the recorder's event rings into SQLite, one transaction per flush.
 *
 * Every flush_interval_ms the flusher writes new names, every drained step/counter/span, and
 * once a second (and at the end) the aggregates of a fresh snapshot. A SIGKILL therefore
 * loses at most the last interval of records and the last second of aggregates; the steps
 * table is complete up to the last flush.
 *
 * Never hurting the run (docs/reliability.md). Nothing here stops training or raises:
 *   - a file that cannot be created: one warning, and the profiler goes on without one;
 *   - a flush that fails (disk full, I/O error): rolled back, its events counted as dropped,
 *     one warning naming the cause; the next flushes try again, and a line says when
 *     writing resumed. The aggregates are a snapshot of everything, so they catch up whole;
 *   - the file removed or replaced underneath (checked once a second): a new file starts at
 *     the path, and the events the lost one held are counted as dropped.
 * Accounting stays exact: what the file holds plus its dropped_events is what was recorded.
 *
 * Fork: before_fork waits until the flusher is out of SQLite (it holds the journal's lock
 * for every SQLite call), so the child never inherits a SQLite mutex held by a thread it
 * does not have.
 */
#include "journal.h"
#include "run_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGGREGATE_PERIOD_NS 1000000000ull
#define CHECK_PERIOD_NS 1000000000ull
#define MAX_WARNINGS 20 /* lines about one file, at most: a flapping disk must not flood */

typedef struct sw__journal {
    sw__sink sink; /* first: the core hands this back to the ops below */
    sw_profiler *p;
    char *path;
    sw__store *store;  /* NULL while there is no file to write */
    atomic_int status; /* 0 while writing, else why not (sw_profiler_run_file) */
    int rank;
    uint32_t flush_ms;
    sw__ticker flusher;   /* the flusher's thread; a byte on its wake[1] runs it early */
    int signals_watched;  /* a SIGINT/SIGTERM writes on flusher.wake[1] (signals.c) */
    pthread_mutex_t lock; /* the store and every SQLite call: flusher, finish, fork */
    int finished;         /* store closed, file complete */
    unsigned signals_seen;
    uint64_t last_aggregate_ns;
    uint64_t last_check_ns;
    uint32_t names_written[3]; /* actions, phases, counters already in the file */
    uint64_t written_events;   /* events in the current file */
    uint64_t lost_events;      /* drained but not in the file: failed flushes, a lost file */
    uint64_t lost_at_failure;  /* lost_events when the current failure began */
    int failing;               /* the last flush failed (warned; waiting to resume) */
    char cause[256];           /* why the last write failed */
    char why[640];             /* while status != 0: the sentence said, naming the file and
                                  the cause (sw_profiler_run_file_error) */
    int warnings;
    sw__event *events; /* what the last drain handed over */
    size_t nevents, events_cap;
    size_t nwindow_spans; /* of them, spans of slow steps' windows (not in the accounting) */
    uint32_t *order;      /* the spans among them, grouped by thread (as long as events) */
    size_t order_cap;
    sw_span_record *chunk;     /* one chunk of one thread's spans, packed into one row */
    sw_fprofile *functions;    /* the function profile to keep (sw_run_add_functions) */
    int functions_dirty;       /* changed since it was last written (or the file is new) */
    struct rank_round *rounds; /* cross-rank aggregations not written yet (sw_run_add_ranks) */
    int next_round;
    int world_size;          /* the metadata row's, as the file was made */
    int64_t clock_offset_ns; /* sw_run_set_clock_offset */
    int clock_offset_set, clock_offset_dirty;
    uint64_t window;               /* the slow step the next window spans belong to (run_slow.c) */
    int windows_added;             /* window spans written in this flush: bound the windows */
    uint32_t thread_names_written; /* the core's naming counter when they were last written */
    int thread_names_rc;
} sw__journal;

/* One cross-rank aggregation waiting for the next flush. */
typedef struct rank_round {
    struct rank_round *next;
    int round, final, world_size;
    uint64_t step;
    size_t payload_size;
    unsigned char payloads[]; /* world_size * payload_size */
} rank_round;

static const sw__sink_ops journal_ops;

/* ---- saying what went wrong (stderr, bounded) ---- */

static void say(sw__journal *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(sw__journal *j, const char *fmt, ...) {
    if (j->warnings++ >= MAX_WARNINGS)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sw__warn("run file %s: %s", j->path, line);
}

/* Keep the cause of the failure that just happened, in the system's words when it has them
 * ("No space left on device" rather than SQLite's "database or disk is full"): taken at once,
 * before a rollback or a retry replaces it. */
static void keep_cause(sw__journal *j) {
    int err = errno; /* the failed write's, when SQLite's last call was it */
    const char *why = sw_last_error();
    if (j->store != NULL) {
        int code = sqlite3_extended_errcode(j->store->db) & 0xff;
        int sys = sqlite3_system_errno(j->store->db);
        why = code == SQLITE_FULL                ? strerror(ENOSPC)
              : sys != 0                         ? strerror(sys)
              : code == SQLITE_IOERR && err != 0 ? strerror(err)
                                                 : sqlite3_errmsg(j->store->db);
    }
    snprintf(j->cause, sizeof j->cause, "%s", why);
}

static void note_failure(sw__journal *j, int rc) {
    atomic_store(&j->status, rc);
    snprintf(j->why, sizeof j->why, "%s: cannot write (%s)", j->path, j->cause);
    if (j->failing)
        return;
    j->failing = 1;
    j->lost_at_failure = j->lost_events;
    say(j,
        "cannot write (%s); training goes on, events are counted as dropped (%llu so far) "
        "and writing resumes when it can",
        j->cause, (unsigned long long)j->lost_events);
}

static void note_success(sw__journal *j) {
    atomic_store(&j->status, 0);
    j->why[0] = '\0';
    if (!j->failing)
        return;
    j->failing = 0;
    say(j, "writing again; %llu events were dropped while it could not",
        (unsigned long long)(j->lost_events - j->lost_at_failure));
}

/* ---- writing one flush ---- */

/* sw__drain holds the profiler's lock while it hands events over, so they are only copied
 * here (into a buffer reused across flushes) and written to SQLite after the lock is gone. */
static void collect(void *ctx, const sw__event *e) {
    sw__journal *j = ctx;
    /* A slow step's window is kept as best it can be, outside the events' accounting: a
     * window cut short loses nothing recorded (its spans are in the statistics). */
    int window = e->kind == SW__EVENT_WINDOW_SPAN;
    if (sw__grow(&j->events, sizeof *j->events, &j->events_cap, j->nevents + 1, 1024) != 0 ||
        sw__grow(&j->order, sizeof *j->order, &j->order_cap, j->nevents + 1, 1024) != 0) {
        j->lost_events += !window;
        return;
    }
    j->events[j->nevents++] = *e;
    j->nwindow_spans += window;
}

/* The events of this flush that the accounting counts (all but window spans). */
static size_t counted(const sw__journal *j) {
    return j->nevents - j->nwindow_spans;
}

static int write_event(sw__journal *j, const sw__event *e) {
    int rc;
    switch (e->kind) {
    case SW__EVENT_STEP:
        rc = sw__store_add_step(j->store, j->rank, &e->u.step);
        if (rc == 0 && e->u.step.cause != SW_CAUSE_NONE) {
            rc = sw__store_add_slow_step(j->store, j->rank, &e->u.step);
            j->window = e->u.step.step; /* its window's spans, if any, come next */
        }
        return rc;
    case SW__EVENT_WINDOW_SPAN:
        j->windows_added = 1;
        return sw__store_add_window_span(j->store, j->rank, j->window, &e->u.span);
    case SW__EVENT_COUNTER:
        return sw__store_add_counter(j->store, j->rank, &e->u.counter);
    case SW__EVENT_SPAN:
        return 0; /* written by write_spans, grouped by thread */
    }
    return 0;
}

/* Span events in thread order, and in drain order within a thread (qsort_r's comparison). */
static int by_thread(const void *a, const void *b, void *ctx) {
    const sw__event *events = ctx;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    uint32_t ta = events[ia].u.span.thread, tb = events[ib].u.span.thread;
    if (ta != tb)
        return ta < tb ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* Spans are stored packed, one row per chunk of one thread's spans (run_store.c): this
 * flush's spans grouped by thread, each group written in chunks. No buffer per thread is
 * kept between flushes, so memory follows what one flush holds, however many threads
 * there ever were. */
static int write_spans(sw__journal *j) {
    size_t n = 0;
    for (size_t i = 0; i < j->nevents; i++)
        if (j->events[i].kind == SW__EVENT_SPAN)
            j->order[n++] = (uint32_t)i;
    if (n > 1)
        qsort_r(j->order, n, sizeof *j->order, by_thread, j->events);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n;) {
        uint32_t thread = j->events[j->order[i]].u.span.thread;
        size_t k = 0;
        while (i < n && k < SW__SPAN_CHUNK_MAX && j->events[j->order[i]].u.span.thread == thread)
            j->chunk[k++] = j->events[j->order[i++]].u.span;
        rc = sw__store_add_spans(j->store, j->rank, thread, j->chunk, k);
    }
    return rc;
}

/* Names are append-only in the profiler: write the ids added since the last flush. */
static int write_new_names(sw__journal *j) {
    static const char *const KIND[3] = {"action", "phase", "counter"};
    uint32_t counts[3] = {sw__action_count(j->p), sw__phase_count(j->p), sw__counter_count(j->p)};
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
    if (rc == 0)
        rc = sw__store_write_slow_judged(j->store, j->rank, snap->slow.judged);
    if (rc == 0 && snap->world_size != j->world_size) /* learned since: sw_set_world_size */
        rc = sw__store_write_world_size(j->store, j->rank, snap->world_size);
    sw_snapshot_free(snap);
    j->last_aggregate_ns = sw_now_ns();
    return rc;
}

static void write_thread_name(void *ctx, uint32_t thread, const char *name) {
    sw__journal *j = ctx;
    if (j->thread_names_rc == 0)
        j->thread_names_rc = sw__store_write_thread(j->store, j->rank, thread, name);
}

/* The names of the threads that came or were named since the names were last written
 * (thread_names_written 0: every name, for a new file or after a failed flush). Only those:
 * with thousands of short-lived threads, rewriting every name at every flush grew the WAL. */
static int write_thread_names(sw__journal *j) {
    if (sw__thread_names_changed(j->p) == j->thread_names_written)
        return 0;
    j->thread_names_rc = 0;
    uint32_t changed;
    sw__thread_names(j->p, j->thread_names_written, &changed, write_thread_name, j);
    if (j->thread_names_rc == 0)
        j->thread_names_written = changed;
    return j->thread_names_rc;
}

/* The clock offset and the aggregation rounds added since the last flush; they stay pending
 * until a transaction holding them commits (ranks_written). */
static int write_ranks(sw__journal *j) {
    int rc = 0;
    if (j->clock_offset_dirty)
        rc = sw__store_write_clock_offset(j->store, j->rank, j->clock_offset_ns);
    for (const rank_round *r = j->rounds; rc == 0 && r; r = r->next)
        rc = sw__store_add_rank_round(j->store, j->rank, r->round, r->step, r->final, r->world_size,
                                      r->payload_size, r->payloads);
    return rc;
}

static void free_rounds(rank_round *r) {
    while (r) {
        rank_round *next = r->next;
        free(r);
        r = next;
    }
}

static void ranks_written(sw__journal *j) {
    j->clock_offset_dirty = 0;
    free_rounds(j->rounds);
    j->rounds = NULL;
}

/* Drain the rings and write what they held, in one transaction with the aggregates when
 * asked. Without a file, or when the transaction fails, the drained events are counted as
 * dropped. Called with j->lock held. */
static int flush(sw__journal *j, int aggregates, int complete, const char *reason) {
    j->nevents = 0;
    j->nwindow_spans = 0;
    sw__drain(j->p, collect, j); /* always: full rings would drop newer events instead */
    if (j->store == NULL) {
        j->lost_events += counted(j);
        return atomic_load(&j->status);
    }
    int rc = sw__store_begin(j->store);
    if (rc == 0)
        rc = write_new_names(j);
    for (size_t i = 0; rc == 0 && i < j->nevents; i++)
        rc = write_event(j, &j->events[i]);
    if (rc == 0)
        rc = write_spans(j);
    if (rc == 0 && j->windows_added)
        rc = sw__store_bound_windows(j->store, j->rank);
    j->windows_added = 0;
    if (rc == 0 && aggregates)
        rc = write_aggregates(j, complete, reason);
    if (rc == 0)
        rc = write_thread_names(j);
    int functions = j->functions_dirty;
    if (rc == 0 && functions)
        rc = sw__store_write_functions(j->store, j->rank, j->functions);
    if (rc == 0)
        rc = write_ranks(j);
    if (rc == 0)
        rc = sw__store_commit(j->store);
    if (rc == 0 && functions)
        j->functions_dirty = 0;
    if (rc == 0)
        ranks_written(j);
    if (rc != 0) {
        /* Disk full or similar: what this flush drained is lost; count it, keep going. */
        keep_cause(j);
        sw__store_rollback(j->store);
        j->lost_events += counted(j);
        j->names_written[0] = j->names_written[1] = j->names_written[2] = 0;
        j->thread_names_written = 0; /* written again by the next flush */
        note_failure(j, rc);
        return rc;
    }
    j->written_events += counted(j);
    note_success(j);
    return 0;
}

/* ---- the file itself ---- */

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

/* A first snapshot in the fresh file (its metadata came with it: sw__store_create). */
static int write_start(sw__journal *j, const sw_snapshot *snap) {
    int rc = sw__store_begin(j->store);
    if (rc == 0)
        rc = sw__store_write_snapshot(j->store, j->rank, snap, 0, NULL);
    if (rc == 0)
        rc = sw__store_commit(j->store);
    else
        sw__store_rollback(j->store);
    j->last_aggregate_ns = sw_now_ns();
    return rc;
}

/* Create the file at j->path, its metadata in it from the first byte, and write its start;
 * on failure there is no store and the status says why (sw_last_error has the sentence). */
static int open_file(sw__journal *j) {
    sw_snapshot *snap = NULL;
    int rc = sw_snapshot_take(j->p, &snap);
    const sw_options *o = sw__options(j->p);
    char *options = rc == 0 ? options_json(o) : NULL;
    if (rc == 0) {
        j->rank = snap->rank;
        j->world_size = snap->world_size;
        snap->dropped_events += j->lost_events;
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
                          .options_json = options,
                          .local_rank = snap->local_rank};
        rc = sw__store_create(j->path, &m, &j->store);
    }
    if (rc == 0) {
        rc = write_start(j, snap);
        if (rc != 0) {
            keep_cause(j);
            sw__error(rc, "%s: %s", j->path, j->cause);
            sw__store_close(j->store);
            sw__run_file_remove(j->path); /* ours, just created, and useless */
            j->store = NULL;
        }
    }
    free(options);
    sw_snapshot_free(snap);
    j->names_written[0] = j->names_written[1] = j->names_written[2] = 0;
    j->written_events = 0;
    j->functions_dirty = j->functions != NULL;   /* a new file gets the profile kept so far */
    j->clock_offset_dirty = j->clock_offset_set; /* and the clock offset and thread names */
    j->thread_names_written = 0;
    atomic_store(&j->status, rc);
    return rc;
}

/* Is the file we write still the one at the path? Removed (or moved away, or replaced by
 * another file) means what it holds is out of every reader's reach. */
static int file_is_gone(const sw__journal *j) {
    struct stat ours, there;
    if (fstat(j->store->lock_fd, &ours) != 0)
        return 0;
    return ours.st_nlink == 0 || stat(j->path, &there) != 0 || there.st_ino != ours.st_ino ||
           there.st_dev != ours.st_dev;
}

/* Once a second: a file removed underneath is replaced by a new one at the path (what the
 * lost file held is counted as dropped); a file that could not be made again is retried. */
static void check_file(sw__journal *j) {
    uint64_t now = sw_now_ns();
    if (now - j->last_check_ns < CHECK_PERIOD_NS)
        return;
    j->last_check_ns = now;
    if (j->store != NULL && !file_is_gone(j))
        return;
    if (j->store != NULL) {
        say(j,
            "was removed while the run went on: a new one starts there, and the %llu "
            "events the removed one held are counted as dropped",
            (unsigned long long)j->written_events);
        j->lost_events += j->written_events;
        sw__store_close(j->store);
        j->store = NULL;
        j->failing = 0;
    }
    if (open_file(j) == 0) {
        note_success(j);
    } else {
        keep_cause(j);
        note_failure(j, atomic_load(&j->status));
    }
}

static const char *signal_reason(int signo) {
    return signo == SIGINT    ? "SIGINT"
           : signo == SIGTERM ? "SIGTERM"
           : signo == SIGHUP  ? "SIGHUP"
                              : "signal";
}

/* One round of the flusher (the ticker's tick, every flush_ms or when woken). */
static int flusher_tick(void *arg) {
    sw__journal *j = arg;
    unsigned signals = sw__signal_count();
    pthread_mutex_lock(&j->lock);
    check_file(j);
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
    return 0;
}

/* ---- lifetime ---- */

static void free_journal(sw__journal *j) {
    sw_fprofile_free(j->functions);
    free_rounds(j->rounds);
    free(j->events);
    free(j->order);
    free(j->chunk);
    free(j->path);
    sw__ticker_close(&j->flusher);
    free(j);
}

/* The sink's wake op (a thread waits on a full ring), and how finish stops the flusher:
 * drain now instead of at the next period. */
static void wake_flusher(sw__sink *sink) {
    sw__ticker_wake(&((sw__journal *)sink)->flusher);
}

/* Complete the file now (final aggregates, complete=1) and stop the flusher; the struct
 * stays valid until it is freed. */
static void finish(sw__journal *j, const char *reason) {
    /* A signal arriving now waits until the file is complete (signals.c). */
    sigset_t old;
    sw__signal_finishing_begin(&old);
    if (j->signals_watched) {
        sw__signal_unwatch(j->flusher.wake[1]);
        j->signals_watched = 0;
    }
    sw__ticker_stop(&j->flusher);
    pthread_mutex_lock(&j->lock);
    if (!j->finished && j->store != NULL) {
        if (flush(j, 1, 1, reason) != 0)
            say(j,
                "the run ended while it could not be written (%s): it stays incomplete, "
                "%llu events dropped",
                j->cause, (unsigned long long)j->lost_events);
        sw__store_close(j->store);
        j->store = NULL;
    }
    j->finished = 1;
    pthread_mutex_unlock(&j->lock);
    sw__signal_finishing_end(&old);
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

/* fork: the flusher holds j->lock around every SQLite call, so holding it across fork means
 * no SQLite mutex is held by a thread the child will not have. */
static void before_fork(sw__sink *sink) {
    pthread_mutex_lock(&((sw__journal *)sink)->lock);
}

static void after_fork(sw__sink *sink) {
    pthread_mutex_unlock(&((sw__journal *)sink)->lock);
}

static void forget_in_child(sw__sink *sink) {
    /* The parent's SQLite connection must not be used or closed here (closing could
     * checkpoint or remove the parent's WAL); the store's connection is leaked on purpose,
     * the child's copy of the lock's descriptor closed. The flusher thread does not exist
     * in the child; j->lock is held (before_fork) and goes with the struct. */
    sw__journal *j = (sw__journal *)sink;
    sw__store_forget(j->store);
    free_journal(j);
}

static const sw__sink_ops journal_ops = {
    .wake = wake_flusher,
    .on_exit = exit_unfreed,
    .on_close = close_sink,
    .on_fork_child = forget_in_child,
    .before_fork = before_fork,
    .after_fork = after_fork,
};

/* The journal of p under its lock, or NULL and why not in *rc: SW_ENOTFOUND without one;
 * once finished, closed (SW_ESTATE) or never had a file (why not: its status). */
static sw__journal *lock_journal(sw_profiler *p, int *rc) {
    sw__journal *j = p ? (sw__journal *)sw__sink_find(p, &journal_ops) : NULL;
    *rc = p == NULL ? SW_EINVAL : j == NULL ? SW_ENOTFOUND : 0;
    if (j == NULL)
        return NULL;
    pthread_mutex_lock(&j->lock);
    int status = atomic_load(&j->status);
    if (j->finished) {
        pthread_mutex_unlock(&j->lock);
        *rc = status != 0 ? status : SW_ESTATE;
        return NULL;
    }
    return j;
}

int sw_run_add_functions(sw_profiler *p, const sw_fprofile *fp) {
    if (fp == NULL)
        return SW_EINVAL;
    int rc;
    sw__journal *j = lock_journal(p, &rc);
    if (j == NULL)
        return rc;
    if (j->functions == NULL)
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

int sw_run_add_ranks(sw_profiler *p, const void *payloads, size_t payload_size, int world_size,
                     int final) {
    if (p == NULL || payloads == NULL || payload_size == 0 || world_size < 1)
        return SW_EINVAL;
    size_t bytes = payload_size * (size_t)world_size;
    if (bytes / (size_t)world_size != payload_size || bytes > (size_t)1 << 30)
        return SW_EINVAL;
    rank_round *r = malloc(sizeof *r + bytes);
    if (r == NULL)
        return SW_ENOMEM;
    *r = (rank_round){.final = final != 0,
                      .world_size = world_size,
                      .step = sw_step_count(p),
                      .payload_size = payload_size};
    memcpy(r->payloads, payloads, bytes);
    int rc;
    sw__journal *j = lock_journal(p, &rc);
    if (j == NULL) {
        free(r);
        return rc;
    }
    r->round = j->next_round++;
    rank_round **tail = &j->rounds;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    pthread_mutex_unlock(&j->lock);
    wake_flusher(&j->sink);
    return 0;
}

int sw_run_set_clock_offset(sw_profiler *p, int64_t offset_ns) {
    int rc;
    sw__journal *j = lock_journal(p, &rc);
    if (j == NULL)
        return rc;
    j->clock_offset_ns = offset_ns;
    j->clock_offset_set = j->clock_offset_dirty = 1;
    pthread_mutex_unlock(&j->lock);
    wake_flusher(&j->sink);
    return 0;
}

int sw__journal_open(sw_profiler *p, const char *path, int quiet_if_busy) {
    if (p == NULL || path == NULL)
        return SW_EINVAL;
    sw__journal *j = calloc(1, sizeof *j);
    if (j == NULL)
        return SW_ENOMEM;
    j->sink.ops = &journal_ops;
    j->p = p;
    j->flusher.wake[0] = j->flusher.wake[1] = -1; /* no pipe yet: made once the file is */
    const sw_options *o = sw__options(p);
    j->flush_ms = o->flush_interval_ms ? o->flush_interval_ms : 200;
    pthread_mutex_init(&j->lock, NULL);
    j->path = sw__strdup(path);
    j->chunk = malloc(SW__SPAN_CHUNK_MAX * sizeof *j->chunk);
    if (j->path == NULL || j->chunk == NULL) {
        free_journal(j);
        return SW_ENOMEM;
    }
    /* Each failure below is said with the file's path and its cause (out of descriptors:
     * "Too many open files"; no thread: "Resource temporarily unavailable"). */
    int rc = open_file(j);
    if (rc == 0)
        rc = sw__error_about(sw__ticker_open(&j->flusher), path);
    if (rc == 0 && !o->no_signal_handlers) {
        rc = sw__error_about(sw__signal_watch(j->flusher.wake[1]), path);
        j->signals_watched = rc == 0;
    }
    if (rc == 0) {
        sw__events_enable(p);
        rc = sw__error_about(sw__ticker_start(&j->flusher, (int)j->flush_ms, flusher_tick, j),
                             path);
    }
    if (rc != 0 && j->store != NULL) { /* made, but no flusher: remove what is ours */
        if (j->signals_watched)
            sw__signal_unwatch(j->flusher.wake[1]);
        j->signals_watched = 0;
        sw__store_close(j->store);
        sw__run_file_remove(path);
        j->store = NULL;
    }
    if (rc != 0) {
        /* The profiler goes on without a file; the sink stays to say why (status). */
        atomic_store(&j->status, rc);
        j->finished = 1;
        sw__error_about(rc, path); /* never a bare "input/output error" */
        snprintf(j->why, sizeof j->why, "%s", sw_last_error());
        if (!(quiet_if_busy && rc == SW_EBUSY))
            sw__warn("run file not written: %s; training goes on without it", sw_last_error());
    }
    sw__sink_attach(p, &j->sink);
    return rc;
}

char *sw_profiler_run_file_error(sw_profiler *p, char *buf, size_t size) {
    if (buf == NULL || size == 0)
        return buf;
    buf[0] = '\0';
    sw__journal *j = (sw__journal *)sw__sink_find(p, &journal_ops);
    if (j == NULL)
        return buf;
    pthread_mutex_lock(&j->lock); /* the flusher writes it under the lock */
    if (atomic_load(&j->status) != 0)
        snprintf(buf, size, "%s", j->why);
    pthread_mutex_unlock(&j->lock);
    return buf;
}

int sw_profiler_run_file(sw_profiler *p, const char **path) {
    if (path != NULL)
        *path = NULL;
    sw__journal *j = (sw__journal *)sw__sink_find(p, &journal_ops);
    if (j == NULL)
        return p == NULL ? SW_EINVAL : SW_ENOTFOUND;
    if (path != NULL)
        *path = j->path;
    return atomic_load(&j->status);
}
