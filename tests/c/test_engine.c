/*
 * test_engine.c — the engine's event loop: event order, every-N filters, terminate (run and
 * epoch), errors in handlers, the processing function and the data source (the report must
 * stay complete), handler timing, the streamed Ignite CSV, the printed views, thunder keys.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a data source over the numbers 1..n (length known or not) ---- */
typedef struct counting_source {
    int n, pos;
    int value;
    int fail_at; /* next() returns SW_EIO for this batch number (from 1); 0 = never */
    int resets;
} counting_source;

static int cs_next(void *ctx, void **batch, uint32_t *size) {
    counting_source *s = ctx;
    if (s->pos >= s->n)
        return 0;
    s->pos++;
    if (s->fail_at && s->pos == s->fail_at)
        return SW_EIO;
    s->value = s->pos;
    *batch = &s->value;
    *size = 8;
    return 1;
}

static int cs_reset(void *ctx) {
    counting_source *s = ctx;
    s->pos = 0;
    s->resets++;
    return 0;
}

static sw_data_source source_of(counting_source *s, int n, int known) {
    memset(s, 0, sizeof *s);
    s->n = n;
    sw_data_source d = {sizeof(sw_data_source), cs_next, cs_reset, s, known ? n : -1};
    return d;
}

static void sleep_ms(double ms) {
    struct timespec ts = {0, (long)(ms * 1e6)};
    nanosleep(&ts, NULL);
}

/* ---- an event log: handlers append "<EVENT> " ---- */
typedef struct log_buf {
    char text[8192];
    int calls[SW_EVENT_COUNT];
} log_buf;

static void log_add(log_buf *l, const char *s) {
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s ", s);
}

static int log_handler(sw_engine *e, sw_event ev, void *user) {
    log_buf *l = user;
    l->calls[ev]++;
    log_add(l, sw_event_name(ev));
    return 0;
}

static int process_log(sw_engine *e, void *batch, uint32_t size, void *user) {
    log_add(user, sw_engine_get_state(e)->training ? "P" : "V");
    sw_engine_set_output(e, *(int *)batch);
    return 0;
}

static int process_noop(sw_engine *e, void *batch, uint32_t size, void *user) {
    return 0;
}

/* Slow (1 ms) from the 4th batch on: tells the newest processing times from the oldest. */
static int process_slow_after_3(sw_engine *e, void *batch, uint32_t size, void *user) {
    if (*(int *)batch > 3)
        sleep_ms(1);
    return 0;
}

static sw_engine *new_engine(uint64_t epochs, const char *csv) {
    sw_engine_options o = SW_ENGINE_OPTIONS_INIT;
    o.max_epochs = epochs;
    o.csv_path = csv;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&o, &e), 0);
    assert_non_null(e);
    return e;
}

static void attach_all(sw_engine *e, log_buf *l) {
    for (int ev = 0; ev < SW_EVENT_COUNT; ev++)
        assert_true(sw_engine_on(e, (sw_event)ev, sw_event_name((sw_event)ev), log_handler, l, 1) >=
                    0);
}

/* The snapshot of a run that ended (normally or not) is complete and consistent. */
static sw_snapshot *check_complete_report(sw_engine *e) {
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(sw_engine_profiler(e), &s), 0);
    const sw_row *fit = sw_snapshot_find(s, "fit", "all");
    assert_non_null(fit);
    assert_int_equal(fit->stats.count, 1);
    assert_int_equal(s->misuse.open_at_snapshot, 0);
    assert_int_equal(s->misuse.phase_mismatch, 0);
    assert_int_equal(s->misuse.step_overlap, 0);
    assert_int_equal(s->misuse.mismatched_end, 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(sw_snapshot_write(s, SW_FORMAT_JSON, f), 0);
    fclose(f);
    assert_true(len > 100);
    free(buf);
    return s;
}

