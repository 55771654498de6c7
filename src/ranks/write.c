/*
 * write.c — the cross-rank view as text, markdown or JSON (sw_ranks_write).
 */
#include "ranks.h"
#include "report/json_out.h"
#include "report/writer.h"

#include <math.h>
#include <string.h>

static const char *dur(double ns, char *buf, size_t size) {
    return sw_format_duration(ns, buf, size);
}

/* "48.3 ms (rank 2)" */
static const char *at_rank(double ns, int rank, char *buf, size_t size) {
    char d[32];
    snprintf(buf, size, "%s (rank %d)", dur(ns, d, sizeof d), rank);
    return buf;
}

static void write_missing(const sw_ranks *r, FILE *out) {
    fprintf(out, "Did not answer: rank%s", r->nmissing > 1 ? "s" : "");
    for (int i = 0; i < r->nmissing; i++)
        fprintf(out, "%s %d", i ? "," : "", r->missing[i]);
    fputs(" (ended early, died, or past the aggregation's timeout).\n", out);
}

/* One sentence per straggler: "rank 1 (host, local rank 1): ..." */
static void write_straggler(const sw_rank_straggler *s, FILE *out) {
    char host[SW__LABEL_MAX], a[32], b[32], c[32];
    sw__text_clean(s->host, host, sizeof host);
    fprintf(out, "rank %d (%s, local rank %d): %s more per step than the other ranks' median; ",
            s->rank, host[0] ? host : "?", s->local_rank, dur(s->excess_ns, a, sizeof a));
    switch (s->blame) {
    case SW_BLAME_DATA:
        fprintf(out, "blame: data (its data wait is %s longer, %s per step)",
                dur(s->blame_ns, b, sizeof b), dur(s->data_ns, c, sizeof c));
        break;
    case SW_BLAME_COMPUTE:
        fprintf(out, "blame: compute (its own work is %s longer, %s per step",
                dur(s->blame_ns, b, sizeof b), dur(s->compute_ns, c, sizeof c));
        if (s->part)
            fprintf(out, "; %s grew most, by %s", s->part, dur(s->part_ns, a, sizeof a));
        fputc(')', out);
        break;
    default:
        fprintf(out, "blame: collectives (its time in collectives is %s longer, %s per step)",
                dur(s->blame_ns, b, sizeof b), dur(s->collective_ns, c, sizeof c));
        break;
    }
}

char *sw_ranks_wait_sentence(const sw_ranks *r, char *buf, size_t size) {
    if (buf == NULL || size == 0)
        return buf;
    buf[0] = '\0';
    if (r == NULL || r->wait_op == NULL)
        return buf;
    char d[32], op[SW__LABEL_MAX];
    sw__text_clean(r->wait_op, op, sizeof op); /* an op name is the program's text */
    /* "the other 7 ranks" when every other rank waits, else "5 other ranks" */
    char who[48];
    int n = r->waiting_ranks, all = n == (int)r->nrows - 1;
    if (all && n == 1)
        snprintf(who, sizeof who, "the other rank");
    else if (all)
        snprintf(who, sizeof who, "the other %d ranks", n);
    else
        snprintf(who, sizeof who, "%d other rank%s", n, n == 1 ? "" : "s");
    snprintf(buf, size, "rank %d made %s wait %s per step in %s (its own blame: %s)", r->wait_rank,
             who, dur(r->wait_ns, d, sizeof d), op, sw_blame_name(r->wait_blame));
    return buf;
}

/* "2.41 GB/s" */
static const char *rate(double bytes_per_s, char *buf, size_t size) {
    static const char *const units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
    int u = 0;
    while (u < 4 && bytes_per_s >= 1000) {
        bytes_per_s /= 1000;
        u++;
    }
    snprintf(buf, size, "%.3g %s", bytes_per_s, units[u]);
    return buf;
}

/* The collectives by op: time inside per step across ranks, and the bandwidth where the
 * bytes are known (the slowest rank's and the median). */
