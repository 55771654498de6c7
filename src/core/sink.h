/*
 * sink.h — how the layers above the core receive what a profiler records (private).
 *
 * The recorder knows no consumer by name. A consumer (today the run-file writer; later a
 * live status line, a device sampler, rank aggregation) embeds a struct sw__sink, fills in
 * its ops, and attaches it to a profiler. The core calls the ops at the moments only the core
 * sees; each op may be NULL:
 *
 *   wake           a recording thread waits on a full event ring (on_full SW_FULL_BLOCK):
 *                  drain soon. Runs on that thread, so it must be cheap and never block
 *                  (the run file writes one byte to a pipe).
 *   on_exit        the process exits (an atexit hook) and the profiler was never freed:
 *                  complete the output now. The sink stays attached; on_close still follows
 *                  if the profiler is freed later (by another atexit hook, say).
 *   on_close       sw_profiler_free, the sink already detached: drain what is left, complete
 *                  the output and free the sink. The profiler is still whole during the call.
 *   before_fork    fork() is about to copy the process (pthread_atfork's prepare), before
 *                  the core takes its own locks: reach a state the child can live with.
 *                  The run file waits until its flusher is out of SQLite, so no SQLite
 *                  mutex is held across fork and the child can use SQLite (its own or the
 *                  user's). May block briefly; must not take the profiler's lock.
 *   after_fork     in the parent after fork (pthread_atfork's parent): undo before_fork.
 *                  Called for exactly the sinks that got before_fork.
 *   on_fork_child  in a fork child (pthread_atfork), the sink already detached: what the sink
 *                  holds (files, threads, connections) is the parent's; free memory only.
 *                  What before_fork locked is locked in the child too: never unlock it.
 *
 * on_exit runs with the core's process-wide lock held: it must not create or free profilers.
 *
 * Events. Steps, counter samples and (with the timeline option) spans go into per-thread
 * rings once a sink calls sw__events_enable; sw__drain empties them. The rings have one
 * consumer, so at most one attached sink drains them (today the run-file writer).
 */
#ifndef SW_CORE_SINK_H
#define SW_CORE_SINK_H

#include "core.h"

typedef struct sw__sink sw__sink;

typedef struct sw__sink_ops {
    void (*wake)(sw__sink *sink);
    void (*on_exit)(sw__sink *sink);
    void (*on_close)(sw__sink *sink);
    void (*on_fork_child)(sw__sink *sink);
    void (*before_fork)(sw__sink *sink);
    void (*after_fork)(sw__sink *sink);
} sw__sink_ops;

struct sw__sink {
    const sw__sink_ops *ops;
    sw__sink *next; /* the profiler's list of sinks, kept by the core */
};

/* Attach sink to p: from now on the core calls its ops, and p owns it (sw_profiler_free
 * closes it). Safe while other threads record. */
void sw__sink_attach(sw_profiler *p, sw__sink *sink);
/* Take sink off p without calling any op. Only while no thread records into p (a recording
 * thread may be calling wake), as in sw_profiler_free. */
void sw__sink_detach(sw_profiler *p, sw__sink *sink);
/* The attached sink with these ops (the layer that owns a kind of sink finds its own), or
 * NULL. */
sw__sink *sw__sink_find(sw_profiler *p, const sw__sink_ops *ops);

/* ---- events: one tagged record per span, step or counter sample ---- */

typedef enum sw__event_kind {
    SW__EVENT_SPAN = 1,
    SW__EVENT_STEP = 2,
    SW__EVENT_COUNTER = 3,
    /* a span of a slow step's window (docs/slow-steps.md), after that step's STEP event:
     * the spans of the step before it, then its own; kept even with the timeline off */
    SW__EVENT_WINDOW_SPAN = 4
} sw__event_kind;

typedef struct sw__event {
    sw__event_kind kind;
    union {
        sw_span_record span;
        sw_step_record step;
        sw_counter_record counter;
    } u;
} sw__event;

typedef void (*sw__event_fn)(void *ctx, const sw__event *event);

/* Turn event buffering on (the draining sink calls this once it is ready): spans only when
 * the timeline option is on; steps and counters always. */
void sw__events_enable(sw_profiler *p);

/* Called by the draining sink's own thread (the single consumer): hands every buffered event
 * of every thread to fn, oldest first per thread, and frees their room. Returns how many.
 * fn runs under the profiler's lock: copy, do not write. Safe while other threads record. */
size_t sw__drain(sw_profiler *p, sw__event_fn fn, void *ctx);

#endif /* SW_CORE_SINK_H */