static void test_event_order(void **state) {
    log_buf l = {0};
    counting_source ts, vs;
    sw_data_source td = source_of(&ts, 3, 1), vd = source_of(&vs, 2, 1);
    sw_engine *e = new_engine(2, NULL);
    assert_int_equal(sw_engine_set_train(e, &td, process_log, &l), 0);
    assert_int_equal(sw_engine_set_valid(e, &vd, process_log, &l), 0);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), 0);

    const char *batch_train =
        "GET_BATCH_STARTED GET_BATCH_COMPLETED ITERATION_STARTED P ITERATION_COMPLETED ";
    const char *batch_valid =
        "GET_BATCH_STARTED GET_BATCH_COMPLETED ITERATION_STARTED V ITERATION_COMPLETED ";
    char expected[8192] = "STARTED ";
    for (int epoch = 0; epoch < 2; epoch++) {
        strcat(expected, "EPOCH_STARTED ");
        for (int i = 0; i < 3; i++)
            strcat(expected, batch_train);
        strcat(expected, "VALIDATION_STARTED ");
        for (int i = 0; i < 2; i++)
            strcat(expected, batch_valid);
        strcat(expected, "VALIDATION_COMPLETED EPOCH_COMPLETED ");
    }
    strcat(expected, "COMPLETED ");
    assert_string_equal(l.text, expected);

    const sw_engine_state *st = sw_engine_get_state(e);
    assert_int_equal(st->epoch, 2);
    assert_int_equal(st->iteration, 6);
    assert_int_equal(st->valid_iteration, 4);
    assert_int_equal(st->epoch_length, 3);
    assert_int_equal(st->error, 0);
    assert_true(st->times[SW_EVENT_EPOCH_COMPLETED] > 0);
    assert_true(st->times[SW_EVENT_COMPLETED] >= st->times[SW_EVENT_EPOCH_COMPLETED]);
    assert_int_equal(ts.resets, 2);
    assert_int_equal(vs.resets, 2);

    /* Phases and steps went to the profiler: 6 train steps with batch size 8. */
    sw_snapshot *s = check_complete_report(e);
    const sw_row *step = sw_snapshot_find(s, "step", "train");
    assert_non_null(step);
    assert_int_equal(step->stats.count + step->warmup.count, 6);
    assert_int_equal(step->stats.samples + step->warmup.samples, 48);
    const sw_row *vstep = sw_snapshot_find(s, "step", "valid");
    assert_non_null(vstep);
    assert_int_equal(vstep->stats.count, 4);
    assert_non_null(sw_snapshot_find(s, "data", "train"));
    assert_int_equal(sw_snapshot_find(s, "epoch", "all")->stats.count, 2);
    sw_snapshot_free(s);
    sw_engine_free(e);
}

static void test_unknown_length(void **state) {
    log_buf l = {0};
    counting_source ts;
    sw_data_source td = source_of(&ts, 4, 0);
    sw_engine *e = new_engine(2, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), 0);
    const sw_engine_state *st = sw_engine_get_state(e);
    assert_int_equal(st->iteration, 8);
    assert_int_equal(st->epoch_length, 4);
    /* As Ignite: GET_BATCH_STARTED also fires for the call that finds the pass over. */
    assert_int_equal(l.calls[SW_EVENT_GET_BATCH_STARTED], 10);
    assert_int_equal(l.calls[SW_EVENT_GET_BATCH_COMPLETED], 8);
    assert_int_equal(l.calls[SW_EVENT_ITERATION_COMPLETED], 8);
    assert_int_equal(l.calls[SW_EVENT_EPOCH_COMPLETED], 2);
    sw_snapshot *s = check_complete_report(e);
    /* A step per batch: the fetch that finds the pass over opens none. */
    const sw_row *step = sw_snapshot_find(s, "step", "train");
    assert_non_null(step);
    assert_int_equal(step->stats.count + step->warmup.count, 8);
    assert_int_equal(step->stats.samples + step->warmup.samples, 8 * 8);
    assert_int_equal(sw_snapshot_find(s, "data", "train")->stats.count, 8);
    sw_snapshot_free(s);
    sw_engine_free(e);
}

/* Known length longer than the source: the source is restarted (as Ignite's iterator). */
static void test_epoch_length_restarts_source(void **state) {
    counting_source ts;
    sw_data_source td = source_of(&ts, 4, 0);
    sw_engine_options o = SW_ENGINE_OPTIONS_INIT;
    o.max_epochs = 1;
    o.epoch_length = 10;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&o, &e), 0);
    sw_engine_set_train(e, &td, process_noop, NULL);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(sw_engine_get_state(e)->iteration, 10);
    assert_int_equal(ts.resets, 3);
    sw_engine_free(e);
}

