/*
 * payload.c — one rank's run summed up in SW_RANK_PAYLOAD_SIZE bytes.
 *
 * Layout (little-endian; docs/ranks.md): a 128-byte header
 *   0 magic "swrk"   4 version u16   6 slots u16   8 rank i32   12 world_size i32
 *   16 local_rank i32   20 flags u32   24 steps u64   32 elapsed_ns u64   40 pid i64
 *   48 host (64 bytes, NUL-padded)   112 flops_per_step f64   120 peak_flops f64
 * then per slot (step, data, forward, loss, backward, optimizer, zero_grad, callback,
 * collective) 64 bytes: count, total_ns, self_ns, min_ns, p50_ns, p99_ns, max_ns (u64),
 * std_ns (f64); then SW__PAYLOAD_OPS collective ops of 64 bytes, most time first: name (32
 * bytes, NUL-padded; "" = unused), count, total_ns, bytes, bytes_calls (u64). The slots and
 * ops come from the snapshot's train-phase rows when it has training steps (validation is
 * another workload), else from the roll-ups over all phases.
 */
#include "ranks.h"

#include <stdlib.h>
#include <string.h>

#define HEADER_SIZE 128
#define SLOT_SIZE 64
#define OP_SIZE 64
#define OPS_AT (HEADER_SIZE + SW__SLOT_COUNT * SLOT_SIZE)

_Static_assert(OPS_AT + SW__PAYLOAD_OPS * OP_SIZE == SW_RANK_PAYLOAD_SIZE,
               "SW_RANK_PAYLOAD_SIZE is the header, the slots and the ops");

const char *const sw__slot_names[SW__SLOT_COUNT] = {"step",      "data",     "forward",
                                                    "loss",      "backward", "optimizer",
                                                    "zero_grad", "callback", "collective"};

int sw__is_collective(const char *name) {
    return name && (strcmp(name, "collective") == 0 || strncmp(name, "collective:", 11) == 0);
}

/* The slot of a row's action, or -1 for actions no slot carries. */
static int slot_of(const sw_row *r) {
    const char *name = r->action_name ? r->action_name : "";
    if (strcmp(name, "step") == 0)
        return SW__SLOT_STEP;
    if (sw__is_collective(name))
        return SW__SLOT_COLLECTIVE;
    switch (r->category) {
    case SW_CAT_DATA:
        return SW__SLOT_DATA;
    case SW_CAT_FORWARD:
        return SW__SLOT_FORWARD;
    case SW_CAT_LOSS:
        return SW__SLOT_LOSS;
    case SW_CAT_BACKWARD:
        return SW__SLOT_BACKWARD;
    case SW_CAT_OPTIMIZER:
        return SW__SLOT_OPTIMIZER;
    case SW_CAT_ZERO_GRAD:
        return SW__SLOT_ZERO_GRAD;
    case SW_CAT_CALLBACK:
        return SW__SLOT_CALLBACK;
    case SW_CAT_COLLECTIVE: /* given explicitly (sw_action_with_category): any name */
        return SW__SLOT_COLLECTIVE;
    default:
        return -1;
    }
}

/* A note's number (flops_per_step, peak_flops), 0 when absent or not a positive number. */
static double note_number(const sw_snapshot *s, const char *key) {
    const char *v = sw_snapshot_note(s, key);
    char *end = NULL;
    double d = v ? strtod(v, &end) : 0;
    return v && end != v && d > 0 && d < 1e300 ? d : 0;
}

/* The bytes of op row r's calls: the counter "comm:<op>:bytes" holds the bytes moved so far,
 * one sample a call (stepwatch.collectives), so a call moved last / count on average. */
static void op_bytes(const sw_snapshot *s, const sw_row *r, sw__op_stats *op) {
    char name[SW_NAME_MAX + 16];
    snprintf(name, sizeof name, "comm:%s:bytes", op->name);
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        if (c->count > 0 && c->last > 0 && c->name && strcmp(c->name, name) == 0) {
            op->bytes = (uint64_t)(c->last / (double)c->count * (double)op->count);
            op->bytes_calls = op->count;
            return;
        }
    }
}

