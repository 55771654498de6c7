/*
 * profiler_new.c — sw_profiler_new: a core profiler plus the sinks its options ask for.
 *
 * The one file above the layers (src/README.md). The core makes a profiler that knows no
 * consumer; this file reads the run-file options (from the caller, or from the environment
 * that `stepwatch run` sets) and attaches the run-file writer, then the live status line
 * (src/live/) when the options or the terminal call for it. A new kind of sink that options
 * turn on is attached here too. sw_profiler_free is the core's: it closes whatever
 * sinks are attached.
 */
#include "core/core.h"
#include "live/status_line.h"
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

int sw_profiler_new(const sw_options *opts, sw_profiler **out) {
    sw_options o = opts ? *opts : (sw_options){0};
    /* `stepwatch run -- ./program` asks for a run file through the environment. */
    const char *env_run_file = getenv("STEPWATCH_RUN_FILE");
    if (o.run_file == NULL && env_run_file != NULL && env_run_file[0] != '\0') {
        o.run_file = env_run_file;
        run_file_options_from_env(&o);
    }
    if (o.live != SW_LIVE_AUTO && o.live != SW_LIVE_ON && o.live != SW_LIVE_OFF) {
        if (out != NULL)
            *out = NULL;
        return SW_EINVAL;
    }
    int rc = sw__profiler_new(&o, out);
    if (rc != 0)
        return rc;
    if (o.run_file != NULL) {
        /* The rank may come from the environment: the core has read it by now. */
        char *path = sw__expand_rank(o.run_file, sw__options(*out)->rank);
        rc = path ? sw__journal_open(*out, path) : SW_ENOMEM;
        free(path);
        if (rc != 0) {
            sw_profiler_free(*out);
            *out = NULL;
            return rc;
        }
    }
    /* The live status line, when asked for or when stderr is a terminal (never an error). */
    sw__status_line_open(*out);
    return 0;
}
