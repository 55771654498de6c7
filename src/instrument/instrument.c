/*
 * instrument.c — libstepwatch_instrument: function profiles of C code compiled with
 * -finstrument-functions (stepwatch/instrument.h).
 *
 * The compiler makes every instrumented function call __cyg_profile_func_enter(fn, site) on
 * entry and __cyg_profile_func_exit(fn, site) on exit. Here they feed the calling thread's
 * shadow stack (sw_fstack, src/funcs/fstack.c) while a chosen action is open on that thread;
 * the core tells us when one opens or closes (sw_watcher_set). A call path seen for the first
 * time gets its function's name from dladdr(3), under the lock that guards the shared
 * function table; every other call is a hash probe and two clock reads, lock-free.
 *
 * This file is compiled without -finstrument-functions, and the hooks are marked
 * no_instrument_function in case it is built into an instrumented program; a thread-local
 * flag stops a hook from recording itself through anything it calls.
 */
#define _GNU_SOURCE
#include "stepwatch/instrument.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NO_HOOK __attribute__((no_instrument_function))
#define HOOK_API __attribute__((no_instrument_function, visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

typedef struct cached_tree {
    sw_id action;
    sw_ftree *tree;
} cached_tree;

typedef struct ithread {
    sw_fstack *stack;
    uint32_t open;      /* open chosen actions (the hooks' first test) */
    int busy;           /* inside a hook */
    unsigned gen;       /* the profile generation trees[] belong to */
    cached_tree *trees; /* this thread's tree of each action */
    uint32_t ntrees, trees_cap;
} ithread;

static struct {
    pthread_mutex_t lock; /* the function table, the tree list, start and stop */
    sw_profiler *p;
    sw_fprofile *fp;
    unsigned gen; /* bumped by start, stop and fork: threads drop their cached trees */
} g = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 1};

static TLS ithread *tls;
static pthread_key_t thread_key;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

/* ---- threads -------------------------------------------------------------------------------- */

NO_HOOK static void thread_free(void *arg) {
    ithread *t = arg;
    tls = NULL;
    sw_fstack_free(t->stack);
    free(t->trees);
    free(t);
}

NO_HOOK static void fork_child(void) {
    pthread_mutex_init(&g.lock, NULL);
    g.gen++;
    if (g.fp)
        sw_fprofile_clear(g.fp); /* the child starts clean */
    if (tls) {
        sw_fstack_reset(tls->stack);
        tls->open = 0;
        tls->ntrees = 0;
    }
}

NO_HOOK static void process_init(void) {
    pthread_key_create(&thread_key, thread_free);
    pthread_atfork(NULL, NULL, fork_child);
}

NO_HOOK static ithread *thread_get(void) {
    ithread *t = tls;
    if (t != NULL)
        return t;
    t = calloc(1, sizeof *t);
    if (t == NULL || sw_fstack_new(&t->stack) < 0) {
        free(t);
        return NULL;
    }
    pthread_setspecific(thread_key, t);
    tls = t;
    return t;
}

/* This thread's tree of action (made on first use, under the lock). */
NO_HOOK static sw_ftree *thread_tree(ithread *t, sw_id action) {
    unsigned gen = __atomic_load_n(&g.gen, __ATOMIC_ACQUIRE);
    if (t->gen != gen) {
        t->ntrees = 0;
        t->gen = gen;
    }
    for (uint32_t i = 0; i < t->ntrees; i++)
        if (t->trees[i].action == action)
            return t->trees[i].tree;
    if (t->ntrees == t->trees_cap) {
        uint32_t cap = t->trees_cap ? t->trees_cap * 2 : 8;
        cached_tree *trees = realloc(t->trees, cap * sizeof *trees);
        if (trees == NULL)
            return NULL;
        t->trees = trees;
        t->trees_cap = cap;
    }
    pthread_mutex_lock(&g.lock);
    sw_ftree *tree = NULL;
    if (g.fp && g.p) {
        const char *name = sw_action_name(g.p, action);
        tree = sw_fprofile_add_tree(g.fp, name ? name : "?");
    }
    pthread_mutex_unlock(&g.lock);
    if (tree)
        t->trees[t->ntrees++] = (cached_tree){action, tree};
    return tree;
}

/* ---- the watcher: chosen actions open and close ---------------------------------------------- */

NO_HOOK static void watch(void *ctx, sw_id action, int begins) {
    ithread *t = thread_get();
    if (t == NULL)
        return;
    t->busy = 1;
    if (begins) {
        sw_ftree *tree = thread_tree(t, action);
        if (tree && sw_fstack_open(t->stack, tree, &g, action) == 0)
            t->open = sw_fstack_open_count(t->stack);
    } else {
        int k = sw_fstack_find(t->stack, &g, action);
        if (k >= 0) {
            uint64_t now = sw_fclock_now();
            pthread_mutex_lock(&g.lock); /* a nested action's node may name a new function */
            while (sw_fstack_open_count(t->stack) > (uint32_t)k)
                sw_fstack_close_top(t->stack, now);
            pthread_mutex_unlock(&g.lock);
            t->open = sw_fstack_open_count(t->stack);
        }
    }
    t->busy = 0;
}

