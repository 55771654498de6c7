/*
 * run_view.c — the cross-rank view of a run file (sw_run_ranks): from its ranks' aggregates
 * (a merged file) or from the aggregation rank 0 stored while the run went on.
 */
#include "ranks.h"

#include <stdlib.h>

/* Every rank of a merged file, as payloads made from its aggregates, reduced. */
static int from_rank_snapshots(sw_run *run, sw_ranks **out) {
    int n = sw_run_rank_count(run), world = 0, rc = 0;
    sw_snapshot **snaps = calloc((size_t)n, sizeof *snaps);
    if (snaps == NULL)
        return SW_ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = sw_run_rank_snapshot(run, sw_run_rank_id(run, i), &snaps[i]);
        if (rc == 0 && snaps[i]->world_size > world)
            world = snaps[i]->world_size;
        if (rc == 0 && snaps[i]->rank >= world)
            world = snaps[i]->rank + 1;
    }
    if (rc == 0 && world > SW_RANKS_MAX_WORLD)
        rc = SW_ECORRUPT; /* no job has that many ranks: a damaged ranks table */
    unsigned char *all = rc == 0 ? calloc((size_t)world, SW_RANK_PAYLOAD_SIZE) : NULL;
    if (rc == 0 && all == NULL)
        rc = SW_ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++)
        if (snaps[i]->rank >= 0)
            rc = sw_rank_payload_of(snaps[i], all + (size_t)snaps[i]->rank * SW_RANK_PAYLOAD_SIZE,
                                    SW_RANK_PAYLOAD_SIZE);
    if (rc == 0)
        rc = sw_ranks_reduce(all, world, out);
    for (int i = 0; i < n; i++)
        sw_snapshot_free(snaps[i]);
    free(snaps);
    free(all);
    return rc;
}

static int from_stored(sw_run *run, sw_ranks **out) {
    void *payloads = NULL;
    int world = 0;
    int rc = sw_run_stored_ranks(run, &payloads, &world, NULL, NULL);
    if (rc == 0)
        rc = sw_ranks_reduce(payloads, world, out);
    free(payloads);
    return rc;
}

int sw_run_ranks(sw_run *run, sw_ranks **out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_ranks *files = NULL, *stored = NULL;
    int rc = sw_run_rank_count(run) > 1 ? from_rank_snapshots(run, &files) : SW_ENOTFOUND;
    if (rc != 0 && rc != SW_ENOTFOUND)
        return rc;
    rc = from_stored(run, &stored);
    if (rc != 0 && rc != SW_ENOTFOUND) {
        sw_ranks_free(files);
        return rc;
    }
    /* The view more ranks answered; the ranks' own files when they tie (their aggregates
     * are the ones written last). */
    if (files && (!stored || files->answered >= stored->answered)) {
        sw_ranks_free(stored);
        *out = files;
    } else {
        sw_ranks_free(files);
        *out = stored;
    }
    return *out ? 0 : SW_ENOTFOUND;
}
