/*
 * recorder.c — the hot path: spans on per-thread stacks, phases, steps, and the statistics
 * each thread keeps per (action, phase) cell.
 *
 * Threads. Each thread that records gets a record (sw__thread) the first time it touches a
 * profiler; a one-entry thread-local cache finds it again without a lock. Only the owning
 * thread writes its record. Readers (snapshots) read it under a per-thread sequence lock:
 * the owner makes the sequence odd, updates, makes it even; a reader retries until it saw
 * the same even value before and after copying. Fields a reader copies are written and
 * read with relaxed atomic builtins (plain moves on x86), so there is no data race.
 *
 * Memory. Cells are allocated the first time a thread begins a span of an (action, phase):
 * memory grows with the distinct actions, never with the number of spans. Event rings are
 * allocated once per thread when a sink turned events on.
 *
 * Sinks (sink.h). The recorder knows its consumers only through their ops: a full ring under
 * SW_FULL_BLOCK wakes them, sw_profiler_free closes them, an atexit hook completes them.
 *
 * Fork. A pthread_atfork child handler empties every profiler in the child and lets go of
 * its sinks, so DataLoader workers never write into the parent's run file.
 */
#include "clock.h"
#include "sink.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SW__LIKELY(x) __builtin_expect(!!(x), 1)
#define SW__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SW__INLINE static inline __attribute__((always_inline))
/* Owner-written, reader-read fields. Release stores and acquire loads order them against
 * the sequence lock without fences (plain moves on x86; ThreadSanitizer understands them). */
#define SW__PUT(field, value)                                                          \
    do {                                                                               \
        __typeof__(field) sw__put_value = (value);                                     \
        __atomic_store(&(field), &sw__put_value, __ATOMIC_RELEASE);                    \
    } while (0)
#define SW__GET(dst, field) __atomic_load(&(field), &(dst), __ATOMIC_ACQUIRE)

#define SW__PHASE_STACK 16
#define SW__DEFAULT_DEPTH 64
#define SW__DEFAULT_RING 65536

typedef struct sw__frame {
    sw_id id;
    sw_phase phase;            /* the phase current when the span began */
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
    _Atomic uint32_t seq;   /* odd while the owner updates cells */
    sw__cell ***cells;      /* [action][phase], grown under the profiler lock */
    uint32_t cells_cap;     /* actions the cells array covers */
    uint32_t depth;         /* open frames (read by snapshots) */
    uint32_t overflow;      /* begins beyond max_depth not yet ended */
    sw__frame *stack;
    sw_phase phase_stack[SW__PHASE_STACK];
    uint32_t phase_depth;
    int step_open;
    uint64_t step_category_ns[SW_CAT_COUNT];
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
    pthread_mutex_t lock; /* names, the thread list, cell growth */
    pthread_key_t thread_key;
    uint64_t origin_ns, origin_unix_ns;
    int64_t pid;
    char host[256];
    char *command;

    char *action_names[SW__MAX_ACTIONS];
    uint8_t action_category[SW__MAX_ACTIONS];
    uint8_t action_watched[SW__MAX_ACTIONS]; /* relaxed atomic bits: WATCH_USER, WATCH_HOOK */
    sw_watch_fn watch_fn;                      /* released after watch_ctx */
    void *watch_ctx;
    sw_watch_fn hook_fn;                       /* the layers' watcher (sw__hook_set), likewise */
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

    /* Process-wide training state, written by the thread that marks steps and phases. */
    _Atomic uint32_t current_phase;
    _Atomic int64_t step_index;
    _Atomic uint64_t steps_begun;
    _Atomic uint32_t batch_size;
    _Atomic int in_warmup;
    _Atomic uint64_t samples_done;
    _Atomic uint64_t phase_steps[SW__MAX_PHASES];

    sw__thread *threads;
    uint32_t threads_seen;
    sw__thread *retired; /* statistics of threads that exited */
    struct thread_name {
        uint32_t changed;  /* thread_names_changed after this naming */
        char name[SW__THREAD_NAME];
    } *thread_names;       /* by thread number; outlive their threads */
    uint32_t thread_names_cap;
    _Atomic uint32_t thread_names_changed; /* bumped by every naming */

    _Atomic int full_warned[3]; /* the action, phase, counter table was full (warned) */

    _Atomic uint64_t misuse_end_without_begin, misuse_mismatched_end, misuse_depth_overflow,
        misuse_bad_id, misuse_phase_mismatch, misuse_step_overlap, misuse_bad_record;

    _Atomic int events_on;
    _Atomic uint64_t events_dropped;
    sw__sink *sinks;               /* attached sinks, newest first (see sink.h) */
    struct sw_profiler *next_live; /* in the process-wide list, for fork */
};

/* ---- every live profiler, so fork and exit reach them -------------------------------------- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_profiler *live_profilers;
static _Atomic uint64_t next_generation = 1;
static pthread_once_t process_hooks_once = PTHREAD_ONCE_INIT;

static void reset_after_fork(sw_profiler *p);

/* The sinks that got before_fork, to get after_fork in the parent (the forking thread
 * holds live_lock from prepare to parent, so one fork at a time uses these). */
#define SW__FORK_SINKS_MAX 64
static sw__sink *forking_sinks[SW__FORK_SINKS_MAX];
static size_t nforking_sinks;

static void atfork_prepare(void) {
    pthread_mutex_lock(&live_lock);
    /* Sinks first, before the profilers' locks: a sink's flusher may need them to finish
     * what it is doing (the run file drains under p->lock). */
    nforking_sinks = 0;
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        for (sw__sink *s = __atomic_load_n(&p->sinks, __ATOMIC_ACQUIRE); s; s = s->next) {
            if (s->ops->before_fork == NULL || nforking_sinks == SW__FORK_SINKS_MAX)
                continue;
            s->ops->before_fork(s);
            forking_sinks[nforking_sinks++] = s;
        }
    }
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_lock(&p->lock);
        pthread_mutex_lock(&p->counter_lock);
    }
}

static void atfork_parent(void) {
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_unlock(&p->counter_lock);
        pthread_mutex_unlock(&p->lock);
    }
    for (size_t i = 0; i < nforking_sinks; i++)
        if (forking_sinks[i]->ops->after_fork)
            forking_sinks[i]->ops->after_fork(forking_sinks[i]);
    nforking_sinks = 0;
    pthread_mutex_unlock(&live_lock);
}

static void atfork_child(void) {
    pthread_mutex_init(&live_lock, NULL);
    nforking_sinks = 0;
    for (sw_profiler *p = live_profilers; p; p = p->next_live) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_mutex_init(&p->counter_lock, NULL);
        reset_after_fork(p);
    }
}

/* The process exits with profilers never freed: their sinks complete their output. */
static void at_exit(void) {
    pthread_mutex_lock(&live_lock);
    for (sw_profiler *p = live_profilers; p; p = p->next_live)
        for (sw__sink *s = p->sinks; s; s = s->next)
            if (s->ops->on_exit)
                s->ops->on_exit(s);
    pthread_mutex_unlock(&live_lock);
}

static void install_process_hooks(void) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atexit(at_exit);
}

/* ---- names ------------------------------------------------------------------------------ */

/* The length name is cut to: at most SW__NAME_MAX bytes, and never inside a UTF-8
 * character (a cut that would split one ends before it). */
