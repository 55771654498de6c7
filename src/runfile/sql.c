/*
 * sql.c — prepare, bind, step: the block every reader and writer of the run file repeated,
 * once (sql.h); SQLite's result codes as SW_E* codes.
 */
#include "sql.h"

#include <stdio.h>
#include <string.h>

#include "stepwatch.h"

int sw__sqlite_rc(int rc) {
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return SW_ENOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_FORMAT:
        return SW_ECORRUPT;
    case SQLITE_NOTADB:
        return SW_EFOREIGN;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
        return SW_EIO;
    default:
        return SW_ESQLITE;
    }
}

const char *sw__sql_cause(sqlite3 *db, char *buf, size_t size) {
    int sys = db ? sqlite3_system_errno(db) : 0;
    if (sys != 0)
        snprintf(buf, size, "%s (%s)", sqlite3_errmsg(db), strerror(sys));
    else
        snprintf(buf, size, "%s", db ? sqlite3_errmsg(db) : "out of memory");
    return buf;
}

int sw__sql_exec(sqlite3 *db, const char *sql) {
    return sw__sqlite_rc(sqlite3_exec(db, sql, NULL, NULL, NULL));
}

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

int sw__sql_each_row(sqlite3_stmt *q, int (*row)(sqlite3_stmt *q, void *ctx), void *ctx) {
    int rc = 0, step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW)
        rc = row(q, ctx);
    if (rc == 0 && step != SQLITE_DONE)
        rc = sw__sqlite_rc(step);
    sqlite3_finalize(q);
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
