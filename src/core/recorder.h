/*
 * recorder.h — the recorder's own header, private to src/core/recorder*.c: struct sw_profiler,
 * the per-thread records and their cells, and what the recorder's files call of each other.
 *
 *   recorder.c           the hot path: thread records and cells, event rings, spans, phases,
 *                        steps, counter samples (one file, so its machine code is the
 *                        compiler's whole view of it)
 *   recorder_life.c      make and free a profiler; recording on and off
 *   recorder_names.c     action, phase and counter names
 *   recorder_watch.c     the watchers (sw_watch, sw__hook)
 *   recorder_sinks.c     attach and find sinks; drain the event rings
 *   recorder_notes.c     sw_set_note
 *   recorder_modules.c   sw_set_modules
 *   recorder_snapshot.c  sw_snapshot_take
 *   recorder_access.c    accessors for the layers above (core.h), thread names
 *   recorder_process.c   every live profiler in the process: fork and exit hooks
 *   recorder_slow.c      slow steps: each step judged and explained as it ends
 */
#ifndef SW_CORE_RECORDER_H
#define SW_CORE_RECORDER_H

#include "clock.h"
#include "sink.h"
#include "slow_steps.h"

#include <pthread.h>

#define SW__LIKELY(x) __builtin_expect(!!(x), 1)
#define SW__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SW__INLINE static inline __attribute__((always_inline))
/* Owner-written, reader-read fields. Release stores and acquire loads order them against
 * the sequence lock without fences (plain moves on x86; ThreadSanitizer understands them). */
#define SW__PUT(field, value)                                       \
    do {                                                            \
        __typeof__(field) sw__put_value = (value);                  \
        __atomic_store(&(field), &sw__put_value, __ATOMIC_RELEASE); \
    } while (0)
#define SW__GET(dst, field) __atomic_load(&(field), &(dst), __ATOMIC_ACQUIRE)

#define SW__PHASE_STACK 16
#define SW__GC_RING 64 /* collections a step's figures are read from by time */
#define SW__DEFAULT_DEPTH 64
#define SW__DEFAULT_RING 65536

typedef struct sw__frame {
    sw_id id;
    sw_phase phase; /* the phase current when the span began */
    uint64_t start_ns;
    uint64_t child_ns;         /* time spent in spans nested in this one */
    uint64_t cat_ns;           /* time nested spans gave to categories (see record_span) */
    uint64_t samples_at_begin; /* profiler's samples_done at begin */
    struct sw__cell *cell;     /* where the span is recorded, found at begin; NULL if none */
} sw__frame;

/* Durations a cell holds back before folding them into mean and m2 (see cell_add). */
#define SW__PENDING 16

typedef struct sw__cell {
    sw_stats stats; /* mean_ns, m2 and hist leave out the npending newest values */
    sw_stats warm;
    sw_hist hist;
    uint32_t npending;
    uint64_t pending[SW__PENDING];
} sw__cell;

typedef struct sw__ring {
    sw__event *slots;
    uint64_t mask;
    _Atomic uint64_t head; /* next slot the owner writes */
    _Atomic uint64_t tail; /* next slot the flusher reads */
} sw__ring;

typedef struct sw__thread {
    struct sw__thread *next;
    sw_profiler *profiler;
    uint32_t number;
    _Atomic int alive;
    _Atomic uint32_t seq; /* odd while the owner updates cells */
    sw__cell ***cells;    /* [action][phase], grown under the profiler lock */
    uint32_t cells_cap;   /* actions the cells array covers */
    uint32_t depth;       /* open frames (read by snapshots) */
    uint32_t overflow;    /* begins beyond max_depth not yet ended */
    sw__frame *stack;
    sw_phase phase_stack[SW__PHASE_STACK];
    uint32_t phase_depth;
    int step_open;
    uint64_t step_category_ns[SW_CAT_COUNT];
    int step_has_allocator; /* sw_step_memory was called in the open step */
    uint64_t step_allocated, step_peak_allocated, step_reserved;
    sw__slow_thread slow; /* slow steps (recorder_slow.c) */
    sw__ring ring;
} sw__thread;

typedef struct sw__counter {
    char *name;
    sw_counter_summary summary;
} sw__counter;

