/*
 * fprofile.c — a function profile: the function table and the call trees of actions
 * (stepwatch/functions.h), and merging them.
 *
 * A tree is an array of nodes (parents before children) and an open-addressing table that
 * finds the child of (parent, key): slots hold node index + 1, 0 is empty, linear probing,
 * at most half full. The function table is the same kind of table over the builder's keys.
 * Builders call sw_ftree_child on every call they see, so it is one multiply, one slot and
 * one node compared in the common case.
 */
#include "funcs.h"

#include <stdlib.h>
#include <string.h>

struct sw_ftree {
    sw_fprofile *fp; /* the profile that owns it */
    char *action;
    sw_fnode *nodes;
    uint32_t n;
    size_t cap;
    uint32_t *map; /* node index + 1 per slot, 0 = empty */
    uint32_t map_mask;
    uint64_t folded;
};

struct sw_fprofile {
    sw_func *funcs;
    uint64_t *func_keys;
    uint32_t nfuncs;
    size_t funcs_cap, keys_cap;
    uint32_t *func_map; /* function index + 1 per slot */
    uint32_t func_mask;
    sw_ftree **trees;
    uint32_t ntrees;
    size_t trees_cap;
    double unit; /* ns per unit of the trees' times; 0 = 1 */
};

/* Multiplicative hashing (Knuth): the high bits of key * golden ratio. Keys are addresses
 * (low bits zero) or small indexes; both spread well. */
