/*
 * run_store.c — every SQL statement that writes a run file (its schema: run_schema.c).
 *
 * The journal's flusher, sw_run_merge and the tests all write through these functions, so the
 * file layout lives in one place. docs/run-file.md describes the tables.
 */
#include "run_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out) {
    return sw__sqlite_rc(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL));
}

static void close_connection(sw__store *st, int finished);

int sw__store_create(const char *path, const sw__run_meta *meta, sw__store **out) {
    if (path == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw__store *st = calloc(1, sizeof *st);
    if (st == NULL)
        return SW_ENOMEM;
    int rc = sw__run_file_create(path, meta, &st->lock_fd);
    if (rc != 0) {
        free(st);
        return rc;
    }
    /* The file exists, whole, and is ours (locked): never create or follow a link at it.
     * SQLite's NOFOLLOW refuses a link in any component, so it is given the path with its
     * directory resolved: links above the file are followed, a link at it is not. */
    char *real = sw__real_dir_path(path);
    int said = real == NULL; /* the sentence is set */
    if (real == NULL)
        rc = sw__error(errno == ENOMEM ? SW_ENOMEM : SW_EIO, "%s: cannot resolve its directory: %s",
                       path, strerror(errno));
    else
        rc = sw__sqlite_rc(
            sqlite3_open_v2(real, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL));
    free(real);
    char why[400];
    if (rc != 0 && st->db != NULL) { /* "unable to open database file" alone names no cause */
        sw__error(rc, "%s: SQLite cannot open it: %s", path,
                  sw__sql_cause(st->db, why, sizeof why));
        said = 1;
    }
    if (rc == 0) {
        sqlite3_busy_timeout(st->db, 2000);
        /* WAL (set in the file from the start): readers see the file while it grows, and a
         * killed writer loses at most the transaction in flight. NORMAL sync: durable across
         * a process crash. */
        rc = sw__sql_exec(st->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
    }
    if (rc == 0)
        rc = prepare(st->db,
                     "INSERT OR REPLACE INTO steps"
                     " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     &st->step);
    if (rc == 0)
        rc = prepare(st->db, "INSERT INTO span_chunks VALUES(?,?,?,?,?)", &st->span_chunk);
    if (rc == 0)
        rc = prepare(st->db, "INSERT INTO counters VALUES(?,?,?,?,?)", &st->counter);
    if (rc == 0)
        rc = prepare(st->db, "INSERT OR IGNORE INTO names VALUES(?,?,?,?)", &st->name);
    if (rc != 0) {
        if (!said) /* its WAL cannot be made: out of descriptors, no room, ... */
            sw__error(rc, "%s: %s", path, sw__sql_cause(st->db, why, sizeof why));
        close_connection(st, 0);
        sw__run_file_remove(path); /* ours: created above, still locked */
        sw__store_forget(st);
        return rc;
    }
    *out = st;
    return 0;
}

/* Finalize the statements and close the connection; finished: leave WAL mode first. */
static void close_connection(sw__store *st, int finished) {
    sqlite3_finalize(st->step);
    sqlite3_finalize(st->span_chunk);
    sqlite3_finalize(st->counter);
    sqlite3_finalize(st->name);
    sqlite3_finalize(st->slow_step);
    sqlite3_finalize(st->window_span);
    if (st->db != NULL && finished) {
        /* A finished file is one self-contained file: leaving WAL mode checkpoints the WAL
         * into it, and later readers (read-only) then create no empty -wal and -shm beside
         * it. This needs the only connection; when a reader has the file open it stays in
         * WAL mode (no waiting: the process is ending). */
        sqlite3_busy_timeout(st->db, 0);
        sqlite3_exec(st->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    }
    sqlite3_close(st->db);
}

void sw__store_close(sw__store *st) {
    if (st == NULL)
        return;
    close_connection(st, 1);
    sw__store_forget(st); /* the claim goes last: after SQLite's own descriptors */
}

void sw__store_forget(sw__store *st) {
    if (st == NULL)
        return;
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    free(st);
}

int sw__store_begin(sw__store *st) {
    return sw__sql_exec(st->db, "BEGIN IMMEDIATE");
}
int sw__store_commit(sw__store *st) {
    return sw__sql_exec(st->db, "COMMIT");
}

void sw__store_rollback(sw__store *st) {
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Run a prepared statement to completion and reset it for the next use. */
static int step_reset(sqlite3_stmt *q) {
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : sw__sqlite_rc(rc ? rc : SQLITE_ERROR);
}

int sw__store_write_meta(sw__store *st, const sw__run_meta *m) {
    return sw__meta_write(st->db, m);
}

int sw__store_write_name(sw__store *st, int rank, const char *kind, uint32_t id, const char *name) {
    if (name == NULL)
        return 0;
    sqlite3_bind_int(st->name, 1, rank);
    sqlite3_bind_text(st->name, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st->name, 3, id);
    sqlite3_bind_text(st->name, 4, name, -1, SQLITE_TRANSIENT);
    return step_reset(st->name);
}

/* One value of the rank's metadata row, learned after the row was written. */
static int update_rank(sw__store *st, const char *sql, int rank, int64_t value) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, sql, &q);
    if (rc == 0) {
        sqlite3_bind_int64(q, 1, value);
        sqlite3_bind_int(q, 2, rank);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

int sw__store_write_clock_offset(sw__store *st, int rank, int64_t offset_ns) {
    return update_rank(st, "UPDATE ranks SET clock_offset_ns=? WHERE rank=?", rank, offset_ns);
}

int sw__store_write_world_size(sw__store *st, int rank, int world_size) {
    return update_rank(st, "UPDATE ranks SET world_size=? WHERE rank=?", rank, world_size);
}

int sw__store_write_thread(sw__store *st, int rank, uint32_t thread, const char *name) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, "INSERT OR REPLACE INTO threads VALUES(?,?,?)", &q);
    if (rc == 0) {
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, thread);
        sqlite3_bind_text(q, 3, name ? name : "", -1, SQLITE_STATIC);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

int sw__store_add_rank_round(sw__store *st, int rank, int round, uint64_t step, int final,
                             int world_size, size_t payload_size, const void *payloads) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, "INSERT OR REPLACE INTO rank_rounds VALUES(?,?,?,?,?,?,?,?)", &q);
    if (rc == 0) {
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int(q, 2, round);
        sqlite3_bind_int64(q, 3, (sqlite3_int64)step);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)sw__unix_now_ns());
        sqlite3_bind_int(q, 5, final != 0);
        sqlite3_bind_int(q, 6, world_size);
        sqlite3_bind_int64(q, 7, (sqlite3_int64)payload_size);
        sqlite3_bind_blob64(q, 8, payloads, (sqlite3_uint64)payload_size * (size_t)world_size,
                            SQLITE_STATIC);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

/* Bind one sw_stats to ten consecutive parameters starting at col. */
static void bind_stats(sqlite3_stmt *q, int col, const sw_stats *s) {
    sqlite3_bind_int64(q, col + 0, (sqlite3_int64)s->count);
    sqlite3_bind_int64(q, col + 1, (sqlite3_int64)s->total_ns);
    sqlite3_bind_int64(q, col + 2, (sqlite3_int64)s->self_ns);
    sqlite3_bind_double(q, col + 3, s->mean_ns);
    sqlite3_bind_double(q, col + 4, s->m2);
    sqlite3_bind_int64(q, col + 5, (sqlite3_int64)s->min_ns);
    sqlite3_bind_int64(q, col + 6, (sqlite3_int64)s->max_ns);
    sqlite3_bind_int64(q, col + 7, s->min_step);
    sqlite3_bind_int64(q, col + 8, s->max_step);
    sqlite3_bind_int64(q, col + 9, (sqlite3_int64)s->samples);
}

static int write_rows(sw__store *st, int rank, const sw_snapshot *snap) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db,
                     "INSERT INTO aggregates VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                     "?,?,?,?,?)",
                     &q);
    for (size_t i = 0; rc == 0 && i < snap->nrows; i++) {
        const sw_row *r = &snap->rows[i];
        unsigned char *blob = NULL;
        size_t size = 0;
        rc = sw__hist_encode(&r->hist, &blob, &size);
        if (rc != 0)
            break;
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)i);
        sqlite3_bind_int64(q, 3, r->action);
        sqlite3_bind_int64(q, 4, r->phase);
        sqlite3_bind_text(q, 5, r->action_name ? r->action_name : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 6, r->phase_name ? r->phase_name : "", -1, SQLITE_STATIC);
        sqlite3_bind_int(q, 7, (int)r->category);
        bind_stats(q, 8, &r->stats);
        bind_stats(q, 18, &r->warmup);
        sqlite3_bind_blob(q, 28, blob, (int)size, free);
        rc = step_reset(q);
        /* Names from the snapshot too, so a file written from snapshots alone is complete. */
        if (rc == 0 && r->phase != SW_PHASE_ALL) {
            rc = sw__store_write_name(st, rank, "action", r->action, r->action_name);
            if (rc == 0)
                rc = sw__store_write_name(st, rank, "phase", r->phase, r->phase_name);
        }
    }
    sqlite3_finalize(q);
    return rc;
}

