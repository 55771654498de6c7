/*
 * stepwatch/engine.h — an event-driven training loop for C (Ignite/fastai style).
 * Included by stepwatch.h; do not include directly. docs/engine.md maps Ignite's Events and
 * fastai's callback events onto the events below.
 *
 *   sw_engine *e = NULL;
 *   sw_engine_options eo = SW_ENGINE_OPTIONS_INIT;
 *   eo.max_epochs = 3;
 *   sw_engine_new(&eo, &e);
 *   sw_data_source train = SW_DATA_SOURCE_INIT;
 *   train.next = my_next, train.reset = my_reset, train.ctx = &loader;
 *   train.length = -1;                         // -1: length unknown
 *   sw_engine_set_train(e, &train, my_step, &model);
 *   sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "log", log_loss, NULL, 100);
 *   int rc = sw_engine_run(e);                 // 0, or the error that stopped the run
 *   sw_engine_print_basic(e, stdout);          // Ignite BasicTimeProfiler.print_results
 *   sw_report(sw_engine_profiler(e), SW_FORMAT_FASTXTEND, stdout);
 *   sw_engine_free(e);
 *
 * Timing is built in: every event's handlers, every handler, the data wait ("data") and the
 * processing function are timed, and the loop marks the profiler's phases (fit, epoch,
 * train, valid) and steps. The processing function marks its own parts ("forward", "loss",
 * "backward", "optimizer", "zero_grad") with sw_begin/sw_end or SW_SCOPE on
 * sw_engine_profiler(e). Each handler is recorded as the action "callback:<name>".
 *
 * "Exceptions": a data source, processing function or handler that returns a negative
 * SW_E* code stops the run. The engine closes the open step and phases, fires
 * SW_EVENT_EXCEPTION_RAISED (state.error holds the code) and sw_engine_run returns the code.
 * Everything measured until then stays in the reports.
 *
 * Threads: an engine is used by one thread at a time (the one calling sw_engine_run);
 * handlers and callbacks run on that thread.
 */
#ifndef STEPWATCH_ENGINE_H
#define STEPWATCH_ENGINE_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_engine sw_engine;

/* Events, in the order a run fires them (Ignite's names). */
typedef enum sw_event {
    SW_EVENT_STARTED = 0, /* once, before the first epoch */
    SW_EVENT_EPOCH_STARTED,
    SW_EVENT_GET_BATCH_STARTED,   /* before asking the data source (fastxtend before_draw) */
    SW_EVENT_GET_BATCH_COMPLETED, /* the batch arrived */
    SW_EVENT_ITERATION_STARTED,   /* before the processing function */
    SW_EVENT_ITERATION_COMPLETED, /* after it */
    SW_EVENT_VALIDATION_STARTED,  /* the validation loop of an epoch begins */
    SW_EVENT_VALIDATION_COMPLETED,
    SW_EVENT_EPOCH_COMPLETED,
    SW_EVENT_COMPLETED,              /* once, at the end (also after a terminate) */
    SW_EVENT_EXCEPTION_RAISED,       /* a callback returned an error; the run stops */
    SW_EVENT_TERMINATE,              /* sw_engine_terminate took effect */
    SW_EVENT_TERMINATE_SINGLE_EPOCH, /* sw_engine_terminate_epoch took effect */
    SW_EVENT_COUNT
} sw_event;

/* "STARTED", "EPOCH_STARTED", ... (Ignite's Events names). NULL out of range. */
SW_API const char *sw_event_name(sw_event ev);

/* The state handlers see (Ignite's engine.state). Read it with sw_engine_get_state. */
typedef struct sw_engine_state {
    uint64_t epoch; /* current epoch, from 1 */
    uint64_t max_epochs;
    uint64_t iteration;       /* training iterations done in the whole run, from 1 */
    uint64_t epoch_iteration; /* iterations of the current loop (train or valid), from 1 */
    int64_t epoch_length;     /* training batches per epoch; -1 until known */
    uint64_t valid_iteration; /* validation iterations done in the whole run */
    int training;             /* 1 inside the training loop, 0 inside validation */
    void *batch;              /* the current batch, as the data source gave it */
    uint32_t batch_size;
    double output;   /* what the processing function set (sw_engine_set_output) */
    int error;       /* the code that stopped the run; 0 if none */
    int error_event; /* the event whose handler failed, or -1 (data source or
                                 processing function) */
    /* Seconds, as Ignite's state.times: [SW_EVENT_EPOCH_COMPLETED] = the last epoch
     * (train + validation + handlers), [SW_EVENT_COMPLETED] = the whole run,
     * [SW_EVENT_VALIDATION_COMPLETED] = the last validation loop. Others stay 0. */
    double times[SW_EVENT_COUNT];
} sw_engine_state;

