/*
 * diagnose_device.c — what the GPU's own clock says about a run (docs/device.md): findings
 * from the device time the device layer records as counters "device:<phase>/<action>" (ns
 * per call), set against the host's rows of the same actions. A run without device time
 * gets none of them.
 *
 *   host-bound       the GPU idles through much of each step: at least the step's device
 *                    time minus its kernels' phases (forward, loss, backward, optimizer,
 *                    zero_grad), whose own device time still holds any gaps between launches
 *   launch-bound     forward and backward take about as long on the GPU as on the host: the
 *                    GPU runs each kernel as it is launched and waits for the next one
 *   data-hidden      the host waits for data, but the GPU was busy with the previous step's
 *                    kernels through most of that wait
 *   device-dropped   steps whose events were never resolved (counted, never waited for)
 *
 * The phase looked at is "train" when it has device time, else the one with the most timed
 * steps. Thresholds are in docs/device.md.
 */
#include "analysis_internal.h"

#include <stdio.h>
#include <string.h>

static const sw_counter_summary *device(const sw_snapshot *s, const char *phase,
                                        const char *action) {
    char name[600];
    snprintf(name, sizeof name, "device:%s/%s", phase, action);
    for (size_t i = 0; i < s->ncounters; i++)
        if (s->counters[i].name && strcmp(s->counters[i].name, name) == 0 &&
            s->counters[i].count > 0)
            return &s->counters[i];
    return NULL;
}

/* The steps of the phase looked at: on the GPU (device step samples) and on the host (its
 * steady steps); a step the GPU never resolved is in the second only. */
typedef struct steps {
    const char *phase;
    double device, host;
    double device_step_ns, host_step_ns; /* means */
} steps;

/* Device and host time per step of action (0 when absent). */
typedef struct per_step {
    double device, host;
} per_step;

static per_step per_step_of(const sw_snapshot *s, const steps *n, const char *action) {
    per_step t = {0, 0};
    const sw_counter_summary *d = device(s, n->phase, action);
    const sw_row *r = sw_snapshot_find(s, action, n->phase);
    if (d)
        t.device = d->mean * (double)d->count / n->device;
    if (r && n->host > 0)
        t.host = (double)r->stats.total_ns / n->host;
    return t;
}

/* The phase to judge: train if timed, else the phase with the most timed steps. */
static const char *pick_phase(const sw_snapshot *s) {
    if (device(s, "train", "step"))
        return "train";
    const char *best = NULL;
    uint64_t most = 0;
    static char phase[300];
    for (size_t i = 0; i < s->ncounters; i++) {
        const char *n = s->counters[i].name;
        size_t len = n ? strlen(n) : 0;
        if (len > 12 && strncmp(n, "device:", 7) == 0 && strcmp(n + len - 5, "/step") == 0 &&
            s->counters[i].count > most) {
            most = s->counters[i].count;
            snprintf(phase, sizeof phase, "%.*s", (int)(len - 12), n + 7);
            best = phase;
        }
    }
    return best;
}

static void check_host_bound(sw__diagnosis *d, const sw_snapshot *s, const steps *n) {
    static const char *const kernels[] = {"forward", "loss", "backward", "optimizer", "zero_grad"};
    double busy = 0, step_ns = n->device_step_ns;
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
        busy += per_step_of(s, n, kernels[i]).device;
    double idle = step_ns > busy ? (step_ns - busy) / step_ns * 100.0 : 0;
    if (idle < 25.0)
        return;
    sw__finding *f = sw__finding_add(d, "host-bound",
                                     idle >= 50.0 ? SW__SEV_CRITICAL : SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32], c[32], e[32] = "none";
    double data = per_step_of(s, n, "data").device;
    if (data > 0)
        sw_format_duration(data, e, sizeof e);
    snprintf(f->title, sizeof f->title, "Host-bound: the GPU idles %.0f %% of each %.40s step",
             idle, n->phase);
    snprintf(f->sentence, sizeof f->sentence,
             "Of a step's %s on the GPU, its kernels' phases took %s; for the rest, at least %s "
             "(%s of it waiting for data), the GPU had nothing to run: the host is the "
             "bottleneck (data loading, Python between launches, synchronizations).",
             sw_format_duration(step_ns, a, sizeof a), sw_format_duration(busy, b, sizeof b),
             sw_format_duration(step_ns - busy, c, sizeof c), e);
    sw__finding_number(f, "GPU idle share", idle, "%");
    sw__finding_number(f, "device step", step_ns, "ns");
    sw__finding_number(f, "device busy per step", busy, "ns");
    sw__finding_number(f, "device data per step", data, "ns");
}

