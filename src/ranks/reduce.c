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
 * Cost (100,000 ranks: 100 MB of payloads; bench/bench_ranks.py): each payload is read once,
 * in place, into columns (one value per rank per metric; a column is made only once a rank
 * has a value in it, so slots and ops no rank has cost nothing); every median is a selection
 * (select.c), one per column, shared between a column's spread and the medians of the
 * others, none for a column of equal values; the medians of the others of every rank are
 * taken for the two figures a straggler is found by, the ones its blame needs only for the
 * stragglers. Linear in the ranks, no sort of N.
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

/* The columns, one value per active rank (a rank with steps), in rank order: each slot's
 * time per step (-1: no calls), each compute part's own time per step, per op its time per
 * step (-1: not run), bandwidth and bytes per step (-1: bytes unknown), TFLOP/s and MFU (-1:
 * unknown). A column no rank has a value in is never made (NULL: every value is its none). */
enum {
    C_SLOT0 = 0,
    C_PART0 = C_SLOT0 + SW__SLOT_COUNT,
    C_OP0 = C_PART0 + NPARTS,
    C_BW0 = C_OP0 + SW_RANKS_MAX_OPS,
    C_BYTES0 = C_BW0 + SW_RANKS_MAX_OPS,
    C_TFLOPS = C_BYTES0 + SW_RANKS_MAX_OPS,
    C_MFU,
    C_COUNT
};

/* The metrics a straggler is judged and blamed on (from the columns). */
enum { M_STEP, M_DATA, M_COLLECTIVE, M_COMPUTE, M_OWN, M_PART0, M_COUNT = M_PART0 + NPARTS };

