/*
 * fstack.c — recording calls into call trees: one thread's shadow stack of running calls
 * and the function actions open on it (sw_fstack), and the clock they read (sw_fclock_*: the
 * core's tick counter, raw TSC ticks scaled only when a profile is read).
 *
 * A call is recorded in the innermost action open when it begins (each frame knows its
 * action); a call made directly by the code that opened the action hangs from the tree's
 * root, node 0, which holds the action's own time. Actions need not nest with the calls:
 * Lightning's profile() opens one inside a context manager's __enter__, which returns while
 * the action goes on. When an action ends, the calls it left running are cut at that time
 * (cProfile's disable does the same), and if it was nested in another action, its time
 * appears in the outer tree as one node "<stepwatch action NAME>" under the outer action's
 * innermost running call.
 *
 * A return pops the top frame only if it names the same call (ident): returns of calls that
 * began before any action, of calls cut off at an action's end, and of calls that were not
 * recorded (a full tree) change nothing.
 */
#include "funcs.h"

#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH (1u << 16) /* running calls recorded per thread */

typedef struct frame {
    uint64_t t0;
    uint64_t subt;   /* time in recorded callees */
    uintptr_t ident; /* the builder's name of this call, to match its return */
    uint32_t node;   /* in the tree of opens[open] */
    uint32_t open;   /* the action the call belongs to */
} frame;

typedef struct open_action {
    sw_ftree *tree;
    const void *owner;
    uint32_t action;
    uint64_t t0;   /* when it began */
    uint64_t subt; /* time in the calls hanging from its root */
} open_action;

struct sw_fstack {
    frame *frames;
    uint32_t depth, cap;
    open_action opens[SW_FSTACK_MAX_OPEN];
    uint32_t nopen;
};

/* ---- the clock: the core's tick counter (core/clock.h) ---------------------------------- */

uint64_t sw_fclock_now(void) {
    return sw__ticks();
}

double sw_fclock_unit(void) {
    return sw__ticks_unit();
}

/* ---- the stack ----------------------------------------------------------------------------- */

static int grow(sw_fstack *s) {
    if (s->cap >= MAX_DEPTH)
        return -1;
    uint32_t cap = s->cap ? s->cap * 2 : 256;
    frame *frames = realloc(s->frames, cap * sizeof *frames);
    if (frames == NULL)
        return -1;
    s->frames = frames;
    s->cap = cap;
    return 0;
}

int sw_fstack_new(sw_fstack **out) {
    if (out == NULL)
        return SW_EINVAL;
    sw__ticks_start();
    sw_fstack *s = calloc(1, sizeof *s);
    if (s == NULL || grow(s) < 0) {
        free(s);
        *out = NULL;
        return SW_ENOMEM;
    }
    *out = s;
    return 0;
}

void sw_fstack_free(sw_fstack *s) {
    if (s == NULL)
        return;
    free(s->frames);
    free(s);
}

void sw_fstack_reset(sw_fstack *s) {
    s->depth = 0;
    s->nopen = 0;
}

uint32_t sw_fstack_open_count(const sw_fstack *s) {
    return s->nopen;
}

uint32_t sw_fstack_depth(const sw_fstack *s) {
    return s->depth;
}

sw_ftree *sw_fstack_top_tree(const sw_fstack *s) {
    return s->nopen ? s->opens[s->nopen - 1].tree : NULL;
}

int sw_fstack_find(const sw_fstack *s, const void *owner, uint32_t action) {
    for (uint32_t k = s->nopen; k > 0; k--)
        if (s->opens[k - 1].owner == owner && s->opens[k - 1].action == action)
            return (int)(k - 1);
    return -1;
}

const void *sw_fstack_owner(const sw_fstack *s, uint32_t i) {
    return i < s->nopen ? s->opens[i].owner : NULL;
}

int sw_fstack_open(sw_fstack *s, sw_ftree *tree, const void *owner, uint32_t action) {
    if (s->nopen == SW_FSTACK_MAX_OPEN)
        return SW_ELIMIT;
    open_action *o = &s->opens[s->nopen++];
    *o = (open_action){.tree = tree, .owner = owner, .action = action};
    o->t0 = sw__ticks();
    return 0;
}

/* Push a call of node (in the innermost action's tree). */
static inline int push(sw_fstack *s, uint32_t node, uintptr_t ident) {
    if (__builtin_expect(s->depth == s->cap, 0) && grow(s) < 0) {
        sw_ftree_fold(s->opens[s->nopen - 1].tree, 1);
        return -1;
    }
    frame *f = &s->frames[s->depth++];
    f->subt = 0;
    f->ident = ident;
    f->node = node;
    f->open = s->nopen - 1;
    f->t0 = sw__ticks();
    return 1;
}

