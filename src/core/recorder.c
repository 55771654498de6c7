/*
 * recorder.c — the hot path: spans on per-thread stacks, phases, steps, and the statistics
 * each thread keeps per (action, phase) cell. The rest of the profiler is in the other
 * recorder_*.c files (recorder.h lists them); the hot path stays in this one file.
 *
 * Threads. Each thread that records gets a record (sw__thread) the first time it touches a
 * profiler; a one-entry thread-local cache finds it again without a lock. Only the owning
 * thread writes its record. Readers (snapshots) read it under a per-thread sequence lock:
 * the owner makes the sequence odd, updates, makes it even; a reader retries until it saw
 * the same even value before and after copying. Fields a reader copies are written and
 * read with relaxed atomic builtins (plain moves on x86), so there is no data race.
 *
 * Memory. Cells are allocated the first time a thread begins a span of an (action, phase):
 * memory grows with the distinct actions, never with the number of spans. Event rings are
 * allocated once per thread when a sink turned events on.
 *
 * Sinks (sink.h). The recorder knows its consumers only through their ops: a full ring under
 * SW_FULL_BLOCK wakes them, sw_profiler_free closes them, an atexit hook completes them.
 */
#include "recorder.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---- thread records ---------------------------------------------------------------------- */

static _Thread_local struct {
    const sw_profiler *profiler;
    uint64_t generation;
    sw__thread *record;
} tls_cache __attribute__((tls_model("initial-exec")));

void sw__free_cells(sw__thread *t) {
    for (uint32_t a = 0; a < t->cells_cap; a++) {
        if (t->cells[a] == NULL)
            continue;
        for (uint32_t ph = 0; ph < SW__MAX_PHASES; ph++)
            free(t->cells[a][ph]);
        free(t->cells[a]);
    }
    free(t->cells);
    t->cells = NULL;
    t->cells_cap = 0;
}

void sw__free_thread(sw__thread *t) {
    sw__free_cells(t);
    free(t->stack);
    free(t->slow.half[0].spans);
    free(t->slow.half[1].spans);
    sw__os_close(&t->slow.os_files);
    free(t->ring.slots);
    free(t);
}

/* Name thread number `number` (p->lock held): the name, and the naming counter it goes with,
 * so the run file's writer rewrites only the names that changed. */
static void set_thread_name(sw_profiler *p, uint32_t number, const char *name) {
    struct thread_name *slot = &p->thread_names[number];
    snprintf(slot->name, sizeof slot->name, "%s", name);
    slot->changed = atomic_fetch_add(&p->thread_names_changed, 1) + 1;
}

static sw__thread *thread_slow(sw_profiler *p) {
    sw__thread *t = pthread_getspecific(p->thread_key);
    if (t == NULL) {
        t = calloc(1, sizeof *t);
        if (t == NULL)
            return NULL;
        t->stack = calloc(p->opts.max_depth, sizeof *t->stack);
        if (t->stack == NULL) {
            free(t);
            return NULL;
        }
        t->profiler = p;
        atomic_init(&t->alive, 1);
        char name[SW__THREAD_NAME] = "";
        pthread_getname_np(pthread_self(), name, sizeof name); /* "" if it cannot tell */
        pthread_mutex_lock(&p->lock);
        if (p->threads_seen == p->thread_names_cap) {
            uint32_t cap = p->thread_names_cap ? 2 * p->thread_names_cap : 8;
            void *grown = realloc(p->thread_names, cap * sizeof *p->thread_names);
            if (grown != NULL) {
                p->thread_names = grown;
                p->thread_names_cap = cap;
            }
        }
        t->number = p->threads_seen++;
        if (t->number < p->thread_names_cap)
            set_thread_name(p, t->number, name);
        t->next = p->threads;
        p->threads = t;
        pthread_mutex_unlock(&p->lock);
        pthread_setspecific(p->thread_key, t);
    }
    tls_cache.profiler = p;
    tls_cache.generation = p->generation;
    tls_cache.record = t;
    return t;
}

SW__INLINE sw__thread *thread_of(sw_profiler *p) {
    if (SW__LIKELY(tls_cache.profiler == p && tls_cache.generation == p->generation))
        return tls_cache.record;
    return thread_slow(p);
}

