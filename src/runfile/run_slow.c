/*
 * run_slow.c — slow steps in the run file (docs/slow-steps.md): the table slow_steps (one row
 * per slow step: its median, cause and signals), slow_spans (the spans of the costliest
 * windows, SW_SLOW_WINDOWS per rank) and ranks.slow_judged; writing them (the journal) and
 * reading them back (sw_run_foreach_slow_step, sw_run_foreach_window_span; the snapshot's
 * sw_slow_summary is run_reader.c's read_slow).
 */
#include "run_store.h"
#include "sql.h"

#include <stdio.h>
#include <string.h>

static int run_once(sqlite3_stmt *q) {
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : sw__sqlite_rc(rc ? rc : SQLITE_ERROR);
}

/* The slow_steps columns after rank, step: the order of sw__store_add_slow_step's binds and
 * of the reader's SELECT. */
#define SLOW_COLUMNS                                                                       \
    "phase, thread, start_ns, duration_ns, median_ns, cause, explained_ns, data_ns,"       \
    " os_wall_ns, cpu_ns, sys_ns, voluntary_switches, involuntary_switches, minor_faults," \
    " major_faults, gc_ns, gc_collections, gc_generation, gc_collected, compile_ns,"       \
    " checkpoint_ns, eval_ns, kept, alloc_retries, ooms, steal_permille, load_x100, cpus," \
    " runnable_ns, sync_ns, sync_call, clock_reasons, checkpoint_bytes"

int sw__store_add_slow_step(sw__store *st, int rank, const sw_step_record *r) {
    if (st->slow_step == NULL) {
        int rc = sw__sql_prepare(st->db,
                                 "INSERT OR REPLACE INTO slow_steps(rank, step, " SLOW_COLUMNS
                                 ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,"
                                 "?,?,?,?,?,?,?,?,?,?)",
                                 &st->slow_step);
        if (rc != 0)
            return rc;
    }
    sqlite3_stmt *q = st->slow_step;
    const sw_step_signals *g = &r->signals;
    sqlite3_bind_int(q, 1, rank);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)r->step);
    sqlite3_bind_int64(q, 3, r->phase);
    sqlite3_bind_int64(q, 4, r->thread);
    const uint64_t head[] = {r->start_ns, r->duration_ns, r->median_ns};
    for (int k = 0; k < 3; k++)
        sqlite3_bind_int64(q, 5 + k, (sqlite3_int64)head[k]);
    sqlite3_bind_text(q, 8, sw_cause_name(r->cause), -1, SQLITE_STATIC);
    const uint64_t tail[] = {r->explained_ns,
                             r->category_ns[SW_CAT_DATA],
                             g->os_wall_ns,
                             g->cpu_ns,
                             g->sys_ns,
                             g->voluntary_switches,
                             g->involuntary_switches,
                             g->minor_faults,
                             g->major_faults,
                             g->gc_ns,
                             g->gc_collections};
    int col = 9;
    for (size_t k = 0; k < sizeof tail / sizeof tail[0]; k++)
        sqlite3_bind_int64(q, col++, (sqlite3_int64)tail[k]);
    sqlite3_bind_int64(q, col++, g->gc_generation);
    const uint64_t more[] = {g->gc_collected, g->compile_ns, g->checkpoint_ns, g->eval_ns};
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
        sqlite3_bind_int64(q, col++, (sqlite3_int64)more[k]);
    const uint64_t last[] = {g->alloc_retries, g->ooms, g->steal_permille, g->load_x100, g->cpus};
    for (size_t k = 0; k < sizeof last / sizeof last[0]; k++)
        sqlite3_bind_int64(q, col++, (sqlite3_int64)last[k]);
    if (g->has_runnable)
        sqlite3_bind_int64(q, col++, (sqlite3_int64)g->runnable_ns);
    else
        sqlite3_bind_null(q, col++);
    sqlite3_bind_int64(q, col++, (sqlite3_int64)g->sync_ns);
    sqlite3_bind_text(q, col++, g->sync_call, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, col++, (sqlite3_int64)g->clock_reasons);
    sqlite3_bind_int64(q, col++, (sqlite3_int64)g->checkpoint_bytes);
    return run_once(q);
}

static int exec_rank(sqlite3 *db, const char *sql, int rank, int64_t value) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare(db, sql, &q);
    if (rc == 0) {
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, value);
        rc = run_once(q);
    }
    sqlite3_finalize(q);
    return rc;
}

int sw__store_add_window_span(sw__store *st, int rank, uint64_t window, const sw_span_record *s) {
    if (st->window_span == NULL) {
        int rc = sw__sql_prepare(st->db, "INSERT INTO slow_spans VALUES(?,?,?,?,?,?,?,?,?)",
                                 &st->window_span);
        if (rc != 0)
            return rc;
    }
    sqlite3_stmt *q = st->window_span;
    sqlite3_bind_int(q, 1, rank);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)window);
    const int64_t v[] = {s->thread,
                         s->action,
                         s->phase,
                         s->depth,
                         s->step,
                         (int64_t)s->start_ns,
                         (int64_t)s->duration_ns};
    for (int k = 0; k < 7; k++)
        sqlite3_bind_int64(q, 3 + k, v[k]);
    int rc = run_once(q);
    if (rc == 0)
        rc = exec_rank(st->db, "UPDATE slow_steps SET kept=1 WHERE rank=?1 AND step=?2 AND kept=0",
                       rank, (int64_t)window);
    return rc;
}

