/*
 * device_time.h — the state of a profiler's device timing, shared by device_events.c (the
 * pool of events and a step's boundaries), device_time.c (the phases and the step ring) and
 * device_intervals.c (intervals inside a step: per-module times). Private to the device
 * layer.
 */
#ifndef SW_DEVICE_DEVICE_TIME_H
#define SW_DEVICE_DEVICE_TIME_H

#include "core/sink.h"
#include "device.h"

#define DT_SPANS 16 /* spans a step can time, its own included */
#define NO_EVENT UINT32_MAX
#define DT_GAP_COPIES 4 /* copies between steps timed apart (x and y, a few more) */

/* What a span times: a category from data to zero_grad, the step, or the batch's copy. */
enum { WHAT_STEP = SW_CAT_CALLBACK, WHAT_COPY, NWHAT };

typedef struct dt_span {
    uint8_t what;
    uint8_t in_data;     /* a copy inside a data span or in the gap: in the step's data already */
    uint32_t begin, end; /* indexes into the pool; end NO_EVENT: never ended, not timed */
} dt_span;

/* An interval inside a step (sw_device_interval_begin): one module call's forward, say. */
typedef struct dt_interval {
    uint32_t tag;
    uint8_t comm;          /* communication (SW_DEVICE_COMM), else compute */
    void *stream;          /* NULL: the step's stream; else its events were recorded there */
    uint32_t parent;       /* the interval it runs inside, in the same step; NO_EVENT: none */
    uint32_t begin, end;   /* events; end NO_EVENT: not ended inside its step, not timed */
    uint64_t ns, child_ns; /* filled when resolved */
} dt_interval;

typedef enum { SLOT_OPEN, SLOT_PENDING } slot_state;

typedef struct dt_step {
    slot_state state;
    sw_phase phase;
    int64_t index; /* the step's global index: a gap only between consecutive steps */
    uint8_t warm;
    uint8_t has_gap;        /* gap_ns: GPU time from the previous step's end to this */
    uint8_t data_before;    /* its data wait was recorded after the fact (sw_record): it lies in
                            the gap */
    uint8_t intervals_done; /* its intervals were resolved into the sums already */
    uint32_t nspans;
    uint64_t gap_ns;
    dt_span spans[DT_SPANS]; /* spans[0] is the step */
    /* The events it holds, back to the pool once resolved; grown as needed, kept when the
     * slot is reused (as is the intervals' array). */
    uint32_t *events;
    uint32_t nevents, events_cap;
    dt_interval *intervals;
    uint32_t nintervals, intervals_cap;
    uint32_t nswept;        /* its intervals the exposed communication looks at (device_comm.c) */
    uint64_t comm_extra_ns; /* sw_device_comm_ns's while it was open */
} dt_step;

/* An end of an interval on the device's clock, for the exposed communication's sweep. */
typedef struct dt_point {
    uint64_t at;  /* ns from the step's begin event */
    uint8_t set;  /* which union it bounds (device_comm.c) */
    int8_t delta; /* +1 a begin, -1 an end */
} dt_point;

/* The device timing of one profiler: a sink (core/sink.h). The public name of the struct is
 * sw_device_timing (include/stepwatch/device.h). */
typedef struct sw_device_timing {
    sw__sink sink; /* first: the core hands this back to the ops below */
    sw_profiler *p;
    sw_gpu_clock clock;
    sw_id action[NWHAT];
    /* The pool: events[0..nmade) made so far; spare[0..nspare) the free ones. */
    void **events;
    uint32_t *spare;
    uint32_t nmade, nspare, pool_cap;
    /* The ring of steps: ring[tail % cap .. head % cap) wait or are open. */
    dt_step *ring;
    uint32_t cap;
    uint64_t head, tail;
    int open;             /* the newest step in the ring is being recorded */
    uint32_t generation;  /* counts the steps opened: an interval's token names its step */
    uint32_t last_event;  /* the open step's latest boundary ... */
    uint64_t last_at;     /* ... recorded then (host ns) ... */
    int last_was_begin;   /* ... by a span's begin */
    int open_span[NWHAT]; /* the outermost open span of each category, or -1 */
    uint32_t depth[NWHAT];
    uint32_t gap[DT_GAP_COPIES][2]; /* copies made between steps: begin, end events */
    uint32_t ngap;                  /* gap[ngap - 1][1] NO_EVENT: that copy is running */
    uint64_t stride;                /* every stride-th step is timed (1: all) */
    sw_id counter[SW__MAX_PHASES][NWHAT];
    /* The intervals resolved and not yet taken, summed by tag (device_intervals.c). */
    sw_device_interval_sum *sums;
    uint32_t nsums;
    /* The exposed communication's scratch, grown as intervals begin (never when resolving),
     * and its counters "device:<phase>/comm" and ".../comm_exposed". */
    dt_point *points;
    uint32_t points_cap;
    sw_id comm_counter[SW__MAX_PHASES][2];
    int stopped; /* failed, or the process is exiting */
    int exiting; /* the runtime may be going away: ask nothing of it */
    _Atomic uint64_t timed, dropped_steps, dropped_spans, warmup, sampled_out, sample_every,
        steps_captured, boundaries_captured, most_behind, nevents, intervals, intervals_timed,
        comm_intervals;
    _Atomic int failed;
} sw__device_time;

