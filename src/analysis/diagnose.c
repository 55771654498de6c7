/*
 * diagnose.c — plain-language findings about a run, with the numbers behind them.
 *
 * Two streaming passes over the step records (memory per rank, never per step):
 *   pass 1: per rank, the step-time histogram, the time per category, the first steps,
 *           warm-up steps and the gaps between consecutive steps;
 *   pass 2: with the median known, the steps slower than SW__STALL_FACTOR x median.
 * Steps torch.compile compiled in are kept out like warm-up steps (diagnose_compile.c).
 * Step-time checks use the training steps when the run has any (validation steps are a
 * different workload); the idle check uses every step. Thresholds are in docs/diagnose.md.
 */
#include "analysis_internal.h"
#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW__FIRST_STEPS 3               /* "first steps" of each rank when no warm-up is set */
#define SW__STALL_FACTOR SW_SLOW_FACTOR /* a stall: sw_step_is_slow against the median */
#define SW__MAX_RANKS 65536
#define SW__MIN_STEPS 20 /* fewer steady steps: no distribution-based findings */
/* A stall must also take SW_SLOW_FLOOR_NS longer than the median: on steps of microseconds,
 * a scheduler preemption or a page fault (tens to hundreds of us) is 3x the median without
 * anything in the program being slow. Below it a tail is machine noise (at most info). */
#define SW__STALL_FLOOR_NS ((double)SW_SLOW_FLOOR_NS)
/* The action stepwatch.torch times a DataLoader's start-up under (category data): the
 * iterator made at each epoch, which starts the worker processes. */
#define SW__LOADER_START "dataloader_startup"

typedef struct rank_acc {
    int seen;
    /* selected (training, steady) steps */
    uint64_t steps, step_ns;
    uint64_t cat_ns[SW_CAT_COUNT];
    sw_hist hist;
    /* the first steps of this rank, and the flagged warm-up steps */
    uint64_t nfirst, first_ns;
    uint64_t nwarmup, warmup_ns;
    /* the steps torch.compile compiled in (not warm-up) */
    uint64_t ncompiled, compiled_ns;
    /* gaps between consecutive steps (all phases) */
    int have_last;
    uint64_t first_start, last_end, idle_ns, max_gap, max_gap_after;
    /* pass 2 */
    uint64_t stalls, stall_excess_ns;
    uint64_t stall_cat_ns[SW_CAT_COUNT];
} rank_acc;

typedef struct diag_ctx {
    const sw__input *in;
    int train_only; /* only steps of the train phase are "selected" */
    int pass;
    int err;
    rank_acc *ranks;
    size_t nranks; /* allocated */
    int min_rank, max_rank;
    double median_ns; /* all ranks, selected steps (after pass 1) */
    sw__compiled compiled;
    sw__drift drift; /* the steady steps' memory (diagnose_memory.c) */
} diag_ctx;

static rank_acc *acc_of(diag_ctx *c, int rank) {
    if (rank < 0 || rank >= SW__MAX_RANKS)
        return NULL;
    if (sw__grow(&c->ranks, sizeof *c->ranks, &c->nranks, (size_t)rank + 1, 4) != 0) {
        c->err = SW_ENOMEM;
        return NULL;
    }
    rank_acc *r = &c->ranks[rank];
    if (!r->seen) {
        r->seen = 1;
        if (c->max_rank < c->min_rank) {
            c->min_rank = c->max_rank = rank;
        } else {
            c->min_rank = rank < c->min_rank ? rank : c->min_rank;
            c->max_rank = rank > c->max_rank ? rank : c->max_rank;
        }
    }
    return r;
}

static int visit_step(void *ctx, int rank, const sw_step_record *s) {
    diag_ctx *c = ctx;
    rank_acc *r = acc_of(c, rank < 0 ? 0 : rank);
    if (!r)
        return c->err;
    int selected = !c->train_only || s->phase == SW_PHASE_TRAIN;
    int compiled = !s->warmup && sw__compiled_has(&c->compiled, s->step);
    if (c->pass == 2) {
        if (selected && !s->warmup && !compiled &&
            sw_step_is_slow(s->duration_ns, (uint64_t)c->median_ns)) {
            r->stalls++;
            r->stall_excess_ns += s->duration_ns - (uint64_t)c->median_ns;
            for (int k = 0; k < SW_CAT_COUNT; k++)
                r->stall_cat_ns[k] += s->category_ns[k];
        }
        return 0;
    }
    /* Idle: the gap since the previous step of this rank ended. */
    uint64_t end = s->start_ns + s->duration_ns;
    if (!r->have_last) {
        r->have_last = 1;
        r->first_start = s->start_ns;
    } else if (s->start_ns > r->last_end) {
        uint64_t gap = s->start_ns - r->last_end;
        r->idle_ns += gap;
        if (gap > r->max_gap) {
            r->max_gap = gap;
            r->max_gap_after = s->step ? s->step - 1 : 0;
        }
    }
    if (end > r->last_end)
        r->last_end = end;
    if (!selected)
        return 0;
    if (s->warmup) {
        r->nwarmup++;
        r->warmup_ns += s->duration_ns;
        return 0;
    }
    if (compiled) {
        r->ncompiled++;
        r->compiled_ns += s->duration_ns;
        return 0;
    }
    if (r->nfirst < SW__FIRST_STEPS) {
        r->nfirst++;
        r->first_ns += s->duration_ns;
    }
    sw__drift_add(&c->drift, rank < 0 ? 0 : rank, s);
    r->steps++;
    r->step_ns += s->duration_ns;
    for (int k = 0; k < SW_CAT_COUNT; k++)
        r->cat_ns[k] += s->category_ns[k];
    sw_hist_add(&r->hist, s->duration_ns);
    return 0;
}

