/*
 * engine.c — the event loop: epochs over a data source, a training and a validation loop,
 * handlers on events, terminate, errors as "exceptions", and the timing of all of it.
 *
 * Every timed piece is measured twice on purpose: the engine keeps Ignite's own figures
 * (per event, per handler, processing, dataflow) in sw_stats, and the profiler gets the
 * same work as phases, steps and actions, so every stepwatch report shows it too.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#define SW__TRAIN 1
#define SW__VALID 0

static const char *const sw__event_names[SW_EVENT_COUNT] = {
    "STARTED",
    "EPOCH_STARTED",
    "GET_BATCH_STARTED",
    "GET_BATCH_COMPLETED",
    "ITERATION_STARTED",
    "ITERATION_COMPLETED",
    "VALIDATION_STARTED",
    "VALIDATION_COMPLETED",
    "EPOCH_COMPLETED",
    "COMPLETED",
    "EXCEPTION_RAISED",
    "TERMINATE",
    "TERMINATE_SINGLE_EPOCH",
};

const char *sw_event_name(sw_event ev) {
    if ((unsigned)ev >= SW_EVENT_COUNT)
        return NULL;
    return sw__event_names[ev];
}

static double sw__seconds(uint64_t ns) {
    return (double)ns / 1e9;
}

static void sw__reset_timing(sw_engine *e) {
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < SW_EVENT_COUNT; i++)
            sw_stats_init(&e->event_stats[k][i]);
    for (int i = 0; i < SW_MEASURE_COUNT; i++)
        sw_stats_init(&e->measure[i]);
}

int sw_engine_new(const sw_engine_options *opts, sw_engine **out) {
    if (!out)
        return SW_EINVAL;
    *out = NULL;
    sw_engine_options o;
    int rc = sw__sized_in(&o, sizeof o, opts, SW__END_OF(sw_engine_options, csv_path),
                          "sw_engine_options");
    if (rc != 0)
        return rc;
    sw_engine *e = calloc(1, sizeof *e);
    if (!e)
        return SW_ENOMEM;
    e->opts = o;
    if (e->opts.max_epochs == 0)
        e->opts.max_epochs = 1;
    if (e->opts.validate_every == 0)
        e->opts.validate_every = 1;
    if (e->opts.epoch_length < 0) {
        free(e);
        return SW_EINVAL;
    }
    e->opts.profiler_options = NULL; /* not kept: the caller's struct may go away */
    if (o.csv_path) {
        e->csv_path = sw__strdup(o.csv_path);
        if (!e->csv_path) {
            free(e);
            return SW_ENOMEM;
        }
    }
    e->opts.csv_path = e->csv_path;
    if (e->opts.profiler) {
        e->profiler = e->opts.profiler;
    } else {
        rc = sw_profiler_new(o.profiler_options, &e->profiler);
        if (rc < 0) {
            free(e->csv_path);
            free(e);
            return rc;
        }
        e->owns_profiler = 1;
    }
    e->data_action = sw_action(e->profiler, "data");
    sw__reset_timing(e);
    sw__history_init(&e->processing_history, e->opts.handler_rows);
    sw__history_init(&e->dataflow_history, e->opts.handler_rows);
    e->state.epoch_length = -1;
    e->state.error_event = -1;
    *out = e;
    return 0;
}

void sw_engine_free(sw_engine *e) {
    if (!e)
        return;
    for (int i = 0; i < e->nhandlers; i++) {
        free(e->handlers[i].name);
        sw__history_free(&e->handlers[i].history);
    }
    free(e->handlers);
    sw__history_free(&e->processing_history);
    sw__history_free(&e->dataflow_history);
    sw_output_abort(e->csv.out); /* freed mid-run: the old CSV, if any, stays */
    if (e->owns_profiler)
        sw_profiler_free(e->profiler);
    free(e->csv_path);
    free(e);
}

static int sw__set_loop(sw_engine *e, sw__loop *loop, const sw_data_source *data, sw_process_fn fn,
                        void *user) {
    if (!e || !data || !fn)
        return SW_EINVAL;
    if (e->running)
        return SW_ESTATE;
    sw_data_source source;
    int rc = sw__sized_in(&source, sizeof source, data, SW__END_OF(sw_data_source, length),
                          "sw_data_source");
    if (rc != 0)
        return rc;
    if (!source.next)
        return SW_EINVAL;
    loop->data = source;
    loop->fn = fn;
    loop->user = user;
    loop->set = 1;
    loop->exhausted = 1;
    return 0;
}

int sw_engine_set_train(sw_engine *e, const sw_data_source *data, sw_process_fn fn, void *user) {
    return e ? sw__set_loop(e, &e->train, data, fn, user) : SW_EINVAL;
}

