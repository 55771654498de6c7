/*
 * fstats.c — cProfile's numbers from call trees (sw_fprofile_stats).
 *
 * cProfile counts a call as recursive when another call of the same function is still
 * running below it: such calls add to ncalls and tottime but not to cumtime (which would
 * count the same time twice) nor to the primitive calls. In a call tree that is a node with
 * an ancestor of the same function; every call made along one path has the same ancestors,
 * so a walk of the tree that keeps, per function, how many of the current node's ancestors
 * run it decides it once per node. Edges (caller -> callee) are counted the same way, with
 * "the same caller calling the same callee" in place of "the same function".
 */
#include "funcs.h"

#include <stdlib.h>
#include <string.h>

/* Edges by (caller, callee): open addressing, slots hold edge index + 1. */
typedef struct edge_table {
    sw_fedge *edges;
    uint32_t *active; /* per edge: open ancestors with that edge */
    size_t n, cap, active_cap;
    uint32_t *slots;
    uint32_t mask;
} edge_table;

static uint32_t edge_hash(uint32_t caller, uint32_t callee) {
    return (uint32_t)((((uint64_t)caller << 32) | callee) * 0x9E3779B97F4A7C15ull >> 32);
}

static uint32_t edge_hash_at(const void *ctx, uint32_t i) {
    const sw_fedge *e = &((const edge_table *)ctx)->edges[i];
    return edge_hash(e->caller, e->callee);
}

static int edges_grow(edge_table *e) {
    return sw__slots_grow(&e->slots, &e->mask, 0, (uint32_t)e->n, edge_hash_at, e);
}

/* The index of edge caller -> callee, made if new; SW_FNODE_NONE when out of memory. */
static uint32_t edge_of(edge_table *e, uint32_t caller, uint32_t callee) {
    if ((e->n + 1) * 2 > (size_t)e->mask + 1 && edges_grow(e) < 0)
        return SW_FNODE_NONE;
    uint32_t s = edge_hash(caller, callee) & e->mask;
    for (; e->slots[s]; s = (s + 1) & e->mask) {
        sw_fedge *x = &e->edges[e->slots[s] - 1];
        if (x->caller == caller && x->callee == callee)
            return e->slots[s] - 1;
    }
    if (sw__grow(&e->edges, sizeof *e->edges, &e->cap, e->n + 1, 256) != 0 ||
        sw__grow(&e->active, sizeof *e->active, &e->active_cap, e->n + 1, 256) != 0)
        return SW_FNODE_NONE;
    e->edges[e->n] = (sw_fedge){.caller = caller, .callee = callee};
    e->active[e->n] = 0;
    e->slots[s] = (uint32_t)++e->n;
    return (uint32_t)e->n - 1;
}

/* Walk one tree depth first, adding its calls to funcs (indexed by function) and edges.
 * active[f]: how many ancestors of the current node run function f. */
static int walk_tree(const sw_ftree *t, sw_fstat *funcs, uint32_t *active, edge_table *edges) {
    uint32_t n = sw_ftree_size(t);
    const sw_fnode *nodes = sw_ftree_nodes(t);
    /* Children lists (nodes come parents first), then an explicit stack. */
    uint32_t *first = malloc((size_t)n * sizeof *first);
    uint32_t *next = malloc((size_t)n * sizeof *next);
    uint32_t *stack = malloc((size_t)n * sizeof *stack);
    uint32_t *cursor = malloc((size_t)n * sizeof *cursor);
    uint32_t *edge_at = malloc((size_t)n * sizeof *edge_at);
    int rc = first && next && stack && cursor && edge_at ? 0 : SW_ENOMEM;
    if (rc == 0) {
        memset(first, 0xff, (size_t)n * sizeof *first);
        for (uint32_t i = n; i-- > 1;) { /* backwards: children in creation order */
            next[i] = first[nodes[i].parent];
            first[nodes[i].parent] = i;
        }
        uint32_t depth = 1;
        stack[0] = 0;
        cursor[0] = first[0];
        while (rc == 0 && depth > 0) {
            uint32_t top = stack[depth - 1], c = cursor[depth - 1];
            if (c == SW_FNODE_NONE) { /* leave top */
                if (top != 0) {
                    active[nodes[top].func]--;
                    if (edge_at[depth - 1] != SW_FNODE_NONE)
                        edges->active[edge_at[depth - 1]]--;
                }
                depth--;
                continue;
            }
            cursor[depth - 1] = next[c];
            const sw_fnode *node = &nodes[c];
            uint64_t self_ns = node->self_ns, total_ns = node->total_ns; /* in units */
            sw_fstat *f = &funcs[node->func];
            f->calls += node->calls;
            f->tottime_ns += self_ns;
            if (active[node->func] == 0) {
                f->primitive_calls += node->calls;
                f->cumtime_ns += total_ns;
            }
            uint32_t e = SW_FNODE_NONE;
            if (top != 0) { /* called by a recorded function, not the action itself */
                e = edge_of(edges, nodes[top].func, node->func);
                if (e == SW_FNODE_NONE) {
                    rc = SW_ENOMEM;
                    break;
                }
                sw_fedge *x = &edges->edges[e];
                x->calls += node->calls;
                x->tottime_ns += self_ns;
                if (edges->active[e] == 0) {
                    x->primitive_calls += node->calls;
                    x->cumtime_ns += total_ns;
                }
                edges->active[e]++;
            }
            active[node->func]++;
            stack[depth] = c;
            cursor[depth] = first[c];
            edge_at[depth] = e;
            depth++;
        }
    }
    free(first);
    free(next);
    free(stack);
    free(cursor);
    free(edge_at);
    return rc;
}

