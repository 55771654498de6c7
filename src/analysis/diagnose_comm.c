/*
 * diagnose_comm.c — the collectives' findings: "slow-collective", a collective's size class
 * whose typical bus bandwidth is far below the best the same size reached in the run
 * (docs/collectives.md), and "rank-wait", the cross-rank view's wait line (docs/ranks.md).
 *
 * The rows come from the bandwidth counters of the collectives (report/comm_bandwidth.c).
 * Calls of one size move the same bytes over the same links, so latency does not excuse a
 * gap between them: when the mean busbw of a class is under SLOW_SHARE of its best call's,
 * most calls waited (for a slower rank to arrive) or a link was slow. Classes of fewer than
 * MIN_CALLS calls are not judged; the worst class (lowest share) is the one named.
 */
#include "analysis_internal.h"
#include "report/writer.h"
#include "stepwatch/ranks.h"

#include <inttypes.h>
#include <stdio.h>

#define SLOW_SHARE 0.33 /* mean busbw under a third of the best call's */
#define MIN_CALLS 5

void sw__diagnose_comm(sw__diagnosis *d, const sw_snapshot *s) {
    if (s == NULL)
        return;
    sw__comm_bw rows[SW__COMM_BW_ROWS];
    size_t n = sw__comm_bw_rows(s, rows, SW__COMM_BW_ROWS);
    const sw__comm_bw *worst = NULL;
    double worst_share = SLOW_SHARE;
    for (size_t i = 0; i < n; i++) {
        const sw__comm_bw *r = &rows[i];
        if (r->calls < MIN_CALLS || r->best_busbw <= 0)
            continue;
        double share = r->busbw / r->best_busbw;
        if (share < worst_share) {
            worst_share = share;
            worst = r;
        }
    }
    if (worst == NULL)
        return;
    sw__finding *f = sw__finding_add(d, "slow-collective", SW__SEV_WARNING);
    if (!f)
        return;
    snprintf(f->title, sizeof f->title, "%.40s of %.15s runs at %.0f %% of its best bandwidth",
             worst->op, worst->size_class, worst_share * 100.0);
    snprintf(f->sentence, sizeof f->sentence,
             "%" PRIu64 " calls of %.60s moving %.15s (up to twice that) reached %.3g GB/s of "
             "bus bandwidth on average, where the fastest call of the same size reached "
             "%.3g GB/s: most calls waited for a slower rank to arrive, or a link is slow. The "
             "cross-rank view says which rank the others waited for.",
             worst->calls, worst->op, worst->size_class, worst->busbw, worst->best_busbw);
    sw__finding_number(f, "mean busbw", worst->busbw, "GB/s");
    sw__finding_number(f, "best busbw", worst->best_busbw, "GB/s");
    sw__finding_number(f, "share of best", worst_share * 100.0, "%");
    sw__finding_number(f, "calls", (double)worst->calls, "");
}

/* The one line of the cross-rank view on waiting ("rank 3 made the other 7 ranks wait 41 ms
 * per step in all-gather (its own blame: data)"), as a finding when the view has one: the
 * straggler finding says who is slow, this one what it costs the ranks that synchronize. */
void sw__diagnose_rank_wait(sw__diagnosis *d, const sw_ranks *r) {
    char line[sizeof((sw__finding *)0)->sentence];
    if (r == NULL || sw_ranks_wait_sentence(r, line, sizeof line)[0] == '\0')
        return;
    sw__finding *f = sw__finding_add(d, "rank-wait", SW__SEV_WARNING);
    if (!f)
        return;
    snprintf(f->title, sizeof f->title, "Rank %d makes %d other rank%s wait in %.40s", r->wait_rank,
             r->waiting_ranks, r->waiting_ranks == 1 ? "" : "s", r->wait_op);
    snprintf(f->sentence, sizeof f->sentence, "%s", line);
    sw__finding_number(f, "rank", r->wait_rank, "");
    sw__finding_number(f, "wait per step", r->wait_ns, "ns");
    sw__finding_number(f, "waiting ranks", r->waiting_ranks, "");
}