/* Make the cell of (action, phase) in t; NULL when out of memory. Callers hold p->lock,
 * because snapshots walk the cells arrays. */
static sw__cell *cell_create_locked(sw__thread *t, sw_id action, sw_phase phase) {
    if (action < t->cells_cap && t->cells[action] && t->cells[action][phase])
        return t->cells[action][phase];
    if (action >= t->cells_cap) {
        uint32_t cap = t->cells_cap ? t->cells_cap : 16;
        while (cap <= action)
            cap *= 2;
        sw__cell ***grown = realloc(t->cells, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        memset(grown + t->cells_cap, 0, (cap - t->cells_cap) * sizeof *grown);
        t->cells = grown;
        t->cells_cap = cap;
    }
    if (t->cells[action] == NULL) {
        t->cells[action] = calloc(SW__MAX_PHASES, sizeof **t->cells);
        if (t->cells[action] == NULL)
            return NULL;
    }
    sw__cell *cell = calloc(1, sizeof *cell);
    if (cell == NULL)
        return NULL;
    sw_stats_init(&cell->stats);
    sw_stats_init(&cell->warm);
    t->cells[action][phase] = cell;
    return cell;
}

SW__INLINE sw__cell *cell_of(sw_profiler *p, sw__thread *t, sw_id action, sw_phase phase) {
    if (SW__LIKELY(action < t->cells_cap && t->cells[action] && t->cells[action][phase]))
        return t->cells[action][phase];
    pthread_mutex_lock(&p->lock);
    sw__cell *cell = cell_create_locked(t, action, phase);
    pthread_mutex_unlock(&p->lock);
    return cell;
}

/* Fold a cell's pending durations into its histogram, mean and m2. The owner calls it under
 * its sequence lock; readers call it on their copy. */
__attribute__((noinline)) void sw__cell_fold(sw__cell *cell) {
    sw_stats *s = &cell->stats;
    uint32_t n = cell->npending;
    if (n == 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = sw__hist_bucket(cell->pending[i]);
        SW__PUT(cell->hist.buckets[b], cell->hist.buckets[b] + 1);
    }
    SW__PUT(cell->hist.count, cell->hist.count + n);
    SW__PUT(s->m2, sw__m2_fold(s->count - n, s->mean_ns, s->m2, cell->pending, n));
    SW__PUT(s->mean_ns, (double)s->total_ns / (double)s->count);
    SW__PUT(cell->npending, 0);
}

/* Publish one value into a cell under the thread's sequence lock: sw_stats_add written in
 * place, so only the fields that change are stored. The main statistics hold back up to
 * SW__PENDING durations and put them into the histogram, mean and m2 together (cell_fold):
 * the per-value division and bucket update would otherwise stall the next clock read, which
 * waits for earlier work to finish. Warm-up calls are few and take the plain update. */
SW__INLINE void cell_add(sw__thread *t, sw__cell *cell, uint64_t ns, uint64_t self_ns, int64_t step,
                         uint64_t samples, int warm) {
    sw_stats *s = warm ? &cell->warm : &cell->stats;
    uint64_t count = s->count + 1, total = s->total_ns + ns;
    uint32_t seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    SW__PUT(s->count, count);
    SW__PUT(s->total_ns, total);
    SW__PUT(s->self_ns, s->self_ns + self_ns);
    SW__PUT(s->samples, s->samples + samples);
    if (ns < s->min_ns) {
        SW__PUT(s->min_ns, ns);
        SW__PUT(s->min_step, step);
    }
    if (ns > s->max_ns || count == 1) {
        SW__PUT(s->max_ns, ns);
        SW__PUT(s->max_step, step);
    }
    if (SW__UNLIKELY(warm)) {
        SW__PUT(s->m2, sw__m2_fold(count - 1, s->mean_ns, s->m2, &ns, 1));
        SW__PUT(s->mean_ns, (double)total / (double)count);
    } else {
        uint32_t n = cell->npending;
        SW__PUT(cell->pending[n], ns);
        SW__PUT(cell->npending, n + 1);
        if (SW__UNLIKELY(n + 1 == SW__PENDING))
            sw__cell_fold(cell);
    }
    atomic_store_explicit(&t->seq, seq + 2, memory_order_release);
}

/* ---- event rings ----------------------------------------------------------------------------- */

static __attribute__((noinline)) void wake_sinks(sw_profiler *p) {
    for (sw__sink *s = __atomic_load_n(&p->sinks, __ATOMIC_ACQUIRE); s; s = s->next)
        if (s->ops->wake)
            s->ops->wake(s);
}

static sw__event *ring_reserve(sw_profiler *p, sw__thread *t) {
    sw__ring *r = &t->ring;
    if (SW__UNLIKELY(r->slots == NULL)) {
        uint64_t cap = 1;
        while (cap < p->opts.ring_capacity)
            cap <<= 1;
        /* Published to the flusher under the lock it drains with. */
        pthread_mutex_lock(&p->lock);
        r->slots = malloc(cap * sizeof *r->slots);
        r->mask = cap - 1;
        pthread_mutex_unlock(&p->lock);
        if (r->slots == NULL) {
            atomic_fetch_add_explicit(&p->ring_no_memory, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&p->events_dropped, 1, memory_order_relaxed);
            return NULL;
        }
    }
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    int woke = 0;
    while (head - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask) {
        if (p->opts.on_full != SW_FULL_BLOCK || !atomic_load(&p->events_on)) {
            atomic_fetch_add_explicit(&p->events_dropped, 1, memory_order_relaxed);
            return NULL;
        }
        /* Full: have the consumer drain now rather than at its next period. */
        if (!woke) {
            wake_sinks(p);
            woke = 1;
        }
        sched_yield();
    }
    return &r->slots[head & r->mask];
}

static void ring_commit(sw__thread *t) {
    uint64_t head = atomic_load_explicit(&t->ring.head, memory_order_relaxed);
    atomic_store_explicit(&t->ring.head, head + 1, memory_order_release);
}

/* ---- spans ------------------------------------------------------------------------------- */

SW__INLINE int64_t current_step(const sw_profiler *p) {
    return atomic_load_explicit(&p->step_index, memory_order_relaxed);
}

/* A watched action began or ends on this thread: tell its watchers (sw_watch, sw__hook). */
static __attribute__((noinline)) void notify_watcher(sw_profiler *p, sw_id id, int begins) {
    uint8_t bits = __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED);
    sw_watch_fn fn = (bits & SW__WATCH_USER) ? __atomic_load_n(&p->watch_fn, __ATOMIC_ACQUIRE)
                                             : NULL;
    if (fn != NULL)
        fn(p->watch_ctx, id, begins);
    fn = (bits & SW__WATCH_HOOK) ? __atomic_load_n(&p->hook_fn, __ATOMIC_ACQUIRE) : NULL;
    if (fn != NULL)
        fn(p->hook_ctx, id, begins);
}

