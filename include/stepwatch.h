/*
 * stepwatch.h — a stopwatch for training loops.
 *
 * This header is the specification of the C API. Anything not declared here (or in the
 * headers it includes under stepwatch/) is not API.
 *
 * Conventions
 *   - Setup and I/O calls return 0 or a negative SW_E* code; sw_strerror() explains it.
 *   - Hot-path calls (sw_begin, sw_end, sw_record, sw_step_*, sw_phase_*) return void. They
 *     never allocate after warm-up, never lock, never print, never abort. Misuse (an end
 *     without a begin, mismatched nesting, too deep nesting) is counted and shown in reports.
 *   - Option structs begin with their size (see "Structs that grow" below): start from
 *     SW_OPTIONS_INIT and the like, which set it and leave every other field zeroed, which
 *     means its default. A NULL options pointer means defaults. sw_*_free(NULL) is a no-op.
 *   - Times are nanoseconds of CLOCK_MONOTONIC unless a name says otherwise.
 *
 * Threads
 *   Every call is thread-safe unless it says otherwise. Each thread records into its own
 *   buffer (no locks on the hot path); buffers are merged when a snapshot is taken and
 *   when a thread exits. Phases and steps are process-wide: the thread that marks them is
 *   normally the training thread, and spans on other threads (data loader threads) are
 *   attributed to the phase and step current at the time they end.
 *
 * Fork
 *   A child process made by fork() starts with an empty profiler (same actions, no
 *   statistics) and never writes into the parent's run file.
 *
 * Structs that grow (the ABI rule; docs/core.md, "Structs that grow")
 *   Each struct a caller fills in and hands to the library (sw_options, sw_write_options,
 *   sw_engine_options, sw_ftable_options, sw_ranks_options, sw_mpi_options), fills in for
 *   it to call back (sw_data_source, sw_gpu_clock), or gives it to fill (sw_live_values,
 *   sw_device_time_info) begins with `size_t size`: sizeof the struct as the caller was
 *   compiled, set by its initializer (SW_OPTIONS_INIT, SW_ENGINE_OPTIONS_INIT, ...), which
 *   zeroes every other field: the defaults. Fields are only ever added at the end, so a
 *   program built against an older stepwatch.h works with a newer library:
 *     - a size smaller than the library's struct (an older caller): the fields past it read
 *       as zero, their default; of an output struct only the first size bytes are filled;
 *     - a larger size (a caller built against a newer header): an input is accepted when
 *       every byte past the library's struct is zero (the newer fields at their defaults),
 *       else the call fails with SW_EUNSUPPORTED and sw_last_error() names the struct and
 *       the first byte this library does not know; of an output, the bytes past the
 *       library's struct are zeroed;
 *     - a size under the struct of the first release (0: a struct zeroed by hand instead of
 *       its initializer) is SW_EINVAL, named the same way.
 *   None of them has padding after its last field, so a newer field can never lie in bytes
 *   an older library takes for padding. tests/abi holds the first release's structs and
 *   checks all of this.
 *   Other structs do not grow that way: records and snapshots the library allocates and
 *   hands out by pointer (sw_snapshot, sw_engine_state, sw_step_record, ...) get new fields
 *   at their end only; structs a caller keeps by value or passes as arrays (sw_stats,
 *   sw_hist, sw_timer, sw_time_profiler, sw_row, sw_module_row, sw_ignite_row, ...) are
 *   fixed: changing one means a new struct and a new call.
 */
#ifndef STEPWATCH_H
#define STEPWATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The initializer of a sized struct ("Structs that grow", above): its size, every other
 * field zero. C (C99 on) takes a designated initializer; C++ before C++20 has none, so it
 * gets a value-initialized copy with the size set (no missing-initializer warning). */
#ifdef __cplusplus
template <typename T> inline T sw__sized_init() {
    T t = T();
    t.size = sizeof(T);
    return t;
}
#define SW__SIZED_INIT(T) (sw__sized_init<T>())
#else
#define SW__SIZED_INIT(T) \
    { .size = sizeof(T) }
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SW_VERSION_MAJOR 0
#define SW_VERSION_MINOR 1
#define SW_VERSION_PATCH 0
#define SW_VERSION_STRING "0.1.0"

/* Visibility of the shared library's exports. */
#if defined(SW_BUILDING_LIBRARY) && defined(__GNUC__)
#define SW_API __attribute__((visibility("default")))
#else
#define SW_API
#endif

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

/* X(name, value, message): one list, used for the enum, sw_strerror and sw_err_name. */
#define SW_ERRNO_MAP(X)                                            \
    X(INVAL, -1, "invalid argument")                               \
    X(NOMEM, -2, "out of memory")                                  \
    X(IO, -3, "input/output error")                                \
    X(FORMAT, -4, "unknown format name")                           \
    X(CORRUPT, -5, "file is corrupt or truncated")                 \
    X(FOREIGN, -6, "not a stepwatch run file")                     \
    X(VERSION, -7, "unsupported run file schema version")          \
    X(LIMIT, -8, "too many distinct actions, phases or counters")  \
    X(STATE, -9, "call not valid in the current state")            \
    X(NOTFOUND, -10, "no such item")                               \
    X(SQLITE, -11, "SQLite error")                                 \
    X(UNSUPPORTED, -12, "not supported on this platform or build") \
    X(EXISTS, -13, "file exists")                                  \
    X(BUSY, -14, "file in use by another run")

typedef enum sw_errno {
#define SW__ERRNO_ENUM(name, value, message) SW_E##name = (value),
    SW_ERRNO_MAP(SW__ERRNO_ENUM)
#undef SW__ERRNO_ENUM
} sw_errno;

/* A static English message for rc (0 gives "success"; unknown codes "unknown error"). */
SW_API const char *sw_strerror(int rc);
/* The code's name without prefix, e.g. "INVAL"; "OK" for 0. Static string. */
SW_API const char *sw_err_name(int rc);
/* Why the last failed call on this thread failed, in one sentence naming the file or name
 * at fault and the cause ("out.html: No space left on device"), or "" when there is nothing
 * to add to sw_strerror. The calls that open or write files (sw_profiler_new with a run
 * file, sw_run_open and the sw_run_* readers, sw_run_merge, sw_output_*) clear it when they
 * begin and set it when they fail. Thread-local; never NULL. */
SW_API const char *sw_last_error(void);

/* ------------------------------------------------------------------------------------------
 * Identifiers and vocabulary
 * ---------------------------------------------------------------------------------------- */

typedef uint32_t sw_id;    /* an interned action name */
typedef uint32_t sw_phase; /* a phase: built-in below, or user-defined via sw_phase_id */
#define SW_ID_NONE ((sw_id)UINT32_MAX)

enum {
    SW_PHASE_NONE = 0,  /* outside any phase */
    SW_PHASE_FIT = 1,   /* the whole run */
    SW_PHASE_EPOCH = 2, /* one epoch (train + valid) */
    SW_PHASE_TRAIN = 3, /* the training part of an epoch */
    SW_PHASE_VALID = 4, /* the validation part of an epoch */
    SW_PHASE_FIRST_USER = 5
};
/* In snapshot rows: all phases rolled up. (A macro: ISO C limits enumerators to int.) */
#define SW_PHASE_ALL ((sw_phase)0xFFFFFFFFu)

