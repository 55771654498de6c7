/*
 * run_schema.c — the run file's schema: the tables every run file starts with, its
 * application_id, user_version and meta rows. docs/run-file.md describes the tables; the
 * statements that fill them are run_store.c's.
 */
#include "run_store.h"

#include <stdio.h>

/* The schema, version 11 (2: function profiles; 3: notes; 4: local rank, clock offset,
 * thread names, cross-rank aggregations; 5: memory per step, in steps and summed up in
 * ranks; modules; 6: the modules' GPU device times; 7: slow steps, their signals and
 * causes, and the spans of the costliest ones: slow_steps, slow_spans, ranks.slow_judged;
 * 8: the slow steps' allocator and machine signals: alloc_retries, ooms, steal_permille,
 * load_x100, cpus; 9: the slow steps' runnable time, synchronizing calls and GPU clock
 * reasons: runnable_ns (NULL: not read), sync_ns, sync_call, clock_reasons; 10: the bytes
 * the slow steps' checkpoints wrote: checkpoint_bytes; 11: the category collective, whose
 * number other had: steps.collective_ns before other_ns, aggregates.category 7 is
 * collective, 8 other). Every table has a rank column so rank files merge by union. */
static const char SCHEMA_SQL[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE ranks("
    " rank INTEGER PRIMARY KEY, world_size INTEGER, name TEXT, host TEXT, pid INTEGER,"
    " command TEXT, start_unix_ns INTEGER, origin_ns INTEGER, warmup_steps INTEGER,"
    " timeline INTEGER, options TEXT, library_version TEXT,"
    " elapsed_ns INTEGER DEFAULT 0, wall_ns INTEGER DEFAULT 0, steps INTEGER DEFAULT 0,"
    " threads INTEGER DEFAULT 0, dropped_events INTEGER DEFAULT 0,"
    " misuse_end_without_begin INTEGER DEFAULT 0, misuse_mismatched_end INTEGER DEFAULT 0,"
    " misuse_depth_overflow INTEGER DEFAULT 0, misuse_bad_id INTEGER DEFAULT 0,"
    " misuse_phase_mismatch INTEGER DEFAULT 0, misuse_step_overlap INTEGER DEFAULT 0,"
    " misuse_bad_record INTEGER DEFAULT 0, misuse_open_at_snapshot INTEGER DEFAULT 0,"
    " complete INTEGER DEFAULT 0, end_reason TEXT, updated_unix_ns INTEGER,"
    " local_rank INTEGER DEFAULT 0, clock_offset_ns INTEGER DEFAULT 0,"
    " mem_rss_steps INTEGER DEFAULT 0, mem_rss_max INTEGER DEFAULT 0,"
    " mem_rss_last INTEGER DEFAULT 0, mem_allocator_steps INTEGER DEFAULT 0,"
    " mem_peak_allocated_max INTEGER DEFAULT 0, mem_allocated_last INTEGER DEFAULT 0,"
    " mem_reserved_max INTEGER DEFAULT 0, mem_reserved_last INTEGER DEFAULT 0,"
    " slow_judged INTEGER DEFAULT 0);"
    "CREATE TABLE names(rank INTEGER, kind TEXT, id INTEGER, name TEXT,"
    " PRIMARY KEY(rank, kind, id)) WITHOUT ROWID;"
    "CREATE VIEW actions AS SELECT rank, id, name FROM names WHERE kind = 'action';"
    "CREATE VIEW phases AS SELECT rank, id, name FROM names WHERE kind = 'phase';"
    "CREATE VIEW counter_names AS SELECT rank, id, name FROM names WHERE kind = 'counter';"
    "CREATE TABLE aggregates("
    " rank INTEGER, seq INTEGER, action INTEGER, phase INTEGER, action_name TEXT,"
    " phase_name TEXT, category INTEGER,"
    " count INTEGER, total_ns INTEGER, self_ns INTEGER, mean_ns REAL, m2 REAL,"
    " min_ns INTEGER, max_ns INTEGER, min_step INTEGER, max_step INTEGER, samples INTEGER,"
    " w_count INTEGER, w_total_ns INTEGER, w_self_ns INTEGER, w_mean_ns REAL, w_m2 REAL,"
    " w_min_ns INTEGER, w_max_ns INTEGER, w_min_step INTEGER, w_max_step INTEGER,"
    " w_samples INTEGER, hist BLOB, PRIMARY KEY(rank, seq)) WITHOUT ROWID;"
    "CREATE TABLE counter_summaries(rank INTEGER, seq INTEGER, name TEXT, count INTEGER,"
    " last REAL, min REAL, max REAL, mean REAL, PRIMARY KEY(rank, seq)) WITHOUT ROWID;"
    "CREATE TABLE steps(rank INTEGER, step INTEGER, phase INTEGER, batch_size INTEGER,"
    " warmup INTEGER, thread INTEGER, start_ns INTEGER, duration_ns INTEGER,"
    " data_ns INTEGER, forward_ns INTEGER, loss_ns INTEGER, backward_ns INTEGER,"
    " optimizer_ns INTEGER, zero_grad_ns INTEGER, callback_ns INTEGER,"
    " collective_ns INTEGER, other_ns INTEGER,"
    " rss_bytes INTEGER, allocated_bytes INTEGER, peak_allocated_bytes INTEGER,"
    " reserved_bytes INTEGER, PRIMARY KEY(rank, step)) WITHOUT ROWID;"
    "CREATE TABLE slow_steps(rank INTEGER, step INTEGER, phase INTEGER, thread INTEGER,"
    " start_ns INTEGER, duration_ns INTEGER, median_ns INTEGER, cause TEXT,"
    " explained_ns INTEGER, data_ns INTEGER, os_wall_ns INTEGER, cpu_ns INTEGER,"
    " sys_ns INTEGER, voluntary_switches INTEGER, involuntary_switches INTEGER,"
    " minor_faults INTEGER, major_faults INTEGER, gc_ns INTEGER, gc_collections INTEGER,"
    " gc_generation INTEGER, gc_collected INTEGER, compile_ns INTEGER,"
    " checkpoint_ns INTEGER, eval_ns INTEGER, kept INTEGER DEFAULT 0,"
    " alloc_retries INTEGER, ooms INTEGER, steal_permille INTEGER, load_x100 INTEGER,"
    " cpus INTEGER, runnable_ns INTEGER, sync_ns INTEGER, sync_call TEXT,"
    " clock_reasons INTEGER, checkpoint_bytes INTEGER, PRIMARY KEY(rank, step)) WITHOUT ROWID;"
    "CREATE TABLE slow_spans(rank INTEGER, window INTEGER, thread INTEGER, action INTEGER,"
    " phase INTEGER, depth INTEGER, step INTEGER, start_ns INTEGER, duration_ns INTEGER);"
    "CREATE INDEX slow_spans_window ON slow_spans(rank, window);"
    "CREATE TABLE counters(rank INTEGER, counter INTEGER, thread INTEGER, time_ns INTEGER,"
    " value REAL);"
    "CREATE TABLE span_chunks(rank INTEGER, thread INTEGER, count INTEGER,"
    " first_start_ns INTEGER, data BLOB);"
    "CREATE TABLE functions(rank INTEGER, func INTEGER, file TEXT, line INTEGER, name TEXT,"
    " PRIMARY KEY(rank, func)) WITHOUT ROWID;"
    "CREATE TABLE function_nodes(rank INTEGER, action TEXT, node INTEGER, parent INTEGER,"
    " func INTEGER, calls INTEGER, total_ns INTEGER, self_ns INTEGER, folded INTEGER,"
    " PRIMARY KEY(rank, action, node)) WITHOUT ROWID;"
    "CREATE TABLE notes(rank INTEGER, seq INTEGER, key TEXT, value TEXT,"
    " PRIMARY KEY(rank, seq)) WITHOUT ROWID;"
    "CREATE TABLE threads(rank INTEGER, thread INTEGER, name TEXT,"
    " PRIMARY KEY(rank, thread)) WITHOUT ROWID;"
    "CREATE TABLE rank_rounds(rank INTEGER, round INTEGER, step INTEGER, unix_ns INTEGER,"
    " final INTEGER, world_size INTEGER, payload_size INTEGER, payloads BLOB,"
    " PRIMARY KEY(rank, round)) WITHOUT ROWID;"
    "CREATE TABLE modules(rank INTEGER, seq INTEGER, path TEXT, class TEXT,"
    " forward_calls INTEGER, forward_ns INTEGER, forward_self_ns INTEGER,"
    " backward_calls INTEGER, backward_ns INTEGER, backward_self_ns INTEGER,"
    " device_forward_calls INTEGER, device_forward_ns INTEGER, device_forward_self_ns INTEGER,"
    " device_backward_calls INTEGER, device_backward_ns INTEGER,"
    " device_backward_self_ns INTEGER, activation_bytes INTEGER, param_bytes INTEGER, grad_bytes INTEGER,"
    " optimizer_bytes INTEGER, PRIMARY KEY(rank, seq)) WITHOUT ROWID;";

int sw__store_init(sqlite3 *db) {
    char sql[256];
    snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d; BEGIN;",
             SW__RUN_APPLICATION_ID, SW__RUN_SCHEMA_VERSION);
    int rc = sw__sql_exec(db, sql);
    if (rc == 0)
        rc = sw__sql_exec(db, SCHEMA_SQL);
    if (rc == 0) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO meta VALUES('magic','" SW__RUN_MAGIC "'),"
                 "('schema_version',%d),('library_version','" SW_VERSION_STRING "');",
                 SW__RUN_SCHEMA_VERSION);
        rc = sw__sql_exec(db, sql);
    }
    return sw__sql_exec(db, rc == 0 ? "COMMIT" : "ROLLBACK") | rc;
}
