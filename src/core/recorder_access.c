/*
 * recorder_access.c — what the layers above read of a profiler (core.h): its options, origin,
 * counts, training state, and the names of its threads.
 */
#include "recorder.h"

const sw_options *sw__options(const sw_profiler *p) {
    return &p->opts;
}

uint64_t sw__origin_ns(const sw_profiler *p) {
    return p->origin_ns;
}

uint64_t sw__origin_unix_ns(const sw_profiler *p) {
    return p->origin_unix_ns;
}

const char *sw__counter_name(const sw_profiler *p, sw_id counter) {
    if (p == NULL || counter >= atomic_load(&p->ncounter))
        return NULL;
    return p->counters[counter].name;
}

uint64_t sw__slow_count(const sw_profiler *p) {
    return atomic_load_explicit(&p->slow_count, memory_order_relaxed);
}

void sw__machine_note(sw_profiler *p, uint32_t steal_permille, uint32_t load_x100, uint32_t cpus) {
    atomic_store_explicit(&p->machine_steal_permille, steal_permille, memory_order_relaxed);
    atomic_store_explicit(&p->machine_load_x100, load_x100, memory_order_relaxed);
    atomic_store_explicit(&p->machine_cpus, cpus, memory_order_relaxed);
}

void sw__gpu_clock_note(sw_profiler *p, uint64_t reasons, uint64_t every_ns) {
    atomic_store_explicit(&p->gpu_clock_reasons, reasons, memory_order_relaxed);
    atomic_store_explicit(&p->gpu_clock_every_ns, every_ns, memory_order_relaxed);
    atomic_store_explicit(&p->gpu_clock_at_ns, sw_now_ns(), memory_order_release);
}

uint32_t sw__action_count(const sw_profiler *p) {
    return atomic_load_explicit(&p->naction, memory_order_acquire);
}

uint32_t sw__phase_count(const sw_profiler *p) {
    return atomic_load_explicit(&p->nphase, memory_order_acquire);
}

uint32_t sw__counter_count(const sw_profiler *p) {
    return atomic_load(&p->ncounter);
}

sw_phase sw__current_phase(const sw_profiler *p) {
    return atomic_load_explicit(&p->current_phase, memory_order_relaxed);
}

int sw__in_warmup(const sw_profiler *p) {
    return atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
}

void sw__step_rss_set(sw_profiler *p, sw__rss_fn fn) {
    if (p != NULL)
        atomic_store_explicit(&p->rss_fn, fn, memory_order_release);
}

uint32_t sw__thread_names(sw_profiler *p, uint32_t since, uint32_t *changed, sw__thread_name_fn fn,
                          void *ctx) {
    pthread_mutex_lock(&p->lock);
    *changed = atomic_load(&p->thread_names_changed);
    uint32_t n = p->threads_seen < p->thread_names_cap ? p->threads_seen : p->thread_names_cap;
    uint32_t visited = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p->thread_names[i].changed - since - 1 < *changed - since) { /* in (since, now] */
            fn(ctx, i, p->thread_names[i].name);
            visited++;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return visited;
}

uint32_t sw__thread_names_changed(const sw_profiler *p) {
    return atomic_load(&((sw_profiler *)p)->thread_names_changed);
}
