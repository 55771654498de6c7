/*
 * run_guard.c — the defences of every connection that reads a run file (run_guard.h). A run
 * file may come from anywhere (a colleague, a bug report, an attacker): reading it must not
 * run code stored in it, loop forever, or take the machine's memory. SQLite's own advice for
 * untrusted databases (https://www.sqlite.org/security.html), applied before any query:
 * defensive mode, no trusted schema, no views or triggers, tight limits, a heap limit, a time
 * budget, and a schema that must be exactly the one stepwatch writes.
 */
#include "run_guard.h"
#include "run_store.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Every 1000 VM instructions: add the time since the last call to the work done since the
 * last row; interrupt the statement (nonzero) once that passes the budget. */
static int progress(void *ctx) {
    sw__guard *g = ctx;
    double now = now_s();
    if (g->last_s > 0)
        g->busy_s += now - g->last_s;
    g->last_s = now;
    if (g->busy_s <= g->budget_s)
        return 0;
    g->tripped = 1;
    return 1;
}

/* A statement starts or hands back a row: its budget starts again (the time the caller
 * spends between rows is not SQLite's). */
static int trace(unsigned type, void *ctx, void *p, void *x) {
    (void)type, (void)p, (void)x;
    sw__guard *g = ctx;
    g->busy_s = 0;
    g->last_s = 0;
    return 0;
}

static double budget_from_env(void) {
    const char *s = getenv("STEPWATCH_READ_BUDGET_S");
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    return s && end != s && *end == '\0' && v > 0 && v < 1e6 ? v : SW__READ_BUDGET_S;
}

int sw__guard_defend(sqlite3 *db, sw__guard *g) {
    static const int off[] = {SQLITE_DBCONFIG_TRUSTED_SCHEMA, SQLITE_DBCONFIG_ENABLE_TRIGGER,
                              SQLITE_DBCONFIG_ENABLE_VIEW, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER,
                              SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION};
    int rc = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    for (size_t i = 0; rc == SQLITE_OK && i < sizeof off / sizeof *off; i++)
        rc = sqlite3_db_config(db, off[i], 0, (int *)NULL);
    if (rc != SQLITE_OK)
        return sw__sqlite_rc(rc);
    /* Limits far above what stepwatch's own SQL and files need, far below SQLite's. */
    static const int limits[][2] = {
        {SQLITE_LIMIT_LENGTH, SW__READ_MAX_VALUE},
        {SQLITE_LIMIT_SQL_LENGTH, 100000},
        {SQLITE_LIMIT_COLUMN, 100},
        {SQLITE_LIMIT_EXPR_DEPTH, 50},
        {SQLITE_LIMIT_COMPOUND_SELECT, 4},
        {SQLITE_LIMIT_VDBE_OP, 25000},
        {SQLITE_LIMIT_FUNCTION_ARG, 8},
        {SQLITE_LIMIT_ATTACHED, 1},
        {SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50},
        {SQLITE_LIMIT_VARIABLE_NUMBER, 32},
        {SQLITE_LIMIT_TRIGGER_DEPTH, 1},
        {SQLITE_LIMIT_WORKER_THREADS, 0},
    };
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
        sqlite3_limit(db, limits[i][0], limits[i][1]);
    /* Process-wide, so only where the application set no limit of its own. */
    if (sqlite3_hard_heap_limit64(-1) == 0)
        sqlite3_hard_heap_limit64(SW__READ_HEAP_LIMIT);
    memset(g, 0, sizeof *g);
    g->budget_s = budget_from_env();
    sqlite3_progress_handler(db, 1000, progress, g);
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT | SQLITE_TRACE_ROW, trace, g);
    /* A damaged page is found by its cells' sizes, not by reading past them; no mapping of
     * the file into memory (a sparse file of any size would be mapped). */
    return sw__sql_exec(db, "PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0;");
}

int sw__guard_open(const char *path, int flags, sqlite3 **db, sw__guard *g) {
    int rc = sw__sqlite_rc(sqlite3_open_v2(path, db, flags, NULL));
    if (rc == 0)
        rc = sw__guard_defend(*db, g);
    return rc;
}

int sw__guard_error(const sw__guard *g, const char *path) {
    return sw__error(SW_ECORRUPT,
                     "%s: refused: SQLite worked %.0f s without producing a row (a hostile or "
                     "damaged file; STEPWATCH_READ_BUDGET_S raises the limit)",
                     path, g->budget_s);
}

