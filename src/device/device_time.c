/*
 * device_time.c — GPU time per phase without synchronizing: a sink (core/sink.h) that
 * watches the category actions through the core's hook (sw__hook_set) and records a GPU
 * event (sw_gpu_clock: the CUDA runtime, or event objects from Python) at the begin and end
 * of each outermost data, forward, loss, backward, optimizer and zero_grad span of a step,
 * and of the step itself.
 *
 * Events are pooled (device_events.c): made once, reused when their step is resolved. One
 * event serves two spans where one ends and the next begins within 20 us on the host
 * (forward's end is loss's begin), and two marks of one call (the step's begin and its first
 * span's, when the loop marks both at once): about half the records of a step. Intervals
 * inside a step (per-module times, device_intervals.c) use the same events and steps.
 *
 * Steps wait in a ring that grows to DT_MAX_BEHIND steps. At every step's begin and end the
 * oldest waiting steps are resolved: one query of the step's end event (events on one stream
 * complete in order), then the elapsed time of each span. A step the GPU has not reached
 * stays for later; nothing ever waits. While the GPU is up to DT_MAX_BEHIND / 2 steps behind,
 * every step is timed. Further behind, a regular sample is timed: every k-th step (the step
 * index a multiple of k), k doubling as the waiting steps fill the ring (see chosen()).
 * sw_device_time_info and the reports say how many steps were timed and the largest k.
 *
 * What the times mean. Between two events the stream's clock runs while the GPU executes the
 * kernels launched between them and while it waits for the host to launch more: a phase's
 * device time is the GPU time of its kernels plus the GPU's idle gaps inside it. The time
 * between the end of one step and the begin of the next (the gap) counts in the next step's
 * device time, as its host time does. A loop that begins a step once its batch arrived
 * (the Python adapters: sw_step_begin_at, the data wait recorded after the fact) fetches
 * in the gap, where the GPU runs what is left of the previous step: the gap's elapsed time
 * is then the part of the data wait the GPU sat idle, the step's device "data". A data span
 * inside the step is timed like the others, with the same meaning: device "data" is the
 * data wait the kernels did not hide.
 *
 * While the stream is captured into a CUDA graph (the clock's record answers 1) nothing is
 * recorded: a step begun then is not timed, a span boundary then leaves its span untimed;
 * both are counted. A runtime error stops the timing (said once on stderr); the training
 * goes on untouched.
 *
 * Every resolved span becomes a sample of the counter "device:<phase>/<action>" in
 * nanoseconds (data and step: one per step), recorded like any counter; warm-up steps are
 * kept out as the host statistics keep them out.
 *
 * The batch's copy to the device (the action "h2d_copy", category data) is timed too: the
 * sum of a step's copies is one sample of "device:<phase>/h2d_copy", and counts in the
 * step's device data unless it lies inside a data span or in the gap (already there).
 * stepwatch.torch copies a batch before the step that consumes it begins: such copies'
 * events wait in gap[] (DT_GAP_COPIES of them; more extend the last one) and join the next
 * step that is timed.
 */
#include "device_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DT_MAX_BEHIND 1024u  /* steps that may wait for the GPU (sampling from half of it) */
#define DT_MAX_STRIDE 65536u /* sample at least every 65536th step */

/* The device timing whose step this thread records (the hook runs on every thread that
 * records a category action; only the step's own thread is timed). */
static _Thread_local sw__device_time *tl_timing;

static void span_begin(sw__device_time *dt, int what) {
    dt_step *s = sw__dt_open_step(dt);
    if (s->nspans == DT_SPANS) {
        COUNT(dropped_spans);
        return;
    }
    uint32_t e = sw__dt_record_boundary(dt, 1, 0);
    if (e == NO_EVENT)
        return;
    s->spans[s->nspans] = (dt_span){.what = (uint8_t)what,
                                    .in_data = what == WHAT_COPY && dt->depth[SW_CAT_DATA] > 0,
                                    .begin = e,
                                    .end = NO_EVENT};
    dt->open_span[what] = (int)s->nspans++;
}

static void span_end(sw__device_time *dt, int what) {
    dt_step *s = sw__dt_open_step(dt);
    int i = dt->open_span[what];
    dt->open_span[what] = -1;
    if (i >= 0)
        s->spans[i].end = sw__dt_record_boundary(dt, 0, 0); /* NO_EVENT: not timed */
}

