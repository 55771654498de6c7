/*
 * efficiency_phases.c — the FLOPs, FLOP/s and MFU of each phase of the training step
 * (forward, backward, optimizer) under the text report's efficiency line, and the same as the
 * JSON report's "efficiency" object.
 *
 * The figures are the notes python/stepwatch/flops.py writes: flops_PHASE (per step),
 * tflops_PHASE (against that phase's own host time per steady step) and mfu_PHASE (forward
 * and backward, where the device's peak is known). The optimizer's FLOPs are elementwise,
 * not model FLOPs: it has no MFU. With flops_per_batch (one figure for the whole step) there
 * is no split, so no block.
 *
 * Where the run has device time (docs/device.md: counters "device:train/PHASE" in ns, one
 * sample per timed call, "device:train/step" one per timed step), each phase also gets its
 * rate on device time: FLOPs per step over the phase's GPU time per timed step, the sum of
 * its samples over the timed steps (as diagnose_device.c reads them), beside the host rate.
 */
#include "writer.h"

#include <stdlib.h>
#include <string.h>

static const char *const phases[] = {"forward", "backward", "optimizer"};
#define NPHASES (sizeof phases / sizeof phases[0])

/* The note "KEY_PHASE" as a number; 0 when there is none or it is not one. */
static int note_number(const sw_snapshot *s, const char *key, const char *phase, double *out) {
    char name[64];
    snprintf(name, sizeof name, "%s_%s", key, phase);
    const char *text = sw_snapshot_note(s, name);
    if (text == NULL)
        return 0;
    char *end;
    *out = strtod(text, &end);
    return end != text && *end == '\0';
}

/* The phase's GPU time per timed train step (ns), from the device counters; 0 without. */
static double device_ns_per_step(const sw_snapshot *s, const char *phase) {
    char name[64];
    snprintf(name, sizeof name, "device:train/%s", phase);
    const sw_counter_summary *steps = NULL, *own = NULL;
    for (size_t i = 0; i < s->ncounters; i++) {
        const char *n = s->counters[i].name;
        if (n != NULL && strcmp(n, "device:train/step") == 0)
            steps = &s->counters[i];
        else if (n != NULL && strcmp(n, name) == 0)
            own = &s->counters[i];
    }
    if (steps == NULL || own == NULL || steps->count == 0 || own->count == 0)
        return 0;
    return own->mean * (double)own->count / (double)steps->count;
}

/* The phase's FLOP/s and MFU on device time (0 / -1 where unknown). 0: no device time. */
static int device_rates(const sw_snapshot *s, size_t phase, double flops, double *rate,
                        double *mfu) {
    double ns = device_ns_per_step(s, phases[phase]), peak;
    if (ns <= 0)
        return 0;
    *rate = flops / ns * 1e9;
    *mfu = -1;
    const char *text = sw_snapshot_note(s, "peak_flops");
    char *end;
    if (text != NULL && phase != NPHASES - 1 && (peak = strtod(text, &end)) > 0 && *end == '\0')
        *mfu = *rate / peak;
    return 1;
}

/* "373 M", "6.87 G": three significant digits and an SI prefix (chosen after the rounding:
 * 999.96 G is "1 T", never "1e+03 G"). */
static void si(double v, char *out, size_t size) {
    static const struct {
        double scale;
        const char *prefix;
    } units[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    char rounded[32];
    snprintf(rounded, sizeof rounded, "%.3g", v);
    v = strtod(rounded, NULL);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (v >= units[i].scale) {
            snprintf(out, size, "%.3g %s", v / units[i].scale, units[i].prefix);
            return;
        }
    snprintf(out, size, "%.3g ", v);
}

/* "41.6 %", or what stands for an unknown MFU: "n/a" for the optimizer (not model FLOPs),
 * "-" with a peak (no rate), "unknown" without one. */
static void mfu_cell(double mfu, size_t phase, int peak, char *out, size_t size) {
    if (mfu >= 0)
        snprintf(out, size, "%.1f %%", 100.0 * mfu);
    else
        snprintf(out, size, "%s", phase == NPHASES - 1 ? "n/a" : peak ? "-" : "unknown");
}

void sw__put_efficiency_phases(const sw_snapshot *s, FILE *out) {
    double flops, rate, mfu;
    if (!note_number(s, "flops", "forward", &flops))
        return; /* nothing counted per phase */
    int device = 0;
    for (size_t i = 0; i < NPHASES; i++)
        if (note_number(s, "flops", phases[i], &flops))
            device |= device_rates(s, i, flops, &rate, &mfu);
    fprintf(out, "efficiency per phase (%s):\n  %-10s %12s %12s %9s",
            device ? "host and device time" : "host time", "phase", "FLOP/step", "FLOP/s", "MFU");
    fprintf(out, device ? " %12s %9s\n" : "\n", "FLOP/s dev", "MFU dev");
    int peak = sw_snapshot_note(s, "peak_flops") != NULL;
    for (size_t i = 0; i < NPHASES; i++) {
        if (!note_number(s, "flops", phases[i], &flops))
            continue;
        char per_step[32], per_s[32] = "-", share[32];
        si(flops, per_step, sizeof per_step);
        if (note_number(s, "tflops", phases[i], &rate))
            si(rate * 1e12, per_s, sizeof per_s);
        if (!note_number(s, "mfu", phases[i], &mfu))
            mfu = -1;
        mfu_cell(mfu, i, peak, share, sizeof share);
        fprintf(out, "  %-10s %12s %12s %9s", phases[i], per_step, per_s, share);
        if (device) {
            char dev_s[32] = "-", dev_share[32];
            if (device_rates(s, i, flops, &rate, &mfu))
                si(rate, dev_s, sizeof dev_s);
            else
                mfu = -1;
            mfu_cell(mfu, i, peak, dev_share, sizeof dev_share);
            fprintf(out, " %12s %9s", dev_s, dev_share);
        }
        fputc('\n', out);
    }
}

/* key: the number, or null where unknown (v < 0). */
static void kv_or_null(sw__jw *w, const char *key, double v) {
    sw__jw_key(w, key);
    if (v >= 0)
        sw__jw_double(w, v);
    else
        sw__jw_null(w);
}

void sw__json_put_efficiency(sw__jw *w, const sw_snapshot *s) {
    double v, rate, mfu;
    if (!note_number(s, "flops", "forward", &v))
        return;
    sw__jw_key(w, "efficiency");
    sw__jw_object_begin(w);
    sw__jw_key(w, "phases");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < NPHASES; i++) {
        double flops;
        if (!note_number(s, "flops", phases[i], &flops))
            continue;
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "phase", phases[i]);
        sw__jw_kv_double(w, "flops_per_step", flops);
        kv_or_null(w, "flops_per_s", note_number(s, "tflops", phases[i], &v) ? v * 1e12 : -1);
        kv_or_null(w, "mfu", note_number(s, "mfu", phases[i], &v) ? v : -1);
        if (device_rates(s, i, flops, &rate, &mfu)) { /* only where the run has device time */
            sw__jw_kv_double(w, "device_ns_per_step", device_ns_per_step(s, phases[i]));
            sw__jw_kv_double(w, "flops_per_s_device", rate);
            kv_or_null(w, "mfu_device", mfu);
        }
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}
