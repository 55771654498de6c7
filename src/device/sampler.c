/*
 * sampler.c — the device sampler: a sink (core/sink.h) whose thread reads the statistics
 * every interval and records them as counters of the profiler (sw_counter), which carries
 * them to the run file, the Chrome trace, the HTML report and the report's counter lines.
 *
 * The thread is a ticker (core.h: it sleeps in poll on a pipe), so closing the profiler
 * stops it at once; a last sample is taken then, so a short run has one. A source set with
 * sw_device_stats_source (Python: torch's allocator) runs after each sample, under a lock
 * that its removal takes, so removing it waits for a call in progress.
 */
#include "device.h"
#include "core/sink.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* One counter per statistic: the system, the process, then five per GPU. */
enum { SYS_CPU, SYS_VM, SYS_SWAP, PROC_CPU, PROC_RSS, PROC_PEAK, NPROC_COUNTERS };
enum { GPU_UTIL, GPU_MEM_USED, GPU_MEM_TOTAL, GPU_POWER, GPU_TEMP, NGPU_COUNTERS };
static const char *const PROC_NAMES[NPROC_COUNTERS] = {
    "cpu_percent",         "cpu_vm_percent",    "cpu_swap_percent",
    "process_cpu_percent", "process_rss_bytes", "process_peak_rss_bytes"};
static const char *const GPU_NAMES[NGPU_COUNTERS] = {
    "utilization_percent", "memory_used_bytes", "memory_total_bytes", "power_w", "temperature_c"};

typedef struct sw__sampler {
    sw__sink sink; /* first: the core hands this back to the ops below */
    sw_profiler *p;
    sw_device_reader *reader;
    uint32_t interval_ms;
    sw_id proc_ids[NPROC_COUNTERS];
    sw_id gpu_ids[SW_MAX_GPUS][NGPU_COUNTERS];
    sw__ticker ticker;           /* the thread that samples */
    pthread_mutex_t source_lock; /* the source, and a call of it */
    sw_sample_fn source_fn;
    void *source_ctx;
} sw__sampler;

static void record(sw_profiler *p, sw_id id, double value) {
    if (value >= 0) /* -1: could not be read */
        sw_counter(p, id, value);
}

static void take_sample(sw__sampler *s, int with_source) {
    sw_device_stats st;
    if (sw_device_read(s->reader, &st) == 0) {
        const double proc[NPROC_COUNTERS] = {st.cpu_percent,  st.vm_percent,
                                             st.swap_percent, st.process_cpu_percent,
                                             st.rss_bytes,    st.peak_rss_bytes};
        for (int i = 0; i < NPROC_COUNTERS; i++)
            record(s->p, s->proc_ids[i], proc[i]);
        /* the machine's steal and load, for the slow steps' signals (docs/slow-steps.md) */
        const sw__proc_mark *m = sw__device_reader_mark(s->reader);
        sw__machine_note(s->p, m->steal_permille, m->load_x100, m->cpus);
        if (st.ngpus > 0) /* why the GPUs' clocks are low, for the slow steps too */
            sw__gpu_clock_note(s->p, sw__device_reader_clock_reasons(s->reader),
                               (uint64_t)s->interval_ms * 1000000u);
        for (int g = 0; g < st.ngpus; g++) {
            const sw_gpu_stats *gpu = &st.gpus[g];
            const double v[NGPU_COUNTERS] = {gpu->utilization_percent, gpu->memory_used_bytes,
                                             gpu->memory_total_bytes, gpu->power_w,
                                             gpu->temperature_c};
            for (int i = 0; i < NGPU_COUNTERS; i++)
                record(s->p, s->gpu_ids[g][i], v[i]);
        }
    }
    if (!with_source)
        return;
    pthread_mutex_lock(&s->source_lock);
    if (s->source_fn)
        s->source_fn(s->source_ctx, s->p);
    pthread_mutex_unlock(&s->source_lock);
}

static int sample_tick(void *ctx) {
    take_sample(ctx, 1);
    return 0;
}