/* Each action belongs to one category (docs/core.md, "What is measured"). sw_action gives it the
 * category its name says: "data", "forward", "loss", "backward", "optimizer", "zero_grad",
 * names starting with "callback:", "collective" and names starting with "collective:" (a
 * torch.distributed or MPI collective, or the wait for one: time a rank spends communicating
 * or waiting for the other ranks), "h2d_copy" (the copy of the batch to the device, a part
 * of its data: category data), and everything else is "other". A front end whose
 * framework has names of its own ("[Strategy]DDPStrategy.backward") keeps them and gives
 * the category explicitly (sw_action_with_category). Per-step breakdowns use the categories:
 * a span with a category gives it its own time, that is its duration less the time of the
 * spans with a category nested in it; a span of "other" inside one counts as its parent's. */
typedef enum sw_category {
    SW_CAT_DATA = 0,
    SW_CAT_FORWARD,
    SW_CAT_LOSS,
    SW_CAT_BACKWARD,
    SW_CAT_OPTIMIZER,
    SW_CAT_ZERO_GRAD,
    SW_CAT_CALLBACK,
    SW_CAT_COLLECTIVE,
    SW_CAT_OTHER, /* last: the categories before it are the categorized ones */
    SW_CAT_COUNT
} sw_category;

/* "data", "forward", ..., "other". Static string; NULL for an out-of-range value. */
SW_API const char *sw_category_name(sw_category cat);
/* The category an action of this name gets. */
SW_API sw_category sw_category_of(const char *action_name);

/* ------------------------------------------------------------------------------------------
 * Profiler lifetime
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_profiler sw_profiler;

typedef enum sw_full_policy {
    SW_FULL_DROP = 0, /* default: drop the event and count it */
    SW_FULL_BLOCK = 1 /* wait for the flusher (never drops, may slow training) */
} sw_full_policy;

/* The largest ring_capacity: 4,194,304 events, about 1.6 GB per recording thread (an event
 * holds a step record, 376 bytes on x86-64 today). */
#define SW_MAX_RING_CAPACITY (1u << 22)

/* The live status line (stepwatch/live.h): one line at the bottom of the terminal while the
 * run goes on. */
typedef enum sw_live_mode {
    SW_LIVE_AUTO = 0, /* default: when stderr is a terminal, on rank 0; STEPWATCH_LIVE=1/0
                         (set by `stepwatch run --live/--no-live`) decides instead */
    SW_LIVE_ON = 1,   /* always on rank 0; to a pipe or file, a plain line every 10 s */
    SW_LIVE_OFF = 2   /* never */
} sw_live_mode;

/* The profiler clock (sw_options.clock). The clock is the process's: the first profiler that
 * asks for the TSC switches every reader of sw_now_ns to it, for the rest of the process. */
typedef enum sw_clock_kind {
    SW_CLOCK_AUTO = 0,      /* default: SW_CLOCK=tsc or SW_CLOCK=monotonic in the environment,
                               else CLOCK_MONOTONIC */
    SW_CLOCK_MONOTONIC = 1, /* clock_gettime(CLOCK_MONOTONIC) */
    SW_CLOCK_TSC = 2        /* x86-64: the time-stamp counter, when the CPU says it is
                               invariant (cpuid), calibrated against CLOCK_MONOTONIC at the
                               switch (about 20 ms, once) and continuing it; elsewhere, or not
                               invariant: CLOCK_MONOTONIC, said once on stderr */
} sw_clock_kind;

/* Memory per step (sw_options.step_memory): the resident set (RSS) at each step's end, read
 * from /proc/self/statm by the profiler itself, at most every SW_STEP_RSS_EVERY_MS (a read is
 * a system call of a few microseconds; a step that ends sooner after the last read carries
 * that reading). Allocator figures come from the front end (sw_step_memory). */
typedef enum sw_step_memory_mode {
    SW_STEP_MEMORY_AUTO = 0, /* default: on, unless STEPWATCH_STEP_MEMORY=0 in the
                                environment (`stepwatch run --no-step-memory`) */
    SW_STEP_MEMORY_ON = 1,
    SW_STEP_MEMORY_OFF = 2 /* no RSS per step (sw_step_memory still records what it is given) */
} sw_step_memory_mode;
#define SW_STEP_RSS_EVERY_MS 10

/* A profiler's options. Start from SW_OPTIONS_INIT (its size set, every other field zeroed:
 * the defaults) and set what you need:
 *     sw_options o = SW_OPTIONS_INIT;
 *     o.run_file = "run-{rank}.db";
 * or, in one expression: &(sw_options){.size = sizeof(sw_options), .run_file = "run.db"}.
 * The fields are ordered so that none is followed by padding (and the recorder reads the
 * ones the hot path needs at the offsets it always did); a new option is added at the end
 * ("Structs that grow", at the top). */
typedef struct sw_options {
    size_t size;                /* sizeof(sw_options) as the caller was compiled */
    uint32_t warmup_steps;      /* first N steps of each phase kept out of statistics; 0 = none */
    uint32_t max_depth;         /* open spans per thread; 0 = 64 */
    const char *run_file;       /* write a run file (SQLite) here; "{rank}" expands to the
                                rank, "{pid}" to the process id. NULL = the environment's
                                STEPWATCH_RUN_FILE (set by `stepwatch run`) if this is the
                                first profiler of the process that owns it (children leave
                                it alone unless it has "{pid}"), else none;
                                STEPWATCH_TIMELINE=1 then turns the timeline on */
    int timeline;               /* nonzero: keep every span for the run file (Chrome trace) */
    uint32_t ring_capacity;     /* events buffered per thread for the run file; 0 = 65536;
                                at most SW_MAX_RING_CAPACITY (376 bytes an event
                                on x86-64: 24 MB at the default) */
    sw_full_policy on_full;     /* when the flusher cannot keep up */
    uint32_t flush_interval_ms; /* run file flush period; 0 = 200 */
    int no_signal_handlers;   /* nonzero: do not chain SIGINT/SIGTERM/SIGHUP to complete the file */
    int rank;                 /* this process's rank; 0 with world_size 0 = from the environment */
    int world_size;           /* 0 = from the environment (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*) */
    int local_rank;           /* the rank on this host; 0 = from the environment (LOCAL_RANK,
                                OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID),
                                else 0 */
    const char *name;         /* run name shown in reports; NULL = "stepwatch" */
    const char *command;      /* the command line recorded in metadata; NULL = /proc/self/cmdline */
    int device_stats;         /* nonzero: sample CPU, memory and GPUs into counters
                                (stepwatch/device.h); also STEPWATCH_DEVICE_STATS=1 from
                                `stepwatch run --device-stats` */
    uint32_t device_stats_ms; /* the sampling interval; 0 = 500 */
    int device_time;          /* nonzero: GPU time per phase with the CUDA runtime
                                (stepwatch/device.h); also STEPWATCH_DEVICE_TIME=1 */
    sw_live_mode live;        /* the live status line on stderr */
    sw_clock_kind clock;      /* the profiler clock (sw_clock_kind); SW_EINVAL for another value */
    sw_step_memory_mode step_memory; /* RSS per step (sw_step_memory_mode); SW_EINVAL for
                                        another value */
    /* New options go here, at the end. */
} sw_options;

#define SW_OPTIONS_INIT SW__SIZED_INIT(sw_options)

/* Create a profiler. opts may be NULL (defaults). On success *out is set and 0 returned;
 * on error *out is NULL and a negative code is returned (SW_EINVAL for a ring_capacity over
 * SW_MAX_RING_CAPACITY, an unknown on_full or live, a size under the first release's
 * sw_options; SW_EUNSUPPORTED for options of a newer stepwatch.h set that this library does
 * not know: sw_last_error() says which; SW_ENOMEM). The caller owns *out.
 * A run file that cannot be created never fails this call: the profiler works without one,
 * one line on stderr says why, and sw_profiler_run_file tells it too. A run file replaces
 * only an earlier stepwatch run file that no live process writes; anything else at the path
 * is left alone (docs/reliability.md). */
