/*
 * reduce.c — the payloads of every rank into the cross-rank view (sw_ranks): per action the
 * per-step time across ranks, and the stragglers with their blame. Runs on rank 0 (or on a
 * merged run file); O(N log N) in the ranks, nothing per step.
 *
 * Per rank, per step (steady steps of the payload's phase): step, data, collective (the
 * time inside collectives), compute = step - data - collective, and own = step -
 * collective (what the rank does itself). Each rank is compared with the median of the
 * *other* ranks (with two ranks, the other one), so a single straggler does not pull its own
 * yardstick. A rank is a straggler when its own work, or its whole step, exceeds the others'
 * median by the threshold; the blame is the part that exceeds most (data, compute, or
 * collectives when the step itself is longer). See docs/ranks.md.
 */
#include "ranks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define THRESHOLD_SHARE 0.10
#define THRESHOLD_MIN_NS 50000.0

/* The compute parts a straggler's blame can name: slots whose own (self) time is theirs. */
static const sw__slot PARTS[] = {SW__SLOT_FORWARD,   SW__SLOT_LOSS,      SW__SLOT_BACKWARD,
                                 SW__SLOT_OPTIMIZER, SW__SLOT_ZERO_GRAD, SW__SLOT_CALLBACK};
#define NPARTS (sizeof PARTS / sizeof PARTS[0])

enum { M_STEP, M_DATA, M_COLLECTIVE, M_COMPUTE, M_OWN, M_PART0, M_COUNT = M_PART0 + NPARTS };

/* The result and what it owns. */
typedef struct owned {
    sw_ranks pub;
    char (*hosts)[SW__PAYLOAD_HOST];
} owned;

void sw_ranks_free(sw_ranks *r) {
    if (r == NULL)
        return;
    owned *o = (owned *)r;
    free(r->missing);
    free(r->stats);
    free(r->stragglers);
    free(o->hosts);
    free(o);
}

const char *sw_blame_name(sw_blame blame) {
    switch (blame) {
    case SW_BLAME_DATA:
        return "data";
    case SW_BLAME_COMPUTE:
        return "compute";
    case SW_BLAME_COLLECTIVE:
        return "collectives";
    default:
        return "none";
    }
}

/* A value of one rank, sortable. */
typedef struct ranked {
    double value;
    int rank;
} ranked;

static int by_value(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static double median_sorted(const ranked *v, size_t n) {
    if (n == 0)
        return 0;
    return n % 2 ? v[n / 2].value : (v[n / 2 - 1].value + v[n / 2].value) / 2;
}

/* One metric over the active ranks, sorted, with where each rank landed. */
typedef struct metric {
    ranked *sorted;
    size_t *position; /* by index into the active ranks */
    size_t n;
} metric;

/* The median of the values of every active rank but the one at index i (NAN alone). */
static double median_of_others(const metric *m, size_t i) {
    size_t j = m->position[i], k = m->n - 1;
    if (k == 0)
        return NAN;
#define OTHER(x) ((x) < j ? m->sorted[(x)].value : m->sorted[(x) + 1].value)
    return k % 2 ? OTHER((k - 1) / 2) : (OTHER(k / 2 - 1) + OTHER(k / 2)) / 2;
#undef OTHER
}

static double per_step(const sw__payload *pl, sw__slot k, int self) {
    const sw__slot_stats *s = &pl->slots[k];
    return pl->steps ? (double)(self ? s->self_ns : s->total_ns) / (double)pl->steps : 0;
}

/* The metrics of one rank (all per step). */
static void rank_metrics(const sw__payload *pl, double m[M_COUNT]) {
    m[M_STEP] = per_step(pl, SW__SLOT_STEP, 0);
    m[M_DATA] = per_step(pl, SW__SLOT_DATA, 0);
    m[M_COLLECTIVE] = per_step(pl, SW__SLOT_COLLECTIVE, 0);
    double compute = m[M_STEP] - m[M_DATA] - m[M_COLLECTIVE];
    m[M_COMPUTE] = compute > 0 ? compute : 0;
    m[M_OWN] = m[M_STEP] - m[M_COLLECTIVE];
    for (size_t p = 0; p < NPARTS; p++)
        m[M_PART0 + p] = per_step(pl, PARTS[p], 1);
}

/* Per action across ranks: min/median/max of the per-step time over the ranks that have
 * it (values[i] < 0: rank i has not). */
static void fill_stat(sw_rank_stat *st, const char *name, const double *values,
                      const sw__payload *const *active, size_t n, int slot, ranked *scratch) {
    memset(st, 0, sizeof *st);
    st->name = name;
    st->min_rank = st->max_rank = st->p99_max_rank = -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (values[i] < 0)
            continue;
        scratch[k++] = (ranked){values[i], active[i]->rank};
        if (slot >= 0) {
            const sw__slot_stats *s = &active[i]->slots[slot];
            st->calls += s->count;
            if (st->p99_max_rank < 0 || (double)s->p99_ns > st->p99_max_ns) {
                st->p99_max_ns = (double)s->p99_ns;
                st->p99_max_rank = active[i]->rank;
            }
        }
    }
    if (k == 0)
        return;
    qsort(scratch, k, sizeof *scratch, by_value);
    st->ranks = (int)k;
    st->min_ns = scratch[0].value;
    st->min_rank = scratch[0].rank;
    st->median_ns = median_sorted(scratch, k);
    st->max_ns = scratch[k - 1].value;
    /* the lowest rank holding the maximum */
    size_t top = k - 1;
    while (top > 0 && scratch[top - 1].value == st->max_ns)
        top--;
    st->max_rank = scratch[top].rank;
}

