/*
 * reduce.c — the payloads of every rank into the cross-rank view (sw_ranks): per action the
 * per-step time across ranks, the collectives by op, TFLOP/s per rank, the stragglers with
 * their blame and the wait the worst one causes. Runs on rank 0 (or on a merged run file).
 *
 * Per rank, per step (steady steps of the payload's phase): step, data, collective (the
 * time inside collectives), compute = step - data - collective, and own = step -
 * collective (what the rank does itself). Each rank is compared with the median of the
 * *other* ranks (with two ranks, the other one), so a single straggler does not pull its own
 * yardstick. A rank is a straggler when its own work, or its whole step, exceeds the others'
 * median by the threshold; the blame is the part that exceeds most (data, compute, or
 * collectives when the step itself is longer). See docs/ranks.md.
 *
 * Cost: the values are kept as columns (one value per rank per metric, a few allocations in
 * all, none per rank); every median is a selection (select.c), so the reduction is linear
 * in the ranks: a few dozen passes over N values, no sort of N.
 */
#include "ranks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define THRESHOLD_SHARE 0.10
#define THRESHOLD_MIN_NS 50000.0
#define PREFETCH 4 /* payloads read ahead of the one decoded */

/* The compute parts a straggler's blame can name: slots whose own (self) time is theirs. */
static const sw__slot PARTS[] = {SW__SLOT_FORWARD,   SW__SLOT_LOSS,      SW__SLOT_BACKWARD,
                                 SW__SLOT_OPTIMIZER, SW__SLOT_ZERO_GRAD, SW__SLOT_CALLBACK};
#define NPARTS (sizeof PARTS / sizeof PARTS[0])

/* The columns, one value per active rank (a rank with steps): the metrics a straggler is
 * judged on, each slot's time per step, per op its time per step, bandwidth and bytes per
 * step, TFLOP/s and MFU. A negative value: the rank has none (or it is unknown). */
enum {
    M_STEP,
    M_DATA,
    M_COLLECTIVE,
    M_COMPUTE,
    M_OWN,
    M_PART0,
    M_COUNT = M_PART0 + NPARTS,
    C_SLOT0 = M_COUNT,
    C_OP0 = C_SLOT0 + SW__SLOT_COUNT,
    C_BW0 = C_OP0 + SW_RANKS_MAX_OPS,
    C_BYTES0 = C_BW0 + SW_RANKS_MAX_OPS,
    C_TFLOPS = C_BYTES0 + SW_RANKS_MAX_OPS,
    C_MFU,
    C_COUNT
};

/* The result and what it owns. */
typedef struct owned {
    sw_ranks pub;
    char (*hosts)[SW__PAYLOAD_HOST]; /* the stragglers', in their order */
    char op_names[SW_RANKS_MAX_OPS][SW__OP_NAME];
} owned;

