/*
 * run_guard.h — reading a file nobody vouches for (run_guard.c). Every reader of run files
 * (sw_run_open, and merge's ATTACH of its inputs) opens its connection here, so a hostile
 * file meets the defences SQLite advises for untrusted databases
 * (https://www.sqlite.org/security.html) before any query, and the schema is checked against
 * the one stepwatch writes. docs/reliability.md, "Hostile run files".
 */
#ifndef SW_RUN_GUARD_H
#define SW_RUN_GUARD_H

#include <sqlite3.h>

/* Seconds of SQLite work one row may take before the read is given up (the progress
 * handler's budget; STEPWATCH_READ_BUDGET_S overrides it, for tests and fuzzers). */
#define SW__READ_BUDGET_S 60.0
/* The largest string or blob a reader accepts (SQLITE_LIMIT_LENGTH). A run file's largest
 * values are cross-rank payloads: 64 bytes a rank and action slot. */
#define SW__READ_MAX_VALUE (64 << 20)
/* SQLite's heap in this process while reading, unless the application set its own limit. */
#define SW__READ_HEAP_LIMIT ((sqlite3_int64)1 << 30)

/* The time budget of one connection: SQLite work since the last row it produced. */
typedef struct sw__guard {
    double budget_s;
    double busy_s; /* SQLite work since the last row */
    double last_s; /* monotonic time of the last progress call (0: none yet) */
    int tripped;   /* the budget ran out: the statement was interrupted */
} sw__guard;

/* Open path (SQLITE_OPEN_READONLY or READWRITE) and apply sw__guard_defend; on failure *db
 * may be set (SQLite's error message lives there) and must be closed by the caller. */
int sw__guard_open(const char *path, int flags, sqlite3 **db, sw__guard *g);
/* The defences on a connection that reads untrusted files: defensive mode, no trusted
 * schema, tight sqlite3_limit()s, no memory-mapping, a bounded cache, a process heap limit
 * and the time budget g (which must outlive the connection). */
int sw__guard_defend(sqlite3 *db, sw__guard *g);
/* Is the schema of database `schema` ("main", "src") exactly the one stepwatch writes: the
 * same tables, indexes and views with the same SQL, nothing else (no trigger, no view of
 * its own)? 0, or SW_ECORRUPT with the sentence naming path and the first difference. */
int sw__guard_check_schema(sqlite3 *db, const char *schema, const char *path);
/* The sentence for a statement the budget interrupted, naming path; returns SW_ECORRUPT. */
int sw__guard_error(const sw__guard *g, const char *path);

#endif /* SW_RUN_GUARD_H */
