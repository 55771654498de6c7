/*
 * efficiency_line.c — the reports' efficiency lines: "412 TFLOP/s achieved (41.6 % MFU,
 * H100 SXM bf16); 1.9 M tokens/s; goodput 93.1 %" and the goodput's parts ("93.1 % of 2 h
 * in steady training steps; lost: start-up 4.0 %, ...", python/stepwatch/goodput.py).
 *
 * The figures come from the front end that counted the FLOPs (python/stepwatch/flops.py),
 * which writes them into the run's notes: the numbers one by one (flops_per_step, mfu, ...,
 * for JSON and the run file, where every note already goes) and this line ready to print, as
 * "efficiency". The C core only prints it: the FLOP count and the device's peak are known in
 * Python alone, and a new note needs no schema change.
 */
#include "writer.h"

#include <stdio.h>

int sw__put_efficiency(const sw_snapshot *s, FILE *out, const char *prefix) {
    static const char *const notes[][2] = {{"efficiency", "efficiency"},
                                           {"goodput_parts", "goodput"}};
    int put = 0;
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++) {
        const char *line = sw_snapshot_note(s, notes[i][0]);
        if (line == NULL || line[0] == '\0')
            continue;
        char clean[512];
        sw__text_clean(line, clean, sizeof clean); /* a note is the program's text */
        fprintf(out, "%s%s: %s\n", prefix, notes[i][1], clean);
        put = 1;
    }
    return put;
}