/* A watched action's span was recorded after the fact (sw_record): only the layers' hook
 * hears of it (begins = -1), the public watcher's contract has begins and ends only. */
static __attribute__((noinline)) void notify_recorded(sw_profiler *p, sw_id id) {
    uint8_t bits = __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED);
    sw_watch_fn fn = (bits & SW__WATCH_HOOK) ? __atomic_load_n(&p->hook_fn, __ATOMIC_ACQUIRE)
                                             : NULL;
    if (fn != NULL)
        fn(p->hook_ctx, id, -1);
}

SW__INLINE int is_watched(const sw_profiler *p, sw_id id) {
    return __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED) != 0;
}

SW__INLINE void push_frame(sw_profiler *p, sw__thread *t, sw_id id, uint64_t now) {
    if (SW__UNLIKELY(t->depth >= p->opts.max_depth)) {
        t->overflow++;
        atomic_fetch_add_explicit(&p->misuse_depth_overflow, 1, memory_order_relaxed);
        return;
    }
    sw__frame *f = &t->stack[t->depth];
    f->id = id;
    f->phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    f->cell = cell_of(p, t, id, f->phase);
    f->start_ns = now;
    f->child_ns = 0;
    f->cat_ns = 0;
    f->samples_at_begin = atomic_load_explicit(&p->samples_done, memory_order_relaxed);
    SW__PUT(t->depth, t->depth + 1);
    if (SW__UNLIKELY(is_watched(p, id)))
        notify_watcher(p, id, 1);
}

