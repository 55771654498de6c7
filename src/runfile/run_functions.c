/*
 * run_functions.c — function profiles in the run file (tables functions and function_nodes,
 * docs/run-file.md): writing a rank's profile, reading one rank or all merged, and the
 * collapsed-stacks export.
 *
 * A profile is stored merged, one tree per action, times in ns: functions(rank, func, file,
 * line, name) and function_nodes(rank, action, node, parent, func, calls, total_ns, self_ns,
 * folded), node 0 being the action itself (func -1; folded: its calls past the node limit).
 */
#include "run_store.h"
#include "sql.h"

#include <stdlib.h>

static int delete_rank(sqlite3 *db, const char *sql, int rank) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(db, sql, rank, &q);
    if (rc == 0)
        rc = sw__sqlite_rc(sqlite3_step(q));
    sqlite3_finalize(q);
    return rc;
}

int sw__store_write_functions(sw__store *st, int rank, const sw_fprofile *fp) {
    sw_fprofile *merged = NULL;
    int rc = sw_fprofile_merge(fp, &merged);
    sqlite3_stmt *func = NULL, *node = NULL;
    if (rc == 0)
        rc = delete_rank(st->db, "DELETE FROM functions WHERE rank = ?1", rank);
    if (rc == 0)
        rc = delete_rank(st->db, "DELETE FROM function_nodes WHERE rank = ?1", rank);
    if (rc == 0)
        rc = sw__sql_prepare(st->db, "INSERT INTO functions VALUES(?1, ?2, ?3, ?4, ?5)", &func);
    if (rc == 0)
        rc = sw__sql_prepare(
            st->db, "INSERT INTO function_nodes VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", &node);
    for (uint32_t i = 0; rc == 0 && i < sw_fprofile_func_count(merged); i++) {
        const sw_func *f = sw_fprofile_func(merged, i);
        sqlite3_bind_int(func, 1, rank);
        sqlite3_bind_int64(func, 2, i);
        sqlite3_bind_text(func, 3, f->file, -1, SQLITE_STATIC);
        sqlite3_bind_int64(func, 4, f->line);
        sqlite3_bind_text(func, 5, f->name, -1, SQLITE_STATIC);
        rc = sw__sqlite_rc(sqlite3_step(func));
        sqlite3_reset(func);
    }
    for (uint32_t t = 0; rc == 0 && t < sw_fprofile_tree_count(merged); t++) {
        const sw_ftree *tree = sw_fprofile_tree(merged, t);
        const sw_fnode *nodes = sw_ftree_nodes(tree);
        for (uint32_t i = 0; rc == 0 && i < sw_ftree_size(tree); i++) {
            sqlite3_bind_int(node, 1, rank);
            sqlite3_bind_text(node, 2, sw_ftree_action(tree), -1, SQLITE_STATIC);
            sqlite3_bind_int64(node, 3, i);
            sqlite3_bind_int64(node, 4, nodes[i].parent);
            sqlite3_bind_int64(node, 5, i == 0 ? -1 : (int64_t)nodes[i].func);
            sqlite3_bind_int64(node, 6, (int64_t)nodes[i].calls);
            sqlite3_bind_int64(node, 7, (int64_t)nodes[i].total_ns);
            sqlite3_bind_int64(node, 8, (int64_t)nodes[i].self_ns);
            sqlite3_bind_int64(node, 9, i == 0 ? (int64_t)sw_ftree_folded(tree) : 0);
            rc = sw__sqlite_rc(sqlite3_step(node));
            sqlite3_reset(node);
        }
    }
    sqlite3_finalize(func);
    sqlite3_finalize(node);
    sw_fprofile_free(merged);
    return rc;
}

