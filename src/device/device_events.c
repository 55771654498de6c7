/*
 * device_events.c — the events of the device timing (device_time.h): the pool they are made
 * in once and reused from, the steps that hold them, and a step's boundaries recorded on its
 * stream, one event shared by boundaries too close for a kernel launch between them. Used by
 * device_time.c (the phases) and device_intervals.c (intervals inside a step).
 */
#include "device_time.h"

#include <stdlib.h>

#define DT_SHARE_NS 20000u /* a begin this soon after an end reuses its event */
#define DT_SAME_NS \
    1000u /* two begins (two ends) this close: marks of one call, too soon
                                for a kernel launch between them */

dt_step *sw__dt_slot(sw__device_time *dt, uint64_t i) {
    return &dt->ring[i % dt->cap];
}

dt_step *sw__dt_open_step(sw__device_time *dt) {
    return dt->open ? sw__dt_slot(dt, dt->head - 1) : NULL;
}

void sw__dt_fail(sw__device_time *dt, const char *what) {
    dt->stopped = 1;
    dt->open = 0;
    atomic_store(&dt->failed, 1);
    sw__device_say_once(SW__SAY_GPU_ERROR,
                        "device time stopped: the GPU runtime failed to %s an event", what);
}

/* ---- the pool of events ---- */

void sw__dt_give_back(sw__device_time *dt, dt_step *s) {
    for (uint32_t i = 0; i < s->nevents; i++)
        dt->spare[dt->nspare++] = s->events[i];
    s->nevents = 0;
}

/* Step s holds event e from now on (given back when s is resolved or dropped): 0, or -1 out of
 * memory (the timing stops). */
int sw__dt_own_event(sw__device_time *dt, dt_step *s, uint32_t e) {
    if (s->nevents == s->events_cap) {
        uint32_t cap = s->events_cap ? 2 * s->events_cap : 2 * DT_SPANS + 2 * DT_GAP_COPIES;
        uint32_t *events = realloc(s->events, cap * sizeof *events);
        if (events == NULL) {
            dt->spare[dt->nspare++] = e;
            sw__dt_fail(dt, "allocate");
            return -1;
        }
        s->events = events;
        s->events_cap = cap;
    }
    s->events[s->nevents++] = e;
    return 0;
}

/* A free event of the pool, made now if none is free: its index, or NO_EVENT (out of memory,
 * or the runtime failed: the timing stops). */
uint32_t sw__dt_take_event(sw__device_time *dt) {
    if (dt->nspare > 0)
        return dt->spare[--dt->nspare];
    if (dt->nmade == dt->pool_cap) {
        uint32_t cap = dt->pool_cap ? 2 * dt->pool_cap : 64;
        void **events = realloc(dt->events, cap * sizeof *events);
        if (events != NULL)
            dt->events = events;
        uint32_t *spare = events ? realloc(dt->spare, cap * sizeof *spare) : NULL;
        if (spare == NULL) {
            sw__dt_fail(dt, "allocate");
            return NO_EVENT;
        }
        dt->spare = spare;
        dt->pool_cap = cap;
    }
    void *event = NULL;
    if (dt->clock.event_new(dt->clock.ctx, &event) != 0 || event == NULL) {
        sw__dt_fail(dt, "create");
        return NO_EVENT;
    }
    dt->events[dt->nmade] = event;
    atomic_store_explicit(&dt->nevents, dt->nmade + 1, memory_order_relaxed);
    return dt->nmade++;
}

/* A free event recorded now on stream (NULL: the step's), held by step s: its index, or
 * NO_EVENT (captured: counted; or the runtime failed: the timing stopped). */
static uint32_t record_new(sw__device_time *dt, dt_step *s, void *stream) {
    uint32_t e = sw__dt_take_event(dt);
    if (e == NO_EVENT)
        return NO_EVENT;
    void *event = dt->events[e];
    int rc = stream ? dt->clock.record_on(dt->clock.ctx, event, stream)
                    : dt->clock.record(dt->clock.ctx, event);
    if (rc != 0) {
        dt->spare[dt->nspare++] = e;
        if (rc < 0)
            sw__dt_fail(dt, "record");
        else
            COUNT(boundaries_captured);
        return NO_EVENT;
    }
    return sw__dt_own_event(dt, s, e) == 0 ? e : NO_EVENT;
}

/* Record a boundary of the open step: the event's index, or NO_EVENT when there is none (the
 * stream is captured into a graph: counted; or the runtime failed: the timing stopped). A
 * begin within DT_SHARE_NS of an end shares that end's event (the few us between count in
 * the span that begins); a begin right after a begin (the step's and its first span's), an
 * end right after an end, within DT_SAME_NS: marks of one call, with no launch between.
 * strict (an interval's boundary): any two boundaries within DT_SAME_NS, nothing wider. */
uint32_t sw__dt_record_boundary(sw__device_time *dt, int is_begin, int strict) {
    dt_step *s = sw__dt_open_step(dt);
    uint64_t now = sw_now_ns();
    uint64_t window = strict || dt->last_was_begin == is_begin ? DT_SAME_NS
                      : is_begin                               ? DT_SHARE_NS
                                                               : 0; /* a span's own begin and end */
    if (dt->last_event != NO_EVENT && now - dt->last_at <= window) {
        dt->last_at = now;
        dt->last_was_begin = is_begin;
        return dt->last_event;
    }
    uint32_t e = record_new(dt, s, NULL);
    if (e == NO_EVENT)
        return NO_EVENT;
    dt->last_event = e;
    dt->last_at = now;
    dt->last_was_begin = is_begin;
    return e;
}

int sw__dt_elapsed(sw__device_time *dt, uint32_t begin, uint32_t end, uint64_t *ns) {
    *ns = 0;
    if (begin == end)
        return 0;
    return dt->clock.elapsed_ns(dt->clock.ctx, dt->events[begin], dt->events[end], ns);
}

uint32_t sw__dt_record_on(sw__device_time *dt, void *stream) {
    if (dt->clock.record_on == NULL || stream == NULL)
        return NO_EVENT;
    return record_new(dt, sw__dt_open_step(dt), stream);
}