/* The record of one finished span. */
SW__INLINE sw_span_record span_of(const sw_profiler *p, const sw__thread *t, sw_id id,
                                  sw_phase phase, uint64_t start, uint64_t duration, uint32_t depth,
                                  int64_t step) {
    return (sw_span_record){.action = id,
                            .phase = phase,
                            .thread = t->number,
                            .depth = depth,
                            .step = step,
                            .start_ns = start - p->origin_ns,
                            .duration_ns = duration};
}

/* The timeline event of one finished span (only with the timeline option and events on). */
static __attribute__((noinline)) void emit_span(sw_profiler *p, sw__thread *t, sw_id id,
                                                sw_phase phase, uint64_t start, uint64_t duration,
                                                uint32_t depth, int64_t step) {
    sw__event *ev = ring_reserve(p, t);
    if (ev == NULL)
        return;
    ev->kind = SW__EVENT_SPAN;
    ev->u.span = span_of(p, t, id, phase, start, duration, depth, step);
    ring_commit(t);
}

/* A span that ended: its record into the buffer of the spans since the last step ended
 * (recorder_slow.c reads the causes' times from it and hands it on as a slow step's window).
 * A loop may begin a step after its start (sw_step_begin_at): what ran in between is kept. */
SW__INLINE void keep_span(sw_profiler *p, sw__thread *t, sw_id id, sw_phase phase, uint64_t start,
                          uint64_t duration, uint32_t depth, int64_t step) {
    sw__step_spans *h = &t->slow.half[t->slow.cur];
    if (SW__LIKELY(h->n < SW_SLOW_WINDOW_SPANS && h->spans != NULL)) {
        h->spans[h->n++] = span_of(p, t, id, phase, start, duration, depth, step);
    } else if (h->spans != NULL) {
        h->dropped++;
    }
}

/* The statistics, the step breakdown and the timeline event of one finished span.
 *
 * The step breakdown: a span with a category gives that category its own time, its duration
 * less what the spans nested in it gave to categories (cat_ns), and tells its parent it
 * gave away its whole duration; a span without one ("other") passes its nested spans' gifts
 * up unchanged, so its own time is left to the step's "other". Lightning's optimizer_step
 * (optimizer) thus keeps only the optimizer's own time: the training_step (forward) and
 * backward its closure runs are counted as theirs. Returns what to add to the parent's
 * cat_ns. */
SW__INLINE uint64_t record_span(sw_profiler *p, sw__thread *t, sw__cell *cell, sw_id id,
                                sw_phase phase, uint64_t start, uint64_t duration,
                                uint64_t child_ns, uint64_t cat_ns, uint64_t samples_at_begin,
                                uint32_t depth) {
    int64_t step = current_step(p);
    uint64_t samples = atomic_load_explicit(&p->samples_done, memory_order_relaxed) -
                       samples_at_begin;
    if (step >= 0)
        samples += atomic_load_explicit(&p->batch_size, memory_order_relaxed);
    if (SW__LIKELY(cell != NULL)) {
        int warm = step >= 0 && atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
        uint64_t self = duration > child_ns ? duration - child_ns : 0;
        cell_add(t, cell, duration, self, step, samples, warm);
    }
    uint8_t category = p->action_category[id];
    uint64_t given = cat_ns;
    if (category != SW_CAT_OTHER) {
        if (t->step_open)
            t->step_category_ns[category] += duration > cat_ns ? duration - cat_ns : 0;
        given = duration;
    }
    keep_span(p, t, id, phase, start, duration, depth, step);
    if (SW__UNLIKELY(atomic_load_explicit(&p->events_on, memory_order_relaxed)) && p->opts.timeline)
        emit_span(p, t, id, phase, start, duration, depth, step);
    return given;
}

/* Close the innermost frame at time now; returns its duration. */
SW__INLINE uint64_t pop_frame(sw_profiler *p, sw__thread *t, uint64_t now) {
    uint32_t depth = t->depth - 1;
    sw__frame *f = &t->stack[depth];
    uint64_t duration = now > f->start_ns ? now - f->start_ns : 0;
    SW__PUT(t->depth, depth);
    if (SW__UNLIKELY(is_watched(p, f->id)))
        notify_watcher(p, f->id, 0);
    uint64_t given = record_span(p, t, f->cell, f->id, f->phase, f->start_ns, duration, f->child_ns,
                                 f->cat_ns, f->samples_at_begin, depth);
    if (depth > 0) {
        t->stack[depth - 1].child_ns += duration;
        t->stack[depth - 1].cat_ns += given;
    }
    return duration;
}

