/*
 * metrics.c — a run's figures in Prometheus' text exposition format (sw_metrics_write), for
 * the /metrics endpoint of `stepwatch serve` (docs/live.md lists every name and label).
 *
 * Two streaming walks of the step records: the first sums each rank's steps, samples, steady
 * step times (a histogram per phase for p50/p99) and category times and finds its last step's
 * end; the second counts the steps that ended in the last RATE_WINDOW_NS before it (the rates).
 * Memory is one small record per rank (at most METRICS_RANKS), never per step. Then each
 * rank's snapshot (sw_run_rank_snapshot) gives its slow steps by cause and, once the FLOPs
 * helper noted them, its efficiency (MFU, FLOP/s, tokens/s).
 */
#include "analysis_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_RANKS 1024            /* ranks with figures of their own */
#define RATE_WINDOW_NS 10000000000ull /* steps/s and samples/s: over the last 10 s */

enum { PH_TRAIN = 0, PH_VALID, NPH };
static const char *const ph_names[NPH] = {"train", "valid"};

enum { MEMK_RSS = 0, MEMK_ALLOCATED, MEMK_PEAK, MEMK_RESERVED, NMEMK };
static const char *const memk_names[NMEMK] = {"rss", "allocated", "peak_allocated", "reserved"};

typedef struct rank_figures {
    int rank; /* -1: slot unused */
    uint64_t steps, samples, last_end_ns;
    uint64_t window_steps, window_samples, window_first_ns;
    uint64_t steady[NPH];
    double steady_ns[NPH], category_ns[NPH][SW_CAT_COUNT];
    sw_stats range[NPH];
    sw_hist hist[NPH];
    uint64_t memory[NMEMK];
    int has_memory[NMEMK];
} rank_figures;

typedef struct metrics_ctx {
    rank_figures *ranks;
    int nranks;
    int last; /* the slot found last (the records of one rank come in runs) */
} metrics_ctx;

/* The slot of rank, a new one for a rank not seen before; NULL past METRICS_RANKS. */
static rank_figures *slot_of(metrics_ctx *m, int rank) {
    if (m->last >= 0 && m->ranks[m->last].rank == rank)
        return &m->ranks[m->last];
    for (int i = 0; i < m->nranks; i++)
        if (m->ranks[i].rank == rank)
            return &m->ranks[m->last = i];
    if (m->nranks == METRICS_RANKS)
        return NULL;
    rank_figures *r = &m->ranks[m->last = m->nranks++];
    r->rank = rank;
    for (int k = 0; k < NPH; k++)
        sw_stats_init(&r->range[k]);
    return r;
}

static int sum_step(void *ctx, int rank, const sw_step_record *s) {
    rank_figures *r = slot_of(ctx, rank);
    if (!r)
        return 0;
    uint64_t end = s->start_ns + s->duration_ns;
    r->steps++;
    r->samples += s->batch_size;
    r->last_end_ns = end > r->last_end_ns ? end : r->last_end_ns;
    int ph = s->phase == SW_PHASE_VALID ? PH_VALID : PH_TRAIN;
    if (!s->warmup) {
        r->steady[ph]++;
        r->steady_ns[ph] += (double)s->duration_ns;
        for (int k = 0; k < SW_CAT_COUNT; k++)
            r->category_ns[ph][k] += (double)s->category_ns[k];
        sw_hist_add(&r->hist[ph], s->duration_ns);
        sw_stats_add(&r->range[ph], s->duration_ns, s->duration_ns, (int64_t)s->step, 0);
    }
    const uint64_t mem[NMEMK] = {s->rss_bytes, s->allocated_bytes, s->peak_allocated_bytes,
                                 s->reserved_bytes};
    for (int k = 0; k < NMEMK; k++) {
        int has = k == MEMK_RSS ? s->rss_bytes != 0 : s->has_allocator;
        if (has) {
            r->memory[k] = mem[k];
            r->has_memory[k] = 1;
        }
    }
    return 0;
}

