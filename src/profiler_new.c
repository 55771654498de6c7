/*
 * profiler_new.c — sw_profiler_new: a core profiler plus the sinks its options ask for.
 *
 * The one file above the layers (src/README.md). The core makes a profiler that knows no
 * consumer; this file reads the run-file options (from the caller, or from the environment
 * that `stepwatch run` sets) and attaches the run-file writer, the device sampler and
 * device time (src/device/) when asked for, then the live status line (src/live/) when the
 * options or the terminal call for it. A new kind of sink that options
 * turn on is attached here too. sw_profiler_free is the core's: it closes whatever
 * sinks are attached.
 *
 * The environment's run file belongs to one process (docs/reliability.md). `stepwatch run`
 * puts its path in STEPWATCH_RUN_FILE; the first profiler of the first process that finds it
 * unclaimed takes it and marks the environment with STEPWATCH_RUN_FILE_OWNER=<its pid>.
 * Children inherit the mark (forked DataLoader workers, spawn workers, subprocesses started
 * with the process's environment) and leave the file alone; so do later profilers of the
 * owner. A path with "{pid}" in it gives every process a file of its own instead.
 */
#include "core/core.h"
#include "device/device.h"
#include "live/status_line.h"
#include "runfile/journal.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OWNER_VARIABLE "STEPWATCH_RUN_FILE_OWNER"

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
    /* Never an error of the profiler's: said once, and training goes on without them (the
     * run file's sentence, if any, stays the one sw_last_error gives). */
    if (o->device_stats) {
        char kept[640];
        snprintf(kept, sizeof kept, "%s", sw_last_error());
        sw__error_clear();
        int rc = sw_device_stats_start(p, o->device_stats_ms);
        if (rc != 0)
            sw__warn("device statistics not sampled: %s",
                     sw_last_error()[0] ? sw_last_error() : sw_strerror(rc));
        sw__error(0, "%s", kept);
    }
    if (o->device_time)
        sw_device_time_cuda(p, NULL);
}

/* RSS per step (sw_step_memory_mode): on unless the options or the environment say no. */
static void attach_step_memory(sw_profiler *p, const sw_options *o) {
    const char *env = getenv("STEPWATCH_STEP_MEMORY");
    int off = o->step_memory == SW_STEP_MEMORY_OFF ||
              (o->step_memory == SW_STEP_MEMORY_AUTO && env != NULL && strcmp(env, "0") == 0);
    if (!off)
        sw__step_rss_set(p, sw__step_rss);
}

/* The environment's run file if this profiler is the one to take it (see above), claimed
 * for this process; else NULL. */
static const char *claim_env_run_file(void) {
    const char *path = getenv("STEPWATCH_RUN_FILE");
    if (path == NULL || path[0] == '\0')
        return NULL;
    const char *owner = getenv(OWNER_VARIABLE);
    long me = (long)getpid();
    if (owner != NULL && owner[0] != '\0') {
        int mine = strtol(owner, NULL, 10) == me;
        /* With {pid} every other process gets a file of its own; the owner has its file. */
        if (mine || strstr(path, "{pid}") == NULL)
            return NULL;
    }
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", me);
    setenv(OWNER_VARIABLE, pid, 1);
    return path;
}

/* `stepwatch run` names every run file its program wrote at exit, also one a profiler was
 * given by the program itself: each profiler whose file is written appends the file's
 * absolute path to the list the command keeps in STEPWATCH_RUN_FILE_LIST (a file it made; it
 * is never created here). One write with O_APPEND per line: processes writing at once do
 * not interleave. Best effort: the list is a courtesy, the run file is what matters. */
static void add_to_run_list(sw_profiler *p) {
    const char *list = getenv("STEPWATCH_RUN_FILE_LIST");
    const char *path = NULL;
    if (list == NULL || list[0] == '\0' || sw_profiler_run_file(p, &path) != 0 || path == NULL)
        return;
    char cwd[PATH_MAX] = "", line[2 * PATH_MAX + 2];
    if (path[0] != '/' && getcwd(cwd, sizeof cwd) == NULL)
        return;
    int n = snprintf(line, sizeof line, "%s%s%s\n", cwd, cwd[0] ? "/" : "", path);
    int fd = open(list, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return;
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n) {
        /* nothing to do: the command then names the files of its pattern only */
    }
    close(fd);
}

int sw_profiler_new(const sw_options *opts, sw_profiler **out) {
    sw__error_clear();
    sw_options o;
    int rc = sw__sized_in(&o, sizeof o, opts, SW__END_OF(sw_options, step_memory), "sw_options");
    if (rc != 0) {
        if (out != NULL)
            *out = NULL;
        return rc;
    }
    /* `stepwatch run -- ./program` asks for a run file through the environment. */
    int from_env = 0;
    if (o.run_file == NULL && (o.run_file = claim_env_run_file()) != NULL) {
        from_env = 1;
        run_file_options_from_env(&o);
        device_options_from_env(&o);
    }
    if (o.live != SW_LIVE_AUTO && o.live != SW_LIVE_ON && o.live != SW_LIVE_OFF) {
        if (out != NULL)
            *out = NULL;
        return SW_EINVAL;
    }
    rc = sw__profiler_new(&o, out);
    if (rc != 0)
        return rc;
    if (o.run_file != NULL) {
        /* The rank may come from the environment: the core has read it by now. */
        char *path = sw__expand_path(o.run_file, sw__options(*out)->rank, (long)getpid());
        if (path == NULL) {
            sw_profiler_free(*out);
            *out = NULL;
            return SW_ENOMEM;
        }
        /* A file that cannot be written never stops the program: the writer said why on
         * stderr, and sw_profiler_run_file tells the caller. */
        sw__journal_open(*out, path, from_env);
        free(path);
        add_to_run_list(*out);
    }
    attach_step_memory(*out, &o);
    /* After the run file: closed first, so the device's last samples land in it. */
    attach_device(*out, &o);
    /* The live status line, when asked for or when stderr is a terminal (never an error). */
    sw__status_line_open(*out);
    return 0;
}
