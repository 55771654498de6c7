/*
 * run_merge.c — several run files (one per rank) into one. Every table carries a rank column,
 * so a merge is a union: each input is validated by sw_run_open, attached, and copied table
 * by table in one transaction.
 */
#include "journal.h"
#include "run_guard.h"
#include "run_store.h"
#include "sql.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const TABLES[] = {
    "ranks",    "names",       "aggregates", "counter_summaries", "steps",
    "counters", "span_chunks", "functions",  "function_nodes",    "notes",
    "threads",  "rank_rounds", "modules",    "slow_steps",        "slow_spans"};

/* A run file reads whole: it opens (its schema checked), and its snapshot and step records
 * read. What every reader of the merged file will do, done before anything is written. */
static int reads_whole(const char *path, sw_run **out) {
    sw_run *run = NULL;
    sw_snapshot *s = NULL;
    int rc = sw_run_open(path, &run);
    if (rc == 0)
        rc = sw_run_snapshot(run, &s);
    sw_snapshot_free(s);
    if (rc == 0 && out != NULL) {
        *out = run;
        return 0;
    }
    sw_run_close(run);
    return rc;
}

/* Every input reads whole and no rank appears twice. */
static int check_inputs(const char *const *paths, size_t n) {
    int *seen = NULL;
    size_t nseen = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sw_run *run = NULL;
        rc = reads_whole(paths[i], &run);
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
            for (size_t k = 0; k < nseen && rc == 0; k++)
                if (seen[k] == rank)
                    rc = sw__error(SW_EINVAL,
                                   "%s: holds rank %d, as an earlier input does: "
                                   "merge files of different ranks",
                                   paths[i], rank);
            seen[nseen++] = rank;
        }
        sw_run_close(run);
    }
    free(seen);
    return rc;
}

/* Copy one input (checked by check_inputs) into db. The input is attached to the merge's
 * guarded connection (run_guard.c) and its schema checked again inside the transaction that
 * copies it: the file copied is the file checked, even if it was replaced meanwhile. */
static int copy_input(sqlite3 *db, const sw__guard *g, const char *path) {
    sqlite3_stmt *attach = NULL;
    int rc = sw__sql_prepare(db, "ATTACH DATABASE ? AS src", &attach);
    if (rc == 0) {
        sqlite3_bind_text(attach, 1, path, -1, SQLITE_STATIC);
        rc = sw__sqlite_rc(sqlite3_step(attach));
    }
    sqlite3_finalize(attach);
    if (rc != 0)
        return sw__error(rc, "%s: cannot attach it to the merge: %s", path, sqlite3_errmsg(db));
    rc = sw__sql_exec(db, "BEGIN");
    if (rc == 0)
        rc = sw__guard_check_schema(db, "src", path);
    for (size_t t = 0; rc == 0 && t < sizeof TABLES / sizeof *TABLES; t++) {
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO main.%s SELECT * FROM src.%s", TABLES[t], TABLES[t]);
        rc = sw__sql_exec(db, sql);
        if (rc != 0)
            rc = g->tripped ? sw__guard_error(g, path)
                            : sw__error(rc, "%s: cannot copy its %s: %s", path, TABLES[t],
                                        sqlite3_errmsg(db));
    }
    rc = rc == 0 ? sw__sql_exec(db, "COMMIT") : (sw__sql_exec(db, "ROLLBACK"), rc);
    int detach = sw__sql_exec(db, "DETACH DATABASE src");
    return rc ? rc : detach;
}

/* A name for the merged file while it is built, beside out_path: ".stepwatch-merge-PID-N". */
static char *temporary_beside(const char *out_path, unsigned attempt) {
    const char *slash = strrchr(out_path, '/');
    int dir_len = slash ? (int)(slash - out_path + 1) : 0;
    size_t n = (size_t)dir_len + 64;
    char *temp = malloc(n);
    if (temp)
        snprintf(temp, n, "%.*s.stepwatch-merge-%ld-%u", dir_len, out_path, (long)getpid(),
                 attempt);
    return temp;
}