SW_API int sw_profiler_new(const sw_options *opts, sw_profiler **out);

/* The run file p writes. 0 while it is written; SW_ENOTFOUND when p writes none (none was
 * asked for, or the environment's file belongs to another process or profiler); else the
 * SW_E* code of why it is not written now: SW_EEXISTS (something that is not an old run
 * file is at the path), SW_EBUSY (a live process writes that file), SW_EIO (it could not be
 * created, or writing it fails now: full disk, I/O error; writing resumes by itself and the
 * events meanwhile are counted as dropped). *path (if path is not NULL) gets the file's path
 * after {rank}/{pid} expansion, or NULL; valid until sw_profiler_free. Thread-safe. */
SW_API int sw_profiler_run_file(sw_profiler *p, const char **path);
/* Why p's run file is not written now, as the line on stderr said it: the file and the cause
 * ("run.db: cannot make its thread's wake-up pipe: Too many open files"); "" while it is
 * written or when p writes none. Copied into buf (size bytes, NUL included); returns buf.
 * Thread-safe. */
SW_API char *sw_profiler_run_file_error(sw_profiler *p, char *buf, size_t size);

/* Complete the run file (if any) and free everything. Open spans are discarded (counted as
 * misuse in the run file's last snapshot). No other thread may use p during or after this
 * call. NULL is a no-op. */
SW_API void sw_profiler_free(sw_profiler *p);

/* Turn recording on or off at run time (one relaxed atomic load on the hot path). A span is
 * recorded only if recording was on at both its begin and its end. Default: on. */
SW_API void sw_set_enabled(sw_profiler *p, int enabled);
SW_API int sw_enabled(const sw_profiler *p);

/* The number of ranks, learned after p was made: a launcher that starts the other ranks
 * itself (Lightning's) sets WORLD_SIZE only once the first one runs. Snapshots and the run
 * file's metadata take it from now on. SW_EINVAL for NULL p or world_size < 1. */
SW_API int sw_set_world_size(sw_profiler *p, int world_size);

/* Name the calling thread in p (copied; at most 63 bytes kept), as the run file and the
 * Chrome trace show it. Until then a thread has the system's name for it (pthread_setname_np)
 * from when it first recorded; the Python front ends give Python's names. Takes a lock.
 * SW_EINVAL for NULL arguments. */
SW_API int sw_thread_name(sw_profiler *p, const char *name);

/* Nanoseconds on the profiler clock (CLOCK_MONOTONIC, or the TSC: sw_clock_kind). */
SW_API uint64_t sw_now_ns(void);

/* The clock sw_now_ns reads now: SW_CLOCK_MONOTONIC or SW_CLOCK_TSC. */
SW_API sw_clock_kind sw_clock_in_use(void);

/* ------------------------------------------------------------------------------------------
 * Actions (hot path)
 * ---------------------------------------------------------------------------------------- */

/* Names (docs/reliability.md, "Names"). Every name (action, phase, counter) is copied and
 * cut to at most SW_NAME_MAX bytes, at a character boundary when it is UTF-8: two names
 * equal once cut are one name. A profiler holds at most SW_MAX_ACTIONS action names (the
 * built-in "none", "fit", "epoch", "train", "valid" and "step" and every phase included),
 * SW_MAX_PHASES phases (the 5 built-in included) and SW_MAX_COUNTERS counters. A full table
 * never fails the caller: its last slot holds the overflow name (SW_OTHER_ACTIONS,
 * SW_OTHER_PHASES, SW_OTHER_COUNTERS), and every new name that finds no other slot gets its
 * id, a real one, so the spans, phases and samples of those names are recorded and counted
 * together under it (a name built per step with an f-string keeps training and shows as one
 * row). So SW_MAX_ACTIONS - 1 distinct names of actions, and likewise of phases and
 * counters, keep their own row. The first time, one line on stderr names the table and the
 * first name folded; the note "limit.actions" ("limit.phases", "limit.counters") says how
 * many lookups of new names were folded, and `stepwatch diagnose` reports it (finding
 * "table-full"). Python gets the overflow name's Action or Phase. Reports write any bytes as
 * valid UTF-8 (others become U+FFFD) with control characters escaped. */
#define SW_NAME_MAX \
    4095 /* whole in every name seen so far (a module path, a Lightning hook's);
                            reports shorten names for display on a terminal */
#define SW_MAX_ACTIONS 4096
#define SW_MAX_PHASES 32
#define SW_MAX_COUNTERS 256
#define SW_OTHER_ACTIONS "(other actions)"
#define SW_OTHER_PHASES "(other phases)"
#define SW_OTHER_COUNTERS "(other counters)"

/* Intern an action name (copied and cut as above). The same name always gives the same id;
 * a new name once the table is full gets SW_OTHER_ACTIONS's id. Returns SW_ID_NONE when p or
 * name is NULL (or out of memory). Takes a lock: call it once per name, not per step. */
SW_API sw_id sw_action(sw_profiler *p, const char *name);
/* Intern an action name with an explicit category, for names that do not say their category
 * ("[Strategy]DDPStrategy.backward" is backward). A name has one category, the one it was
 * first interned with (sw_action: from the name): SW_ID_NONE when name already exists with
 * another category, and as sw_action for NULL arguments or a cat out of range; past a full
 * table, SW_OTHER_ACTIONS's id (category other) whatever cat. Takes a lock: call it once
 * per name. */
SW_API sw_id sw_action_with_category(sw_profiler *p, const char *name, sw_category cat);
/* The category of an id; SW_CAT_OTHER for NULL p or an unknown id. */
SW_API sw_category sw_action_category(const sw_profiler *p, sw_id id);
/* The name of an id, or NULL. Valid until sw_profiler_free. */
SW_API const char *sw_action_name(const sw_profiler *p, sw_id id);

/* Open and close a span of action id on the calling thread's stack. Spans nest; an end must
 * match the innermost open begin of the same thread. A mismatched end closes the spans
 * opened after the matching begin (counted as misuse); an end with no matching begin is
 * counted and ignored. SW_ID_NONE and unknown ids are counted and ignored. */
SW_API void sw_begin(sw_profiler *p, sw_id id);
SW_API void sw_end(sw_profiler *p, sw_id id);

/* sw_begin and sw_end at a time the caller read (sw_now_ns clock), for front ends that want
 * the span's times themselves (to keep each call's duration) without reading the clock
 * twice. Times must not go back within a thread's spans: an end before its begin counts as a
 * zero duration. */
SW_API void sw_begin_at(sw_profiler *p, sw_id id, uint64_t now_ns);
SW_API void sw_end_at(sw_profiler *p, sw_id id, uint64_t now_ns);

/* Record a span measured elsewhere (start and end on the sw_now_ns clock) as if begun and
 * ended on this thread at its current depth. end < start is counted as misuse. */
SW_API void sw_record(sw_profiler *p, sw_id id, uint64_t start_ns, uint64_t end_ns);

/* ------------------------------------------------------------------------------------------
 * Watching actions: code of your own on the thread that opens and closes chosen actions.
 * The function profilers (Python's, and the -finstrument-functions library) switch their
 * hooks on and off this way, whichever front end opens the action.
 * ---------------------------------------------------------------------------------------- */

