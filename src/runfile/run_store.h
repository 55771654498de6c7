/*
 * run_store.h — the run file's schema and the SQL that writes it (run_store.c), shared by the
 * journal (the live writer), the reader, merge and the tests. See docs/run-file.md.
 *
 * Every table carries a rank column, so a merged file is the union of rank files.
 */
#ifndef SW_RUN_STORE_H
#define SW_RUN_STORE_H

#include "core/core.h"
#include "sql.h"

#include <sqlite3.h>

/* PRAGMA application_id ("swrf") and user_version (the schema version) of every run file.
 * Only version 1 was ever released; versions 2 to 10 were steps of unreleased work, so a
 * reader takes version 11 alone (an older file is refused with SW_EVERSION, its version and
 * the versions this library reads named). */
#define SW__RUN_APPLICATION_ID 0x73777266
#define SW__RUN_SCHEMA_VERSION 11
#define SW__RUN_SCHEMA_OLDEST 11
/* The value of meta.magic. */
#define SW__RUN_MAGIC "stepwatch-run"

/* Spans are stored packed, many per row (see docs/run-file.md): at most this many a chunk. */
#define SW__SPAN_CHUNK_MAX 4096u

/* What the ranks table holds besides what a snapshot carries. */
typedef struct sw__run_meta {
    int rank;
    int world_size;
    const char *name;
    const char *host;
    const char *command;
    int64_t pid;
    uint64_t start_unix_ns;
    uint64_t origin_ns; /* CLOCK_MONOTONIC at the start (records are relative to it) */
    uint32_t warmup_steps;
    int timeline;
    const char *options_json; /* the options in force, as a JSON object */
    int local_rank;
    int64_t clock_offset_ns; /* this rank's wall clock minus rank 0's (0 = unknown) */
} sw__run_meta;

typedef struct sw__store {
    sqlite3 *db;
    int lock_fd; /* holds the file's exclusive flock: the claim (run_create.c) */
    sqlite3_stmt *step, *span_chunk, *counter, *name;
    sqlite3_stmt *slow_step, *window_span; /* prepared at their first use (run_slow.c) */
} sw__store;

/* Create a new run file at path and open it (run_create.c says what may be replaced: only
 * a stepwatch run file no live process writes; SW_EEXISTS for anything else, SW_EBUSY for a
 * live one; sw_last_error says why). meta, when given, is in the file from its first byte:
 * a kill just after creation leaves a run with no steps, never a file that holds no run.
 * The store holds the file's lock until closed. */
int sw__store_create(const char *path, const sw__run_meta *meta, sw__store **out);
/* Close the file (statements and connection), then let go of the lock. NULL is a no-op. */
void sw__store_close(sw__store *st);
/* In a fork child: the store is the parent's. Let go of the child's copy of the lock's
 * descriptor and the struct; the connection is never touched (it may be mid-write in the
 * parent, and closing it could checkpoint or remove the parent's WAL). NULL is a no-op. */
void sw__store_forget(sw__store *st);
/* The schema, application_id, user_version and meta rows, in an empty database
 * (run_schema.c). */
int sw__store_init(sqlite3 *db);

/* ---- run_create.c ---- */

/* Make path a new run file (the rules above), written whole under the path before anyone
 * can see it, and locked: *lock_fd holds the lock (close it after SQLite's connection). */
int sw__run_file_create(const char *path, const sw__run_meta *meta, int *lock_fd);
/* May path take a new run file? 0 when nothing is there (*exists 0) or an earlier run file
 * of ours that no live process writes (*exists 1); else SW_EEXISTS, SW_EBUSY or SW_EIO with
 * the sentence in sw_last_error. Touches nothing. */
int sw__run_file_check(const char *path, int *exists);
/* Remove a run file of ours with its -wal and -shm; or only those two. */
void sw__run_file_remove(const char *path);
void sw__run_file_remove_sidecars(const char *path);
/* Do these first 100 bytes of a file say "stepwatch run file" (SQLite's magic and our
 * application_id)? */
int sw__run_header_is_ours(const unsigned char header[100]);