/* "device:<phase>/<action>", interned on first use. */
static sw_id counter_of(sw__device_time *dt, sw_phase phase, int what) {
    if (dt->counter[phase][what] == SW_ID_NONE) {
        char name[SW__NAME_MAX + 1];
        const char *phase_name = sw_phase_name(dt->p, phase);
        snprintf(name, sizeof name, "device:%s/%s", phase_name ? phase_name : "none",
                 sw_action_name(dt->p, dt->action[what]));
        dt->counter[phase][what] = sw_counter_id(dt->p, name);
    }
    return dt->counter[phase][what];
}

static void sample(sw__device_time *dt, sw_phase phase, int what, uint64_t ns) {
    sw_id id = counter_of(dt, phase, what);
    if (id != SW_ID_NONE)
        sw_counter(dt->p, id, (double)ns);
}

/* The device times of waiting step s, once the GPU reached its end: 1 done, 0 not yet, -1
 * the runtime failed. next is the step after s, if it is in the ring: s's end to next's
 * begin is next's gap. */
static int resolve_step(sw__device_time *dt, dt_step *s, dt_step *next) {
    int reached = dt->clock.query(dt->clock.ctx, dt->events[s->spans[0].end]);
    if (reached <= 0)
        return reached;
    uint64_t ns[DT_SPANS];
    for (uint32_t i = 0; i < s->nspans; i++) {
        ns[i] = 0;
        if (s->spans[i].end == NO_EVENT)
            continue;
        int rc = sw__dt_elapsed(dt, s->spans[i].begin, s->spans[i].end, &ns[i]);
        if (rc != 0) /* 1: an event on another stream, not reached yet */
            return rc < 0 ? -1 : 0;
    }
    int rc = s->intervals_done ? 0 : sw__dt_time_intervals(dt, s);
    uint64_t comm_ns = 0, exposed_ns = 0;
    if (rc == 0)
        rc = sw__dt_comm_of(dt, s, &comm_ns, &exposed_ns); /* device_comm.c */
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (next != NULL && next->nspans > 0 && next->phase == s->phase &&
        next->index == s->index + 1) {
        rc = sw__dt_elapsed(dt, s->spans[0].end, next->spans[0].begin, &next->gap_ns);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        next->has_gap = 1;
    }
    sw__dt_add_intervals(dt, s); /* warm-up steps' too: the host's module times have them */
    if (s->warm) {
        COUNT(warmup);
        return 1;
    }
    int has_data = s->has_gap && s->data_before, has_copy = 0;
    uint64_t data_ns = has_data ? s->gap_ns : 0, copy_ns = 0;
    for (uint32_t i = 1; i < s->nspans; i++) {
        if (s->spans[i].end == NO_EVENT)
            continue;
        if (s->spans[i].what == SW_CAT_DATA) {
            data_ns += ns[i];
            has_data = 1;
        } else if (s->spans[i].what == WHAT_COPY) {
            copy_ns += ns[i];
            has_copy = 1;
            data_ns += s->spans[i].in_data ? 0 : ns[i];
            has_data |= !s->spans[i].in_data;
        } else {
            sample(dt, s->phase, s->spans[i].what, ns[i]);
        }
    }
    if (has_data)
        sample(dt, s->phase, SW_CAT_DATA, data_ns);
    if (has_copy)
        sample(dt, s->phase, WHAT_COPY, copy_ns);
    sample(dt, s->phase, WHAT_STEP, s->gap_ns + ns[0]);
    if (comm_ns > 0)
        sw__dt_comm_sample(dt, s->phase, comm_ns, exposed_ns);
    COUNT(timed);
    return 1;
}

/* Resolve the waiting steps the GPU has reached, oldest first; never waits. The newest
 * waits for the next step's begin (its gap belongs to that step), unless final. */
static void resolve(sw__device_time *dt, int final) {
    while (dt->tail != dt->head && !dt->stopped) {
        dt_step *s = sw__dt_slot(dt, dt->tail);
        dt_step *next = dt->tail + 1 != dt->head ? sw__dt_slot(dt, dt->tail + 1) : NULL;
        if (s->state == SLOT_OPEN || (next == NULL && !final))
            return;
        int rc = resolve_step(dt, s, next);
        if (rc < 0)
            sw__dt_fail(dt, "query");
        if (rc <= 0)
            return;
        sw__dt_give_back(dt, s);
        dt->tail++;
    }
}

