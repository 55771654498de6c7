/*
 * device_comm.c — a step's communication on the device and the part of it exposed
 * (include/stepwatch/device.h, "Communication on the device"), from the intervals and phases
 * the device timing recorded already (device_time.c, device_intervals.c).
 *
 * Once the GPU reached the step's events, every boundary that matters is read as an offset
 * from the step's begin event (one clock for all streams: cudaEventElapsedTime across
 * streams), and one sweep over the sorted ends measures two unions at once:
 *   comm     where any communication interval is open;
 *   exposed  where one is open and the device is not computing: no forward, loss, backward,
 *            optimizer or zero_grad span is open unless the step's stream is itself waiting
 *            for a collective there (a communication interval on it), and no compute
 *            interval on another stream is open.
 * The scratch the sweep sorts in grows as intervals begin, so resolving never allocates.
 * A boundary before the step's begin (a collective's stream ahead of a compute stream still
 * running the previous step) reads as the begin: the runtime's elapsed time is never
 * negative.
 */
#include "device_time.h"

#include <stdio.h>
#include <stdlib.h>

enum { SET_PHASE, SET_WAITING, SET_COMM, SET_COMPUTE_ELSEWHERE, NSETS };

int sw__dt_comm_room(sw__device_time *dt, const dt_step *s) {
    uint32_t need = 2 * (s->nswept + 1 + DT_SPANS);
    if (need <= dt->points_cap)
        return 0;
    uint32_t cap = dt->points_cap ? 2 * dt->points_cap : 4 * DT_SPANS;
    while (cap < need)
        cap *= 2;
    dt_point *points = realloc(dt->points, cap * sizeof *points);
    if (points == NULL)
        return -1;
    dt->points = points;
    dt->points_cap = cap;
    return 0;
}

/* The offset of event e from the step's begin: 0, 1 (not reached), < 0 (failed). */
static int offset_of(sw__device_time *dt, const dt_step *s, uint32_t e, uint64_t *at) {
    return sw__dt_elapsed(dt, s->spans[0].begin, e, at);
}

/* Points for [begin, end] in set: 0, or the runtime's 1 / < 0. */
static int add_pair(sw__device_time *dt, const dt_step *s, uint32_t *n, uint8_t set, uint32_t begin,
                    uint32_t end) {
    uint64_t a = 0, b = 0;
    int rc = offset_of(dt, s, begin, &a);
    if (rc == 0)
        rc = offset_of(dt, s, end, &b);
    if (rc != 0)
        return rc;
    if (b <= a)
        return 0; /* empty */
    dt->points[(*n)++] = (dt_point){.at = a, .set = set, .delta = 1};
    dt->points[(*n)++] = (dt_point){.at = b, .set = set, .delta = -1};
    return 0;
}

/* Shell sort by time (no allocation; a few hundred points a step at most, mostly in order). */
static void sort_points(dt_point *p, uint32_t n) {
    static const uint32_t gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t g = 0; g < sizeof gaps / sizeof *gaps; g++) {
        uint32_t gap = gaps[g];
        for (uint32_t i = gap; i < n; i++) {
            dt_point x = p[i];
            uint32_t j = i;
            for (; j >= gap && p[j - gap].at > x.at; j -= gap)
                p[j] = p[j - gap];
            p[j] = x;
        }
    }
}

/* The step's points: its phases' spans and its swept intervals. */
static int collect(sw__device_time *dt, const dt_step *s, uint32_t *n) {
    int rc = 0;
    for (uint32_t i = 1; rc == 0 && i < s->nspans; i++) {
        const dt_span *sp = &s->spans[i];
        if (sp->end != NO_EVENT && sp->what > SW_CAT_DATA && sp->what < SW_CAT_CALLBACK)
            rc = add_pair(dt, s, n, SET_PHASE, sp->begin, sp->end);
    }
    for (uint32_t i = 0; rc == 0 && i < s->nintervals; i++) {
        const dt_interval *v = &s->intervals[i];
        if (v->end == NO_EVENT || (!v->comm && v->stream == NULL))
            continue;
        if (v->comm && v->stream == NULL) /* the step's stream waits: in both unions */
            rc = add_pair(dt, s, n, SET_WAITING, v->begin, v->end);
        if (rc == 0)
            rc = add_pair(dt, s, n, v->comm ? SET_COMM : SET_COMPUTE_ELSEWHERE, v->begin, v->end);
    }
    return rc;
}

int sw__dt_comm_of(sw__device_time *dt, dt_step *s, uint64_t *comm_ns, uint64_t *exposed_ns) {
    *comm_ns = *exposed_ns = 0;
    if (s->nswept == 0) {
        *comm_ns = s->comm_extra_ns;
        return 0;
    }
    uint32_t n = 0;
    int rc = collect(dt, s, &n);
    if (rc != 0)
        return rc;
    sort_points(dt->points, n);
    int open[NSETS] = {0};
    for (uint32_t i = 0; i < n; i++) {
        if (i > 0 && open[SET_COMM] > 0) {
            uint64_t len = dt->points[i].at - dt->points[i - 1].at;
            int computing = (open[SET_PHASE] > 0 && open[SET_WAITING] == 0) ||
                            open[SET_COMPUTE_ELSEWHERE] > 0;
            *comm_ns += len;
            *exposed_ns += computing ? 0 : len;
        }
        open[dt->points[i].set] += dt->points[i].delta;
    }
    if (s->comm_extra_ns > *comm_ns) /* timed elsewhere: its waits are inside it */
        *comm_ns = s->comm_extra_ns;
    return 0;
}

void sw_device_comm_ns(sw_device_timing *dt, uint64_t ns) {
    dt_step *s = dt && !dt->stopped ? sw__dt_open_step(dt) : NULL;
    if (s != NULL)
        s->comm_extra_ns += ns;
}

void sw__dt_comm_sample(sw__device_time *dt, sw_phase phase, uint64_t comm_ns,
                        uint64_t exposed_ns) {
    static const char *const what[2] = {"comm", "comm_exposed"};
    const uint64_t ns[2] = {comm_ns, exposed_ns};
    for (int k = 0; k < 2; k++) {
        if (dt->comm_counter[phase][k] == SW_ID_NONE) {
            char name[SW__NAME_MAX + 1];
            const char *phase_name = sw_phase_name(dt->p, phase);
            snprintf(name, sizeof name, "device:%s/%s", phase_name ? phase_name : "none", what[k]);
            dt->comm_counter[phase][k] = sw_counter_id(dt->p, name);
        }
        if (dt->comm_counter[phase][k] != SW_ID_NONE)
            sw_counter(dt->p, dt->comm_counter[phase][k], (double)ns[k]);
    }
}
