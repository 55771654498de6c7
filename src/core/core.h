/*
 * core.h — what the core offers the layers above it and users never see (README.md here
 * says what the core owns). The recorder (recorder*.c) owns struct sw_profiler and the
 * per-thread records; everything else reaches a profiler through the functions below, and
 * sinks (sink.h) receive its events. Snapshots are built with the sw__snapshot_* calls by
 * the recorder and by the run-file reader alike.
 */
#ifndef SW_CORE_H
#define SW_CORE_H

#include "stepwatch.h"

#include <pthread.h>
#include <stdatomic.h>

#define SW__MAX_ACTIONS ((uint32_t)SW_MAX_ACTIONS)
#define SW__MAX_PHASES ((uint32_t)SW_MAX_PHASES)
#define SW__MAX_COUNTERS ((uint32_t)SW_MAX_COUNTERS)
#define SW__NAME_MAX ((size_t)SW_NAME_MAX)
#define SW__THREAD_NAME 64u /* bytes of a thread's name, NUL included */

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

/* ---- the profiler (recorder_*.c): made without sinks, read by the layers above ---- */

/* Make a profiler from opts (NULL: defaults) without any sink: what sw_profiler_new does
 * before it attaches the sinks the options ask for (src/profiler_new.c). 0 or SW_E*. */
int sw__profiler_new(const sw_options *opts, sw_profiler **out);

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
/* Slow steps found so far (docs/slow-steps.md), for the live status line. */
uint64_t sw__slow_count(const sw_profiler *p);
/* The machine's latest figures (the device sampler's): steal share in per mille, 1-minute
 * load average x 100, CPUs; a slow step's signals carry them (docs/slow-steps.md). */
void sw__machine_note(sw_profiler *p, uint32_t steal_permille, uint32_t load_x100, uint32_t cpus);
/* The GPUs' clock event reasons the device sampler read now (NVML's bits, ORed over the
 * GPUs), and its interval: a step the reading's state overlapped gets them
 * (sw_step_signals.clock_reasons). */
void sw__gpu_clock_note(sw_profiler *p, uint64_t reasons, uint64_t every_ns);

/* ---- for the device layer (src/device/): the training state, and a watcher of its own ---- */

/* The current phase, and whether the current step is a warm-up step (relaxed reads). */
sw_phase sw__current_phase(const sw_profiler *p);
int sw__in_warmup(const sw_profiler *p);

/* A second watcher beside the public one (sw_watcher_set, used by the function profilers):
 * fn sees the begins and ends of the actions watched with sw__hook_watch, on the recording
 * thread, with sw_watch_fn's rules (it may record counters), and their spans recorded after
 * the fact by sw_record with begins = -1. One per profiler: SW_ESTATE when another is set;
 * fn NULL removes it. A fork child starts without it. */
int sw__hook_set(sw_profiler *p, sw_watch_fn fn, void *ctx);
int sw__hook_watch(sw_profiler *p, sw_id id, int on);

/* The resident set size in bytes at now_ns (the step's end on the sw_now_ns clock): the
 * device layer's /proc reader, which may hand back its last reading when it read lately; 0
 * when it cannot tell. Called on the thread that ends a step. */
typedef uint64_t (*sw__rss_fn)(uint64_t now_ns);
/* Read the RSS at every step's end with fn (NULL: stop) into sw_step_record.rss_bytes and the
 * snapshot's memory summary (src/profiler_new.c sets it unless the options say no). */
void sw__step_rss_set(sw_profiler *p, sw__rss_fn fn);

/* Thread names (sw_thread_name; the system's name of a thread when it first records): a
 * counter that every naming bumps, and a visit of the names set since the counter was
 * `since` (0: every name), by thread number, under the profiler's lock (fn never calls back
 * into p). *changed gets the counter the names visited go with; returns how many were
 * visited. */
typedef void (*sw__thread_name_fn)(void *ctx, uint32_t thread, const char *name);
uint32_t sw__thread_names_changed(const sw_profiler *p);
uint32_t sw__thread_names(sw_profiler *p, uint32_t since, uint32_t *changed, sw__thread_name_fn fn,
                          void *ctx);

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
/* Append note key = value (copied) unless s has key already (the first value stays). 0 or
 * SW_ENOMEM. */
int sw__snapshot_set_note(sw_snapshot *s, const char *key, const char *value);
/* Add module row (strings copied); a row of the same path already in s gets its calls and
 * times added and the largest of each byte count (ranks merged). 0 or SW_ENOMEM. */
int sw__snapshot_add_module(sw_snapshot *s, const sw_module_row *row);
/* After the per-phase rows: append one roll-up row per action (phase SW_PHASE_ALL, phase name
 * "all") merging that action's rows, and set wall_ns (the "fit" total, else elapsed_ns). */
int sw__snapshot_finish(sw_snapshot *s);

/* ---- structs that carry their size (sized.c; stepwatch.h, "Structs that grow") ---- */

/* Where a struct's field ends: the size of the first release's struct is where its last
 * field of that release ends (SW__END_OF(sw_options, step_memory)). */
