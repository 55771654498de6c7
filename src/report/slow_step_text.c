/*
 * slow_step_text.c — a slow step's line of evidence (sw_slow_step_text): its time, the
 * median it was judged against, its cause (sw_slow_cause, core/slow_steps.c) and the
 * figures behind the cause; the line under the text reports' tables (sw__put_slow) and the
 * causes by count it and diagnose share.
 */
#include "writer.h"

#include <stdio.h>

/* A count with an SI suffix: "1.9 M", "410". */
static const char *count_text(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000)
        snprintf(buf, size, "%.1f M", (double)n / 1e6);
    else if (n >= 10000)
        snprintf(buf, size, "%.1f k", (double)n / 1e3);
    else
        snprintf(buf, size, "%llu", (unsigned long long)n);
    return buf;
}

/* ", load 20.3 on 2 CPUs" from the sampler's latest reading, "" without one. */
static const char *load_text(const sw_step_signals *g, char *buf, size_t size) {
    buf[0] = '\0';
    if (g->cpus > 0)
        snprintf(buf, size, ", load %.1f on %u CPUs", g->load_x100 / 100.0, g->cpus);
    return buf;
}

/* The evidence of the step's cause, after "step N: D (median M): ". */
static void cause_text(const sw_step_record *r, char *out, size_t size) {
    const sw_step_signals *g = &r->signals;
    char a[32], b[32];
    uint64_t off = sw_step_off_cpu_ns(r);
    switch (r->cause) {
    case SW_CAUSE_GC:
        snprintf(out, size, "gc generation %d, %s, %s objects", g->gc_generation,
                 sw_format_duration((double)g->gc_ns, a, sizeof a),
                 count_text(g->gc_collected, b, sizeof b));
        break;
    case SW_CAUSE_COMPILE:
        snprintf(out, size, "compiled, %s", sw_format_duration((double)g->compile_ns, a, sizeof a));
        break;
    case SW_CAUSE_CHECKPOINT:
        snprintf(out, size, "checkpoint, %s",
                 sw_format_duration((double)g->checkpoint_ns, a, sizeof a));
        break;
    case SW_CAUSE_EVAL:
        snprintf(out, size, "evaluation, %s", sw_format_duration((double)g->eval_ns, a, sizeof a));
        break;
    case SW_CAUSE_DATA:
        snprintf(out, size, "data wait %s",
                 sw_format_duration((double)r->category_ns[SW_CAT_DATA], a, sizeof a));
        break;
    case SW_CAUSE_PAGE_FAULTS:
        snprintf(out, size, "page faults: %s minor, %llu major, %s in the kernel",
                 count_text(g->minor_faults, a, sizeof a), (unsigned long long)g->major_faults,
                 sw_format_duration((double)g->sys_ns, b, sizeof b));
        break;
    case SW_CAUSE_PREEMPTED:
        snprintf(out, size, "preempted: %s off-CPU while runnable, %llu involuntary switches%s",
                 sw_format_duration((double)off, a, sizeof a),
                 (unsigned long long)g->involuntary_switches, load_text(g, b, sizeof b));
        break;
    case SW_CAUSE_ALLOCATOR:
        snprintf(out, size,
                 "CUDA allocator: %llu retries (cache freed, device synced), %llu out of memory",
                 (unsigned long long)g->alloc_retries, (unsigned long long)g->ooms);
        break;
    case SW_CAUSE_STEAL:
        snprintf(out, size, "steal: the hypervisor took %.1f %% of the machine's CPU time%s",
                 g->steal_permille / 10.0, load_text(g, b, sizeof b));
        break;
    case SW_CAUSE_BLOCKED:
        snprintf(out, size, "blocked: %s off-CPU, %llu voluntary switches",
                 sw_format_duration((double)off, a, sizeof a),
                 (unsigned long long)g->voluntary_switches);
        break;
    default:
        snprintf(out, size, "unknown (no signal explains half of the %s over the median)",
                 sw_format_duration((double)(r->duration_ns - r->median_ns), a, sizeof a));
        break;
    }
}

char *sw_slow_step_text(const sw_step_record *r, char *buf, size_t size) {
    if (buf == NULL || size == 0)
        return buf;
    buf[0] = '\0';
    if (r == NULL)
        return buf;
    char d[32], m[32], why[200];
    cause_text(r, why, sizeof why);
    snprintf(buf, size, "step %llu: %s (median %s): %s", (unsigned long long)r->step,
             sw_format_duration((double)r->duration_ns, d, sizeof d),
             sw_format_duration((double)r->median_ns, m, sizeof m), why);
    return buf;
}

/* "gc 30, preempted 5, unknown 2", largest first. */
void sw__slow_causes_text(const sw_slow_summary *s, char *out, size_t size) {
    int done[SW_CAUSE_COUNT] = {0};
    size_t len = 0;
    out[0] = '\0';
    for (;;) {
        int best = 0;
        for (int c = 1; c < SW_CAUSE_COUNT; c++)
            if (!done[c] && s->by_cause[c] > 0 && (!best || s->by_cause[c] > s->by_cause[best]))
                best = c;
        if (!best || len >= size)
            return;
        done[best] = 1;
        len += (size_t)snprintf(out + len, size - len, "%s%s %llu", len ? ", " : "",
                                sw_cause_name((sw_cause)best),
                                (unsigned long long)s->by_cause[best]);
    }
}

uint64_t sw__all_step_ns(const sw_snapshot *s) {
    const sw_row *r = sw_snapshot_find(s, "step", "all");
    return r ? r->stats.total_ns + r->warmup.total_ns : 0;
}

void sw__put_slow(const sw_snapshot *s, FILE *out, const char *bullet) {
    const sw_slow_summary *slow = &s->slow;
    if (slow->slow == 0)
        return;
    uint64_t total = sw__all_step_ns(s);
    char causes[256];
    sw__slow_causes_text(slow, causes, sizeof causes);
    fprintf(out, "\n%sSlow steps: %llu (%.1f %% of steps, %.1f %% of time): %s\n", bullet,
            (unsigned long long)slow->slow,
            slow->judged ? (double)slow->slow / (double)slow->judged * 100.0 : 0.0,
            total ? (double)slow->slow_ns / (double)total * 100.0 : 0.0, causes);
}
