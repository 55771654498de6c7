/*
 * run_export.c — a run file as a Chrome trace (Trace Event JSON, opens in Perfetto: spans,
 * steps, the slow steps and their kept windows, counters) and as an Ignite-style
 * per-iteration CSV.
 */
#include "report/json_out.h"
#include "report/writer.h"
#include "run_store.h"
#include "sql.h"

#include <stdlib.h>
#include <string.h>

/* ---- Chrome Trace Event JSON ---- */

/* Ranks start at different wall-clock times, and their hosts' clocks differ: each rank's
 * records are shifted by its start on rank 0's clock (its wall-clock start minus its clock
 * offset, estimated when the ranks started) minus the earliest such start, so the ranks line
 * up on one time axis. */
typedef struct rank_clock {
    int rank;
    uint64_t offset_ns;
    uint64_t nspans;
} rank_clock;

typedef struct chrome_ctx {
    sw__jw *w;
    sw_run *run;
    rank_clock *clocks;
    int nranks;
    struct thread_key {
        int rank;
        uint32_t thread;
    } * threads;
    size_t nthreads, threads_cap;
} chrome_ctx;

static rank_clock *clock_of(chrome_ctx *c, int rank) {
    for (int i = 0; i < c->nranks; i++)
        if (c->clocks[i].rank == rank)
            return &c->clocks[i];
    return &c->clocks[0];
}

/* Remember (rank, thread) pairs for the thread_name metadata. */
static int note_thread(chrome_ctx *c, int rank, uint32_t thread) {
    for (size_t i = 0; i < c->nthreads; i++)
        if (c->threads[i].rank == rank && c->threads[i].thread == thread)
            return 0;
    if (sw__grow(&c->threads, sizeof *c->threads, &c->threads_cap, c->nthreads + 1, 16) != 0)
        return SW_ENOMEM;
    c->threads[c->nthreads++] = (struct thread_key){rank, thread};
    return 0;
}

static double micros(uint64_t ns) {
    return (double)ns / 1000.0;
}

static void complete_event(chrome_ctx *c, int rank, const char *name, const char *cat,
                           uint32_t thread, uint64_t start_ns, uint64_t dur_ns) {
    sw__jw *w = c->w;
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", name);
    sw__jw_kv_string(w, "cat", cat);
    sw__jw_kv_string(w, "ph", "X");
    sw__jw_kv_double(w, "ts", micros(clock_of(c, rank)->offset_ns + start_ns));
    sw__jw_kv_double(w, "dur", micros(dur_ns));
    sw__jw_kv_int(w, "pid", rank);
    sw__jw_kv_uint(w, "tid", thread);
}

/* One span as a complete event; window >= 0: of that slow step's kept window. */
static int span_event(chrome_ctx *c, int rank, const sw_span_record *s, int64_t window) {
    const char *name = sw_run_action_name(c->run, rank, s->action);
    char unknown[32];
    if (name == NULL) {
        snprintf(unknown, sizeof unknown, "action %u", s->action);
        name = unknown;
    }
    complete_event(c, rank, name, sw_category_name(sw_category_of(name)), s->thread, s->start_ns,
                   s->duration_ns);
    sw__jw_key(c->w, "args");
    sw__jw_object_begin(c->w);
    sw__jw_kv_int(c->w, "step", s->step);
    sw__jw_kv_string(c->w, "phase", sw_run_phase_name(c->run, rank, s->phase));
    if (window >= 0)
        sw__jw_kv_int(c->w, "slow_step_window", window);
    sw__jw_object_end(c->w);
    sw__jw_object_end(c->w);
    return note_thread(c, rank, s->thread);
}

static int on_span(void *ctx, int rank, const sw_span_record *s) {
    chrome_ctx *c = ctx;
    clock_of(c, rank)->nspans++;
    return span_event(c, rank, s, -1);
}

/* Without a timeline the steps still make a useful trace. */
static int on_step(void *ctx, int rank, const sw_step_record *s) {
    chrome_ctx *c = ctx;
    if (clock_of(c, rank)->nspans > 0)
        return 0; /* the timeline already holds the "step" spans */
    complete_event(c, rank, "step", "step", s->thread, s->start_ns, s->duration_ns);
    sw__jw_key(c->w, "args");
    sw__jw_object_begin(c->w);
    sw__jw_kv_uint(c->w, "step", s->step);
    sw__jw_kv_string(c->w, "phase", sw_run_phase_name(c->run, rank, s->phase));
    sw__jw_kv_uint(c->w, "batch_size", s->batch_size);
    for (int k = 0; k < SW_CAT_COUNT; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_ms", sw_category_name((sw_category)k));
        sw__jw_kv_double(c->w, key, (double)s->category_ns[k] / 1e6);
    }
    sw__jw_object_end(c->w);
    sw__jw_object_end(c->w);
    return note_thread(c, rank, s->thread);
}

