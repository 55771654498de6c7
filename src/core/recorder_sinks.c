/*
 * recorder_sinks.c — the sinks attached to a profiler (sink.h), and the draining of the
 * per-thread event rings the hot path (recorder.c) fills.
 */
#include "recorder.h"

void sw__sink_attach(sw_profiler *p, sw__sink *sink) {
    pthread_mutex_lock(&p->lock);
    sink->next = p->sinks;
    /* Release: a recording thread that finds the sink (wake_sinks) sees it whole. */
    __atomic_store_n(&p->sinks, sink, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
}

void sw__sink_detach(sw_profiler *p, sw__sink *sink) {
    pthread_mutex_lock(&p->lock);
    for (sw__sink **link = &p->sinks; *link; link = &(*link)->next) {
        if (*link == sink) {
            *link = sink->next;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    sink->next = NULL;
}

sw__sink *sw__sink_find(sw_profiler *p, const sw__sink_ops *ops) {
    pthread_mutex_lock(&p->lock);
    sw__sink *s = p->sinks;
    while (s && s->ops != ops)
        s = s->next;
    pthread_mutex_unlock(&p->lock);
    return s;
}
void sw__events_enable(sw_profiler *p) {
    atomic_store(&p->events_on, 1);
}

size_t sw__drain(sw_profiler *p, sw__event_fn fn, void *ctx) {
    size_t drained = 0;
    pthread_mutex_lock(&p->lock);
    sw__thread **link = &p->threads;
    while (*link) {
        sw__thread *t = *link;
        sw__ring *r = &t->ring;
        if (r->slots != NULL) {
            uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
            uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
            for (; tail != head; tail++, drained++)
                fn(ctx, &r->slots[tail & r->mask]);
            atomic_store_explicit(&r->tail, tail, memory_order_release);
        }
        /* A thread that exited and has nothing left to drain is gone for good. */
        if (!atomic_load(&t->alive)) {
            *link = t->next;
            sw__free_thread(t);
            continue;
        }
        link = &t->next;
    }
    pthread_mutex_unlock(&p->lock);
    sw__drops_say(p, 0);
    return drained;
}

void sw__drops_say(sw_profiler *p, int final) {
    uint64_t dropped = atomic_load(&p->events_dropped);
    uint64_t said = atomic_load(&p->drops_said);
    if (dropped == said || (!final && said > 0))
        return;
    /* Claimed by one caller: two draining sinks never say it twice. */
    if (!atomic_compare_exchange_strong(&p->drops_said, &said, dropped))
        return;
    const char *why = atomic_load(&p->ring_no_memory) > 0
                          ? "memory ran out for a thread's event ring"
                          : "an event ring was full: raise ring_capacity, or set on_full to "
                            "block";
    if (final && said > 0)
        sw__warn("%llu events were dropped in all (%s); the run's records miss them",
                 (unsigned long long)dropped, why);
    else
        sw__warn("%llu events dropped%s (%s): the run's per-step records and timeline miss "
                 "them, and dropped_events counts them",
                 (unsigned long long)dropped, final ? "" : " so far", why);
}
