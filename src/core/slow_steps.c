/*
 * slow_steps.c — the one statement of what a slow step is and why it was slow
 * (docs/slow-steps.md): the rule (sw_step_is_slow), the causes and their names, the choice of
 * one cause from a step's signals (sw_slow_cause), its line of evidence, and the running
 * median the recorder judges steps against.
 */
#include "core.h"
#include "slow_steps.h"

#include <string.h>

/* Page faults explain a step only when there were this many: a few are every step's. */
#define SW__FAULTS_MIN 64u

static const char *const cause_names[SW_CAUSE_COUNT] = {
    "",          "unknown", "gc",        "compile", "checkpoint", "eval",     "data", "page_faults",
    "preempted", "blocked", "allocator", "steal",   "sync",       "throttled"};

const char *sw_cause_name(sw_cause cause) {
    return (unsigned)cause < SW_CAUSE_COUNT ? cause_names[cause] : NULL;
}

sw_cause sw__cause_parse(const char *name) {
    for (int c = 1; name && c < SW_CAUSE_COUNT; c++)
        if (strcmp(name, cause_names[c]) == 0)
            return (sw_cause)c;
    return SW_CAUSE_UNKNOWN; /* a cause this stepwatch does not know */
}

sw_cause sw_cause_of(const char *name) {
    if (name == NULL)
        return SW_CAUSE_NONE;
    if (strcmp(name, "compile") == 0)
        return SW_CAUSE_COMPILE;
    if (strcmp(name, "checkpoint") == 0)
        return SW_CAUSE_CHECKPOINT;
    if (strcmp(name, "evaluate") == 0 || strcmp(name, "valid") == 0)
        return SW_CAUSE_EVAL;
    if (strcmp(name, "sync") == 0 || strncmp(name, "sync ", 5) == 0)
        return SW_CAUSE_SYNC;
    return SW_CAUSE_NONE;
}

int sw_step_is_slow(uint64_t duration_ns, uint64_t median_ns) {
    return median_ns > 0 && (double)duration_ns >= SW_SLOW_FACTOR * (double)median_ns &&
           duration_ns >= median_ns + SW_SLOW_FLOOR_NS;
}

static uint64_t at_most(uint64_t v, uint64_t cap) {
    return v < cap ? v : cap;
}

/* The reading may cover a few steps before this one, which ran on the CPU. */
uint64_t sw_step_off_cpu_ns(const sw_step_record *r) {
    const sw_step_signals *g = &r->signals;
    if (g->os_wall_ns == 0 || g->os_wall_ns <= g->cpu_ns)
        return 0;
    return at_most(g->os_wall_ns - g->cpu_ns, r->duration_ns);
}

/* The reading may cover steps before this one, which were not slow: their off-CPU time is
 * mostly preemption (a loaded machine's, spread over every step), rarely blocking, which is
 * what makes a step slow. So the reading's blocked time (its off-CPU time less the run
 * delay, and less the time stolen) goes to this step first, and the rest of the step's
 * off-CPU time was runnable (or stolen: another had the CPU either way). */
uint64_t sw_step_runnable_ns(const sw_step_record *r) {
    const sw_step_signals *g = &r->signals;
    uint64_t off = sw_step_off_cpu_ns(r);
    if (!g->has_runnable)
        return g->involuntary_switches > g->voluntary_switches ? off : 0;
    uint64_t reading_off = g->os_wall_ns > g->cpu_ns ? g->os_wall_ns - g->cpu_ns : 0;
    uint64_t blocked = reading_off > g->runnable_ns ? reading_off - g->runnable_ns : 0;
    /* Time the hypervisor stole is neither run nor run delay to the guest's scheduler: off
     * that blocked time, at the sampler's steal share (nanoGPT on this VM: "blocked" 421 ms
     * with 3 voluntary switches while the machine's steal was 26 %). */
    uint64_t stolen = (uint64_t)((double)g->os_wall_ns * g->steal_permille / 1000.0);
    blocked = blocked > stolen ? blocked - stolen : 0;
    return off - at_most(blocked, off);
}

/* Nothing the program timed explains the step's excess: the allocator, if it retried or ran
 * out in the step (its time is not measured: it explains the excess the OS does not call
 * preemption, since a retry frees the cache and waits for the device); else how the thread
 * lost the time, if the OS says (preempted when the runnable part of the off-CPU time is the
 * larger, blocked otherwise); else the machine's steal (the share of the step the hypervisor
 * took, at the sampler's latest share); else unknown. */
static sw_cause unexplained_cause(const sw_step_record *r, uint64_t excess, uint64_t off,
                                  uint64_t taken, uint64_t *ns) {
    const sw_step_signals *g = &r->signals;
    *ns = excess > taken ? excess - taken : 0;
    if ((g->alloc_retries > 0 || g->ooms > 0) && 2 * *ns >= excess)
        return SW_CAUSE_ALLOCATOR;
    *ns = off;
    if (off > 0 && 2 * off >= excess)
        return 2 * taken > off ? SW_CAUSE_PREEMPTED : SW_CAUSE_BLOCKED;
    *ns = (uint64_t)((double)r->duration_ns * g->steal_permille / 1000.0);
    if (g->steal_permille > 0 && 2 * *ns >= excess)
        return SW_CAUSE_STEAL;
    *ns = 0;
    return SW_CAUSE_UNKNOWN;
}