/* Keep op row r among the SW__PAYLOAD_OPS with the most time (sorted, most first). */
static void keep_op(const sw_snapshot *s, const sw_row *r, sw__op_stats *ops) {
    int k = SW__PAYLOAD_OPS - 1;
    if (ops[k].name[0] && ops[k].total_ns >= r->stats.total_ns)
        return;
    while (k > 0 && (!ops[k - 1].name[0] || ops[k - 1].total_ns < r->stats.total_ns)) {
        ops[k] = ops[k - 1];
        k--;
    }
    sw__op_stats *op = &ops[k];
    memset(op, 0, sizeof *op);
    const char *name = r->action_name;
    snprintf(op->name, sizeof op->name, "%s",
             strncmp(name, "collective:", 11) == 0 ? name + 11 : name);
    op->count = r->stats.count;
    op->total_ns = r->stats.total_ns;
    op_bytes(s, r, op);
}

int sw__payload_fill(const sw_snapshot *s, sw__payload *out) {
    memset(out, 0, sizeof *out);
    out->rank = s->rank;
    out->world_size = s->world_size;
    out->local_rank = s->local_rank;
    out->elapsed_ns = s->elapsed_ns;
    out->pid = s->pid;
    if (s->host)
        snprintf(out->host, sizeof out->host, "%s", s->host);
    const sw_row *train = sw_snapshot_find(s, "step", "train");
    int use_train = train && train->stats.count > 0;
    if (use_train)
        out->flags |= SW__PAYLOAD_FLAG_TRAIN;
    /* Merge each slot's rows: several actions may share a category (callbacks). */
    sw_stats stats[SW__SLOT_COUNT];
    sw_hist *hists = calloc(SW__SLOT_COUNT, sizeof *hists);
    if (hists == NULL)
        return SW_ENOMEM;
    for (int k = 0; k < SW__SLOT_COUNT; k++)
        sw_stats_init(&stats[k]);
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        int wanted = use_train ? r->phase == SW_PHASE_TRAIN : r->phase == SW_PHASE_ALL;
        int k = slot_of(r);
        if (!wanted || k < 0 || r->stats.count == 0)
            continue;
        if (k == SW__SLOT_COLLECTIVE)
            keep_op(s, r, out->ops);
        sw_stats_merge(&stats[k], &r->stats);
        sw_hist_merge(&hists[k], &r->hist);
    }
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        sw__slot_stats *o = &out->slots[k];
        if (stats[k].count == 0)
            continue;
        o->count = stats[k].count;
        o->total_ns = stats[k].total_ns;
        o->self_ns = stats[k].self_ns;
        o->min_ns = stats[k].min_ns;
        o->max_ns = stats[k].max_ns;
        o->p50_ns = sw_hist_quantile(&hists[k], 0.5);
        o->p99_ns = sw_hist_quantile(&hists[k], 0.99);
        o->std_ns = sw_stats_stddev(&stats[k]);
    }
    out->steps = out->slots[SW__SLOT_STEP].count;
    out->flops_per_step = note_number(s, "flops_per_step");
    out->peak_flops = note_number(s, "peak_flops");
    free(hists);
    return 0;
}

/* The payload of s as rank (world_size 0: the snapshot's own) into buf. */
static int payload_as(const sw_snapshot *s, int rank, int world_size, void *buf, size_t size) {
    if (s == NULL || buf == NULL || size < SW_RANK_PAYLOAD_SIZE ||
        (world_size > 0 && (rank < 0 || rank >= world_size)))
        return SW_EINVAL;
    sw__payload pl;
    int rc = sw__payload_fill(s, &pl);
    if (rc != 0)
        return rc;
    if (world_size > 0) {
        pl.rank = rank;
        pl.world_size = world_size;
    }
    sw__payload_encode(&pl, buf);
    return 0;
}

