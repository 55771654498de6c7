/*
 * profiler_new.c — sw_profiler_new: a core profiler plus the sinks its options ask for.
 *
 * The one file above the layers (src/README.md). The core makes a profiler that knows no
 * consumer; this file reads the run-file options (from the caller, or from the environment
 * that `stepwatch run` sets) and attaches the run-file writer. A new kind of sink that
 * options turn on is attached here too. sw_profiler_free is the core's: it closes whatever
 * sinks are attached.
 */
#include "core/core.h"
#include "runfile/journal.h"

#include <stdlib.h>
#include <string.h>

/* The run file's options that `stepwatch run` passes along with STEPWATCH_RUN_FILE. The
 * command checked the values; one malformed here (set by hand) is ignored. */
static void run_file_options_from_env(sw_options *o) {
    const char *timeline = getenv("STEPWATCH_TIMELINE");
    if (timeline != NULL && timeline[0] != '\0' && strcmp(timeline, "0") != 0)
        o->timeline = 1;
    const char *ring = getenv("STEPWATCH_RING_CAPACITY");
    if (ring != NULL && ring[0] >= '1' && ring[0] <= '9') {
        char *end;
        unsigned long events = strtoul(ring, &end, 10);
        if (*end == '\0' && events <= SW_MAX_RING_CAPACITY)
            o->ring_capacity = (uint32_t)events;
    }
    const char *on_full = getenv("STEPWATCH_ON_FULL");
    if (on_full != NULL && strcmp(on_full, "block") == 0)
        o->on_full = SW_FULL_BLOCK;
}

/* `stepwatch run --device-stats[=MS] --device-time` ask through the environment. */
static void device_options_from_env(sw_options *o) {
    const char *stats = getenv("STEPWATCH_DEVICE_STATS");
    if (!o->device_stats && stats != NULL && stats[0] >= '1' && stats[0] <= '9') {
        char *end;
        unsigned long ms = strtoul(stats, &end, 10);
        o->device_stats = 1;
        if (*end == '\0' && ms > 1 && ms <= 3600000)
            o->device_stats_ms = (uint32_t)ms; /* "1" alone means on, at the default */
    }
    const char *timing = getenv("STEPWATCH_DEVICE_TIME");
    if (!o->device_time && timing != NULL && timing[0] != '\0' && strcmp(timing, "0") != 0)
        o->device_time = 1;
}

/* The device sinks the options ask for. They never fail the profiler: without NVML or a
 * CUDA runtime the device layer says why once and the run goes on without that part. */
static void attach_device(sw_profiler *p, const sw_options *o) {
    if (o->device_stats)
        sw_device_stats_start(p, o->device_stats_ms);
    if (o->device_time)
        sw_device_time_cuda(p, NULL);
}

int sw_profiler_new(const sw_options *opts, sw_profiler **out) {
    sw_options o = opts ? *opts : (sw_options){0};
    /* `stepwatch run -- ./program` asks for a run file through the environment. */
    const char *env_run_file = getenv("STEPWATCH_RUN_FILE");
    if (o.run_file == NULL && env_run_file != NULL && env_run_file[0] != '\0') {
        o.run_file = env_run_file;
        run_file_options_from_env(&o);
        device_options_from_env(&o);
    }
    int rc = sw__profiler_new(&o, out);
    if (rc != 0)
        return rc;
    if (o.run_file == NULL) {
        attach_device(*out, &o);
        return 0;
    }
    /* The rank may come from the environment: the core has read it by now. */
    char *path = sw__expand_rank(o.run_file, sw__options(*out)->rank);
    rc = path ? sw__journal_open(*out, path) : SW_ENOMEM;
    free(path);
    if (rc != 0) {
        sw_profiler_free(*out);
        *out = NULL;
        return rc;
    }
    attach_device(*out, &o); /* after the run file: closed first, so its last samples land */
    return 0;
}