static int by_excess(const void *a, const void *b) {
    const sw_rank_straggler *x = a, *y = b;
    if (x->excess_ns != y->excess_ns)
        return x->excess_ns > y->excess_ns ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Blame one straggler: the part that exceeds the others' median most. */
static void blame(sw_rank_straggler *s, const double *mine, const double *others, int step_longer) {
    double d = mine[M_DATA] - others[M_DATA];
    double c = mine[M_COMPUTE] - others[M_COMPUTE];
    double w = step_longer ? mine[M_COLLECTIVE] - others[M_COLLECTIVE] : -INFINITY;
    s->blame = SW_BLAME_DATA;
    s->blame_ns = d;
    if (c > s->blame_ns) {
        s->blame = SW_BLAME_COMPUTE;
        s->blame_ns = c;
    }
    if (w > s->blame_ns) {
        s->blame = SW_BLAME_COLLECTIVE;
        s->blame_ns = w;
    }
    if (s->blame != SW_BLAME_COMPUTE)
        return;
    double best = 0;
    for (size_t p = 0; p < NPARTS; p++) {
        double grew = mine[M_PART0 + p] - others[M_PART0 + p];
        if (grew > best) {
            best = grew;
            s->part = sw__slot_names[PARTS[p]];
            s->part_ns = grew;
        }
    }
}

/* Everything the reduction works on, freed at once. */
typedef struct work {
    sw__payload *payloads;      /* [world_size] */
    const sw__payload **active; /* ranks with steps, ascending */
    double (*metrics)[M_COUNT]; /* [nactive] */
    metric m[M_COUNT];
    ranked *scratch;
    double *values;
} work;

static void work_free(work *w) {
    for (int k = 0; k < M_COUNT; k++) {
        free(w->m[k].sorted);
        free(w->m[k].position);
    }
    free(w->payloads);
    free(w->active);
    free(w->metrics);
    free(w->scratch);
    free(w->values);
}

static int find_stragglers(owned *o, work *w, size_t n) {
    sw_ranks *r = &o->pub;
    if (n < 2)
        return 0;
    for (int k = 0; k < M_COUNT; k++) {
        metric *m = &w->m[k];
        m->n = n;
        m->sorted = malloc(n * sizeof *m->sorted);
        m->position = malloc(n * sizeof *m->position);
        if (m->sorted == NULL || m->position == NULL)
            return SW_ENOMEM;
        for (size_t i = 0; i < n; i++)
            m->sorted[i] = (ranked){w->metrics[i][k], (int)i}; /* rank field: index here */
        qsort(m->sorted, n, sizeof *m->sorted, by_value);
        for (size_t j = 0; j < n; j++)
            m->position[m->sorted[j].rank] = j;
    }
    r->stragglers = calloc(n, sizeof *r->stragglers);
    if (r->stragglers == NULL)
        return SW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        double others[M_COUNT];
        for (int k = 0; k < M_COUNT; k++)
            others[k] = median_of_others(&w->m[k], i);
        const double *mine = w->metrics[i];
        double own = mine[M_OWN] - others[M_OWN];
        double step = mine[M_STEP] - others[M_STEP];
        double excess = own > step ? own : step;
        if (!(excess >= r->threshold_ns))
            continue;
        const sw__payload *pl = w->active[i];
        sw_rank_straggler *s = &r->stragglers[r->nstragglers++];
        s->rank = pl->rank;
        s->local_rank = pl->local_rank;
        s->host = o->hosts[pl->rank];
        s->excess_ns = excess;
        s->step_ns = mine[M_STEP];
        s->data_ns = mine[M_DATA];
        s->compute_ns = mine[M_COMPUTE];
        s->collective_ns = mine[M_COLLECTIVE];
        blame(s, mine, others, step >= r->threshold_ns);
    }
    qsort(r->stragglers, r->nstragglers, sizeof *r->stragglers, by_excess);
    return 0;
}

