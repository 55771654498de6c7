/*
 * hist.c — the log-bucketed duration histogram (HDR-style, fixed size, mergeable by adding).
 *
 * A value v < 2^S (S = SW_HIST_SUB_BITS) has its own bucket. Above, with e = floor(log2 v),
 * the bucket is (e - S + 1) * 2^S + the S bits below the leading one: each power of two is
 * split into 2^S equal buckets, so a bucket is at most 1/2^S of its lower bound wide.
 */
#include "core.h"

#define SUB_COUNT (1u << SW_HIST_SUB_BITS)

uint32_t sw_hist_bucket_of(uint64_t ns) {
    return sw__hist_bucket(ns);
}

uint64_t sw_hist_bucket_low(uint32_t i) {
    if (i < SUB_COUNT)
        return i;
    if (i >= SW_HIST_BUCKETS)
        i = SW_HIST_BUCKETS - 1;
    uint32_t e = (i >> SW_HIST_SUB_BITS) + SW_HIST_SUB_BITS - 1;
    uint64_t sub = i & (SUB_COUNT - 1);
    return (1ull << e) + (sub << (e - SW_HIST_SUB_BITS));
}

uint64_t sw_hist_bucket_high(uint32_t i) {
    if (i < SUB_COUNT)
        return i;
    if (i >= SW_HIST_BUCKETS - 1)
        return UINT64_MAX;
    return sw_hist_bucket_low(i + 1) - 1;
}

void sw_hist_add(sw_hist *h, uint64_t ns) {
    h->buckets[sw__hist_bucket(ns)]++;
    h->count++;
}

void sw_hist_merge(sw_hist *into, const sw_hist *from) {
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
    into->count += from->count;
}

uint64_t sw_hist_quantile(const sw_hist *h, double q) {
    if (h == NULL || h->count == 0)
        return 0;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    /* The rank of the q-quantile, 1-based ("nearest rank"): ceil(q * n), at least 1. */
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if ((double)rank < q * (double)h->count)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t low = sw_hist_bucket_low(i), high = sw_hist_bucket_high(i);
            if (high == UINT64_MAX)
                return low;
            return low + (high - low) / 2;
        }
    }
    return sw_hist_bucket_low(SW_HIST_BUCKETS - 1);
}