/* One rank's profile as stored. */
static int read_rank(sqlite3 *db, int rank, sw_fprofile *fp) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        db, "SELECT func, file, line, name FROM functions WHERE rank = ?1 ORDER BY func", rank, &q);
    int step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        const char *file = (const char *)sqlite3_column_text(q, 1);
        const char *name = (const char *)sqlite3_column_text(q, 3);
        sw_func f = {.file = file ? file : "?",
                     .line = (uint32_t)sqlite3_column_int64(q, 2),
                     .name = name ? name : "?"};
        uint32_t index;
        rc = sw_fprofile_add_func(fp, (uint64_t)sqlite3_column_int64(q, 0), &f, &index);
    }
    if (rc == 0 && step != SQLITE_DONE) /* an error, not the end: never a partial profile */
        rc = sw__sqlite_rc(step);
    sqlite3_finalize(q);
    q = NULL;
    if (rc == 0)
        rc = sw__sql_prepare_int(db,
                                 "SELECT action, node, parent, func, calls, total_ns, self_ns,"
                                 " folded FROM function_nodes WHERE rank = ?1"
                                 " ORDER BY action, node",
                                 rank, &q);
    sw_ftree *tree = NULL;
    uint32_t *map = NULL; /* stored node -> node of tree */
    size_t map_cap = 0;
    int64_t next = 0; /* nodes are stored numbered 0, 1, 2... per action */
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t node = sqlite3_column_int64(q, 1), parent = sqlite3_column_int64(q, 2);
        if (node != 0 && node != next) {
            rc = SW_ECORRUPT; /* a gap: the map below would be sized by a number of the file's */
            break;
        }
        next = node + 1;
        if (node == 0) { /* a new action */
            tree = sw_fprofile_add_tree(fp, (const char *)sqlite3_column_text(q, 0));
            if (tree == NULL) {
                rc = SW_ENOMEM;
                break;
            }
            sw_ftree_fold(tree, (uint64_t)sqlite3_column_int64(q, 7));
        }
        if (tree == NULL || node < 0 || parent < 0 || parent >= node + (node == 0)) {
            rc = SW_ECORRUPT; /* parents are stored before their children */
            break;
        }
        if ((rc = sw__grow(&map, sizeof *map, &map_cap, (size_t)node + 1, 256)) != 0)
            break;
        uint32_t at = 0;
        if (node > 0) {
            uint32_t func = sw_fprofile_find_func(fp, (uint64_t)sqlite3_column_int64(q, 3));
            if (func == SW_FNODE_NONE) {
                rc = SW_ECORRUPT;
                break;
            }
            at = map[parent] == SW_FNODE_NONE ? SW_FNODE_NONE
                                              : sw_ftree_add_child(tree, map[parent], func, func);
        }
        map[node] = at;
        if (at != SW_FNODE_NONE)
            sw_ftree_add(tree, at, (uint64_t)sqlite3_column_int64(q, 4),
                         (uint64_t)sqlite3_column_int64(q, 5),
                         (uint64_t)sqlite3_column_int64(q, 6));
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sw__sqlite_rc(step);
    free(map);
    sqlite3_finalize(q);
    return rc;
}

int sw_run_functions(sw_run *run, int rank, sw_fprofile **out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_fprofile *all = NULL;
    int rc = sw_fprofile_new(&all);
    for (int i = 0; rc == 0 && i < sw_run_rank_count(run); i++) {
        int r = sw_run_rank_id(run, i);
        if (rank >= 0 && r != rank)
            continue;
        sw_fprofile *one = NULL;
        rc = sw_fprofile_new(&one);
        if (rc == 0)
            rc = read_rank(sw__run_db(run), r, one);
        if (rc == 0)
            rc = sw_fprofile_merge_into(all, one);
        sw_fprofile_free(one);
    }
    if (rc == 0 && sw_fprofile_tree_count(all) == 0)
        rc = SW_ENOTFOUND;
    if (rc != 0) {
        sw_fprofile_free(all);
        return sw__run_said(run, rc);
    }
    *out = all;
    return 0;
}

int sw_run_export_collapsed(sw_run *run, FILE *out) {
    sw_fprofile *fp = NULL;
    int rc = sw_run_functions(run, -1, &fp);
    if (rc == 0)
        rc = sw_fprofile_write_collapsed(fp, NULL, out);
    sw_fprofile_free(fp);
    return rc;
}