int sw__store_begin(sw__store *st);
int sw__store_commit(sw__store *st);
/* Roll back an open transaction (after an error); safe when none is open. */
void sw__store_rollback(sw__store *st);

/* The rank's row of metadata (insert or replace), through the store. */
int sw__store_write_meta(sw__store *st, const sw__run_meta *m);

/* ---- run_meta.c ---- */

/* The rank's row of metadata (insert or replace) in a database: a store's or an image's. */
int sw__meta_write(sqlite3 *db, const sw__run_meta *m);
/* CLOCK_REALTIME in ns: when a row was updated. */
uint64_t sw__unix_now_ns(void);
/* A name of an id: kind is "action", "phase" or "counter". Kept if already there. */
int sw__store_write_name(sw__store *st, int rank, const char *kind, uint32_t id, const char *name);
/* Replace the rank's aggregates, counter summaries, notes, misuse and totals with snap's.
 * complete: nonzero when the run ended (end_reason says how: "exit", "SIGTERM", ...). */
int sw__store_write_snapshot(sw__store *st, int rank, const sw_snapshot *snap, int complete,
                             const char *end_reason);
int sw__store_add_step(sw__store *st, int rank, const sw_step_record *r);
int sw__store_add_counter(sw__store *st, int rank, const sw_counter_record *r);
/* Spans of one thread, packed into one row. */
int sw__store_add_spans(sw__store *st, int rank, uint32_t thread, const sw_span_record *spans,
                        size_t n);
/* Set the rank's clock offset (its wall clock minus rank 0's). */
int sw__store_write_clock_offset(sw__store *st, int rank, int64_t offset_ns);
/* The rank's world size, where it was learned after the file was made (sw_set_world_size). */
int sw__store_write_world_size(sw__store *st, int rank, int world_size);
/* Name a recording thread of the rank (insert or replace). */
int sw__store_write_thread(sw__store *st, int rank, uint32_t thread, const char *name);
/* One round of cross-rank aggregation (world_size payloads of payload_size bytes). */
int sw__store_add_rank_round(sw__store *st, int rank, int round, uint64_t step, int final,
                             int world_size, size_t payload_size, const void *payloads);
/* Replace the rank's function profile with fp's (merged per action; run_functions.c). */
int sw__store_write_functions(sw__store *st, int rank, const sw_fprofile *fp);

/* ---- run_slow.c: slow steps (docs/slow-steps.md) ---- */

/* Slow step r (cause set) into slow_steps, its window not kept yet. */
int sw__store_add_slow_step(sw__store *st, int rank, const sw_step_record *r);
/* A span of the window of slow step `window`: the first one marks the window kept. */
int sw__store_add_window_span(sw__store *st, int rank, uint64_t window, const sw_span_record *s);
/* Keep the spans of the rank's SW_SLOW_WINDOWS costliest windows (excess over the median),
 * dropping the others'. */
int sw__store_bound_windows(sw__store *st, int rank);
/* The rank's steps judged (ranks.slow_judged). */
int sw__store_write_slow_judged(sw__store *st, int rank, uint64_t judged);

/* The reader's connection (run_reader.c), for the readers in other files. */
sqlite3 *sw__run_db(sw_run *run);
/* rc of a reader in another file, with its sentence when SQLite failed and none was set yet
 * ("F: no such column: ...", never a bare "SQLite error"). */
int sw__run_said(sw_run *run, int rc);

/* ---- encodings (little-endian, varint) ---- */

/* Histogram as (bucket, count) pairs of nonzero buckets; *out is malloc'd. */
int sw__hist_encode(const sw_hist *h, unsigned char **out, size_t *size);
/* SW_ECORRUPT for a malformed blob. */
int sw__hist_decode(const void *blob, size_t size, sw_hist *h);
/* Spans of one thread; *out is malloc'd. */
int sw__spans_encode(const sw_span_record *spans, size_t n, unsigned char **out, size_t *size);
/* Decode into spans[0..max); *n is set to the count. SW_ECORRUPT for a malformed blob. */
int sw__spans_decode(const void *blob, size_t size, uint32_t thread, sw_span_record *spans,
                     size_t max, size_t *n);

#endif /* SW_RUN_STORE_H */