static void write_ops(const sw_ranks *r, int markdown, FILE *out) {
    if (r->nops == 0)
        return;
    fputs("Collectives by op, time inside per step (bandwidth: bytes / time inside, the "
          "slowest rank's and the median):\n\n",
          out);
    if (markdown)
        fputs("| op | min | median | max | calls | slowest bandwidth | median bandwidth |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n",
              out);
    else
        fprintf(out, "%-16s %24s %12s %24s %10s %24s %12s\n", "op", "min", "median", "max", "calls",
                "slowest bandwidth", "median bw");
    for (size_t i = 0; i < r->nops; i++) {
        const sw_rank_op *op = &r->ops[i];
        char name[SW__LABEL_MAX], a[64], b[64], c[64], bw[64] = "-", mbw[32] = "-", t[32];
        sw__text_clean(op->name, name, sizeof name);
        at_rank(op->min_ns, op->min_rank, a, sizeof a);
        dur(op->median_ns, b, sizeof b);
        at_rank(op->max_ns, op->max_rank, c, sizeof c);
        if (op->bw_ranks > 0) {
            snprintf(bw, sizeof bw, "%s (rank %d)", rate(op->min_bw, t, sizeof t), op->min_bw_rank);
            rate(op->median_bw, mbw, sizeof mbw);
        }
        if (markdown)
            fprintf(out, "| %s | %s | %s | %s | %llu | %s | %s |\n", name, a, b, c,
                    (unsigned long long)op->calls, bw, mbw);
        else
            fprintf(out, "%-16s %24s %12s %24s %10llu %24s %12s\n", name, a, b, c,
                    (unsigned long long)op->calls, bw, mbw);
    }
    if (r->ops_left_out > 0)
        fprintf(out, "(%d ops of ranks left out: more than %d distinct ops)\n", r->ops_left_out,
                SW_RANKS_MAX_OPS);
    fputc('\n', out);
}

/* "412 TFLOP/s", "366 kFLOP/s": FLOP/s with the prefix that fits. */
static const char *flops_si(double flops_per_s, char *buf, size_t size) {
    static const char *const prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
    int u = 0;
    while (u < 6 && flops_per_s >= 1000) {
        flops_per_s /= 1000;
        u++;
    }
    snprintf(buf, size, "%.3g %sFLOP/s", flops_per_s, prefixes[u]);
    return buf;
}

/* "FLOP/s per rank: 1.21 TFLOP/s (rank 1) to 1.62 TFLOP/s (rank 0), median 1.55 TFLOP/s; the
 * job 12.3 TFLOP/s over 8 ranks; MFU 38.0 % (rank 1) to 41.6 % (rank 0)." */
static void write_flops(const sw_ranks *r, FILE *out) {
    const sw_rank_rate *t = &r->tflops, *m = &r->mfu;
    if (t->ranks == 0)
        return;
    char lo[32], hi[32], med[32], job[32];
    fprintf(
        out, "FLOP/s per rank: %s (rank %d) to %s (rank %d), median %s; the job %s over %d rank%s",
        flops_si(t->min * 1e12, lo, sizeof lo), t->min_rank, flops_si(t->max * 1e12, hi, sizeof hi),
        t->max_rank, flops_si(t->median * 1e12, med, sizeof med),
        flops_si(t->total * 1e12, job, sizeof job), t->ranks, t->ranks == 1 ? "" : "s");
    if (m->ranks > 0)
        fprintf(out, "; MFU %.3g %% (rank %d) to %.3g %% (rank %d)", 100 * m->min, m->min_rank,
                100 * m->max, m->max_rank);
    else
        fputs("; MFU unknown (no peak FLOP/s for the device)", out);
    fputs(".\n\n", out);
}