/* Called on the recording thread right after a watched action's span began (begins = 1) and
 * when it ends (begins = 0): by sw_end, by the unwinding of a mismatched end or of a phase,
 * and by an sw_end while recording is off. Begins and ends arrive nested like the spans; an
 * end may come without its begin if the action was watched while open. Phases' own spans
 * are actions too. Runs on the hot path, on every begin and end of a watched action: keep it
 * short (locks and allocation only the first time, say) and call no recording call of p. */
typedef void (*sw_watch_fn)(void *ctx, sw_id action, int begins);

/* Set p's watcher (one per profiler; fn NULL removes it). SW_EINVAL for a NULL p, SW_ESTATE
 * when another watcher is set. Removing it while a watched span is open leaves that span's
 * end unreported. */
SW_API int sw_watcher_set(sw_profiler *p, sw_watch_fn fn, void *ctx);
/* Watch action id (on nonzero) or stop watching it; SW_EINVAL for an unknown id. Costs one
 * byte load per begin and end of any action. */
SW_API int sw_watch(sw_profiler *p, sw_id id, int on);
/* Nonzero when id is watched. */
SW_API int sw_watched(const sw_profiler *p, sw_id id);

/* ------------------------------------------------------------------------------------------
 * Training structure (hot path)
 * ---------------------------------------------------------------------------------------- */

/* The id of a phase name: "fit", "epoch", "train", "valid" give the built-ins; other names
 * are interned (SW_MAX_PHASES in all; a phase is also an action of the same name); past a
 * full table, SW_OTHER_PHASES's id. SW_PHASE_NONE for NULL p/name. Takes a lock. */
SW_API sw_phase sw_phase_id(sw_profiler *p, const char *name);
SW_API const char *sw_phase_name(const sw_profiler *p, sw_phase phase);

/* Enter and leave a phase. A phase is also timed as an action of the same name, recorded
 * in the enclosing phase (so "train" and "valid" appear under "fit").
 * Phases nest (fit > epoch > train). */
SW_API void sw_phase_begin(sw_profiler *p, sw_phase phase);
SW_API void sw_phase_end(sw_profiler *p, sw_phase phase);

/* A step is one batch: waiting for its data plus computing on it. It is timed as the action
 * "step" in the current phase. batch_size 0 = unknown (no samples/s). The first
 * warmup_steps steps of each phase are warm-up: their spans are kept apart. Beginning a
 * step while one is open ends the open one first (counted as misuse). */
SW_API void sw_step_begin(sw_profiler *p, uint32_t batch_size);
/* A step that began earlier, at start_ns (sw_now_ns clock; 0 or a time to come = now). For
 * loops that know a step exists only once its batch arrived: take the time before fetching,
 * and after the fetch begin the step at that time and sw_record its data wait. A fetch that
 * ends the epoch then opens no step at all. */
SW_API void sw_step_begin_at(sw_profiler *p, uint32_t batch_size, uint64_t start_ns);
/* Set the current step's batch size once it is known (after the data arrived). */
SW_API void sw_step_set_batch_size(sw_profiler *p, uint32_t batch_size);
SW_API void sw_step_end(sw_profiler *p);
/* End the step at end_ns (sw_now_ns clock; 0 or a time to come = now), for loops that learn
 * a step is over only later: at the next step's first event, the step ends at its own last
 * event. Spans that ended after end_ns are still counted in the step's breakdown; an end_ns
 * before the step's start ends it at its start. */
SW_API void sw_step_end_at(sw_profiler *p, uint64_t end_ns);
/* The memory of the current step as the caller's allocator counts it (the Python front ends
 * pass torch's CUDA caching allocator's): bytes allocated at the step's end, the most
 * allocated at any moment of the step, and bytes reserved (held from the device) at its end.
 * Kept in the step's record (sw_step_record) and the snapshot's sw_memory_summary when the
 * step ends on this thread; a step without the call has no allocator figures. Call it just
 * before sw_step_end, on the step's thread. No lock, no allocation; nothing outside a step. */
SW_API void sw_step_memory(sw_profiler *p, uint64_t allocated, uint64_t peak_allocated,
                           uint64_t reserved);
/* The CUDA caching allocator's running totals of retries (num_alloc_retries: an allocation
 * that failed, freed the cached blocks and tried again) and out-of-memory errors (num_ooms),
 * as torch.cuda.memory_stats() gives them; the step's signals get what they grew by since
 * the previous call on this thread (docs/slow-steps.md). Call it just before sw_step_end, on
 * the step's thread, as sw_step_memory. No lock, no allocation; nothing outside a step. */
SW_API void sw_step_allocator(sw_profiler *p, uint64_t alloc_retries, uint64_t ooms);
/* A checkpoint saved on this thread wrote bytes: in the open step, or (called between two
 * steps) for a save held for the next one, whose time it is. The step's signals get the sum
 * (checkpoint_bytes), and a slow step whose cause is the checkpoint says its size and rate.
 * No lock, no allocation. */
SW_API void sw_step_checkpoint_bytes(sw_profiler *p, uint64_t bytes);
/* Steps begun so far in the whole run (all phases), and the current step's global index
 * (-1 outside a step). */
SW_API uint64_t sw_step_count(const sw_profiler *p);
SW_API int64_t sw_step_index(const sw_profiler *p);

/* ------------------------------------------------------------------------------------------
 * Counters (device samples, memory, anything numeric over time)
 * ---------------------------------------------------------------------------------------- */

/* Intern a counter name (SW_MAX_COUNTERS in all; cut as action names are; past a full
 * table, SW_OTHER_COUNTERS's id). Takes a lock. SW_ID_NONE for NULL p/name. */
SW_API sw_id sw_counter_id(sw_profiler *p, const char *name);
/* The name of a counter id, or NULL. Valid until sw_profiler_free. */
SW_API const char *sw_counter_name(const sw_profiler *p, sw_id id);
/* Record a sample of a counter now. Kept in the run file and the Chrome trace; the last
 * value and min/max/mean are kept in memory. Meant for sampling (a few times a second): it
 * takes a short lock, unlike the span calls. */
SW_API void sw_counter(sw_profiler *p, sw_id counter, double value);

/* ------------------------------------------------------------------------------------------
 * Notes: short facts about the run that its numbers cannot tell, as key and text (how steps
 * were found: "step_rule" = "optimizer"; what could not be measured apart:
 * "not_separated.loss" = the reason). Kept in snapshots, the run file, reports and diagnose
 * (docs/diagnose.md lists the keys it reads).
 * ---------------------------------------------------------------------------------------- */

#define SW_MAX_NOTES 32       /* distinct keys per profiler */
#define SW_NOTE_KEY_MAX 63    /* bytes of a key (longer keys are refused) */
#define SW_NOTE_VALUE_MAX 511 /* bytes of a value (longer values are cut at a character) */

/* Set note key to value (both copied); a later call with the same key replaces it, a NULL
 * value removes it. Takes a lock: call it when something changes, not per step. 0, SW_EINVAL
 * (NULL p or key, an empty or too long key), SW_ELIMIT (SW_MAX_NOTES keys already) or
 * SW_ENOMEM. */
SW_API int sw_set_note(sw_profiler *p, const char *key, const char *value);

/* ------------------------------------------------------------------------------------------
 * Modules: per-module time and memory of a PyTorch model (Python: Profiler(modules=True),
 * docs/python.md "Per-module time and memory"). The front end measures; the profiler keeps
 * its latest table for snapshots, the run file and every report. Times are the sums over the
 * sampled steps (the notes "modules_every" and "modules_sampled_steps" say which; the note
 * "modules_clock" is "host", or "host+device" when the rows have GPU times too).
 * ---------------------------------------------------------------------------------------- */