static int by_cumtime(const void *a, const void *b) {
    const sw_fstat *x = a, *y = b;
    if (x->cumtime_ns != y->cumtime_ns)
        return x->cumtime_ns < y->cumtime_ns ? 1 : -1;
    return x->func < y->func ? -1 : x->func > y->func;
}

static int by_callee(const void *a, const void *b) {
    const sw_fedge *x = a, *y = b;
    if (x->callee != y->callee)
        return x->callee < y->callee ? -1 : 1;
    return x->caller < y->caller ? -1 : x->caller > y->caller;
}

int sw_fprofile_stats(const sw_fprofile *fp, const char *action, sw_fstats **out) {
    if (fp == NULL || action == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    if (sw__fprofile_first_tree(fp, action) == SW_FNODE_NONE)
        return SW_ENOTFOUND;
    uint32_t nf = sw_fprofile_func_count(fp);
    sw_fstats *s = calloc(1, sizeof *s);
    sw_fstat *funcs = calloc((size_t)nf + 1, sizeof *funcs);
    uint32_t *active = calloc((size_t)nf + 1, sizeof *active);
    edge_table edges = {0};
    int rc = s && funcs && active ? 0 : SW_ENOMEM;
    if (rc == 0)
        s->action = sw__strdup(action);
    if (rc == 0 && s->action == NULL)
        rc = SW_ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < sw_fprofile_tree_count(fp); i++) {
        const sw_ftree *t = sw_fprofile_tree(fp, i);
        if (strcmp(sw_ftree_action(t), action) != 0)
            continue;
        const sw_fnode *root = &sw_ftree_nodes(t)[0];
        s->spans += root->calls;
        s->total_ns += root->total_ns;
        s->self_ns += root->self_ns;
        s->folded_calls += sw_ftree_folded(t);
        rc = walk_tree(t, funcs, active, &edges);
    }
    if (rc == 0) { /* keep the functions that ran, by cumulative time, times in ns */
        /* Sums are kept in the trees' units and converted once, so that sums that are
         * equal or ordered in units (tottime <= cumtime) stay so in ns. */
        double unit = sw_fprofile_unit(fp);
#define TO_NS(x) ((x) = (uint64_t)((double)(x)*unit + 0.5))
        TO_NS(s->total_ns);
        TO_NS(s->self_ns);
        size_t k = 0;
        for (uint32_t f = 0; f < nf; f++) {
            if (funcs[f].calls == 0)
                continue;
            funcs[f].func = f;
            TO_NS(funcs[f].tottime_ns);
            TO_NS(funcs[f].cumtime_ns);
            funcs[k++] = funcs[f];
        }
        for (size_t e = 0; e < edges.n; e++) {
            TO_NS(edges.edges[e].tottime_ns);
            TO_NS(edges.edges[e].cumtime_ns);
        }
#undef TO_NS
        qsort(funcs, k, sizeof *funcs, by_cumtime);
        s->funcs = funcs;
        s->nfuncs = k;
        funcs = NULL;
        if (edges.n > 0)
            qsort(edges.edges, edges.n, sizeof *edges.edges, by_callee);
        s->edges = edges.edges;
        s->nedges = edges.n;
        edges.edges = NULL;
        *out = s;
        s = NULL;
    }
    free(funcs);
    free(active);
    free(edges.edges);
    free(edges.active);
    free(edges.slots);
    sw_fstats_free(s);
    return rc;
}

void sw_fstats_free(sw_fstats *s) {
    if (s == NULL)
        return;
    free((char *)s->action);
    free(s->funcs);
    free(s->edges);
    free(s);
}