/* The per-action rows: every slot, then compute. */
static int fill_stats(sw_ranks *r, work *w, size_t n) {
    r->nstats = SW__SLOT_COUNT + 1;
    r->stats = calloc(r->nstats, sizeof *r->stats);
    if (r->stats == NULL)
        return SW_ENOMEM;
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        for (size_t i = 0; i < n; i++)
            w->values[i] = w->active[i]->slots[k].count ? per_step(w->active[i], k, 0) : -1;
        fill_stat(&r->stats[k], sw__slot_names[k], w->values, w->active, n, k, w->scratch);
    }
    for (size_t i = 0; i < n; i++)
        w->values[i] = w->metrics[i][M_COMPUTE];
    fill_stat(&r->stats[SW__SLOT_COUNT], "compute", w->values, w->active, n, -1, w->scratch);
    return 0;
}

int sw_ranks_reduce(const void *payloads, int world_size, sw_ranks **out) {
    if (payloads == NULL || out == NULL || world_size < 1 || world_size > SW_RANKS_MAX_WORLD)
        return SW_EINVAL;
    *out = NULL;
    size_t world = (size_t)world_size;
    owned *o = calloc(1, sizeof *o);
    work w = {0};
    if (o == NULL)
        return SW_ENOMEM;
    sw_ranks *r = &o->pub;
    r->world_size = world_size;
    r->phase = "all";
    o->hosts = calloc(world, sizeof *o->hosts);
    r->missing = malloc(world * sizeof *r->missing);
    w.payloads = calloc(world, sizeof *w.payloads);
    w.active = calloc(world, sizeof *w.active);
    w.metrics = calloc(world, sizeof *w.metrics);
    w.scratch = calloc(world, sizeof *w.scratch);
    w.values = calloc(world, sizeof *w.values);
    int rc = o->hosts && r->missing && w.payloads && w.active && w.metrics && w.scratch && w.values
                 ? 0
                 : SW_ENOMEM;
    size_t n = 0, train = 0;
    for (size_t i = 0; rc == 0 && i < world; i++) {
        sw__payload *pl = &w.payloads[i];
        const unsigned char *bytes = (const unsigned char *)payloads + i * SW_RANK_PAYLOAD_SIZE;
        if (sw__payload_decode(bytes, pl) != 0 || (size_t)pl->rank != i) {
            r->missing[r->nmissing++] = (int)i;
            continue;
        }
        r->answered++;
        memcpy(o->hosts[i], pl->host, sizeof o->hosts[i]);
        if (pl->slots[SW__SLOT_COLLECTIVE].count > 0)
            r->collective_ranks++;
        if (pl->steps == 0)
            continue;
        if (r->min_steps == 0 || pl->steps < r->min_steps)
            r->min_steps = pl->steps;
        if (pl->steps > r->max_steps)
            r->max_steps = pl->steps;
        train += (pl->flags & SW__PAYLOAD_FLAG_TRAIN) != 0;
        rank_metrics(pl, w.metrics[n]);
        w.active[n++] = pl;
    }
    if (n > 0 && train == n)
        r->phase = "train";
    if (rc == 0)
        rc = fill_stats(r, &w, n);
    if (rc == 0) {
        double step_median = r->stats[SW__SLOT_STEP].median_ns;
        r->threshold_ns = step_median * THRESHOLD_SHARE;
        if (r->threshold_ns < THRESHOLD_MIN_NS)
            r->threshold_ns = THRESHOLD_MIN_NS;
        rc = find_stragglers(o, &w, n);
    }
    work_free(&w);
    if (rc != 0) {
        sw_ranks_free(r);
        return rc;
    }
    *out = r;
    return 0;
}