#define SW_MAX_MODULES 4096 /* rows one table keeps (sw_set_modules folds the rest) */
#define SW_OTHER_MODULES "(other modules)" /* the last row of a model of more modules */

typedef struct sw_module_row {
    const char *path; /* from named_modules: "encoder.layers.3.attn"; "" for the model */
    const char *kind; /* its class name: "MultiheadAttention" */
    uint64_t forward_calls;
    uint64_t forward_ns;      /* cumulative: its submodules included */
    uint64_t forward_self_ns; /* outside its submodules */
    uint64_t backward_calls;
    uint64_t backward_ns;
    uint64_t backward_self_ns;
    /* GPU time of the same calls when the profiler times the device (docs/device.md): the
     * calls timed on the GPU too (those of steps the device timing recorded and resolved),
     * their device time, cumulative and self. 0 calls: no device time. */
    uint64_t device_forward_calls;
    uint64_t device_forward_ns;
    uint64_t device_forward_self_ns;
    uint64_t device_backward_calls;
    uint64_t device_backward_ns;
    uint64_t device_backward_self_ns;
    int64_t activation_bytes; /* largest allocator growth over one forward; -1 unknown (CPU) */
    int64_t param_bytes;      /* parameters, its submodules' included; -1 unknown */
    int64_t grad_bytes;       /* their .grad tensors */
    int64_t optimizer_bytes;  /* the optimizer's state of its parameters */
} sw_module_row;

/* Replace p's module table with n rows (copied; past SW_MAX_MODULES, the first
 * SW_MAX_MODULES - 1 and a last row SW_OTHER_MODULES, kind "N modules", that sums the calls
 * and self times of the N others, its cumulative times their self times, its memory -1; one
 * stderr line the first time). Takes a lock: call it once per sampled step or less. 0, SW_EINVAL (NULL p, or NULL rows with n > 0, or a row
 * without a path or kind) or SW_ENOMEM. */
SW_API int sw_set_modules(sw_profiler *p, const sw_module_row *rows, size_t n);

/* ------------------------------------------------------------------------------------------
 * Convenience macros. Each call site caches its action id; -DSW_DISABLE removes them.
 *   SW_BEGIN(p, "forward"); ...; SW_END(p, "forward");
 *   SW_SCOPE(p, "loss") { ... }   -- the block is one span; no break/return/goto out of it.
 *                                    SW_SCOPE declares a static: use it where a statement
 *                                    may go, inside braces.
 * ---------------------------------------------------------------------------------------- */

/* One call site's cache: the id and which profiler it was interned in (a profiler's unique
 * serial number in the high half, so a new profiler at a freed one's address misses). */
typedef struct sw_site {
    uint64_t key;
} sw_site;

/* The id of name in p, cached in site (thread-safe; interns once per profiler). */
SW_API sw_id sw_site_id(sw_profiler *p, sw_site *site, const char *name);

#define SW__CAT2(a, b) a##b
#define SW__CAT(a, b) SW__CAT2(a, b)
#ifdef SW_DISABLE
#define SW_BEGIN(p, name) ((void)0)
#define SW_END(p, name) ((void)0)
#define SW_SCOPE(p, name) for (int sw__once = 1; sw__once; sw__once = 0)
#else
#define SW_BEGIN(p, name)                                  \
    do {                                                   \
        static sw_site sw__site;                           \
        sw_begin((p), sw_site_id((p), &sw__site, (name))); \
    } while (0)
#define SW_END(p, name)                                  \
    do {                                                 \
        static sw_site sw__site;                         \
        sw_end((p), sw_site_id((p), &sw__site, (name))); \
    } while (0)
#define SW_SCOPE(p, name)                                                                   \
    static sw_site SW__CAT(sw__scope_site_, __LINE__);                                      \
    for (sw_id sw__scope_id = sw_site_id((p), &SW__CAT(sw__scope_site_, __LINE__), (name)), \
               sw__once = (sw_begin((p), sw__scope_id), 1);                                 \
         sw__once; sw__once = (sw_end((p), sw__scope_id), 0))
#endif

/* ------------------------------------------------------------------------------------------
 * Timer — a stopwatch that pauses: the time it ran, in total or per step (start, pause,
 * resume, reset, step, value). Not thread-safe (one timer per user); no allocation.
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_timer {
    int average; /* value() divides by the number of steps */
    int running;
    uint64_t started_ns; /* when the running interval began */
    uint64_t elapsed_ns; /* closed intervals so far */
    uint64_t steps;
} sw_timer;

/* Reset and start running. */
SW_API void sw_timer_init(sw_timer *t, int average);
SW_API void sw_timer_reset(sw_timer *t);
SW_API void sw_timer_pause(sw_timer *t);
SW_API void sw_timer_resume(sw_timer *t);
SW_API void sw_timer_step(sw_timer *t);
/* Seconds elapsed (running interval included), divided by max(steps, 1) if average. */
SW_API double sw_timer_value(const sw_timer *t);

/* ------------------------------------------------------------------------------------------
 * Histogram — log-bucketed, mergeable, fixed size.
 * Values below 2^SW_HIST_SUB_BITS ns are exact; above, each power of two is split into
 * 2^SW_HIST_SUB_BITS buckets, so a quantile read from the bucket midpoint is within
 * 1/2^(SW_HIST_SUB_BITS+1) = 3.1 % of the true sample. Values above 2^SW_HIST_MAX_EXP ns
 * (about 36 minutes) land in the last bucket.
 * ---------------------------------------------------------------------------------------- */

#define SW_HIST_SUB_BITS 4
#define SW_HIST_MAX_EXP 41
#define SW_HIST_BUCKETS ((SW_HIST_MAX_EXP - SW_HIST_SUB_BITS + 1) << SW_HIST_SUB_BITS)

typedef struct sw_hist {
    uint64_t count;
    uint32_t buckets[SW_HIST_BUCKETS];
} sw_hist;

SW_API uint32_t sw_hist_bucket_of(uint64_t ns);
/* Smallest and largest value that falls into bucket i. */
SW_API uint64_t sw_hist_bucket_low(uint32_t i);
SW_API uint64_t sw_hist_bucket_high(uint32_t i);
SW_API void sw_hist_add(sw_hist *h, uint64_t ns);
SW_API void sw_hist_merge(sw_hist *into, const sw_hist *from);
/* The q-quantile (0 <= q <= 1) in ns, the midpoint of its bucket; 0 for an empty histogram. */
SW_API uint64_t sw_hist_quantile(const sw_hist *h, double q);

/* ------------------------------------------------------------------------------------------
 * Statistics of one action (in one phase): Welford mean/variance, merged with Chan.
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_stats {
    uint64_t count;
    uint64_t total_ns;
    uint64_t self_ns; /* total minus time in nested spans on the same thread */
    double mean_ns;
    double m2; /* sum of squared deviations from the mean (Welford) */
    uint64_t min_ns;
    uint64_t max_ns;
    int64_t min_step; /* global step index of the min/max call; -1 outside any step */
    int64_t max_step;
    uint64_t samples; /* batch sizes of the steps the calls belonged to, summed */
} sw_stats;

SW_API void sw_stats_init(sw_stats *s);
SW_API void sw_stats_add(sw_stats *s, uint64_t ns, uint64_t self_ns, int64_t step,
                         uint64_t samples);
SW_API void sw_stats_merge(sw_stats *into, const sw_stats *from);
/* Sample standard deviation (n - 1) and population standard deviation (n), in ns; 0 when
 * undefined. */