int sw_engine_set_valid(sw_engine *e, const sw_data_source *data, sw_process_fn fn, void *user) {
    return e ? sw__set_loop(e, &e->valid, data, fn, user) : SW_EINVAL;
}

int sw_engine_on(sw_engine *e, sw_event ev, const char *name, sw_handler_fn fn, void *user,
                 uint32_t every) {
    if (!e || !fn || !name || !*name || (unsigned)ev >= SW_EVENT_COUNT)
        return SW_EINVAL;
    if (e->running)
        return SW_ESTATE;
    if (e->nhandlers == e->cap_handlers) {
        int cap = e->cap_handlers ? 2 * e->cap_handlers : 8;
        sw__handler *h = realloc(e->handlers, (size_t)cap * sizeof *h);
        if (!h)
            return SW_ENOMEM;
        e->handlers = h;
        e->cap_handlers = cap;
    }
    /* The action name is "callback:" + name, interned once here, never on the hot path. */
    size_t len = strlen(name);
    char *action = malloc(len + sizeof "callback:");
    char *copy = sw__strdup(name);
    if (!action || !copy) {
        free(action);
        free(copy);
        return SW_ENOMEM;
    }
    memcpy(action, "callback:", 9);
    memcpy(action + 9, name, len + 1);
    sw__handler *h = &e->handlers[e->nhandlers];
    memset(h, 0, sizeof *h);
    h->name = copy;
    h->event = ev;
    h->fn = fn;
    h->user = user;
    h->every = every ? every : 1;
    h->action = sw_action(e->profiler, action);
    free(action);
    sw_stats_init(&h->stats);
    sw__history_init(&h->history, e->opts.handler_rows);
    return e->nhandlers++;
}

void sw_engine_terminate(sw_engine *e) {
    if (e)
        e->terminate = 1;
}

void sw_engine_terminate_epoch(sw_engine *e) {
    if (e)
        e->terminate_epoch = 1;
}

const sw_engine_state *sw_engine_get_state(const sw_engine *e) {
    return e ? &e->state : NULL;
}

void sw_engine_set_output(sw_engine *e, double output) {
    if (e)
        e->state.output = output;
}

sw_profiler *sw_engine_profiler(sw_engine *e) {
    return e ? e->profiler : NULL;
}

/* Run ev's handlers; time each one and all of them together. The first error stops the
 * remaining handlers and is returned (after it was recorded in state). */
static int sw__fire(sw_engine *e, sw_event ev) {
    int kind = e->state.training ? SW__TRAIN : SW__VALID;
    uint64_t index = e->event_count[kind][ev]++;
    uint64_t start = sw_now_ns();
    int rc = 0;
    for (int i = 0; i < e->nhandlers && rc == 0; i++) {
        sw__handler *h = &e->handlers[i];
        if (h->event != ev)
            continue;
        h->occurrences++;
        if (h->occurrences % h->every != 0)
            continue;
        uint64_t t0 = sw_now_ns();
        sw_begin(e->profiler, h->action);
        rc = h->fn(e, ev, h->user);
        sw_end(e->profiler, h->action);
        uint64_t dt = sw_now_ns() - t0;
        sw_stats_add(&h->stats, dt, dt, (int64_t)h->stats.count, 0);
        sw__history_add(&h->history, dt);
    }
    uint64_t total = sw_now_ns() - start;
    sw_stats_add(&e->event_stats[kind][ev], total, total, (int64_t)index, 0);
    e->last_event_s[ev] = sw__seconds(total);
    if (rc < 0 && e->state.error == 0) {
        e->state.error = rc;
        e->state.error_event = (int)ev;
    }
    return rc < 0 ? rc : 0;
}

/* A callback (data source or processing function) failed. */
static int sw__fail(sw_engine *e, int rc) {
    if (e->state.error == 0) {
        e->state.error = rc;
        e->state.error_event = -1;
    }
    return rc;
}

/* Ask the data source for the next batch. 1 = a batch, 0 = the pass is over, < 0 error.
 * A source of known length that runs dry is reset once and asked again (as Ignite restarts
 * the data iterator). */
static int sw__next_batch(sw_engine *e, sw__loop *loop, int known_length) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (loop->exhausted) {
            if (loop->data.reset) {
                int rc = loop->data.reset(loop->data.ctx);
                if (rc < 0)
                    return rc;
            }
            loop->exhausted = 0;
        }
        void *batch = NULL;
        uint32_t size = 0;
        int rc = loop->data.next(loop->data.ctx, &batch, &size);
        if (rc < 0)
            return rc;
        if (rc > 0) {
            e->state.batch = batch;
            e->state.batch_size = size;
            return 1;
        }
        loop->exhausted = 1;
        if (!known_length)
            return 0;
    }
    return 0; /* a source of known length that stays empty: the loop ends */
}

