/*
 * recorder_slow.c — slow steps, as they end (docs/slow-steps.md): at each step boundary the
 * signals are read (the garbage collector's totals; the OS's figures at most every few
 * steps, and at every slow step), the step is judged against its thread's running median
 * (sw_step_is_slow) and given a cause (sw_slow_cause), and the profiler's summary counted.
 * The spans of the last two steps wait in per-thread buffers (recorder.c fills them); a slow
 * step among the costliest hands them to the sink as its window.
 */
#include "recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The OS reads' budget: at most this much wall time per step, on average. A read costs the
 * code after it more than the calls (the caches and TLB it refills after the kernel entries;
 * bench_core at a load of 10: getrusage 2.5 us and schedstat's pread 7.5 us, and an empty
 * step with reads counted 3x their time took 1.1-2.2 us more, counted 6x 0.5-1.2 us), so a
 * read is counted as six times what its calls took. */
#define SW__OS_BUDGET_NS 1000u
#define SW__OS_COST_FACTOR 6u
#define SW__OS_EVERY_MAX 64u

/* Read the OS figures into *now; learn what the read costs and how often it may run. */
static int os_read(sw__slow_thread *st, sw__os_sample *now) {
    if (!st->os_files.opened)
        sw__os_open(&st->os_files);
    uint64_t before = sw__clock_ns();
    if (!sw__os_read(&st->os_files, now))
        return 0;
    uint64_t cost = now->wall_ns > before ? now->wall_ns - before : 0;
    st->os_cost_ns = st->os_cost_ns ? (7 * st->os_cost_ns + cost) / 8 : cost;
    uint64_t cost_all = SW__OS_COST_FACTOR * st->os_cost_ns;
    uint32_t every = (uint32_t)((cost_all + SW__OS_BUDGET_NS - 1) / SW__OS_BUDGET_NS);
    st->os_every = every < 1 ? 1 : every > SW__OS_EVERY_MAX ? SW__OS_EVERY_MAX : every;
    st->steps_since_os = 0;
    return 1;
}

void sw__slow_step_begin(sw_profiler *p, sw__thread *t) {
    sw__slow_thread *st = &t->slow;
    if (st->half[0].spans == NULL && !st->spans_failed) {
        st->half[0].spans = malloc(SW_SLOW_WINDOW_SPANS * sizeof(sw_span_record));
        st->half[1].spans = malloc(SW_SLOW_WINDOW_SPANS * sizeof(sw_span_record));
        if (st->half[0].spans == NULL || st->half[1].spans == NULL) {
            free(st->half[0].spans);
            free(st->half[1].spans);
            st->half[0].spans = st->half[1].spans = NULL;
            st->spans_failed = 1;
        }
    }
    st->gc_ns_at_begin = atomic_load_explicit(&p->gc_ns, memory_order_relaxed);
    st->gc_count_at_begin = atomic_load_explicit(&p->gc_count, memory_order_relaxed);
    st->gc_collected_at_begin = atomic_load_explicit(&p->gc_collected, memory_order_relaxed);
    if (p->os_signals && !st->have_os)
        st->have_os = os_read(st, &st->last_os);
}

void sw__slow_step_turn(sw__thread *t) {
    sw__slow_thread *st = &t->slow;
    st->cur ^= 1;
    st->half[st->cur].n = 0;
    st->half[st->cur].dropped = 0;
}

#define SW__LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define SW__STORE(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

/* The collections that overlap the step [start, end] (sw__clock_ns times), from the ring of
 * the newest ones; a step with more than the ring holds counts at least the collections
 * since its sw_step_begin ran (the totals then). */
static void step_gc(sw_profiler *p, const sw__slow_thread *st, uint64_t start, uint64_t end,
                    sw_step_signals *g) {
    uint64_t n = atomic_load_explicit(&p->gc_count, memory_order_acquire);
    uint64_t oldest = n > SW__GC_RING ? n - SW__GC_RING : 0;
    for (uint64_t k = n; k > oldest; k--) {
        const struct sw__gc_entry *e = &p->gc_ring[(k - 1) % SW__GC_RING];
        uint64_t e_start = SW__LOAD(e->start_ns), e_end = SW__LOAD(e->end_ns);
        if (e_end < start)
            break;
        uint64_t from = e_start > start ? e_start : start, to = e_end < end ? e_end : end;
        if (to <= from)
            continue;
        g->gc_ns += to - from;
        g->gc_collections++;
        g->gc_collected += SW__LOAD(e->collected);
        int32_t gen = SW__LOAD(e->generation);
        g->gc_generation = gen > g->gc_generation ? gen : g->gc_generation;
    }
    uint64_t since_begin = atomic_load_explicit(&p->gc_ns, memory_order_relaxed) -
                           st->gc_ns_at_begin;
    if (since_begin > g->gc_ns) {
        g->gc_ns = since_begin;
        g->gc_collections = (uint32_t)(n - st->gc_count_at_begin);
        g->gc_collected = atomic_load_explicit(&p->gc_collected, memory_order_relaxed) -
                          st->gc_collected_at_begin;
    }
}