void sw_ranks_free(sw_ranks *r) {
    if (r == NULL)
        return;
    owned *o = (owned *)r;
    free(r->missing);
    free(r->stats);
    free(r->stragglers);
    free(r->ops);
    free(r->rows);
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

/* Everything the reduction works on, freed at once. */
typedef struct work {
    const unsigned char *bytes; /* the payloads */
    size_t world, n;            /* ranks, active ranks */
    int *rank;                  /* [n] their ranks, ascending */
    double *col[C_COUNT];       /* [world] each (an op's: once the op is seen) */
    double *scratch;            /* [world] */
    uint64_t slot_calls[SW__SLOT_COUNT], op_calls[SW_RANKS_MAX_OPS];
    double p99_max[SW__SLOT_COUNT];
    int p99_rank[SW__SLOT_COUNT];
    int op_of_entry[SW__PAYLOAD_OPS]; /* the op the last rank's entry e was: tried first */
} work;

static void work_free(work *w) {
    for (int k = 0; k < C_COUNT; k++)
        free(w->col[k]);
    free(w->rank);
    free(w->scratch);
}

static double per_step(const sw__payload *pl, sw__slot k, int self) {
    const sw__slot_stats *s = &pl->slots[k];
    return pl->steps ? (double)(self ? s->self_ns : s->total_ns) / (double)pl->steps : 0;
}

/* ---- one rank's values into the columns ---- */

/* The view's op for a payload's op name (entry e of its payload), or -1 when the view
 * already has SW_RANKS_MAX_OPS others. A new op's column starts at "none" for the ranks
 * before. */
static int op_index(owned *o, work *w, const char *name, int e) {
    sw_ranks *r = &o->pub;
    int c = w->op_of_entry[e];
    if (c >= 0 && strcmp(o->op_names[c], name) == 0)
        return c;
    for (size_t k = 0; k < r->nops; k++)
        if (strcmp(o->op_names[k], name) == 0)
            return w->op_of_entry[e] = (int)k;
    if (r->nops == SW_RANKS_MAX_OPS)
        return -1;
    int k = (int)r->nops;
    for (int c0 = C_OP0; c0 <= C_BYTES0; c0 += SW_RANKS_MAX_OPS) {
        double *col = w->col[c0 + k] = malloc(w->world * sizeof *col); /* only ops seen */
        if (col == NULL)
            return -1; /* left out, as one past the last */
        for (size_t i = 0; i < w->n; i++)
            col[i] = -1;
    }
    r->nops++;
    snprintf(o->op_names[k], sizeof o->op_names[k], "%s", name);
    return w->op_of_entry[e] = k;
}

static void add_ops(owned *o, work *w, const sw__payload *pl, size_t i) {
    for (size_t k = 0; k < o->pub.nops; k++)
        w->col[C_OP0 + k][i] = w->col[C_BW0 + k][i] = w->col[C_BYTES0 + k][i] = -1;
    for (int e = 0; e < SW__PAYLOAD_OPS; e++) {
        const sw__op_stats *op = &pl->ops[e];
        if (op->name[0] == '\0' || op->count == 0)
            continue;
        int k = op_index(o, w, op->name, e);
        if (k < 0) {
            o->pub.ops_left_out++;
            continue;
        }
        double *t = &w->col[C_OP0 + k][i];
        *t = (*t > 0 ? *t : 0) + (double)op->total_ns / (double)pl->steps;
        w->op_calls[k] += op->count;
        if (op->bytes > 0 && op->bytes_calls == op->count && op->total_ns > 0) {
            w->col[C_BW0 + k][i] = (double)op->bytes / (double)op->total_ns * 1e9;
            w->col[C_BYTES0 + k][i] = (double)op->bytes / (double)pl->steps;
        }
    }
}

/* The columns of active rank i. */
static void add_rank(owned *o, work *w, const sw__payload *pl, size_t i) {
    double **c = w->col;
    c[M_STEP][i] = per_step(pl, SW__SLOT_STEP, 0);
    c[M_DATA][i] = per_step(pl, SW__SLOT_DATA, 0);
    c[M_COLLECTIVE][i] = per_step(pl, SW__SLOT_COLLECTIVE, 0);
    double compute = c[M_STEP][i] - c[M_DATA][i] - c[M_COLLECTIVE][i];
    c[M_COMPUTE][i] = compute > 0 ? compute : 0;
    c[M_OWN][i] = c[M_STEP][i] - c[M_COLLECTIVE][i];
    for (size_t p = 0; p < NPARTS; p++)
        c[M_PART0 + p][i] = per_step(pl, PARTS[p], 1);
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        const sw__slot_stats *s = &pl->slots[k];
        c[C_SLOT0 + k][i] = s->count ? per_step(pl, k, 0) : -1;
        w->slot_calls[k] += s->count;
        if (s->count && (w->p99_rank[k] < 0 || (double)s->p99_ns > w->p99_max[k])) {
            w->p99_max[k] = (double)s->p99_ns;
            w->p99_rank[k] = pl->rank;
        }
    }
    add_ops(o, w, pl, i);
    double step = c[M_STEP][i];
    double tflops = pl->flops_per_step > 0 && step > 0 ? pl->flops_per_step / step / 1e3 : -1;
    c[C_TFLOPS][i] = tflops;
    c[C_MFU][i] = tflops > 0 && pl->peak_flops > 0 ? tflops * 1e12 / pl->peak_flops : -1;
    w->rank[i] = pl->rank;
}

