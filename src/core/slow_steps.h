/*
 * slow_steps.h — what the recorder keeps per thread to find and explain slow steps as they
 * end (docs/slow-steps.md), private to src/core/. The rule and the causes are in
 * slow_steps.c, the OS reads in os_signals.c, the per-step work in recorder_slow.c.
 */
#ifndef SW_CORE_SLOW_STEPS_H
#define SW_CORE_SLOW_STEPS_H

#include "stepwatch.h"

/* The running median: the last SW__MEDIAN_WINDOW durations, in arrival order (ring) and
 * sorted (a removal and an insertion per step: a few dozen moves). */
#define SW__MEDIAN_WINDOW 63u

typedef struct sw__median {
    uint64_t ring[SW__MEDIAN_WINDOW];
    uint64_t sorted[SW__MEDIAN_WINDOW];
    uint32_t n;    /* values held (up to the window) */
    uint32_t next; /* ring slot the next value replaces */
} sw__median;

void sw__median_add(sw__median *m, uint64_t value);
/* The median of the values held; 0 with fewer than SW_SLOW_MIN_HISTORY. */
uint64_t sw__median_get(const sw__median *m);

/* One getrusage(RUSAGE_THREAD) reading, at wall_ns (sw__clock_ns), and schedstat's run_delay
 * (the ns the thread has waited runnable for a CPU) where has_run_delay. */
typedef struct sw__os_sample {
    uint64_t wall_ns, cpu_ns, sys_ns;
    uint64_t voluntary, involuntary, minor, major;
    uint64_t run_delay_ns;
    int has_run_delay;
} sw__os_sample;

/* The files a thread reads its figures from, opened at its first read, by that thread. */
typedef struct sw__os_files {
    int opened;
    int schedstat_fd; /* /proc/thread-self/schedstat; -1: none (not Linux, no schedstats) */
} sw__os_files;

void sw__os_open(sw__os_files *f);
void sw__os_close(sw__os_files *f);
/* Read the calling thread's figures now: 1, or 0 where the system cannot tell. */
int sw__os_read(const sw__os_files *f, sw__os_sample *out);

/* The spans of one step (its window half), in the order they ended. */
typedef struct sw__step_spans {
    sw_span_record *spans; /* SW_SLOW_WINDOW_SPANS, allocated at the thread's first step */
    uint32_t n;
    uint32_t dropped; /* ended in the step beyond SW_SLOW_WINDOW_SPANS */
} sw__step_spans;

/* What a thread keeps between its step boundaries. */
typedef struct sw__slow_thread {
    sw__median median[2];        /* [0] train steps, [1] steps of every other phase */
    uint64_t typical_data_ns[2]; /* the data time of a usual step (a moving average) */
    /* the OS: the last reading, and how often to read (docs/slow-steps.md) */
    sw__os_files os_files;
    sw__os_sample last_os;
    int have_os;
    uint32_t steps_since_os;
    uint32_t os_every;   /* read every this many steps (1 where a read is cheap) */
    uint64_t os_cost_ns; /* a read's cost, a moving average */
    /* the collector's totals when the step's sw_step_begin ran */
    uint64_t gc_ns_at_begin, gc_count_at_begin, gc_collected_at_begin;
    /* the spans since the last step ended (cur: the open step, and what ran between the two
     * steps), and those of the step before it */
    sw__step_spans half[2];
    uint32_t cur;
    int spans_failed; /* no memory for the buffers: no windows from this thread */
    /* the allocator's totals (sw_step_allocator): at the previous step's end and now */
    uint64_t alloc_retries_seen, ooms_seen, alloc_retries_now, ooms_now;
    int alloc_known;           /* 0: never given; 1: the totals seen are a baseline */
    uint64_t checkpoint_bytes; /* sw_step_checkpoint_bytes since the last step ended */
    /* the excess of the costliest windows handed on, smallest first (a gate: the run file
     * keeps SW_SLOW_WINDOWS per rank, so a window cheaper than all of these is not sent) */
    uint64_t top[SW_SLOW_WINDOWS];
    uint32_t ntop;
} sw__slow_thread;

#endif /* SW_CORE_SLOW_STEPS_H */