struct sw_profiler {
    _Atomic int enabled;
    uint64_t generation; /* unique per profiler (and renewed in a fork child) */
    sw_options opts;
    _Atomic int world_size; /* opts.world_size once made; sw_set_world_size changes it */
    pthread_mutex_t lock;   /* names, the thread list, cell growth */
    pthread_key_t thread_key;
    uint64_t origin_ns, origin_unix_ns;
    int64_t pid;
    char host[256];
    char *command;

    char *action_names[SW__MAX_ACTIONS];
    /* The action names' index (recorder_names.c, under lock): open addressing on a hash of
     * the name, id + 1 per slot, 0 empty; twice the table, so probes stay short. */
    uint32_t action_slots[2 * SW__MAX_ACTIONS];
    uint8_t action_category[SW__MAX_ACTIONS];
    uint8_t action_watched[SW__MAX_ACTIONS]; /* relaxed atomic bits: SW__WATCH_USER, _HOOK */
    uint8_t action_cause[SW__MAX_ACTIONS];   /* sw_cause_of(name): time of its spans in a
                                                step counts for that cause */
    sw_watch_fn watch_fn;                    /* released after watch_ctx */
    void *watch_ctx;
    sw_watch_fn hook_fn; /* the layers' watcher (sw__hook_set), likewise */
    void *hook_ctx;
    _Atomic uint32_t naction;
    char *phase_names[SW__MAX_PHASES];
    sw_id phase_action[SW__MAX_PHASES];
    _Atomic uint32_t nphase;
    sw_id step_action;

    pthread_mutex_t counter_lock;
    sw__counter counters[SW__MAX_COUNTERS];
    _Atomic uint32_t ncounter;

    /* sw_set_note's notes, under lock. */
    char *note_keys[SW_MAX_NOTES];
    char *note_values[SW_MAX_NOTES];
    uint32_t nnotes;
    /* sw_set_modules' table (rows and their strings owned), under lock. */
    sw_module_row *modules;
    size_t nmodules;

    /* Process-wide training state, written by the thread that marks steps and phases. */
    _Atomic uint32_t current_phase;
    _Atomic int64_t step_index;
    _Atomic uint64_t steps_begun;
    _Atomic uint32_t batch_size;
    _Atomic int in_warmup;
    _Atomic uint64_t samples_done;
    _Atomic uint64_t phase_steps[SW__MAX_PHASES];

    /* Memory per step: the RSS reader the layers above set (sw__step_rss_set; NULL = none),
     * and the figures of sw_memory_summary, kept as steps end (relaxed atomics). */
    _Atomic(sw__rss_fn) rss_fn;
    _Atomic uint64_t mem_rss_steps, mem_rss_max, mem_rss_last;
    _Atomic uint64_t mem_alloc_steps, mem_peak_max, mem_alloc_last, mem_reserved_max,
        mem_reserved_last;

    /* Slow steps (recorder_slow.c): the garbage collector's totals (sw_gc_collection), the
     * oldest generations collected since the last step boundary (bits), whether the OS is
     * read (SW_STEP_OS=0 says no), and the figures of sw_slow_summary. */
    _Atomic uint64_t gc_ns, gc_count, gc_collected;
    struct sw__gc_entry {
        uint64_t start_ns, end_ns, collected; /* relaxed atomic builtins */
        int32_t generation;
    } gc_ring[SW__GC_RING]; /* the newest collections, by gc_count modulo SW__GC_RING */
    int os_signals;
    _Atomic uint64_t slow_judged, slow_count, slow_ns, slow_excess_ns;
    _Atomic uint64_t slow_by_cause[SW_CAUSE_COUNT];
    _Atomic uint64_t slow_windows_sent, slow_windows_not_sent;
    /* the machine's latest figures (sw__machine_note, from the device sampler) */
    _Atomic uint32_t machine_steal_permille, machine_load_x100, machine_cpus;
    /* The GPUs' clock event reasons at the sampler's last reading, when, and its interval
     * (sw__gpu_clock_note; at 0: never read). */
    _Atomic uint64_t gpu_clock_reasons, gpu_clock_at_ns, gpu_clock_every_ns;