SW_API double sw_stats_stddev(const sw_stats *s);
SW_API double sw_stats_pstddev(const sw_stats *s);
/* Samples per second over the calls (samples / total time); 0 when unknown. */
SW_API double sw_stats_samples_per_s(const sw_stats *s);
/* The q-quantile of calls summarized by s whose durations h holds (the same calls, as in an
 * sw_row): sw_hist_quantile clamped to [s->min_ns, s->max_ns], so a bucket midpoint never
 * reads above the slowest call or below the fastest. 0 when there are no calls. Every report
 * prints quantiles through this call. */
SW_API uint64_t sw_stats_quantile(const sw_stats *s, const sw_hist *h, double q);

/* ------------------------------------------------------------------------------------------
 * Snapshots — a consistent copy of everything measured, independent of the profiler.
 * Reports, the run file reader, compare and diagnose all work on snapshots.
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_row {
    sw_id action;
    const char *action_name;
    sw_phase phase;         /* SW_PHASE_ALL for the roll-up over all phases */
    const char *phase_name; /* "all" for the roll-up */
    sw_category category;
    sw_stats stats;  /* steady state: warm-up steps excluded */
    sw_stats warmup; /* warm-up steps only */
    sw_hist hist;    /* steady state durations */
} sw_row;

typedef struct sw_misuse {
    uint64_t end_without_begin; /* sw_end with no open span of that id */
    uint64_t mismatched_end;    /* sw_end that closed inner spans left open */
    uint64_t depth_overflow;    /* sw_begin beyond max_depth */
    uint64_t bad_id;            /* SW_ID_NONE or an unknown id */
    uint64_t phase_mismatch;    /* sw_phase_end of a phase that is not innermost */
    uint64_t step_overlap;      /* sw_step_begin with a step open, or step_end without one */
    uint64_t bad_record;        /* sw_record with end < start */
    uint64_t open_at_snapshot;  /* spans still open when the snapshot was taken */
} sw_misuse;

typedef struct sw_counter_summary {
    const char *name;
    uint64_t count;
    double last, min, max, mean;
} sw_counter_summary;

typedef struct sw_note {
    const char *key;
    const char *value;
} sw_note;

/* Memory over the steps (sw_step_memory_mode, sw_step_memory), in bytes; each part only when
 * rss_steps / allocator_steps is nonzero. "last" is the step that ended last. */
typedef struct sw_memory_summary {
    uint64_t rss_steps; /* steps with an RSS reading */
    uint64_t rss_max, rss_last;
    uint64_t allocator_steps;    /* steps with allocator figures */
    uint64_t peak_allocated_max; /* the largest step peak */
    uint64_t allocated_last;
    uint64_t reserved_max, reserved_last;
} sw_memory_summary;

/* Why a slow step was slow (docs/slow-steps.md; sw_slow_cause says the rule). */
typedef enum sw_cause {
    SW_CAUSE_NONE = 0,    /* not a slow step */
    SW_CAUSE_UNKNOWN,     /* slow, and no signal explains half of its excess */
    SW_CAUSE_GC,          /* the language's garbage collector (Python's gc) */
    SW_CAUSE_COMPILE,     /* a compilation ran in the step (torch.compile) */
    SW_CAUSE_CHECKPOINT,  /* a checkpoint was saved (action "checkpoint") */
    SW_CAUSE_EVAL,        /* an evaluation ran inside the step (actions "evaluate", "valid") */
    SW_CAUSE_DATA,        /* waiting for the data took longer than usual */
    SW_CAUSE_PAGE_FAULTS, /* page faults: memory touched for the first time, or swap */
    SW_CAUSE_PREEMPTED,   /* off the CPU while runnable: another process had it */
    SW_CAUSE_BLOCKED,     /* off the CPU, not runnable: I/O, a lock, a sleep, a device sync */
    SW_CAUSE_ALLOCATOR,   /* the CUDA caching allocator retried (freed its cache) or ran out */
    SW_CAUSE_STEAL,       /* the hypervisor gave the machine's CPUs to other guests (steal) */
    SW_CAUSE_SYNC,        /* the host waited for the device in a synchronizing call (.item()) */
    SW_CAUSE_THROTTLED,   /* a GPU slowed its clocks (thermal, power: NVML's clock reasons) */
    SW_CAUSE_COUNT
} sw_cause;

/* Slow steps summed up (a snapshot's; a merged file's ranks added). */
typedef struct sw_slow_summary {
    uint64_t judged;    /* steps judged against a running median */
    uint64_t slow;      /* of which slow */
    uint64_t slow_ns;   /* their time */
    uint64_t excess_ns; /* their time over their medians */
    uint64_t by_cause[SW_CAUSE_COUNT];
    uint64_t windows_kept, windows_dropped; /* slow steps whose spans were kept, or not */
} sw_slow_summary;

typedef struct sw_snapshot {
    const char *name; /* run name */
    const char *host;
    const char *command;
    int64_t pid;
    int rank;
    int world_size;
    uint64_t start_unix_ns; /* wall-clock time the profiler started */
    uint64_t elapsed_ns;    /* profiler start to snapshot (or end of the run) */
    uint64_t wall_ns;       /* denominator of percentages: the "fit" total if any, else
                                   elapsed_ns */
    uint64_t steps;         /* steps begun, all phases */
    uint32_t warmup_steps;  /* option in force */
    size_t nrows;           /* per (action, phase) rows then one roll-up row per action */
    sw_row *rows;
    size_t ncounters;
    sw_counter_summary *counters;
    sw_misuse misuse;
    uint64_t dropped_events; /* events the run file's flusher could not take */
    uint64_t threads;        /* threads that recorded */
    int local_rank;          /* the rank on its host */
    size_t nnotes;           /* sw_set_note's notes, in the order their keys were first set;
                                   a merged file has every rank's (the lowest rank's value
                                   where ranks differ) */
    sw_note *notes;
    sw_memory_summary memory; /* memory per step, summed up (all ranks: the largest of each) */
    size_t nmodules;          /* sw_set_modules' table; a merged file's ranks summed by path */
    sw_module_row *modules;
    sw_slow_summary slow; /* slow steps (docs/slow-steps.md) */
} sw_snapshot;

/* Take a snapshot of everything recorded so far (all threads). Caller frees with
 * sw_snapshot_free. Safe while other threads record. */
SW_API int sw_snapshot_take(sw_profiler *p, sw_snapshot **out);
SW_API void sw_snapshot_free(sw_snapshot *s);
/* Find a row by action name and phase name ("all" for the roll-up); NULL if absent. */
SW_API const sw_row *sw_snapshot_find(const sw_snapshot *s, const char *action, const char *phase);
/* The value of note key, or NULL. */
SW_API const char *sw_snapshot_note(const sw_snapshot *s, const char *key);

/* ------------------------------------------------------------------------------------------
 * Reports
 * ---------------------------------------------------------------------------------------- */

typedef enum sw_format {
    SW_FORMAT_TABLE = 0, /* stepwatch's table: Lightning's columns + std, p50, p99, self */
    SW_FORMAT_LIGHTNING, /* Lightning SimpleProfiler: Action, Mean duration, Num calls,
                              Total time, Percentage */
    SW_FORMAT_FASTXTEND, /* Phase, Action, Mean Duration, Duration Std Dev, Number of Calls,
                              Samples/Second, Total Time, Percent of Total */
    SW_FORMAT_IGNITE,    /* total | min/index | max/index | mean | std per action */
    SW_FORMAT_MARKDOWN,
    SW_FORMAT_CSV,
    SW_FORMAT_JSON /* versioned schema, see docs/json-schema.md */
} sw_format;

#define SW_JSON_SCHEMA_VERSION 1

