/*
 * run_merge.c — several run files (one per rank) into one. Every table carries a rank column,
 * so a merge is a union: each input is validated by sw_run_open, attached, and copied table
 * by table in one transaction.
 */
#include "run_store.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const TABLES[] = {"ranks", "names", "aggregates", "counter_summaries",
                                     "steps", "counters", "span_chunks", "functions",
                                     "function_nodes"};

/* Every input opens cleanly and no rank appears twice. */
static int check_inputs(const char *const *paths, size_t n) {
    int *seen = NULL;
    size_t nseen = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sw_run *run = NULL;
        rc = sw_run_open(paths[i], &run);
        if (rc != 0)
            break;
        int count = sw_run_rank_count(run);
        int *grown = realloc(seen, (nseen + (size_t)count) * sizeof *grown);
        if (grown == NULL)
            rc = SW_ENOMEM;
        else
            seen = grown;
        for (int r = 0; rc == 0 && r < count; r++) {
            int rank = sw_run_rank_id(run, r);
            for (size_t k = 0; k < nseen; k++)
                if (seen[k] == rank)
                    rc = SW_EINVAL; /* two inputs hold the same rank */
            seen[nseen++] = rank;
        }
        sw_run_close(run);
    }
    free(seen);
    return rc;
}

static int copy_input(sqlite3 *db, const char *path) {
    sqlite3_stmt *attach = NULL;
    int rc = sw__sqlite_rc(sqlite3_prepare_v2(db, "ATTACH DATABASE ? AS src", -1, &attach, NULL));
    if (rc == 0) {
        sqlite3_bind_text(attach, 1, path, -1, SQLITE_STATIC);
        rc = sw__sqlite_rc(sqlite3_step(attach));
    }
    sqlite3_finalize(attach);
    if (rc != 0)
        return rc;
    rc = sw__sql_exec(db, "BEGIN");
    for (size_t t = 0; rc == 0 && t < sizeof TABLES / sizeof *TABLES; t++) {
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO main.%s SELECT * FROM src.%s", TABLES[t],
                 TABLES[t]);
        rc = sw__sql_exec(db, sql);
    }
    rc = rc == 0 ? sw__sql_exec(db, "COMMIT") : (sw__sql_exec(db, "ROLLBACK"), rc);
    int detach = sw__sql_exec(db, "DETACH DATABASE src");
    return rc ? rc : detach;
}

int sw_run_merge(const char *const *paths, size_t npaths, const char *out_path) {
    if (paths == NULL || npaths == 0 || out_path == NULL)
        return SW_EINVAL;
    for (size_t i = 0; i < npaths; i++)
        if (paths[i] == NULL)
            return SW_EINVAL;
    if (access(out_path, F_OK) == 0)
        return SW_EEXISTS;
    int rc = check_inputs(paths, npaths);
    if (rc != 0)
        return rc;
    sw__store *st = NULL;
    rc = sw__store_create(out_path, &st);
    for (size_t i = 0; rc == 0 && i < npaths; i++)
        rc = copy_input(st->db, paths[i]);
    if (rc == 0) {
        char sql[96];
        snprintf(sql, sizeof sql, "INSERT INTO meta VALUES('merged_files', %zu)", npaths);
        rc = sw__sql_exec(st->db, sql);
    }
    sw__store_close(st);
    if (rc != 0 && st != NULL)
        unlink(out_path);
    return rc;
}