static size_t name_length(const char *name) {
    size_t n = strnlen(name, SW__NAME_MAX + 1);
    if (n <= SW__NAME_MAX)
        return n;
    n = SW__NAME_MAX;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Is stored (a cut copy) the name name is cut to? */
static int same_name(const char *stored, const char *name, size_t len) {
    return strncmp(stored, name, len) == 0 && stored[len] == '\0';
}

static char *copy_name(const char *name, size_t len) {
    char *copy = malloc(len + 1);
    if (copy != NULL) {
        memcpy(copy, name, len);
        copy[len] = '\0';
    }
    return copy;
}

/* A table is full: say so once per table and profiler (never on the hot path: interning
 * takes a lock and is done once per name). */
static void table_full(_Atomic int *warned, const char *what, unsigned max, const char *name) {
    if (atomic_exchange(warned, 1) == 0)
        sw__warn("the %s table is full (%u names): '%.*s' and any later new %s names get no id "
                 "and are not timed",
                 what, max, (int)name_length(name), name, what);
}

/* Intern under p->lock. A new name gets category cat; an existing name keeps its own (the
 * caller compares). */
static sw_id intern_locked(sw_profiler *p, const char *name, sw_category cat) {
    size_t len = name_length(name);
    uint32_t n = atomic_load_explicit(&p->naction, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (same_name(p->action_names[i], name, len))
            return i;
    if (n >= SW__MAX_ACTIONS) {
        table_full(&p->full_warned[0], "action", SW__MAX_ACTIONS, name);
        return SW_ID_NONE;
    }
    char *copy = copy_name(name, len);
    if (copy == NULL)
        return SW_ID_NONE;
    p->action_names[n] = copy;
    p->action_category[n] = (uint8_t)cat;
    /* Release: a thread that sees the new count also sees the name and its category. */
    atomic_store_explicit(&p->naction, n + 1, memory_order_release);
    return n;
}

sw_id sw_action(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_ID_NONE;
    pthread_mutex_lock(&p->lock);
    sw_id id = intern_locked(p, name, sw_category_of(name));
    pthread_mutex_unlock(&p->lock);
    return id;
}

sw_id sw_action_with_category(sw_profiler *p, const char *name, sw_category cat) {
    if (p == NULL || name == NULL || (unsigned)cat >= SW_CAT_COUNT)
        return SW_ID_NONE;
    pthread_mutex_lock(&p->lock);
    sw_id id = intern_locked(p, name, cat);
    if (id != SW_ID_NONE && p->action_category[id] != (uint8_t)cat)
        id = SW_ID_NONE; /* a name has one category, the one it was first interned with */
    pthread_mutex_unlock(&p->lock);
    return id;
}

sw_category sw_action_category(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return SW_CAT_OTHER;
    return (sw_category)p->action_category[id];
}

const char *sw_action_name(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return NULL;
    return p->action_names[id];
}

sw_id sw_site_id(sw_profiler *p, sw_site *site, const char *name) {
    if (p == NULL)
        return SW_ID_NONE;
    uint64_t serial = p->generation & 0xFFFFFFFFu;
    uint64_t key = __atomic_load_n(&site->key, __ATOMIC_RELAXED);
    if (SW__LIKELY(key >> 32 == serial))
        return (sw_id)key;
    sw_id id = sw_action(p, name);
    if (id != SW_ID_NONE)
        __atomic_store_n(&site->key, serial << 32 | id, __ATOMIC_RELAXED);
    return id;
}

static sw_phase phase_intern_locked(sw_profiler *p, const char *name) {
    size_t len = name_length(name);
    uint32_t n = atomic_load_explicit(&p->nphase, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (same_name(p->phase_names[i], name, len))
            return i;
    if (n >= SW__MAX_PHASES) {
        table_full(&p->full_warned[1], "phase", SW__MAX_PHASES, name);
        return SW_PHASE_NONE;
    }
    sw_id action = intern_locked(p, name, sw_category_of(name));
    char *copy = copy_name(name, len);
    if (copy == NULL || action == SW_ID_NONE) {
        free(copy);
        return SW_PHASE_NONE;
    }
    p->phase_names[n] = copy;
    p->phase_action[n] = action;
    atomic_store_explicit(&p->nphase, n + 1, memory_order_release);
    return n;
}

sw_phase sw_phase_id(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL || name[0] == '\0')
        return SW_PHASE_NONE;
    pthread_mutex_lock(&p->lock);
    sw_phase phase = phase_intern_locked(p, name);
    pthread_mutex_unlock(&p->lock);
    return phase;
}

const char *sw_phase_name(const sw_profiler *p, sw_phase phase) {
    if (p == NULL || phase >= atomic_load_explicit(&p->nphase, memory_order_acquire))
        return NULL;
    return p->phase_names[phase];
}

/* ---- lifetime --------------------------------------------------------------------------- */

static void thread_exit(void *record);
static void free_thread(sw__thread *t);

static int detect_rank(const char *const *names, int fallback) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v)
            return atoi(v);
    }
    return fallback;
}

