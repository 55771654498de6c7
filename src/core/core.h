/*
 * internal.h — what the library's files share and users never see.
 *
 * The recorder (recorder.c) owns struct sw_profiler and the per-thread records. Other layers
 * reach the profiler only through the functions below: the journal (journal.c) drains
 * events and reads names; reports work on snapshots.
 */
#ifndef SW_INTERNAL_H
#define SW_INTERNAL_H

#include "stepwatch.h"

#include <stdatomic.h>

#define SW__MAX_ACTIONS 4096u
#define SW__MAX_PHASES 32u
#define SW__MAX_COUNTERS 256u
#define SW__NAME_MAX 255u

/* Welford/Chan for a block of raw durations: the sum of squared deviations of n_a values
 * (mean mean_a, m2_a) together with the n_b values v. The recorder batches durations so the
 * floating-point work (a division) runs once per block instead of once per span. */
double sw__m2_fold(uint64_t n_a, double mean_a, double m2_a, const uint64_t *v, uint32_t n_b);

/* The histogram bucket of a duration (hist.c documents the layout); inline because the
 * recorder calls it on every span. */
static inline uint32_t sw__hist_bucket(uint64_t ns) {
    const uint32_t sub_count = 1u << SW_HIST_SUB_BITS;
    if (ns < sub_count)
        return (uint32_t)ns;
    uint32_t e = 63u - (uint32_t)__builtin_clzll(ns);
    if (e > SW_HIST_MAX_EXP)
        return SW_HIST_BUCKETS - 1;
    uint32_t sub = (uint32_t)(ns >> (e - SW_HIST_SUB_BITS)) & (sub_count - 1);
    return ((e - SW_HIST_SUB_BITS + 1) << SW_HIST_SUB_BITS) + sub;
}

/* ---- events for the run file: one tagged record per span, step or counter sample ---- */

typedef enum sw__event_kind {
    SW__EVENT_SPAN = 1,
    SW__EVENT_STEP = 2,
    SW__EVENT_COUNTER = 3
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

/* Called by the journal's flusher thread (the single consumer): hands every buffered event
 * of every thread to fn, oldest first per thread, and frees their room. Returns how many.
 * Safe while other threads record. */
size_t sw__drain(sw_profiler *p, sw__event_fn fn, void *ctx);

/* Turn event buffering on (the journal calls this once it is ready) — spans only when the
 * timeline option is on; steps and counters always. */
void sw__events_enable(sw_profiler *p);

/* Events dropped because a buffer was full (SW_FULL_DROP). */
uint64_t sw__events_dropped(const sw_profiler *p);

/* The options the profiler was made with (strings owned by the profiler). */
const sw_options *sw__options(const sw_profiler *p);

/* Monotonic time at which the profiler started (record times are relative to it) and the
 * wall-clock time at that moment. */
uint64_t sw__origin_ns(const sw_profiler *p);
uint64_t sw__origin_unix_ns(const sw_profiler *p);

/* Counter names (NULL for unknown ids), and how many actions/phases/counters exist. */
const char *sw__counter_name(const sw_profiler *p, sw_id counter);
uint32_t sw__action_count(const sw_profiler *p);
uint32_t sw__phase_count(const sw_profiler *p);
uint32_t sw__counter_count(const sw_profiler *p);

/* ---- the journal (journal.c): the run file writer, started by sw_profiler_new ---- */

typedef struct sw__journal sw__journal;

/* Open the run file at path for p (path already has {rank} expanded), write the metadata,
 * start the flusher thread and enable events. */
int sw__journal_open(sw_profiler *p, const char *path, sw__journal **out);
/* Drain what is left, write the final aggregates and close. NULL is a no-op. */
void sw__journal_close(sw__journal *j);
/* Make the flusher drain now instead of at its next period (a thread waits on a full ring
 * under SW_FULL_BLOCK). NULL is a no-op. */
void sw__journal_wake(sw__journal *j);
/* After fork(), in the child: forget the journal without touching the parent's file. */
void sw__journal_abandon(sw__journal *j);

/* ---- building snapshots (snapshot.c): every snapshot, from the recorder or from a run file,
 * is built with these so that sw_snapshot_free can free any of them ---- */

/* An empty snapshot (counts zero, rank 0, world size 1). NULL when out of memory. */
sw_snapshot *sw__snapshot_new(void);
/* A copy of str owned by s (NULL for NULL str or out of memory). Use it for every string a
 * snapshot points to: name, host, command, row and counter names. */
const char *sw__snapshot_string(sw_snapshot *s, const char *str);
/* Append a copy of row (its names are copied into s). 0 or SW_ENOMEM. */
int sw__snapshot_add_row(sw_snapshot *s, const sw_row *row);
int sw__snapshot_add_counter(sw_snapshot *s, const sw_counter_summary *counter);
/* After the per-phase rows: append one roll-up row per action (phase SW_PHASE_ALL, phase name
 * "all") merging that action's rows, and set wall_ns (the "fit" total, else elapsed_ns). */
int sw__snapshot_finish(sw_snapshot *s);

/* ---- small shared helpers (util.c) ---- */

/* strdup that returns NULL on NULL. */
char *sw__strdup(const char *s);
/* This host's name into buf (never fails: "unknown" at worst). */
void sw__hostname(char *buf, size_t size);
/* The process's command line, arguments joined by spaces; caller frees. */
char *sw__command_line(void);
/* Replace every "{rank}" in pattern with rank; caller frees. */
char *sw__expand_rank(const char *pattern, int rank);

#endif /* SW_INTERNAL_H */
