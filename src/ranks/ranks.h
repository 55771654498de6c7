/*
 * ranks.h — the ranks layer's private parts: one rank's payload as a struct, and its byte
 * layout (payload.c), read by the reduction (reduce.c). See docs/ranks.md.
 */
#ifndef SW_RANKS_RANKS_H
#define SW_RANKS_RANKS_H

#include "core/core.h"

/* The actions a payload carries, in its order. The data..callback slots merge the rows of
 * their category; "step" is the step action, "collective" merges "collective" and every
 * "collective:<what>" action. */
typedef enum sw__slot {
    SW__SLOT_STEP = 0,
    SW__SLOT_DATA,
    SW__SLOT_FORWARD,
    SW__SLOT_LOSS,
    SW__SLOT_BACKWARD,
    SW__SLOT_OPTIMIZER,
    SW__SLOT_ZERO_GRAD,
    SW__SLOT_CALLBACK,
    SW__SLOT_COLLECTIVE,
    SW__SLOT_COUNT
} sw__slot;

extern const char *const sw__slot_names[SW__SLOT_COUNT];

/* One action's numbers on one rank (steady state: warm-up steps excluded). */
typedef struct sw__slot_stats {
    uint64_t count, total_ns, self_ns, min_ns, p50_ns, p99_ns, max_ns;
    double std_ns;
} sw__slot_stats;

/* One collective op on one rank: the actions named "collective" or "collective:<op>"
 * (stepwatch's DDP hook, the MPI wrappers, every collective:<op> action), name without the
 * prefix. bytes: what the op moved over the steady calls, from the counter
 * "collective:<op>.bytes" (one value per call, in bytes); 0 = unknown. */
#define SW__OP_NAME 32
#define SW__PAYLOAD_OPS 5 /* a payload carries a rank's ops with the most time */
typedef struct sw__op_stats {
    char name[SW__OP_NAME];
    uint64_t count, total_ns, bytes, bytes_calls; /* bytes_calls: calls whose bytes are known */
} sw__op_stats;

#define SW__PAYLOAD_MAGIC 0x6b727773u /* "swrk" */
#define SW__PAYLOAD_VERSION 2u
#define SW__PAYLOAD_HOST 64
#define SW__PAYLOAD_FLAG_TRAIN 1u /* the slots hold the train phase's rows */

typedef struct sw__payload {
    int rank, world_size, local_rank;
    uint32_t flags;
    uint64_t steps; /* steady steps in the slots' phase */
    uint64_t elapsed_ns;
    int64_t pid;
    char host[SW__PAYLOAD_HOST];
    double flops_per_step; /* model FLOPs of one step (note "flops_per_step"); 0 = unknown */
    double peak_flops;     /* the device's peak FLOP/s (note "peak_flops"); 0 = unknown */
    sw__slot_stats slots[SW__SLOT_COUNT];
    sw__op_stats ops[SW__PAYLOAD_OPS]; /* most time first; name "" = unused */
} sw__payload;

/* Whether an action is a collective: "collective" or "collective:<op>" (the one rule). */
int sw__is_collective(const char *action_name);

/* A snapshot's numbers as a payload struct, and the struct as bytes / back. decode returns
 * SW_ECORRUPT for bytes that are not a payload of this version (a zeroed slot included). */
int sw__payload_fill(const sw_snapshot *s, sw__payload *out);
void sw__payload_encode(const sw__payload *pl, unsigned char *buf);
int sw__payload_decode(const unsigned char *buf, sw__payload *out);

/* What the reduction reads of a payload, read in place: rank 0 of 100,000 ranks reads 100
 * MB of payloads, so nothing else is copied (no host, no names: an op's name points into
 * the bytes, NUL-padded, at most SW__OP_NAME - 1 bytes, not always NUL-terminated). A slot
 * without calls reads as all 0. Returns SW_ECORRUPT where sw__payload_decode does. */
typedef struct sw__payload_brief {
    int rank;
    uint32_t flags;
    uint64_t steps;
    double flops_per_step, peak_flops;
    struct {
        uint64_t count, total_ns, self_ns, p99_ns;
    } slots[SW__SLOT_COUNT];
    struct {
        const char *name;
        uint64_t count, total_ns, bytes, bytes_calls;
    } ops[SW__PAYLOAD_OPS];
} sw__payload_brief;
int sw__payload_read(const unsigned char *buf, sw__payload_brief *out);

/* select.c: the k-th smallest of v[0..n-1] (n >= 1), v reordered around it; the median of
 * v (0 for n 0), v reordered. */
double sw__select(double *v, size_t n, size_t k);
double sw__median(double *v, size_t n);

/* The median of every value of a column but one, in O(1) once prepared in O(n): the three
 * order statistics around the median (v reordered by the preparation). */
typedef struct sw__others {
    size_t n, lo;
    double v[3]; /* the lo-th, (lo+1)-th and (lo+2)-th smallest (INFINITY past the end) */
} sw__others;
void sw__others_prepare(sw__others *o, double *v, size_t n);
/* The median of the column without one value equal to x (NAN when n < 2). */
double sw__median_of_others(const sw__others *o, double x);
/* The same prepared for n values all equal to x, in O(1). */
void sw__others_constant(sw__others *o, size_t n, double x);
/* The median of the whole column (0 when n is 0), the same as sw__median's. */
double sw__others_median(const sw__others *o);

#endif /* SW_RANKS_RANKS_H */