/* Room in the ring for one more step: 0, or -1 when it holds DT_MAX_BEHIND waiting steps
 * (or cannot grow). The ring grows by doubling, its steps kept in order. */
static int make_room(sw__device_time *dt) {
    uint64_t n = dt->head - dt->tail;
    if (n < dt->cap)
        return 0;
    if (n >= DT_MAX_BEHIND)
        return -1;
    uint32_t cap = dt->cap ? 2 * dt->cap : 16;
    dt_step *ring = calloc(cap, sizeof *ring); /* the new slots have no arrays yet */
    if (ring == NULL)
        return -1;
    for (uint64_t i = 0; i < n; i++)
        ring[i] = *sw__dt_slot(dt, dt->tail + i);
    free(dt->ring);
    dt->ring = ring;
    dt->cap = cap;
    dt->tail = 0;
    dt->head = n;
    return 0;
}

/* Is step index one to time? Every step while fewer than DT_MAX_BEHIND / 2 steps wait for
 * the GPU; past that every stride-th, the stride doubling as the waiting steps fill each
 * half of the room left (2 from 1/2 full, 4 from 3/4, 8 from 7/8, ...), so that a GPU far
 * behind leaves a regular sample instead of a full ring; halved back once fewer than
 * DT_MAX_BEHIND / 8 wait. */
static int chosen(sw__device_time *dt, int64_t index) {
    uint64_t waiting = dt->head - dt->tail, want = 1, room = DT_MAX_BEHIND / 2;
    while (waiting >= DT_MAX_BEHIND - room && want < DT_MAX_STRIDE && room > 1) {
        want *= 2;
        room /= 2;
    }
    if (want > dt->stride)
        dt->stride = want;
    else if (dt->stride > 1 && waiting < DT_MAX_BEHIND / 8)
        dt->stride /= 2;
    if (dt->stride > atomic_load_explicit(&dt->sample_every, memory_order_relaxed))
        atomic_store_explicit(&dt->sample_every, dt->stride, memory_order_relaxed);
    return (uint64_t)index % dt->stride == 0 && make_room(dt) == 0;
}

static void step_begin(sw__device_time *dt) {
    if (dt->open) { /* its end came on another thread: not timed */
        sw__dt_give_back(dt, sw__dt_open_step(dt));
        dt->open = 0;
        dt->head--;
        COUNT(dropped_steps);
    }
    int ready = dt->clock.ready ? dt->clock.ready(dt->clock.ctx) : 1;
    if (ready != 1) { /* 0: no device in use yet (no context to create); 2: captured now */
        if (ready == 2)
            COUNT(steps_captured);
        return; /* nothing recorded, nothing queried (a query could break a capture) */
    }
    resolve(dt, 0);
    if (dt->stopped)
        return;
    int64_t index = sw_step_index(dt->p);
    if (!chosen(dt, index)) {
        COUNT(sampled_out);
        return;
    }
    uint64_t behind = dt->head - dt->tail + 1;
    if (behind > atomic_load_explicit(&dt->most_behind, memory_order_relaxed))
        atomic_store_explicit(&dt->most_behind, behind, memory_order_relaxed);
    dt_step *s = sw__dt_slot(dt, dt->head++);
    s->state = SLOT_OPEN;
    s->phase = sw__current_phase(dt->p);
    s->index = index;
    s->warm = (uint8_t)sw__in_warmup(dt->p);
    s->nspans = s->nevents = 0;
    s->has_gap = s->data_before = 0;
    s->gap_ns = 0;
    s->nintervals = s->nswept = 0;
    s->comm_extra_ns = 0;
    s->intervals_done = 0;
    dt->generation++;
    dt->open = 1;
    dt->last_event = NO_EVENT;
    tl_timing = dt;
    for (int w = 0; w < NWHAT; w++) {
        dt->open_span[w] = -1;
        dt->depth[w] = 0;
    }
    uint64_t captured = atomic_load_explicit(&dt->boundaries_captured, memory_order_relaxed);
    span_begin(dt, WHAT_STEP);
    if (s->nspans == 0) { /* not recorded: the stream is captured, or the runtime failed */
        if (!dt->stopped && atomic_load(&dt->boundaries_captured) != captured)
            COUNT(steps_captured);
        dt->open = 0;
        dt->head--;
        return;
    }
    resolve(dt, 0); /* the previous step may complete now that this one began */
}