static int write_counter_summaries(sw__store *st, int rank, const sw_snapshot *snap) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, "INSERT INTO counter_summaries VALUES(?,?,?,?,?,?,?,?)", &q);
    for (size_t i = 0; rc == 0 && i < snap->ncounters; i++) {
        const sw_counter_summary *c = &snap->counters[i];
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)i);
        sqlite3_bind_text(q, 3, c->name ? c->name : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)c->count);
        sqlite3_bind_double(q, 5, c->last);
        sqlite3_bind_double(q, 6, c->min);
        sqlite3_bind_double(q, 7, c->max);
        sqlite3_bind_double(q, 8, c->mean);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

static int write_notes(sw__store *st, int rank, const sw_snapshot *snap) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, "INSERT INTO notes VALUES(?,?,?,?)", &q);
    for (size_t i = 0; rc == 0 && i < snap->nnotes; i++) {
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)i);
        sqlite3_bind_text(q, 3, snap->notes[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, snap->notes[i].value, -1, SQLITE_STATIC);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

static int write_modules(sw__store *st, int rank, const sw_snapshot *snap) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db, "INSERT INTO modules VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     &q);
    for (size_t i = 0; rc == 0 && i < snap->nmodules; i++) {
        const sw_module_row *m = &snap->modules[i];
        sqlite3_bind_int(q, 1, rank);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)i);
        sqlite3_bind_text(q, 3, m->path, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, m->kind, -1, SQLITE_STATIC);
        const uint64_t counts[] = {
            m->forward_calls,         m->forward_ns,         m->forward_self_ns,
            m->backward_calls,        m->backward_ns,        m->backward_self_ns,
            m->device_forward_calls,  m->device_forward_ns,  m->device_forward_self_ns,
            m->device_backward_calls, m->device_backward_ns, m->device_backward_self_ns};
        int col = 5;
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
            sqlite3_bind_int64(q, col++, (sqlite3_int64)counts[k]);
        const int64_t bytes[] = {m->activation_bytes, m->param_bytes, m->grad_bytes,
                                 m->optimizer_bytes};
        for (size_t k = 0; k < sizeof bytes / sizeof *bytes; k++)
            sqlite3_bind_int64(q, col++, bytes[k]);
        rc = step_reset(q);
    }
    sqlite3_finalize(q);
    return rc;
}