/* One loop over a source: the training loop (training = 1, up to length batches) or the
 * validation loop. Each batch is one profiler step, begun when the batch has arrived at the
 * time its fetch began: the fetch that finds the pass over opens no step. */
static int sw__run_loop(sw_engine *e, sw__loop *loop, int training, int64_t length) {
    sw_profiler *p = e->profiler;
    int known = length > 0;
    uint64_t loop_start = sw_now_ns();
    uint64_t downtime = 0;
    int rc = 0;
    e->state.training = training;
    e->state.epoch_iteration = 0;
    sw_phase_begin(p, training ? SW_PHASE_TRAIN : SW_PHASE_VALID);
    while (!e->terminate && !e->terminate_epoch &&
           (!known || (int64_t)e->state.epoch_iteration < length)) {
        rc = sw__fire(e, SW_EVENT_GET_BATCH_STARTED);
        if (rc < 0)
            break;
        uint64_t t0 = sw_now_ns();
        int got = sw__next_batch(e, loop, known);
        uint64_t t1 = sw_now_ns();
        if (got < 0) {
            rc = sw__fail(e, got);
            break;
        }
        if (got == 0)
            break;
        sw_step_begin_at(p, e->state.batch_size, t0);
        sw_record(p, e->data_action, t0, t1);
        uint64_t dataflow = t1 - t0;
        downtime += dataflow;
        e->state.epoch_iteration++;
        if (training)
            e->state.iteration++;
        else
            e->state.valid_iteration++;
        int64_t index = (int64_t)(training ? e->state.iteration : e->state.valid_iteration) - 1;
        sw_stats_add(&e->measure[training ? SW_MEASURE_DATAFLOW : SW_MEASURE_VALID_DATAFLOW],
                     dataflow, dataflow, index, e->state.batch_size);
        if (training)
            sw__history_add(&e->dataflow_history, dataflow);
        if ((rc = sw__fire(e, SW_EVENT_GET_BATCH_COMPLETED)) < 0)
            break;
        if ((rc = sw__fire(e, SW_EVENT_ITERATION_STARTED)) < 0)
            break;
        uint64_t t2 = sw_now_ns();
        rc = loop->fn(e, e->state.batch, e->state.batch_size, loop->user);
        uint64_t processing = sw_now_ns() - t2;
        sw_stats_add(&e->measure[training ? SW_MEASURE_PROCESSING : SW_MEASURE_VALID_PROCESSING],
                     processing, processing, index, e->state.batch_size);
        if (training)
            sw__history_add(&e->processing_history, processing);
        if (rc < 0) {
            rc = sw__fail(e, rc);
            break;
        }
        if ((rc = sw__fire(e, SW_EVENT_ITERATION_COMPLETED)) < 0)
            break;
        sw_step_end(p);
        if (training && e->csv.file)
            sw__csv_row(&e->csv, e, sw__seconds(processing), sw__seconds(dataflow));
    }
    /* A step is still open after an error in its processing or handlers. */
    if (sw_step_index(p) >= 0)
        sw_step_end(p);
    if (rc == 0 && e->terminate_epoch) {
        e->terminate_epoch = 0;
        rc = sw__fire(e, SW_EVENT_TERMINATE_SINGLE_EPOCH);
    }
    sw_phase_end(p, training ? SW_PHASE_TRAIN : SW_PHASE_VALID);
    uint64_t loop_ns = sw_now_ns() - loop_start;
    int64_t epoch_index = (int64_t)e->state.epoch - 1;
    sw_stats_add(&e->measure[training ? SW_MEASURE_TRAIN_EPOCH : SW_MEASURE_VALID_EPOCH], loop_ns,
                 loop_ns, epoch_index, 0);
    sw_stats_add(&e->measure[training ? SW_MEASURE_TRAIN_DOWNTIME : SW_MEASURE_VALID_DOWNTIME],
                 downtime, downtime, epoch_index, 0);
    if (training && rc == 0 && !known && e->state.epoch_length < 0)
        e->state.epoch_length = (int64_t)e->state.epoch_iteration;
    return rc;
}

static int sw__run_validation(sw_engine *e) {
    uint64_t start = sw_now_ns();
    e->state.training = 0;
    int rc = sw__fire(e, SW_EVENT_VALIDATION_STARTED);
    if (rc == 0)
        rc = sw__run_loop(e, &e->valid, SW__VALID, e->valid.data.length);
    e->state.training = 0;
    if (rc == 0) {
        e->state.times[SW_EVENT_VALIDATION_COMPLETED] = sw__seconds(sw_now_ns() - start);
        rc = sw__fire(e, SW_EVENT_VALIDATION_COMPLETED);
    }
    e->state.training = 1;
    return rc;
}

