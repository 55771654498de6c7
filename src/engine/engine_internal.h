/*
 * engine_internal.h — what the engine's files share: the struct behind sw_engine.
 * engine.c runs the loop; engine_views.c prints the Ignite/fastxtend views;
 * engine_csv.c streams Ignite's per-iteration CSV; engine_history.c keeps the last handler
 * times, which engine_handlers_csv.c writes as HandlersTimeProfiler's CSV; engine_thunder.c
 * has thunder's keys.
 */
#ifndef SW_ENGINE_INTERNAL_H
#define SW_ENGINE_INTERNAL_H

#include "core/core.h"

/* The last cap durations (ns) of one column of the handlers CSV, a ring grown on demand up
 * to cap (engine_history.c). */
typedef struct sw__history {
    uint64_t *values;
    uint32_t cap;     /* most values kept; 0 = none */
    size_t allocated; /* room in values */
    uint64_t count;   /* values added so far: the ring holds the last min(count, cap) */
} sw__history;

typedef struct sw__handler {
    char *name;
    sw_event event;
    sw_handler_fn fn;
    void *user;
    uint32_t every;
    uint64_t occurrences; /* firings of its event seen, for the every-N filter */
    sw_id action;         /* "callback:<name>" in the profiler */
    sw_stats stats;
    sw__history history; /* its last durations, for the handlers CSV */
} sw__handler;

typedef struct sw__loop {
    sw_data_source data;
    sw_process_fn fn;
    void *user;
    int set;
    int exhausted; /* the last pass ended: reset before the next batch */
} sw__loop;

/* Ignite's per-iteration CSV, written as iterations complete (engine_csv.c). */
typedef struct sw__csv {
    sw_output *out; /* written all or nothing (stepwatch/output.h) */
    FILE *file;     /* its stream */
    long header_len;
    uint64_t rows;
    uint64_t epoch_first_row; /* first row of the current epoch */
    int failed;               /* a write failed (its errno): stop writing, say why at the end */
    const char *path;         /* the engine's csv_path, for that sentence */
} sw__csv;

struct sw_engine {
    sw_profiler *profiler;
    int owns_profiler;
    sw_engine_options opts;
    char *csv_path;
    sw__loop train, valid;
    sw__handler *handlers;
    int nhandlers, cap_handlers;
    sw_engine_state state;
    int running;
    int terminate, terminate_epoch;
    sw_id data_action;
    uint64_t event_count[2][SW_EVENT_COUNT]; /* firings so far, per loop kind */
    sw_stats event_stats[2][SW_EVENT_COUNT]; /* [1] training/outside, [0] validation */
    sw_stats measure[SW_MEASURE_COUNT];
    double last_event_s[SW_EVENT_COUNT]; /* the latest firing's handler time */
    sw__csv csv;
    sw__history processing_history, dataflow_history; /* training loop, handlers CSV */
};

/* engine_csv.c */
int sw__csv_open(sw__csv *c, const char *path);
void sw__csv_row(sw__csv *c, const sw_engine *e, double processing_s, double dataflow_s);
void sw__csv_epoch_done(sw__csv *c, double epoch_completed_s);
int sw__csv_close(sw__csv *c, double completed_s);

/* engine_history.c */
void sw__history_init(sw__history *h, uint32_t cap);
void sw__history_add(sw__history *h, uint64_t ns);
void sw__history_free(sw__history *h);
/* Values kept (min(count, cap)), and the k-th of them, oldest first (k < sw__history_len). */
uint64_t sw__history_len(const sw__history *h);
uint64_t sw__history_at(const sw__history *h, uint64_t k);

#endif /* SW_ENGINE_INTERNAL_H */