/* The innermost action's node of the running caller: its frame's node if the caller is one of
 * that action's calls, else the action's root. */
static inline uint32_t caller_node(const sw_fstack *s) {
    if (s->depth > 0 && s->frames[s->depth - 1].open == s->nopen - 1)
        return s->frames[s->depth - 1].node;
    return 0;
}

int sw_fstack_enter(sw_fstack *s, uint64_t key, uintptr_t ident) {
    if (s->nopen == 0)
        return -1;
    uint32_t node = sw_ftree_child(s->opens[s->nopen - 1].tree, caller_node(s), key);
    if (node == SW_FNODE_NONE)
        return 0;
    return push(s, node, ident);
}

int sw_fstack_enter_new(sw_fstack *s, uint64_t key, uintptr_t ident, uint32_t func) {
    if (s->nopen == 0)
        return -1;
    sw_ftree *tree = s->opens[s->nopen - 1].tree;
    uint32_t node = func == SW_FNODE_NONE ? SW_FNODE_NONE
                                          : sw_ftree_add_child(tree, caller_node(s), key, func);
    if (node == SW_FNODE_NONE) {
        sw_ftree_fold(tree, 1);
        return -1;
    }
    return push(s, node, ident);
}

/* Close the top frame at now: its tree gets the call, its caller (a call of the same action,
 * else the action's root) the time. */
static inline void pop(sw_fstack *s, uint64_t now) {
    frame *f = &s->frames[--s->depth];
    uint64_t dt = now > f->t0 ? now - f->t0 : 0;
    open_action *o = &s->opens[f->open];
    sw_ftree_record(o->tree, f->node, dt, dt > f->subt ? dt - f->subt : 0);
    if (s->depth > 0 && f[-1].open == f->open)
        f[-1].subt += dt;
    else
        o->subt += dt;
}

void sw_fstack_leave(sw_fstack *s, uintptr_t ident) {
    uint64_t now = sw__ticks();
    if (__builtin_expect(s->depth > 0 && s->frames[s->depth - 1].ident == ident, 1))
        pop(s, now);
}

/* A key for a nested action's node, from its name (odd: no address is). */
static uint64_t action_key(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return h << 1 | 1;
}

/* The node of a nested action's span in the outer action's tree, under parent. */
static uint32_t nested_node(sw_ftree *outer, uint32_t parent, const char *name) {
    uint64_t key = action_key(name);
    uint32_t node = sw_ftree_child(outer, parent, key);
    if (node != SW_FNODE_NONE)
        return node;
    sw_fprofile *fp = sw__ftree_profile(outer);
    uint32_t func = sw_fprofile_find_func(fp, key);
    if (func == SW_FNODE_NONE) {
        size_t n = strlen(name) + sizeof "<stepwatch action >";
        char *label = malloc(n);
        if (label == NULL)
            return SW_FNODE_NONE;
        snprintf(label, n, "<stepwatch action %s>", name);
        sw_func f = {.file = "~", .line = 0, .name = label};
        int rc = sw_fprofile_add_func(fp, key, &f, &func);
        free(label);
        if (rc < 0)
            return SW_FNODE_NONE;
    }
    return sw_ftree_add_child(outer, parent, key, func);
}

void sw_fstack_close_top(sw_fstack *s, uint64_t now) {
    if (s->nopen == 0)
        return;
    uint32_t open = s->nopen - 1;
    open_action *o = &s->opens[open];
    while (s->depth > 0 && s->frames[s->depth - 1].open == open)
        pop(s, now);
    uint64_t dt = now > o->t0 ? now - o->t0 : 0;
    sw_ftree_record(o->tree, 0, dt, dt > o->subt ? dt - o->subt : 0);
    if (open > 0) {
        open_action *outer = &s->opens[open - 1];
        frame *caller = s->depth > 0 && s->frames[s->depth - 1].open == open - 1
                            ? &s->frames[s->depth - 1]
                            : NULL;
        uint32_t node = nested_node(outer->tree, caller ? caller->node : 0,
                                    sw_ftree_action(o->tree));
        if (node != SW_FNODE_NONE)
            sw_ftree_record(outer->tree, node, dt, dt);
        if (caller)
            caller->subt += dt;
        else
            outer->subt += dt;
    }
    s->nopen--;
}
