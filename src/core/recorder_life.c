/*
 * recorder_life.c — a profiler is made (options, rank from the environment, the built-in
 * phases) and freed (its sinks closed first); recording is turned on and off.
 */
#include "recorder.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The first of the variables that holds a rank (0 to INT_MAX); one that holds something else
 * (RANK=99999999999999999999 once became -1) is said on stderr and passed over. */
static int detect_rank(const char *const *names, int fallback) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v == NULL || *v == '\0')
            continue;
        char *end = NULL;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno == 0 && end != v && *end == '\0' && n >= 0 && n <= INT_MAX)
            return (int)n;
        fprintf(stderr, "stepwatch: %s=%.40s is not a rank (0 to %d): not used\n", *names, v,
                INT_MAX);
    }
    return fallback;
}

/* The clock a new profiler asks for: SW_CLOCK_TSC switches the process to the TSC when it is
 * invariant (clock.h), else it says once why not; AUTO reads SW_CLOCK. MONOTONIC changes
 * nothing (the clock is the process's: another profiler may read the TSC already). */
static void choose_clock(sw_clock_kind kind) {
    static int said;
    if (kind == SW_CLOCK_AUTO) {
        const char *v = getenv("SW_CLOCK");
        if (v == NULL || *v == '\0' || strcmp(v, "monotonic") == 0)
            return;
        if (strcmp(v, "tsc") != 0) {
            if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
                fprintf(stderr,
                        "stepwatch: SW_CLOCK=%.40s is not a clock (tsc or monotonic): "
                        "CLOCK_MONOTONIC\n",
                        v);
            return;
        }
        kind = SW_CLOCK_TSC;
    }
    if (kind == SW_CLOCK_TSC && !sw__clock_use_tsc(sw__tsc_invariant()) &&
        !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "stepwatch: no invariant time-stamp counter here: the clock stays "
                        "CLOCK_MONOTONIC\n");
}

int sw__profiler_new(const sw_options *opts, sw_profiler **out) {
    if (out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_options defaults = SW_OPTIONS_INIT;
    if (opts == NULL)
        opts = &defaults;

    if (opts->ring_capacity > SW_MAX_RING_CAPACITY ||
        (opts->on_full != SW_FULL_DROP && opts->on_full != SW_FULL_BLOCK) ||
        (opts->clock != SW_CLOCK_AUTO && opts->clock != SW_CLOCK_MONOTONIC &&
         opts->clock != SW_CLOCK_TSC) ||
        (opts->step_memory != SW_STEP_MEMORY_AUTO && opts->step_memory != SW_STEP_MEMORY_ON &&
         opts->step_memory != SW_STEP_MEMORY_OFF))
        return SW_EINVAL;
    choose_clock(opts->clock);
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
    atomic_init(&p->world_size, p->opts.world_size);
    p->pid = (int64_t)getpid();
    /* Slow steps read the OS at step boundaries unless SW_STEP_OS=0 (docs/slow-steps.md). */
    const char *os = getenv("SW_STEP_OS");
    p->os_signals = !(os && strcmp(os, "0") == 0);
    sw__hostname(p->host, sizeof p->host);
    atomic_init(&p->enabled, 1);
    atomic_init(&p->step_index, -1);
    p->generation = sw__new_generation();
    if (pthread_mutex_init(&p->lock, NULL) != 0 ||
        pthread_mutex_init(&p->counter_lock, NULL) != 0 ||
        pthread_key_create(&p->thread_key, sw__thread_exit) != 0) {
        free(p);
        return SW_ENOMEM;
    }
    p->retired = calloc(1, sizeof *p->retired);
    /* The built-in phases have fixed ids; "step" is the action steps are timed as. */
    static const char *const builtin[] = {"none", "fit", "epoch", "train", "valid"};
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
        sw__phase_intern_locked(p, builtin[i]);
    p->step_action = sw__action_intern_locked(p, "step", SW_CAT_OTHER);
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

    sw__live_add(p);
    *out = p;
    return 0;
}

void sw_profiler_free(sw_profiler *p) {
    if (p == NULL)
        return;
    /* Out of the process-wide list first: the exit hook no longer reaches p's sinks. */
    sw__live_remove(p);
    /* A sink's last act reads the profiler (drain, snapshot), so sinks go before the rest. */
    while (p->sinks != NULL) {
        sw__sink *s = p->sinks;
        sw__sink_detach(p, s);
        if (s->ops->on_close)
            s->ops->on_close(s);
    }
    sw__drops_say(p, 1); /* the sinks drained the last events: nothing dropped is silent */

    /* No destructor may run for this key after this: threads still alive leak nothing. */
    pthread_key_delete(p->thread_key);
    sw__thread *t = p->threads;
    while (t) {
        sw__thread *next = t->next;
        sw__free_thread(t);
        t = next;
    }
    if (p->retired)
        sw__free_thread(p->retired);
    free(p->thread_names);
    for (uint32_t i = 0; i < atomic_load(&p->naction); i++)
        free(p->action_names[i]);
    for (uint32_t i = 0; i < atomic_load(&p->nphase); i++)
        free(p->phase_names[i]);
    for (uint32_t i = 0; i < atomic_load(&p->ncounter); i++)
        free(p->counters[i].name);
    for (int i = 0; i < 3; i++)
        free(p->folded_first[i]);
    for (uint32_t i = 0; i < p->nnotes; i++) {
        free(p->note_keys[i]);
        free(p->note_values[i]);
    }
    sw__modules_free(p->modules, p->nmodules);
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

int sw_set_world_size(sw_profiler *p, int world_size) {
    if (p == NULL || world_size < 1)
        return SW_EINVAL;
    atomic_store(&p->world_size, world_size);
    return 0;
}
