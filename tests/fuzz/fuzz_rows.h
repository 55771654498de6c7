/* fuzz_rows.h — a run file whose schema is whole (so the reader gets past its checks) and
 * whose rows come from the fuzzer: names of any bytes, numbers of any size, histogram and
 * span blobs of any content. Shared by fuzz_run_rows and fuzz_merge. */
#ifndef SW_FUZZ_ROWS_H
#define SW_FUZZ_ROWS_H

#include "fuzz_util.h"
#include "runfile/run_store.h"

/* Bind parameter i of q to a fuzzed value: NULL, an integer, a real, text or a blob. */
static void bind_fuzzed(sqlite3_stmt *q, int i, fuzz_bytes *b) {
    size_t len;
    const uint8_t *p;
    switch (fuzz_u8(b) % 6) {
    case 0:
        sqlite3_bind_null(q, i);
        break;
    case 1:
        sqlite3_bind_int64(q, i, (sqlite3_int64)fuzz_u64(b, 8));
        break;
    case 2:
        sqlite3_bind_int64(q, i, (sqlite3_int64)(int8_t)fuzz_u8(b));
        break;
    case 3: {
        uint64_t bits = fuzz_u64(b, 8);
        double d;
        memcpy(&d, &bits, sizeof d);
        sqlite3_bind_double(q, i, d);
        break;
    }
    case 4:
        p = fuzz_piece(b, 64, &len);
        sqlite3_bind_text(q, i, (const char *)p, (int)len, SQLITE_TRANSIENT);
        break;
    default:
        p = fuzz_piece(b, 255, &len);
        sqlite3_bind_blob(q, i, p, (int)len, SQLITE_TRANSIENT);
    }
}

/* Insert up to a few rows of fuzzed values into table (ncolumns columns). */
static void fuzz_rows_into(sqlite3 *db, const char *table, int ncolumns, fuzz_bytes *b) {
    char sql[256];
    int used = snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO %s VALUES(", table);
    for (int i = 0; i < ncolumns; i++)
        used += snprintf(sql + used, sizeof sql - (size_t)used, i ? ",?" : "?");
    snprintf(sql + used, sizeof sql - (size_t)used, ")");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return;
    int rows = fuzz_u8(b) % 8;
    for (int r = 0; r < rows; r++) {
        for (int i = 1; i <= ncolumns; i++)
            bind_fuzzed(q, i, b);
        sqlite3_step(q);
        sqlite3_reset(q);
    }
    sqlite3_finalize(q);
}

/* A run file at path: the schema, one rank's metadata row (rank as given, so two files can
 * merge), then fuzzed rows in every table. 0 when the file was made. */
static int fuzz_make_run(const char *path, int rank, fuzz_bytes *b) {
    fuzz_remove(path);
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        sqlite3_close(db);
        return -1;
    }
    /* Speed over durability: the file lives for one input. */
    sqlite3_exec(db, "PRAGMA synchronous=OFF; PRAGMA journal_mode=MEMORY;", NULL, NULL, NULL);
    int rc = sw__store_init(db);
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO ranks(rank, world_size, name) VALUES(%d, 2, 'fuzz')",
             rank);
    if (rc == 0)
        rc = sw__sql_exec(db, sql);
    static const struct {
        const char *table;
        int columns;
    } TABLES[] = {
        {"ranks", 30},         {"names", 4},    {"aggregates", 28}, {"counter_summaries", 8},
        {"steps", 16},         {"counters", 5}, {"span_chunks", 5}, {"functions", 5},
        {"function_nodes", 9}, {"threads", 3},  {"rank_rounds", 8}};
    sw__sql_exec(db, "BEGIN");
    for (size_t t = 0; rc == 0 && t < sizeof TABLES / sizeof *TABLES; t++)
        fuzz_rows_into(db, TABLES[t].table, TABLES[t].columns, b);
    sw__sql_exec(db, "COMMIT");
    sqlite3_close(db);
    return rc;
}

#endif