SW__INLINE int id_ok(sw_profiler *p, sw_id id) {
    if (SW__LIKELY(id < atomic_load_explicit(&p->naction, memory_order_acquire)))
        return 1;
    atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
    return 0;
}

/* End the innermost open span of id when it is not the innermost one: close (and count) the
 * spans opened inside it. Returns its duration, or 0 when no span of id is open. */
static __attribute__((noinline)) uint64_t end_span_unwind(sw_profiler *p, sw__thread *t, sw_id id,
                                                          uint64_t now) {
    /* sw_end skips the id check on its fast path: an unknown id never matches a frame. */
    if (!id_ok(p, id))
        return 0;
    uint32_t k = t->depth;
    while (k > 0 && t->stack[k - 1].id != id)
        k--;
    if (k == 0) {
        atomic_fetch_add_explicit(&p->misuse_end_without_begin, 1, memory_order_relaxed);
        return 0;
    }
    atomic_fetch_add_explicit(&p->misuse_mismatched_end, 1, memory_order_relaxed);
    while (t->depth > k)
        pop_frame(p, t, now);
    return pop_frame(p, t, now);
}

/* End the innermost open span of id; returns its duration (0 when none is open). */
SW__INLINE uint64_t end_span(sw_profiler *p, sw__thread *t, sw_id id, uint64_t now) {
    if (SW__LIKELY(t->depth > 0 && t->stack[t->depth - 1].id == id))
        return pop_frame(p, t, now);
    return end_span_unwind(p, t, id, now);
}

/* The calling thread's record for a begin of id, or NULL when nothing is to be recorded. */
SW__INLINE sw__thread *begin_thread(sw_profiler *p, sw_id id) {
    if (SW__UNLIKELY(p == NULL) || !atomic_load_explicit(&p->enabled, memory_order_relaxed) ||
        !id_ok(p, id))
        return NULL;
    return thread_of(p);
}

void sw_begin(sw_profiler *p, sw_id id) {
    sw__thread *t = begin_thread(p, id);
    if (SW__LIKELY(t != NULL))
        push_frame(p, t, id, sw__clock_ns());
}

void sw_begin_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    sw__thread *t = begin_thread(p, id);
    if (SW__LIKELY(t != NULL))
        push_frame(p, t, id, now_ns);
}

SW__INLINE void end_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    if (SW__UNLIKELY(p == NULL))
        return;
    sw__thread *t = thread_of(p);
    if (SW__UNLIKELY(t == NULL))
        return;
    if (SW__UNLIKELY(t->overflow > 0)) {
        t->overflow--;
        return;
    }
    if (SW__UNLIKELY(!atomic_load_explicit(&p->enabled, memory_order_relaxed))) {
        /* Recording is off: forget a matching open span without recording it. */
        if (t->depth > 0 && t->stack[t->depth - 1].id == id) {
            SW__PUT(t->depth, t->depth - 1);
            if (SW__UNLIKELY(is_watched(p, id)))
                notify_watcher(p, id, 0);
        }
        return;
    }
    end_span(p, t, id, now_ns);
}

void sw_end(sw_profiler *p, sw_id id) {
    end_at(p, id, sw__clock_ns());
}

void sw_end_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    end_at(p, id, now_ns);
}

void sw_record(sw_profiler *p, sw_id id, uint64_t start_ns, uint64_t end_ns) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed) || !id_ok(p, id))
        return;
    if (end_ns < start_ns) {
        atomic_fetch_add_explicit(&p->misuse_bad_record, 1, memory_order_relaxed);
        return;
    }
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    uint64_t duration = end_ns - start_ns;
    sw_phase phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    uint64_t given = record_span(p, t, cell_of(p, t, id, phase), id, phase, start_ns, duration, 0,
                                 0, atomic_load_explicit(&p->samples_done, memory_order_relaxed),
                                 t->depth);
    if (t->depth > 0) {
        t->stack[t->depth - 1].child_ns += duration;
        t->stack[t->depth - 1].cat_ns += given;
    }
    if (SW__UNLIKELY(is_watched(p, id)))
        notify_recorded(p, id);
}