/* A source of batches.
 *   next:  put the next batch in *batch and its size in *batch_size (0 = unknown) and return
 *          1; return 0 when the pass is over; a negative SW_E* code on error.
 *   reset: start a new pass (called before each epoch's first batch and whenever a source
 *          of known length ran dry); NULL if the source needs none. 0 or a negative code.
 *   length: batches per pass, or -1 (or 0) if unknown: then a pass ends when next returns 0,
 *          and the engine learns the length from the first pass. */
typedef struct sw_data_source {
    size_t size; /* sizeof(sw_data_source) as the caller was compiled (stepwatch.h, "Structs
                    that grow") */
    int (*next)(void *ctx, void **batch, uint32_t *batch_size);
    int (*reset)(void *ctx);
    void *ctx;
    int64_t length;
} sw_data_source;
#define SW_DATA_SOURCE_INIT SW__SIZED_INIT(sw_data_source)

/* The processing function (Ignite's process_function, fastai's one_batch): compute on one
 * batch. Returns 0 or a negative SW_E* code. */
typedef int (*sw_process_fn)(sw_engine *e, void *batch, uint32_t batch_size, void *user);

/* An event handler. Returns 0 or a negative SW_E* code (which stops the run). It may call
 * sw_engine_terminate / sw_engine_terminate_epoch. */
typedef int (*sw_handler_fn)(sw_engine *e, sw_event ev, void *user);

typedef struct sw_engine_options {
    size_t size;                        /* sizeof(sw_engine_options) as the caller was compiled
                                           (stepwatch.h, "Structs that grow") */
    sw_profiler *profiler;              /* record into this profiler (not owned); NULL = the engine
                                  makes its own from profiler_options and frees it */
    const sw_options *profiler_options; /* used only when profiler is NULL; NULL = defaults */
    uint64_t max_epochs;                /* 0 = 1 */
    int64_t epoch_length;               /* training batches per epoch; 0 = the source's length */
    uint32_t validate_every;            /* run the validation loop every N epochs; 0 = 1 */
    uint32_t handler_rows;              /* for Ignite's HandlersTimeProfiler.write_results CSV
                                  (sw_engine_write_handlers_csv): keep the last N durations
                                  of the training loop's processing function and dataflow and
                                  of each handler; 0 = keep none (no memory) */
    const char *csv_path;               /* Ignite's BasicTimeProfiler.write_results CSV, streamed
                                  here one row per training iteration; NULL = none */
    /* New options go here, at the end. */
} sw_engine_options;
#define SW_ENGINE_OPTIONS_INIT SW__SIZED_INIT(sw_engine_options)

/* Create an engine. opts may be NULL (defaults). 0, SW_EINVAL, SW_EUNSUPPORTED (a size:
 * stepwatch.h, "Structs that grow"), SW_ENOMEM, or the code of sw_profiler_new. The caller owns *out. */
SW_API int sw_engine_new(const sw_engine_options *opts, sw_engine **out);
/* Free the engine (and its profiler if it made it). NULL is a no-op. */
SW_API void sw_engine_free(sw_engine *e);

/* The training loop's data and processing function (required before sw_engine_run), and the
 * validation loop's (optional; fn may be the same). The source struct is copied. SW_EINVAL
 * for a NULL next/fn, SW_ESTATE while running, and a size's errors (SW_EINVAL,
 * SW_EUNSUPPORTED). */
SW_API int sw_engine_set_train(sw_engine *e, const sw_data_source *data, sw_process_fn fn,
                               void *user);
SW_API int sw_engine_set_valid(sw_engine *e, const sw_data_source *data, sw_process_fn fn,
                               void *user);

/* Attach fn to ev under name (copied; shown in reports as "callback:<name>"), called on
 * every `every`-th occurrence of ev (0 or 1 = every time). Handlers of one event run in the
 * order attached. Returns the handler's index (>= 0) or SW_EINVAL / SW_ENOMEM / SW_ESTATE. */
SW_API int sw_engine_on(sw_engine *e, sw_event ev, const char *name, sw_handler_fn fn, void *user,
                        uint32_t every);

/* Run max_epochs epochs. Returns 0 when the run completed or was terminated, else the first
 * error a callback returned (SW_EINVAL if no training loop was set, SW_ESTATE when called
 * from inside a run). A second call starts a new run (state reset, timing kept). */
SW_API int sw_engine_run(sw_engine *e);

/* Stop the run after the current iteration (fires TERMINATE, then COMPLETED; the current
 * epoch's EPOCH_COMPLETED is skipped, as in Ignite). */
SW_API void sw_engine_terminate(sw_engine *e);
/* End the current epoch's loop after the current iteration (fires TERMINATE_SINGLE_EPOCH;
 * the epoch then completes normally, validation included). */
SW_API void sw_engine_terminate_epoch(sw_engine *e);

SW_API const sw_engine_state *sw_engine_get_state(const sw_engine *e);
SW_API void sw_engine_set_output(sw_engine *e, double output);
SW_API sw_profiler *sw_engine_profiler(sw_engine *e);