/* Decode every payload: the missing ranks, the steps, the columns of the active ranks. */
static void add_payloads(owned *o, work *w, int world) {
    sw_ranks *r = &o->pub;
    size_t train = 0;
    for (int i = 0; i < world; i++) {
        /* The payloads are read once, in order, 1 KB each: ask for the one PREFETCH ranks
         * ahead now, so decoding waits on memory less (bench/bench_ranks.py) */
        if (i + PREFETCH < world) {
            const unsigned char *next = w->bytes + (size_t)(i + PREFETCH) * SW_RANK_PAYLOAD_SIZE;
            for (size_t at = 0; at < SW_RANK_PAYLOAD_SIZE; at += 64)
                __builtin_prefetch(next + at);
        }
        sw__payload pl;
        if (sw__payload_decode(w->bytes + (size_t)i * SW_RANK_PAYLOAD_SIZE, &pl) != 0 ||
            pl.rank != i) {
            r->missing[r->nmissing++] = i;
            continue;
        }
        r->answered++;
        if (pl.slots[SW__SLOT_COLLECTIVE].count > 0)
            r->collective_ranks++;
        if (pl.steps == 0)
            continue;
        if (r->min_steps == 0 || pl.steps < r->min_steps)
            r->min_steps = pl.steps;
        if (pl.steps > r->max_steps)
            r->max_steps = pl.steps;
        train += (pl.flags & SW__PAYLOAD_FLAG_TRAIN) != 0;
        add_rank(o, w, &pl, w->n++);
    }
    if (w->n > 0 && train == w->n)
        r->phase = "train";
}

/* ---- across ranks ---- */

/* A column's figures over the ranks that have a value (>= 0): how many, min and max with
 * the lowest rank holding each, the median and the sum. */
typedef struct spread {
    int ranks;
    double min, median, max, sum;
    int min_rank, max_rank;
} spread;

static spread spread_of(const work *w, const double *col) {
    spread s = {.min_rank = -1, .max_rank = -1};
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++) {
        double v = col[i];
        if (v < 0)
            continue;
        if (k == 0 || v < s.min) {
            s.min = v;
            s.min_rank = w->rank[i];
        }
        if (k == 0 || v > s.max) {
            s.max = v;
            s.max_rank = w->rank[i];
        }
        s.sum += v;
        w->scratch[k++] = v;
    }
    s.ranks = (int)k;
    s.median = sw__median(w->scratch, k);
    return s;
}

static void fill_stat(sw_rank_stat *st, const char *name, const work *w, int col, int slot) {
    memset(st, 0, sizeof *st);
    spread s = spread_of(w, w->col[col]);
    st->name = name;
    st->ranks = s.ranks;
    st->min_ns = s.min;
    st->median_ns = s.median;
    st->max_ns = s.max;
    st->min_rank = s.min_rank;
    st->max_rank = s.max_rank;
    st->p99_max_rank = -1;
    if (slot >= 0) {
        st->calls = w->slot_calls[slot];
        st->p99_max_ns = w->p99_max[slot];
        st->p99_max_rank = w->p99_rank[slot];
    }
}

/* The per-action rows: every slot, then compute. */
static int fill_stats(sw_ranks *r, const work *w) {
    r->nstats = SW__SLOT_COUNT + 1;
    r->stats = calloc(r->nstats, sizeof *r->stats);
    if (r->stats == NULL)
        return SW_ENOMEM;
    for (int k = 0; k < SW__SLOT_COUNT; k++)
        fill_stat(&r->stats[k], sw__slot_names[k], w, C_SLOT0 + k, k);
    fill_stat(&r->stats[SW__SLOT_COUNT], "compute", w, M_COMPUTE, -1);
    return 0;
}

static sw_rank_rate rate_of(const work *w, int col) {
    spread s = spread_of(w, w->col[col]);
    return (sw_rank_rate){.ranks = s.ranks,
                          .min = s.min,
                          .median = s.median,
                          .max = s.max,
                          .min_rank = s.min_rank,
                          .max_rank = s.max_rank,
                          .total = s.sum};
}

static int by_median_desc(const void *a, const void *b) {
    const sw_rank_op *x = a, *y = b;
    return (x->median_ns < y->median_ns) - (x->median_ns > y->median_ns);
}

