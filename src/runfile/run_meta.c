/*
 * run_meta.c — the rank's row of metadata in the ranks table: who ran, where, with which
 * options. Written into a new file's first image (run_create.c) and by the store.
 */
#include "run_store.h"

#include <time.h>

uint64_t sw__unix_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int sw__meta_write(sqlite3 *db, const sw__run_meta *m) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sqlite_rc(sqlite3_prepare_v2(
        db,
        "INSERT INTO ranks(rank, world_size, name, host, pid, command, start_unix_ns,"
        " origin_ns, warmup_steps, timeline, options, library_version, updated_unix_ns,"
        " local_rank, clock_offset_ns)"
        " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(rank) DO UPDATE SET"
        " world_size=excluded.world_size, name=excluded.name, host=excluded.host,"
        " pid=excluded.pid, command=excluded.command, start_unix_ns=excluded.start_unix_ns,"
        " origin_ns=excluded.origin_ns, warmup_steps=excluded.warmup_steps,"
        " timeline=excluded.timeline, options=excluded.options,"
        " local_rank=excluded.local_rank, clock_offset_ns=excluded.clock_offset_ns",
        -1, &q, NULL));
    if (rc != 0)
        return rc;
    sqlite3_bind_int(q, 1, m->rank);
    sqlite3_bind_int(q, 2, m->world_size);
    sqlite3_bind_text(q, 3, m->name ? m->name : "stepwatch", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, m->host ? m->host : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, m->pid);
    sqlite3_bind_text(q, 6, m->command ? m->command : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 7, (sqlite3_int64)m->start_unix_ns);
    sqlite3_bind_int64(q, 8, (sqlite3_int64)m->origin_ns);
    sqlite3_bind_int64(q, 9, m->warmup_steps);
    sqlite3_bind_int(q, 10, m->timeline != 0);
    sqlite3_bind_text(q, 11, m->options_json ? m->options_json : "{}", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 12, SW_VERSION_STRING, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 13, (sqlite3_int64)sw__unix_now_ns());
    sqlite3_bind_int(q, 14, m->local_rank);
    sqlite3_bind_int64(q, 15, m->clock_offset_ns);
    rc = sqlite3_step(q) == SQLITE_DONE ? 0 : sw__sqlite_rc(sqlite3_errcode(db));
    sqlite3_finalize(q);
    return rc;
}