typedef struct every_log {
    int n;
    uint64_t iterations[16];
} every_log;

static int every_handler(sw_engine *e, sw_event ev, void *user) {
    every_log *l = user;
    if (l->n < 16)
        l->iterations[l->n++] = sw_engine_get_state(e)->iteration;
    return 0;
}

static void test_every_n(void **state) {
    counting_source ts;
    sw_data_source td = source_of(&ts, 5, 1);
    sw_engine *e = new_engine(2, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    every_log three = {0}, epochs = {0};
    assert_true(sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "every3", every_handler, &three, 3) >=
                0);
    assert_true(sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "every2", every_handler, &epochs, 2) >=
                0);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(three.n, 3);
    assert_int_equal(three.iterations[0], 3);
    assert_int_equal(three.iterations[1], 6);
    assert_int_equal(three.iterations[2], 9);
    assert_int_equal(epochs.n, 1);
    assert_int_equal(epochs.iterations[0], 10);
    assert_int_equal(sw_engine_handler_stats(e, 0)->count, 3);
    sw_engine_free(e);
}

static int terminate_at_4(sw_engine *e, sw_event ev, void *user) {
    if (sw_engine_get_state(e)->iteration == 4)
        sw_engine_terminate(e);
    return 0;
}

static void test_terminate_run(void **state) {
    log_buf l = {0};
    counting_source ts, vs;
    sw_data_source td = source_of(&ts, 3, 1), vd = source_of(&vs, 2, 1);
    sw_engine *e = new_engine(5, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    sw_engine_set_valid(e, &vd, process_noop, NULL);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "stopper", terminate_at_4, NULL, 1);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), 0);
    const sw_engine_state *st = sw_engine_get_state(e);
    assert_int_equal(st->iteration, 4);
    assert_int_equal(st->epoch, 2);
    assert_int_equal(l.calls[SW_EVENT_TERMINATE], 1);
    assert_int_equal(l.calls[SW_EVENT_COMPLETED], 1);
    assert_int_equal(l.calls[SW_EVENT_EPOCH_COMPLETED], 1); /* the cut epoch does not complete */
    assert_int_equal(l.calls[SW_EVENT_VALIDATION_STARTED], 1);
    /* TERMINATE comes right after the iteration, COMPLETED last. */
    const char *tail = strstr(l.text, "ITERATION_COMPLETED TERMINATE COMPLETED ");
    assert_non_null(tail);
    assert_string_equal(tail, "ITERATION_COMPLETED TERMINATE COMPLETED ");
    sw_snapshot *s = check_complete_report(e);
    assert_int_equal(sw_snapshot_find(s, "epoch", "all")->stats.count, 2);
    sw_snapshot_free(s);
    /* A second run starts afresh. */
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(sw_engine_get_state(e)->iteration, 4);
    sw_engine_free(e);
}

static int terminate_epoch_at_2(sw_engine *e, sw_event ev, void *user) {
    const sw_engine_state *st = sw_engine_get_state(e);
    if (st->training && st->epoch_iteration == 2)
        sw_engine_terminate_epoch(e);
    return 0;
}

static void test_terminate_epoch(void **state) {
    log_buf l = {0};
    counting_source ts, vs;
    sw_data_source td = source_of(&ts, 5, 1), vd = source_of(&vs, 2, 1);
    sw_engine *e = new_engine(3, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    sw_engine_set_valid(e, &vd, process_noop, NULL);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "epoch_stopper", terminate_epoch_at_2, NULL, 1);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), 0);
    const sw_engine_state *st = sw_engine_get_state(e);
    assert_int_equal(st->epoch, 3);
    assert_int_equal(st->iteration, 6);
    assert_int_equal(st->valid_iteration, 6); /* validation still runs in full */
    assert_int_equal(l.calls[SW_EVENT_TERMINATE_SINGLE_EPOCH], 3);
    assert_int_equal(l.calls[SW_EVENT_EPOCH_COMPLETED], 3);
    assert_int_equal(l.calls[SW_EVENT_TERMINATE], 0);
    sw_snapshot_free(check_complete_report(e));
    sw_engine_free(e);
}