#define SW__END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* Read a caller's struct theirs (NULL: defaults) into mine, this library's (my_size bytes):
 * its first theirs->size bytes, the rest zeroed; mine's size becomes my_size. SW_EINVAL for
 * a size under first (the end of the first release's struct), SW_EUNSUPPORTED for a nonzero
 * byte past my_size; sw_last_error() then names type. */
int sw__sized_in(void *mine, size_t my_size, const void *theirs, size_t first, const char *type);
/* Fill a caller's output struct theirs from mine: at most theirs->size bytes, zeroes past
 * my_size; theirs->size is kept. SW_EINVAL for a size under first (sw_last_error names
 * type). */
int sw__sized_out(void *theirs, const void *mine, size_t my_size, size_t first, const char *type);

/* ---- slow steps (slow_steps.c) ---- */

/* The cause named name (sw_cause_name's words); SW_CAUSE_UNKNOWN for any other name. */
sw_cause sw__cause_parse(const char *name);

/* ---- why a call failed (errors.c; sw_last_error) ---- */

/* Set this thread's sw_last_error sentence and return rc: `return sw__error(SW_EIO, "%s: %s",
 * path, strerror(errno));`. */
int sw__error(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Make this thread's sentence for error rc name path: "path: <the sentence>" when it does not
 * name it yet ("path: input/output error" when there is none: never a bare code). Returns
 * rc (0 leaves everything as it is). */
int sw__error_about(int rc, const char *path);
/* Forget it: the calls that set it clear it when they begin. */
void sw__error_clear(void);

/* One line on stderr, "stepwatch: " + message: for what a running program must hear about
 * (a run file that cannot be written) and that no return code can carry. Never on the hot
 * path. One write(2), so lines of several threads do not interleave. */
void sw__warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- files that appear whole (tempfile.c) ---- */

/* The directory part of path ("." when there is none); caller frees. NULL: out of memory. */
char *sw__dir_of(const char *path);
/* path with its directory resolved (every symbolic link in it followed: clusters link
 * scratch and home), its last component as given; malloc'ed, NULL with errno on failure. */
char *sw__real_dir_path(const char *path);
/* A new file in dir that nobody can see yet: unnamed (O_TMPFILE) where the file system
 * allows it (*temp NULL), else a hidden ".stepwatch-XXXXXX" whose name goes to *temp (the
 * caller frees it, and removes the file if it gives up). Its descriptor, or -1 and errno. */
int sw__unnamed_open(const char *dir, char **temp);
/* Give the file of fd a fresh hidden name in dir, into *temp, so that rename(2) or link(2)
 * can put it in place; nothing to do when *temp already names it. 0, or -1 and errno. */
int sw__unnamed_name(int fd, const char *dir, char **temp);

/* ---- a sink's own thread (ticker.c): tick(ctx) every period_ms, or at once when woken, until
 * stopped or tick returns nonzero ---- */

typedef struct sw__ticker {
    int wake[2]; /* a byte on wake[1] runs the tick now; -1 when not open */
    int period_ms;
    int (*tick)(void *ctx);
    void *ctx;
    pthread_t thread;
    int running; /* started, not yet stopped */
    _Atomic int stop;
} sw__ticker;

/* Open the wake pipe, before anything can wake the ticker (a signal handler may be given
 * wake[1]): 0, or SW_EIO/SW_ENOMEM with the sentence saying why ("cannot make its thread's
 * wake-up pipe: Too many open files"; the caller adds what it is, sw__error_about). */
int sw__ticker_open(sw__ticker *t);
/* Start the thread (every signal blocked on it). 0, or SW_EIO/SW_ENOMEM with the sentence
 * saying why ("cannot start its thread: Resource temporarily unavailable"). */
int sw__ticker_start(sw__ticker *t, int period_ms, int (*tick)(void *ctx), void *ctx);
/* Run the tick now rather than at the next period: never blocks, async-signal-safe. */
void sw__ticker_wake(sw__ticker *t);
/* Stop the thread and wait for it (a tick under way finishes first); nothing when it is not
 * running. */
void sw__ticker_stop(sw__ticker *t);
/* Close the pipe: after stop, or in a fork child (the thread is the parent's). */
void sw__ticker_close(sw__ticker *t);

/* ---- growing arrays (grow.c) ---- */

/* Make the array *array (the address of a T *; size = sizeof(T)), whose room is *cap
 * elements, hold at least need: when it does not, the room doubles (from first when it is
 * 0) until it does, and the new elements are zeroed. 0, or SW_ENOMEM with the array and
 * *cap as they were:  if (sw__grow(&t->rows, sizeof *t->rows, &t->cap, t->n + 1, 16) != 0) */
int sw__grow(void *array, size_t size, size_t *cap, size_t need, size_t first);
/* The same for an array that never holds more than most elements (need <= most): the room
 * doubles as above but stops at most (the engine's bounded histories). */
int sw__grow_at_most(void *array, size_t size, size_t *cap, size_t need, size_t first, size_t most);

/* ---- small shared helpers (util.c) ---- */

/* strdup that returns NULL on NULL. */
char *sw__strdup(const char *s);
/* This host's name into buf (never fails: "unknown" at worst). */
void sw__hostname(char *buf, size_t size);
/* The process's command line, arguments joined by spaces; caller frees. */
char *sw__command_line(void);
/* Replace every "{rank}" in pattern with rank and every "{pid}" with pid; caller frees. */
char *sw__expand_path(const char *pattern, int rank, long pid);

#endif /* SW_CORE_H */