static void check_launch_bound(sw__diagnosis *d, const sw_snapshot *s, const steps *n) {
    per_step fwd = per_step_of(s, n, "forward");
    per_step bwd = per_step_of(s, n, "backward");
    double host = fwd.host + bwd.host, dev = fwd.device + bwd.device;
    if (fwd.device <= 0 || host <= 0 || host < 0.2 * n->host_step_ns)
        return;
    double ratio = dev / host;
    if (ratio > 1.25)
        return; /* the GPU works longer than the launches take: not waiting for them */
    sw__finding *f = sw__finding_add(d, "launch-bound", SW__SEV_WARNING);
    if (!f)
        return;
    char a[32], b[32];
    snprintf(f->title, sizeof f->title,
             "Launch-bound: forward and backward take as long on the GPU as on the host");
    snprintf(f->sentence, sizeof f->sentence,
             "Forward and backward take %s per step on the GPU and %s on the host (%.2fx): the "
             "GPU runs each kernel as it is launched and waits for the next (or something "
             "synchronizes inside them). Fewer, larger kernels help: larger batches, "
             "torch.compile, CUDA graphs.",
             sw_format_duration(dev, a, sizeof a), sw_format_duration(host, b, sizeof b), ratio);
    sw__finding_number(f, "device/host", ratio, "x");
    sw__finding_number(f, "device forward+backward", dev, "ns");
    sw__finding_number(f, "host forward+backward", host, "ns");
}

static void check_data_hidden(sw__diagnosis *d, const sw_snapshot *s, const steps *n) {
    per_step data = per_step_of(s, n, "data");
    if (!device(s, n->phase, "data") || n->host_step_ns <= 0 || data.host < 0.1 * n->host_step_ns ||
        data.device > 0.5 * data.host)
        return;
    double hidden = (data.host - data.device) / data.host * 100.0;
    sw__finding *f = sw__finding_add(d, "data-hidden", SW__SEV_INFO);
    if (!f)
        return;
    char a[32], b[32];
    snprintf(f->title, sizeof f->title, "Data wait hidden by asynchronous kernels: %.0f %% of it",
             hidden);
    snprintf(f->sentence, sizeof f->sentence,
             "Each step waits %s for its batch, but the GPU was still running the previous "
             "step's kernels through %.0f %% of that wait and sat idle only %s: faster loading "
             "would gain less than the host's data time suggests.",
             sw_format_duration(data.host, a, sizeof a), hidden,
             sw_format_duration(data.device, b, sizeof b));
    sw__finding_number(f, "hidden share", hidden, "%");
    sw__finding_number(f, "host data per step", data.host, "ns");
    sw__finding_number(f, "GPU idle in data per step", data.device, "ns");
}

static void check_dropped(sw__diagnosis *d, const sw_snapshot *s) {
    const sw_counter_summary *dropped = NULL;
    for (size_t i = 0; i < s->ncounters; i++)
        if (s->counters[i].name && strcmp(s->counters[i].name, "device:dropped_steps") == 0)
            dropped = &s->counters[i];
    if (!dropped || dropped->count == 0 || dropped->max <= 0)
        return;
    sw__finding *f = sw__finding_add(d, "device-dropped", SW__SEV_INFO);
    if (!f)
        return;
    snprintf(f->title, sizeof f->title, "%.0f steps without device time", dropped->max);
    snprintf(f->sentence, sizeof f->sentence,
             "The GPU events of %.0f steps were not resolved: the run ended before the GPU "
             "reached them (or a step ended on another thread). stepwatch never waits for "
             "them; the device times cover the other steps.",
             dropped->max);
    sw__finding_number(f, "steps", dropped->max, "");
}

void sw__diagnose_device(sw__diagnosis *d, const sw_snapshot *s) {
    if (s == NULL)
        return;
    check_dropped(d, s);
    steps n = {.phase = pick_phase(s)};
    const sw_counter_summary *step = n.phase ? device(s, n.phase, "step") : NULL;
    const sw_row *host_step = n.phase ? sw_snapshot_find(s, "step", n.phase) : NULL;
    if (step == NULL || host_step == NULL || host_step->stats.count == 0)
        return;
    n.device = (double)step->count;
    n.device_step_ns = step->mean;
    n.host = (double)host_step->stats.count;
    n.host_step_ns = host_step->stats.mean_ns;
    check_host_bound(d, s, &n);
    check_launch_bound(d, s, &n);
    check_data_hidden(d, s, &n);
}