static int write_totals(sw__store *st, int rank, const sw_snapshot *snap, int complete,
                        const char *end_reason) {
    sqlite3_stmt *q = NULL;
    int rc = prepare(st->db,
                     "UPDATE ranks SET elapsed_ns=?, wall_ns=?, steps=?, threads=?,"
                     " dropped_events=?, misuse_end_without_begin=?, misuse_mismatched_end=?,"
                     " misuse_depth_overflow=?, misuse_bad_id=?, misuse_phase_mismatch=?,"
                     " misuse_step_overlap=?, misuse_bad_record=?, misuse_open_at_snapshot=?,"
                     " mem_rss_steps=?, mem_rss_max=?, mem_rss_last=?, mem_allocator_steps=?,"
                     " mem_peak_allocated_max=?, mem_allocated_last=?, mem_reserved_max=?,"
                     " mem_reserved_last=?,"
                     " complete=?, end_reason=?, updated_unix_ns=? WHERE rank=?",
                     &q);
    if (rc != 0)
        return rc;
    const sw_misuse *m = &snap->misuse;
    const sw_memory_summary *mem = &snap->memory;
    const uint64_t values[] = {snap->elapsed_ns,    snap->wall_ns,        snap->steps,
                               snap->threads,       snap->dropped_events, m->end_without_begin,
                               m->mismatched_end,   m->depth_overflow,    m->bad_id,
                               m->phase_mismatch,   m->step_overlap,      m->bad_record,
                               m->open_at_snapshot, mem->rss_steps,       mem->rss_max,
                               mem->rss_last,       mem->allocator_steps, mem->peak_allocated_max,
                               mem->allocated_last, mem->reserved_max,    mem->reserved_last};
    int col = 1;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        sqlite3_bind_int64(q, col++, (sqlite3_int64)values[i]);
    sqlite3_bind_int(q, col++, complete != 0);
    if (end_reason)
        sqlite3_bind_text(q, col, end_reason, -1, SQLITE_STATIC);
    col++;
    sqlite3_bind_int64(q, col++, (sqlite3_int64)sw__unix_now_ns());
    sqlite3_bind_int(q, col, rank);
    rc = step_reset(q);
    if (rc == 0 && sqlite3_changes(st->db) == 0)
        rc = SW_ESTATE; /* no metadata row for this rank: write_meta first */
    sqlite3_finalize(q);
    return rc;
}

