/*
 * sql.h — the few SQLite steps every run-file reader and writer repeats (sql.c): prepare a
 * statement (with its one integer parameter, where it has one), read its rows, read a
 * one-integer answer, each giving 0 or an SW_E* code; SQLite's result codes as SW_E* codes.
 */
#ifndef SW_RUNFILE_SQL_H
#define SW_RUNFILE_SQL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* Map an SQLite result code to SW_E*. */
int sw__sqlite_rc(int rc);
/* SQLite's sentence for the last error on db (NULL: out of memory), with the system's cause
 * where SQLite has one: "unable to open database file (Too many open files)". Returns buf. */
const char *sw__sql_cause(sqlite3 *db, char *buf, size_t size);
/* Run SQL without results; 0 or SW_E*. */
int sw__sql_exec(sqlite3 *db, const char *sql);

/* No parameter to bind (sw__sql_int). */
#define SW__NO_BIND INT64_MIN

/* Prepare sql into *q; 0 or SW_E* (*q NULL on error; sqlite3_errmsg says why). */
int sw__sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **q);
/* The same, with ?1 bound to value. */
int sw__sql_prepare_int(sqlite3 *db, const char *sql, int64_t value, sqlite3_stmt **q);
/* The one read loop: each row of q, in order, to row(q, ctx), until row returns nonzero
 * (that value is returned) or SQLite fails (its code as SW_E*); 0 after the last row.
 * Finalizes q. */
int sw__sql_each_row(sqlite3_stmt *q, int (*row)(sqlite3_stmt *q, void *ctx), void *ctx);
/* Run sql (?1 bound to bind unless SW__NO_BIND) and give its first row's first column;
 * SW_ECORRUPT when it gives no row (a query that must give one gave none). */
int sw__sql_int(sqlite3 *db, const char *sql, int64_t bind, int64_t *out);

#endif /* SW_RUNFILE_SQL_H */