static const char *dur(double ns, char *buf, size_t size) {
    return sw_format_duration(ns, buf, size);
}

/* The category whose time differs most (largest positive difference of means). */
static int most_different(const double *x, const double *y, double *diff) {
    int best = SW_CAT_OTHER;
    *diff = -INFINITY;
    for (int k = 0; k < SW_CAT_COUNT; k++)
        if (x[k] - y[k] > *diff) {
            *diff = x[k] - y[k];
            best = k;
        }
    return best;
}

static void check_input_bound(sw__diagnosis *d, double data_ns, double step_ns, uint64_t steps) {
    if (step_ns <= 0 || steps == 0)
        return;
    double share = data_ns / step_ns * 100.0;
    if (share < 15.0)
        return;
    sw__finding *f = sw__finding_add(d, "input-bound",
                                     share >= 40.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32];
    snprintf(f->title, sizeof f->title, "Input-bound: %.1f %% of step time waits for data", share);
    snprintf(f->sentence, sizeof f->sentence,
             "Each step waited %s for its batch out of %s on average; more data loader workers, "
             "pinned memory, prefetching or cheaper preprocessing would shorten the wait.",
             dur(data_ns / (double)steps, a, sizeof a), dur(step_ns / (double)steps, b, sizeof b));
    sw__finding_number(f, "data share", share, "%");
    sw__finding_number(f, "data wait per step", data_ns / (double)steps, "ns");
    sw__finding_number(f, "step mean", step_ns / (double)steps, "ns");
    sw__finding_number(f, "steps", (double)steps, "");
}

static void check_callbacks(sw__diagnosis *d, const sw_snapshot *s) {
    if (!s || s->wall_ns == 0)
        return;
    /* A merged run's wall_ns is the sum over its ranks, like the callback totals. */
    double wall = (double)s->wall_ns;
    double cb_ns = 0, top_ns = 0;
    const char *top = NULL;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->phase != SW_PHASE_ALL || r->category != SW_CAT_CALLBACK)
            continue;
        double t = (double)(r->stats.total_ns + r->warmup.total_ns);
        cb_ns += t;
        if (t > top_ns) {
            top_ns = t;
            top = r->action_name;
        }
    }
    double share = cb_ns / wall * 100.0;
    if (share < 5.0 || !top)
        return;
    sw__finding *f = sw__finding_add(d, "callback-overhead",
                                     share >= 20.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32];
    snprintf(f->title, sizeof f->title, "Callback overhead: %.1f %% of the run in callbacks",
             share);
    snprintf(f->sentence, sizeof f->sentence,
             "Callbacks and logging hooks took %s of the run; the largest, %s, took %.1f %% "
             "alone: log less often or move the work off the training loop.",
             dur(cb_ns, a, sizeof a), top, top_ns / wall * 100.0);
    sw__finding_number(f, "callback share", share, "%");
    sw__finding_number(f, "callback time", cb_ns, "ns");
    sw__finding_number(f, "largest callback share", top_ns / wall * 100.0, "%");
}

/* The DataLoader's start-up (its worker processes, started again at each epoch unless
 * persistent_workers): timed as its own data action, here named as the cause. */