static inline uint32_t hash_key(uint64_t key, uint32_t parent) {
    uint64_t h = (key ^ ((uint64_t)parent << 40 | parent)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* Not sw__grow: a table of slots is rebuilt at twice the size, every key placed anew (its
 * slot depends on the size), not extended in place. */
int sw__slots_grow(uint32_t **slots, uint32_t *mask, uint32_t first, uint32_t n,
                   uint32_t (*hash)(const void *ctx, uint32_t i), const void *ctx) {
    uint32_t size = *slots ? (*mask + 1) * 2 : 64;
    uint32_t *grown = calloc(size, sizeof *grown);
    if (grown == NULL)
        return SW_ENOMEM;
    for (uint32_t i = first; i < n; i++) {
        uint32_t slot = hash(ctx, i) & (size - 1);
        while (grown[slot])
            slot = (slot + 1) & (size - 1);
        grown[slot] = i + 1;
    }
    free(*slots);
    *slots = grown;
    *mask = size - 1;
    return 0;
}

/* ---- trees ------------------------------------------------------------------------------- */

static uint32_t child_hash(const void *ctx, uint32_t i) {
    const sw_fnode *node = &((const sw_ftree *)ctx)->nodes[i];
    return hash_key(node->key, node->parent);
}

static int tree_grow_map(sw_ftree *t) { /* node 0 is never a child */
    return sw__slots_grow(&t->map, &t->map_mask, 1, t->n, child_hash, t);
}

static sw_ftree *tree_new(const char *action) {
    sw_ftree *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->action = sw__strdup(action ? action : "");
    if (t->action == NULL || sw__grow(&t->nodes, sizeof *t->nodes, &t->cap, 1, 16) != 0 ||
        tree_grow_map(t) < 0) {
        free(t->action);
        free(t->nodes);
        free(t);
        return NULL;
    }
    t->n = 1; /* node 0: the action */
    return t;
}

static void tree_free(sw_ftree *t) {
    if (t == NULL)
        return;
    free(t->action);
    free(t->nodes);
    free(t->map);
    free(t);
}

uint32_t sw_ftree_child(const sw_ftree *t, uint32_t parent, uint64_t key) {
    uint32_t slot = hash_key(key, parent) & t->map_mask;
    for (;;) {
        uint32_t v = t->map[slot];
        if (v == 0)
            return SW_FNODE_NONE;
        const sw_fnode *n = &t->nodes[v - 1];
        if (n->key == key && n->parent == parent)
            return v - 1;
        slot = (slot + 1) & t->map_mask;
    }
}

uint32_t sw_ftree_add_child(sw_ftree *t, uint32_t parent, uint64_t key, uint32_t func) {
    if (parent >= t->n || t->n >= SW_FTREE_MAX_NODES)
        return SW_FNODE_NONE;
    if (sw__grow(&t->nodes, sizeof *t->nodes, &t->cap, (size_t)t->n + 1, 16) != 0)
        return SW_FNODE_NONE;
    if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->map_mask + 1 && tree_grow_map(t) < 0)
        return SW_FNODE_NONE;
    uint32_t i = t->n++;
    t->nodes[i] = (sw_fnode){.parent = parent, .func = func, .key = key};
    uint32_t slot = hash_key(key, parent) & t->map_mask;
    while (t->map[slot])
        slot = (slot + 1) & t->map_mask;
    t->map[slot] = i + 1;
    return i;
}

void sw_ftree_record(sw_ftree *t, uint32_t node, uint64_t total_ns, uint64_t self_ns) {
    sw_fnode *n = &t->nodes[node];
    n->calls++;
    n->total_ns += total_ns;
    n->self_ns += self_ns;
}

void sw_ftree_add(sw_ftree *t, uint32_t node, uint64_t calls, uint64_t total_ns, uint64_t self_ns) {
    if (node >= t->n)
        return;
    sw_fnode *n = &t->nodes[node];
    n->calls += calls;
    n->total_ns += total_ns;
    n->self_ns += self_ns;
}

void sw_ftree_fold(sw_ftree *t, uint64_t calls) {
    t->folded += calls;
}

sw_fprofile *sw__ftree_profile(const sw_ftree *t) {
    return t->fp;
}

const char *sw_ftree_action(const sw_ftree *t) {
    return t->action;
}

uint32_t sw_ftree_size(const sw_ftree *t) {
    return t->n;
}

const sw_fnode *sw_ftree_nodes(const sw_ftree *t) {
    return t->nodes;
}

uint64_t sw_ftree_folded(const sw_ftree *t) {
    return t->folded;
}

/* ---- the profile and its function table -------------------------------------------------- */

int sw_fprofile_new(sw_fprofile **out) {
    if (out == NULL)
        return SW_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : SW_ENOMEM;
}

static void free_funcs(sw_fprofile *fp) {
    for (uint32_t i = 0; i < fp->nfuncs; i++) {
        free((char *)fp->funcs[i].file);
        free((char *)fp->funcs[i].name);
    }
    free(fp->funcs);
    free(fp->func_keys);
    free(fp->func_map);
    fp->funcs = NULL;
    fp->func_keys = NULL;
    fp->func_map = NULL;
    fp->nfuncs = fp->func_mask = 0;
    fp->funcs_cap = fp->keys_cap = 0;
}

void sw_fprofile_clear(sw_fprofile *fp) {
    if (fp == NULL)
        return;
    free_funcs(fp);
    for (uint32_t i = 0; i < fp->ntrees; i++)
        tree_free(fp->trees[i]);
    free(fp->trees);
    fp->trees = NULL;
    fp->ntrees = fp->trees_cap = 0;
}

void sw_fprofile_free(sw_fprofile *fp) {
    if (fp == NULL)
        return;
    sw_fprofile_clear(fp);
    free(fp);
}

uint32_t sw_fprofile_find_func(const sw_fprofile *fp, uint64_t key) {
    if (fp->func_map == NULL)
        return SW_FNODE_NONE;
    uint32_t slot = hash_key(key, 0) & fp->func_mask;
    for (;;) {
        uint32_t v = fp->func_map[slot];
        if (v == 0)
            return SW_FNODE_NONE;
        if (fp->func_keys[v - 1] == key)
            return v - 1;
        slot = (slot + 1) & fp->func_mask;
    }
}

static uint32_t func_hash(const void *ctx, uint32_t i) {
    return hash_key(((const sw_fprofile *)ctx)->func_keys[i], 0);
}

static int grow_func_map(sw_fprofile *fp) {
    return sw__slots_grow(&fp->func_map, &fp->func_mask, 0, fp->nfuncs, func_hash, fp);
}

int sw_fprofile_add_func(sw_fprofile *fp, uint64_t key, const sw_func *f, uint32_t *index) {
    if (fp == NULL || f == NULL || f->file == NULL || f->name == NULL)
        return SW_EINVAL;
    uint32_t found = sw_fprofile_find_func(fp, key);
    if (found != SW_FNODE_NONE) {
        if (index)
            *index = found;
        return 0;
    }
    size_t need = (size_t)fp->nfuncs + 1;
    if (sw__grow(&fp->funcs, sizeof *fp->funcs, &fp->funcs_cap, need, 64) != 0 ||
        sw__grow(&fp->func_keys, sizeof *fp->func_keys, &fp->keys_cap, need, 64) != 0)
        return SW_ENOMEM;
    if ((uint64_t)(fp->nfuncs + 1) * 2 > (uint64_t)fp->func_mask + 1 && grow_func_map(fp) < 0)
        return SW_ENOMEM;
    char *file = sw__strdup(f->file), *name = sw__strdup(f->name);
    if (file == NULL || name == NULL) {
        free(file);
        free(name);
        return SW_ENOMEM;
    }
    uint32_t i = fp->nfuncs++;
    fp->funcs[i] = (sw_func){.file = file, .line = f->line, .name = name};
    fp->func_keys[i] = key;
    uint32_t slot = hash_key(key, 0) & fp->func_mask;
    while (fp->func_map[slot])
        slot = (slot + 1) & fp->func_mask;
    fp->func_map[slot] = i + 1;
    if (index)
        *index = i;
    return 0;
}

void sw_fprofile_set_unit(sw_fprofile *fp, double ns_per_unit) {
    if (fp && ns_per_unit > 0)
        fp->unit = ns_per_unit;
}

double sw_fprofile_unit(const sw_fprofile *fp) {
    return fp && fp->unit > 0 ? fp->unit : 1.0;
}

uint32_t sw_fprofile_func_count(const sw_fprofile *fp) {
    return fp ? fp->nfuncs : 0;
}

const sw_func *sw_fprofile_func(const sw_fprofile *fp, uint32_t index) {
    return fp && index < fp->nfuncs ? &fp->funcs[index] : NULL;
}

sw_ftree *sw_fprofile_add_tree(sw_fprofile *fp, const char *action) {
    if (fp == NULL)
        return NULL;
    if (sw__grow(&fp->trees, sizeof *fp->trees, &fp->trees_cap, (size_t)fp->ntrees + 1, 8) != 0)
        return NULL;
    sw_ftree *t = tree_new(action);
    if (t) {
        t->fp = fp;
        fp->trees[fp->ntrees++] = t;
    }
    return t;
}

uint32_t sw_fprofile_tree_count(const sw_fprofile *fp) {
    return fp ? fp->ntrees : 0;
}

const sw_ftree *sw_fprofile_tree(const sw_fprofile *fp, uint32_t i) {
    return fp && i < fp->ntrees ? fp->trees[i] : NULL;
}

uint32_t sw_fprofile_action_count(const sw_fprofile *fp) {
    uint32_t n = 0;
    for (uint32_t i = 0; fp && i < fp->ntrees; i++)
        if (sw__fprofile_first_tree(fp, fp->trees[i]->action) == i)
            n++;
    return n;
}

const char *sw_fprofile_action(const sw_fprofile *fp, uint32_t index) {
    for (uint32_t i = 0, n = 0; fp && i < fp->ntrees; i++) {
        if (sw__fprofile_first_tree(fp, fp->trees[i]->action) != i)
            continue;
        if (n++ == index)
            return fp->trees[i]->action;
    }
    return NULL;
}

uint32_t sw__fprofile_first_tree(const sw_fprofile *fp, const char *action) {
    for (uint32_t i = 0; i < fp->ntrees; i++)
        if (strcmp(fp->trees[i]->action, action) == 0)
            return i;
    return SW_FNODE_NONE;
}

/* ---- merging ----------------------------------------------------------------------------- */

/* Add the nodes of src (whose functions map to dst's through fmap, and whose times are
 * scale of dst's units) to dst, path by path: dst's keys are function indexes. */
static int merge_tree(sw_ftree *dst, const sw_ftree *src, const uint32_t *fmap, double scale) {
    uint32_t *nmap = malloc((size_t)src->n * sizeof *nmap);
    if (nmap == NULL)
        return SW_ENOMEM;
    nmap[0] = 0;
#define SCALED(x) (scale == 1.0 ? (x) : (uint64_t)((double)(x)*scale + 0.5))
    sw_ftree_add(dst, 0, src->nodes[0].calls, SCALED(src->nodes[0].total_ns),
                 SCALED(src->nodes[0].self_ns));
    for (uint32_t i = 1; i < src->n; i++) {
        const sw_fnode *s = &src->nodes[i];
        uint32_t parent = nmap[s->parent];
        uint32_t func = fmap[s->func];
        uint32_t d = parent == SW_FNODE_NONE ? SW_FNODE_NONE : sw_ftree_child(dst, parent, func);
        if (d == SW_FNODE_NONE && parent != SW_FNODE_NONE)
            d = sw_ftree_add_child(dst, parent, func, func);
        nmap[i] = d;
        if (d == SW_FNODE_NONE) {
            /* No room: the calls stay in the nearest kept caller's self time. */
            dst->folded += s->calls;
            uint32_t up = s->parent;
            while (nmap[up] == SW_FNODE_NONE)
                up = src->nodes[up].parent;
            dst->nodes[nmap[up]].self_ns += SCALED(s->self_ns);
            continue;
        }
        sw_ftree_add(dst, d, s->calls, SCALED(s->total_ns), SCALED(s->self_ns));
    }
#undef SCALED
    dst->folded += src->folded;
    free(nmap);
    return 0;
}

/* Find (or add) a tree of action in fp. */
static sw_ftree *tree_of(sw_fprofile *fp, const char *action) {
    uint32_t i = sw__fprofile_first_tree(fp, action);
    return i == SW_FNODE_NONE ? sw_fprofile_add_tree(fp, action) : fp->trees[i];
}

/* A 64-bit FNV-1a hash of a function's file, line and name, to find it in another profile. */
static uint64_t label_hash(const sw_func *f) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = f->file; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h = (h ^ f->line) * 0x100000001b3ull;
    for (const char *s = f->name; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static int same_func(const sw_func *a, const sw_func *b) {
    return a->line == b->line && strcmp(a->name, b->name) == 0 && strcmp(a->file, b->file) == 0;
}

/* into's functions by label: open addressing, slots hold index + 1. With put set, a label
 * not found is added as index put - 1. */
static uint32_t label_slot(const sw_fprofile *into, uint32_t *slots, uint32_t mask,
                           const sw_func *f, uint32_t put) {
    for (uint32_t s = (uint32_t)label_hash(f) & mask;; s = (s + 1) & mask) {
        if (slots[s] == 0) {
            slots[s] = put;
            return put ? put - 1 : SW_FNODE_NONE;
        }
        if (same_func(&into->funcs[slots[s] - 1], f))
            return slots[s] - 1;
    }
}

int sw_fprofile_merge_into(sw_fprofile *into, const sw_fprofile *from) {
    if (into == NULL || from == NULL)
        return SW_EINVAL;
    /* A table of slots for both function tables, at most half full (built once, not grown:
     * not sw__grow's). */
    uint32_t size = 64;
    while (size < 2 * ((uint64_t)into->nfuncs + from->nfuncs + 1))
        size *= 2;
    uint32_t *slots = calloc(size, sizeof *slots);
    uint32_t *fmap = malloc(((size_t)from->nfuncs + 1) * sizeof *fmap);
    int rc = slots && fmap ? 0 : SW_ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < into->nfuncs; i++)
        label_slot(into, slots, size - 1, &into->funcs[i], i + 1);
    for (uint32_t i = 0; rc == 0 && i < from->nfuncs; i++) {
        const sw_func *f = &from->funcs[i];
        uint32_t j = label_slot(into, slots, size - 1, f, 0);
        if (j == SW_FNODE_NONE) {
            rc = sw_fprofile_add_func(into, into->nfuncs, f, &j);
            if (rc == 0)
                label_slot(into, slots, size - 1, f, j + 1);
        }
        fmap[i] = j;
    }
    for (uint32_t i = 0; rc == 0 && i < from->ntrees; i++) {
        sw_ftree *dst = tree_of(into, from->trees[i]->action);
        rc = dst ? merge_tree(dst, from->trees[i], fmap,
                              sw_fprofile_unit(from) / sw_fprofile_unit(into))
                 : SW_ENOMEM;
    }
    free(slots);
    free(fmap);
    return rc;
}

int sw_fprofile_merge(const sw_fprofile *fp, sw_fprofile **out) {
    if (fp == NULL || out == NULL)
        return SW_EINVAL;
    int rc = sw_fprofile_new(out);
    if (rc < 0)
        return rc;
    rc = sw_fprofile_merge_into(*out, fp);
    if (rc < 0) {
        sw_fprofile_free(*out);
        *out = NULL;
    }
    return rc;
}