static void write_text(const sw_ranks *r, int markdown, int top, FILE *out) {
    char a[64], b[64], c[64];
    fprintf(out, "%sAcross ranks: %d of %d answered", markdown ? "### " : "", r->answered,
            r->world_size);
    const char *kind = r->phase[0] == 't' ? " training" : "";
    if (r->max_steps > 0 && r->min_steps == r->max_steps)
        fprintf(out, ", %llu steady%s steps each", (unsigned long long)r->max_steps, kind);
    else if (r->max_steps > 0)
        fprintf(out, ", %llu to %llu steady%s steps each", (unsigned long long)r->min_steps,
                (unsigned long long)r->max_steps, kind);
    fputs("; time per step, mean\n\n", out);
    if (markdown)
        fputs("| action | min | median | max | calls |\n|---|---:|---:|---:|---:|\n", out);
    else
        fprintf(out, "%-12s %24s %12s %24s %10s\n", "action", "min", "median", "max", "calls");
    for (size_t i = 0; i < r->nstats; i++) {
        const sw_rank_stat *st = &r->stats[i];
        if (st->ranks == 0)
            continue;
        at_rank(st->min_ns, st->min_rank, a, sizeof a);
        dur(st->median_ns, b, sizeof b);
        at_rank(st->max_ns, st->max_rank, c, sizeof c);
        char calls[24] = "-"; /* compute is derived: no calls of its own */
        if (strcmp(st->name, "compute") != 0)
            snprintf(calls, sizeof calls, "%llu", (unsigned long long)st->calls);
        if (markdown)
            fprintf(out, "| %s | %s | %s | %s | %s |\n", st->name, a, b, c, calls);
        else
            fprintf(out, "%-12s %24s %12s %24s %10s\n", st->name, a, b, c, calls);
    }
    fputc('\n', out);
    write_ops(r, markdown, out);
    write_flops(r, out);
    char wait[256];
    if (sw_ranks_wait_sentence(r, wait, sizeof wait)[0])
        fprintf(out, "%sWaiting: %s.\n\n", markdown ? "- " : "", wait);
    if (r->nstragglers == 0 && r->max_steps > 0 && r->answered > 1)
        fprintf(out,
                "No straggler: no rank's own work per step is %s longer than the other "
                "ranks' median.\n",
                dur(r->threshold_ns, a, sizeof a));
    for (size_t i = 0; i < r->nstragglers && (int)i < top; i++) {
        if (i == 0)
            fprintf(out, "Stragglers (worst first; threshold %s per step):\n",
                    dur(r->threshold_ns, a, sizeof a));
        fputs(markdown ? "- " : "  ", out);
        write_straggler(&r->stragglers[i], out);
        fputs(".\n", out);
    }
    if ((int)r->nstragglers > top)
        fprintf(out, "  ... and %zu more.\n", r->nstragglers - (size_t)top);
    if (r->answered > 1 && r->collective_ranks == 0)
        fputs("Collective waits were not measured: ranks that train in lockstep (DDP) all "
              "take the slowest one's step time, so stragglers cannot be told apart.\n",
              out);
    if (r->nmissing > 0)
        write_missing(r, out);
}

static void json_ns(sw__jw *w, const char *key, double ns) {
    sw__jw_kv_double(w, key, ns);
}

static void json_rate(sw__jw *w, const char *key, const sw_rank_rate *t) {
    sw__jw_key(w, key);
    if (t->ranks == 0) {
        sw__jw_null(w);
        return;
    }
    sw__jw_object_begin(w);
    sw__jw_kv_int(w, "ranks", t->ranks);
    sw__jw_kv_double(w, "min", t->min);
    sw__jw_kv_int(w, "min_rank", t->min_rank);
    sw__jw_kv_double(w, "median", t->median);
    sw__jw_kv_double(w, "max", t->max);
    sw__jw_kv_int(w, "max_rank", t->max_rank);
    sw__jw_kv_double(w, "total", t->total);
    sw__jw_object_end(w);
}

/* The collectives by op, the FLOP/s and the wait (the one line, and its numbers). */
static void json_ops_flops_wait(sw__jw *w, const sw_ranks *r) {
    sw__jw_key(w, "ops");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < r->nops; i++) {
        const sw_rank_op *op = &r->ops[i];
        int bw = op->bw_ranks > 0;
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "name", op->name);
        sw__jw_kv_int(w, "ranks", op->ranks);
        json_ns(w, "min_ns", op->min_ns);
        sw__jw_kv_int(w, "min_rank", op->min_rank);
        json_ns(w, "median_ns", op->median_ns);
        json_ns(w, "max_ns", op->max_ns);
        sw__jw_kv_int(w, "max_rank", op->max_rank);
        sw__jw_kv_uint(w, "calls", op->calls);
        sw__jw_kv_int(w, "bw_ranks", op->bw_ranks);
        sw__jw_kv_double(w, "bytes_per_step", bw ? op->bytes_per_step : NAN);
        sw__jw_kv_double(w, "min_bw", bw ? op->min_bw : NAN);
        sw__jw_kv_int(w, "min_bw_rank", bw ? op->min_bw_rank : -1);
        sw__jw_kv_double(w, "median_bw", bw ? op->median_bw : NAN);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_kv_int(w, "ops_left_out", r->ops_left_out);
    json_rate(w, "tflops", &r->tflops);
    json_rate(w, "mfu", &r->mfu);
    sw__jw_key(w, "wait");
    if (r->wait_op == NULL) {
        sw__jw_null(w);
        return;
    }
    char line[256];
    sw__jw_object_begin(w);
    sw__jw_kv_int(w, "rank", r->wait_rank);
    sw__jw_kv_string(w, "op", r->wait_op);
    json_ns(w, "wait_ns", r->wait_ns);
    sw__jw_kv_int(w, "waiting_ranks", r->waiting_ranks);
    sw__jw_kv_string(w, "blame", sw_blame_name(r->wait_blame));
    sw__jw_kv_string(w, "sentence", sw_ranks_wait_sentence(r, line, sizeof line));
    sw__jw_object_end(w);
}