/* The formats are numbered from 0 without a gap, and sw_format_name(fmt) is NULL past the
 * last, so `for (sw_format f = 0; sw_format_name(f); f++)` lists every name: the library's
 * writer table is the one list (the command's help and Python's stepwatch.FORMATS are read
 * from it). sw_format_parse takes those names and "md" for markdown; SW_EFORMAT for
 * anything else. */
SW_API int sw_format_parse(const char *name, sw_format *out);
SW_API const char *sw_format_name(sw_format fmt);

/* Write a report of s in fmt to out. SW_EINVAL for NULL arguments, SW_EIO on write error. */
SW_API int sw_snapshot_write(const sw_snapshot *s, sw_format fmt, FILE *out);
/* How a report is laid out (sw_snapshot_write_ex). SW_WRITE_OPTIONS_INIT = sw_snapshot_write's
 * layout. */
typedef struct sw_write_options {
    size_t size;    /* sizeof(sw_write_options) as the caller was compiled */
    size_t width;   /* columns the stepwatch table may take; 0 = the terminal's: $COLUMNS,
                        else the width of out's terminal, 80 for a file or a pipe */
    int full_names; /* nonzero: no layout ever shortens a name (the table, Lightning's and
                        fastxtend's layouts do past their width); for reports kept in files */
    int brief;      /* nonzero: the short form of a layout that has one: Lightning's
                        extended=False (Action, Mean duration, Total time; by mean). Other
                        layouts ignore it */
} sw_write_options;
#define SW_WRITE_OPTIONS_INIT SW__SIZED_INIT(sw_write_options)

/* sw_snapshot_write with layout options (NULL = defaults). Same errors, and those of a size
 * ("Structs that grow": SW_EINVAL, SW_EUNSUPPORTED). */
SW_API int sw_snapshot_write_ex(const sw_snapshot *s, sw_format fmt, FILE *out,
                                const sw_write_options *opts);
/* Snapshot p and write it. */
SW_API int sw_report(sw_profiler *p, sw_format fmt, FILE *out);

/* Human duration: "812 ns", "3.41 µs", "12.7 ms", "4.20 s". Writes at most size bytes
 * (NUL included) and returns buf. */
SW_API char *sw_format_duration(double ns, char *buf, size_t size);
/* fastxtend's scale_time (its report's durations): seconds with four significant digits
 * (Python's "#0.4G") and an SI prefix from y to Y ("35.63 s", "838.2ms", "771.3µs",
 * "500.0ps"); "-" for zero, NaN and the infinities. Writes at most size bytes (NUL included)
 * and returns buf. stepwatch.fastai's report calls it too. */
SW_API char *sw_format_scale_time(double seconds, char *buf, size_t size);

/* Ignite's two print_results layouts, written from cells the caller formatted: the one
 * writer of both the C engine's views (sw_engine_print_basic, sw_engine_print_handlers) and
 * stepwatch.ignite's print_results, so neither drifts from Ignite. Cells are written as
 * given (UTF-8; columns are padded by code points, as Python's str.format pads). */
typedef struct sw_ignite_event {
    const char *event;    /* "EPOCH_STARTED" */
    const char *handlers; /* its handlers as Ignite lists them: "['log', 'save']" */
    const char *stats;    /* "total | min/index | max/index | mean | std", or the total alone,
                             or "not yet triggered" */
} sw_ignite_event;
/* BasicTimeProfiler.print_results' text: the title box, "Processing function:" and its
 * stats, "Dataflow:" and its stats, "Event handlers:" and their total, then per event
 * "- Events.<event>: <handlers>" and its stats. Ignite lists six events: STARTED,
 * EPOCH_STARTED, ITERATION_STARTED, ITERATION_COMPLETED, EPOCH_COMPLETED, COMPLETED.
 * The text ends with one line feed (Ignite's print adds a second). 0, SW_EINVAL (NULL
 * argument or cell), SW_EIO (a write error). */
SW_API int sw_ignite_write_basic(FILE *out, const char *processing, const char *dataflow,
                                 const char *handlers_total, const sw_ignite_event *events,
                                 size_t nevents);
/* One row of HandlersTimeProfiler.get_results, as cells: Ignite's (min, index) and (max,
 * index) pairs are min/min_index and max/max_index (index NULL: the cell alone, as in the
 * Total row's ""). */
typedef struct sw_ignite_row {
    const char *handler, *event, *total, *min, *min_index, *max, *max_index, *mean, *std;
} sw_ignite_row;
/* HandlersTimeProfiler.print_results' text from get_results' rows: rows[0..n-3) one per
 * handler, then the "Total" row, then the "Processing" and "Dataflow" rows (n >= 3): the
 * table (the two name columns 4 wider than their longest cell in any row, the others 14,
 * two spaces between) and a "<name> took total ..s [min/index: ..s/.., ...]" line for each
 * of the last two. Starts and ends with a line feed (Ignite's print adds a second). 0,
 * SW_EINVAL (NULL, n < 3), SW_EIO. */
SW_API int sw_ignite_write_handlers(FILE *out, const sw_ignite_row *rows, size_t n);

/* ------------------------------------------------------------------------------------------
 * Per-step and per-span records (what the run file stores, one row each)
 * ---------------------------------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * Slow steps (docs/slow-steps.md): every step is judged as it ends. A step is slow when it
 * took at least SW_SLOW_FACTOR x the running median of its thread's steps of the same kind
 * (train, or any other phase) and at least SW_SLOW_FLOOR_NS longer (sw_step_is_slow: the one
 * statement of the rule; diagnose's tail-stalls uses it too). A slow step gets one cause by
 * sw_slow_cause's rule, from the signals gathered at its boundaries (sw_step_signals).
 * ---------------------------------------------------------------------------------------- */

#define SW_SLOW_FACTOR 3.0
#define SW_SLOW_FLOOR_NS 1000000u
#define SW_SLOW_MIN_HISTORY 8u /* steps the running median needs before it judges */
#define SW_SLOW_WINDOWS \
    32u                           /* slow steps per rank whose spans the run file keeps (the
                                  costliest by excess over the median) */
#define SW_SLOW_WINDOW_SPANS 256u /* spans kept per step of a window (the rest counted) */

/* "unknown", "gc", "compile", "checkpoint", "eval", "data", "page_faults", "preempted",
 * "blocked", "allocator", "steal", "sync", "throttled" ("" for SW_CAUSE_NONE); NULL out of range. Static strings. */
SW_API const char *sw_cause_name(sw_cause cause);
/* The cause an action of this name stands for when its spans run inside a step: "compile",
 * "checkpoint", "evaluate" and "valid"; SW_CAUSE_NONE for any other name. */
SW_API sw_cause sw_cause_of(const char *action_name);

