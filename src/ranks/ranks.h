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

#define SW__PAYLOAD_MAGIC 0x6b727773u /* "swrk" */
#define SW__PAYLOAD_VERSION 1u
#define SW__PAYLOAD_HOST 64
#define SW__PAYLOAD_FLAG_TRAIN 1u /* the slots hold the train phase's rows */

typedef struct sw__payload {
    int rank, world_size, local_rank;
    uint32_t flags;
    uint64_t steps; /* steady steps in the slots' phase */
    uint64_t elapsed_ns;
    int64_t pid;
    char host[SW__PAYLOAD_HOST];
    sw__slot_stats slots[SW__SLOT_COUNT];
} sw__payload;

/* A snapshot's numbers as a payload struct, and the struct as bytes / back. decode returns
 * SW_ECORRUPT for bytes that are not a payload of this version (a zeroed slot included). */
int sw__payload_fill(const sw_snapshot *s, sw__payload *out);
void sw__payload_encode(const sw__payload *pl, unsigned char *buf);
int sw__payload_decode(const unsigned char *buf, sw__payload *out);

#endif /* SW_RANKS_RANKS_H */