    sw__thread *threads;
    uint32_t threads_seen;
    sw__thread *retired; /* statistics of threads that exited */
    struct thread_name {
        uint32_t changed; /* thread_names_changed after this naming */
        char name[SW__THREAD_NAME];
    } * thread_names; /* by thread number; outlive their threads */
    uint32_t thread_names_cap;
    _Atomic uint32_t thread_names_changed; /* bumped by every naming */

    _Atomic int full_warned[4]; /* the action, phase, counter, module table was full (warned) */
    /* New names folded into the overflow name of a full table (recorder_names.c), and the
     * first one (owned), for the "limit.*" notes; the actions' and phases' under lock, the
     * counters' under counter_lock. */
    uint64_t folded[3];
    char *folded_first[3];

    _Atomic uint64_t misuse_end_without_begin, misuse_mismatched_end, misuse_depth_overflow,
        misuse_bad_id, misuse_phase_mismatch, misuse_step_overlap, misuse_bad_record;

    _Atomic int events_on;
    _Atomic uint64_t events_dropped;
    _Atomic uint64_t ring_no_memory; /* of events_dropped: no memory for a thread's ring */
    _Atomic uint64_t drops_said;     /* events_dropped when last said on stderr */
    sw__sink *sinks;                 /* attached sinks, newest first (see sink.h) */
    struct sw_profiler *next_live;   /* in the process-wide list, for fork */
};

/* Who watches an action: bits of action_watched. */
enum { SW__WATCH_USER = 1, SW__WATCH_HOOK = 2 };

/* ---- recorder.c ---- */

/* Free a thread record, or only its cells (the record stays, emptied). */
void sw__free_thread(sw__thread *t);
void sw__free_cells(sw__thread *t);
/* A thread exits (the thread_key destructor): fold its statistics into p->retired. */
void sw__thread_exit(void *record);
/* Fold a cell's pending durations into its histogram, mean and m2. */
void sw__cell_fold(sw__cell *cell);

/* Add from's statistics to into's. */
static inline void sw__cell_merge(sw__cell *into, const sw__cell *from) {
    sw_stats_merge(&into->stats, &from->stats);
    sw_stats_merge(&into->warm, &from->warm);
    sw_hist_merge(&into->hist, &from->hist);
}

/* ---- recorder_slow.c ---- */

/* A step begins on t: the collector's totals now, the OS's first reading. */
void sw__slow_step_begin(sw_profiler *p, sw__thread *t);
/* Step s (its times, category_ns, warmup and phase filled) ended on t: its signals, median
 * and cause into s, the summary counted. Returns 1 when the spans of s and of the step
 * before it should go to the sink as its window; then sw__slow_step_turn. */
int sw__slow_step_end(sw_profiler *p, sw__thread *t, sw_step_record *s);
/* After the step's record went out: its spans become the step before the next one's. */
void sw__slow_step_turn(sw__thread *t);

/* ---- recorder_names.c (callers hold p->lock) ---- */

/* Intern an action name; a new name gets category cat, an existing one keeps its own. */
sw_id sw__action_intern_locked(sw_profiler *p, const char *name, sw_category cat);
sw_phase sw__phase_intern_locked(sw_profiler *p, const char *name);

/* ---- recorder_notes.c ---- */

/* sw_set_note with p->lock held; value owned by the call from now on (NULL: remove). */
int sw__set_note_locked(sw_profiler *p, const char *key, char *value);

/* ---- recorder_modules.c ---- */

/* Free a module table made by sw_set_modules (rows and their strings). */
void sw__modules_free(sw_module_row *rows, size_t n);

/* ---- recorder_process.c ---- */

/* A number no other profiler of this process has had (sw_profiler.generation). */
uint64_t sw__new_generation(void);
/* Put p in the process-wide list that fork and exit reach (installing their hooks once), or
 * take it out. */
void sw__live_add(sw_profiler *p);
void sw__live_remove(sw_profiler *p);

/* Say on stderr that events were dropped (recorder_sinks.c), from the drainer's thread or the
 * profiler's end, never the hot path: the first drops once while the run goes on (final 0),
 * and at the end (final 1) the total when more were dropped since. */
void sw__drops_say(sw_profiler *p, int final);

#endif /* SW_CORE_RECORDER_H */