/* What the allocator's totals grew by since the previous step's end (a total that went down:
 * the front end's counters were reset, nothing counted). */
static void step_allocator(sw__slow_thread *st, sw_step_signals *g) {
    if (!st->alloc_known)
        return;
    g->alloc_retries = st->alloc_retries_now > st->alloc_retries_seen
                           ? st->alloc_retries_now - st->alloc_retries_seen
                           : 0;
    g->ooms = st->ooms_now > st->ooms_seen ? st->ooms_now - st->ooms_seen : 0;
    st->alloc_retries_seen = st->alloc_retries_now;
    st->ooms_seen = st->ooms_now;
}

/* The GPUs' clock event reasons that held during a step begun at start: the sampler's last
 * reading, when its state held past the start (the reading came in the step, or less than
 * an interval before it: the next one was not taken yet); else 0. */
static uint64_t gpu_clock_reasons(sw_profiler *p, uint64_t start) {
    uint64_t at = atomic_load_explicit(&p->gpu_clock_at_ns, memory_order_acquire);
    uint64_t every = atomic_load_explicit(&p->gpu_clock_every_ns, memory_order_relaxed);
    if (at == 0 || at + every < start)
        return 0;
    return atomic_load_explicit(&p->gpu_clock_reasons, memory_order_relaxed);
}

/* The collector's and the causes' figures of the step that ends: the spans standing for a
 * cause (sw_cause_of) that began in the step. */
static void step_signals(sw_profiler *p, sw__slow_thread *st, const sw_step_record *s,
                         sw_step_signals *g) {
    memset(g, 0, sizeof *g);
    g->gc_generation = -1;
    uint64_t start = p->origin_ns + s->start_ns;
    step_gc(p, st, start, start + s->duration_ns, g);
    uint64_t cause_ns[SW_CAUSE_COUNT] = {0};
    const sw__step_spans *h = &st->half[st->cur];
    const sw_span_record *longest_sync = NULL;
    for (uint32_t i = 0; i < h->n; i++) {
        const sw_span_record *span = &h->spans[i];
        uint8_t cause = p->action_cause[span->action];
        if (SW__LIKELY(cause == SW_CAUSE_NONE) || span->start_ns < s->start_ns)
            continue;
        cause_ns[cause] += span->duration_ns;
        if (cause == SW_CAUSE_SYNC &&
            (longest_sync == NULL || span->duration_ns > longest_sync->duration_ns))
            longest_sync = span;
    }
    g->compile_ns = cause_ns[SW_CAUSE_COMPILE];
    g->checkpoint_ns = cause_ns[SW_CAUSE_CHECKPOINT];
    g->checkpoint_bytes = st->checkpoint_bytes;
    st->checkpoint_bytes = 0;
    g->eval_ns = cause_ns[SW_CAUSE_EVAL];
    g->sync_ns = cause_ns[SW_CAUSE_SYNC];
    if (longest_sync) /* an action's name is set before any span of it: read without a lock */
        snprintf(g->sync_call, sizeof g->sync_call, "%s", p->action_names[longest_sync->action]);
    step_allocator(st, g);
    g->steal_permille = atomic_load_explicit(&p->machine_steal_permille, memory_order_relaxed);
    g->load_x100 = atomic_load_explicit(&p->machine_load_x100, memory_order_relaxed);
    g->cpus = atomic_load_explicit(&p->machine_cpus, memory_order_relaxed);
    g->clock_reasons = gpu_clock_reasons(p, start);
}