static void step_end(sw__device_time *dt) {
    dt_step *s = sw__dt_open_step(dt);
    if (s == NULL)
        return;
    span_end(dt, WHAT_STEP);
    if (!dt->open)
        return; /* the runtime failed: the timing stopped */
    dt->open = 0;
    if (s->spans[0].end == NO_EVENT) { /* captured at its end: not timed */
        sw__dt_give_back(dt, s);
        dt->head--;
        COUNT(dropped_steps);
        return;
    }
    s->state = SLOT_PENDING;
    resolve(dt, 0);
}

/* ---- copies between steps ---- */

/* Record event e (NO_EVENT: a free one of the pool) now, outside any step: its index, or
 * NO_EVENT (the stream is captured, or the runtime failed: the timing stopped). */
static uint32_t record_gap(sw__device_time *dt, uint32_t e) {
    if (e == NO_EVENT && (e = sw__dt_take_event(dt)) == NO_EVENT)
        return NO_EVENT;
    int rc = dt->clock.record(dt->clock.ctx, dt->events[e]);
    if (rc == 0)
        return e;
    dt->spare[dt->nspare++] = e;
    if (rc < 0)
        sw__dt_fail(dt, "record");
    return NO_EVENT;
}

static void drop_gap(sw__device_time *dt) {
    for (uint32_t i = 0; i < dt->ngap; i++)
        for (int k = 0; k < 2; k++)
            if (dt->gap[i][k] != NO_EVENT)
                dt->spare[dt->nspare++] = dt->gap[i][k];
    dt->ngap = 0;
}

/* A copy begins (ends) with no step open: its own pair of events; past DT_GAP_COPIES, the
 * last pair's end is recorded again (an event marks its latest record). */
static void gap_copy(sw__device_time *dt, int begins) {
    if (begins) {
        if (dt->depth[WHAT_COPY]++ > 0 || dt->ngap == DT_GAP_COPIES)
            return;
        uint32_t e = record_gap(dt, NO_EVENT);
        if (e != NO_EVENT) {
            dt->gap[dt->ngap][0] = e;
            dt->gap[dt->ngap++][1] = NO_EVENT;
        }
    } else if (dt->depth[WHAT_COPY] > 0 && --dt->depth[WHAT_COPY] == 0 && dt->ngap > 0) {
        uint32_t *pair = dt->gap[dt->ngap - 1];
        uint32_t e = record_gap(dt, pair[1]);
        if (e == NO_EVENT && pair[1] != NO_EVENT) { /* its end went back to the pool */
            dt->spare[dt->nspare++] = pair[0];
            dt->ngap--;
        } else {
            pair[1] = e;
        }
    }
}

/* The step that began takes the copies made before it; a step not timed lets them go. */
static void settle_gap(sw__device_time *dt) {
    dt_step *s = sw__dt_open_step(dt);
    uint32_t i = 0;
    for (; s != NULL && i < dt->ngap && s->nspans < DT_SPANS; i++) {
        uint32_t begin = dt->gap[i][0], end = dt->gap[i][1];
        dt->gap[i][0] = dt->gap[i][1] = NO_EVENT;
        if (sw__dt_own_event(dt, s, begin) != 0 ||
            (end != NO_EVENT && sw__dt_own_event(dt, s, end) != 0))
            break; /* out of memory: the timing stopped */
        s->spans[s->nspans++] = (dt_span){
            .what = WHAT_COPY, .in_data = 1, .begin = begin, .end = end};
    }
    drop_gap(dt);
}

/* The core's hook: a watched action began or ends on this thread. */
static void on_action(void *ctx, sw_id id, int begins) {
    sw__device_time *dt = ctx;
    if (dt->stopped)
        return;
    int what = 0;
    while (what < NWHAT && dt->action[what] != id)
        what++;
    if (what == WHAT_STEP) {
        if (begins) {
            step_begin(dt);
            settle_gap(dt);
        } else if (tl_timing == dt) {
            step_end(dt);
        }
        return;
    }
    if (what == NWHAT || tl_timing != dt || (begins < 0 && what == WHAT_COPY))
        return;
    if (what == WHAT_COPY && !dt->open) {
        gap_copy(dt, begins);
        return;
    }
    if (!dt->open)
        return;
    if (begins < 0) { /* recorded after the fact: the data wait of a step begun late */
        sw__dt_open_step(dt)->data_before |= what == SW_CAT_DATA;
        return;
    }
    if (begins) {
        if (dt->depth[what]++ == 0)
            span_begin(dt, what);
    } else if (dt->depth[what] > 0 && --dt->depth[what] == 0) {
        span_end(dt, what);
    }
}