/* The ops (most median time first) and the rows of the active ranks. */
static int fill_ops_and_rows(owned *o, const work *w) {
    sw_ranks *r = &o->pub;
    r->ops = calloc(r->nops ? r->nops : 1, sizeof *r->ops);
    r->rows = calloc(w->n ? w->n : 1, sizeof *r->rows);
    if (r->ops == NULL || r->rows == NULL)
        return SW_ENOMEM;
    for (size_t k = 0; k < r->nops; k++) {
        sw_rank_op *op = &r->ops[k];
        spread t = spread_of(w, w->col[C_OP0 + k]);
        spread bw = spread_of(w, w->col[C_BW0 + k]);
        spread bytes = spread_of(w, w->col[C_BYTES0 + k]);
        *op = (sw_rank_op){.name = o->op_names[k],
                           .ranks = t.ranks,
                           .min_ns = t.min,
                           .median_ns = t.median,
                           .max_ns = t.max,
                           .min_rank = t.min_rank,
                           .max_rank = t.max_rank,
                           .calls = w->op_calls[k],
                           .bw_ranks = bw.ranks,
                           .bytes_per_step = bytes.median,
                           .min_bw = bw.min,
                           .median_bw = bw.median,
                           .min_bw_rank = bw.min_rank};
    }
    qsort(r->ops, r->nops, sizeof *r->ops, by_median_desc);
    r->nrows = w->n;
    for (size_t i = 0; i < w->n; i++) {
        sw_rank_row *row = &r->rows[i];
        row->rank = w->rank[i];
        row->step_ns = w->col[M_STEP][i];
        row->tflops = w->col[C_TFLOPS][i] >= 0 ? w->col[C_TFLOPS][i] : NAN;
        for (size_t k = 0; k < r->nops; k++) {
            size_t c = (size_t)(r->ops[k].name - o->op_names[0]) / SW__OP_NAME;
            double v = w->col[C_OP0 + c][i];
            row->op_ns[k] = v > 0 ? v : 0;
        }
    }
    r->tflops = rate_of(w, C_TFLOPS);
    r->mfu = rate_of(w, C_MFU);
    return 0;
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

/* A straggler: active rank i, its values mine[] (its host: straggler_hosts, once sorted). */
static void add_straggler(owned *o, const work *w, size_t i, const double *mine,
                          const double *others, double excess) {
    sw_ranks *r = &o->pub;
    size_t at = r->nstragglers++;
    sw_rank_straggler *s = &r->stragglers[at];
    sw__payload pl; /* decoded before: valid */
    sw__payload_decode(w->bytes + (size_t)w->rank[i] * SW_RANK_PAYLOAD_SIZE, &pl);
    s->rank = pl.rank;
    s->local_rank = pl.local_rank;
    s->excess_ns = excess;
    s->step_ns = mine[M_STEP];
    s->data_ns = mine[M_DATA];
    s->compute_ns = mine[M_COMPUTE];
    s->collective_ns = mine[M_COLLECTIVE];
    blame(s, mine, others, mine[M_STEP] - others[M_STEP] >= r->threshold_ns);
}

static int find_stragglers(owned *o, work *w) {
    sw_ranks *r = &o->pub;
    size_t n = w->n;
    if (n < 2)
        return 0;
    sw__others med[M_COUNT];
    for (int k = 0; k < M_COUNT; k++) {
        memcpy(w->scratch, w->col[k], n * sizeof *w->scratch);
        sw__others_prepare(&med[k], w->scratch, n);
    }
    r->stragglers = calloc(n, sizeof *r->stragglers);
    o->hosts = calloc(n, sizeof *o->hosts);
    if (r->stragglers == NULL || o->hosts == NULL)
        return SW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        double mine[M_COUNT], others[M_COUNT];
        for (int k = 0; k < M_COUNT; k++) {
            mine[k] = w->col[k][i];
            others[k] = sw__median_of_others(&med[k], mine[k]);
        }
        double own = mine[M_OWN] - others[M_OWN];
        double step = mine[M_STEP] - others[M_STEP];
        double excess = own > step ? own : step;
        if (excess >= r->threshold_ns)
            add_straggler(o, w, i, mine, others, excess);
    }
    qsort(r->stragglers, r->nstragglers, sizeof *r->stragglers, by_excess);
    return 0;
}