/* The result and what it owns. */
typedef struct owned {
    sw_ranks pub;
    char (*hosts)[SW__PAYLOAD_HOST]; /* the stragglers', in the order found */
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

/* A column's figures over the ranks that have a value (>= 0): how many, min and max with
 * the lowest rank holding each, the sum, and the order statistics around their median (the
 * median, and the median without any one value). */
typedef struct spread {
    int ranks;
    double min, median, max, sum;
    int min_rank, max_rank;
    sw__others around;
} spread;

/* Everything the reduction works on, freed at once. */
typedef struct work {
    const unsigned char *bytes; /* the payloads */
    size_t world, n;            /* ranks, active ranks */
    int *rank;                  /* [n] their ranks, ascending */
    double *col[C_COUNT];       /* [world] each, once a rank has a value in it */
    double *scratch;            /* [world] */
    double *columns;            /* the room of every column and the scratch, untouched until
                                   used (so a column never made costs no memory) */
    uint64_t slot_calls[SW__SLOT_COUNT], op_calls[SW_RANKS_MAX_OPS];
    double p99_max[SW__SLOT_COUNT];
    int p99_rank[SW__SLOT_COUNT];
    int op_of_entry[SW__PAYLOAD_OPS]; /* the op the last rank's entry e was: tried first */
    spread slot[SW__SLOT_COUNT], compute, op[SW_RANKS_MAX_OPS]; /* op: in op_names' order */
} work;

static void work_free(work *w) {
    free(w->columns);
    free(w->rank);
}

/* ---- the columns ---- */

/* What column c holds for a rank without a value. */
static inline double none_of(int c) {
    return c >= C_PART0 && c < C_PART0 + (int)NPARTS ? 0 : -1;
}

static inline double value(const work *w, int c, size_t i) {
    return w->col[c] ? w->col[c][i] : none_of(c);
}

/* Column c made at active rank i's value v, the first that is not none (the ranks before
 * get none). */
static void first_value(work *w, int c, size_t i, double v, double none) {
    double *col = w->col[c] = w->columns + (size_t)c * w->world;
    for (size_t j = 0; j < i; j++)
        col[j] = none;
    col[i] = v;
}

/* Active rank i's value v in column c (none: what the column holds for a rank without). */
static inline void put(work *w, int c, size_t i, double v, double none) {
    if (w->col[c])
        w->col[c][i] = v;
    else if (v != none)
        first_value(w, c, i, v, none);
}

/* Active rank i's metric m; a slot without calls takes no time. */
static inline double metric(const work *w, int m, size_t i) {
    static const sw__slot slot_of[] = {SW__SLOT_STEP, SW__SLOT_DATA, SW__SLOT_COLLECTIVE};
    if (m >= M_PART0)
        return value(w, C_PART0 + (m - M_PART0), i);
    if (m <= M_COLLECTIVE) {
        double v = value(w, C_SLOT0 + slot_of[m], i);
        return v > 0 ? v : 0;
    }
    double step = metric(w, M_STEP, i), collective = metric(w, M_COLLECTIVE, i);
    if (m == M_OWN)
        return step - collective;
    double compute = step - metric(w, M_DATA, i) - collective;
    return compute > 0 ? compute : 0;
}

/* ---- one rank's values into the columns ---- */

/* The view's op for a payload's op name (entry e of its payload), or -1 when the view
 * already has SW_RANKS_MAX_OPS others. A new op's time column starts at "none" for the
 * ranks before. */
static int op_index(owned *o, work *w, const char *name, int e, size_t i) {
    sw_ranks *r = &o->pub;
    int c = w->op_of_entry[e];
    if (c >= 0 && strncmp(o->op_names[c], name, SW__OP_NAME - 1) == 0)
        return c;
    for (size_t k = 0; k < r->nops; k++)
        if (strncmp(o->op_names[k], name, SW__OP_NAME - 1) == 0)
            return w->op_of_entry[e] = (int)k;
    if (r->nops == SW_RANKS_MAX_OPS)
        return -1;
    int k = (int)r->nops;
    double *col = w->col[C_OP0 + k] = w->columns + (size_t)(C_OP0 + k) * w->world;
    for (size_t j = 0; j <= i; j++)
        col[j] = -1;
    r->nops++;
    memcpy(o->op_names[k], name, strnlen(name, SW__OP_NAME - 1)); /* calloc'd: terminated */
    return w->op_of_entry[e] = k;
}

static void add_ops(owned *o, work *w, const sw__payload_brief *pl, size_t i) {
    for (size_t k = 0; k < o->pub.nops; k++)
        for (int c = C_OP0 + (int)k; c < C_TFLOPS; c += SW_RANKS_MAX_OPS)
            if (w->col[c])
                w->col[c][i] = -1;
    for (int e = 0; e < SW__PAYLOAD_OPS; e++) {
        const char *name = pl->ops[e].name;
        uint64_t count = pl->ops[e].count, total = pl->ops[e].total_ns, bytes = pl->ops[e].bytes;
        if (name[0] == '\0' || count == 0)
            continue;
        int k = op_index(o, w, name, e, i);
        if (k < 0) {
            o->pub.ops_left_out++;
            continue;
        }
        double *t = &w->col[C_OP0 + k][i];
        *t = (*t > 0 ? *t : 0) + (double)total / (double)pl->steps;
        w->op_calls[k] += count;
        if (bytes > 0 && pl->ops[e].bytes_calls == count && total > 0) {
            put(w, C_BW0 + k, i, (double)bytes / (double)total * 1e9, -1);
            put(w, C_BYTES0 + k, i, (double)bytes / (double)pl->steps, -1);
        }
    }
}

/* The columns of active rank i. */
static void add_rank(owned *o, work *w, const sw__payload_brief *pl, size_t i) {
    double steps = (double)pl->steps;
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        uint64_t count = pl->slots[k].count;
        put(w, C_SLOT0 + k, i, count ? (double)pl->slots[k].total_ns / steps : -1, -1);
        w->slot_calls[k] += count;
        double p99 = (double)pl->slots[k].p99_ns;
        if (count && (w->p99_rank[k] < 0 || p99 > w->p99_max[k])) {
            w->p99_max[k] = p99;
            w->p99_rank[k] = pl->rank;
        }
    }
    for (size_t p = 0; p < NPARTS; p++)
        put(w, C_PART0 + (int)p, i, (double)pl->slots[PARTS[p]].self_ns / steps, 0);
    add_ops(o, w, pl, i);
    double step = metric(w, M_STEP, i);
    double tflops = pl->flops_per_step > 0 && step > 0 ? pl->flops_per_step / step / 1e3 : -1;
    put(w, C_TFLOPS, i, tflops, -1);
    put(w, C_MFU, i, tflops > 0 && pl->peak_flops > 0 ? tflops * 1e12 / pl->peak_flops : -1, -1);
    w->rank[i] = pl->rank;
}