static void check_loader_startup(sw__diagnosis *d, const sw_snapshot *s) {
    const sw_row *r = s ? sw_snapshot_find(s, SW__LOADER_START, "all") : NULL;
    if (!r || s->wall_ns == 0)
        return;
    double total = (double)(r->stats.total_ns + r->warmup.total_ns);
    uint64_t count = r->stats.count + r->warmup.count;
    double share = total / (double)s->wall_ns * 100.0;
    if (share < 5.0 || count == 0)
        return;
    sw__finding *f = sw__finding_add(d, "loader-startup",
                                     share >= 20.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32];
    snprintf(f->title, sizeof f->title, "DataLoader start-up: %.1f %% of the run", share);
    snprintf(f->sentence, sizeof f->sentence,
             "Starting the DataLoader's workers took %s in all, %llu times (%s each: a new "
             "iterator at each epoch and evaluation starts its worker processes again); it "
             "is part of data, in the first step of each loop. persistent_workers=True starts "
             "them once; fewer workers or a dataset object that is cheaper to send to them "
             "start faster.",
             dur(total, a, sizeof a), (unsigned long long)count,
             dur(total / (double)count, b, sizeof b));
    sw__finding_number(f, "start-up share", share, "%");
    sw__finding_number(f, "start-up time", total, "ns");
    sw__finding_number(f, "start-ups", (double)count, "");
}

static void check_warmup(sw__diagnosis *d, const diag_ctx *c, double median, uint32_t warmup_opt) {
    uint64_t nwarm = 0, warm_ns = 0, nfirst = 0, first_ns = 0;
    for (int i = c->min_rank; i <= c->max_rank; i++) {
        const rank_acc *r = &c->ranks[i];
        nwarm += r->nwarmup;
        warm_ns += r->warmup_ns;
        nfirst += r->nfirst;
        first_ns += r->first_ns;
    }
    char a[32], b[32];
    if (nwarm > 0 && median > 0) {
        double ratio = (double)warm_ns / (double)nwarm / median;
        if (ratio < 1.5)
            return;
        sw__finding *f = sw__finding_add(d, "warmup", SW__SEV_INFO);
        if (!f)
            return;
        snprintf(f->title, sizeof f->title, "Warm-up steps took %.1fx the steady median", ratio);
        snprintf(f->sentence, sizeof f->sentence,
                 "The %llu warm-up steps averaged %s against a steady median of %s; they are "
                 "kept out of the statistics (warmup_steps = %u).",
                 (unsigned long long)nwarm, dur((double)warm_ns / (double)nwarm, a, sizeof a),
                 dur(median, b, sizeof b), warmup_opt);
        sw__finding_number(f, "warm-up steps", (double)nwarm, "");
        sw__finding_number(f, "warm-up mean", (double)warm_ns / (double)nwarm, "ns");
        sw__finding_number(f, "steady median", median, "ns");
        sw__finding_number(f, "ratio", ratio, "x");
        return;
    }
    if (nfirst == 0 || median <= 0 || d->steps < SW__MIN_STEPS)
        return;
    double ratio = (double)first_ns / (double)nfirst / median;
    if (ratio < 3.0)
        return;
    sw__finding *f = sw__finding_add(d, "warmup", SW__SEV_WARNING);
    if (!f)
        return;
    snprintf(f->title, sizeof f->title, "Warm-up outliers: the first steps took %.1fx the median",
             ratio);
    snprintf(f->sentence, sizeof f->sentence,
             "The first %d steps of each rank averaged %s against a steady median of %s "
             "(compilation, autotuning, cold caches); they inflate the mean and max: set "
             "warmup_steps to keep them apart.",
             SW__FIRST_STEPS, dur((double)first_ns / (double)nfirst, a, sizeof a),
             dur(median, b, sizeof b));
    sw__finding_number(f, "first steps", (double)nfirst, "");
    sw__finding_number(f, "first steps mean", (double)first_ns / (double)nfirst, "ns");
    sw__finding_number(f, "steady median", median, "ns");
    sw__finding_number(f, "ratio", ratio, "x");
}

