/*
 * efficiency_line.c — the reports' efficiency line: "412 TFLOP/s achieved (41.6 % MFU,
 * H100 SXM bf16); 1.9 M tokens/s".
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
    const char *line = sw_snapshot_note(s, "efficiency");
    if (line == NULL || line[0] == '\0')
        return 0;
    char clean[512];
    sw__text_clean(line, clean, sizeof clean); /* a note is the program's text: no escapes */
    fprintf(out, "%sefficiency: %s\n", prefix, clean);
    return 1;
}