static int fail_at_5(sw_engine *e, sw_event ev, void *user) {
    return sw_engine_get_state(e)->iteration == 5 ? SW_EIO : 0;
}

static int never_after_failure(sw_engine *e, sw_event ev, void *user) {
    int *calls = user;
    if (sw_engine_get_state(e)->iteration == 5)
        (*calls)++;
    return 0;
}

static void test_error_in_handler(void **state) {
    log_buf l = {0};
    counting_source ts;
    sw_data_source td = source_of(&ts, 3, 1);
    sw_engine *e = new_engine(4, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    int after = 0;
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "failing", fail_at_5, NULL, 1);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "second", never_after_failure, &after, 1);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), SW_EIO);
    const sw_engine_state *st = sw_engine_get_state(e);
    assert_int_equal(st->error, SW_EIO);
    assert_int_equal(st->error_event, SW_EVENT_ITERATION_COMPLETED);
    assert_int_equal(after, 0); /* handlers after the failing one do not run */
    assert_int_equal(l.calls[SW_EVENT_EXCEPTION_RAISED], 1);
    assert_int_equal(l.calls[SW_EVENT_COMPLETED], 0);
    assert_int_equal(l.calls[SW_EVENT_EPOCH_COMPLETED], 1);
    sw_snapshot *s = check_complete_report(e);
    const sw_row *step = sw_snapshot_find(s, "step", "train");
    assert_int_equal(step->stats.count + step->warmup.count, 5);
    assert_non_null(sw_snapshot_find(s, "callback:failing", "train"));
    sw_snapshot_free(s);
    sw_engine_free(e);
}

static int process_fail_at_3(sw_engine *e, void *batch, uint32_t size, void *user) {
    sw_profiler *p = sw_engine_profiler(e);
    SW_SCOPE(p, "forward") {
        sleep_ms(0.1);
    }
    return sw_engine_get_state(e)->iteration == 3 ? SW_EINVAL : 0;
}

static void test_error_in_process(void **state) {
    log_buf l = {0};
    counting_source ts;
    sw_data_source td = source_of(&ts, 10, 1);
    sw_engine *e = new_engine(1, NULL);
    sw_engine_set_train(e, &td, process_fail_at_3, NULL);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), SW_EINVAL);
    assert_int_equal(sw_engine_get_state(e)->error_event, -1);
    assert_int_equal(l.calls[SW_EVENT_EXCEPTION_RAISED], 1);
    assert_int_equal(l.calls[SW_EVENT_ITERATION_COMPLETED], 2);
    sw_snapshot *s = check_complete_report(e);
    const sw_row *fwd = sw_snapshot_find(s, "forward", "train");
    assert_non_null(fwd);
    assert_int_equal(fwd->stats.count + fwd->warmup.count, 3);
    assert_int_equal(sw_engine_measure_stats(e, SW_MEASURE_PROCESSING)->count, 3);
    sw_snapshot_free(s);
    sw_engine_free(e);
}