/* ---- the schema ---- */

/* One object of a schema: a table, index or view. */
typedef struct schema_object {
    char *type, *name, *table, *sql;
    int seen;
} schema_object;

static int schema_query(sqlite3 *db, const char *schema, sqlite3_stmt **q) {
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT type, name, tbl_name, sql FROM \"%s\".sqlite_master", schema);
    return sqlite3_prepare_v2(db, sql, -1, q, NULL);
}

static char *text_copy(sqlite3_stmt *q, int col) {
    const unsigned char *t = sqlite3_column_text(q, col);
    return t ? sw__strdup((const char *)t) : NULL;
}

static int same_text(const char *a, const unsigned char *b) {
    return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, (const char *)b) == 0);
}

/* The objects of a new run file's schema, made in a database of its own in memory. */
static int expected_schema(schema_object *want, size_t max, size_t *n) {
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int rc = sw__sqlite_rc(
        sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL));
    if (rc == 0)
        rc = sw__store_init(db);
    if (rc == 0)
        rc = sw__sqlite_rc(schema_query(db, "main", &q));
    *n = 0;
    while (rc == 0 && sqlite3_step(q) == SQLITE_ROW) {
        if (*n == max) {
            rc = SW_ELIMIT;
            break;
        }
        schema_object *o = &want[(*n)++];
        *o = (schema_object){text_copy(q, 0), text_copy(q, 1), text_copy(q, 2), text_copy(q, 3), 0};
        if (o->type == NULL || o->name == NULL)
            rc = SW_ENOMEM;
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return rc;
}

int sw__guard_check_schema(sqlite3 *db, const char *schema, const char *path) {
    schema_object want[64];
    size_t nwant = 0;
    int rc = expected_schema(want, sizeof want / sizeof *want, &nwant);
    sqlite3_stmt *have = NULL;
    if (rc != 0)
        sw__error(rc, "%s: cannot check its schema: %s", path, sw_strerror(rc));
    int step = rc == 0 ? schema_query(db, schema, &have) : SQLITE_OK;
    char diff[200] = "";
    while (rc == 0 && step == SQLITE_OK && diff[0] == '\0') {
        int h = sqlite3_step(have);
        if (h != SQLITE_ROW) {
            step = h == SQLITE_DONE ? SQLITE_OK : h;
            break;
        }
        const char *type = (const char *)sqlite3_column_text(have, 0);
        const char *name = (const char *)sqlite3_column_text(have, 1);
        schema_object *known = NULL;
        for (size_t i = 0; i < nwant && known == NULL; i++)
            if (same_text(want[i].type, (const unsigned char *)type) &&
                same_text(want[i].name, (const unsigned char *)name))
                known = &want[i];
        if (known == NULL)
            snprintf(diff, sizeof diff, "%s %.60s that stepwatch never writes",
                     type ? type : "object", name ? name : "?");
        else if (!same_text(known->table, sqlite3_column_text(have, 2)) ||
                 !same_text(known->sql, sqlite3_column_text(have, 3)))
            snprintf(diff, sizeof diff, "%s %.60s defined otherwise than stepwatch writes it",
                     known->type, known->name);
        else
            known->seen = 1;
    }
    for (size_t i = 0; rc == 0 && step == SQLITE_OK && diff[0] == '\0' && i < nwant; i++)
        if (!want[i].seen)
            snprintf(diff, sizeof diff, "%s %s missing", want[i].type, want[i].name);
    if (rc == 0 && step != SQLITE_OK) {
        rc = sw__sqlite_rc(step);
        rc = sw__error(rc == SW_ESQLITE || rc == SW_EFOREIGN ? SW_ECORRUPT : rc,
                       "%s: cannot read its schema: %s", path, sqlite3_errmsg(db));
    } else if (rc == 0 && diff[0] != '\0') {
        rc = sw__error(SW_ECORRUPT,
                       "%s: damaged or crafted: its schema has %s (refused "
                       "before any query)",
                       path, diff);
    }
    sqlite3_finalize(have);
    for (size_t i = 0; i < nwant; i++) {
        free(want[i].type);
        free(want[i].name);
        free(want[i].table);
        free(want[i].sql);
    }
    return rc;
}