/* ---- phases and steps ------------------------------------------------------------------------ */

void sw_phase_begin(sw_profiler *p, sw_phase phase) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    if (phase >= atomic_load_explicit(&p->nphase, memory_order_acquire)) {
        atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
        return;
    }
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (t->phase_depth >= SW__PHASE_STACK) {
        atomic_fetch_add_explicit(&p->misuse_depth_overflow, 1, memory_order_relaxed);
        return;
    }
    /* The phase's span belongs to the enclosing phase, so push it before switching. */
    push_frame(p, t, p->phase_action[phase], sw__clock_ns());
    t->phase_stack[t->phase_depth++] = phase;
    atomic_store_explicit(&p->current_phase, phase, memory_order_relaxed);
}

void sw_phase_end(sw_profiler *p, sw_phase phase) {
    uint64_t now = sw__clock_ns();
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    uint32_t k = t->phase_depth;
    while (k > 0 && t->phase_stack[k - 1] != phase)
        k--;
    if (k == 0 || k != t->phase_depth) {
        atomic_fetch_add_explicit(&p->misuse_phase_mismatch, 1, memory_order_relaxed);
        if (k == 0)
            return;
    }
    if (t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        sw_step_end(p);
    }
    /* Phases opened inside this one end with it. */
    while (t->phase_depth >= k) {
        sw_phase inner = t->phase_stack[--t->phase_depth];
        end_span(p, t, p->phase_action[inner], now);
    }
    sw_phase current = t->phase_depth ? t->phase_stack[t->phase_depth - 1] : SW_PHASE_NONE;
    atomic_store_explicit(&p->current_phase, current, memory_order_relaxed);
}

void sw_step_begin(sw_profiler *p, uint32_t batch_size) {
    sw_step_begin_at(p, batch_size, 0);
}

void sw_step_begin_at(sw_profiler *p, uint32_t batch_size, uint64_t start_ns) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        sw_step_end(p);
    }
    sw_phase phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    uint64_t in_phase = atomic_fetch_add_explicit(&p->phase_steps[phase], 1, memory_order_relaxed);
    uint64_t index = atomic_fetch_add_explicit(&p->steps_begun, 1, memory_order_relaxed);
    atomic_store_explicit(&p->batch_size, batch_size, memory_order_relaxed);
    atomic_store_explicit(&p->in_warmup, in_phase < p->opts.warmup_steps, memory_order_relaxed);
    atomic_store_explicit(&p->step_index, (int64_t)index, memory_order_relaxed);
    memset(t->step_category_ns, 0, sizeof t->step_category_ns);
    t->step_has_allocator = 0;
    sw__slow_step_begin(p, t);
    t->step_open = 1;
    uint64_t now = sw__clock_ns();
    push_frame(p, t, p->step_action, start_ns != 0 && start_ns < now ? start_ns : now);
}

void sw_step_set_batch_size(sw_profiler *p, uint32_t batch_size) {
    if (p != NULL)
        atomic_store_explicit(&p->batch_size, batch_size, memory_order_relaxed);
}

void sw_step_end(sw_profiler *p) {
    sw_step_end_at(p, 0);
}

void sw_step_memory(sw_profiler *p, uint64_t allocated, uint64_t peak_allocated,
                    uint64_t reserved) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL || !t->step_open)
        return;
    t->step_has_allocator = 1;
    t->step_allocated = allocated;
    /* The allocator's peak since its last reset may predate the step's figures: never below
     * what is allocated now. */
    t->step_peak_allocated = peak_allocated > allocated ? peak_allocated : allocated;
    t->step_reserved = reserved;
}

void sw_step_allocator(sw_profiler *p, uint64_t alloc_retries, uint64_t ooms) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL || !t->step_open)
        return;
    t->slow.alloc_retries_now = alloc_retries;
    t->slow.ooms_now = ooms;
    if (!t->slow.alloc_known) { /* the first totals: the baseline, nothing grew yet */
        t->slow.alloc_retries_seen = alloc_retries;
        t->slow.ooms_seen = ooms;
        t->slow.alloc_known = 1;
    }
}

void sw_step_checkpoint_bytes(sw_profiler *p, uint64_t bytes) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t != NULL)
        t->slow.checkpoint_bytes += bytes;
}