static void test_error_in_data_source(void **state) {
    log_buf l = {0};
    counting_source ts;
    sw_data_source td = source_of(&ts, 10, 1);
    ts.fail_at = 4;
    sw_engine *e = new_engine(1, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    attach_all(e, &l);
    assert_int_equal(sw_engine_run(e), SW_EIO);
    assert_int_equal(sw_engine_get_state(e)->iteration, 3);
    assert_int_equal(l.calls[SW_EVENT_EXCEPTION_RAISED], 1);
    sw_snapshot_free(check_complete_report(e));
    sw_engine_free(e);
}

static int sleepy(sw_engine *e, sw_event ev, void *user) {
    sleep_ms(*(double *)user);
    return 0;
}

static void test_handler_timing(void **state) {
    counting_source ts;
    sw_data_source td = source_of(&ts, 4, 1);
    sw_engine *e = new_engine(3, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    double ms = 3;
    int h = sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "sleepy", sleepy, &ms, 1);
    assert_int_equal(sw_engine_run(e), 0);
    const sw_stats *hs = sw_engine_handler_stats(e, h);
    assert_int_equal(hs->count, 3);
    assert_true(hs->min_ns >= 3000000);
    assert_true(hs->total_ns >= 9000000);
    const sw_stats *es = sw_engine_event_stats(e, SW_EVENT_EPOCH_COMPLETED, 1);
    assert_int_equal(es->count, 3);
    assert_true(es->total_ns >= hs->total_ns);
    /* The same time is in the profiler as the action "callback:sleepy" of phase "epoch". */
    sw_snapshot *s = check_complete_report(e);
    const sw_row *row = sw_snapshot_find(s, "callback:sleepy", "epoch");
    assert_non_null(row);
    assert_int_equal(row->stats.count, 3);
    assert_true(row->stats.total_ns >= 9000000);
    assert_true(row->stats.total_ns <= hs->total_ns);
    sw_snapshot_free(s);
    assert_null(sw_engine_handler_stats(e, 5));
    assert_null(sw_engine_event_stats(e, SW_EVENT_COUNT, 1));
    sw_engine_free(e);
}

/* Read a whole file into a NUL-terminated buffer. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The numbers of one CSV data line (no quoted fields) into v; returns how many. */
static int csv_numbers(char *line, double *v, int max) {
    int k = 0;
    char *save = NULL;
    for (char *f = strtok_r(line, ",", &save); f && k < max; f = strtok_r(NULL, ",", &save))
        v[k++] = strtod(f, NULL);
    return k;
}

static void test_csv_streamed(void **state) {
    char path[] = "/tmp/sw_engine_csv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    counting_source ts;
    sw_data_source td = source_of(&ts, 3, 1);
    sw_engine *e = new_engine(2, path);
    sw_engine_set_train(e, &td, process_noop, NULL);
    double epoch_ms = 2, completed_ms = 4;
    sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "epoch_end", sleepy, &epoch_ms, 1);
    sw_engine_on(e, SW_EVENT_COMPLETED, "run_end", sleepy, &completed_ms, 1);
    assert_int_equal(sw_engine_run(e), 0);

    char *text = slurp(path);
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    assert_string_equal(line, "epoch,iteration,processing_stats,dataflow_stats,Event_STARTED,"
                              "Event_COMPLETED,Event_EPOCH_STARTED,Event_EPOCH_COMPLETED,"
                              "Event_ITERATION_STARTED,Event_ITERATION_COMPLETED,"
                              "Event_GET_BATCH_STARTED,Event_GET_BATCH_COMPLETED");
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        double v[12];
        assert_int_equal(csv_numbers(line, v, 12), 12);
        assert_int_equal((int)v[0], rows / 3 + 1); /* epoch */
        assert_int_equal((int)v[1], rows + 1);     /* iteration */
        assert_true(v[5] >= 0.004 && v[5] < 1.0);  /* Event_COMPLETED, patched at the end */
        assert_true(v[7] >= 0.002 && v[7] < 1.0);  /* Event_EPOCH_COMPLETED, patched */
        rows++;
    }
    assert_int_equal(rows, 6);
    free(text);
    sw_engine_free(e);
    unlink(path);

    /* An unwritable path is a clear error before anything runs. */
    sw_engine *bad = new_engine(1, "/nonexistent-dir/x.csv");
    sw_engine_set_train(bad, &td, process_noop, NULL);
    assert_int_equal(sw_engine_run(bad), SW_EIO);
    sw_engine_free(bad);
}

/* not inlined: GCC 12 then takes the returned buffer for the local pointer (-Wdangling-pointer) */
__attribute__((noinline)) static char *capture(int (*fn)(const sw_engine *, FILE *),
                                               const sw_engine *e) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(fn(e, f), 0);
    fclose(f);
    return buf;
}

/* Ignite's HandlersTimeProfiler CSV: a column per handler, zero-padded to the longest column,
 * each column bounded to the last handler_rows values. */
