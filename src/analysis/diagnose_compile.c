/*
 * diagnose_compile.c — the steps torch.compile compiled in. stepwatch.torch notes them as
 * "compiled_steps": "STEP:NS,STEP:NS,..." (the step's global index, the ns spent compiling
 * in it). A recompilation in a later step takes seconds and would otherwise read as a tail
 * stall of the forward; diagnose keeps these steps out of the step statistics, as it keeps
 * warm-up out, and names compilation as their cause here.
 */
#include "analysis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SW__COMPILED_NOTE "compiled_steps"

static int by_step(const void *a, const void *b) {
    const sw__compiled_step *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

void sw__compiled_read(const sw_snapshot *s, sw__compiled *c) {
    memset(c, 0, sizeof *c);
    const char *p = s ? sw_snapshot_note(s, SW__COMPILED_NOTE) : NULL;
    while (p && *p && c->n < SW__MAX_COMPILED) {
        char *end;
        unsigned long long step = strtoull(p, &end, 10);
        if (end == p || *end != ':')
            break; /* not the note's format: keep what was read */
        p = end + 1;
        unsigned long long ns = strtoull(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0'))
            break;
        c->steps[c->n++] = (sw__compiled_step){step, ns};
        c->compile_ns += ns;
        p = *end == ',' ? end + 1 : end;
    }
    qsort(c->steps, c->n, sizeof c->steps[0], by_step);
}

int sw__compiled_has(const sw__compiled *c, uint64_t step) {
    if (c->n == 0)
        return 0;
    sw__compiled_step key = {step, 0};
    return bsearch(&key, c->steps, c->n, sizeof c->steps[0], by_step) != NULL;
}

void sw__diagnose_compile(sw__diagnosis *d, const sw__compiled *c, uint64_t nkept_out,
                          uint64_t kept_out_ns, double median) {
    if (c->n == 0)
        return;
    sw__finding *f = sw__finding_add(d, "compilation", SW__SEV_INFO);
    if (!f)
        return;
    char list[160] = "", a[32], b[32], m[32];
    size_t shown = c->n < 8 ? c->n : 8, len = 0;
    for (size_t i = 0; i < shown && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%llu", i ? ", " : "",
                                (unsigned long long)c->steps[i].step);
    if (c->n > shown && len < sizeof list)
        snprintf(list + len, sizeof list - len, ", ...");
    snprintf(f->title, sizeof f->title, "torch.compile compiled in %zu step%s, for %s", c->n,
             c->n == 1 ? "" : "s", sw_format_duration((double)c->compile_ns, a, sizeof a));
    int n = snprintf(f->sentence, sizeof f->sentence, "Step%s %s spent %s compiling",
                     c->n == 1 ? "" : "s", list,
                     sw_format_duration((double)c->compile_ns, a, sizeof a));
    if (n > 0 && (size_t)n < sizeof f->sentence && nkept_out > 0)
        n += snprintf(f->sentence + n, sizeof f->sentence - (size_t)n,
                      "; %llu of them, %s in all against a steady median of %s a step, are "
                      "kept out of the step statistics, as warm-up is.",
                      (unsigned long long)nkept_out,
                      sw_format_duration((double)kept_out_ns, b, sizeof b),
                      sw_format_duration(median, m, sizeof m));
    else if (n > 0 && (size_t)n < sizeof f->sentence)
        n += snprintf(f->sentence + n, sizeof f->sentence - (size_t)n, ", all in warm-up.");
    if (c->n > 1 && n > 0 && (size_t)n < sizeof f->sentence)
        snprintf(f->sentence + n, sizeof f->sentence - (size_t)n,
                 " Compiling again after the first step means a recompilation: a new input "
                 "shape or a failed guard; TORCH_LOGS=recompiles says which, and "
                 "torch._dynamo.mark_dynamic or dynamic=True avoids shape recompiles.");
    sw__finding_number(f, "compiled steps", (double)c->n, "");
    sw__finding_number(f, "compile time", (double)c->compile_ns, "ns");
    sw__finding_number(f, "kept out", (double)nkept_out, "");
}
