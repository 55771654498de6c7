/*
 * reader.c — sw_device_reader: one read of every statistic (/proc, and NVML when asked),
 * the sampler's source and what the Python adapters log. Also the layer's one-time messages.
 */
#include "device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sw_device_reader {
    sw__proc_mark mark;
    sw__nvml *nvml;         /* NULL: no GPU statistics */
    uint64_t clock_reasons; /* the GPUs' clock event reasons at the last read */
    char gpu_error[256];    /* why not, when they were asked for */
};

void sw__device_say_once(unsigned flag, const char *fmt, ...) {
    static _Atomic unsigned said;
    if (atomic_fetch_or(&said, flag) & flag)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "stepwatch: %s\n", line);
}

int sw_device_reader_new(int gpus, sw_device_reader **out) {
    if (out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_device_reader *r = calloc(1, sizeof *r);
    if (r == NULL)
        return SW_ENOMEM;
    sw_device_stats first;
    if (sw__proc_read(&r->mark, &first) != 0) { /* the first read sets the marks */
        free(r);
        return SW_EUNSUPPORTED;
    }
    if (gpus)
        sw__nvml_open(&r->nvml, r->gpu_error, sizeof r->gpu_error);
    *out = r;
    return 0;
}

int sw_device_read(sw_device_reader *r, sw_device_stats *out) {
    if (r == NULL || out == NULL)
        return SW_EINVAL;
    int rc = sw__proc_read(&r->mark, out);
    if (rc != 0)
        return rc;
    out->ngpus = r->nvml ? sw__nvml_count(r->nvml) : -1;
    if (r->nvml) {
        sw__nvml_read(r->nvml, out->gpus, out->ngpus);
        r->clock_reasons = sw__nvml_clock_reasons(r->nvml);
    }
    return 0;
}

const char *sw_device_gpu_error(const sw_device_reader *r) {
    return r && r->gpu_error[0] ? r->gpu_error : NULL;
}

void sw_device_reader_free(sw_device_reader *r) {
    if (r == NULL)
        return;
    sw__nvml_close(r->nvml);
    free(r);
}

const sw__proc_mark *sw__device_reader_mark(const sw_device_reader *r) {
    return &r->mark;
}

uint64_t sw__device_reader_clock_reasons(const sw_device_reader *r) {
    return r->clock_reasons;
}
