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
 */
#include "writer.h"

#include <stdlib.h>

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

/* "373 M", "6.87 G": three significant digits and an SI prefix. */
static void si(double v, char *out, size_t size) {
    static const struct {
        double scale;
        const char *prefix;
    } units[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (v >= units[i].scale) {
            snprintf(out, size, "%.3g %s", v / units[i].scale, units[i].prefix);
            return;
        }
    snprintf(out, size, "%.3g ", v);
}

void sw__put_efficiency_phases(const sw_snapshot *s, FILE *out) {
    double flops;
    if (!note_number(s, "flops", "forward", &flops))
        return; /* nothing counted per phase */
    fprintf(out, "efficiency per phase (host time):\n  %-10s %12s %12s %9s\n", "phase", "FLOP/step",
            "FLOP/s", "MFU");
    int peak = sw_snapshot_note(s, "peak_flops") != NULL;
    for (size_t i = 0; i < NPHASES; i++) {
        double rate, mfu;
        if (!note_number(s, "flops", phases[i], &flops))
            continue;
        char per_step[32], per_s[32] = "-", share[32];
        si(flops, per_step, sizeof per_step);
        if (note_number(s, "tflops", phases[i], &rate))
            si(rate * 1e12, per_s, sizeof per_s);
        if (note_number(s, "mfu", phases[i], &mfu))
            snprintf(share, sizeof share, "%.1f %%", 100.0 * mfu);
        else
            snprintf(share, sizeof share, "%s",
                     i == NPHASES - 1 ? "n/a" /* not model FLOPs */
                     : peak           ? "-"
                                      : "unknown");
        fprintf(out, "  %-10s %12s %12s %9s\n", phases[i], per_step, per_s, share);
    }
}

void sw__json_put_efficiency(sw__jw *w, const sw_snapshot *s) {
    double v;
    if (!note_number(s, "flops", "forward", &v))
        return;
    sw__jw_key(w, "efficiency");
    sw__jw_object_begin(w);
    sw__jw_key(w, "phases");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < NPHASES; i++) {
        if (!note_number(s, "flops", phases[i], &v))
            continue;
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "phase", phases[i]);
        sw__jw_kv_double(w, "flops_per_step", v);
        static const char *const rates[][2] = {{"tflops", "flops_per_s"}, {"mfu", "mfu"}};
        for (size_t k = 0; k < 2; k++) {
            sw__jw_key(w, rates[k][1]);
            if (note_number(s, rates[k][0], phases[i], &v))
                sw__jw_double(w, k == 0 ? v * 1e12 : v);
            else
                sw__jw_null(w);
        }
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}