int sw__store_bound_windows(sw__store *st, int rank) {
    /* The windows past the costliest SW_SLOW_WINDOWS lose their spans. */
    static const char cheap[] = "SELECT step FROM slow_steps WHERE rank=?1 AND kept=1"
                                " ORDER BY duration_ns - median_ns DESC LIMIT -1 OFFSET ?2";
    char sql[400];
    snprintf(sql, sizeof sql, "DELETE FROM slow_spans WHERE rank=?1 AND window IN (%s)", cheap);
    int rc = exec_rank(st->db, sql, rank, SW_SLOW_WINDOWS);
    if (rc == 0) {
        snprintf(sql, sizeof sql, "UPDATE slow_steps SET kept=0 WHERE rank=?1 AND step IN (%s)",
                 cheap);
        rc = exec_rank(st->db, sql, rank, SW_SLOW_WINDOWS);
    }
    return rc;
}

int sw__store_write_slow_judged(sw__store *st, int rank, uint64_t judged) {
    return exec_rank(st->db, "UPDATE ranks SET slow_judged=?2 WHERE rank=?1", rank,
                     (int64_t)judged);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Prepare sql for rank (-1: every rank: ?1 IS -1 in the statements' WHERE). */
static int prepare_rank(sw_run *run, const char *sql, int rank, sqlite3_stmt **q) {
    int rc = sw__sql_prepare_int(sw__run_db(run), sql, rank, q);
    return rc == 0 ? 0 : sw__run_said(run, rc);
}

int sw_run_foreach_slow_step(sw_run *run, int rank, sw_step_fn fn, void *ctx) {
    if (run == NULL || fn == NULL)
        return SW_EINVAL;
    sqlite3_stmt *q = NULL;
    int rc = prepare_rank(run,
                          "SELECT rank, step, " SLOW_COLUMNS " FROM slow_steps"
                          " WHERE ?1 = -1 OR rank = ?1 ORDER BY rank, step",
                          rank, &q);
    int step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        sw_step_record r;
        memset(&r, 0, sizeof r);
        int64_t v[35];
        for (int k = 0; k < 35; k++)
            v[k] = sqlite3_column_int64(q, k);
        r.step = (uint64_t)v[1];
        r.phase = (sw_phase)v[2];
        r.thread = (uint32_t)v[3];
        r.start_ns = (uint64_t)v[4];
        r.duration_ns = (uint64_t)v[5];
        r.median_ns = (uint64_t)v[6];
        r.cause = sw__cause_parse((const char *)sqlite3_column_text(q, 7));
        r.explained_ns = (uint64_t)v[8];
        r.category_ns[SW_CAT_DATA] = (uint64_t)v[9];
        sw_step_signals *g = &r.signals;
        uint64_t *os[] = {
            &g->os_wall_ns,           &g->cpu_ns,       &g->sys_ns,       &g->voluntary_switches,
            &g->involuntary_switches, &g->minor_faults, &g->major_faults, &g->gc_ns};
        for (int k = 0; k < 8; k++)
            *os[k] = (uint64_t)v[10 + k];
        g->gc_collections = (uint32_t)v[18];
        g->gc_generation = (int32_t)v[19];
        g->gc_collected = (uint64_t)v[20];
        g->compile_ns = (uint64_t)v[21];
        g->checkpoint_ns = (uint64_t)v[22];
        g->eval_ns = (uint64_t)v[23];
        r.window_kept = v[24] != 0;
        g->alloc_retries = (uint64_t)v[25];
        g->ooms = (uint64_t)v[26];
        g->steal_permille = (uint32_t)v[27];
        g->load_x100 = (uint32_t)v[28];
        g->cpus = (uint32_t)v[29];
        g->has_runnable = sqlite3_column_type(q, 30) != SQLITE_NULL;
        g->runnable_ns = (uint64_t)v[30];
        g->sync_ns = (uint64_t)v[31];
        const unsigned char *call = sqlite3_column_text(q, 32);
        snprintf(g->sync_call, sizeof g->sync_call, "%s", call ? (const char *)call : "");
        g->clock_reasons = (uint64_t)v[33];
        g->checkpoint_bytes = (uint64_t)v[34];
        rc = fn(ctx, (int)v[0], &r);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sw__run_said(run, sw__sqlite_rc(step));
    sqlite3_finalize(q);
    return rc;
}

int sw_run_foreach_window_span(sw_run *run, int rank, sw_window_span_fn fn, void *ctx) {
    if (run == NULL || fn == NULL)
        return SW_EINVAL;
    sqlite3_stmt *q = NULL;
    int rc = prepare_rank(run,
                          "SELECT rank, window, thread, action, phase, depth, step, start_ns,"
                          " duration_ns FROM slow_spans WHERE ?1 = -1 OR rank = ?1"
                          " ORDER BY rank, window, start_ns, depth",
                          rank, &q);
    int step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        sw_span_record s = {.thread = (uint32_t)sqlite3_column_int64(q, 2),
                            .action = (sw_id)sqlite3_column_int64(q, 3),
                            .phase = (sw_phase)sqlite3_column_int64(q, 4),
                            .depth = (uint32_t)sqlite3_column_int64(q, 5),
                            .step = sqlite3_column_int64(q, 6),
                            .start_ns = (uint64_t)sqlite3_column_int64(q, 7),
                            .duration_ns = (uint64_t)sqlite3_column_int64(q, 8)};
        rc = fn(ctx, sqlite3_column_int(q, 0), (uint64_t)sqlite3_column_int64(q, 1), &s);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sw__run_said(run, sw__sqlite_rc(step));
    sqlite3_finalize(q);
    return rc;
}