/* Have a signal remove temp, temp-wal and temp-shm (names made into sidecars, to free). */
static int remove_on_signal(const char *temp, char *sidecars[2]) {
    static const char *const SUFFIX[2] = {"-wal", "-shm"};
    int rc = sw__signal_temp_add(temp);
    for (int i = 0; rc == 0 && i < 2; i++) {
        size_t n = strlen(temp) + 5;
        if ((sidecars[i] = malloc(n)) == NULL)
            return SW_ENOMEM;
        snprintf(sidecars[i], n, "%s%s", temp, SUFFIX[i]);
        rc = sw__signal_temp_add(sidecars[i]);
    }
    return rc;
}

/* Build the merged file under a temporary name, then give it out_path in one step: a failed
 * or interrupted merge never leaves a half-merged file at out_path, nor touches what is
 * there. */
static int merge(const char *const *paths, size_t npaths, const char *out_path, int replace) {
    sw__error_clear();
    if (paths == NULL || npaths == 0 || out_path == NULL)
        return SW_EINVAL;
    for (size_t i = 0; i < npaths; i++)
        if (paths[i] == NULL)
            return SW_EINVAL;
    int exists = 0;
    int rc = sw__run_file_check(out_path, &exists);
    if (rc == 0 && exists && !replace)
        rc = sw__error(SW_EEXISTS, "%s: exists", out_path);
    if (rc == 0)
        rc = check_inputs(paths, npaths);
    if (rc != 0)
        return rc;
    sw__store *st = NULL;
    char *temp = NULL, *sidecars[2] = {NULL, NULL};
    /* The handled signals wait until the temporary file is registered for removal: one that
     * came between its creation and its registration would leave it behind. */
    sigset_t old_mask;
    sw__signal_block(&old_mask);
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        free(temp);
        temp = temporary_beside(out_path, attempt);
        rc = temp ? sw__store_create(temp, NULL, &st) : SW_ENOMEM;
        if (rc != SW_EBUSY && rc != SW_EEXISTS)
            break;
    }
    /* An interrupted merge leaves nothing: a signal removes the temporary file and what
     * SQLite keeps beside it (signals.c). */
    if (rc == 0)
        rc = sw__error_about(remove_on_signal(temp, sidecars), out_path);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL); /* a signal held meanwhile comes now */
    sw__guard guard;
    if (rc == 0 && (rc = sw__guard_defend(st->db, &guard)) != 0)
        sw__error(rc, "%s: %s", temp, sqlite3_errmsg(st->db));
    for (size_t i = 0; rc == 0 && i < npaths; i++)
        rc = copy_input(st->db, &guard, paths[i]);
    if (rc == 0) {
        char sql[96];
        snprintf(sql, sizeof sql, "INSERT INTO meta VALUES('merged_files', %zu)", npaths);
        rc = sw__sql_exec(st->db, sql);
    }
    sw__store_close(st); /* leaves WAL mode: one self-contained file */
    /* All or nothing: the merged file must read back before it is given the name. */
    if (rc == 0 && (rc = reads_whole(temp, NULL)) != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", sw_last_error());
        sw__error(rc, "%s: the merged file does not read back (%s): nothing written", out_path,
                  why);
    }
    if (rc == 0 && replace) {
        /* Checked again: it may have changed while we merged. Its -wal and -shm go first (a
         * stale WAL would be replayed into the new file), then one rename replaces it. */
        rc = sw__run_file_check(out_path, &exists);
        if (rc == 0 && exists)
            sw__run_file_remove_sidecars(out_path);
    }
    /* link never replaces anything; rename replaces the old run file in one step. */
    if (rc == 0 && (replace && exists ? rename(temp, out_path) : link(temp, out_path)) != 0)
        rc = errno == EEXIST ? sw__error(SW_EEXISTS, "%s: exists", out_path)
                             : sw__error(SW_EIO, "%s: %s", out_path, strerror(errno));
    if (st != NULL)
        sw__run_file_remove(temp); /* ours: made above; linked in, or of no use */
    for (int i = 0; i < 2; i++) {
        sw__signal_temp_remove(sidecars[i]);
        free(sidecars[i]);
    }
    sw__signal_temp_remove(temp);
    free(temp);
    if (rc != 0 && sw_last_error()[0] == '\0') /* a step that said nothing: name the output */
        sw__error_about(rc, out_path);
    return rc;
}

int sw_run_merge(const char *const *paths, size_t npaths, const char *out_path) {
    return merge(paths, npaths, out_path, 0);
}

int sw_run_merge_replace(const char *const *paths, size_t npaths, const char *out_path) {
    return merge(paths, npaths, out_path, 1);
}