/* The hosts of the sorted stragglers, from their payloads. */
static void straggler_hosts(owned *o, const work *w) {
    sw_ranks *r = &o->pub;
    for (size_t i = 0; i < r->nstragglers; i++) {
        sw__payload pl;
        sw__payload_decode(w->bytes + (size_t)r->stragglers[i].rank * SW_RANK_PAYLOAD_SIZE, &pl);
        memcpy(o->hosts[i], pl.host, sizeof o->hosts[i]);
        r->stragglers[i].host = o->hosts[i];
    }
}

/* The wait rule (stepwatch/ranks.h): of the collective ops, the one where the other ranks'
 * median time per step exceeds the worst straggler's most; said when that reaches the
 * threshold, with the other ranks that wait at least the threshold there. */
static void find_wait(owned *o, work *w) {
    sw_ranks *r = &o->pub;
    if (r->nstragglers == 0 || w->n < 2)
        return;
    const sw_rank_straggler *s = &r->stragglers[0];
    size_t me = 0;
    while (w->rank[me] != s->rank)
        me++;
    for (size_t k = 0; k < r->nops; k++) {
        const double *col = w->col[C_OP0 + k];
        double mine = col[me] > 0 ? col[me] : 0;
        size_t m = 0;
        int waiting = 0;
        for (size_t i = 0; i < w->n; i++) {
            if (i == me)
                continue;
            double v = col[i] > 0 ? col[i] : 0;
            waiting += v - mine >= r->threshold_ns;
            w->scratch[m++] = v;
        }
        double wait = sw__median(w->scratch, m) - mine;
        if (wait >= r->threshold_ns && wait > r->wait_ns) {
            r->wait_rank = s->rank;
            r->wait_op = o->op_names[k];
            r->wait_ns = wait;
            r->waiting_ranks = waiting;
            r->wait_blame = s->blame;
        }
    }
}

static int work_alloc(work *w, size_t world) {
    w->rank = malloc(world * sizeof *w->rank);
    w->scratch = malloc(world * sizeof *w->scratch);
    int ok = w->rank && w->scratch;
    w->world = world;
    for (int k = 0; k < C_COUNT; k++)
        if (k < C_OP0 || k >= C_TFLOPS)
            ok = (w->col[k] = malloc(world * sizeof *w->col[k])) != NULL && ok;
    for (int k = 0; k < SW__SLOT_COUNT; k++)
        w->p99_rank[k] = -1;
    for (int e = 0; e < SW__PAYLOAD_OPS; e++)
        w->op_of_entry[e] = -1;
    return ok ? 0 : SW_ENOMEM;
}

int sw_ranks_reduce(const void *payloads, int world_size, sw_ranks **out) {
    if (payloads == NULL || out == NULL || world_size < 1 || world_size > SW_RANKS_MAX_WORLD)
        return SW_EINVAL;
    *out = NULL;
    owned *o = calloc(1, sizeof *o);
    work w = {.bytes = payloads};
    if (o == NULL)
        return SW_ENOMEM;
    sw_ranks *r = &o->pub;
    r->world_size = world_size;
    r->phase = "all";
    r->wait_rank = -1;
    r->missing = malloc((size_t)world_size * sizeof *r->missing);
    int rc = work_alloc(&w, (size_t)world_size);
    if (rc == 0 && r->missing == NULL)
        rc = SW_ENOMEM;
    if (rc == 0) {
        add_payloads(o, &w, world_size);
        rc = fill_stats(r, &w);
    }
    if (rc == 0)
        rc = fill_ops_and_rows(o, &w);
    if (rc == 0) {
        r->threshold_ns = r->stats[SW__SLOT_STEP].median_ns * THRESHOLD_SHARE;
        if (r->threshold_ns < THRESHOLD_MIN_NS)
            r->threshold_ns = THRESHOLD_MIN_NS;
        rc = find_stragglers(o, &w);
    }
    if (rc == 0) {
        straggler_hosts(o, &w);
        find_wait(o, &w);
    }
    work_free(&w);
    if (rc != 0) {
        sw_ranks_free(r);
        return rc;
    }
    *out = r;
    return 0;
}