/* A GPU that slowed its clocks in the step is why the host waited for it: it takes a step
 * whose cause is a synchronizing call, blocking or unknown (then if the excess less the
 * preempted time is half), explaining what the cause did. */
static sw_cause throttled_cause(const sw_step_record *r, sw_cause cause, uint64_t excess,
                                uint64_t taken, uint64_t *ns) {
    if ((r->signals.clock_reasons & SW_CLOCK_SLOWDOWN_MASK) == 0)
        return cause;
    if (cause == SW_CAUSE_SYNC || cause == SW_CAUSE_BLOCKED)
        return SW_CAUSE_THROTTLED;
    uint64_t rest = excess > taken ? excess - taken : 0;
    if (cause == SW_CAUSE_UNKNOWN && 2 * rest >= excess) {
        *ns = rest;
        return SW_CAUSE_THROTTLED;
    }
    return cause;
}

sw_cause sw_slow_cause(const sw_step_record *r, uint64_t typical_data_ns, uint64_t *explained) {
    if (explained)
        *explained = 0;
    if (r == NULL || !sw_step_is_slow(r->duration_ns, r->median_ns))
        return SW_CAUSE_NONE;
    const sw_step_signals *g = &r->signals;
    uint64_t excess = r->duration_ns - r->median_ns;
    /* Off the CPU, and of it preempted. A span that ran while the thread was preempted is
     * as long as the preemption made it: the program's causes explain their time less the
     * preempted time. */
    uint64_t off = sw_step_off_cpu_ns(r);
    uint64_t taken = sw_step_runnable_ns(r);
    uint64_t data = r->category_ns[SW_CAT_DATA];
    uint64_t faults = g->minor_faults + g->major_faults;
    uint64_t data_excess = data > typical_data_ns ? data - typical_data_ns : 0;
    /* Major faults wait off the CPU, for the disk; but a wait inside a named span (a save
     * whose writes faulted) is that span's: only the off-CPU time the spans do not cover. */
    uint64_t spans_ns = g->gc_ns + g->compile_ns + g->checkpoint_ns + g->eval_ns + g->sync_ns +
                        data_excess;
    uint64_t fault_ns = 0;
    if (faults >= SW__FAULTS_MIN || g->major_faults > 0)
        fault_ns = at_most(g->sys_ns, r->duration_ns) +
                   (g->major_faults && off > spans_ns ? off - spans_ns : 0);
    /* The causes the step's own spans and the collector name, in the order a tie goes. */
    const struct {
        sw_cause cause;
        uint64_t ns;
    } named[] = {{SW_CAUSE_GC, g->gc_ns},
                 {SW_CAUSE_COMPILE, g->compile_ns},
                 {SW_CAUSE_CHECKPOINT, g->checkpoint_ns},
                 {SW_CAUSE_EVAL, g->eval_ns},
                 {SW_CAUSE_SYNC, g->sync_ns},
                 {SW_CAUSE_DATA, data_excess},
                 {SW_CAUSE_PAGE_FAULTS, fault_ns}};
    sw_cause best = SW_CAUSE_UNKNOWN;
    uint64_t best_ns = 0;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        /* Page faults' kernel time is CPU time, which a preemption does not lengthen. */
        uint64_t less = named[i].cause == SW_CAUSE_PAGE_FAULTS && !g->major_faults ? 0 : taken;
        uint64_t ns = named[i].ns > less ? named[i].ns - less : 0;
        if (ns > best_ns) {
            best = named[i].cause;
            best_ns = ns;
        }
    }
    if (2 * best_ns < excess)
        best = unexplained_cause(r, excess, off, taken, &best_ns);
    best = throttled_cause(r, best, excess, taken, &best_ns);
    if (explained)
        *explained = best == SW_CAUSE_UNKNOWN ? 0 : at_most(best_ns, r->duration_ns);
    return best;
}

/* ---- the running median ---------------------------------------------------------------- */

void sw__median_add(sw__median *m, uint64_t value) {
    uint32_t n = m->n;
    if (n == SW__MEDIAN_WINDOW) {
        /* Take the oldest value out of the sorted copy. */
        uint64_t old = m->ring[m->next];
        uint32_t i = 0;
        while (i < n && m->sorted[i] != old)
            i++;
        memmove(&m->sorted[i], &m->sorted[i + 1], (n - i - 1) * sizeof m->sorted[0]);
        n--;
    }
    uint32_t j = n;
    while (j > 0 && m->sorted[j - 1] > value) {
        m->sorted[j] = m->sorted[j - 1];
        j--;
    }
    m->sorted[j] = value;
    m->ring[m->next] = value;
    m->next = (m->next + 1) % SW__MEDIAN_WINDOW;
    m->n = n + 1;
}

uint64_t sw__median_get(const sw__median *m) {
    if (m->n < SW_SLOW_MIN_HISTORY)
        return 0;
    return m->sorted[m->n / 2];
}
