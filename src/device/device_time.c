/*
 * device_time.c — GPU time per phase without synchronizing: a sink (core/sink.h) that
 * watches the category actions through the core's hook (sw__hook_set) and records a GPU
 * event (sw_gpu_clock: the CUDA runtime, or torch.cuda.Event from Python) at the begin and
 * end of each outermost data, forward, loss, backward, optimizer and zero_grad span of a
 * step, and of the step itself.
 *
 * A step's events wait in a ring of DT_STEPS slots. At every step's begin and end the oldest
 * waiting steps are resolved: one query of the step's end event (events on one stream
 * complete in order), then the elapsed time of each span. A step the GPU has not reached
 * stays for later; nothing waits, so the GPU may lag the host by up to DT_STEPS steps before
 * the oldest is dropped (and counted).
 *
 * What the times mean. Between two events the stream's clock runs while the GPU executes the
 * kernels launched between them and while it waits for the host to launch more: a phase's
 * device time is the GPU time of its kernels plus the GPU's idle gaps inside it. The time
 * between the end of one step and the begin of the next (the gap) counts in the next step's
 * device time, as its host time does. A loop that begins a step once its batch arrived
 * (stepwatch.torch, Ignite: sw_step_begin_at, the data wait recorded after the fact) fetches
 * in the gap, where the GPU runs what is left of the previous step: the gap's elapsed time
 * is then the part of the data wait the GPU sat idle, the step's device "data". A data span
 * inside the step is timed like the others, with the same meaning: device "data" is the
 * data wait the kernels did not hide.
 *
 * Every resolved span becomes a sample of the counter "device:<phase>/<action>" in
 * nanoseconds (data and step: one per step), recorded like any counter; warm-up steps are
 * kept out as the host statistics keep them out.
 */
#include "device.h"
#include "core/sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DT_STEPS 8  /* steps whose events may wait for the GPU */
#define DT_SPANS 16 /* spans a step can time, its own included */

/* What a span times: a category from data to zero_grad, or the step. */
enum { WHAT_STEP = SW_CAT_CALLBACK, NWHAT };

typedef struct dt_span {
    uint8_t what;
    void *begin, *end; /* end NULL: never ended, not timed */
} dt_span;

typedef enum { SLOT_FREE, SLOT_OPEN, SLOT_PENDING } slot_state;

typedef struct dt_step {
    slot_state state;
    sw_phase phase;
    int64_t index; /* the step's global index: a gap only between consecutive steps */
    int warm;
    uint32_t nspans;
    dt_span spans[DT_SPANS];     /* spans[0] is the step */
    void *events[2 * DT_SPANS];  /* made on first use, reused by later steps */
    uint32_t made, used;
    int has_gap;                 /* gap_ns: GPU time from the previous step's end to this */
    uint64_t gap_ns;
    int data_before;             /* its data wait was recorded after the fact (sw_record): it
                                    lies in the gap */
} dt_step;

typedef struct sw__device_time {
    sw__sink sink; /* first: the core hands this back to the ops below */
    sw_profiler *p;
    sw_gpu_clock clock;
    sw_id action[NWHAT];
    dt_step ring[DT_STEPS];
    uint64_t head, tail; /* slots opened and slots done so far (index: mod DT_STEPS) */
    dt_step *open;       /* the step being recorded */
    int open_span[NWHAT]; /* the outermost open span of each category in open, or -1 */
    uint32_t depth[NWHAT];
    sw_id counter[SW__MAX_PHASES][NWHAT];
    int stopped;  /* failed, or the process is exiting */
    int exiting;  /* the runtime may be going away: ask nothing of it */
    _Atomic uint64_t timed, dropped_steps, dropped_spans, warmup;
    _Atomic int failed;
} sw__device_time;

/* The device timing whose step this thread records (the hook runs on every thread that
 * records a category action; only the step's own thread is timed). */
static _Thread_local sw__device_time *tl_timing;

static void fail(sw__device_time *dt, const char *what) {
    dt->stopped = 1;
    dt->open = NULL;
    atomic_store(&dt->failed, 1);
    sw__device_say_once(SW__SAY_GPU_ERROR,
                        "device time stopped: the GPU runtime failed to %s an event", what);
}

/* An event of step s for this step's next use: one made earlier, else a new one. */
static void *take_event(sw__device_time *dt, dt_step *s) {
    if (s->used == s->made) {
        if (dt->clock.event_new(dt->clock.ctx, &s->events[s->made]) != 0) {
            fail(dt, "create");
            return NULL;
        }
        s->made++;
    }
    return s->events[s->used++];
}

/* Record an event for a span boundary into *out: 0, or nonzero when there is none (the
 * stream is captured into a graph, or the runtime failed). */
static int record_event(sw__device_time *dt, void **out) {
    dt_step *s = dt->open;
    void *event = take_event(dt, s);
    if (event == NULL)
        return -1;
    int rc = dt->clock.record(dt->clock.ctx, event);
    if (rc < 0)
        fail(dt, "record");
    if (rc != 0) {
        s->used--;
        return -1;
    }
    *out = event;
    return 0;
}

