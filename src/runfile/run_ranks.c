/*
 * run_ranks.c — reading back the cross-rank aggregation rounds a run file keeps (table
 * rank_rounds, written by the journal from sw_run_add_ranks). The payloads stay opaque here:
 * the ranks layer (src/ranks) reads them.
 */
#include "run_store.h"
#include "sql.h"

#include <stdlib.h>
#include <string.h>

int sw_run_stored_ranks(sw_run *run, void **payloads, int *world_size, uint64_t *step, int *final) {
    if (run == NULL || payloads == NULL || world_size == NULL)
        return SW_EINVAL;
    *payloads = NULL;
    *world_size = 0;
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare(sw__run_db(run),
                             "SELECT world_size, payload_size, payloads, step, final"
                             " FROM rank_rounds ORDER BY final DESC, unix_ns DESC, round DESC"
                             " LIMIT 1",
                             &q);
    if (rc != 0)
        return rc;
    int row = sqlite3_step(q);
    if (row == SQLITE_ROW) {
        int world = sqlite3_column_int(q, 0);
        int64_t size = sqlite3_column_int64(q, 1);
        const void *blob = sqlite3_column_blob(q, 2);
        int64_t bytes = sqlite3_column_bytes(q, 2);
        if (world < 1 || size != SW_RANK_PAYLOAD_SIZE || blob == NULL ||
            bytes != (int64_t)world * size) {
            rc = SW_ECORRUPT;
        } else if ((*payloads = malloc((size_t)bytes)) == NULL) {
            rc = SW_ENOMEM;
        } else {
            memcpy(*payloads, blob, (size_t)bytes);
            *world_size = world;
            if (step)
                *step = (uint64_t)sqlite3_column_int64(q, 3);
            if (final)
                *final = sqlite3_column_int(q, 4);
        }
    } else {
        rc = row == SQLITE_DONE ? SW_ENOTFOUND : sw__sqlite_rc(row);
    }
    rc = sw__run_said(run, rc); /* before finalize, which resets SQLite's message */
    sqlite3_finalize(q);
    return rc;
}