int sw__profiler_new(const sw_options *opts, sw_profiler **out) {
    if (out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_options defaults = {0};
    if (opts == NULL)
        opts = &defaults;

    if (opts->ring_capacity > SW_MAX_RING_CAPACITY ||
        (opts->on_full != SW_FULL_DROP && opts->on_full != SW_FULL_BLOCK))
        return SW_EINVAL;
    sw_profiler *p = calloc(1, sizeof *p);
    if (p == NULL)
        return SW_ENOMEM;
    p->opts = *opts;
    if (p->opts.max_depth == 0)
        p->opts.max_depth = SW__DEFAULT_DEPTH;
    if (p->opts.ring_capacity == 0)
        p->opts.ring_capacity = SW__DEFAULT_RING;
    if (p->opts.flush_interval_ms == 0)
        p->opts.flush_interval_ms = 200;
    p->opts.name = sw__strdup(opts->name ? opts->name : "stepwatch");
    p->opts.run_file = sw__strdup(opts->run_file);
    p->command = opts->command ? sw__strdup(opts->command) : sw__command_line();
    p->opts.command = p->command;
    if (opts->world_size <= 0) {
        static const char *const ranks[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                            "SLURM_PROCID", NULL};
        static const char *const sizes[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                            "SLURM_NTASKS", NULL};
        p->opts.rank = detect_rank(ranks, 0);
        p->opts.world_size = detect_rank(sizes, 1);
    }
    if (p->opts.local_rank <= 0) {
        static const char *const local[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
        p->opts.local_rank = detect_rank(local, 0);
    }
    p->pid = (int64_t)getpid();
    sw__hostname(p->host, sizeof p->host);
    atomic_init(&p->enabled, 1);
    atomic_init(&p->step_index, -1);
    p->generation = atomic_fetch_add(&next_generation, 1);
    if (pthread_mutex_init(&p->lock, NULL) != 0 ||
        pthread_mutex_init(&p->counter_lock, NULL) != 0 ||
        pthread_key_create(&p->thread_key, thread_exit) != 0) {
        free(p);
        return SW_ENOMEM;
    }
    p->retired = calloc(1, sizeof *p->retired);
    /* The built-in phases have fixed ids; "step" is the action steps are timed as. */
    static const char *const builtin[] = {"none", "fit", "epoch", "train", "valid"};
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
        phase_intern_locked(p, builtin[i]);
    p->step_action = intern_locked(p, "step", SW_CAT_OTHER);
    if (p->retired == NULL || p->opts.name == NULL || p->command == NULL ||
        atomic_load(&p->nphase) != SW_PHASE_FIRST_USER || p->step_action == SW_ID_NONE) {
        sw_profiler_free(p);
        return SW_ENOMEM;
    }
    p->origin_unix_ns = 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    p->origin_unix_ns = (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec;
    p->origin_ns = sw__clock_ns();

    pthread_once(&process_hooks_once, install_process_hooks);
    pthread_mutex_lock(&live_lock);
    p->next_live = live_profilers;
    live_profilers = p;
    pthread_mutex_unlock(&live_lock);
    *out = p;
    return 0;
}

void sw_profiler_free(sw_profiler *p) {
    if (p == NULL)
        return;
    /* Out of the process-wide list first: the exit hook no longer reaches p's sinks. */
    pthread_mutex_lock(&live_lock);
    for (sw_profiler **link = &live_profilers; *link; link = &(*link)->next_live) {
        if (*link == p) {
            *link = p->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    /* A sink's last act reads the profiler (drain, snapshot), so sinks go before the rest. */
    while (p->sinks != NULL) {
        sw__sink *s = p->sinks;
        sw__sink_detach(p, s);
        if (s->ops->on_close)
            s->ops->on_close(s);
    }

    /* No destructor may run for this key after this: threads still alive leak nothing. */
    pthread_key_delete(p->thread_key);
    sw__thread *t = p->threads;
    while (t) {
        sw__thread *next = t->next;
        free_thread(t);
        t = next;
    }
    if (p->retired)
        free_thread(p->retired);
    free(p->thread_names);
    for (uint32_t i = 0; i < atomic_load(&p->naction); i++)
        free(p->action_names[i]);
    for (uint32_t i = 0; i < atomic_load(&p->nphase); i++)
        free(p->phase_names[i]);
    for (uint32_t i = 0; i < atomic_load(&p->ncounter); i++)
        free(p->counters[i].name);
    for (uint32_t i = 0; i < p->nnotes; i++) {
        free(p->note_keys[i]);
        free(p->note_values[i]);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->counter_lock);
    free((char *)p->opts.name);
    free((char *)p->opts.run_file);
    free(p->command);
    free(p);
}

void sw_set_enabled(sw_profiler *p, int enabled) {
    if (p)
        atomic_store_explicit(&p->enabled, enabled != 0, memory_order_relaxed);
}

int sw_enabled(const sw_profiler *p) {
    return p ? atomic_load_explicit(&p->enabled, memory_order_relaxed) : 0;
}

/* Who watches an action: bits of action_watched. */
enum { WATCH_USER = 1, WATCH_HOOK = 2 };

/* Set a watcher slot (fn, ctx) under p's lock: SW_ESTATE when another one holds it. */
static int watcher_set(sw_profiler *p, sw_watch_fn *slot_fn, void **slot_ctx, sw_watch_fn fn,
                       void *ctx) {
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    if (fn != NULL && *slot_fn != NULL && (*slot_fn != fn || *slot_ctx != ctx)) {
        rc = SW_ESTATE;
    } else {
        /* ctx first: a thread that loads the new fn (acquire) sees its ctx. */
        __atomic_store_n(slot_fn, NULL, __ATOMIC_RELEASE);
        *slot_ctx = ctx;
        __atomic_store_n(slot_fn, fn, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int watch_bit(sw_profiler *p, sw_id id, int on, uint8_t bit) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return SW_EINVAL;
    if (on)
        __atomic_fetch_or(&p->action_watched[id], bit, __ATOMIC_RELAXED);
    else
        __atomic_fetch_and(&p->action_watched[id], (uint8_t)~bit, __ATOMIC_RELAXED);
    return 0;
}

int sw__hook_set(sw_profiler *p, sw_watch_fn fn, void *ctx) {
    return p ? watcher_set(p, &p->hook_fn, &p->hook_ctx, fn, ctx) : SW_EINVAL;
}

int sw__hook_watch(sw_profiler *p, sw_id id, int on) {
    return watch_bit(p, id, on, WATCH_HOOK);
}

int sw_watcher_set(sw_profiler *p, sw_watch_fn fn, void *ctx) {
    return p ? watcher_set(p, &p->watch_fn, &p->watch_ctx, fn, ctx) : SW_EINVAL;
}

int sw_watch(sw_profiler *p, sw_id id, int on) {
    return watch_bit(p, id, on, WATCH_USER);
}

int sw_watched(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return 0;
    return (__atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED) & WATCH_USER) != 0;
}

/* ---- thread records ---------------------------------------------------------------------- */

static _Thread_local struct {
    const sw_profiler *profiler;
    uint64_t generation;
    sw__thread *record;
} tls_cache __attribute__((tls_model("initial-exec")));

static void free_cells(sw__thread *t) {
    for (uint32_t a = 0; a < t->cells_cap; a++) {
        if (t->cells[a] == NULL)
            continue;
        for (uint32_t ph = 0; ph < SW__MAX_PHASES; ph++)
            free(t->cells[a][ph]);
        free(t->cells[a]);
    }
    free(t->cells);
    t->cells = NULL;
    t->cells_cap = 0;
}

static void free_thread(sw__thread *t) {
    free_cells(t);
    free(t->stack);
    free(t->ring.slots);
    free(t);
}

/* Name thread number `number` (p->lock held): the name, and the naming counter it goes with,
 * so the run file's writer rewrites only the names that changed. */
static void set_thread_name(sw_profiler *p, uint32_t number, const char *name) {
    struct thread_name *slot = &p->thread_names[number];
    snprintf(slot->name, sizeof slot->name, "%s", name);
    slot->changed = atomic_fetch_add(&p->thread_names_changed, 1) + 1;
}

static sw__thread *thread_slow(sw_profiler *p) {
    sw__thread *t = pthread_getspecific(p->thread_key);
    if (t == NULL) {
        t = calloc(1, sizeof *t);
        if (t == NULL)
            return NULL;
        t->stack = calloc(p->opts.max_depth, sizeof *t->stack);
        if (t->stack == NULL) {
            free(t);
            return NULL;
        }
        t->profiler = p;
        atomic_init(&t->alive, 1);
        char name[SW__THREAD_NAME] = "";
        pthread_getname_np(pthread_self(), name, sizeof name); /* "" if it cannot tell */
        pthread_mutex_lock(&p->lock);
        if (p->threads_seen == p->thread_names_cap) {
            uint32_t cap = p->thread_names_cap ? 2 * p->thread_names_cap : 8;
            void *grown = realloc(p->thread_names, cap * sizeof *p->thread_names);
            if (grown != NULL) {
                p->thread_names = grown;
                p->thread_names_cap = cap;
            }
        }
        t->number = p->threads_seen++;
        if (t->number < p->thread_names_cap)
            set_thread_name(p, t->number, name);
        t->next = p->threads;
        p->threads = t;
        pthread_mutex_unlock(&p->lock);
        pthread_setspecific(p->thread_key, t);
    }
    tls_cache.profiler = p;
    tls_cache.generation = p->generation;
    tls_cache.record = t;
    return t;
}

SW__INLINE sw__thread *thread_of(sw_profiler *p) {
    if (SW__LIKELY(tls_cache.profiler == p && tls_cache.generation == p->generation))
        return tls_cache.record;
    return thread_slow(p);
}

/* Make the cell of (action, phase) in t; NULL when out of memory. Callers hold p->lock,
 * because snapshots walk the cells arrays. */
static sw__cell *cell_create_locked(sw__thread *t, sw_id action, sw_phase phase) {
    if (action < t->cells_cap && t->cells[action] && t->cells[action][phase])
        return t->cells[action][phase];
    if (action >= t->cells_cap) {
        uint32_t cap = t->cells_cap ? t->cells_cap : 16;
        while (cap <= action)
            cap *= 2;
        sw__cell ***grown = realloc(t->cells, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        memset(grown + t->cells_cap, 0, (cap - t->cells_cap) * sizeof *grown);
        t->cells = grown;
        t->cells_cap = cap;
    }
    if (t->cells[action] == NULL) {
        t->cells[action] = calloc(SW__MAX_PHASES, sizeof **t->cells);
        if (t->cells[action] == NULL)
            return NULL;
    }
    sw__cell *cell = calloc(1, sizeof *cell);
    if (cell == NULL)
        return NULL;
    sw_stats_init(&cell->stats);
    sw_stats_init(&cell->warm);
    t->cells[action][phase] = cell;
    return cell;
}

SW__INLINE sw__cell *cell_of(sw_profiler *p, sw__thread *t, sw_id action, sw_phase phase) {
    if (SW__LIKELY(action < t->cells_cap && t->cells[action] && t->cells[action][phase]))
        return t->cells[action][phase];
    pthread_mutex_lock(&p->lock);
    sw__cell *cell = cell_create_locked(t, action, phase);
    pthread_mutex_unlock(&p->lock);
    return cell;
}

/* Fold a cell's pending durations into its histogram, mean and m2. The owner calls it under
 * its sequence lock; readers call it on their copy. */
static __attribute__((noinline)) void cell_fold(sw__cell *cell) {
    sw_stats *s = &cell->stats;
    uint32_t n = cell->npending;
    if (n == 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = sw__hist_bucket(cell->pending[i]);
        SW__PUT(cell->hist.buckets[b], cell->hist.buckets[b] + 1);
    }
    SW__PUT(cell->hist.count, cell->hist.count + n);
    SW__PUT(s->m2, sw__m2_fold(s->count - n, s->mean_ns, s->m2, cell->pending, n));
    SW__PUT(s->mean_ns, (double)s->total_ns / (double)s->count);
    SW__PUT(cell->npending, 0);
}

/* Publish one value into a cell under the thread's sequence lock: sw_stats_add written in
 * place, so only the fields that change are stored. The main statistics hold back up to
 * SW__PENDING durations and put them into the histogram, mean and m2 together (cell_fold):
 * the per-value division and bucket update would otherwise stall the next clock read, which
 * waits for earlier work to finish. Warm-up calls are few and take the plain update. */
SW__INLINE void cell_add(sw__thread *t, sw__cell *cell, uint64_t ns, uint64_t self_ns,
                         int64_t step, uint64_t samples, int warm) {
    sw_stats *s = warm ? &cell->warm : &cell->stats;
    uint64_t count = s->count + 1, total = s->total_ns + ns;
    uint32_t seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    SW__PUT(s->count, count);
    SW__PUT(s->total_ns, total);
    SW__PUT(s->self_ns, s->self_ns + self_ns);
    SW__PUT(s->samples, s->samples + samples);
    if (ns < s->min_ns) {
        SW__PUT(s->min_ns, ns);
        SW__PUT(s->min_step, step);
    }
    if (ns > s->max_ns || count == 1) {
        SW__PUT(s->max_ns, ns);
        SW__PUT(s->max_step, step);
    }
    if (SW__UNLIKELY(warm)) {
        SW__PUT(s->m2, sw__m2_fold(count - 1, s->mean_ns, s->m2, &ns, 1));
        SW__PUT(s->mean_ns, (double)total / (double)count);
    } else {
        uint32_t n = cell->npending;
        SW__PUT(cell->pending[n], ns);
        SW__PUT(cell->npending, n + 1);
        if (SW__UNLIKELY(n + 1 == SW__PENDING))
            cell_fold(cell);
    }
    atomic_store_explicit(&t->seq, seq + 2, memory_order_release);
}

/* ---- sinks and event rings ---------------------------------------------------------------- */

void sw__sink_attach(sw_profiler *p, sw__sink *sink) {
    pthread_mutex_lock(&p->lock);
    sink->next = p->sinks;
    /* Release: a recording thread that finds the sink (wake_sinks) sees it whole. */
    __atomic_store_n(&p->sinks, sink, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
}

void sw__sink_detach(sw_profiler *p, sw__sink *sink) {
    pthread_mutex_lock(&p->lock);
    for (sw__sink **link = &p->sinks; *link; link = &(*link)->next) {
        if (*link == sink) {
            *link = sink->next;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    sink->next = NULL;
}

sw__sink *sw__sink_find(sw_profiler *p, const sw__sink_ops *ops) {
    pthread_mutex_lock(&p->lock);
    sw__sink *s = p->sinks;
    while (s && s->ops != ops)
        s = s->next;
    pthread_mutex_unlock(&p->lock);
    return s;
}

static __attribute__((noinline)) void wake_sinks(sw_profiler *p) {
    for (sw__sink *s = __atomic_load_n(&p->sinks, __ATOMIC_ACQUIRE); s; s = s->next)
        if (s->ops->wake)
            s->ops->wake(s);
}

static sw__event *ring_reserve(sw_profiler *p, sw__thread *t) {
    sw__ring *r = &t->ring;
    if (SW__UNLIKELY(r->slots == NULL)) {
        uint64_t cap = 1;
        while (cap < p->opts.ring_capacity)
            cap <<= 1;
        /* Published to the flusher under the lock it drains with. */
        pthread_mutex_lock(&p->lock);
        r->slots = malloc(cap * sizeof *r->slots);
        r->mask = cap - 1;
        pthread_mutex_unlock(&p->lock);
        if (r->slots == NULL) {
            atomic_fetch_add_explicit(&p->events_dropped, 1, memory_order_relaxed);
            return NULL;
        }
    }
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    int woke = 0;
    while (head - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask) {
        if (p->opts.on_full != SW_FULL_BLOCK || !atomic_load(&p->events_on)) {
            atomic_fetch_add_explicit(&p->events_dropped, 1, memory_order_relaxed);
            return NULL;
        }
        /* Full: have the consumer drain now rather than at its next period. */
        if (!woke) {
            wake_sinks(p);
            woke = 1;
        }
        sched_yield();
    }
    return &r->slots[head & r->mask];
}

static void ring_commit(sw__thread *t) {
    uint64_t head = atomic_load_explicit(&t->ring.head, memory_order_relaxed);
    atomic_store_explicit(&t->ring.head, head + 1, memory_order_release);
}

void sw__events_enable(sw_profiler *p) {
    atomic_store(&p->events_on, 1);
}

size_t sw__drain(sw_profiler *p, sw__event_fn fn, void *ctx) {
    size_t drained = 0;
    pthread_mutex_lock(&p->lock);
    sw__thread **link = &p->threads;
    while (*link) {
        sw__thread *t = *link;
        sw__ring *r = &t->ring;
        if (r->slots != NULL) {
            uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
            uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
            for (; tail != head; tail++, drained++)
                fn(ctx, &r->slots[tail & r->mask]);
            atomic_store_explicit(&r->tail, tail, memory_order_release);
        }
        /* A thread that exited and has nothing left to drain is gone for good. */
        if (!atomic_load(&t->alive)) {
            *link = t->next;
            free_thread(t);
            continue;
        }
        link = &t->next;
    }
    pthread_mutex_unlock(&p->lock);
    return drained;
}

/* ---- spans ------------------------------------------------------------------------------- */

SW__INLINE int64_t current_step(const sw_profiler *p) {
    return atomic_load_explicit(&p->step_index, memory_order_relaxed);
}

/* A watched action began or ends on this thread: tell its watchers (sw_watch, sw__hook). */
static __attribute__((noinline)) void notify_watcher(sw_profiler *p, sw_id id, int begins) {
    uint8_t bits = __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED);
    sw_watch_fn fn = (bits & WATCH_USER) ? __atomic_load_n(&p->watch_fn, __ATOMIC_ACQUIRE) : NULL;
    if (fn != NULL)
        fn(p->watch_ctx, id, begins);
    fn = (bits & WATCH_HOOK) ? __atomic_load_n(&p->hook_fn, __ATOMIC_ACQUIRE) : NULL;
    if (fn != NULL)
        fn(p->hook_ctx, id, begins);
}

/* A watched action's span was recorded after the fact (sw_record): only the layers' hook
 * hears of it (begins = -1), the public watcher's contract has begins and ends only. */
static __attribute__((noinline)) void notify_recorded(sw_profiler *p, sw_id id) {
    uint8_t bits = __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED);
    sw_watch_fn fn = (bits & WATCH_HOOK) ? __atomic_load_n(&p->hook_fn, __ATOMIC_ACQUIRE) : NULL;
    if (fn != NULL)
        fn(p->hook_ctx, id, -1);
}

SW__INLINE int is_watched(const sw_profiler *p, sw_id id) {
    return __atomic_load_n(&p->action_watched[id], __ATOMIC_RELAXED) != 0;
}

SW__INLINE void push_frame(sw_profiler *p, sw__thread *t, sw_id id, uint64_t now) {
    if (SW__UNLIKELY(t->depth >= p->opts.max_depth)) {
        t->overflow++;
        atomic_fetch_add_explicit(&p->misuse_depth_overflow, 1, memory_order_relaxed);
        return;
    }
    sw__frame *f = &t->stack[t->depth];
    f->id = id;
    f->phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    f->cell = cell_of(p, t, id, f->phase);
    f->start_ns = now;
    f->child_ns = 0;
    f->cat_ns = 0;
    f->samples_at_begin = atomic_load_explicit(&p->samples_done, memory_order_relaxed);
    SW__PUT(t->depth, t->depth + 1);
    if (SW__UNLIKELY(is_watched(p, id)))
        notify_watcher(p, id, 1);
}

/* The timeline event of one finished span (only with the timeline option and events on). */
static __attribute__((noinline)) void emit_span(sw_profiler *p, sw__thread *t, sw_id id,
                                                sw_phase phase, uint64_t start,
                                                uint64_t duration, uint32_t depth,
                                                int64_t step) {
    sw__event *ev = ring_reserve(p, t);
    if (ev == NULL)
        return;
    ev->kind = SW__EVENT_SPAN;
    ev->u.span = (sw_span_record){.action = id,
                                  .phase = phase,
                                  .thread = t->number,
                                  .depth = depth,
                                  .step = step,
                                  .start_ns = start - p->origin_ns,
                                  .duration_ns = duration};
    ring_commit(t);
}

/* The statistics, the step breakdown and the timeline event of one finished span.
 *
 * The step breakdown: a span with a category gives that category its own time, its duration
 * less what the spans nested in it gave to categories (cat_ns), and tells its parent it
 * gave away its whole duration; a span without one ("other") passes its nested spans' gifts
 * up unchanged, so its own time is left to the step's "other". Lightning's optimizer_step
 * (optimizer) thus keeps only the optimizer's own time: the training_step (forward) and
 * backward its closure runs are counted as theirs. Returns what to add to the parent's
 * cat_ns. */
SW__INLINE uint64_t record_span(sw_profiler *p, sw__thread *t, sw__cell *cell, sw_id id,
                                sw_phase phase, uint64_t start, uint64_t duration,
                                uint64_t child_ns, uint64_t cat_ns,
                                uint64_t samples_at_begin, uint32_t depth) {
    int64_t step = current_step(p);
    uint64_t samples = atomic_load_explicit(&p->samples_done, memory_order_relaxed) -
                       samples_at_begin;
    if (step >= 0)
        samples += atomic_load_explicit(&p->batch_size, memory_order_relaxed);
    if (SW__LIKELY(cell != NULL)) {
        int warm = step >= 0 && atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
        uint64_t self = duration > child_ns ? duration - child_ns : 0;
        cell_add(t, cell, duration, self, step, samples, warm);
    }
    uint8_t category = p->action_category[id];
    uint64_t given = cat_ns;
    if (category != SW_CAT_OTHER) {
        if (t->step_open)
            t->step_category_ns[category] += duration > cat_ns ? duration - cat_ns : 0;
        given = duration;
    }
    if (SW__UNLIKELY(atomic_load_explicit(&p->events_on, memory_order_relaxed)) &&
        p->opts.timeline)
        emit_span(p, t, id, phase, start, duration, depth, step);
    return given;
}

/* Close the innermost frame at time now; returns its duration. */
SW__INLINE uint64_t pop_frame(sw_profiler *p, sw__thread *t, uint64_t now) {
    uint32_t depth = t->depth - 1;
    sw__frame *f = &t->stack[depth];
    uint64_t duration = now > f->start_ns ? now - f->start_ns : 0;
    SW__PUT(t->depth, depth);
    if (SW__UNLIKELY(is_watched(p, f->id)))
        notify_watcher(p, f->id, 0);
    uint64_t given = record_span(p, t, f->cell, f->id, f->phase, f->start_ns, duration,
                                 f->child_ns, f->cat_ns, f->samples_at_begin, depth);
    if (depth > 0) {
        t->stack[depth - 1].child_ns += duration;
        t->stack[depth - 1].cat_ns += given;
    }
    return duration;
}

SW__INLINE int id_ok(sw_profiler *p, sw_id id) {
    if (SW__LIKELY(id < atomic_load_explicit(&p->naction, memory_order_acquire)))
        return 1;
    atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
    return 0;
}

/* End the innermost open span of id when it is not the innermost one: close (and count) the
 * spans opened inside it. Returns its duration, or 0 when no span of id is open. */
static __attribute__((noinline)) uint64_t end_span_unwind(sw_profiler *p, sw__thread *t,
                                                         sw_id id, uint64_t now) {
    /* sw_end skips the id check on its fast path: an unknown id never matches a frame. */
    if (!id_ok(p, id))
        return 0;
    uint32_t k = t->depth;
    while (k > 0 && t->stack[k - 1].id != id)
        k--;
    if (k == 0) {
        atomic_fetch_add_explicit(&p->misuse_end_without_begin, 1, memory_order_relaxed);
        return 0;
    }
    atomic_fetch_add_explicit(&p->misuse_mismatched_end, 1, memory_order_relaxed);
    while (t->depth > k)
        pop_frame(p, t, now);
    return pop_frame(p, t, now);
}

/* End the innermost open span of id; returns its duration (0 when none is open). */
SW__INLINE uint64_t end_span(sw_profiler *p, sw__thread *t, sw_id id, uint64_t now) {
    if (SW__LIKELY(t->depth > 0 && t->stack[t->depth - 1].id == id))
        return pop_frame(p, t, now);
    return end_span_unwind(p, t, id, now);
}

/* The calling thread's record for a begin of id, or NULL when nothing is to be recorded. */
SW__INLINE sw__thread *begin_thread(sw_profiler *p, sw_id id) {
    if (SW__UNLIKELY(p == NULL) ||
        !atomic_load_explicit(&p->enabled, memory_order_relaxed) || !id_ok(p, id))
        return NULL;
    return thread_of(p);
}

void sw_begin(sw_profiler *p, sw_id id) {
    sw__thread *t = begin_thread(p, id);
    if (SW__LIKELY(t != NULL))
        push_frame(p, t, id, sw__clock_ns());
}

void sw_begin_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    sw__thread *t = begin_thread(p, id);
    if (SW__LIKELY(t != NULL))
        push_frame(p, t, id, now_ns);
}

SW__INLINE void end_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    if (SW__UNLIKELY(p == NULL))
        return;
    sw__thread *t = thread_of(p);
    if (SW__UNLIKELY(t == NULL))
        return;
    if (SW__UNLIKELY(t->overflow > 0)) {
        t->overflow--;
        return;
    }
    if (SW__UNLIKELY(!atomic_load_explicit(&p->enabled, memory_order_relaxed))) {
        /* Recording is off: forget a matching open span without recording it. */
        if (t->depth > 0 && t->stack[t->depth - 1].id == id) {
            SW__PUT(t->depth, t->depth - 1);
            if (SW__UNLIKELY(is_watched(p, id)))
                notify_watcher(p, id, 0);
        }
        return;
    }
    end_span(p, t, id, now_ns);
}

void sw_end(sw_profiler *p, sw_id id) {
    end_at(p, id, sw__clock_ns());
}

void sw_end_at(sw_profiler *p, sw_id id, uint64_t now_ns) {
    end_at(p, id, now_ns);
}

void sw_record(sw_profiler *p, sw_id id, uint64_t start_ns, uint64_t end_ns) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed) || !id_ok(p, id))
        return;
    if (end_ns < start_ns) {
        atomic_fetch_add_explicit(&p->misuse_bad_record, 1, memory_order_relaxed);
        return;
    }
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    uint64_t duration = end_ns - start_ns;
    sw_phase phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    uint64_t given = record_span(p, t, cell_of(p, t, id, phase), id, phase, start_ns, duration,
                                 0, 0, atomic_load_explicit(&p->samples_done,
                                                            memory_order_relaxed), t->depth);
    if (t->depth > 0) {
        t->stack[t->depth - 1].child_ns += duration;
        t->stack[t->depth - 1].cat_ns += given;
    }
    if (SW__UNLIKELY(is_watched(p, id)))
        notify_recorded(p, id);
}

/* ---- phases and steps ------------------------------------------------------------------------ */

void sw_phase_begin(sw_profiler *p, sw_phase phase) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    if (phase >= atomic_load_explicit(&p->nphase, memory_order_acquire)) {
        atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
        return;
    }
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (t->phase_depth >= SW__PHASE_STACK) {
        atomic_fetch_add_explicit(&p->misuse_depth_overflow, 1, memory_order_relaxed);
        return;
    }
    /* The phase's span belongs to the enclosing phase, so push it before switching. */
    push_frame(p, t, p->phase_action[phase], sw__clock_ns());
    t->phase_stack[t->phase_depth++] = phase;
    atomic_store_explicit(&p->current_phase, phase, memory_order_relaxed);
}

void sw_phase_end(sw_profiler *p, sw_phase phase) {
    uint64_t now = sw__clock_ns();
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    uint32_t k = t->phase_depth;
    while (k > 0 && t->phase_stack[k - 1] != phase)
        k--;
    if (k == 0 || k != t->phase_depth) {
        atomic_fetch_add_explicit(&p->misuse_phase_mismatch, 1, memory_order_relaxed);
        if (k == 0)
            return;
    }
    if (t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        sw_step_end(p);
    }
    /* Phases opened inside this one end with it. */
    while (t->phase_depth >= k) {
        sw_phase inner = t->phase_stack[--t->phase_depth];
        end_span(p, t, p->phase_action[inner], now);
    }
    sw_phase current = t->phase_depth ? t->phase_stack[t->phase_depth - 1] : SW_PHASE_NONE;
    atomic_store_explicit(&p->current_phase, current, memory_order_relaxed);
}

void sw_step_begin(sw_profiler *p, uint32_t batch_size) {
    sw_step_begin_at(p, batch_size, 0);
}

void sw_step_begin_at(sw_profiler *p, uint32_t batch_size, uint64_t start_ns) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        sw_step_end(p);
    }
    sw_phase phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
    uint64_t in_phase = atomic_fetch_add_explicit(&p->phase_steps[phase], 1, memory_order_relaxed);
    uint64_t index = atomic_fetch_add_explicit(&p->steps_begun, 1, memory_order_relaxed);
    atomic_store_explicit(&p->batch_size, batch_size, memory_order_relaxed);
    atomic_store_explicit(&p->in_warmup, in_phase < p->opts.warmup_steps, memory_order_relaxed);
    atomic_store_explicit(&p->step_index, (int64_t)index, memory_order_relaxed);
    memset(t->step_category_ns, 0, sizeof t->step_category_ns);
    t->step_open = 1;
    uint64_t now = sw__clock_ns();
    push_frame(p, t, p->step_action, start_ns != 0 && start_ns < now ? start_ns : now);
}

