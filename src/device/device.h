/*
 * device.h — what the device layer's files share (private; README.md here says what the
 * layer owns). The public side is include/stepwatch/device.h.
 */
#ifndef SW_DEVICE_DEVICE_H
#define SW_DEVICE_DEVICE_H

#include "core/core.h"

#include <stddef.h>

/* ---- /proc (proc_stats.c) ---- */

/* The tick counters of /proc/stat's "cpu" line and the process's CPU time, kept between two
 * reads: the CPU percentages are over the time between them. */
typedef struct sw__proc_mark {
    uint64_t busy_ticks, total_ticks; /* psutil's busy and total: guest time is in user */
    uint64_t process_cpu_ns, wall_ns;
    uint64_t steal_ticks;
    /* The machine since the previous read, for slow steps (sw__machine_note): the share of
     * the ticks the hypervisor stole, per mille; the 1-minute load average x 100; CPUs. */
    uint32_t steal_permille, load_x100, cpus;
} sw__proc_mark;

/* Fill the process and system statistics of *out (GPU fields untouched) from /proc, the
 * percentages since *mark, which is moved to now. A value that cannot be read is -1. 0, or
 * SW_EUNSUPPORTED when /proc/stat cannot be read at all. */
int sw__proc_read(sw__proc_mark *mark, sw_device_stats *out);
/* The machine's figures of the reader's last read (sw__proc_mark's). */
const sw__proc_mark *sw__device_reader_mark(const sw_device_reader *r);
/* The GPUs' clock event reasons of the reader's last read (0: none, or no NVML). */
uint64_t sw__device_reader_clock_reasons(const sw_device_reader *r);

/* The resident set in bytes at a step's end (the core's sw__rss_fn, set by sw_profiler_new):
 * read from /proc/self/statm at most every SW_STEP_RSS_EVERY_MS, else the last reading; 0
 * when it cannot be read. Thread-safe, no allocation. */
uint64_t sw__step_rss(uint64_t now_ns);

/* ---- NVML, loaded with dlopen (nvml.c) ---- */

typedef struct sw__nvml sw__nvml;

/* Load NVML (STEPWATCH_NVML, else libnvidia-ml.so.1), initialize it and pick the GPUs CUDA
 * sees (CUDA_VISIBLE_DEVICES). 0, or SW_EUNSUPPORTED with the reason in why (a library
 * that does not load, lacks a function, fails to initialize, or finds no GPU). */
int sw__nvml_open(sw__nvml **out, char *why, size_t why_size);
int sw__nvml_count(const sw__nvml *n);
/* Read the first count GPUs into gpus (-1 where a query fails). */
void sw__nvml_read(sw__nvml *n, sw_gpu_stats *gpus, int count);
/* NVML's clock event reasons (nvmlClocksEventReason* bits) of the GPUs read, ORed: why their
 * clocks are low now; 0 where the driver has no such query. */
uint64_t sw__nvml_clock_reasons(sw__nvml *n);
void sw__nvml_close(sw__nvml *n);

/* ---- the CUDA runtime, loaded with dlopen (cudart.c) ---- */

/* A clock on the CUDA runtime's events (STEPWATCH_CUDART, else a libcudart already in the
 * process, else the first of libcudart.so.13/.12/.11.0/libcudart.so that loads), recording
 * on stream, or with streams_fn on the stream it names at each step's begin (release(ctx)
 * when the clock is released, or when this call fails). 0, or SW_EUNSUPPORTED with the reason
 * in why, SW_ENOMEM. */
int sw__cudart_clock(void *stream, sw_stream_fn streams_fn, void *ctx, void (*release)(void *),
                     sw_gpu_clock *out, char *why, size_t why_size);

/* ---- messages ---- */

/* "stepwatch: <what>" on stderr once per process for each distinct flag bit (GPU statistics
 * or device time unavailable, a runtime error): the layer says why a part is off, never
 * more than once. */
enum { SW__SAY_NO_NVML = 1, SW__SAY_NO_CUDART = 2, SW__SAY_GPU_ERROR = 4 };
void sw__device_say_once(unsigned flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* SW_DEVICE_DEVICE_H */
