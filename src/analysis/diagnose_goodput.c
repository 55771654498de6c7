/*
 * diagnose_goodput.c — the "low-goodput" finding: less than half of the run's wall time was
 * steady training. The front end that knows the run's parts (python/stepwatch/goodput.py)
 * notes them: "goodput" (the percent in steady training steps) and "goodput_loss" ("CAUSE:
 * PERCENT", the largest of the rest: start-up, compilation, data wait, warm-up, evaluation,
 * checkpoints, idle, the end). This file names the largest loss; it computes nothing.
 */
#include "analysis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SW__GOODPUT_LOW 50.0 /* percent: below it, most of the run is not training */

void sw__diagnose_goodput(sw__diagnosis *d, const sw_snapshot *s) {
    const char *good = s ? sw_snapshot_note(s, "goodput") : NULL;
    const char *loss = s ? sw_snapshot_note(s, "goodput_loss") : NULL;
    if (good == NULL || loss == NULL)
        return;
    char *end;
    double percent = strtod(good, &end);
    const char *colon = strrchr(loss, ':');
    if (end == good || !(percent >= 0 && percent < SW__GOODPUT_LOW) || colon == NULL)
        return; /* not the note's format, or goodput that is not low */
    double lost = strtod(colon + 1, &end);
    char cause[48];
    size_t n = (size_t)(colon - loss);
    if (n > sizeof cause - 1)
        n = sizeof cause - 1;
    memcpy(cause, loss, n);
    cause[n] = '\0';
    sw__finding *f = sw__finding_add(d, "low-goodput", SW__SEV_WARNING);
    if (!f)
        return;
    snprintf(f->title, sizeof f->title, "Goodput %.1f %%: %s takes %.1f %% of the run", percent,
             cause, lost);
    snprintf(f->sentence, sizeof f->sentence,
             "Only %.1f %% of the wall time went to steady training steps; the largest loss is "
             "%s, %.1f %% of the run (the report's goodput line lists every part).",
             percent, cause, lost);
    sw__finding_number(f, "goodput", percent, "%");
    sw__finding_number(f, "largest loss", lost, "%");
}
