/* test_sqlite.h — reading a run file through plain SQLite in a test (cmocka and sqlite3.h
 * included first): what any other reader of the file would see. */
#ifndef SW_TEST_SQLITE_H
#define SW_TEST_SQLITE_H

#include <stdio.h>

/* One query giving one integer or text, the file opened read-only. */
static inline long long query_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    long long v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

static inline void query_text(const char *path, const char *sql, char *out, size_t size) {
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(q, 0);
    snprintf(out, size, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(q);
    sqlite3_close(db);
}

#endif
