/*
 * device_intervals.c — GPU time of intervals inside a step (per-module forward and backward
 * times, python/_stepwatch/_modules.c): the same events, pool and step ring as the phases
 * (device_time.c), so nothing here loads a runtime or waits for the GPU.
 *
 * An interval's begin and end are boundaries of the open step, recorded on its stream like a
 * phase's; two boundaries share one event only when too little host time passed between them
 * for a kernel launch (DT_SAME_NS), so no kernel is counted in the wrong interval. The events
 * stay with the step and go back to the pool when it is resolved. An interval names the
 * interval it runs inside (its parent, in the same step): its self time is its time less its
 * children's, computed when resolved.
 *
 * Resolving: once the GPU reached the step's end (events on one stream complete in order),
 * each interval's elapsed time is read and summed by the caller's tag; the caller takes the
 * sums (sw_device_intervals_take), which also resolves the steps the GPU has reached since,
 * without waiting. An interval not ended inside its step, in a step dropped, or unresolved or
 * not taken when the profiler closes is counted: the counter "device:intervals_dropped".
 */
#include "device_time.h"

#include <stdlib.h>
#include <string.h>

#define MAX_INTERVALS (1u << 20) /* in one step: deeper or longer loops are not timed */

/* The token of interval i of the open step: its step's generation and i + 1 (never 0). */
static uint64_t token_of(const sw__device_time *dt, uint32_t i) {
    return ((uint64_t)dt->generation << 32) | (uint64_t)(i + 1);
}

/* The interval a token names in the open step, or NO_EVENT (none, or another step's). */
static uint32_t index_of(const sw__device_time *dt, const dt_step *s, uint64_t token) {
    uint32_t i = (uint32_t)token - 1;
    if (s == NULL || token == 0 || (uint32_t)(token >> 32) != dt->generation || i >= s->nintervals)
        return NO_EVENT;
    return i;
}

/* Room for one more interval in s and a sum for tag: 0, or -1 (out of memory, or too many:
 * not timed). */