/* ---- the compiler's hooks ---------------------------------------------------------------------- */

/* The function at fn in g.fp's table (added with its dladdr name if new); under g.lock. */
NO_HOOK static uint32_t function_of(void *fn) {
    uint64_t key = (uint64_t)(uintptr_t)fn;
    uint32_t func = sw_fprofile_find_func(g.fp, key);
    if (func != SW_FNODE_NONE)
        return func;
    Dl_info info;
    char file[256] = "?", name[512];
    snprintf(name, sizeof name, "%p", fn);
    if (dladdr(fn, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        snprintf(file, sizeof file, "%s", slash ? slash + 1 : info.dli_fname);
        if (info.dli_sname && info.dli_saddr == fn)
            snprintf(name, sizeof name, "%s", info.dli_sname);
        else /* no dynamic symbol for it: object and offset, for addr2line */
            snprintf(name, sizeof name, "%s+0x%lx", file,
                     (unsigned long)((uintptr_t)fn - (uintptr_t)info.dli_fbase));
    }
    sw_func f = {.file = file, .line = 0, .name = name};
    if (sw_fprofile_add_func(g.fp, key, &f, &func) < 0)
        return SW_FNODE_NONE;
    return func;
}

HOOK_API void __cyg_profile_func_enter(void *fn, void *site) {
    ithread *t = tls;
    if (__builtin_expect(t == NULL || t->open == 0 || t->busy, 1))
        return;
    t->busy = 1;
    uintptr_t ident = (uintptr_t)fn;
    if (sw_fstack_enter(t->stack, ident, ident) == 0) {
        pthread_mutex_lock(&g.lock);
        uint32_t func = g.fp ? function_of(fn) : SW_FNODE_NONE;
        pthread_mutex_unlock(&g.lock);
        sw_fstack_enter_new(t->stack, ident, ident, func);
    }
    t->busy = 0;
}

HOOK_API void __cyg_profile_func_exit(void *fn, void *site) {
    ithread *t = tls;
    if (__builtin_expect(t == NULL || t->open == 0 || t->busy, 1))
        return;
    sw_fstack_leave(t->stack, (uintptr_t)fn);
}

/* ---- the API ------------------------------------------------------------------------------------ */

NO_HOOK int sw_instrument_start(sw_profiler *p, const char *actions) {
    if (p == NULL || actions == NULL)
        return SW_EINVAL;
    pthread_once(&process_once, process_init);
    pthread_mutex_lock(&g.lock);
    int rc = 0;
    if (g.p != NULL && g.p != p)
        rc = SW_ESTATE;
    if (rc == 0 && g.fp == NULL)
        rc = sw_fprofile_new(&g.fp);
    if (rc == 0 && g.p == NULL)
        rc = sw_watcher_set(p, watch, &g);
    if (rc == 0)
        g.p = p;
    int named = 0;
    for (const char *s = actions; rc == 0 && *s;) {
        size_t n = strcspn(s, ",");
        char name[256];
        size_t len = n < sizeof name ? n : sizeof name - 1;
        memcpy(name, s, len);
        name[len] = '\0';
        s += n + (s[n] == ',');
        if (len == 0)
            continue;
        sw_id id = sw_action(p, name);
        rc = id == SW_ID_NONE ? SW_ELIMIT : sw_watch(p, id, 1);
        named++;
    }
    if (rc == 0 && named == 0)
        rc = SW_EINVAL;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

NO_HOOK void sw_instrument_stop(void) {
    pthread_mutex_lock(&g.lock);
    if (g.p && g.fp && sw_fprofile_tree_count(g.fp) > 0) { /* into p's run file, if any */
        sw_fprofile_set_unit(g.fp, sw_fclock_unit());
        sw_run_add_functions(g.p, g.fp);
    }
    if (g.p)
        sw_watcher_set(g.p, NULL, NULL);
    g.p = NULL;
    __atomic_add_fetch(&g.gen, 1, __ATOMIC_RELEASE);
    sw_fprofile_free(g.fp);
    g.fp = NULL;
    pthread_mutex_unlock(&g.lock);
    if (tls) {
        sw_fstack_reset(tls->stack);
        tls->open = 0;
    }
}

NO_HOOK int sw_instrument_profile(sw_fprofile **out) {
    if (out == NULL)
        return SW_EINVAL;
    *out = NULL;
    pthread_mutex_lock(&g.lock);
    int rc = SW_ESTATE;
    if (g.fp) {
        sw_fprofile_set_unit(g.fp, sw_fclock_unit());
        rc = sw_fprofile_merge(g.fp, out);
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

NO_HOOK int sw_instrument_write_table(const char *action, const sw_ftable_options *opts,
                                      FILE *out) {
    sw_fprofile *fp = NULL;
    int rc = sw_instrument_profile(&fp);
    if (rc == 0)
        rc = sw_fprofile_write_table(fp, action, opts, out);
    sw_fprofile_free(fp);
    return rc;
}