/* The OS figures since the last reading, when this step reads (slow, or its turn). */
static void step_os(sw_profiler *p, sw__slow_thread *st, int slow, sw_step_signals *g) {
    if (!p->os_signals || !st->have_os)
        return;
    st->steps_since_os++;
    if (!slow && st->steps_since_os < st->os_every)
        return;
    sw__os_sample now;
    if (!os_read(st, &now))
        return;
    const sw__os_sample *was = &st->last_os;
    g->os_wall_ns = now.wall_ns - was->wall_ns;
    g->cpu_ns = now.cpu_ns > was->cpu_ns ? now.cpu_ns - was->cpu_ns : 0;
    g->sys_ns = now.sys_ns > was->sys_ns ? now.sys_ns - was->sys_ns : 0;
    g->voluntary_switches = now.voluntary - was->voluntary;
    g->involuntary_switches = now.involuntary - was->involuntary;
    g->minor_faults = now.minor - was->minor;
    g->major_faults = now.major - was->major;
    /* Runnable, waiting for a CPU: preempted; the rest of the off-CPU time was blocked. */
    g->has_runnable = now.has_run_delay && was->has_run_delay;
    if (g->has_runnable)
        g->runnable_ns = now.run_delay_ns > was->run_delay_ns ? now.run_delay_ns - was->run_delay_ns
                                                              : 0;
    st->last_os = now;
}

/* Is a window of this excess among the costliest sent so far (st->top, smallest first)?
 * Then it takes its place there. */
static int window_wanted(sw__slow_thread *st, uint64_t excess) {
    uint32_t n = st->ntop;
    if (n == SW_SLOW_WINDOWS) {
        if (excess <= st->top[0])
            return 0;
        memmove(&st->top[0], &st->top[1], (n - 1) * sizeof st->top[0]);
        n--;
    }
    uint32_t j = n;
    while (j > 0 && st->top[j - 1] > excess) {
        st->top[j] = st->top[j - 1];
        j--;
    }
    st->top[j] = excess;
    st->ntop = n + 1;
    return 1;
}

int sw__slow_step_end(sw_profiler *p, sw__thread *t, sw_step_record *s) {
    sw__slow_thread *st = &t->slow;
    int kind = s->phase == SW_PHASE_TRAIN ? 0 : 1;
    step_signals(p, st, s, &s->signals);
    s->median_ns = s->warmup ? 0 : sw__median_get(&st->median[kind]);
    int slow = sw_step_is_slow(s->duration_ns, s->median_ns);
    step_os(p, st, slow, &s->signals);
    s->cause = SW_CAUSE_NONE;
    s->explained_ns = 0;
    if (s->warmup)
        return 0;
    sw__median_add(&st->median[kind], s->duration_ns);
    if (s->median_ns == 0)
        return 0;
    atomic_fetch_add_explicit(&p->slow_judged, 1, memory_order_relaxed);
    uint64_t data = s->category_ns[SW_CAT_DATA];
    if (!slow) {
        /* The usual data time: a moving average of the steps that were not slow. */
        uint64_t *typ = &st->typical_data_ns[kind];
        *typ = data >= *typ ? *typ + (data - *typ) / 16 : *typ - (*typ - data) / 16;
        return 0;
    }
    s->cause = sw_slow_cause(s, st->typical_data_ns[kind], &s->explained_ns);
    uint64_t excess = s->duration_ns - s->median_ns;
    atomic_fetch_add_explicit(&p->slow_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->slow_ns, s->duration_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->slow_excess_ns, excess, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->slow_by_cause[s->cause], 1, memory_order_relaxed);
    if (st->half[0].spans == NULL || !atomic_load_explicit(&p->events_on, memory_order_relaxed) ||
        !window_wanted(st, excess)) {
        atomic_fetch_add_explicit(&p->slow_windows_not_sent, 1, memory_order_relaxed);
        return 0;
    }
    atomic_fetch_add_explicit(&p->slow_windows_sent, 1, memory_order_relaxed);
    return 1;
}

void sw_gc_collection(sw_profiler *p, uint64_t start_ns, uint64_t end_ns, int generation,
                      uint64_t collected) {
    if (p == NULL || end_ns < start_ns)
        return;
    /* The entry first, then the count that publishes it (release: step_gc reads it so). */
    uint64_t k = atomic_load_explicit(&p->gc_count, memory_order_relaxed);
    struct sw__gc_entry *e = &p->gc_ring[k % SW__GC_RING];
    SW__STORE(e->start_ns, start_ns);
    SW__STORE(e->end_ns, end_ns);
    SW__STORE(e->collected, collected);
    SW__STORE(e->generation, (int32_t)generation);
    atomic_fetch_add_explicit(&p->gc_ns, end_ns - start_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gc_collected, collected, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gc_count, 1, memory_order_release);
}