static void check_stalls(sw__diagnosis *d, const diag_ctx *c, const sw_hist *all, double median) {
    if (d->steps < SW__MIN_STEPS || median <= 0)
        return;
    double p99 = (double)sw_hist_quantile(all, 0.99);
    uint64_t stalls = 0, excess = 0;
    double stall_cat[SW_CAT_COUNT] = {0}, all_cat[SW_CAT_COUNT] = {0};
    for (int i = c->min_rank; i <= c->max_rank; i++) {
        const rank_acc *r = &c->ranks[i];
        stalls += r->stalls;
        excess += r->stall_excess_ns;
        for (int k = 0; k < SW_CAT_COUNT; k++) {
            stall_cat[k] += (double)r->stall_cat_ns[k];
            all_cat[k] += (double)r->cat_ns[k];
        }
    }
    double ratio = p99 / median;
    double stall_pct = (double)stalls / (double)d->steps * 100.0;
    if (ratio < 2.0 && stalls == 0)
        return;
    double excess_share = (double)excess / (double)d->step_ns * 100.0;
    /* Rare stalls that cost little are a note, not a problem; so is a tail within the floor
     * of the median (microsecond steps that a preemption triples). */
    int noise = p99 - median < SW__STALL_FLOOR_NS;
    sw__severity sev = excess_share >= 10.0                              ? SW__SEV_CRITICAL
                       : (ratio >= 2.0 && !noise) || excess_share >= 1.0 ? SW__SEV_WARNING
                                                                         : SW__SEV_INFO;
    sw__finding *f = sw__finding_add(d, "tail-stalls", sev);
    if (!f)
        return;
    char a[32], b[32], c_[32];
    snprintf(f->title, sizeof f->title, "Tail stalls: p99 step time is %.1fx the median", ratio);
    if (stalls > 0 && c->in->snap && c->in->snap->slow.judged > 0) {
        /* Their causes, step by step: the slow-steps finding. */
        snprintf(f->sentence, sizeof f->sentence,
                 "%llu steps (%.2f %%) took %.0fx the median of %s or more, costing %.1f %% of "
                 "step time; the slow-steps finding says why, step by step.",
                 (unsigned long long)stalls, stall_pct, SW__STALL_FACTOR, dur(median, a, sizeof a),
                 excess_share);
    } else if (stalls > 0) {
        double diff;
        for (int k = 0; k < SW_CAT_COUNT; k++) {
            stall_cat[k] /= (double)stalls;
            all_cat[k] /= (double)d->steps;
        }
        int cat = most_different(stall_cat, all_cat, &diff);
        snprintf(f->sentence, sizeof f->sentence,
                 "%llu steps (%.2f %%) took more than %.0fx the median of %s, costing %.1f %% of "
                 "step time; in those steps %s took %s longer than usual.",
                 (unsigned long long)stalls, stall_pct, SW__STALL_FACTOR, dur(median, a, sizeof a),
                 excess_share, sw_category_name((sw_category)cat), dur(diff, b, sizeof b));
    } else if (noise) {
        snprintf(f->sentence, sizeof f->sentence,
                 "The slowest 1 %% of steps take %s against a median of %s: less than %s "
                 "more, the size of the machine's own hiccups (preemption, page faults), "
                 "not the program's.",
                 dur(p99, a, sizeof a), dur(median, b, sizeof b),
                 dur(SW__STALL_FLOOR_NS, c_, sizeof c_));
    } else {
        snprintf(f->sentence, sizeof f->sentence,
                 "The slowest 1 %% of steps take %s against a median of %s, though none "
                 "exceeded %.0fx the median.",
                 dur(p99, a, sizeof a), dur(median, b, sizeof b), SW__STALL_FACTOR);
    }
    sw__finding_number(f, "p50", median, "ns");
    sw__finding_number(f, "p99", p99, "ns");
    sw__finding_number(f, "p99/p50", ratio, "x");
    sw__finding_number(f, "stalled steps", (double)stalls, "");
    sw__finding_number(f, "stall share of step time", excess_share, "%");
}

static void check_idle(sw__diagnosis *d, const diag_ctx *c) {
    uint64_t idle = 0, span = 0, max_gap = 0, after = 0;
    int at_rank = 0;
    for (int i = c->min_rank; i <= c->max_rank; i++) {
        const rank_acc *r = &c->ranks[i];
        if (!r->have_last)
            continue;
        idle += r->idle_ns;
        span += r->last_end - r->first_start;
        if (r->max_gap > max_gap) {
            max_gap = r->max_gap;
            after = r->max_gap_after;
            at_rank = i;
        }
    }
    if (span == 0)
        return;
    double share = (double)idle / (double)span * 100.0;
    if (share < 10.0)
        return;
    sw__finding *f = sw__finding_add(d, "idle-between-steps",
                                     share >= 30.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32], where[32] = "";
    if (c->max_rank > c->min_rank)
        snprintf(where, sizeof where, " on rank %d", at_rank);
    snprintf(f->title, sizeof f->title, "Idle between steps: %.1f %% of the time", share);
    snprintf(
        f->sentence, sizeof f->sentence,
        "%s passed between the end of one step and the start of the next (evaluation, "
        "checkpointing or logging outside steps); the longest gap, %s, came after step %llu%s.",
        dur((double)idle, a, sizeof a), dur((double)max_gap, b, sizeof b),
        (unsigned long long)after, where);
    sw__finding_number(f, "idle share", share, "%");
    sw__finding_number(f, "idle time", (double)idle, "ns");
    sw__finding_number(f, "longest gap", (double)max_gap, "ns");
    sw__finding_number(f, "after step", (double)after, "");
    if (c->max_rank > c->min_rank)
        sw__finding_number(f, "rank", at_rank, "");
}