void sw_step_set_batch_size(sw_profiler *p, uint32_t batch_size) {
    if (p != NULL)
        atomic_store_explicit(&p->batch_size, batch_size, memory_order_relaxed);
}

void sw_step_end(sw_profiler *p) {
    sw_step_end_at(p, 0);
}

void sw_step_end_at(sw_profiler *p, uint64_t end_ns) {
    uint64_t now = sw__clock_ns();
    if (end_ns != 0 && end_ns < now)
        now = end_ns;
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return;
    if (!t->step_open) {
        atomic_fetch_add_explicit(&p->misuse_step_overlap, 1, memory_order_relaxed);
        return;
    }
    if (t->depth > 0 && t->stack[t->depth - 1].id == p->step_action &&
        now < t->stack[t->depth - 1].start_ns)
        now = t->stack[t->depth - 1].start_ns; /* an end before the start: a step of 0 */
    uint64_t duration = end_span(p, t, p->step_action, now);
    uint64_t start = now - duration; /* 0 duration: no step frame (it overflowed max_depth) */
    uint32_t batch = atomic_load_explicit(&p->batch_size, memory_order_relaxed);
    if (atomic_load_explicit(&p->events_on, memory_order_relaxed) && duration > 0) {
        sw__event *ev = ring_reserve(p, t);
        if (ev) {
            sw_step_record *s = &ev->u.step;
            ev->kind = SW__EVENT_STEP;
            s->step = (uint64_t)current_step(p);
            s->phase = atomic_load_explicit(&p->current_phase, memory_order_relaxed);
            s->batch_size = batch;
            s->warmup = atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
            s->thread = t->number;
            s->start_ns = start - p->origin_ns;
            s->duration_ns = duration;
            uint64_t accounted = 0;
            for (int c = 0; c < SW_CAT_OTHER; c++) {
                s->category_ns[c] = t->step_category_ns[c];
                accounted += t->step_category_ns[c];
            }
            s->category_ns[SW_CAT_OTHER] = duration > accounted ? duration - accounted : 0;
            ring_commit(t);
        }
    }
    atomic_fetch_add_explicit(&p->samples_done, batch, memory_order_relaxed);
    atomic_store_explicit(&p->step_index, -1, memory_order_relaxed);
    atomic_store_explicit(&p->in_warmup, 0, memory_order_relaxed);
    t->step_open = 0;
}