int sw_rank_payload_of(const sw_snapshot *s, void *buf, size_t size) {
    return payload_as(s, 0, 0, buf, size);
}

int sw_rank_payload(sw_profiler *p, int rank, int world_size, void *buf, size_t size) {
    if (p == NULL)
        return SW_EINVAL;
    sw_snapshot *s = NULL;
    int rc = sw_snapshot_take(p, &s);
    if (rc == 0)
        rc = payload_as(s, rank, world_size, buf, size);
    sw_snapshot_free(s);
    return rc;
}

/* ---- bytes ---- */

static void put_u16(unsigned char *b, uint16_t v) {
    b[0] = (unsigned char)v;
    b[1] = (unsigned char)(v >> 8);
}
static void put_u32(unsigned char *b, uint32_t v) {
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}
/* The readers: one load on a little-endian host (the rank 0 of 100,000 ranks decodes 100 MB
 * of them), byte by byte elsewhere. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SW__LE_LOAD(type, b)         \
    do {                             \
        type v_;                     \
        memcpy(&v_, (b), sizeof v_); \
        return v_;                   \
    } while (0)
static uint16_t get_u16(const unsigned char *b) {
    SW__LE_LOAD(uint16_t, b);
}
static uint32_t get_u32(const unsigned char *b) {
    SW__LE_LOAD(uint32_t, b);
}
static uint64_t get_u64(const unsigned char *b) {
    SW__LE_LOAD(uint64_t, b);
}
#else
static uint16_t get_u16(const unsigned char *b) {
    return (uint16_t)(b[0] | b[1] << 8);
}
static uint32_t get_u32(const unsigned char *b) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}
#endif
static void put_f64(unsigned char *b, double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    put_u64(b, v);
}
static double get_f64(const unsigned char *b) {
    uint64_t v = get_u64(b);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

void sw__payload_encode(const sw__payload *pl, unsigned char *buf) {
    memset(buf, 0, SW_RANK_PAYLOAD_SIZE);
    put_u32(buf + 0, SW__PAYLOAD_MAGIC);
    put_u16(buf + 4, SW__PAYLOAD_VERSION);
    put_u16(buf + 6, SW__SLOT_COUNT);
    put_u32(buf + 8, (uint32_t)pl->rank);
    put_u32(buf + 12, (uint32_t)pl->world_size);
    put_u32(buf + 16, (uint32_t)pl->local_rank);
    put_u32(buf + 20, pl->flags);
    put_u64(buf + 24, pl->steps);
    put_u64(buf + 32, pl->elapsed_ns);
    put_u64(buf + 40, (uint64_t)pl->pid);
    memcpy(buf + 48, pl->host, strnlen(pl->host, SW__PAYLOAD_HOST - 1));
    put_f64(buf + 112, pl->flops_per_step);
    put_f64(buf + 120, pl->peak_flops);
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        unsigned char *b = buf + HEADER_SIZE + k * SLOT_SIZE;
        const sw__slot_stats *s = &pl->slots[k];
        const uint64_t v[7] = {s->count,  s->total_ns, s->self_ns, s->min_ns,
                               s->p50_ns, s->p99_ns,   s->max_ns};
        for (int i = 0; i < 7; i++)
            put_u64(b + 8 * i, v[i]);
        put_f64(b + 56, s->std_ns);
    }
    for (int k = 0; k < SW__PAYLOAD_OPS; k++) {
        unsigned char *b = buf + OPS_AT + k * OP_SIZE;
        const sw__op_stats *op = &pl->ops[k];
        memcpy(b, op->name, strnlen(op->name, SW__OP_NAME - 1));
        put_u64(b + 32, op->count);
        put_u64(b + 40, op->total_ns);
        put_u64(b + 48, op->bytes);
        put_u64(b + 56, op->bytes_calls);
    }
}

/* A payload's FLOPs figure: NaN, negative or huge is unknown (0). */
static double known_flops(double d) {
    return d >= 0 && d < 1e300 ? d : 0;
}