static void free_sampler(sw__sampler *s) {
    sw_device_reader_free(s->reader);
    sw__ticker_close(&s->ticker);
    pthread_mutex_destroy(&s->source_lock);
    free(s);
}

/* The process exits with p alive: a last sample of our own (a source's language runtime
 * may be gone by now), then the thread stops before the run file completes. */
static void exit_unfreed(sw__sink *sink) {
    sw__sampler *s = (sw__sampler *)sink;
    if (!s->ticker.running)
        return;
    sw__ticker_stop(&s->ticker);
    take_sample(s, 0);
}

static void close_sink(sw__sink *sink) {
    sw__sampler *s = (sw__sampler *)sink;
    if (s->ticker.running) {
        sw__ticker_stop(&s->ticker);
        take_sample(s, 1);
    }
    free_sampler(s);
}

static void forget_in_child(sw__sink *sink) {
    /* The thread does not exist here; the locks were not held across fork by it for long,
     * but they are the parent's: leak them rather than destroy a mutex in an unknown state. */
    sw__sampler *s = (sw__sampler *)sink;
    sw_device_reader_free(s->reader);
    sw__ticker_close(&s->ticker);
    free(s);
}

static const sw__sink_ops sampler_ops = {
    .on_exit = exit_unfreed,
    .on_close = close_sink,
    .on_fork_child = forget_in_child,
};

/* Intern the counter names: the process's, and five per GPU the reader sees. */
static int intern_counters(sw__sampler *s) {
    for (int i = 0; i < NPROC_COUNTERS; i++)
        if ((s->proc_ids[i] = sw_counter_id(s->p, PROC_NAMES[i])) == SW_ID_NONE)
            return SW_ELIMIT;
    sw_device_stats st;
    if (sw_device_read(s->reader, &st) != 0)
        return SW_EUNSUPPORTED;
    for (int g = 0; g < st.ngpus; g++) {
        for (int i = 0; i < NGPU_COUNTERS; i++) {
            char name[64];
            snprintf(name, sizeof name, "gpu%d.%s", g, GPU_NAMES[i]);
            if ((s->gpu_ids[g][i] = sw_counter_id(s->p, name)) == SW_ID_NONE)
                return SW_ELIMIT;
        }
    }
    return 0;
}

int sw_device_stats_start(sw_profiler *p, uint32_t interval_ms) {
    if (p == NULL)
        return SW_EINVAL;
    if (sw__sink_find(p, &sampler_ops) != NULL)
        return SW_ESTATE;
    sw__sampler *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SW_ENOMEM;
    s->sink.ops = &sampler_ops;
    s->p = p;
    s->interval_ms = interval_ms ? interval_ms : 500;
    pthread_mutex_init(&s->source_lock, NULL);
    int rc = sw__ticker_open(&s->ticker); /* out of descriptors: said, not "out of memory" */
    if (rc == 0)
        rc = sw_device_reader_new(1, &s->reader);
    if (rc == 0 && sw_device_gpu_error(s->reader))
        sw__device_say_once(SW__SAY_NO_NVML, "no GPU statistics (%s); sampling CPU and memory",
                            sw_device_gpu_error(s->reader));
    if (rc == 0)
        rc = intern_counters(s);
    if (rc == 0)
        rc = sw__ticker_start(&s->ticker, (int)s->interval_ms, sample_tick, s);
    if (rc != 0) {
        free_sampler(s);
        return rc;
    }
    sw__sink_attach(p, &s->sink);
    return 0;
}

int sw_device_stats_source(sw_profiler *p, sw_sample_fn fn, void *ctx) {
    if (p == NULL)
        return SW_EINVAL;
    sw__sampler *s = (sw__sampler *)sw__sink_find(p, &sampler_ops);
    if (s == NULL)
        return SW_ENOTFOUND;
    pthread_mutex_lock(&s->source_lock);
    s->source_fn = fn;
    s->source_ctx = ctx;
    pthread_mutex_unlock(&s->source_lock);
    return 0;
}
