/*
 * recorder_watch.c — who hears of a watched action's begins and ends: the public watcher
 * (sw_watcher_set, sw_watch) and the layers' hook (sw__hook_set, sw__hook_watch). The hot
 * path (recorder.c) calls them.
 */
#include "recorder.h"

/* Set a watcher slot (fn, ctx) under p's lock: SW_ESTATE when another one holds it. */
static int watcher_set(sw_profiler *p, sw_watch_fn *slot_fn, void **slot_ctx, sw_watch_fn fn,
                       void *ctx) {
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    if (fn != NULL && *slot_fn != NULL && (*slot_fn != fn || *slot_ctx != ctx)) {
        rc = SW_ESTATE;
    } else {
        /* ctx first: a thread that loads the new fn (acquire) sees its ctx. */
        __atomic_store_n(slot_fn, NULL, __ATOMIC_RELEASE);
        *slot_ctx = ctx;
        __atomic_store_n(slot_fn, fn, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int watch_bit(sw_profiler *p, sw_id id, int on, uint8_t bit) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return SW_EINVAL;
    if (on)
        __atomic_fetch_or(&p->action_watched[id], bit, __ATOMIC_RELAXED);
    else
        __atomic_fetch_and(&p->action_watched[id], (uint8_t)~bit, __ATOMIC_RELAXED);
    return 0;
}

int sw__hook_set(sw_profiler *p, sw_watch_fn fn, void *ctx) {
    return p ? watcher_set(p, &p->hook_fn, &p->hook_ctx, fn, ctx) : SW_EINVAL;
}

int sw__hook_watch(sw_profiler *p, sw_id id, int on) {
    return watch_bit(p, id, on, SW__WATCH_HOOK);
}

int sw_watcher_set(sw_profiler *p, sw_watch_fn fn, void *ctx) {
    return p ? watcher_set(p, &p->watch_fn, &p->watch_ctx, fn, ctx) : SW_EINVAL;
}

int sw_watch(sw_profiler *p, sw_id id, int on) {
    return watch_bit(p, id, on, SW__WATCH_USER);
}

int sw_watched(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return 0;
    return (__atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED) & SW__WATCH_USER) != 0;
}

/* A boundary of action now whose host span the caller records later (sw_record): only the
 * layers' hook hears of it, as a begin or an end (device time records its GPU event now). */
void sw_device_mark(sw_profiler *p, sw_id id, int begins) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return;
    uint8_t bits = __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED);
    sw_watch_fn fn = (bits & SW__WATCH_HOOK) ? __atomic_load_n(&p->hook_fn, __ATOMIC_ACQUIRE)
                                             : NULL;
    if (fn != NULL)
        fn(p->hook_ctx, id, begins ? 1 : 0);
}