static void span_begin(sw__device_time *dt, int what) {
    dt_step *s = dt->open;
    if (s->nspans == DT_SPANS) {
        atomic_fetch_add_explicit(&dt->dropped_spans, 1, memory_order_relaxed);
        return;
    }
    dt_span *span = &s->spans[s->nspans];
    if (record_event(dt, &span->begin) != 0)
        return;
    span->what = (uint8_t)what;
    span->end = NULL;
    dt->open_span[what] = (int)s->nspans++;
}

static void span_end(sw__device_time *dt, int what) {
    int i = dt->open_span[what];
    dt->open_span[what] = -1;
    if (i >= 0 && record_event(dt, &dt->open->spans[i].end) != 0)
        dt->open->spans[i].end = NULL;
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
 * the runtime failed. next is the step after s, if it is still in the ring: s's end to
 * next's begin is next's gap. */
static int resolve_step(sw__device_time *dt, dt_step *s, dt_step *next) {
    int reached = dt->clock.query(dt->clock.ctx, s->spans[0].end);
    if (reached <= 0)
        return reached;
    uint64_t ns[DT_SPANS];
    for (uint32_t i = 0; i < s->nspans; i++) {
        ns[i] = 0;
        if (s->spans[i].end == NULL)
            continue;
        int rc = dt->clock.elapsed_ns(dt->clock.ctx, s->spans[i].begin, s->spans[i].end, &ns[i]);
        if (rc != 0) /* 1: an event on another stream, not reached yet */
            return rc < 0 ? -1 : 0;
    }
    if (next != NULL && next->state != SLOT_FREE && next->nspans > 0 &&
        next->phase == s->phase && next->index == s->index + 1) {
        int rc = dt->clock.elapsed_ns(dt->clock.ctx, s->spans[0].end, next->spans[0].begin,
                                      &next->gap_ns);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        next->has_gap = 1;
    }
    if (s->warm) {
        atomic_fetch_add_explicit(&dt->warmup, 1, memory_order_relaxed);
        return 1;
    }
    int has_data = s->has_gap && s->data_before;
    uint64_t data_ns = has_data ? s->gap_ns : 0;
    for (uint32_t i = 1; i < s->nspans; i++) {
        if (s->spans[i].end == NULL)
            continue;
        if (s->spans[i].what == SW_CAT_DATA) {
            data_ns += ns[i];
            has_data = 1;
        } else {
            sample(dt, s->phase, s->spans[i].what, ns[i]);
        }
    }
    if (has_data)
        sample(dt, s->phase, SW_CAT_DATA, data_ns);
    sample(dt, s->phase, WHAT_STEP, s->gap_ns + ns[0]);
    atomic_fetch_add_explicit(&dt->timed, 1, memory_order_relaxed);
    return 1;
}

/* Resolve the waiting steps the GPU has reached, oldest first; never waits. The newest
 * waits for the next step's begin (its gap belongs to that step), unless final. */
static void resolve(sw__device_time *dt, int final) {
    while (dt->tail != dt->head && !dt->stopped) {
        dt_step *s = &dt->ring[dt->tail % DT_STEPS];
        dt_step *next = dt->tail + 1 != dt->head ? &dt->ring[(dt->tail + 1) % DT_STEPS] : NULL;
        if (s->state == SLOT_OPEN || (next == NULL && !final))
            return;
        if (s->state == SLOT_PENDING) {
            int rc = resolve_step(dt, s, next);
            if (rc < 0)
                fail(dt, "query");
            if (rc <= 0)
                return;
        }
        s->state = SLOT_FREE;
        dt->tail++;
    }
}

static void step_begin(sw__device_time *dt) {
    if (dt->open != NULL) { /* its end came on another thread: not timed */
        dt->open->state = SLOT_FREE;
        dt->open = NULL;
        atomic_fetch_add_explicit(&dt->dropped_steps, 1, memory_order_relaxed);
    }
    if (dt->clock.ready && !dt->clock.ready(dt->clock.ctx))
        return; /* no device in use yet: nothing to time, and no context to create */
    resolve(dt, 0);
    if (dt->stopped)
        return;
    if (dt->head - dt->tail == DT_STEPS) { /* the GPU is DT_STEPS steps behind */
        dt->ring[dt->tail % DT_STEPS].state = SLOT_FREE;
        dt->tail++;
        atomic_fetch_add_explicit(&dt->dropped_steps, 1, memory_order_relaxed);
    }
    dt_step *s = &dt->ring[dt->head++ % DT_STEPS];
    s->state = SLOT_OPEN;
    s->phase = sw__current_phase(dt->p);
    s->index = sw_step_index(dt->p);
    s->warm = sw__in_warmup(dt->p);
    s->nspans = s->used = 0;
    s->has_gap = s->data_before = 0;
    s->gap_ns = 0;
    dt->open = s;
    tl_timing = dt;
    for (int w = 0; w < NWHAT; w++) {
        dt->open_span[w] = -1;
        dt->depth[w] = 0;
    }
    span_begin(dt, WHAT_STEP);
    if (s->nspans == 0) { /* not recorded: the stream is captured, or the runtime failed */
        s->state = SLOT_FREE;
        dt->open = NULL;
    }
    resolve(dt, 0); /* the previous step may complete now that this one began */
}

static void step_end(sw__device_time *dt) {
    dt_step *s = dt->open;
    if (s == NULL)
        return;
    span_end(dt, WHAT_STEP);
    dt->open = NULL;
    if (s->spans[0].end == NULL) {
        s->state = SLOT_FREE;
        atomic_fetch_add_explicit(&dt->dropped_steps, 1, memory_order_relaxed);
        return;
    }
    s->state = SLOT_PENDING;
    resolve(dt, 0);
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
        if (begins)
            step_begin(dt);
        else if (tl_timing == dt)
            step_end(dt);
        return;
    }
    if (what == NWHAT || tl_timing != dt || dt->open == NULL)
        return;
    if (begins < 0) { /* recorded after the fact: the data wait of a step begun late */
        dt->open->data_before |= what == SW_CAT_DATA;
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
        for (int i = 0; i < DT_STEPS; i++)
            for (uint32_t e = 0; e < dt->ring[i].made; e++)
                dt->clock.event_free(dt->clock.ctx, dt->ring[i].events[e]);
        if (dt->clock.release)
            dt->clock.release(dt->clock.ctx);
    }
    if (tl_timing == dt)
        tl_timing = NULL;
    free(dt);
}