static void check_straggler(sw__diagnosis *d, const diag_ctx *c) {
    int nr = 0;
    double med[256];
    int rank_of[256];
    for (int i = c->min_rank; i <= c->max_rank && nr < 256; i++)
        if (c->ranks[i].steps > 0) {
            med[nr] = (double)sw_hist_quantile(&c->ranks[i].hist, 0.5);
            rank_of[nr++] = i;
        }
    if (nr < 2)
        return;
    int slow = 0;
    for (int i = 1; i < nr; i++)
        if (med[i] > med[slow])
            slow = i;
    /* The typical rank: the median of the other ranks' medians (sorted, slowest left out). */
    double sorted[256];
    int ns = 0;
    for (int i = 0; i < nr; i++)
        if (i != slow)
            sorted[ns++] = med[i];
    for (int i = 1; i < ns; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    double typical = ns % 2 ? sorted[ns / 2] : (sorted[ns / 2 - 1] + sorted[ns / 2]) / 2;
    double ratio = typical > 0 ? med[slow] / typical : 0;
    if (ratio < 1.10)
        return;
    /* What made it slow: per-step time by category, this rank against the others' mean. */
    const rank_acc *r = &c->ranks[rank_of[slow]];
    double mine[SW_CAT_COUNT], others[SW_CAT_COUNT] = {0}, diff;
    for (int k = 0; k < SW_CAT_COUNT; k++)
        mine[k] = (double)r->cat_ns[k] / (double)r->steps;
    for (int i = 0; i < nr; i++) {
        if (i == slow)
            continue;
        const rank_acc *o = &c->ranks[rank_of[i]];
        for (int k = 0; k < SW_CAT_COUNT; k++)
            others[k] += (double)o->cat_ns[k] / (double)o->steps / (nr - 1);
    }
    int cat = most_different(mine, others, &diff);
    sw__finding *f = sw__finding_add(d, "straggler-rank",
                                     ratio >= 1.5 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32], e[32], g[32];
    snprintf(f->title, sizeof f->title, "Straggler: rank %d is %.0f %% slower than the other ranks",
             rank_of[slow], (ratio - 1) * 100.0);
    /* Time in collectives is time spent waiting for the other ranks (or on the link), not
     * the rank's own work (the cross-rank view leaves it out of a rank's compute). */
    char because[256];
    if (cat == SW_CAT_COLLECTIVE)
        snprintf(because, sizeof because,
                 "collective time is %s per step longer than the other ranks': it waited there "
                 "for other ranks (or on its link), which is not its own work, so look at the "
                 "ranks it waits for and at its link.",
                 dur(diff, g, sizeof g));
    else
        snprintf(because, sizeof because,
                 "%s time is %s per step longer than the other ranks', so look there first.",
                 sw_category_name((sw_category)cat), dur(diff, g, sizeof g));
    snprintf(f->sentence, sizeof f->sentence,
             "Rank %d's median step takes %s against %s for the other ranks' median (fastest "
             "%s); its %s",
             rank_of[slow], dur(med[slow], a, sizeof a), dur(typical, b, sizeof b),
             dur(sorted[0], e, sizeof e), because);
    sw__finding_number(f, "rank", rank_of[slow], "");
    sw__finding_number(f, "rank median", med[slow], "ns");
    sw__finding_number(f, "median of other ranks", typical, "ns");
    sw__finding_number(f, "fastest rank median", sorted[0], "ns");
    sw__finding_number(f, "ratio", ratio, "x");
    sw__finding_number(f, "ranks", nr, "");
}

/* ---- many ranks: the cross-rank view (stepwatch/ranks.h) ---- */

/* The worst straggler of the cross-rank view, with its blame. Returns 1 when the view can
 * tell (two ranks or more with steps, collective waits measured), else 0 and the step-time
 * check above decides: without collective waits, ranks in lockstep all take the slowest
 * one's step time. */
static int check_rank_stragglers(sw__diagnosis *d, const sw_ranks *r) {
    if (!r || r->answered < 2 || r->max_steps == 0 || r->collective_ranks == 0)
        return 0;
    if (r->nstragglers == 0)
        return 1;
    const sw_rank_straggler *s = &r->stragglers[0];
    double step = r->stats[0].median_ns; /* "step" is the view's first row */
    double share = step > 0 ? s->excess_ns / step * 100.0 : 0;
    sw__finding *f = sw__finding_add(d, "straggler-rank",
                                     share >= 50.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return 1;
    char a[32], b[32], c[32], more[96] = "";
    if (r->nstragglers > 1)
        snprintf(more, sizeof more, " %zu other rank%s also past the threshold (%s per step).",
                 r->nstragglers - 1, r->nstragglers > 2 ? "s are" : " is",
                 dur(r->threshold_ns, c, sizeof c));
    snprintf(f->title, sizeof f->title, "Straggler: rank %d, %s (+%s per step)", s->rank,
             s->blame == SW_BLAME_DATA      ? "waiting for data"
             : s->blame == SW_BLAME_COMPUTE ? "its compute"
                                            : "in collectives",
             dur(s->excess_ns, a, sizeof a));
    const char *why =
        s->blame == SW_BLAME_DATA
            ? "its data wait is %s longer per step: more data loader workers, a faster source "
              "or less preprocessing on that host"
        : s->blame == SW_BLAME_COMPUTE
            ? "its own compute is %s longer per step: the host's load, clocks or the batches "
              "it draws"
            : "its time inside collectives is %s longer and lengthens its steps: its network "
              "link or its placement";
    char because[256], part[96] = "";
    snprintf(because, sizeof because, why, dur(s->blame_ns, b, sizeof b));
    if (s->blame == SW_BLAME_COMPUTE && s->part)
        snprintf(part, sizeof part, " (%s grew most, by %s)", s->part,
                 dur(s->part_ns, c, sizeof c));
    char host[64];
    snprintf(host, sizeof host, "%s", s->host && s->host[0] ? s->host : "?");
    snprintf(f->sentence, sizeof f->sentence,
             "Rank %d (%s, local rank %d) takes %s per step longer than the other ranks' median "
             "(%s a step), and ranks that synchronize wait for it; %s%s.%s",
             s->rank, host, s->local_rank, dur(s->excess_ns, a, sizeof a), dur(step, c, sizeof c),
             because, part, more);
    sw__finding_number(f, "rank", s->rank, "");
    sw__finding_number(f, "excess per step", s->excess_ns, "ns");
    sw__finding_number(f, "blamed part excess", s->blame_ns, "ns");
    sw__finding_number(f, "median step", step, "ns");
    sw__finding_number(f, "stragglers", (double)r->nstragglers, "");
    sw__finding_number(f, "ranks", r->answered, "");
    return 1;
}

/* Ranks that did not answer the aggregation (dead, or past its timeout). */
static void check_missing_ranks(sw__diagnosis *d, const sw_ranks *r) {
    if (!r || r->nmissing == 0)
        return;
    sw__finding *f = sw__finding_add(d, "missing-ranks", SW__SEV_WARNING);
    if (!f)
        return;
    char list[160] = "";
    size_t used = 0;
    for (int i = 0; i < r->nmissing && used + 16 < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", i ? ", " : "",
                                 r->missing[i]);
    if (used + 16 >= sizeof list)
        snprintf(list + used, sizeof list - used, ", ...");
    snprintf(f->title, sizeof f->title, "%d of %d ranks missing", r->nmissing, r->world_size);
    snprintf(f->sentence, sizeof f->sentence,
             "%s %s did not answer the cross-rank aggregation (the process died, or ended "
             "past the timeout) or their run files were not merged; the other findings cover "
             "the %d ranks that did.",
             r->nmissing > 1 ? "Ranks" : "Rank", list, r->answered);
    sw__finding_number(f, "missing ranks", r->nmissing, "");
    sw__finding_number(f, "ranks", r->world_size, "");
}

static void check_recording(sw__diagnosis *d, const sw_snapshot *s, const char *incomplete) {
    if (incomplete[0] != '\0') {
        sw__finding *f = sw__finding_add(d, "incomplete-run", SW__SEV_WARNING);
        if (f) {
            snprintf(f->title, sizeof f->title, "The run file is incomplete");
            snprintf(f->sentence, sizeof f->sentence,
                     "The run did not complete its file, so what it recorded last is missing "
                     "from every figure: %.400s.",
                     incomplete + (strncmp(incomplete, "incomplete: ", 12) == 0 ? 12 : 0));
        }
    }
    if (!s)
        return;
    const sw_misuse *m = &s->misuse;
    uint64_t misuse = m->end_without_begin + m->mismatched_end + m->depth_overflow + m->bad_id +
                      m->phase_mismatch + m->step_overlap + m->bad_record;
    if (misuse > 0) {
        sw__finding *f = sw__finding_add(d, "misuse", SW__SEV_WARNING);
        if (f) {
            snprintf(f->title, sizeof f->title, "Instrumentation misuse: %llu calls",
                     (unsigned long long)misuse);
            snprintf(f->sentence, sizeof f->sentence,
                     "Some begin/end calls did not pair up (%llu ends without a begin, %llu "
                     "mismatched ends, %llu overlapping steps); the times of those actions may "
                     "be off.",
                     (unsigned long long)m->end_without_begin,
                     (unsigned long long)m->mismatched_end, (unsigned long long)m->step_overlap);
            sw__finding_number(f, "misuse", (double)misuse, "");
            sw__finding_number(f, "end without begin", (double)m->end_without_begin, "");
            sw__finding_number(f, "mismatched end", (double)m->mismatched_end, "");
            sw__finding_number(f, "depth overflow", (double)m->depth_overflow, "");
            sw__finding_number(f, "bad id", (double)m->bad_id, "");
            sw__finding_number(f, "step overlap", (double)m->step_overlap, "");
        }
    }
    if (s->dropped_events > 0) {
        sw__finding *f = sw__finding_add(d, "dropped-events", SW__SEV_WARNING);
        if (f) {
            snprintf(f->title, sizeof f->title,
                     "%llu events dropped: the data is partial, no timing finding computed",
                     (unsigned long long)s->dropped_events);
            snprintf(f->sentence, sizeof f->sentence,
                     "The run file lost %llu events (its writer fell behind, memory ran out, "
                     "or it could not write: the run's warnings say which), so the per-step "
                     "records and the timeline have holes; findings over them (input-bound, "
                     "idle, stalls, stragglers, warm-up, callbacks) would describe the steps "
                     "that were kept, not the run, and are not computed. If it fell behind, "
                     "rerun with a larger ring or the blocking policy (stepwatch run --on-full "
                     "block --ring-capacity N; Profiler(on_full='block')).",
                     (unsigned long long)s->dropped_events);
            sw__finding_number(f, "dropped events", (double)s->dropped_events, "");
        }
    }
}

/* What the run could not show: no steps at all, or categories its front end could not time
 * apart (the notes stepwatch.torch leaves; docs/diagnose.md). Never "No problems found". */
static const char *separate_advice(const char *category) {
    static const struct {
        const char *category, *advice;
    } advice[] = {
        {"data", "draw batches through a torch DataLoader, or time the drawing with "
                 "stepwatch.action(\"data\")"},
        {"forward", "call the model as an nn.Module, or time it with "
                    "stepwatch.action(\"forward\")"},
        {"loss", "compute the loss outside the model's forward, or time it with "
                 "stepwatch.action(\"loss\")"},
        {"optimizer", "use a torch.optim optimizer, or time the update with "
                      "stepwatch.action(\"optimizer\")"},
    };
    for (size_t i = 0; i < sizeof advice / sizeof advice[0]; i++)
        if (strcmp(category, advice[i].category) == 0)
            return advice[i].advice;
    return "time it with stepwatch.action() around its code";
}

static void check_unseen(sw__diagnosis *d, const sw_snapshot *s) {
    if (!s)
        return;
    uint64_t calls = 0;
    for (size_t i = 0; i < s->nrows; i++)
        if (s->rows[i].phase == SW_PHASE_ALL && s->rows[i].category != SW_CAT_OTHER)
            calls += s->rows[i].stats.count + s->rows[i].warmup.count;
    if (s->steps == 0) {
        sw__finding *f = sw__finding_add(d, "no-steps", SW__SEV_WARNING);
        if (f) {
            const char *why = sw_snapshot_note(s, "no_steps");
            snprintf(f->title, sizeof f->title, "No step boundary found");
            snprintf(f->sentence, sizeof f->sentence,
                     "%s%s, so there is no step time, samples/s, p50/p99 or per-step "
                     "breakdown. Mark steps with stepwatch.step() (Python) or "
                     "sw_step_begin/sw_step_end (C), loop over a torch DataLoader, or use the "
                     "Lightning, Ignite or fastai adapters.",
                     why ? why : "the run marked no steps",
                     why || calls == 0 ? ""
                                       : " though it timed data, forward, backward or "
                                         "optimizer calls");
            sw__finding_number(f, "timed calls", (double)calls, "");
        }
    }
    static const char prefix[] = "not_separated.", limit[] = "limit.";
    for (size_t i = 0; i < s->nnotes; i++) {
        const char *key = s->notes[i].key;
        if (strncmp(key, limit, sizeof limit - 1) == 0) {
            /* A full name table (core/recorder_names.c): its new names share one row. */
            sw__finding *f = sw__finding_add(d, "table-full", SW__SEV_WARNING);
            if (!f)
                return;
            snprintf(f->title, sizeof f->title, "The %s table is full: new names share one row",
                     key + sizeof limit - 1);
            snprintf(f->sentence, sizeof f->sentence,
                     "%s. Their time is counted, not lost; to see it apart, name actions by what "
                     "they do and keep what varies (a step number, a file) out of the name.",
                     s->notes[i].value);
            continue;
        }
        if (strncmp(key, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *category = key + sizeof prefix - 1;
        sw__finding *f = sw__finding_add(d, "not-separated", SW__SEV_INFO);
        if (!f)
            return;
        snprintf(f->title, sizeof f->title, "%s could not be timed apart", category);
        snprintf(f->sentence, sizeof f->sentence, "%s. To see it, %s.", s->notes[i].value,
                 separate_advice(category));
    }
}

/* Most severe first; a stable insertion sort keeps the checks' order within a severity. */
static void sort_findings(sw__diagnosis *d) {
    for (size_t i = 1; i < d->nfindings; i++) {
        sw__finding f = d->findings[i];
        size_t j = i;
        for (; j > 0 && d->findings[j - 1].severity < f.severity; j--)
            d->findings[j] = d->findings[j - 1];
        d->findings[j] = f;
    }
}

int sw__diagnose(const sw__input *in, sw__diagnosis *d) {
    if (!in || !d || !in->foreach_step)
        return SW_EINVAL;
    memset(d, 0, sizeof *d);
    diag_ctx c = {.in = in, .min_rank = 0, .max_rank = -1};
    sw__drift_init(&c.drift);
    sw__compiled_read(in->snap, &c.compiled);
    if (in->snap) {
        const sw_row *train = sw_snapshot_find(in->snap, "step", "train");
        c.train_only = train && train->stats.count + train->warmup.count > 0;
    }
    c.pass = 1;
    int rc = in->foreach_step(in->src, visit_step, &c);
    if (rc == 0 && c.err)
        rc = c.err;
    if (rc == 0 && c.drift.err)
        rc = c.drift.err;
    sw_hist *all = NULL;
    if (rc == 0)
        all = calloc(1, sizeof *all);
    if (rc == 0 && !all)
        rc = SW_ENOMEM;
    if (rc != 0) {
        free(c.ranks);
        free(all);
        sw__drift_free(&c.drift);
        return rc;
    }
    double data_ns = 0;
    uint64_t ncompiled = 0, compiled_ns = 0;
    for (int i = c.min_rank; i <= c.max_rank; i++) {
        const rank_acc *r = &c.ranks[i];
        ncompiled += r->ncompiled;
        compiled_ns += r->compiled_ns;
        d->steps += r->steps;
        d->step_ns += r->step_ns;
        data_ns += (double)r->cat_ns[SW_CAT_DATA];
        sw_hist_merge(all, &r->hist);
    }
    /* The ranks with step records; without any, the ranks the run holds (as the HTML
     * report says them). */
    d->nranks = c.max_rank >= c.min_rank ? c.max_rank - c.min_rank + 1 : in->nranks;
    c.median_ns = (double)sw_hist_quantile(all, 0.5);
    if (d->steps > 0) {
        c.pass = 2;
        rc = in->foreach_step(in->src, visit_step, &c);
        if (rc == 0 && c.err)
            rc = c.err;
    }
    /* Events were dropped: the steps kept are not the run (8.29M steps with 524,280 kept
     * once gave "idle 97.7 %, critical"). Only what does not rest on them is said. */
    int partial = in->snap != NULL && in->snap->dropped_events > 0;
    if (rc == 0 && partial) {
        check_missing_ranks(d, in->ranks);
        check_recording(d, in->snap, in->incomplete);
        check_unseen(d, in->snap);
        sort_findings(d);
    } else if (rc == 0) {
        if (d->steps > 0) {
            check_input_bound(d, data_ns, (double)d->step_ns, d->steps);
        } else if (in->snap) {
            /* No step records (an old or partial file): fall back on the aggregates. */
            const sw_row *data = sw_snapshot_find(in->snap, "data", "all");
            const sw_row *step = sw_snapshot_find(in->snap, "step", "all");
            if (data && step)
                check_input_bound(d, (double)data->stats.total_ns, (double)step->stats.total_ns,
                                  step->stats.count);
        }
        check_callbacks(d, in->snap);
        check_loader_startup(d, in->snap);
        check_stalls(d, &c, all, c.median_ns);
        rc = sw__diagnose_slow(d, in);
        check_idle(d, &c);
        if (!check_rank_stragglers(d, in->ranks))
            check_straggler(d, &c);
        check_missing_ranks(d, in->ranks);
        check_warmup(d, &c, c.median_ns, in->snap ? in->snap->warmup_steps : 0);
        sw__diagnose_compile(d, &c.compiled, ncompiled, compiled_ns, c.median_ns);
        check_recording(d, in->snap, in->incomplete);
        check_unseen(d, in->snap);
        sw__diagnose_device(d, in->snap);
        sw__diagnose_comm(d, in->snap);
        sw__diagnose_rank_wait(d, in->ranks);
        sw__diagnose_drift(d, &c.drift);
        sw__diagnose_goodput(d, in->snap);
        sort_findings(d);
    }
    free(c.ranks);
    free(all);
    sw__drift_free(&c.drift);
    return rc;
}
