/*
 * findings.c — what a finding is made of (analysis_internal.h): a diagnosis gets findings and
 * a finding gets numbers here, for every check (diagnose.c, diagnose_device.c); the writers
 * name severities and show numbers with the other two.
 */
#include "analysis_internal.h"

#include <stdio.h>
#include <string.h>

sw__finding *sw__finding_add(sw__diagnosis *d, const char *id, sw__severity sev) {
    if (d->nfindings >= SW__MAX_FINDINGS)
        return NULL;
    sw__finding *f = &d->findings[d->nfindings++];
    memset(f, 0, sizeof *f);
    f->id = id;
    f->severity = sev;
    return f;
}

void sw__finding_number(sw__finding *f, const char *name, double value, const char *unit) {
    if (f->nnumbers < SW__FINDING_NUMBERS)
        f->numbers[f->nnumbers++] = (sw__number){name, value, unit};
}

const char *sw__severity_name(sw__severity s) {
    switch (s) {
    case SW__SEV_CRITICAL:
        return "critical";
    case SW__SEV_WARNING:
        return "warning";
    default:
        return "info";
    }
}

void sw__number_text(const sw__number *n, char *buf, size_t size) {
    if (strcmp(n->unit, "ns") == 0)
        sw_format_duration(n->value, buf, size);
    else if (strcmp(n->unit, "%") == 0)
        snprintf(buf, size, "%.1f %%", n->value);
    else if (strcmp(n->unit, "x") == 0)
        snprintf(buf, size, "%.2fx", n->value);
    else if (strcmp(n->unit, "bytes") == 0)
        snprintf(buf, size, "%.1f MiB", n->value / 1048576.0);
    else if (strcmp(n->unit, "GB/s") == 0) /* a bandwidth: small on the CPU, large on GPUs */
        snprintf(buf, size, "%.3g GB/s", n->value);
    else
        snprintf(buf, size, "%.0f", n->value);
}