int sw__store_write_snapshot(sw__store *st, int rank, const sw_snapshot *snap, int complete,
                             const char *end_reason) {
    if (st == NULL || snap == NULL)
        return SW_EINVAL;
    char sql[240];
    snprintf(sql, sizeof sql,
             "DELETE FROM aggregates WHERE rank=%d; DELETE FROM counter_summaries WHERE rank=%d;"
             "DELETE FROM notes WHERE rank=%d; DELETE FROM modules WHERE rank=%d;",
             rank, rank, rank, rank);
    int rc = sw__sql_exec(st->db, sql);
    if (rc == 0)
        rc = write_rows(st, rank, snap);
    if (rc == 0)
        rc = write_counter_summaries(st, rank, snap);
    if (rc == 0)
        rc = write_notes(st, rank, snap);
    if (rc == 0)
        rc = write_modules(st, rank, snap);
    if (rc == 0)
        rc = write_totals(st, rank, snap, complete, end_reason);
    return rc;
}

int sw__store_add_step(sw__store *st, int rank, const sw_step_record *r) {
    sqlite3_stmt *q = st->step;
    sqlite3_bind_int(q, 1, rank);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)r->step);
    sqlite3_bind_int64(q, 3, r->phase);
    sqlite3_bind_int64(q, 4, r->batch_size);
    sqlite3_bind_int(q, 5, r->warmup != 0);
    sqlite3_bind_int64(q, 6, r->thread);
    sqlite3_bind_int64(q, 7, (sqlite3_int64)r->start_ns);
    sqlite3_bind_int64(q, 8, (sqlite3_int64)r->duration_ns);
    for (int c = 0; c < SW_CAT_COUNT; c++)
        sqlite3_bind_int64(q, 9 + c, (sqlite3_int64)r->category_ns[c]);
    /* Memory not measured is NULL, never 0: 0 bytes allocated is a reading. */
    int col = 9 + SW_CAT_COUNT;
    if (r->rss_bytes != 0)
        sqlite3_bind_int64(q, col, (sqlite3_int64)r->rss_bytes);
    else
        sqlite3_bind_null(q, col);
    const uint64_t allocator[] = {r->allocated_bytes, r->peak_allocated_bytes, r->reserved_bytes};
    for (int k = 0; k < 3; k++) {
        if (r->has_allocator)
            sqlite3_bind_int64(q, col + 1 + k, (sqlite3_int64)allocator[k]);
        else
            sqlite3_bind_null(q, col + 1 + k);
    }
    return step_reset(q);
}

int sw__store_add_counter(sw__store *st, int rank, const sw_counter_record *r) {
    sqlite3_stmt *q = st->counter;
    sqlite3_bind_int(q, 1, rank);
    sqlite3_bind_int64(q, 2, r->counter);
    sqlite3_bind_int64(q, 3, r->thread);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)r->time_ns);
    sqlite3_bind_double(q, 5, r->value);
    return step_reset(q);
}

int sw__store_add_spans(sw__store *st, int rank, uint32_t thread, const sw_span_record *spans,
                        size_t n) {
    if (n == 0)
        return 0;
    unsigned char *blob = NULL;
    size_t size = 0;
    int rc = sw__spans_encode(spans, n, &blob, &size);
    if (rc != 0)
        return rc;
    uint64_t first = spans[0].start_ns;
    for (size_t i = 1; i < n; i++)
        if (spans[i].start_ns < first)
            first = spans[i].start_ns;
    sqlite3_stmt *q = st->span_chunk;
    sqlite3_bind_int(q, 1, rank);
    sqlite3_bind_int64(q, 2, thread);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)n);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)first);
    sqlite3_bind_blob(q, 5, blob, (int)size, free);
    return step_reset(q);
}

/* ---- encodings ---- */

/* A growable byte buffer for varint encoding. */
typedef struct bytes {
    unsigned char *data;
    size_t size, cap;
} bytes;

static int put_varint(bytes *b, uint64_t v) {
    if (sw__grow(&b->data, 1, &b->cap, b->size + 10, 256) != 0) /* a varint: 10 bytes at most */
        return SW_ENOMEM;
    while (v >= 0x80) {
        b->data[b->size++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    b->data[b->size++] = (unsigned char)v;
    return 0;
}

/* Read one varint at *pos; SW_ECORRUPT past the end or beyond 64 bits. */
static int get_varint(const unsigned char *p, size_t size, size_t *pos, uint64_t *v) {
    uint64_t value = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*pos >= size)
            return SW_ECORRUPT;
        unsigned char byte = p[(*pos)++];
        value |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) {
            *v = value;
            return 0;
        }
    }
    return SW_ECORRUPT;
}

static uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static int64_t unzigzag(uint64_t v) {
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

int sw__hist_encode(const sw_hist *h, unsigned char **out, size_t *size) {
    bytes b = {0};
    uint32_t prev = 0;
    int rc = put_varint(&b, 0); /* room, so an empty histogram is a 1-byte blob, not NULL */
    b.size = 0;
    for (uint32_t i = 0; rc == 0 && i < SW_HIST_BUCKETS; i++) {
        if (h->buckets[i] == 0)
            continue;
        rc = put_varint(&b, i - prev); /* bucket delta, then count */
        if (rc == 0)
            rc = put_varint(&b, h->buckets[i]);
        prev = i;
    }
    if (rc != 0) {
        free(b.data);
        return rc;
    }
    *out = b.data;
    *size = b.size;
    return 0;
}

int sw__hist_decode(const void *blob, size_t size, sw_hist *h) {
    memset(h, 0, sizeof *h);
    size_t pos = 0;
    uint64_t bucket = 0;
    while (pos < size) {
        uint64_t delta, count;
        if (get_varint(blob, size, &pos, &delta) || get_varint(blob, size, &pos, &count))
            return SW_ECORRUPT;
        bucket += delta;
        if (bucket >= SW_HIST_BUCKETS || count == 0 || count > UINT32_MAX ||
            (delta == 0 && h->count > 0))
            return SW_ECORRUPT;
        h->buckets[bucket] = (uint32_t)count;
        h->count += count;
    }
    return 0;
}

/* Each span: action, phase, depth, step delta, start delta (zigzag), duration. Deltas are
 * from the previous span of the chunk, so a typical span takes about 10 bytes. */
int sw__spans_encode(const sw_span_record *spans, size_t n, unsigned char **out, size_t *size) {
    bytes b = {0};
    int64_t prev_step = 0, prev_start = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const sw_span_record *s = &spans[i];
        rc = put_varint(&b, s->action);
        if (rc == 0)
            rc = put_varint(&b, s->phase);
        if (rc == 0)
            rc = put_varint(&b, s->depth);
        /* Deltas in unsigned arithmetic (wrapping, as the decoder adds them): a step of -1
         * after INT64_MAX must not overflow (found by fuzz_decode's round trip). */
        if (rc == 0)
            rc = put_varint(&b, zigzag((int64_t)((uint64_t)s->step - (uint64_t)prev_step)));
        if (rc == 0)
            rc = put_varint(&b, zigzag((int64_t)(s->start_ns - (uint64_t)prev_start)));
        if (rc == 0)
            rc = put_varint(&b, s->duration_ns);
        prev_step = s->step;
        prev_start = (int64_t)s->start_ns;
    }
    if (rc != 0) {
        free(b.data);
        return rc;
    }
    *out = b.data;
    *size = b.size;
    return 0;
}

int sw__spans_decode(const void *blob, size_t size, uint32_t thread, sw_span_record *spans,
                     size_t max, size_t *n) {
    size_t pos = 0, count = 0;
    int64_t step = 0, start = 0;
    while (pos < size) {
        uint64_t f[6];
        for (int k = 0; k < 6; k++)
            if (get_varint(blob, size, &pos, &f[k]))
                return SW_ECORRUPT;
        if (count == max || f[0] > UINT32_MAX || f[1] > UINT32_MAX || f[2] > UINT32_MAX)
            return SW_ECORRUPT;
        /* Deltas are added in unsigned arithmetic: a crafted blob may overflow, which must
         * give SW_ECORRUPT, not undefined behaviour. */
        step = (int64_t)((uint64_t)step + (uint64_t)unzigzag(f[3]));
        start = (int64_t)((uint64_t)start + (uint64_t)unzigzag(f[4]));
        if (start < 0 || step < -1 || f[5] > (uint64_t)INT64_MAX)
            return SW_ECORRUPT;
        spans[count++] = (sw_span_record){.action = (sw_id)f[0],
                                          .phase = (sw_phase)f[1],
                                          .thread = thread,
                                          .depth = (uint32_t)f[2],
                                          .step = step,
                                          .start_ns = (uint64_t)start,
                                          .duration_ns = f[5]};
    }
    *n = count;
    return 0;
}
