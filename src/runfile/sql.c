/*
 * sql.c — prepare, bind, step: the block every reader and writer of the run file repeated,
 * once (sql.h).
 */
#include "sql.h"
#include "run_store.h"

int sw__sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **q) {
    *q = NULL;
    return sw__sqlite_rc(sqlite3_prepare_v2(db, sql, -1, q, NULL));
}

int sw__sql_prepare_int(sqlite3 *db, const char *sql, int64_t value, sqlite3_stmt **q) {
    int rc = sw__sql_prepare(db, sql, q);
    if (rc == 0)
        rc = sw__sqlite_rc(sqlite3_bind_int64(*q, 1, value));
    return rc;
}

int sw__sql_int(sqlite3 *db, const char *sql, int64_t bind, int64_t *out) {
    sqlite3_stmt *q = NULL;
    int rc = bind == SW__NO_BIND ? sw__sql_prepare(db, sql, &q)
                                 : sw__sql_prepare_int(db, sql, bind, &q);
    if (rc == 0) {
        int step = sqlite3_step(q);
        if (step == SQLITE_ROW)
            *out = sqlite3_column_int64(q, 0);
        else
            rc = step == SQLITE_DONE ? SW_ECORRUPT : sw__sqlite_rc(step);
    }
    sqlite3_finalize(q);
    return rc;
}