/* Read every payload: the missing ranks, the steps, the columns of the active ranks. */
static void add_payloads(owned *o, work *w, int world) {
    sw_ranks *r = &o->pub;
    size_t train = 0;
    for (int i = 0; i < world; i++) {
        /* The payloads are read once, in order, 1 KB each: ask for the one PREFETCH ranks
         * ahead now, so reading waits on memory less (bench/bench_ranks.py) */
        if (i + PREFETCH < world) {
            const unsigned char *next = w->bytes + (size_t)(i + PREFETCH) * SW_RANK_PAYLOAD_SIZE;
            for (size_t at = 0; at < SW_RANK_PAYLOAD_SIZE; at += 64)
                __builtin_prefetch(next + at);
        }
        sw__payload_brief pl;
        if (sw__payload_read(w->bytes + (size_t)i * SW_RANK_PAYLOAD_SIZE, &pl) != 0 ||
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

/* The order statistics of v[0..k) (reordered) around their median, min and max known: one
 * selection, none when every value is the same. */
static void around_median(sw__others *o, double *v, size_t k, double min, double max) {
    if (k > 0 && min == max)
        sw__others_constant(o, k, min);
    else
        sw__others_prepare(o, v, k);
}

static spread spread_of(const work *w, const double *col) {
    spread s = {.min_rank = -1, .max_rank = -1};
    size_t k = 0;
    for (size_t i = 0; col && i < w->n; i++) {
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
    around_median(&s.around, w->scratch, k, s.min, s.max);
    s.median = sw__others_median(&s.around);
    return s;
}

static void fill_stat(sw_rank_stat *st, const char *name, const spread *s, const work *w,
                      int slot) {
    memset(st, 0, sizeof *st);
    st->name = name;
    st->ranks = s->ranks;
    st->min_ns = s->min;
    st->median_ns = s->median;
    st->max_ns = s->max;
    st->min_rank = s->min_rank;
    st->max_rank = s->max_rank;
    st->p99_max_rank = -1;
    if (slot >= 0) {
        st->calls = w->slot_calls[slot];
        st->p99_max_ns = w->p99_max[slot];
        st->p99_max_rank = w->p99_rank[slot];
    }
}

/* The per-action rows: every slot, then compute. */
static int fill_stats(sw_ranks *r, work *w) {
    r->nstats = SW__SLOT_COUNT + 1;
    r->stats = calloc(r->nstats, sizeof *r->stats);
    if (r->stats == NULL)
        return SW_ENOMEM;
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        w->slot[k] = spread_of(w, w->col[C_SLOT0 + k]);
        fill_stat(&r->stats[k], sw__slot_names[k], &w->slot[k], w, k);
    }
    for (size_t i = 0; i < w->n; i++) /* compute is never negative: every rank has one */
        w->scratch[i] = metric(w, M_COMPUTE, i);
    spread *c = &w->compute;
    *c = (spread){.ranks = (int)w->n, .min_rank = -1, .max_rank = -1};
    for (size_t i = 0; i < w->n; i++) {
        double v = w->scratch[i];
        if (i == 0 || v < c->min) {
            c->min = v;
            c->min_rank = w->rank[i];
        }
        if (i == 0 || v > c->max) {
            c->max = v;
            c->max_rank = w->rank[i];
        }
    }
    around_median(&c->around, w->scratch, w->n, c->min, c->max);
    c->median = sw__others_median(&c->around);
    fill_stat(&r->stats[SW__SLOT_COUNT], "compute", c, w, -1);
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
static int fill_ops_and_rows(owned *o, work *w) {
    sw_ranks *r = &o->pub;
    r->ops = calloc(r->nops ? r->nops : 1, sizeof *r->ops);
    r->rows = malloc((w->n ? w->n : 1) * sizeof *r->rows); /* every field set below */
    if (r->ops == NULL || r->rows == NULL)
        return SW_ENOMEM;
    for (size_t k = 0; k < r->nops; k++) {
        sw_rank_op *op = &r->ops[k];
        const spread *t = &w->op[k];
        w->op[k] = spread_of(w, w->col[C_OP0 + k]);
        spread bw = spread_of(w, w->col[C_BW0 + k]);
        spread bytes = spread_of(w, w->col[C_BYTES0 + k]);
        *op = (sw_rank_op){.name = o->op_names[k],
                           .ranks = t->ranks,
                           .min_ns = t->min,
                           .median_ns = t->median,
                           .max_ns = t->max,
                           .min_rank = t->min_rank,
                           .max_rank = t->max_rank,
                           .calls = w->op_calls[k],
                           .bw_ranks = bw.ranks,
                           .bytes_per_step = bytes.median,
                           .min_bw = bw.min,
                           .median_bw = bw.median,
                           .min_bw_rank = bw.min_rank};
    }
    qsort(r->ops, r->nops, sizeof *r->ops, by_median_desc);
    size_t col_of[SW_RANKS_MAX_OPS]; /* the sorted ops' columns */
    for (size_t k = 0; k < r->nops; k++)
        col_of[k] = C_OP0 + (size_t)(r->ops[k].name - o->op_names[0]) / SW__OP_NAME;
    r->nrows = w->n;
    for (size_t i = 0; i < w->n; i++) {
        sw_rank_row *row = &r->rows[i];
        memset(row->op_ns, 0, sizeof row->op_ns);
        row->rank = w->rank[i];
        row->step_ns = metric(w, M_STEP, i);
        double tflops = value(w, C_TFLOPS, i);
        row->tflops = tflops >= 0 ? tflops : NAN;
        for (size_t k = 0; k < r->nops; k++) {
            double v = w->col[col_of[k]][i];
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

/* The medians of the other ranks of metric m, prepared: from the column's spread when every
 * active rank has a value there (the same values), else from a selection of its own. */
static void prepare_others(work *w, int m, sw__others *o) {
    static const sw__slot slot_of[] = {SW__SLOT_STEP, SW__SLOT_DATA, SW__SLOT_COLLECTIVE};
    const spread *same = m <= M_COLLECTIVE ? &w->slot[slot_of[m]]
                         : m == M_COMPUTE  ? &w->compute
                                           : NULL;
    if (same && (size_t)same->ranks == w->n) {
        *o = same->around;
        return;
    }
    if (m >= M_PART0 && w->col[C_PART0 + (m - M_PART0)] == NULL) { /* no rank's: all 0 */
        sw__others_constant(o, w->n, 0);
        return;
    }
    double min = INFINITY, max = -INFINITY;
    for (size_t i = 0; i < w->n; i++) {
        double v = w->scratch[i] = metric(w, m, i);
        min = v < min ? v : min;
        max = v > max ? v : max;
    }
    around_median(o, w->scratch, w->n, min, max);
}

/* Room for one more straggler (and its host): the arrays double, so a view of few stragglers
 * among many ranks clears no memory for the ranks that are none. */
static int room_for_straggler(owned *o, size_t *capacity) {
    sw_ranks *r = &o->pub;
    if (r->nstragglers < *capacity)
        return 0;
    size_t more = *capacity ? 2 * *capacity : 16;
    sw_rank_straggler *s = realloc(r->stragglers, more * sizeof *s);
    if (s != NULL)
        r->stragglers = s;
    char(*h)[SW__PAYLOAD_HOST] = realloc(o->hosts, more * sizeof *h);
    if (h != NULL)
        o->hosts = h;
    if (s == NULL || h == NULL)
        return SW_ENOMEM;
    *capacity = more;
    return 0;
}

/* A straggler: active rank i, past the threshold by excess; its blame from every metric (its
 * host: the caller points it at hosts[] once they all are found). */
static void add_straggler(owned *o, work *w, sw__others *med, int *blame_ready, size_t i,
                          double excess) {
    sw_ranks *r = &o->pub;
    if (!*blame_ready) {
        for (int m = 0; m < M_COUNT; m++)
            if (m != M_STEP && m != M_OWN)
                prepare_others(w, m, &med[m]);
        *blame_ready = 1;
    }
    double mine[M_COUNT], others[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        mine[m] = metric(w, m, i);
        others[m] = sw__median_of_others(&med[m], mine[m]);
    }
    size_t at = r->nstragglers++;
    sw_rank_straggler *s = &r->stragglers[at];
    memset(s, 0, sizeof *s);
    sw__payload pl; /* read before: valid */
    sw__payload_decode(w->bytes + (size_t)w->rank[i] * SW_RANK_PAYLOAD_SIZE, &pl);
    memcpy(o->hosts[at], pl.host, sizeof o->hosts[at]);
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
    int blame_ready = 0;
    size_t capacity = 0;
    prepare_others(w, M_STEP, &med[M_STEP]);
    prepare_others(w, M_OWN, &med[M_OWN]);
    for (size_t i = 0; i < n; i++) {
        double step = metric(w, M_STEP, i), collective = metric(w, M_COLLECTIVE, i);
        double own = step - collective; /* metric(w, M_OWN, i) */
        double own_excess = own - sw__median_of_others(&med[M_OWN], own);
        double step_excess = step - sw__median_of_others(&med[M_STEP], step);
        double excess = own_excess > step_excess ? own_excess : step_excess;
        if (excess < r->threshold_ns)
            continue;
        if (room_for_straggler(o, &capacity) != 0)
            return SW_ENOMEM;
        add_straggler(o, w, med, &blame_ready, i, excess);
    }
    for (size_t k = 0; k < r->nstragglers; k++) /* hosts[] moved no more: found order */
        r->stragglers[k].host = o->hosts[k];
    if (r->nstragglers > 1) /* (qsort of no array: undefined) */
        qsort(r->stragglers, r->nstragglers, sizeof *r->stragglers, by_excess);
    return 0;
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
        int every_rank = (size_t)w->op[k].ranks == w->n; /* then no value is below 0 */
        size_t m = 0;
        int waiting = 0;
        for (size_t i = 0; i < w->n; i++) {
            if (i == me)
                continue;
            double v = col[i] > 0 ? col[i] : 0;
            waiting += v - mine >= r->threshold_ns;
            if (!every_rank)
                w->scratch[m++] = v;
        }
        double others = every_rank ? sw__median_of_others(&w->op[k].around, mine)
                                   : sw__median(w->scratch, m);
        double wait = others - mine;
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
    w->columns = malloc((C_COUNT + 1) * world * sizeof *w->columns);
    w->scratch = w->columns + C_COUNT * world;
    w->world = world;
    for (int k = 0; k < SW__SLOT_COUNT; k++)
        w->p99_rank[k] = -1;
    for (int e = 0; e < SW__PAYLOAD_OPS; e++)
        w->op_of_entry[e] = -1;
    return w->rank && w->columns ? 0 : SW_ENOMEM;
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
    if (rc == 0)
        find_wait(o, &w);
    work_free(&w);
    if (rc != 0) {
        sw_ranks_free(r);
        return rc;
    }
    *out = r;
    return 0;
}