/* The kept windows of the slow steps (run_slow.c), where the timeline did not hold them
 * already: with the timeline off, the trace shows exactly the slow steps' spans. */
static int on_window_span(void *ctx, int rank, uint64_t window, const sw_span_record *s) {
    chrome_ctx *c = ctx;
    return clock_of(c, rank)->nspans > 0 ? 0 : span_event(c, rank, s, (int64_t)window);
}

/* Each slow step as an instant event at its start, its evidence in args. */
static int on_slow_step(void *ctx, int rank, const sw_step_record *s) {
    chrome_ctx *c = ctx;
    sw__jw *w = c->w;
    char name[64], evidence[300];
    snprintf(name, sizeof name, "slow step %llu: %s", (unsigned long long)s->step,
             sw_cause_name(s->cause));
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", name);
    sw__jw_kv_string(w, "cat", "slow_step");
    sw__jw_kv_string(w, "ph", "i");
    sw__jw_kv_string(w, "s", "t");
    sw__jw_kv_double(w, "ts", micros(clock_of(c, rank)->offset_ns + s->start_ns));
    sw__jw_kv_int(w, "pid", rank);
    sw__jw_kv_uint(w, "tid", s->thread);
    sw__jw_key(w, "args");
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "evidence", sw_slow_step_text(s, evidence, sizeof evidence));
    sw__jw_kv_int(w, "window_kept", s->window_kept);
    sw__jw_object_end(w);
    sw__jw_object_end(w);
    return note_thread(c, rank, s->thread);
}

static int on_counter(void *ctx, int rank, const sw_counter_record *s) {
    chrome_ctx *c = ctx;
    sw__jw *w = c->w;
    const char *name = sw_run_counter_name(c->run, rank, s->counter);
    char unknown[32];
    if (name == NULL) {
        snprintf(unknown, sizeof unknown, "counter %u", s->counter);
        name = unknown;
    }
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", name);
    sw__jw_kv_string(w, "ph", "C");
    sw__jw_kv_double(w, "ts", micros(clock_of(c, rank)->offset_ns + s->time_ns));
    sw__jw_kv_int(w, "pid", rank);
    sw__jw_key(w, "args");
    sw__jw_object_begin(w);
    sw__jw_kv_double(w, "value", s->value);
    sw__jw_object_end(w);
    sw__jw_object_end(w);
    return 0;
}

static void metadata_event(sw__jw *w, const char *what, int pid, uint32_t tid, const char *name) {
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", what);
    sw__jw_kv_string(w, "ph", "M");
    sw__jw_kv_int(w, "pid", pid);
    sw__jw_kv_uint(w, "tid", tid);
    sw__jw_key(w, "args");
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", name);
    sw__jw_object_end(w);
    sw__jw_object_end(w);
}

/* One integer of a rank's row in the ranks table (0 when it cannot be read). */
static int64_t rank_column(sw_run *run, const char *sql, int rank) {
    int64_t v = 0;
    return sw__sql_int(sw__run_db(run), sql, rank, &v) == 0 ? v : 0;
}

/* process_name per rank; the clocks are filled on the way. */
static int write_processes(chrome_ctx *c) {
    uint64_t earliest = UINT64_MAX;
    for (int i = 0; i < c->nranks; i++) {
        sw_snapshot *s = NULL;
        int rc = sw_run_rank_snapshot(c->run, sw_run_rank_id(c->run, i), &s);
        if (rc != 0)
            return rc;
        int64_t offset = rank_column(c->run, "SELECT clock_offset_ns FROM ranks WHERE rank=?",
                                     s->rank);
        c->clocks[i].rank = s->rank;
        c->clocks[i].offset_ns = s->start_unix_ns - (uint64_t)offset; /* made relative below */
        if (c->clocks[i].offset_ns < earliest)
            earliest = c->clocks[i].offset_ns;
        char name[512];
        snprintf(name, sizeof name, "%s rank %d (%s, local rank %d, pid %lld)",
                 s->name ? s->name : "stepwatch", s->rank, s->host ? s->host : "?", s->local_rank,
                 (long long)s->pid);
        metadata_event(c->w, "process_name", s->rank, 0, name);
        sw_snapshot_free(s);
    }
    for (int i = 0; i < c->nranks; i++)
        c->clocks[i].offset_ns -= earliest;
    return 0;
}