/* The process exits with p alive: the GPU runtime may be going away, so nothing more is
 * asked of it; steps still waiting are counted as dropped. */
static void exit_unfreed(sw__sink *sink) {
    sw__device_time *dt = (sw__device_time *)sink;
    dt->stopped = dt->exiting = 1;
}

static void close_sink(sw__sink *sink) {
    sw__device_time *dt = (sw__device_time *)sink;
    sw__hook_set(dt->p, NULL, NULL);
    dt->open = NULL;
    resolve(dt, 1); /* what the GPU has reached; the rest is dropped, never waited for */
    uint64_t waiting = 0;
    for (uint64_t i = dt->tail; i != dt->head; i++)
        waiting += dt->ring[i % DT_STEPS].state != SLOT_FREE;
    uint64_t dropped = atomic_fetch_add(&dt->dropped_steps, waiting) + waiting;
    if (dropped > 0) { /* in the reports and the run file, never lost silently */
        sw_id id = sw_counter_id(dt->p, "device:dropped_steps");
        if (id != SW_ID_NONE)
            sw_counter(dt->p, id, (double)dropped);
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

int sw_device_time_clock(sw_profiler *p, const sw_gpu_clock *clock) {
    if (p == NULL || clock == NULL || !clock->event_new || !clock->record || !clock->query ||
        !clock->elapsed_ns || !clock->event_free) {
        if (clock && clock->release)
            clock->release(clock->ctx);
        return SW_EINVAL;
    }
    int rc = sw__sink_find(p, &device_time_ops) ? SW_ESTATE : 0;
    sw__device_time *dt = rc == 0 ? calloc(1, sizeof *dt) : NULL;
    if (rc == 0 && dt == NULL)
        rc = SW_ENOMEM;
    for (int w = 0; rc == 0 && w < NWHAT; w++) {
        const char *name = w == WHAT_STEP ? "step" : sw_category_name((sw_category)w);
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
    for (uint32_t ph = 0; ph < SW__MAX_PHASES; ph++)
        for (int w = 0; w < NWHAT; w++)
            dt->counter[ph][w] = SW_ID_NONE;
    sw__sink_attach(p, &dt->sink);
    return 0;
}

int sw_device_time_cuda(sw_profiler *p, void *stream) {
    if (p == NULL)
        return SW_EINVAL;
    sw_gpu_clock clock;
    char why[256];
    int rc = sw__cudart_clock(stream, &clock, why, sizeof why);
    if (rc == SW_EUNSUPPORTED)
        sw__device_say_once(SW__SAY_NO_CUDART, "no device time (%s)", why);
    return rc == 0 ? sw_device_time_clock(p, &clock) : rc;
}

int sw_device_time_info_get(sw_profiler *p, sw_device_time_info *out) {
    if (p == NULL || out == NULL)
        return SW_EINVAL;
    sw__device_time *dt = (sw__device_time *)sw__sink_find(p, &device_time_ops);
    if (dt == NULL)
        return SW_ENOTFOUND;
    *out = (sw_device_time_info){.steps_timed = atomic_load(&dt->timed),
                                 .steps_dropped = atomic_load(&dt->dropped_steps),
                                 .spans_dropped = atomic_load(&dt->dropped_spans),
                                 .warmup_steps = atomic_load(&dt->warmup),
                                 .failed = atomic_load(&dt->failed)};
    return 0;
}