/* *max = value if it is larger. Steps of several threads may end at once: a lost race only
 * delays a new maximum to the next step, so plain relaxed compare-and-swap is enough. */
static void store_max(_Atomic uint64_t *max, uint64_t value) {
    uint64_t seen = atomic_load_explicit(max, memory_order_relaxed);
    while (value > seen && !atomic_compare_exchange_weak_explicit(
                               max, &seen, value, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* The step's memory into its record and the profiler's summary (sw_memory_summary). */
static void step_memory(sw_profiler *p, sw__thread *t, uint64_t now, uint64_t *rss) {
    sw__rss_fn rss_fn = atomic_load_explicit(&p->rss_fn, memory_order_acquire);
    *rss = rss_fn ? rss_fn(now) : 0;
    if (*rss != 0) {
        atomic_fetch_add_explicit(&p->mem_rss_steps, 1, memory_order_relaxed);
        store_max(&p->mem_rss_max, *rss);
        atomic_store_explicit(&p->mem_rss_last, *rss, memory_order_relaxed);
    }
    if (t->step_has_allocator) {
        atomic_fetch_add_explicit(&p->mem_alloc_steps, 1, memory_order_relaxed);
        store_max(&p->mem_peak_max, t->step_peak_allocated);
        store_max(&p->mem_reserved_max, t->step_reserved);
        atomic_store_explicit(&p->mem_alloc_last, t->step_allocated, memory_order_relaxed);
        atomic_store_explicit(&p->mem_reserved_last, t->step_reserved, memory_order_relaxed);
    }
}

/* A slow step's window to the sink: the spans of the step before it, then its own. Only
 * into room the ring has now: a window never waits (SW_FULL_BLOCK) nor counts as dropped
 * events; one that does not fit is not sent (sw_slow_summary.windows_dropped). */
static __attribute__((noinline)) void emit_window(sw_profiler *p, sw__thread *t) {
    const sw__step_spans *before = &t->slow.half[t->slow.cur ^ 1],
                         *own = &t->slow.half[t->slow.cur];
    sw__ring *r = &t->ring;
    uint64_t used = atomic_load_explicit(&r->head, memory_order_relaxed) -
                    atomic_load_explicit(&r->tail, memory_order_acquire);
    if (r->slots == NULL || r->mask + 1 - used < (uint64_t)before->n + own->n) {
        atomic_fetch_sub_explicit(&p->slow_windows_sent, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->slow_windows_not_sent, 1, memory_order_relaxed);
        return;
    }
    const sw__step_spans *halves[2] = {before, own};
    for (uint32_t k = 0; k < 2; k++) {
        for (uint32_t i = 0; i < halves[k]->n; i++) {
            sw__event *ev =
                &r->slots[atomic_load_explicit(&r->head, memory_order_relaxed) & r->mask];
            ev->kind = SW__EVENT_WINDOW_SPAN;
            ev->u.span = halves[k]->spans[i];
            ring_commit(t);
        }
    }
}

/* The record of the step that ended (duration > 0): its memory, its slow-step judgement, and
 * the event that carries it (with its window when it was slow) when a sink takes events. */
static void step_record(sw_profiler *p, sw__thread *t, uint64_t start, uint64_t duration,
                        uint64_t now, uint32_t batch) {
    sw_step_record s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)current_step(p);
    s.phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    s.batch_size = batch;
    s.warmup = atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
    s.thread = t->number;
    s.start_ns = start - p->origin_ns;
    s.duration_ns = duration;
    uint64_t accounted = 0;
    for (int c = 0; c < SW_CAT_OTHER; c++) {
        s.category_ns[c] = t->step_category_ns[c];
        accounted += t->step_category_ns[c];
    }
    s.category_ns[SW_CAT_OTHER] = duration > accounted ? duration - accounted : 0;
    step_memory(p, t, now, &s.rss_bytes);
    s.has_allocator = t->step_has_allocator;
    s.allocated_bytes = t->step_has_allocator ? t->step_allocated : 0;
    s.peak_allocated_bytes = t->step_has_allocator ? t->step_peak_allocated : 0;
    s.reserved_bytes = t->step_has_allocator ? t->step_reserved : 0;
    int window = sw__slow_step_end(p, t, &s);
    if (atomic_load_explicit(&p->events_on, memory_order_relaxed)) {
        sw__event *ev = ring_reserve(p, t);
        if (ev != NULL) {
            ev->kind = SW__EVENT_STEP;
            ev->u.step = s;
            ring_commit(t);
            if (SW__UNLIKELY(window))
                emit_window(p, t);
        }
    }
    sw__slow_step_turn(t);
}

void sw_step_end_at(sw_profiler *p, uint64_t end_ns) {
    uint64_t now = sw__clock_ns();
    if (end_ns != 0 && end_ns < now)
        now = end_ns;
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (!t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        return;
    }
    if (t->depth > 0 && t->stack[t->depth - 1].id == p->step_action &&
        now < t->stack[t->depth - 1].start_ns)
        now = t->stack[t->depth - 1].start_ns; /* an end before the start: a step of 0 */
    uint64_t duration = end_span(p, t, p->step_action, now);
    uint64_t start = now - duration; /* 0 duration: no step frame (it overflowed max_depth) */
    uint32_t batch = atomic_load_explicit(&p->batch_size, memory_order_relaxed);
    if (duration > 0)
        step_record(p, t, start, duration, now, batch);
    atomic_fetch_add_explicit(&p->samples_done, batch, memory_order_relaxed);
    atomic_store_explicit(&p->step_index, -1, memory_order_relaxed);
    atomic_store_explicit(&p->in_warmup, 0, memory_order_relaxed);
    t->step_open = 0;
}

uint64_t sw_step_count(const sw_profiler *p) {
    return p ? atomic_load_explicit(&p->steps_begun, memory_order_relaxed) : 0;
}

int64_t sw_step_index(const sw_profiler *p) {
    return p ? current_step(p) : -1;
}

/* ---- counter samples (a few times a second: a short lock is fine) ---------------------------- */

void sw_counter(sw_profiler *p, sw_id counter, double value) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    if (counter >= atomic_load(&p->ncounter)) {
        atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
        return;
    }
    uint64_t now = sw__clock_ns();
    pthread_mutex_lock(&p->counter_lock);
    sw_counter_summary *s = &p->counters[counter].summary;
    s->count++;
    s->last = value;
    if (s->count == 1 || value < s->min)
        s->min = value;
    if (s->count == 1 || value > s->max)
        s->max = value;
    s->mean += (value - s->mean) / (double)s->count;
    pthread_mutex_unlock(&p->counter_lock);
    sw__thread *t = thread_of(p);
    if (t && atomic_load_explicit(&p->events_on, memory_order_relaxed)) {
        sw__event *ev = ring_reserve(p, t);
        if (ev) {
            ev->kind = SW__EVENT_COUNTER;
            ev->u.counter = (sw_counter_record){.counter = counter,
                                                .thread = t->number,
                                                .time_ns = now - p->origin_ns,
                                                .value = value};
            ring_commit(t);
        }
    }
}

/* ---- a thread exits, a thread is named ---------------------------------------------------- */

/* A thread exits: fold its statistics into p->retired. Its record goes now, or after the
 * flusher has drained its events. */
void sw__thread_exit(void *record) {
    sw__thread *t = record;
    sw_profiler *p = t->profiler;
    pthread_mutex_lock(&p->lock);
    for (uint32_t a = 0; a < t->cells_cap; a++) {
        for (uint32_t ph = 0; t->cells[a] && ph < SW__MAX_PHASES; ph++) {
            if (t->cells[a][ph] == NULL)
                continue;
            sw__cell *into = cell_create_locked(p->retired, a, ph);
            sw__cell_fold(t->cells[a][ph]);
            if (into)
                sw__cell_merge(into, t->cells[a][ph]);
        }
    }
    sw__free_cells(t);
    atomic_store(&t->alive, 0);
    if (t->ring.slots == NULL) {
        for (sw__thread **link = &p->threads; *link; link = &(*link)->next) {
            if (*link == t) {
                *link = t->next;
                sw__free_thread(t);
                break;
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    tls_cache.profiler = NULL;
}

int sw_thread_name(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_EINVAL;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return SW_ENOMEM;
    pthread_mutex_lock(&p->lock);
    int rc = t->number < p->thread_names_cap ? 0 : SW_ENOMEM;
    if (rc == 0)
        set_thread_name(p, t->number, name);
    pthread_mutex_unlock(&p->lock);
    return rc;
}