/* ---- Timing views ----------------------------------------------------------------------
 * All durations in the sw_stats below are nanoseconds; min_step/max_step hold the index
 * (from 0) of the occurrence, as Ignite's min/index and max/index. */

typedef enum sw_engine_measure {
    SW_MEASURE_PROCESSING = 0,   /* processing function, training loop (Ignite) */
    SW_MEASURE_DATAFLOW,         /* data source next(), training loop (Ignite) */
    SW_MEASURE_VALID_PROCESSING, /* the same in the validation loop */
    SW_MEASURE_VALID_DATAFLOW,
    SW_MEASURE_TRAIN_EPOCH,    /* one training loop (no validation), per epoch */
    SW_MEASURE_VALID_EPOCH,    /* one validation loop, per epoch */
    SW_MEASURE_TRAIN_DOWNTIME, /* data wait summed over one training loop, per epoch */
    SW_MEASURE_VALID_DOWNTIME,
    SW_MEASURE_COUNT
} sw_engine_measure;

SW_API const sw_stats *sw_engine_measure_stats(const sw_engine *e, sw_engine_measure m);
/* Handler time per firing of ev (all its handlers together; firings with none count as
 * ~0, as in Ignite). training = 1: firings in the training loop and outside loops;
 * 0: firings inside the validation loop. NULL for a bad ev. */
SW_API const sw_stats *sw_engine_event_stats(const sw_engine *e, sw_event ev, int training);
/* Per handler (index from sw_engine_on): its calls, all loops. NULL for a bad index. */
SW_API const sw_stats *sw_engine_handler_stats(const sw_engine *e, int handler);
SW_API int sw_engine_handler_count(const sw_engine *e);

/* Ignite's BasicTimeProfiler.print_results: processing, dataflow, event handlers
 * (total | min/index | max/index | mean | std, seconds). 0 or SW_EINVAL / SW_EIO. */
SW_API int sw_engine_print_basic(const sw_engine *e, FILE *out);
/* Ignite's HandlersTimeProfiler.print_results: one row per handler. */
SW_API int sw_engine_print_handlers(const sw_engine *e, FILE *out);
/* Ignite's HandlersTimeProfiler.write_results CSV: columns "#", processing_stats,
 * dataflow_stats, then "<handler> (<EVENT>)" per handler in the order attached; row k holds
 * each column's k-th kept duration (seconds), oldest first, and 0 past a column's end. A
 * column keeps its last options.handler_rows values. 0, SW_EINVAL (NULL), SW_ESTATE (the
 * engine was made with handler_rows = 0: nothing was kept), SW_ENOMEM or SW_EIO. */
SW_API int sw_engine_write_handlers_csv(const sw_engine *e, FILE *out);
/* fastxtend's show_training_loop: the loop's events in order with their handlers. */
SW_API int sw_engine_show_training_loop(const sw_engine *e, FILE *out);

/* ---- thunder's TimeProfiler keys -------------------------------------------------------
 *   on by default: "train batch", "validation batch", "train epoch", "validation epoch",
 *                  "avg train downtime", "avg val downtime"
 *   opt-in:        "backward", "optimizer step", "total train downtime", "total val downtime"
 * Values are seconds: batch/epoch keys are means per batch/epoch, "avg * downtime" the mean
 * data wait per batch, "total * downtime" the data wait summed over an epoch (mean over
 * epochs), "backward"/"optimizer step" the mean of those actions in the train phase. */

typedef struct sw_time_profiler {
    uint32_t keys; /* bit i = key i of the list above */
} sw_time_profiler;

#define SW_TIME_PROFILER_KEY_COUNT 10

/* The default keys (thunder's TimeProfiler()). */
SW_API void sw_time_profiler_init(sw_time_profiler *tp);
/* Add keys, as TimeProfiler("backward", "optimizer step"). SW_EINVAL for an unknown key
 * (nothing is added then). */
SW_API int sw_time_profiler_select(sw_time_profiler *tp, const char *const *keys, size_t n);
/* Key i's name (0 <= i < SW_TIME_PROFILER_KEY_COUNT), NULL otherwise; and whether selected. */
SW_API const char *sw_time_profiler_key(size_t i);
SW_API int sw_time_profiler_selected(const sw_time_profiler *tp, const char *key);
/* The value of a key (selected or not) in seconds. SW_EINVAL for an unknown key,
 * SW_ENOTFOUND when the run has no measurement for it yet. */
SW_API int sw_time_profiler_value(const sw_time_profiler *tp, sw_engine *e, const char *key,
                                  double *seconds);
/* The selected keys as "key: value" lines (seconds); "-" for keys not measured. */
SW_API int sw_time_profiler_write(const sw_time_profiler *tp, sw_engine *e, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_ENGINE_H */