static void write_json(const sw_ranks *r, FILE *out, int *rc) {
    sw__jw w;
    sw__jw_init(&w, out, 2);
    sw__jw_object_begin(&w);
    sw__jw_kv_int(&w, "world_size", r->world_size);
    sw__jw_kv_int(&w, "answered", r->answered);
    sw__jw_key(&w, "missing");
    sw__jw_array_begin(&w);
    for (int i = 0; i < r->nmissing; i++)
        sw__jw_int(&w, r->missing[i]);
    sw__jw_array_end(&w);
    sw__jw_kv_string(&w, "phase", r->phase);
    sw__jw_kv_uint(&w, "min_steps", r->min_steps);
    sw__jw_kv_uint(&w, "max_steps", r->max_steps);
    sw__jw_kv_int(&w, "collective_ranks", r->collective_ranks);
    json_ns(&w, "threshold_ns", r->threshold_ns);
    sw__jw_key(&w, "actions");
    sw__jw_array_begin(&w);
    for (size_t i = 0; i < r->nstats; i++) {
        const sw_rank_stat *st = &r->stats[i];
        sw__jw_object_begin(&w);
        sw__jw_kv_string(&w, "name", st->name);
        sw__jw_kv_int(&w, "ranks", st->ranks);
        json_ns(&w, "min_ns", st->min_ns);
        sw__jw_kv_int(&w, "min_rank", st->min_rank);
        json_ns(&w, "median_ns", st->median_ns);
        json_ns(&w, "max_ns", st->max_ns);
        sw__jw_kv_int(&w, "max_rank", st->max_rank);
        sw__jw_kv_uint(&w, "calls", st->calls);
        json_ns(&w, "p99_max_ns", st->p99_max_ns);
        sw__jw_kv_int(&w, "p99_max_rank", st->p99_max_rank);
        sw__jw_object_end(&w);
    }
    sw__jw_array_end(&w);
    sw__jw_key(&w, "stragglers");
    sw__jw_array_begin(&w);
    for (size_t i = 0; i < r->nstragglers; i++) {
        const sw_rank_straggler *s = &r->stragglers[i];
        sw__jw_object_begin(&w);
        sw__jw_kv_int(&w, "rank", s->rank);
        sw__jw_kv_int(&w, "local_rank", s->local_rank);
        sw__jw_kv_string(&w, "host", s->host);
        json_ns(&w, "excess_ns", s->excess_ns);
        sw__jw_kv_string(&w, "blame", sw_blame_name(s->blame));
        json_ns(&w, "blame_ns", s->blame_ns);
        sw__jw_kv_string(&w, "part", s->part);
        json_ns(&w, "part_ns", s->part_ns);
        json_ns(&w, "step_ns", s->step_ns);
        json_ns(&w, "data_ns", s->data_ns);
        json_ns(&w, "compute_ns", s->compute_ns);
        json_ns(&w, "collective_ns", s->collective_ns);
        sw__jw_object_end(&w);
    }
    sw__jw_array_end(&w);
    json_ops_flops_wait(&w, r);
    sw__jw_object_end(&w);
    *rc = sw__jw_finish(&w);
}

int sw_ranks_write(const sw_ranks *r, sw_format fmt, int top, FILE *out) {
    if (r == NULL || out == NULL)
        return SW_EINVAL;
    if (top <= 0)
        top = 3;
    int rc = 0;
    switch (fmt) {
    case SW_FORMAT_TABLE:
    case SW_FORMAT_MARKDOWN:
        write_text(r, fmt == SW_FORMAT_MARKDOWN, top, out);
        break;
    case SW_FORMAT_JSON:
        write_json(r, out, &rc);
        break;
    default:
        return SW_EFORMAT;
    }
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = SW_EIO;
    return rc;
}
