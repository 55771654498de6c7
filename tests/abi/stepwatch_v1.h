/*
 * stepwatch_v1.h — the sized structs of stepwatch's first release (0.1), frozen: what a
 * program compiled against that stepwatch.h passes to the library (stepwatch.h, "Structs
 * that grow"). Never edit a struct here: a new field goes into include/ only, at the end,
 * and abi_layout.c checks that every field below keeps its offset there.
 * Enums are written as int (their size in the C ABI), opaque types as void.
 */
#ifndef STEPWATCH_V1_H
#define STEPWATCH_V1_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sw_options {
    size_t size;
    uint32_t warmup_steps;
    uint32_t max_depth;
    const char *run_file;
    int timeline;
    uint32_t ring_capacity;
    int on_full;
    uint32_t flush_interval_ms;
    int no_signal_handlers;
    int rank;
    int world_size;
    int local_rank;
    const char *name;
    const char *command;
    int device_stats;
    uint32_t device_stats_ms;
    int device_time;
    int live;
    int clock;
    int step_memory;
} sw_options;

typedef struct sw_write_options {
    size_t size;
    size_t width;
    int full_names;
    int brief;
} sw_write_options;

typedef struct sw_data_source {
    size_t size;
    int (*next)(void *ctx, void **batch, uint32_t *batch_size);
    int (*reset)(void *ctx);
    void *ctx;
    int64_t length;
} sw_data_source;

typedef struct sw_engine_options {
    size_t size;
    void *profiler;
    const sw_options *profiler_options;
    uint64_t max_epochs;
    int64_t epoch_length;
    uint32_t validate_every;
    uint32_t handler_rows;
    const char *csv_path;
} sw_engine_options;

typedef struct sw_ftable_options {
    size_t size;
    uint32_t max_lines;
    int full_paths;
    double fraction;
    const char *sort;
    const char *suffix;
} sw_ftable_options;

typedef struct sw_ranks_options {
    size_t size;
    int rank, world_size;
    int (*gather)(void *ctx, const void *mine, void *all, size_t size, int final, double timeout_s);
    void *ctx;
    double timeout_s;
    int top;
    int format;
    FILE *out;
    int quiet;
    void (*release)(void *ctx);
} sw_ranks_options;

typedef struct sw_live_values {
    size_t size;
    double window_s;
    uint64_t steps;
    uint64_t total_steps;
    double steps_per_s;
    double samples_per_s;
    double step_p50_ns;
    double step_p99_ns;
    double data_share;
    int slowest;
    double slowest_share;
} sw_live_values;

typedef struct sw_gpu_clock {
    size_t size;
    void *ctx;
    int (*ready)(void *ctx);
    int (*event_new)(void *ctx, void **event);
    int (*record)(void *ctx, void *event);
    int (*query)(void *ctx, void *event);
    int (*elapsed_ns)(void *ctx, void *start, void *end, uint64_t *ns);
    void (*event_free)(void *ctx, void *event);
    void (*release)(void *ctx);
} sw_gpu_clock;

typedef struct sw_device_time_info {
    size_t size;
    uint64_t steps_timed;
    uint64_t steps_dropped;
    uint64_t spans_dropped;
    uint64_t warmup_steps;
    int failed;
    uint64_t steps_sampled_out;
    uint64_t sample_every;
    uint64_t steps_captured;
    uint64_t boundaries_captured;
    uint64_t most_behind;
    uint64_t events;
    uint64_t intervals;
    uint64_t intervals_timed;
} sw_device_time_info;

/* sw_mpi_options (stepwatch/mpi.h) is frozen the same way where MPI is built; it is left
 * out here because its MPI_Comm comes from the MPI library's own header. */

#endif /* STEPWATCH_V1_H */