/* One epoch: EPOCH_STARTED, the training loop, validation, EPOCH_COMPLETED. */
static int sw__run_epoch(sw_engine *e, int64_t length) {
    sw_profiler *p = e->profiler;
    uint64_t start = sw_now_ns();
    e->state.epoch++;
    e->state.training = 1;
    sw_phase_begin(p, SW_PHASE_EPOCH);
    int rc = sw__fire(e, SW_EVENT_EPOCH_STARTED);
    if (rc == 0)
        rc = sw__run_loop(e, &e->train, SW__TRAIN, length);
    e->state.training = 1;
    if (rc == 0 && !e->terminate && e->valid.set && e->state.epoch % e->opts.validate_every == 0)
        rc = sw__run_validation(e);
    if (rc == 0 && !e->terminate) {
        e->state.times[SW_EVENT_EPOCH_COMPLETED] = sw__seconds(sw_now_ns() - start);
        rc = sw__fire(e, SW_EVENT_EPOCH_COMPLETED);
        /* As Ignite: the epoch's time includes its EPOCH_COMPLETED handlers. */
        e->state.times[SW_EVENT_EPOCH_COMPLETED] = sw__seconds(sw_now_ns() - start);
        if (e->csv.file)
            sw__csv_epoch_done(&e->csv, e->last_event_s[SW_EVENT_EPOCH_COMPLETED]);
    }
    sw_phase_end(p, SW_PHASE_EPOCH);
    return rc;
}

static void sw__reset_state(sw_engine *e) {
    memset(&e->state, 0, sizeof e->state);
    e->state.max_epochs = e->opts.max_epochs;
    e->state.epoch_length = e->opts.epoch_length > 0   ? e->opts.epoch_length
                            : e->train.data.length > 0 ? e->train.data.length
                                                       : -1;
    e->state.error_event = -1;
    e->state.training = 1;
    e->terminate = 0;
    e->terminate_epoch = 0;
    e->train.exhausted = 1;
    e->valid.exhausted = 1;
}

int sw_engine_run(sw_engine *e) {
    if (!e || !e->train.set)
        return SW_EINVAL;
    if (e->running)
        return SW_ESTATE;
    sw__reset_state(e);
    if (e->csv_path) {
        int rc = sw__csv_open(&e->csv, e->csv_path);
        if (rc < 0)
            return rc;
    }
    e->running = 1;
    sw_profiler *p = e->profiler;
    uint64_t start = sw_now_ns();
    sw_phase_begin(p, SW_PHASE_FIT);
    int rc = sw__fire(e, SW_EVENT_STARTED);
    while (rc == 0 && !e->terminate && e->state.epoch < e->state.max_epochs) {
        /* Unknown length: -1 until the first pass told it; then keep passes open-ended so
         * a source whose passes differ in length still ends each one naturally. */
        int64_t length = e->opts.epoch_length > 0 ? e->opts.epoch_length : e->train.data.length;
        rc = sw__run_epoch(e, length > 0 ? length : -1);
    }
    e->state.training = 1;
    if (rc < 0) {
        /* The "exception": handlers see state.error; the run stops here. */
        sw__fire(e, SW_EVENT_EXCEPTION_RAISED);
        e->state.error = rc;
    } else {
        if (e->terminate)
            rc = sw__fire(e, SW_EVENT_TERMINATE);
        if (rc == 0) {
            e->state.times[SW_EVENT_COMPLETED] = sw__seconds(sw_now_ns() - start);
            rc = sw__fire(e, SW_EVENT_COMPLETED);
            e->state.times[SW_EVENT_COMPLETED] = sw__seconds(sw_now_ns() - start);
        }
        if (rc < 0) {
            sw__fire(e, SW_EVENT_EXCEPTION_RAISED);
            e->state.error = rc;
        }
    }
    sw_phase_end(p, SW_PHASE_FIT);
    if (e->csv.file) {
        int crc = sw__csv_close(&e->csv, e->last_event_s[SW_EVENT_COMPLETED]);
        if (rc == 0 && crc < 0)
            rc = crc;
    }
    e->running = 0;
    return rc;
}

const sw_stats *sw_engine_measure_stats(const sw_engine *e, sw_engine_measure m) {
    if (!e || (unsigned)m >= SW_MEASURE_COUNT)
        return NULL;
    return &e->measure[m];
}

const sw_stats *sw_engine_event_stats(const sw_engine *e, sw_event ev, int training) {
    if (!e || (unsigned)ev >= SW_EVENT_COUNT)
        return NULL;
    return &e->event_stats[training ? SW__TRAIN : SW__VALID][ev];
}

const sw_stats *sw_engine_handler_stats(const sw_engine *e, int handler) {
    if (!e || handler < 0 || handler >= e->nhandlers)
        return NULL;
    return &e->handlers[handler].stats;
}

int sw_engine_handler_count(const sw_engine *e) {
    return e ? e->nhandlers : 0;
}
