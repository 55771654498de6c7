/*
 * slow_step_text.c — a slow step's line of evidence (sw_slow_step_text): its time, the
 * median it was judged against, its cause (sw_slow_cause, core/slow_steps.c) and the
 * figures behind the cause; the line under the text reports' tables (sw__put_slow) and the
 * causes by count it and diagnose share.
 */
#include "writer.h"

#include <stdio.h>
#include <string.h>

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

/* The runnable part of the off-CPU time (sw_step_runnable_ns); a step called preempted
 * without schedstat was all runnable. */
static uint64_t runnable_of(const sw_step_record *r, uint64_t off) {
    if (r->signals.has_runnable)
        return sw_step_runnable_ns(r);
    return r->cause == SW_CAUSE_PREEMPTED ? off : 0;
}

/* ", 12 ms blocked" / ", 3 ms runnable": the other part of the off-CPU time, when read. */
static const char *blocked_text(const sw_step_record *r, uint64_t off, char *buf, size_t size) {
    char d[32];
    buf[0] = '\0';
    if (r->signals.has_runnable && off > runnable_of(r, off))
        snprintf(buf, size, ", %s blocked",
                 sw_format_duration((double)(off - runnable_of(r, off)), d, sizeof d));
    return buf;
}

static const char *runnable_text(const sw_step_record *r, uint64_t off, char *buf, size_t size) {
    char d[32];
    buf[0] = '\0';
    if (runnable_of(r, off) > 0)
        snprintf(buf, size, " (%s more runnable)",
                 sw_format_duration((double)runnable_of(r, off), d, sizeof d));
    return buf;
}

/* ", counted over 40.1 ms with the steps before it": the OS is read at most so often, so a
 * reading's counts (faults, switches, kernel time) may cover steps before this one; said
 * when the reading is a quarter longer than the step. */
static const char *reading_text(const sw_step_record *r, char *buf, size_t size) {
    char d[32];
    buf[0] = '\0';
    uint64_t wall = r->signals.os_wall_ns;
    if (wall > r->duration_ns + r->duration_ns / 4)
        snprintf(buf, size, ", counted over %s with the steps before it",
                 sw_format_duration((double)wall, d, sizeof d));
    return buf;
}

/* "sync .item()" is the action; the evidence names the call: ".item()". */
static const char *sync_call_text(const sw_step_signals *g) {
    if (strncmp(g->sync_call, "sync ", 5) == 0)
        return g->sync_call + 5;
    return g->sync_call[0] ? g->sync_call : "synchronizing calls";
}

/* "thermal, power cap": the slowdown reasons among NVML's bits. */
static const char *clock_reasons_text(uint64_t reasons, char *buf, size_t size) {
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {{SW_CLOCK_SW_THERMAL | SW_CLOCK_HW_THERMAL, "thermal"},
                 {SW_CLOCK_POWER_CAP, "power cap"},
                 {SW_CLOCK_POWER_BRAKE, "power brake"},
                 {SW_CLOCK_HW_SLOWDOWN, "hardware slowdown"}};
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0] && len < size; i++)
        if (reasons & names[i].bit)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", names[i].name);
    return buf;
}

/* The evidence of the step's cause, after "step N: D (median M): ". */
static void cause_text(const sw_step_record *r, char *out, size_t size) {
    const sw_step_signals *g = &r->signals;
    char a[32], b[32], c[64], read[80];
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
        if (g->checkpoint_bytes > 0 && g->checkpoint_ns > 0) { /* "..., 96.0 MiB at 317 MiB/s" */
            size_t used = strlen(out);
            sw__format_bytes((int64_t)g->checkpoint_bytes, b, sizeof b);
            sw__format_bytes(
                (int64_t)((double)g->checkpoint_bytes * 1e9 / (double)g->checkpoint_ns), c,
                sizeof c);
            snprintf(out + used, size > used ? size - used : 0, ", %s at %s/s", b, c);
        }
        break;
    case SW_CAUSE_EVAL:
        snprintf(out, size, "evaluation, %s", sw_format_duration((double)g->eval_ns, a, sizeof a));
        break;
    case SW_CAUSE_DATA:
        snprintf(out, size, "data wait %s",
                 sw_format_duration((double)r->category_ns[SW_CAT_DATA], a, sizeof a));
        break;
    case SW_CAUSE_PAGE_FAULTS:
        snprintf(out, size, "page faults: %s minor, %llu major, %s in the kernel%s",
                 count_text(g->minor_faults, a, sizeof a), (unsigned long long)g->major_faults,
                 sw_format_duration((double)g->sys_ns, b, sizeof b),
                 reading_text(r, read, sizeof read));
        break;
    case SW_CAUSE_PREEMPTED:
        snprintf(out, size, "preempted: %s off-CPU while runnable%s, %llu involuntary switches%s%s",
                 sw_format_duration((double)runnable_of(r, off), a, sizeof a),
                 blocked_text(r, off, c, sizeof c), (unsigned long long)g->involuntary_switches,
                 reading_text(r, read, sizeof read), load_text(g, b, sizeof b));
        break;
    case SW_CAUSE_SYNC:
        snprintf(out, size, "sync: blocked %s in %s",
                 sw_format_duration((double)g->sync_ns, a, sizeof a), sync_call_text(g));
        break;
    case SW_CAUSE_THROTTLED:
        snprintf(out, size, "throttled: the GPU slowed its clocks (%s)%s%s%s",
                 clock_reasons_text(g->clock_reasons, c, sizeof c), g->sync_ns ? ", blocked " : "",
                 g->sync_ns ? sw_format_duration((double)g->sync_ns, a, sizeof a) : "",
                 g->sync_ns ? " in synchronizing calls" : "");
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
        snprintf(out, size, "blocked: %s off-CPU, not runnable%s, %llu voluntary switches%s",
                 sw_format_duration((double)(off - runnable_of(r, off)), a, sizeof a),
                 runnable_text(r, off, c, sizeof c), (unsigned long long)g->voluntary_switches,
                 reading_text(r, read, sizeof read));
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
    char d[32], m[32], why[256];
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