static void test_handlers_csv(void **state) {
    counting_source ts;
    sw_data_source td = source_of(&ts, 3, 1);
    sw_engine_options o = SW_ENGINE_OPTIONS_INIT;
    o.max_epochs = 2;
    o.handler_rows = 4;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&o, &e), 0);
    sw_engine_set_train(e, &td, process_noop, NULL);
    double epoch_ms = 2, iteration_ms = 0.2;
    sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "log, \"epoch\"", sleepy, &epoch_ms, 1);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "every_iteration", sleepy, &iteration_ms, 1);
    assert_int_equal(sw_engine_run(e), 0);

    char *text = capture(sw_engine_write_handlers_csv, e);
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    /* The name with a comma and quotes is one quoted field (RFC 4180). */
    assert_string_equal(line, "#,processing_stats,dataflow_stats,"
                              "\"log, \"\"epoch\"\" (EPOCH_COMPLETED)\","
                              "every_iteration (ITERATION_COMPLETED)");
    /* 6 iterations, 4 kept: rows 1..4; the epoch handler ran twice, then zeros. */
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        double v[5];
        assert_int_equal(csv_numbers(line, v, 5), 5);
        assert_true(v[0] == rows + 1);
        assert_true(v[1] >= 0 && v[1] < 1.0 && v[2] >= 0 && v[2] < 1.0);
        if (rows < 2)
            assert_true(v[3] >= 0.002 && v[3] < 1.0);
        else
            assert_true(v[3] == 0);
        assert_true(v[4] >= 0.0002 && v[4] < 1.0);
        rows++;
    }
    assert_int_equal(rows, 4);
    free(text);
    sw_engine_free(e);

    /* The ring keeps the newest: the processing column holds the last 2 of 5 iterations. */
    counting_source slow;
    sw_data_source sd = source_of(&slow, 5, 1);
    o.max_epochs = 1;
    o.handler_rows = 2;
    assert_int_equal(sw_engine_new(&o, &e), 0);
    sw_engine_set_train(e, &sd, process_slow_after_3, NULL);
    assert_int_equal(sw_engine_run(e), 0);
    char *kept = capture(sw_engine_write_handlers_csv, e);
    char *ksave = NULL;
    int krows = 0;
    strtok_r(kept, "\n", &ksave); /* the header */
    for (char *k = strtok_r(NULL, "\n", &ksave); k; k = strtok_r(NULL, "\n", &ksave)) {
        double v[2];
        assert_int_equal(csv_numbers(k, v, 2), 2);
        assert_true(v[0] == krows + 1 && v[1] >= 0.001);
        krows++;
    }
    assert_int_equal(krows, 2);
    free(kept);
    sw_engine_free(e);

    /* Nothing kept without handler_rows: a clear state error, not an empty file. */
    e = new_engine(1, NULL);
    assert_int_equal(sw_engine_write_handlers_csv(e, stdout), SW_ESTATE);
    assert_int_equal(sw_engine_write_handlers_csv(e, NULL), SW_EINVAL);
    assert_int_equal(sw_engine_write_handlers_csv(NULL, stdout), SW_EINVAL);
    sw_engine_free(e);
}

#define DASHES "------------------------------------------------------------"