/* What the core gathered over one step, at its boundaries (no thread, no timer). */
typedef struct sw_step_signals {
    /* The OS (getrusage(RUSAGE_THREAD) on the step's thread), read at the end of a slow step
     * and otherwise at most every few steps (docs/slow-steps.md: the reads cost a system
     * call); the figures cover os_wall_ns, from the previous read to this step's end (the
     * step and possibly a few steps before it). os_wall_ns 0: not read at this step. */
    uint64_t os_wall_ns;
    uint64_t cpu_ns; /* the thread's CPU time, user + system, over os_wall_ns */
    uint64_t sys_ns; /* of which in the kernel */
    uint64_t voluntary_switches, involuntary_switches;
    uint64_t minor_faults, major_faults;
    /* The garbage collector (sw_gc_collection), inside the step */
    uint64_t gc_ns;
    uint32_t gc_collections;
    int32_t gc_generation; /* the oldest generation collected; -1 none */
    uint64_t gc_collected; /* objects collected */
    /* Time of spans standing for a cause (sw_cause_of) inside the step, per cause. */
    uint64_t compile_ns, checkpoint_ns, eval_ns;
    /* What the step's checkpoints wrote (sw_step_checkpoint_bytes); 0: not said. */
    uint64_t checkpoint_bytes;
    /* The CUDA caching allocator (sw_step_allocator): its retries (a failed allocation that
     * freed the cache and tried again) and out-of-memory errors in the step. */
    uint64_t alloc_retries, ooms;
    /* The machine, from the device sampler's latest reading (0: no sampler): the share of its
     * CPU time the hypervisor stole, in per mille, its 1-minute load average x 100, and its
     * CPUs. */
    uint32_t steal_permille, load_x100, cpus;
    /* Of the off-CPU time over os_wall_ns, the part the thread was runnable, waiting for a
     * CPU (/proc/thread-self/schedstat's run_delay, read with the OS figures): the rest was
     * blocked. has_runnable 0: not read (no schedstat here, or no OS reading). */
    uint64_t runnable_ns;
    int has_runnable;
    /* Host blocking in synchronizing calls: the time of the spans named "sync ..."
     * (sw_cause_of) in the step, and the name of the longest ("sync .item()"; "" none). */
    uint64_t sync_ns;
    char sync_call[24]; /* the action name, cut to 23 bytes */
    /* NVML's clock event reasons (nvmlClocksEventReason* bits) of the device samples the
     * step overlapped, any GPU (0: none, or no NVML sampler); SW_CLOCK_SLOWDOWN_MASK are
     * the ones that slow a step. */
    uint64_t clock_reasons;
} sw_step_signals;

/* The clock event reasons that slow the GPU down (NVML's bits): software power cap (0x4),
 * hardware slowdown (0x8), software thermal (0x20), hardware thermal (0x40), hardware power
 * brake (0x80). Idle, application clock settings and sync boost are not a slowdown. */
#define SW_CLOCK_POWER_CAP 0x4ull
#define SW_CLOCK_HW_SLOWDOWN 0x8ull
#define SW_CLOCK_SW_THERMAL 0x20ull
#define SW_CLOCK_HW_THERMAL 0x40ull
#define SW_CLOCK_POWER_BRAKE 0x80ull
#define SW_CLOCK_SLOWDOWN_MASK                                                               \
    (SW_CLOCK_POWER_CAP | SW_CLOCK_HW_SLOWDOWN | SW_CLOCK_SW_THERMAL | SW_CLOCK_HW_THERMAL | \
     SW_CLOCK_POWER_BRAKE)

typedef struct sw_step_record {
    uint64_t step; /* global index, from 0 */
    sw_phase phase;
    uint32_t batch_size;
    int warmup;        /* nonzero for warm-up steps */
    uint32_t thread;   /* stepwatch thread number (0 = first thread seen) */
    uint64_t start_ns; /* since the profiler started */
    uint64_t duration_ns;
    uint64_t category_ns[SW_CAT_COUNT]; /* the own time of the spans of each category on the
                                           step's thread (see sw_category); SW_CAT_OTHER =
                                           the rest of the step */
    uint64_t rss_bytes; /* resident set at the step's end (sw_step_memory_mode); 0 = not read */
    int has_allocator;  /* nonzero: the next three are the allocator's (sw_step_memory) */
    uint64_t allocated_bytes;      /* at the step's end */
    uint64_t peak_allocated_bytes; /* the most at any moment of the step */
    uint64_t reserved_bytes;       /* at the step's end */
    /* Slow steps: the running median the step was judged against (0: not judged, as warm-up
     * steps and the first SW_SLOW_MIN_HISTORY steps), its cause (SW_CAUSE_NONE: not slow),
     * the ns that cause explains, and what was gathered over the step. */
    uint64_t median_ns;
    sw_cause cause;
    uint64_t explained_ns;
    sw_step_signals signals;
    int window_kept; /* read from a run file: the spans of its window are kept there */
} sw_step_record;

/* The rule (one place): duration at least SW_SLOW_FACTOR x median_ns and at least
 * SW_SLOW_FLOOR_NS longer. 0 for median_ns 0. */
SW_API int sw_step_is_slow(uint64_t duration_ns, uint64_t median_ns);
/* The cause of slow step r (r->duration_ns, r->median_ns, r->category_ns, r->signals; data
 * against typical_data_ns, the data time of a usual step) by the rule of docs/slow-steps.md:
 * of the causes the step's own spans and the collector name (gc, compile, checkpoint, eval,
 * data, page faults) the one that explains the most of the excess over the median, if it
 * explains at least half (each less the time the thread was preempted, which a span running
 * meanwhile counts as its own); else the allocator when its retries or out-of-memory errors
 * grew (the excess less the preempted time, if half); else the OS's off-CPU time (preempted:
 * involuntary switches outnumber voluntary ones; else blocked) if it explains half; else the
 * machine's steal (the step's time times the steal share) if half; else SW_CAUSE_UNKNOWN. The
 * ns explained go to *explained (may be NULL). */
SW_API sw_cause sw_slow_cause(const sw_step_record *r, uint64_t typical_data_ns,
                              uint64_t *explained);
/* Off the CPU over r's OS reading (os_wall_ns - cpu_ns), at most r->duration_ns; 0 without a
 * reading. */
SW_API uint64_t sw_step_off_cpu_ns(const sw_step_record *r);
/* Of that, the part the thread was runnable (preempted; the rest was blocked): with
 * schedstat's run delay, the off-CPU time less the reading's blocked time (which goes to the
 * slow step first: docs/slow-steps.md); without it, all of it when involuntary switches
 * outnumber voluntary ones, else none. */
SW_API uint64_t sw_step_runnable_ns(const sw_step_record *r);
/* One line of evidence for slow step r into buf (at most size bytes, NUL included): "step
 * 4213: 182 ms (median 31 ms): gc generation 2, 148 ms, 1.9 M objects". Returns buf. */
SW_API char *sw_slow_step_text(const sw_step_record *r, char *buf, size_t size);

/* A collection of the garbage collector ran from start_ns to end_ns (sw_now_ns clock):
 * generation collected, objects freed. Counted in the step it overlaps, by time
 * (sw_step_signals; any thread's collection counts, as it holds the step up; the newest 64
 * are kept for that, a step with more counts at least those since its sw_step_begin). One
 * collector calls it at a time (Python's, under its lock); relaxed atomics, no lock. */
SW_API void sw_gc_collection(sw_profiler *p, uint64_t start_ns, uint64_t end_ns, int generation,
                             uint64_t collected);

typedef struct sw_span_record {
    sw_id action;
    sw_phase phase;
    uint32_t thread;
    uint32_t depth;    /* 0 = outermost */
    int64_t step;      /* -1 outside steps */
    uint64_t start_ns; /* since the profiler started */
    uint64_t duration_ns;
} sw_span_record;

typedef struct sw_counter_record {
    sw_id counter;
    uint32_t thread;
    uint64_t time_ns; /* since the profiler started */
    double value;
} sw_counter_record;

#ifdef __cplusplus
}
#endif

/* The layers built on the core: the C training engine, function profiles, run files, and the
 * analyses. */
#include "stepwatch/engine.h"
#include "stepwatch/functions.h"
#include "stepwatch/run.h"
#include "stepwatch/analysis.h"
#include "stepwatch/device.h"
#include "stepwatch/output.h"
#include "stepwatch/ranks.h"
#include "stepwatch/live.h"

#endif /* STEPWATCH_H */