int sw_run_export_chrome(sw_run *run, FILE *out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    sw__jw w;
    sw__jw_init(&w, out, 2);
    chrome_ctx c = {.w = &w, .run = run, .nranks = sw_run_rank_count(run)};
    c.clocks = calloc((size_t)c.nranks, sizeof *c.clocks);
    if (c.clocks == NULL)
        return SW_ENOMEM;
    sw__jw_object_begin(&w);
    sw__jw_kv_string(&w, "displayTimeUnit", "ms");
    sw__jw_key(&w, "traceEvents");
    sw__jw_array_begin(&w);
    int rc = write_processes(&c);
    if (rc == 0)
        rc = sw_run_foreach_span(run, -1, on_span, &c);
    if (rc == 0)
        rc = sw_run_foreach_step(run, -1, on_step, &c);
    if (rc == 0)
        rc = sw_run_foreach_window_span(run, -1, on_window_span, &c);
    if (rc == 0)
        rc = sw_run_foreach_slow_step(run, -1, on_slow_step, &c);
    if (rc == 0)
        rc = sw_run_foreach_counter(run, -1, on_counter, &c);
    sqlite3_stmt *names = NULL;
    if (rc == 0)
        rc = sw__sql_prepare(sw__run_db(run), "SELECT name FROM threads WHERE rank=? AND thread=?",
                             &names);
    for (size_t i = 0; rc == 0 && i < c.nthreads; i++) {
        /* the thread's own name (the system's, or the front end's), and its number */
        sqlite3_bind_int(names, 1, c.threads[i].rank);
        sqlite3_bind_int64(names, 2, c.threads[i].thread);
        const unsigned char *own = sqlite3_step(names) == SQLITE_ROW ? sqlite3_column_text(names, 0)
                                                                     : NULL;
        char name[SW__THREAD_NAME + 32];
        if (own && own[0])
            snprintf(name, sizeof name, "%s (thread %u)", own, c.threads[i].thread);
        else
            snprintf(name, sizeof name, "thread %u", c.threads[i].thread);
        sqlite3_reset(names);
        metadata_event(&w, "thread_name", c.threads[i].rank, c.threads[i].thread, name);
    }
    sqlite3_finalize(names);
    sw__jw_array_end(&w);
    sw__jw_object_end(&w);
    int written = sw__jw_finish(&w);
    free(c.clocks);
    free(c.threads);
    return rc ? sw__run_said(run, rc) : written;
}

/* ---- Ignite-style per-iteration CSV ---- */

typedef struct csv_ctx {
    FILE *out;
    sw_run *run;
    uint64_t epoch;
    sw_phase last_phase;
    int seen_any;
    uint64_t iteration[SW__MAX_PHASES];
} csv_ctx;

static void seconds(FILE *out, uint64_t ns) {
    fprintf(out, ",%.9f", (double)ns / 1e9);
}

static int on_csv_step(void *ctx, int rank, const sw_step_record *s) {
    csv_ctx *c = ctx;
    /* Epochs are not recorded per step: a new one begins when training resumes after
     * another phase (train -> valid -> train), as Ignite's trainer counts them. */
    if (c->seen_any && s->phase == SW_PHASE_TRAIN && c->last_phase != SW_PHASE_TRAIN)
        c->epoch++;
    c->seen_any = 1;
    c->last_phase = s->phase;
    uint64_t iteration = s->phase < SW__MAX_PHASES ? ++c->iteration[s->phase] : s->step + 1;
    uint64_t data = s->category_ns[SW_CAT_DATA];
    uint64_t processing = s->duration_ns > data ? s->duration_ns - data : 0;
    fprintf(c->out, "%llu,%llu", (unsigned long long)c->epoch, (unsigned long long)iteration);
    seconds(c->out, processing);
    seconds(c->out, data);
    fprintf(c->out, ",%d,%llu", rank, (unsigned long long)s->step);
    fputc(',', c->out);
    sw__csv_put_text(c->out, sw_run_phase_name(c->run, rank, s->phase));
    fprintf(c->out, ",%u,%d", s->batch_size, s->warmup != 0);
    seconds(c->out, s->start_ns);
    seconds(c->out, s->duration_ns);
    for (int k = 0; k < SW_CAT_COUNT; k++)
        seconds(c->out, s->category_ns[k]);
    fputc('\n', c->out);
    return ferror(c->out) ? SW_EIO : 0;
}

int sw_run_export_steps_csv(sw_run *run, FILE *out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    fputs("epoch,iteration,processing_stats,dataflow_stats,rank,step,phase,batch_size,warmup,"
          "start_s,step_s",
          out);
    for (int k = 0; k < SW_CAT_COUNT; k++)
        fprintf(out, ",%s_s", sw_category_name((sw_category)k));
    fputc('\n', out);
    int rc = 0;
    for (int i = 0; rc == 0 && i < sw_run_rank_count(run); i++) {
        csv_ctx c = {.out = out, .run = run, .epoch = 1};
        rc = sw_run_foreach_step(run, sw_run_rank_id(run, i), on_csv_step, &c);
    }
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = SW_EIO;
    return rc;
}