static void test_views(void **state) {
    counting_source ts, vs;
    sw_data_source td = source_of(&ts, 4, 1), vd = source_of(&vs, 2, 1);
    sw_engine *e = new_engine(2, NULL);
    sw_engine_set_train(e, &td, process_noop, NULL);
    sw_engine_set_valid(e, &vd, process_noop, NULL);
    double ms = 1;
    sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "sleepy", sleepy, &ms, 1);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "every_other", sleepy, &ms, 2);
    char *before = capture(sw_engine_show_training_loop, e);
    assert_non_null(strstr(before, "GET_BATCH_STARTED (before_draw)"));
    assert_non_null(strstr(before, ": [sleepy]"));
    assert_non_null(strstr(before, "[every_other (every 2)]"));
    assert_true(strstr(before, "Start Train") < strstr(before, "Start Valid"));
    free(before);
    assert_int_equal(sw_engine_run(e), 0);

    char *basic = capture(sw_engine_print_basic, e);
    assert_non_null(strstr(basic, "| Time profiling stats (in seconds):                 |"));
    assert_non_null(strstr(basic, "Processing function:\n"));
    assert_non_null(strstr(basic, "Dataflow:\n"));
    assert_non_null(strstr(basic, "- Events.EPOCH_COMPLETED: ['sleepy']\n"));
    assert_non_null(strstr(basic, "- Events.ITERATION_COMPLETED: ['every_other']\n"));
    assert_non_null(strstr(basic, "Validation processing function:"));
    /* Ignite's six events in Ignite's layout (sw_ignite_write_basic), the C engine's own
     * blocks after them; STARTED fired once: its total alone. */
    const char *completed = strstr(basic, "\n- Events.COMPLETED: []\n");
    assert_non_null(completed);
    assert_true(strstr(basic, "- Events.ITERATION_COMPLETED:") < completed);
    assert_true(strstr(basic, "- Events.GET_BATCH_STARTED:") > completed);
    assert_true(strstr(basic, "Validation processing function:") > completed);
    const char *started = strstr(basic, "- Events.STARTED: []\n");
    assert_non_null(started);
    const char *line = strchr(started, '\n') + 1;
    assert_int_equal(line[strcspn(line, "\n|")], '\n');
    free(basic);

    char *handlers = capture(sw_engine_print_handlers, e);
    assert_non_null(strstr(handlers, "Handler"));
    assert_non_null(strstr(handlers, "sleepy"));
    assert_non_null(strstr(handlers, "EPOCH_COMPLETED"));
    assert_non_null(strstr(handlers, "Processing took total"));
    assert_non_null(strstr(handlers, "Dataflow took total"));
    /* Ignite's widths: the name columns 4 wider than their longest cell in any row
     * ("every_other" 11, "ITERATION_COMPLETED" 19), the header words not counted; the Total
     * row between rules; Python's str(round(x, 5)) for the numbers. */
    char rule[128];
    snprintf(rule, sizeof rule, "\n%.15s  %.23s  %.14s  ", DASHES, DASHES, DASHES);
    assert_non_null(strstr(handlers, rule));
    assert_non_null(strstr(handlers, "\nevery_other      ITERATION_COMPLETED      "));
    assert_non_null(strstr(handlers, "\nTotal"
                                     "                                     "));
    assert_non_null(strstr(handlers, "\nValidation processing took total"));
    assert_true(strstr(handlers, "Dataflow took total") <
                strstr(handlers, "Validation processing"));
    free(handlers);
    /* every_other ran on train iterations 2, 4 of both epochs and on valid iteration 2 of
     * both epochs: 6 of 12 firings. */
    assert_int_equal(sw_engine_handler_stats(e, 1)->count, 6);
    sw_engine_free(e);
}

static int process_with_backward(sw_engine *e, void *batch, uint32_t size, void *user) {
    sw_profiler *p = sw_engine_profiler(e);
    SW_SCOPE(p, "backward") {
        sleep_ms(1);
    }
    return 0;
}

static void test_thunder_keys(void **state) {
    sw_time_profiler tp;
    sw_time_profiler_init(&tp);
    assert_true(sw_time_profiler_selected(&tp, "train batch"));
    assert_true(sw_time_profiler_selected(&tp, "avg val downtime"));
    assert_false(sw_time_profiler_selected(&tp, "backward"));
    const char *bad[] = {"backward", "no such key"};
    assert_int_equal(sw_time_profiler_select(&tp, bad, 2), SW_EINVAL);
    assert_false(sw_time_profiler_selected(&tp, "backward")); /* nothing added */
    const char *keys[] = {"backward", "optimizer step"};
    assert_int_equal(sw_time_profiler_select(&tp, keys, 2), 0);
    assert_true(sw_time_profiler_selected(&tp, "backward"));
    assert_true(sw_time_profiler_selected(&tp, "optimizer step"));
    assert_false(sw_time_profiler_selected(&tp, "total train downtime"));
    assert_string_equal(sw_time_profiler_key(9), "total val downtime");
    assert_null(sw_time_profiler_key(10));

    counting_source ts;
    sw_data_source td = source_of(&ts, 4, 1);
    sw_engine *e = new_engine(2, NULL);
    sw_engine_set_train(e, &td, process_with_backward, NULL);
    assert_int_equal(sw_engine_run(e), 0);
    double v = 0;
    assert_int_equal(sw_time_profiler_value(&tp, e, "train batch", &v), 0);
    assert_true(v >= 0.001 && v < 0.5);
    assert_int_equal(sw_time_profiler_value(&tp, e, "backward", &v), 0);
    assert_true(v >= 0.001 && v < 0.5);
    assert_int_equal(sw_time_profiler_value(&tp, e, "optimizer step", &v), SW_ENOTFOUND);
    assert_int_equal(sw_time_profiler_value(&tp, e, "validation batch", &v), SW_ENOTFOUND);
    assert_int_equal(sw_time_profiler_value(&tp, e, "train epoch", &v), 0);
    assert_true(v >= 0.004);
    assert_int_equal(sw_time_profiler_value(&tp, e, "bogus", &v), SW_EINVAL);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(sw_time_profiler_write(&tp, e, f), 0);
    fclose(f);
    assert_non_null(strstr(buf, "train batch"));
    assert_non_null(strstr(buf, "backward"));
    assert_non_null(strstr(buf, "validation batch       -"));
    assert_null(strstr(buf, "total train downtime"));
    free(buf);
    sw_engine_free(e);
}

