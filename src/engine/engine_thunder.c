/*
 * engine_thunder.c — thunder's TimeProfiler keys over an engine's measurements.
 * "backward" and "optimizer step" come from the profiler (the processing function marks
 * them); the others from the engine's own loop timing.
 */
#include "engine_internal.h"

#include <string.h>

/* The order is the bit order of sw_time_profiler.keys; the first six are on by default. */
static const char *const sw__tp_keys[SW_TIME_PROFILER_KEY_COUNT] = {
    "train batch",          "validation batch",   "train epoch", "validation epoch",
    "avg train downtime",   "avg val downtime",   "backward",    "optimizer step",
    "total train downtime", "total val downtime",
};
#define SW__TP_DEFAULT_KEYS 0x3Fu

static int sw__tp_index(const char *key) {
    if (!key)
        return -1;
    for (int i = 0; i < SW_TIME_PROFILER_KEY_COUNT; i++)
        if (strcmp(key, sw__tp_keys[i]) == 0)
            return i;
    return -1;
}

void sw_time_profiler_init(sw_time_profiler *tp) {
    if (tp)
        tp->keys = SW__TP_DEFAULT_KEYS;
}

int sw_time_profiler_select(sw_time_profiler *tp, const char *const *keys, size_t n) {
    if (!tp || (n > 0 && !keys))
        return SW_EINVAL;
    uint32_t add = 0;
    for (size_t i = 0; i < n; i++) {
        int k = sw__tp_index(keys[i]);
        if (k < 0)
            return SW_EINVAL;
        add |= 1u << k;
    }
    tp->keys |= add;
    return 0;
}

const char *sw_time_profiler_key(size_t i) {
    return i < SW_TIME_PROFILER_KEY_COUNT ? sw__tp_keys[i] : NULL;
}

int sw_time_profiler_selected(const sw_time_profiler *tp, const char *key) {
    int k = sw__tp_index(key);
    return tp && k >= 0 && (tp->keys & (1u << k)) != 0;
}

/* Mean seconds of a stats block; SW_ENOTFOUND when empty. */
static int sw__mean_s(const sw_stats *s, double *out) {
    if (!s || s->count == 0)
        return SW_ENOTFOUND;
    *out = s->mean_ns / 1e9;
    return 0;
}

/* Mean seconds of action in the train phase, from a snapshot of the profiler. */
static int sw__action_mean_s(sw_engine *e, const char *action, double *out) {
    sw_snapshot *snap = NULL;
    int rc = sw_snapshot_take(e->profiler, &snap);
    if (rc < 0)
        return rc;
    const sw_row *row = sw_snapshot_find(snap, action, "train");
    rc = sw__mean_s(row ? &row->stats : NULL, out);
    sw_snapshot_free(snap);
    return rc;
}

int sw_time_profiler_value(const sw_time_profiler *tp, sw_engine *e, const char *key,
                           double *seconds) {
    int k = sw__tp_index(key);
    if (!tp || !e || !seconds || k < 0)
        return SW_EINVAL;
    switch (k) {
    case 0:
        return sw__mean_s(&e->measure[SW_MEASURE_PROCESSING], seconds);
    case 1:
        return sw__mean_s(&e->measure[SW_MEASURE_VALID_PROCESSING], seconds);
    case 2:
        return sw__mean_s(&e->measure[SW_MEASURE_TRAIN_EPOCH], seconds);
    case 3:
        return sw__mean_s(&e->measure[SW_MEASURE_VALID_EPOCH], seconds);
    case 4:
        return sw__mean_s(&e->measure[SW_MEASURE_DATAFLOW], seconds);
    case 5:
        return sw__mean_s(&e->measure[SW_MEASURE_VALID_DATAFLOW], seconds);
    case 6:
        return sw__action_mean_s(e, "backward", seconds);
    case 7:
        return sw__action_mean_s(e, "optimizer", seconds);
    case 8:
        return sw__mean_s(&e->measure[SW_MEASURE_TRAIN_DOWNTIME], seconds);
    default:
        return sw__mean_s(&e->measure[SW_MEASURE_VALID_DOWNTIME], seconds);
    }
}

int sw_time_profiler_write(const sw_time_profiler *tp, sw_engine *e, FILE *out) {
    if (!tp || !e || !out)
        return SW_EINVAL;
    for (int k = 0; k < SW_TIME_PROFILER_KEY_COUNT; k++) {
        if (!(tp->keys & (1u << k)))
            continue;
        double v = 0;
        int rc = sw_time_profiler_value(tp, e, sw__tp_keys[k], &v);
        if (rc == SW_ENOTFOUND)
            fprintf(out, "%-22s -\n", sw__tp_keys[k]);
        else if (rc < 0)
            return rc;
        else
            fprintf(out, "%-22s %.6f s\n", sw__tp_keys[k], v);
    }
    return ferror(out) ? SW_EIO : 0;
}
