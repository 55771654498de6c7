/*
 * diagnose_slow.c — the "slow-steps" finding (docs/slow-steps.md): how many steps were slow
 * (the core's rule, sw_step_is_slow), the time they cost over their medians, their causes by
 * count (sw_slow_cause), the five costliest with their evidence (sw_slow_step_text), and what
 * to do for each cause that occurred.
 */
#include "analysis_internal.h"
#include "report/writer.h"

#include <stdio.h>
#include <string.h>

#define SW__COSTLIEST 5

const char *sw__slow_advice(sw_cause c) {
    switch (c) {
    case SW_CAUSE_GC:
        return "call gc.freeze() after setup, or raise the generation-2 threshold "
               "(gc.set_threshold)";
    case SW_CAUSE_COMPILE:
        return "warm up the shapes before training, or torch.compile(dynamic=True)";
    case SW_CAUSE_CHECKPOINT:
        return "save checkpoints asynchronously (torch.distributed.checkpoint.async_save) or "
               "less often";
    case SW_CAUSE_EVAL:
        return "evaluate between steps, or less often";
    case SW_CAUSE_DATA:
        return "more DataLoader workers, pin_memory, a larger prefetch_factor";
    case SW_CAUSE_PAGE_FAULTS:
        return "touch memory-mapped data ahead (madvise WILLNEED, a warm-up pass), or check "
               "for swap";
    case SW_CAUSE_PREEMPTED:
        return "another process wanted this CPU: pin the job (taskset), run fewer processes "
               "and workers than cores";
    case SW_CAUSE_ALLOCATOR:
        return "the caching allocator freed its cache to find memory: lower the peak (smaller "
               "batches, activation checkpointing) or set PYTORCH_CUDA_ALLOC_CONF="
               "expandable_segments:True";
    case SW_CAUSE_STEAL:
        return "the VM's host gave its CPUs to other guests: a dedicated or larger instance, "
               "or fewer vCPUs asked than the host can give";
    case SW_CAUSE_SYNC:
        return "the host waited for the GPU: drop the .item() / .cpu() of the step (log a "
               "tensor, read it every N steps) or overlap it (non_blocking copies)";
    case SW_CAUSE_THROTTLED:
        return "the GPU lowered its clocks: check its cooling and power limit (nvidia-smi -q "
               "-d PERFORMANCE)";
    case SW_CAUSE_BLOCKED:
        return "look in the kept spans for I/O, locks, sleeps or device syncs (.item(), "
               ".cpu())";
    default:
        return "look at their kept spans (stepwatch html, stepwatch export --chrome)";
    }
}

static uint64_t excess_of(const sw_step_record *r) {
    return r->duration_ns - r->median_ns;
}

size_t sw__slow_keep(sw__slow_entry *kept, size_t n, size_t cap, int rank,
                     const sw_step_record *r) {
    uint64_t excess = excess_of(r);
    size_t i = n;
    if (cap == 0)
        return 0;
    if (i == cap) {
        if (excess <= excess_of(&kept[i - 1].r))
            return n; /* cheaper than those kept */
        i--;          /* the cheapest of them makes room */
    } else {
        n++;
    }
    while (i > 0 && excess > excess_of(&kept[i - 1].r)) {
        kept[i] = kept[i - 1];
        i--;
    }
    kept[i].rank = rank;
    kept[i].r = *r;
    return n;
}

typedef struct costliest {
    size_t n;
    sw__slow_entry steps[SW__COSTLIEST]; /* by excess over the median, largest first */
} costliest;

static int keep_costly(void *ctx, int rank, const sw_step_record *r) {
    costliest *c = ctx;
    c->n = sw__slow_keep(c->steps, c->n, SW__COSTLIEST, rank, r);
    return 0;
}

int sw__diagnose_slow(sw__diagnosis *d, const sw__input *in) {
    const sw_snapshot *snap = in->snap;
    if (snap == NULL || snap->slow.judged == 0)
        return 0;
    const sw_slow_summary *s = &snap->slow;
    costliest top = {0};
    if (s->slow > 0 && in->foreach_slow_step) {
        int rc = in->foreach_slow_step(in->src, keep_costly, &top);
        if (rc != 0)
            return rc;
    }
    uint64_t total = sw__all_step_ns(snap);
    double time_pct = total ? (double)s->slow_ns / (double)total * 100.0 : 0;
    double excess_pct = total ? (double)s->excess_ns / (double)total * 100.0 : 0;
    double step_pct = (double)s->slow / (double)s->judged * 100.0;
    sw__severity sev = s->slow == 0         ? SW__SEV_INFO
                       : excess_pct >= 10.0 ? SW__SEV_CRITICAL
                       : excess_pct >= 1.0  ? SW__SEV_WARNING
                                            : SW__SEV_INFO;
    sw__finding *f = sw__finding_add(d, "slow-steps", sev);
    if (!f)
        return 0;
    char causes[256];
    sw__slow_causes_text(s, causes, sizeof causes);
    if (s->slow == 0) {
        snprintf(f->title, sizeof f->title, "Slow steps: none of %llu",
                 (unsigned long long)s->judged);
        snprintf(f->sentence, sizeof f->sentence,
                 "No step took %.0fx its running median and %u ms more.", SW_SLOW_FACTOR,
                 SW_SLOW_FLOOR_NS / 1000000u);
    } else {
        snprintf(f->title, sizeof f->title, "Slow steps: %llu (%.1f %% of steps, %.1f %% of time)",
                 (unsigned long long)s->slow, step_pct, time_pct);
        size_t len = (size_t)snprintf(f->sentence, sizeof f->sentence,
                                      "%llu steps took %.0fx their running median or more, "
                                      "costing %.1f %% of step time over it; causes: %s.",
                                      (unsigned long long)s->slow, SW_SLOW_FACTOR, excess_pct,
                                      causes);
        for (size_t i = 0; i < top.n && len < sizeof f->sentence; i++) {
            char line[300];
            len += (size_t)snprintf(f->sentence + len, sizeof f->sentence - len, "\n%s",
                                    sw_slow_step_text(&top.steps[i].r, line, sizeof line));
        }
        for (int c = 1; c < SW_CAUSE_COUNT && len < sizeof f->sentence; c++)
            if (s->by_cause[c] > 0)
                len += (size_t)snprintf(f->sentence + len, sizeof f->sentence - len,
                                        "\nFor %s: %s.", sw_cause_name((sw_cause)c),
                                        sw__slow_advice((sw_cause)c));
    }
    sw__finding_number(f, "slow steps", (double)s->slow, "");
    sw__finding_number(f, "judged steps", (double)s->judged, "");
    sw__finding_number(f, "share of steps", step_pct, "%");
    sw__finding_number(f, "share of step time", time_pct, "%");
    sw__finding_number(f, "time over the median", excess_pct, "%");
    sw__finding_number(f, "windows kept", (double)s->windows_kept, "");
    sw__finding_number(f, "windows not kept", (double)s->windows_dropped, "");
    return 0;
}