#define COUNT(field) atomic_fetch_add_explicit(&dt->field, 1, memory_order_relaxed)

/* ---- device_events.c ---- */

/* The step in ring position i (dt->tail <= i < dt->head). */
dt_step *sw__dt_slot(sw__device_time *dt, uint64_t i);
/* The step being recorded, or NULL. */
dt_step *sw__dt_open_step(sw__device_time *dt);
/* Stop the timing after a runtime error (said once on stderr). */
void sw__dt_fail(sw__device_time *dt, const char *what);
/* A free event of the pool, made now if none is free: its index, or NO_EVENT (out of
 * memory, or the runtime failed: the timing stops). */
uint32_t sw__dt_take_event(sw__device_time *dt);
/* Step s holds event e (given back with s): 0, or -1 out of memory (the timing stops). */
int sw__dt_own_event(sw__device_time *dt, dt_step *s, uint32_t e);
/* Step s's events back to the pool. */
void sw__dt_give_back(sw__device_time *dt, dt_step *s);
/* Record a boundary of the open step now: the event's index, or NO_EVENT (captured, or the
 * runtime failed). strict: share the previous boundary's event only when too little time
 * passed for a kernel launch between (intervals); else the phases' rules. */
uint32_t sw__dt_record_boundary(sw__device_time *dt, int is_begin, int strict);
/* The elapsed ns between two events of the pool: 0, 1 (not reached yet), < 0 (failed). */
int sw__dt_elapsed(sw__device_time *dt, uint32_t begin, uint32_t end, uint64_t *ns);
/* Record an event of the open step on stream (not the step's), never shared: its index, or
 * NO_EVENT (no record_on, captured, or the runtime failed). */
uint32_t sw__dt_record_on(sw__device_time *dt, void *stream);

/* ---- device_comm.c ---- */

/* Room in the scratch for step s's swept intervals and one more: 0, or -1 (out of memory:
 * that interval is not timed). */
int sw__dt_comm_room(sw__device_time *dt, const dt_step *s);
/* The communication of waiting step s (its end reached) and its exposed part, in ns: 0 done
 * (*comm_ns 0: none), 1 not yet (an event on another stream), < 0 the runtime failed. */
int sw__dt_comm_of(sw__device_time *dt, dt_step *s, uint64_t *comm_ns, uint64_t *exposed_ns);
/* Record a step's figures as samples of "device:<phase>/comm" and ".../comm_exposed". */
void sw__dt_comm_sample(sw__device_time *dt, sw_phase phase, uint64_t comm_ns, uint64_t exposed_ns);

/* ---- device_intervals.c ---- */

/* The GPU times of waiting step s's intervals (s's end reached): 0 done, 1 not yet (an
 * event on another stream), < 0 the runtime failed. Nothing is summed yet. */
int sw__dt_time_intervals(sw__device_time *dt, dt_step *s);
/* Sum s's timed intervals by tag (once: s->intervals_done). */
void sw__dt_add_intervals(sw__device_time *dt, dt_step *s);
/* The intervals begun and never handed to sw_device_intervals_take, at close. */
uint64_t sw__dt_intervals_lost(sw__device_time *dt);

#endif /* SW_DEVICE_DEVICE_TIME_H */