static int count_window(void *ctx, int rank, const sw_step_record *s) {
    rank_figures *r = slot_of(ctx, rank);
    uint64_t end = s->start_ns + s->duration_ns;
    if (!r || end + RATE_WINDOW_NS < r->last_end_ns)
        return 0;
    if (r->window_steps == 0 || s->start_ns < r->window_first_ns)
        r->window_first_ns = s->start_ns;
    r->window_steps++;
    r->window_samples += s->batch_size;
    return 0;
}

/* ---- the exposition ---- */

static void family(FILE *out, const char *name, const char *type, const char *help) {
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and line feed escaped, as the format wants. */
static void label_value(FILE *out, const char *v) {
    for (; v && *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', out);
        if (*v == '\n')
            fputs("\\n", out);
        else
            fputc(*v, out);
    }
}

static void value(FILE *out, double v) {
    fprintf(out, " %.9g\n", v);
}

static double window_rate(const rank_figures *r, uint64_t n) {
    double span = (double)(r->last_end_ns - r->window_first_ns) / 1e9;
    return span > 0 ? (double)n / span : 0;
}

static void write_counts(FILE *out, const metrics_ctx *m) {
    family(out, "stepwatch_steps_total", "counter", "Steps recorded (every phase).");
    for (int i = 0; i < m->nranks; i++) {
        fprintf(out, "stepwatch_steps_total{rank=\"%d\"}", m->ranks[i].rank);
        value(out, (double)m->ranks[i].steps);
    }
    family(out, "stepwatch_samples_total", "counter",
           "Samples of the steps that gave a batch size.");
    for (int i = 0; i < m->nranks; i++) {
        fprintf(out, "stepwatch_samples_total{rank=\"%d\"}", m->ranks[i].rank);
        value(out, (double)m->ranks[i].samples);
    }
    family(out, "stepwatch_steps_per_second", "gauge",
           "Steps per second over the rank's last 10 s.");
    for (int i = 0; i < m->nranks; i++) {
        fprintf(out, "stepwatch_steps_per_second{rank=\"%d\"}", m->ranks[i].rank);
        value(out, window_rate(&m->ranks[i], m->ranks[i].window_steps));
    }
    family(out, "stepwatch_samples_per_second", "gauge",
           "Samples per second over the rank's last 10 s.");
    for (int i = 0; i < m->nranks; i++) {
        fprintf(out, "stepwatch_samples_per_second{rank=\"%d\"}", m->ranks[i].rank);
        value(out, window_rate(&m->ranks[i], m->ranks[i].window_samples));
    }
}

static void write_steady(FILE *out, const metrics_ctx *m) {
    family(out, "stepwatch_step_seconds", "summary", "Steady (not warm-up) step time.");
    static const double qs[] = {0.5, 0.99};
    for (int i = 0; i < m->nranks; i++) {
        const rank_figures *r = &m->ranks[i];
        for (int ph = 0; ph < NPH; ph++) {
            if (!r->steady[ph])
                continue;
            for (int q = 0; q < 2; q++) {
                fprintf(out, "stepwatch_step_seconds{rank=\"%d\",phase=\"%s\",quantile=\"%g\"}",
                        r->rank, ph_names[ph], qs[q]);
                value(out, (double)sw_stats_quantile(&r->range[ph], &r->hist[ph], qs[q]) / 1e9);
            }
            fprintf(out, "stepwatch_step_seconds_sum{rank=\"%d\",phase=\"%s\"}", r->rank,
                    ph_names[ph]);
            value(out, r->steady_ns[ph] / 1e9);
            fprintf(out, "stepwatch_step_seconds_count{rank=\"%d\",phase=\"%s\"}", r->rank,
                    ph_names[ph]);
            value(out, (double)r->steady[ph]);
        }
    }
    family(out, "stepwatch_category_share", "gauge",
           "Share (0..1) of the steady step time spent in each category.");
    for (int i = 0; i < m->nranks; i++) {
        const rank_figures *r = &m->ranks[i];
        for (int ph = 0; ph < NPH; ph++)
            for (int k = 0; k < SW_CAT_COUNT && r->steady_ns[ph] > 0; k++) {
                fprintf(out, "stepwatch_category_share{rank=\"%d\",phase=\"%s\",category=\"%s\"}",
                        r->rank, ph_names[ph], sw_category_name((sw_category)k));
                value(out, r->category_ns[ph][k] / r->steady_ns[ph]);
            }
    }
    family(out, "stepwatch_memory_bytes", "gauge", "Memory at the end of the rank's last step.");
    for (int i = 0; i < m->nranks; i++)
        for (int k = 0; k < NMEMK; k++)
            if (m->ranks[i].has_memory[k]) {
                fprintf(out, "stepwatch_memory_bytes{rank=\"%d\",kind=\"%s\"}", m->ranks[i].rank,
                        memk_names[k]);
                value(out, (double)m->ranks[i].memory[k]);
            }
}

/* The view's actions across ranks: the step (stepwatch_rank_step_seconds) and every action
 * the ranks recorded, min, median and max of the time per step. */
static void write_rank_stats(FILE *out, const sw_ranks *rk) {
    const char *names[3] = {"min", "median", "max"};
    family(out, "stepwatch_rank_step_seconds", "gauge", "Step time per step across ranks.");
    for (size_t i = 0; i < rk->nstats; i++)
        if (strcmp(rk->stats[i].name, "step") == 0 && rk->stats[i].ranks > 0) {
            const sw_rank_stat *st = &rk->stats[i];
            const double v[3] = {st->min_ns, st->median_ns, st->max_ns};
            for (int k = 0; k < 3; k++) {
                fprintf(out, "stepwatch_rank_step_seconds{stat=\"%s\"}", names[k]);
                value(out, v[k] / 1e9);
            }
        }
    family(out, "stepwatch_rank_action_seconds", "gauge",
           "Each action's time per step across ranks (the cross-rank view's rows).");
    for (size_t i = 0; i < rk->nstats; i++) {
        const sw_rank_stat *st = &rk->stats[i];
        const double v[3] = {st->min_ns, st->median_ns, st->max_ns};
        for (int k = 0; k < 3 && st->ranks > 0; k++) {
            fprintf(out, "stepwatch_rank_action_seconds{action=\"%s\",stat=\"%s\"}", st->name,
                    names[k]);
            value(out, v[k] / 1e9);
        }
    }
}

/* The cross-rank view: the step across ranks and the stragglers with their blame. */
static void write_ranks(FILE *out, sw_run *run) {
    sw_ranks *rk = NULL;
    if (sw_run_ranks(run, &rk) != 0)
        return;
    family(out, "stepwatch_world_size", "gauge", "Ranks of the job (the cross-rank view).");
    fprintf(out, "stepwatch_world_size");
    value(out, rk->world_size);
    family(out, "stepwatch_ranks_answered", "gauge", "Ranks whose figures reached the view.");
    fprintf(out, "stepwatch_ranks_answered");
    value(out, rk->answered);
    write_rank_stats(out, rk);
    family(out, "stepwatch_stragglers", "gauge",
           "Ranks past the straggler threshold (the cross-rank view).");
    fprintf(out, "stepwatch_stragglers");
    value(out, (double)rk->nstragglers);
    family(out, "stepwatch_straggler_excess_seconds", "gauge",
           "How much longer a straggler rank's step is than the other ranks' median, by blame.");
    for (size_t i = 0; i < rk->nstragglers; i++) {
        const sw_rank_straggler *s = &rk->stragglers[i];
        fprintf(out, "stepwatch_straggler_excess_seconds{rank=\"%d\",blame=\"%s\",host=\"", s->rank,
                sw_blame_name(s->blame));
        label_value(out, s->host);
        fputs("\"}", out);
        value(out, s->excess_ns / 1e9);
    }
    sw_ranks_free(rk);
}

/* ---- per rank, from its snapshot: slow steps and efficiency ---- */

/* The efficiency notes (python/stepwatch/flops.py) read as numbers, and their metric. */
enum { EFF_MFU = 0, EFF_FLOPS_PER_S, EFF_FLOPS_PER_STEP, EFF_TOKENS_PER_S, EFF_PEAK, NEFF };
static const struct {
    const char *note, *metric, *help;
    double scale; /* the note's unit in the metric's */
} eff_notes[NEFF] = {
    {"mfu", "stepwatch_mfu_ratio", "Model FLOPs utilization (0..1) against the peak.", 1},
    {"tflops_achieved", "stepwatch_model_flops_per_second",
     "Model FLOP/s achieved over the mean steady train step.", 1e12},
    {"flops_per_step", "stepwatch_model_flops_per_step", "Model FLOPs of one training step.", 1},
    {"tokens_per_s", "stepwatch_tokens_per_second", "Tokens per second of the steady steps.", 1},
    {"peak_flops", "stepwatch_peak_flops_per_second",
     "The device's peak FLOP/s that MFU is taken against.", 1},
};

typedef struct rank_extras {
    int rank;
    sw_slow_summary slow;
    double eff[NEFF]; /* NAN: not noted (yet) */
    char device[64], dtype[32];
} rank_extras;

/* The note key's value of s as a finite number, else NAN. */
static double note_number(const sw_snapshot *s, const char *key) {
    for (size_t i = 0; i < s->nnotes; i++)
        if (strcmp(s->notes[i].key, key) == 0 && s->notes[i].value) {
            char *end = NULL;
            double v = strtod(s->notes[i].value, &end);
            return end != s->notes[i].value && *end == '\0' && isfinite(v) ? v : NAN;
        }
    return NAN;
}

static void note_text(const sw_snapshot *s, const char *key, char *out, size_t size) {
    out[0] = '\0';
    for (size_t i = 0; i < s->nnotes; i++)
        if (strcmp(s->notes[i].key, key) == 0 && s->notes[i].value)
            snprintf(out, size, "%s", s->notes[i].value);
}

/* Every rank's extras (at most METRICS_RANKS) into *out (malloc'd), their count in *n. */
static int read_extras(sw_run *run, rank_extras **out, int *n) {
    int count = sw_run_rank_count(run);
    count = count > METRICS_RANKS ? METRICS_RANKS : count < 0 ? 0 : count;
    *n = 0;
    *out = calloc(count ? (size_t)count : 1, sizeof **out);
    if (!*out)
        return SW_ENOMEM;
    for (int i = 0; i < count; i++) {
        rank_extras *x = &(*out)[*n];
        sw_snapshot *s = NULL;
        x->rank = sw_run_rank_id(run, i);
        if (sw_run_rank_snapshot(run, x->rank, &s) != 0)
            continue; /* a rank that cannot be read now is left out of these */
        x->slow = s->slow;
        for (int k = 0; k < NEFF; k++)
            x->eff[k] = note_number(s, eff_notes[k].note) * eff_notes[k].scale;
        note_text(s, "peak_device", x->device, sizeof x->device);
        note_text(s, "compute_dtype", x->dtype, sizeof x->dtype);
        sw_snapshot_free(s);
        (*n)++;
    }
    return 0;
}

static void write_slow(FILE *out, const rank_extras *x, int n) {
    family(out, "stepwatch_judged_steps_total", "counter",
           "Steps judged against the running median step (docs/slow-steps.md).");
    for (int i = 0; i < n; i++) {
        fprintf(out, "stepwatch_judged_steps_total{rank=\"%d\"}", x[i].rank);
        value(out, (double)x[i].slow.judged);
    }
    family(out, "stepwatch_slow_steps_total", "counter", "Slow steps, by their cause.");
    for (int i = 0; i < n; i++)
        for (int c = SW_CAUSE_NONE + 1; c < SW_CAUSE_COUNT; c++) {
            fprintf(out, "stepwatch_slow_steps_total{rank=\"%d\",cause=\"%s\"}", x[i].rank,
                    sw_cause_name((sw_cause)c));
            value(out, (double)x[i].slow.by_cause[c]);
        }
    family(out, "stepwatch_slow_step_excess_seconds_total", "counter",
           "Time the slow steps took over their running medians.");
    for (int i = 0; i < n; i++) {
        fprintf(out, "stepwatch_slow_step_excess_seconds_total{rank=\"%d\"}", x[i].rank);
        value(out, (double)x[i].slow.excess_ns / 1e9);
    }
}

/* The efficiency figures a rank noted; a family only when some rank has it. */
static void write_efficiency(FILE *out, const rank_extras *x, int n) {
    for (int k = 0; k < NEFF; k++) {
        int any = 0;
        for (int i = 0; i < n && !any; i++)
            any = !isnan(x[i].eff[k]);
        if (!any)
            continue;
        family(out, eff_notes[k].metric, "gauge", eff_notes[k].help);
        for (int i = 0; i < n; i++) {
            if (isnan(x[i].eff[k]))
                continue;
            fprintf(out, "%s{rank=\"%d\"", eff_notes[k].metric, x[i].rank);
            if (k == EFF_PEAK) {
                fputs(",device=\"", out);
                label_value(out, x[i].device);
                fputs("\",dtype=\"", out);
                label_value(out, x[i].dtype);
                fputc('"', out);
            }
            fputc('}', out);
            value(out, x[i].eff[k]);
        }
    }
}

static int write_extras(FILE *out, sw_run *run) {
    rank_extras *x = NULL;
    int n = 0;
    int rc = read_extras(run, &x, &n);
    if (rc == 0) {
        write_slow(out, x, n);
        write_efficiency(out, x, n);
    }
    free(x);
    return rc;
}

static void write_run(FILE *out, sw_run *run, const sw_snapshot *s) {
    family(out, "stepwatch_run_info", "gauge", "The run: its name and host (value 1).");
    fputs("stepwatch_run_info{name=\"", out);
    label_value(out, s->name ? s->name : "stepwatch");
    fputs("\",host=\"", out);
    label_value(out, s->host);
    fputs("\"}", out);
    value(out, 1);
    int incomplete = sw_run_incomplete(run, NULL, 0);
    family(out, "stepwatch_run_complete", "gauge",
           "1 once every rank completed its file (the run ended), else 0.");
    fputs("stepwatch_run_complete", out);
    value(out, incomplete == 0);
    family(out, "stepwatch_elapsed_seconds", "gauge", "Time the run file covers.");
    fputs("stepwatch_elapsed_seconds", out);
    value(out, (double)s->elapsed_ns / 1e9);
    family(out, "stepwatch_dropped_events_total", "counter", "Timeline events dropped (counted).");
    fputs("stepwatch_dropped_events_total", out);
    value(out, (double)s->dropped_events);
}

SW_API int sw_metrics_write(sw_run *run, FILE *out) {
    if (!run || !out)
        return SW_EINVAL;
    sw_snapshot *snap = NULL;
    int rc = sw_run_snapshot(run, &snap);
    if (rc != 0)
        return rc;
    metrics_ctx m = {.last = -1};
    m.ranks = calloc(METRICS_RANKS, sizeof *m.ranks);
    rc = m.ranks ? sw_run_foreach_step(run, -1, sum_step, &m) : SW_ENOMEM;
    if (rc == 0)
        rc = sw_run_foreach_step(run, -1, count_window, &m);
    if (rc == 0) {
        write_run(out, run, snap);
        write_counts(out, &m);
        write_steady(out, &m);
        write_ranks(out, run);
        rc = write_extras(out, run);
    }
    free(m.ranks);
    sw_snapshot_free(snap);
    return rc == 0 && ferror(out) ? SW_EIO : rc;
}