/* ---- the sink ---- */

static void free_timing(sw__device_time *dt, int release_events) {
    if (release_events) {
        for (uint32_t e = 0; e < dt->nmade; e++)
            dt->clock.event_free(dt->clock.ctx, dt->events[e]);
        if (dt->clock.release)
            dt->clock.release(dt->clock.ctx);
    }
    if (tl_timing == dt)
        tl_timing = NULL;
    for (uint32_t i = 0; i < dt->cap; i++) {
        free(dt->ring[i].events);
        free(dt->ring[i].intervals);
    }
    free(dt->sums);
    free(dt->points);
    free(dt->events);
    free(dt->spare);
    free(dt->ring);
    free(dt);
}

/* The process exits with p alive: the GPU runtime may be going away, so nothing more is
 * asked of it; steps still waiting are counted as dropped. */
static void exit_unfreed(sw__sink *sink) {
    sw__device_time *dt = (sw__device_time *)sink;
    dt->stopped = dt->exiting = 1;
}

/* What the timing did, as counters "device:<what>" (no '/': not a phase's time) for the
 * reports and the run file: never lost silently. */
static void record_summary(sw__device_time *dt, const char *name, uint64_t value, int always) {
    if (value == 0 && !always)
        return;
    sw_id id = sw_counter_id(dt->p, name);
    if (id != SW_ID_NONE)
        sw_counter(dt->p, id, (double)value);
}

static void close_sink(sw__sink *sink) {
    sw__device_time *dt = (sw__device_time *)sink;
    sw__hook_set(dt->p, NULL, NULL);
    if (dt->open) { /* never ended */
        dt->open = 0;
        dt->head--;
        COUNT(dropped_steps);
    }
    resolve(dt, 1); /* what the GPU has reached; the rest is dropped, never waited for */
    uint64_t waiting = dt->head - dt->tail;
    uint64_t dropped = atomic_fetch_add(&dt->dropped_steps, waiting) + waiting;
    uint64_t timed = atomic_load(&dt->timed);
    record_summary(dt, "device:dropped_steps", dropped, 0);
    if (timed + dropped + atomic_load(&dt->sampled_out) > 0) {
        record_summary(dt, "device:steps_timed", timed, 1);
        record_summary(dt, "device:steps_sampled_out", atomic_load(&dt->sampled_out), 0);
        record_summary(dt, "device:sample_every", atomic_load(&dt->sample_every), 0);
        record_summary(dt, "device:steps_captured", atomic_load(&dt->steps_captured), 0);
    }
    if (atomic_load(&dt->intervals) > 0) {
        record_summary(dt, "device:intervals_timed", atomic_load(&dt->intervals_timed), 1);
        record_summary(dt, "device:intervals_dropped", sw__dt_intervals_lost(dt), 0);
    }
    free_timing(dt, !dt->exiting);
}

static void forget_in_child(sw__sink *sink) {
    /* The events are the parent's GPU objects: leave them alone. */
    free_timing((sw__device_time *)sink, 0);
}

static const sw__sink_ops device_time_ops = {
    .on_exit = exit_unfreed,
    .on_close = close_sink,
    .on_fork_child = forget_in_child,
};