static int attach_during_run(sw_engine *e, sw_event ev, void *user) {
    *(int *)user = sw_engine_on(e, SW_EVENT_COMPLETED, "late", attach_during_run, user, 1);
    return 0;
}

static void test_bad_arguments(void **state) {
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(NULL, NULL), SW_EINVAL);
    sw_engine_options o = SW_ENGINE_OPTIONS_INIT;
    o.epoch_length = -2;
    assert_int_equal(sw_engine_new(&o, &e), SW_EINVAL);
    assert_null(e);
    e = new_engine(1, NULL);
    assert_int_equal(sw_engine_run(e), SW_EINVAL); /* no training loop */
    counting_source ts;
    sw_data_source td = source_of(&ts, 2, 1);
    assert_int_equal(sw_engine_set_train(e, &td, NULL, NULL), SW_EINVAL);
    sw_data_source none = SW_DATA_SOURCE_INIT;
    assert_int_equal(sw_engine_set_train(e, &none, process_noop, NULL), SW_EINVAL);
    assert_int_equal(sw_engine_on(e, SW_EVENT_COUNT, "x", log_handler, NULL, 1), SW_EINVAL);
    assert_int_equal(sw_engine_on(e, SW_EVENT_STARTED, "", log_handler, NULL, 1), SW_EINVAL);
    assert_int_equal(sw_engine_on(e, SW_EVENT_STARTED, "x", NULL, NULL, 1), SW_EINVAL);
    assert_null(sw_event_name(SW_EVENT_COUNT));
    int late = 0;
    sw_engine_set_train(e, &td, process_noop, NULL);
    sw_engine_on(e, SW_EVENT_STARTED, "attach", attach_during_run, &late, 1);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(late, SW_ESTATE);
    sw_engine_free(e);
    sw_engine_free(NULL);
}

/* An engine over the caller's profiler records there and leaves it alive. */
static void test_external_profiler(void **state) {
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(NULL, &p), 0);
    sw_engine_options o = SW_ENGINE_OPTIONS_INIT;
    o.profiler = p;
    o.max_epochs = 2;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&o, &e), 0);
    assert_ptr_equal(sw_engine_profiler(e), p);
    counting_source ts;
    sw_data_source td = source_of(&ts, 3, 1);
    sw_engine_set_train(e, &td, process_noop, NULL);
    assert_int_equal(sw_engine_run(e), 0);
    sw_engine_free(e);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_snapshot_find(s, "epoch", "all")->stats.count, 2);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_order),
        cmocka_unit_test(test_unknown_length),
        cmocka_unit_test(test_epoch_length_restarts_source),
        cmocka_unit_test(test_every_n),
        cmocka_unit_test(test_terminate_run),
        cmocka_unit_test(test_terminate_epoch),
        cmocka_unit_test(test_error_in_handler),
        cmocka_unit_test(test_error_in_process),
        cmocka_unit_test(test_error_in_data_source),
        cmocka_unit_test(test_handler_timing),
        cmocka_unit_test(test_csv_streamed),
        cmocka_unit_test(test_handlers_csv),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_thunder_keys),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_external_profiler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