static int room_for(sw__device_time *dt, dt_step *s, uint32_t tag) {
    if (s->nintervals == s->intervals_cap) {
        if (s->intervals_cap >= MAX_INTERVALS)
            return -1;
        uint32_t cap = s->intervals_cap ? 2 * s->intervals_cap : 64;
        dt_interval *grown = realloc(s->intervals, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        s->intervals = grown;
        s->intervals_cap = cap;
    }
    if (tag >= dt->nsums) {
        uint32_t n = tag < 64 ? 64 : tag + 1 + tag / 2;
        sw_device_interval_sum *sums = realloc(dt->sums, n * sizeof *sums);
        if (sums == NULL)
            return -1;
        memset(sums + dt->nsums, 0, (n - dt->nsums) * sizeof *sums);
        dt->sums = sums;
        dt->nsums = n;
    }
    return 0;
}

/* Does the exposed communication look at an interval of kind on stream? Communication, and
 * compute on another stream; compute on the step's stream lies inside its phases. */
static int swept(void *stream, unsigned kind) {
    return kind == SW_DEVICE_COMM || stream != NULL;
}

uint64_t sw_device_interval_on(sw_device_timing *dt, uint64_t parent, uint32_t tag, void *stream,
                               unsigned kind) {
    if (dt == NULL || dt->stopped || tag >= SW_DEVICE_MAX_TAGS || kind > SW_DEVICE_COMM ||
        (stream != NULL && dt->clock.record_on == NULL))
        return 0;
    dt_step *s = sw__dt_open_step(dt);
    if (s == NULL || room_for(dt, s, tag) != 0 ||
        (swept(stream, kind) && sw__dt_comm_room(dt, s) != 0))
        return 0;
    uint32_t e = stream ? sw__dt_record_on(dt, stream) : sw__dt_record_boundary(dt, 1, 1);
    if (e == NO_EVENT)
        return 0;
    uint32_t i = s->nintervals++;
    s->intervals[i] = (dt_interval){.tag = tag,
                                    .comm = kind == SW_DEVICE_COMM,
                                    .stream = stream,
                                    .parent = index_of(dt, s, parent),
                                    .begin = e,
                                    .end = NO_EVENT};
    s->nswept += (uint32_t)swept(stream, kind);
    if (kind == SW_DEVICE_COMM) /* its time is the step's communication, never a tag's */
        COUNT(comm_intervals);
    else
        COUNT(intervals);
    return token_of(dt, i);
}

uint64_t sw_device_interval_begin(sw_device_timing *dt, uint64_t parent, uint32_t tag) {
    return sw_device_interval_on(dt, parent, tag, NULL, SW_DEVICE_COMPUTE);
}

void sw_device_interval_end(sw_device_timing *dt, uint64_t interval) {
    if (dt == NULL || dt->stopped)
        return;
    dt_step *s = sw__dt_open_step(dt);
    uint32_t i = index_of(dt, s, interval);
    if (i == NO_EVENT || s->intervals[i].end != NO_EVENT)
        return; /* another step's (its step ended first: not timed), or ended already */
    void *stream = s->intervals[i].stream;
    /* NO_EVENT: not timed */
    s->intervals[i].end = stream ? sw__dt_record_on(dt, stream) : sw__dt_record_boundary(dt, 0, 1);
}

int sw__dt_time_intervals(sw__device_time *dt, dt_step *s) {
    for (uint32_t i = 0; i < s->nintervals; i++) {
        dt_interval *v = &s->intervals[i];
        v->ns = v->child_ns = 0;
        if (v->end == NO_EVENT)
            continue;
        int rc = sw__dt_elapsed(dt, v->begin, v->end, &v->ns);
        if (rc != 0)
            return rc;
    }
    /* A child begins after its parent: from the last, each adds its time to its parent's. */
    for (uint32_t i = s->nintervals; i > 0; i--) {
        const dt_interval *v = &s->intervals[i - 1];
        if (v->end != NO_EVENT && v->parent != NO_EVENT)
            s->intervals[v->parent].child_ns += v->ns;
    }
    return 0;
}

void sw__dt_add_intervals(sw__device_time *dt, dt_step *s) {
    if (s->intervals_done)
        return;
    s->intervals_done = 1;
    for (uint32_t i = 0; i < s->nintervals; i++) {
        const dt_interval *v = &s->intervals[i];
        if (v->end == NO_EVENT || v->comm)
            continue;
        sw_device_interval_sum *sum = &dt->sums[v->tag];
        sum->count++;
        sum->ns += v->ns;
        sum->self_ns += v->ns > v->child_ns ? v->ns - v->child_ns : 0;
    }
}

/* The intervals of the ended steps the GPU has reached, oldest first, into the sums; stops
 * at the first not reached. Never waits. */
static void resolve_reached(sw__device_time *dt) {
    for (uint64_t k = dt->tail; k != dt->head && !dt->stopped; k++) {
        dt_step *s = sw__dt_slot(dt, k);
        if (s->state == SLOT_OPEN)
            return;
        if (s->intervals_done || s->nintervals == 0)
            continue;
        int rc = dt->clock.query(dt->clock.ctx, dt->events[s->spans[0].end]);
        if (rc == 1) { /* reached; an interval on another stream may not be yet */
            int timed = sw__dt_time_intervals(dt, s);
            rc = timed == 0 ? 1 : timed > 0 ? 0 : timed;
        }
        if (rc < 0)
            sw__dt_fail(dt, "query");
        if (rc != 1)
            return;
        sw__dt_add_intervals(dt, s);
    }
}

size_t sw_device_intervals_take(sw_device_timing *dt, sw_device_interval_sum *sums, size_t n) {
    if (dt == NULL || (sums == NULL && n > 0))
        return 0;
    if (!dt->exiting)
        resolve_reached(dt);
    uint64_t taken = 0;
    for (uint32_t tag = 0; tag < dt->nsums && tag < n; tag++) {
        sw_device_interval_sum *sum = &dt->sums[tag];
        sums[tag].count += sum->count;
        sums[tag].ns += sum->ns;
        sums[tag].self_ns += sum->self_ns;
        taken += sum->count;
        *sum = (sw_device_interval_sum){0};
    }
    atomic_fetch_add_explicit(&dt->intervals_timed, taken, memory_order_relaxed);
    return (size_t)taken;
}

uint64_t sw__dt_intervals_lost(sw__device_time *dt) {
    uint64_t begun = atomic_load(&dt->intervals), timed = atomic_load(&dt->intervals_timed);
    return begun > timed ? begun - timed : 0;
}