int sw__payload_decode(const unsigned char *buf, sw__payload *out) {
    /* every field is set below (no memset: this runs once per rank at rank 0) */
    if (get_u32(buf) != SW__PAYLOAD_MAGIC || get_u16(buf + 4) != SW__PAYLOAD_VERSION ||
        get_u16(buf + 6) != SW__SLOT_COUNT) {
        memset(out, 0, sizeof *out);
        return SW_ECORRUPT;
    }
    out->rank = (int)get_u32(buf + 8);
    out->world_size = (int)get_u32(buf + 12);
    out->local_rank = (int)get_u32(buf + 16);
    out->flags = get_u32(buf + 20);
    out->steps = get_u64(buf + 24);
    out->elapsed_ns = get_u64(buf + 32);
    out->pid = (int64_t)get_u64(buf + 40);
    memcpy(out->host, buf + 48, SW__PAYLOAD_HOST - 1);
    out->host[SW__PAYLOAD_HOST - 1] = '\0';
    out->flops_per_step = known_flops(get_f64(buf + 112));
    out->peak_flops = known_flops(get_f64(buf + 120));
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        const unsigned char *b = buf + HEADER_SIZE + k * SLOT_SIZE;
        sw__slot_stats *s = &out->slots[k];
        s->count = get_u64(b);
        s->total_ns = get_u64(b + 8);
        s->self_ns = get_u64(b + 16);
        s->min_ns = get_u64(b + 24);
        s->p50_ns = get_u64(b + 32);
        s->p99_ns = get_u64(b + 40);
        s->max_ns = get_u64(b + 48);
        s->std_ns = get_f64(b + 56);
    }
    for (int k = 0; k < SW__PAYLOAD_OPS; k++) {
        const unsigned char *b = buf + OPS_AT + k * OP_SIZE;
        sw__op_stats *op = &out->ops[k];
        memcpy(op->name, b, SW__OP_NAME - 1);
        op->name[SW__OP_NAME - 1] = '\0';
        op->count = get_u64(b + 32);
        op->total_ns = get_u64(b + 40);
        op->bytes = get_u64(b + 48);
        op->bytes_calls = get_u64(b + 56);
    }
    if (out->rank < 0 || out->world_size < 1 || out->rank >= out->world_size)
        return SW_ECORRUPT;
    return 0;
}

int sw__payload_read(const unsigned char *buf, sw__payload_brief *out) {
    if (get_u32(buf) != SW__PAYLOAD_MAGIC || get_u16(buf + 4) != SW__PAYLOAD_VERSION ||
        get_u16(buf + 6) != SW__SLOT_COUNT)
        return SW_ECORRUPT;
    int world_size = (int)get_u32(buf + 12);
    out->rank = (int)get_u32(buf + 8);
    if (out->rank < 0 || world_size < 1 || out->rank >= world_size)
        return SW_ECORRUPT;
    out->flags = get_u32(buf + 20);
    out->steps = get_u64(buf + 24);
    out->flops_per_step = known_flops(get_f64(buf + 112));
    out->peak_flops = known_flops(get_f64(buf + 120));
    for (int k = 0; k < SW__SLOT_COUNT; k++) {
        const unsigned char *b = buf + HEADER_SIZE + k * SLOT_SIZE;
        uint64_t count = get_u64(b);
        out->slots[k].count = count;
        out->slots[k].total_ns = count ? get_u64(b + 8) : 0;
        out->slots[k].self_ns = count ? get_u64(b + 16) : 0;
        out->slots[k].p99_ns = count ? get_u64(b + 40) : 0;
    }
    for (int k = 0; k < SW__PAYLOAD_OPS; k++) {
        const unsigned char *b = buf + OPS_AT + k * OP_SIZE;
        out->ops[k].name = (const char *)b;
        out->ops[k].count = get_u64(b + 32);
        out->ops[k].total_ns = get_u64(b + 40);
        out->ops[k].bytes = get_u64(b + 48);
        out->ops[k].bytes_calls = get_u64(b + 56);
    }
    return 0;
}