uint64_t sw_step_count(const sw_profiler *p) {
    return p ? atomic_load_explicit(&p->steps_begun, memory_order_relaxed) : 0;
}

int64_t sw_step_index(const sw_profiler *p) {
    return p ? current_step(p) : -1;
}

/* ---- notes ---------------------------------------------------------------------------------- */

/* value cut to at most SW_NOTE_VALUE_MAX bytes, at a character boundary (UTF-8). */
static char *note_copy(const char *value) {
    size_t n = strlen(value);
    if (n > SW_NOTE_VALUE_MAX) {
        n = SW_NOTE_VALUE_MAX;
        while (n > 0 && ((unsigned char)value[n] & 0xC0) == 0x80)
            n--;
    }
    char *copy = malloc(n + 1);
    if (copy != NULL) {
        memcpy(copy, value, n);
        copy[n] = '\0';
    }
    return copy;
}

int sw_set_note(sw_profiler *p, const char *key, const char *value) {
    if (p == NULL || key == NULL || key[0] == '\0' || strlen(key) > SW_NOTE_KEY_MAX)
        return SW_EINVAL;
    char *copy = NULL;
    if (value != NULL && (copy = note_copy(value)) == NULL)
        return SW_ENOMEM;
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    uint32_t i = 0;
    while (i < p->nnotes && strcmp(p->note_keys[i], key) != 0)
        i++;
    if (i < p->nnotes) {
        free(p->note_values[i]);
        if (copy != NULL) {
            p->note_values[i] = copy;
        } else { /* removed: keep the others in order */
            free(p->note_keys[i]);
            for (; i + 1 < p->nnotes; i++) {
                p->note_keys[i] = p->note_keys[i + 1];
                p->note_values[i] = p->note_values[i + 1];
            }
            p->nnotes--;
        }
    } else if (copy != NULL) {
        char *key_copy = p->nnotes < SW_MAX_NOTES ? sw__strdup(key) : NULL;
        rc = p->nnotes >= SW_MAX_NOTES ? SW_ELIMIT : key_copy == NULL ? SW_ENOMEM : 0;
        if (rc == 0) {
            p->note_keys[p->nnotes] = key_copy;
            p->note_values[p->nnotes++] = copy;
        } else {
            free(copy);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* ---- counters (sampled a few times a second: a short lock is fine) ------------------------ */

sw_id sw_counter_id(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_ID_NONE;
    sw_id id = SW_ID_NONE;
    size_t len = name_length(name);
    pthread_mutex_lock(&p->counter_lock);
    uint32_t n = atomic_load(&p->ncounter);
    for (uint32_t i = 0; i < n && id == SW_ID_NONE; i++)
        if (same_name(p->counters[i].name, name, len))
            id = i;
    if (id == SW_ID_NONE && n >= SW__MAX_COUNTERS)
        table_full(&p->full_warned[2], "counter", SW__MAX_COUNTERS, name);
    if (id == SW_ID_NONE && n < SW__MAX_COUNTERS) {
        p->counters[n].name = copy_name(name, len);
        if (p->counters[n].name) {
            id = n;
            atomic_store(&p->ncounter, n + 1);
        }
    }
    pthread_mutex_unlock(&p->counter_lock);
    return id;
}

void sw_counter(sw_profiler *p, sw_id counter, double value) {
    if (p == NULL || !atomic_load_explicit(&p->enabled, memory_order_relaxed))
        return;
    if (counter >= atomic_load(&p->ncounter)) {
        atomic_fetch_add_explicit(&p->misuse_bad_id, 1, memory_order_relaxed);
        return;
    }
    uint64_t now = sw__clock_ns();
    pthread_mutex_lock(&p->counter_lock);
    sw_counter_summary *s = &p->counters[counter].summary;
    s->count++;
    s->last = value;
    if (s->count == 1 || value < s->min)
        s->min = value;
    if (s->count == 1 || value > s->max)
        s->max = value;
    s->mean += (value - s->mean) / (double)s->count;
    pthread_mutex_unlock(&p->counter_lock);
    sw__thread *t = thread_of(p);
    if (t && atomic_load_explicit(&p->events_on, memory_order_relaxed)) {
        sw__event *ev = ring_reserve(p, t);
        if (ev) {
            ev->kind = SW__EVENT_COUNTER;
            ev->u.counter = (sw_counter_record){
                .counter = counter, .thread = t->number, .time_ns = now - p->origin_ns,
                .value = value};
            ring_commit(t);
        }
    }
}

/* ---- snapshots ----------------------------------------------------------------------------- */

/* Copy one cell consistently (retrying while its owner updates it). */
static void cell_read(const sw__thread *t, const sw__cell *cell, sw__cell *out) {
    for (;;) {
        uint32_t before = atomic_load_explicit(&t->seq, memory_order_acquire);
        if (before & 1) {
            sched_yield();
            continue;
        }
        const sw_stats *from[2] = {&cell->stats, &cell->warm};
        sw_stats *to[2] = {&out->stats, &out->warm};
        for (int i = 0; i < 2; i++) {
            SW__GET(to[i]->count, from[i]->count);
            SW__GET(to[i]->total_ns, from[i]->total_ns);
            SW__GET(to[i]->self_ns, from[i]->self_ns);
            SW__GET(to[i]->mean_ns, from[i]->mean_ns);
            SW__GET(to[i]->m2, from[i]->m2);
            SW__GET(to[i]->min_ns, from[i]->min_ns);
            SW__GET(to[i]->max_ns, from[i]->max_ns);
            SW__GET(to[i]->min_step, from[i]->min_step);
            SW__GET(to[i]->max_step, from[i]->max_step);
            SW__GET(to[i]->samples, from[i]->samples);
        }
        SW__GET(out->hist.count, cell->hist.count);
        for (uint32_t b = 0; b < SW_HIST_BUCKETS; b++)
            SW__GET(out->hist.buckets[b], cell->hist.buckets[b]);
        SW__GET(out->npending, cell->npending);
        for (uint32_t i = 0; i < SW__PENDING; i++)
            SW__GET(out->pending[i], cell->pending[i]);
        if (atomic_load_explicit(&t->seq, memory_order_relaxed) == before) {
            cell_fold(out);
            return;
        }
    }
}

static void cell_merge(sw__cell *into, const sw__cell *from) {
    sw_stats_merge(&into->stats, &from->stats);
    sw_stats_merge(&into->warm, &from->warm);
    sw_hist_merge(&into->hist, &from->hist);
}

static int merge_thread_locked(const sw__thread *t, sw_id action, sw_phase phase, sw__cell *sum,
                               sw__cell *scratch) {
    if (action >= t->cells_cap || t->cells[action] == NULL || t->cells[action][phase] == NULL)
        return 0;
    cell_read(t, t->cells[action][phase], scratch);
    cell_merge(sum, scratch);
    return 1;
}

/* A thread exits: fold its statistics into p->retired. Its record goes now, or after the
 * flusher has drained its events. */
static void thread_exit(void *record) {
    sw__thread *t = record;
    sw_profiler *p = t->profiler;
    pthread_mutex_lock(&p->lock);
    for (uint32_t a = 0; a < t->cells_cap; a++) {
        for (uint32_t ph = 0; t->cells[a] && ph < SW__MAX_PHASES; ph++) {
            if (t->cells[a][ph] == NULL)
                continue;
            sw__cell *into = cell_create_locked(p->retired, a, ph);
            cell_fold(t->cells[a][ph]);
            if (into)
                cell_merge(into, t->cells[a][ph]);
        }
    }
    free_cells(t);
    atomic_store(&t->alive, 0);
    if (t->ring.slots == NULL) {
        for (sw__thread **link = &p->threads; *link; link = &(*link)->next) {
            if (*link == t) {
                *link = t->next;
                free_thread(t);
                break;
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    tls_cache.profiler = NULL;
}

int sw_snapshot_take(sw_profiler *p, sw_snapshot **out) {
    if (p == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_snapshot *s = sw__snapshot_new();
    sw__cell *sum = malloc(sizeof *sum), *scratch = malloc(sizeof *scratch);
    int rc = (s && sum && scratch) ? 0 : SW_ENOMEM;
    if (rc == 0) {
        s->name = sw__snapshot_string(s, p->opts.name);
        s->host = sw__snapshot_string(s, p->host);
        s->command = sw__snapshot_string(s, p->command);
        s->pid = p->pid;
        s->rank = p->opts.rank;
        s->world_size = p->opts.world_size;
        s->local_rank = p->opts.local_rank;
        s->start_unix_ns = p->origin_unix_ns;
        s->elapsed_ns = sw__clock_ns() - p->origin_ns;
        s->steps = atomic_load(&p->steps_begun);
        s->warmup_steps = p->opts.warmup_steps;
        s->dropped_events = atomic_load(&p->events_dropped);
        s->misuse = (sw_misuse){
            .end_without_begin = atomic_load(&p->misuse_end_without_begin),
            .mismatched_end = atomic_load(&p->misuse_mismatched_end),
            .depth_overflow = atomic_load(&p->misuse_depth_overflow),
            .bad_id = atomic_load(&p->misuse_bad_id),
            .phase_mismatch = atomic_load(&p->misuse_phase_mismatch),
            .step_overlap = atomic_load(&p->misuse_step_overlap),
            .bad_record = atomic_load(&p->misuse_bad_record)};
    }
    pthread_mutex_lock(&p->lock);
    uint32_t naction = atomic_load(&p->naction), nphase = atomic_load(&p->nphase);
    /* Every thread that recorded, those that exited included (their statistics are in
     * p->retired). */
    s->threads = p->threads_seen;
    for (sw__thread *t = p->threads; rc == 0 && t; t = t->next) {
        uint32_t depth;
        SW__GET(depth, t->depth);
        s->misuse.open_at_snapshot += depth;
    }
    for (sw_id a = 0; rc == 0 && a < naction; a++) {
        for (sw_phase ph = 0; rc == 0 && ph < nphase; ph++) {
            memset(sum, 0, sizeof *sum);
            sw_stats_init(&sum->stats);
            sw_stats_init(&sum->warm);
            int found = merge_thread_locked(p->retired, a, ph, sum, scratch);
            for (sw__thread *t = p->threads; t; t = t->next)
                found |= merge_thread_locked(t, a, ph, sum, scratch);
            if (!found || sum->stats.count + sum->warm.count == 0)
                continue;
            sw_row row = {.action = a,
                          .action_name = p->action_names[a],
                          .phase = ph,
                          .phase_name = p->phase_names[ph],
                          .category = (sw_category)p->action_category[a],
                          .stats = sum->stats,
                          .warmup = sum->warm,
                          .hist = sum->hist};
            rc = sw__snapshot_add_row(s, &row);
        }
    }
    for (uint32_t i = 0; rc == 0 && i < p->nnotes; i++)
        rc = sw__snapshot_set_note(s, p->note_keys[i], p->note_values[i]);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&p->counter_lock);
    for (uint32_t i = 0; rc == 0 && i < atomic_load(&p->ncounter); i++) {
        sw_counter_summary c = p->counters[i].summary;
        c.name = p->counters[i].name;
        rc = sw__snapshot_add_counter(s, &c);
    }
    pthread_mutex_unlock(&p->counter_lock);
    if (rc == 0)
        rc = sw__snapshot_finish(s);
    free(sum);
    free(scratch);
    if (rc != 0) {
        sw_snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- accessors for the layers above (core.h) ------------------------------------------------ */

const sw_options *sw__options(const sw_profiler *p) {
    return &p->opts;
}

uint64_t sw__origin_ns(const sw_profiler *p) {
    return p->origin_ns;
}

uint64_t sw__origin_unix_ns(const sw_profiler *p) {
    return p->origin_unix_ns;
}

const char *sw__counter_name(const sw_profiler *p, sw_id counter) {
    if (p == NULL || counter >= atomic_load(&p->ncounter))
        return NULL;
    return p->counters[counter].name;
}

uint32_t sw__action_count(const sw_profiler *p) {
    return atomic_load_explicit(&p->naction, memory_order_acquire);
}

uint32_t sw__phase_count(const sw_profiler *p) {
    return atomic_load_explicit(&p->nphase, memory_order_acquire);
}

uint32_t sw__counter_count(const sw_profiler *p) {
    return atomic_load(&p->ncounter);
}

sw_phase sw__current_phase(const sw_profiler *p) {
    return atomic_load_explicit(&p->current_phase, memory_order_relaxed);
}

int sw__in_warmup(const sw_profiler *p) {
    return atomic_load_explicit(&p->in_warmup, memory_order_relaxed);
}

/* ---- fork ------------------------------------------------------------------------------------ */

/* In the child: the only thread left is the one that forked. Start from empty statistics,
 * keep the names, and let go of the sinks (what they hold is the parent's). */
static void reset_after_fork(sw_profiler *p) {
    while (p->sinks != NULL) {
        sw__sink *s = p->sinks;
        p->sinks = s->next;
        s->next = NULL;
        if (s->ops->on_fork_child)
            s->ops->on_fork_child(s);
    }
    atomic_store(&p->events_on, 0);
    p->hook_fn = NULL; /* its sink is gone */
    for (uint32_t i = 0; i < SW__MAX_ACTIONS; i++)
        p->action_watched[i] &= (uint8_t)~WATCH_HOOK;
    sw__thread *t = p->threads;
    while (t) {
        sw__thread *next = t->next;
        free_thread(t);
        t = next;
    }
    p->threads = NULL;
    p->threads_seen = 0; /* the names array is kept and reused */
    free_cells(p->retired);
    pthread_setspecific(p->thread_key, NULL);
    p->generation = atomic_fetch_add(&next_generation, 1);
    p->pid = (int64_t)getpid();
    atomic_store(&p->current_phase, SW_PHASE_NONE);
    atomic_store(&p->step_index, -1);
    atomic_store(&p->steps_begun, 0);
    atomic_store(&p->in_warmup, 0);
    atomic_store(&p->samples_done, 0);
    for (uint32_t i = 0; i < SW__MAX_PHASES; i++)
        atomic_store(&p->phase_steps[i], 0);
    for (uint32_t i = 0; i < SW__MAX_COUNTERS; i++)
        p->counters[i].summary = (sw_counter_summary){0};
    atomic_store(&p->misuse_end_without_begin, 0);
    atomic_store(&p->misuse_mismatched_end, 0);
    atomic_store(&p->misuse_depth_overflow, 0);
    atomic_store(&p->misuse_bad_id, 0);
    atomic_store(&p->misuse_phase_mismatch, 0);
    atomic_store(&p->misuse_step_overlap, 0);
    atomic_store(&p->misuse_bad_record, 0);
    atomic_store(&p->events_dropped, 0);
    p->origin_ns = sw__clock_ns();
}

/* ---- thread names ---------------------------------------------------------------------- */

int sw_thread_name(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_EINVAL;
    sw__thread *t = thread_of(p);
    if (t == NULL)
        return SW_ENOMEM;
    pthread_mutex_lock(&p->lock);
    int rc = t->number < p->thread_names_cap ? 0 : SW_ENOMEM;
    if (rc == 0)
        set_thread_name(p, t->number, name);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

uint32_t sw__thread_names(sw_profiler *p, uint32_t since, uint32_t *changed,
                          sw__thread_name_fn fn, void *ctx) {
    pthread_mutex_lock(&p->lock);
    *changed = atomic_load(&p->thread_names_changed);
    uint32_t n = p->threads_seen < p->thread_names_cap ? p->threads_seen : p->thread_names_cap;
    uint32_t visited = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p->thread_names[i].changed - since - 1 < *changed - since) { /* in (since, now] */
            fn(ctx, i, p->thread_names[i].name);
            visited++;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return visited;
}

uint32_t sw__thread_names_changed(const sw_profiler *p) {
    return atomic_load(&((sw_profiler *)p)->thread_names_changed);
}