int sw_device_time_clock(sw_profiler *p, const sw_gpu_clock *given) {
    sw_gpu_clock c; /* the caller's clock, of whatever stepwatch/device.h it was built with */
    int rc = sw__sized_in(&c, sizeof c, given, SW__END_OF(sw_gpu_clock, release), "sw_gpu_clock");
    if (rc == SW_EUNSUPPORTED && given->release) /* its size covers release */
        given->release(given->ctx);
    if (rc != 0)
        return rc;
    const sw_gpu_clock *clock = &c;
    if (p == NULL || given == NULL || !clock->event_new || !clock->record || !clock->query ||
        !clock->elapsed_ns || !clock->event_free) {
        if (clock->release)
            clock->release(clock->ctx);
        return SW_EINVAL;
    }
    rc = sw__sink_find(p, &device_time_ops) ? SW_ESTATE : 0;
    sw__device_time *dt = rc == 0 ? calloc(1, sizeof *dt) : NULL;
    if (rc == 0 && dt == NULL)
        rc = SW_ENOMEM;
    for (int w = 0; rc == 0 && w < NWHAT; w++) {
        const char *name = w == WHAT_STEP   ? "step"
                           : w == WHAT_COPY ? "h2d_copy"
                                            : sw_category_name((sw_category)w);
        dt->action[w] = sw_action(p, name);
        rc = dt->action[w] == SW_ID_NONE ? SW_ELIMIT : sw__hook_watch(p, dt->action[w], 1);
    }
    if (rc == 0)
        rc = sw__hook_set(p, on_action, dt);
    if (rc != 0) {
        free(dt);
        if (clock->release)
            clock->release(clock->ctx);
        return rc;
    }
    dt->sink.ops = &device_time_ops;
    dt->p = p;
    dt->clock = *clock;
    dt->stride = 1;
    dt->sample_every = 1;
    dt->last_event = NO_EVENT;
    dt->ngap = 0;
    for (uint32_t ph = 0; ph < SW__MAX_PHASES; ph++) {
        for (int w = 0; w < NWHAT; w++)
            dt->counter[ph][w] = SW_ID_NONE;
        dt->comm_counter[ph][0] = dt->comm_counter[ph][1] = SW_ID_NONE;
    }
    sw__sink_attach(p, &dt->sink);
    return 0;
}

static int attach_cuda(sw_profiler *p, int rc, sw_gpu_clock *clock, const char *why) {
    if (rc == SW_EUNSUPPORTED)
        sw__device_say_once(SW__SAY_NO_CUDART, "no device time (%s)", why);
    return rc == 0 ? sw_device_time_clock(p, clock) : rc;
}

int sw_device_time_cuda(sw_profiler *p, void *stream) {
    if (p == NULL)
        return SW_EINVAL;
    sw_gpu_clock clock;
    char why[256];
    int rc = sw__cudart_clock(stream, NULL, NULL, NULL, &clock, why, sizeof why);
    return attach_cuda(p, rc, &clock, why);
}

int sw_device_time_cuda_streams(sw_profiler *p, sw_stream_fn fn, void *ctx,
                                void (*release)(void *ctx)) {
    if (p == NULL || fn == NULL) {
        if (release)
            release(ctx);
        return SW_EINVAL;
    }
    sw_gpu_clock clock;
    char why[256];
    int rc = sw__cudart_clock(NULL, fn, ctx, release, &clock, why, sizeof why);
    return attach_cuda(p, rc, &clock, why);
}

sw_device_timing *sw_device_timing_of(sw_profiler *p) {
    return p ? (sw_device_timing *)sw__sink_find(p, &device_time_ops) : NULL;
}

int sw_device_time_info_get(sw_profiler *p, sw_device_time_info *out) {
    if (p == NULL || out == NULL)
        return SW_EINVAL;
    sw__device_time *dt = (sw__device_time *)sw__sink_find(p, &device_time_ops);
    if (dt == NULL)
        return SW_ENOTFOUND;
    sw_device_time_info info = {.size = sizeof info,
                                .steps_timed = atomic_load(&dt->timed),
                                .steps_dropped = atomic_load(&dt->dropped_steps),
                                .spans_dropped = atomic_load(&dt->dropped_spans),
                                .warmup_steps = atomic_load(&dt->warmup),
                                .failed = atomic_load(&dt->failed),
                                .steps_sampled_out = atomic_load(&dt->sampled_out),
                                .sample_every = atomic_load(&dt->sample_every),
                                .steps_captured = atomic_load(&dt->steps_captured),
                                .boundaries_captured = atomic_load(&dt->boundaries_captured),
                                .most_behind = atomic_load(&dt->most_behind),
                                .events = atomic_load(&dt->nevents),
                                .intervals = atomic_load(&dt->intervals),
                                .intervals_timed = atomic_load(&dt->intervals_timed),
                                .comm_intervals = atomic_load(&dt->comm_intervals)};
    /* Into the caller's struct, of whatever stepwatch/device.h it was built with. */
    return sw__sized_out(out, &info, sizeof info, SW__END_OF(sw_device_time_info, intervals_timed),
                         "sw_device_time_info");
}
