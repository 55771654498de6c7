/*
 * recorder_process.c — every live profiler of the process, so that fork and exit reach them.
 *
 * Fork. A pthread_atfork child handler empties every profiler in the child and lets go of
 * its sinks, so DataLoader workers never write into the parent's run file. Exit. An atexit
 * hook has the sinks of profilers never freed complete their output.
 */
#include "recorder.h"

#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_profiler *live_profilers;
static _Atomic uint64_t next_generation = 1;
static pthread_once_t process_hooks_once = PTHREAD_ONCE_INIT;

static void reset_after_fork(sw_profiler *p);

/* The sinks that got before_fork, to get after_fork in the parent (the forking thread
 * holds live_lock from prepare to parent, so one fork at a time uses these). */
#define SW__FORK_SINKS_MAX 64
static sw__sink *forking_sinks[SW__FORK_SINKS_MAX];
static size_t nforking_sinks;

static void atfork_prepare(void) {
    pthread_mutex_lock(&live_lock);
    /* Sinks first, before the profilers' locks: a sink's flusher may need them to finish
     * what it is doing (the run file drains under p->lock). */
    nforking_sinks = 0;
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        for (sw__sink *s = __atomic_load_n(&p->sinks, __ATOMIC_ACQUIRE); s; s = s->next) {
            if (s->ops->before_fork == NULL || nforking_sinks == SW__FORK_SINKS_MAX)
                continue;
            s->ops->before_fork(s);
            forking_sinks[nforking_sinks++] = s;
        }
    }
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_lock(&p->lock);
        pthread_mutex_lock(&p->counter_lock);
    }
}

static void atfork_parent(void) {
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_unlock(&p->counter_lock);
        pthread_mutex_unlock(&p->lock);
    }
    for (size_t i = 0; i < nforking_sinks; i++)
        if (forking_sinks[i]->ops->after_fork)
            forking_sinks[i]->ops->after_fork(forking_sinks[i]);
    nforking_sinks = 0;
    pthread_mutex_unlock(&live_lock);
}

static void atfork_child(void) {
    pthread_mutex_init(&live_lock, NULL);
    nforking_sinks = 0;
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_mutex_init(&p->counter_lock, NULL);
        reset_after_fork(p);
    }
}

/* The process exits with profilers never freed: their sinks complete their output. */
static void at_exit(void) {
    pthread_mutex_lock(&live_lock);
    for (sw_profiler *p = live_profilers; p; p = p->next_live)
        for (sw__sink *s = p->sinks; s; s = s->next)
            if (s->ops->on_exit)
                s->ops->on_exit(s);
    pthread_mutex_unlock(&live_lock);
}

static void install_process_hooks(void) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atexit(at_exit);
}

uint64_t sw__new_generation(void) {
    return atomic_fetch_add(&next_generation, 1);
}

void sw__live_add(sw_profiler *p) {
    pthread_once(&process_hooks_once, install_process_hooks);
    pthread_mutex_lock(&live_lock);
    p->next_live = live_profilers;
    live_profilers = p;
    pthread_mutex_unlock(&live_lock);
}

void sw__live_remove(sw_profiler *p) {
    pthread_mutex_lock(&live_lock);
    for (sw_profiler **link = &live_profilers; *link; link = &(*link)->next_live) {
        if (*link == p) {
            *link = p->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

/* ---- fork ------------------------------------------------------------------------------------ */

/* In the child: the only thread left is the one that forked. Start from empty statistics,
 * keep the names, and let go of the sinks (what they hold is the parent's). */
static void reset_after_fork(sw_profiler *p) {
    while (p->sinks != NULL) {
        sw__sink *s = p->sinks;
        p->sinks = s->next;
        s->next = NULL;
        if (s->ops->on_fork_child)
            s->ops->on_fork_child(s);
    }
    atomic_store(&p->events_on, 0);
    p->hook_fn = NULL; /* its sink is gone */
    for (uint32_t i = 0; i < SW__MAX_ACTIONS; i++)
        p->action_watched[i] &= (uint8_t)~SW__WATCH_HOOK;
    sw__thread *t = p->threads;
    while (t) {
        sw__thread *next = t->next;
        sw__free_thread(t);
        t = next;
    }
    p->threads = NULL;
    p->threads_seen = 0; /* the names array is kept and reused */
    sw__free_cells(p->retired);
    pthread_setspecific(p->thread_key, NULL);
    p->generation = sw__new_generation();
    p->pid = (int64_t)getpid();
    atomic_store(&p->current_phase, SW_PHASE_NONE);
    atomic_store(&p->step_index, -1);
    atomic_store(&p->steps_begun, 0);
    atomic_store(&p->in_warmup, 0);
    atomic_store(&p->samples_done, 0);
    for (uint32_t i = 0; i < SW__MAX_PHASES; i++)
        atomic_store(&p->phase_steps[i], 0);
    for (uint32_t i = 0; i < SW__MAX_COUNTERS; i++)
        p->counters[i].summary = (sw_counter_summary){0};
    atomic_store(&p->misuse_end_without_begin, 0);
    atomic_store(&p->misuse_mismatched_end, 0);
    atomic_store(&p->misuse_depth_overflow, 0);
    atomic_store(&p->misuse_bad_id, 0);
    atomic_store(&p->misuse_phase_mismatch, 0);
    atomic_store(&p->misuse_step_overlap, 0);
    atomic_store(&p->misuse_bad_record, 0);
    atomic_store(&p->events_dropped, 0);
    atomic_store(&p->ring_no_memory, 0);
    atomic_store(&p->drops_said, 0);
    _Atomic uint64_t *memory[] = {&p->mem_rss_steps,    &p->mem_rss_max,      &p->mem_rss_last,
                                  &p->mem_alloc_steps,  &p->mem_peak_max,     &p->mem_alloc_last,
                                  &p->mem_reserved_max, &p->mem_reserved_last};
    for (size_t i = 0; i < sizeof memory / sizeof *memory; i++)
        atomic_store(memory[i], 0);
    p->origin_ns = sw__clock_ns();
}
