/*
 * run_reader.c — opening run files and reading them back: validation, snapshots (one rank or
 * all ranks merged with Chan's formula and histogram merges), records and names.
 */
#include "run_guard.h"
#include "run_store.h"
#include "sql.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { KIND_ACTION, KIND_PHASE, KIND_COUNTER, KIND_COUNT };
static const char *const KIND_NAME[KIND_COUNT] = {"action", "phase", "counter"};

/* Names of one kind in one rank, indexed by id (NULL where absent). */
typedef struct name_table {
    uint32_t n;
    char **names;
} name_table;

typedef struct rank_info {
    int rank;
    name_table names[KIND_COUNT];
} rank_info;

struct sw_run {
    sqlite3 *db;
    sw__guard guard; /* the time budget of db's statements (run_guard.h) */
    char *path;
    int version; /* the file's schema version */
    int nranks;
    rank_info *ranks;
    sw_progress_fn progress;
    void *progress_ctx;
};

/* ---- validation ---- */

static const unsigned char SQLITE_MAGIC[16] = "SQLite format 3";

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Before SQLite opens it: is there a regular file at path? (Only stat: no descriptor of our
 * own, whose closing would drop the POSIX locks of a writer in this same process.) */
static int check_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? sw__error(SW_ENOTFOUND, "%s: no such file", path)
                   : sw__error(SW_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return sw__error(SW_EFOREIGN, "%s: %s, not a run file", path,
                         S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    return 0;
}

/* The file's first 100 bytes and its size, read through SQLite's own descriptor: foreign,
 * cut inside the header, or shorter than its header says (truncated)? A database in WAL
 * mode is not measured: its newest pages may live in the -wal file. */
static int check_header(sqlite3 *db, const char *path) {
    sqlite3_file *f = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || f == NULL ||
        f->pMethods == NULL)
        return 0; /* nothing to look at: SQLite's own checks follow */
    sqlite3_int64 size = 0;
    unsigned char header[100];
    memset(header, 0, sizeof header);
    if (f->pMethods->xFileSize(f, &size) != SQLITE_OK)
        return sw__error(SW_EIO, "%s: cannot read its size", path);
    int read = f->pMethods->xRead(f, header, sizeof header, 0);
    size_t have = size < (sqlite3_int64)sizeof header ? (size_t)size : sizeof header;
    if (read != SQLITE_OK && read != SQLITE_IOERR_SHORT_READ)
        return sw__error(SW_EIO, "%s: cannot read its header", path);
    if (memcmp(header, SQLITE_MAGIC, have < sizeof SQLITE_MAGIC ? have : sizeof SQLITE_MAGIC))
        return sw__error(SW_EFOREIGN, "%s: not a stepwatch run file (not SQLite)", path);
    if (have < sizeof header)
        return sw__error(SW_ECORRUPT, "%s: truncated: %lld bytes, not even a header", path,
                         (long long)size);
    int wal = header[18] == 2 || header[19] == 2;
    uint32_t page_size = (uint32_t)header[16] << 8 | header[17];
    if (page_size == 1)
        page_size = 65536;
    uint64_t pages = be32(header + 28);
    int pages_valid = be32(header + 24) == be32(header + 92);
    if (!wal && pages_valid && (uint64_t)size < pages * page_size)
        return sw__error(SW_ECORRUPT, "%s: truncated: %lld of its %llu bytes", path,
                         (long long)size, (unsigned long long)(pages * page_size));
    return 0;
}

/* The file is SQLite (header checked): is it ours, of our version, intact? Its schema is
 * checked before any query reads a table (run_guard.c). */
static int check_database(sqlite3 *db, const char *path, int *schema_version) {
    int64_t app = 0, version = 0;
    int rc = sw__sql_int(db, "PRAGMA application_id", SW__NO_BIND, &app);
    if (rc != 0)
        return sw__error(rc == SW_EFOREIGN ? SW_ECORRUPT : rc, "%s: %s", path, sqlite3_errmsg(db));
    if (app != SW__RUN_APPLICATION_ID)
        return sw__error(SW_EFOREIGN, "%s: an SQLite database, not a stepwatch run file", path);
    rc = sw__sql_int(db, "PRAGMA user_version", SW__NO_BIND, &version);
    if (rc != 0)
        return sw__error(rc == SW_EFOREIGN ? SW_ECORRUPT : rc, "%s: %s", path, sqlite3_errmsg(db));
    if (version < SW__RUN_SCHEMA_OLDEST || version > SW__RUN_SCHEMA_VERSION)
        return sw__error(SW_EVERSION,
                         "%s: schema version %lld; this stepwatch reads versions %d to %d", path,
                         (long long)version, SW__RUN_SCHEMA_OLDEST, SW__RUN_SCHEMA_VERSION);
    *schema_version = (int)version;
    rc = sw__guard_check_schema(db, "main", path);
    if (rc != 0)
        return rc;
    sqlite3_stmt *q = NULL;
    rc = sw__sql_prepare(db, "PRAGMA quick_check", &q);
    if (rc == 0) {
        int step = sqlite3_step(q);
        if (step == SQLITE_ROW)
            rc = strcmp((const char *)sqlite3_column_text(q, 0), "ok") == 0 ? 0 : SW_ECORRUPT;
        else
            rc = sw__sqlite_rc(step ? step : SQLITE_CORRUPT);
    }
    sqlite3_finalize(q);
    if (rc != 0)
        return sw__error(rc == SW_EFOREIGN || rc == SW_ESQLITE ? SW_ECORRUPT : rc, "%s: %s", path,
                         rc == SW_ECORRUPT ? "damaged (SQLite's integrity check failed)"
                                           : sqlite3_errmsg(db));
    int64_t magic_ok = 0;
    rc = sw__sql_int(db, "SELECT value = '" SW__RUN_MAGIC "' FROM meta WHERE key = 'magic'",
                     SW__NO_BIND, &magic_ok);
    if (rc != 0 || !magic_ok)
        return sw__error(SW_ECORRUPT, "%s: %s", path,
                         rc != 0 ? sqlite3_errmsg(db) : "its meta table lost its mark");
    return 0;
}

/* ---- names ---- */

static int name_put(name_table *t, uint32_t id, const char *name) {
    if (id >= SW__MAX_ACTIONS)
        return SW_ECORRUPT;
    if (id >= t->n) {
        char **grown = realloc(t->names, (id + 1) * sizeof *grown);
        if (grown == NULL)
            return SW_ENOMEM;
        memset(grown + t->n, 0, (id + 1 - t->n) * sizeof *grown);
        t->names = grown;
        t->n = id + 1;
    }
    free(t->names[id]);
    t->names[id] = sw__strdup(name ? name : "");
    return t->names[id] ? 0 : SW_ENOMEM;
}

/* A row of "SELECT rank FROM ranks": the next rank, while there is room for it. */
typedef struct rank_list {
    sw_run *run;
    int64_t room;
} rank_list;

static int rank_row(sqlite3_stmt *q, void *ctx) {
    rank_list *l = ctx;
    if (l->run->nranks < l->room)
        l->run->ranks[l->run->nranks++].rank = sqlite3_column_int(q, 0);
    return 0;
}

/* A row of "SELECT rank, kind, id, name FROM names": into its rank's table of its kind. */
static int name_row(sqlite3_stmt *q, void *ctx) {
    sw_run *run = ctx;
    int rank = sqlite3_column_int(q, 0);
    const char *kind = (const char *)sqlite3_column_text(q, 1);
    int64_t id = sqlite3_column_int64(q, 2);
    int rc = 0;
    for (int r = 0; r < run->nranks; r++) {
        if (run->ranks[r].rank != rank || kind == NULL)
            continue;
        for (int k = 0; k < KIND_COUNT; k++)
            if (strcmp(kind, KIND_NAME[k]) == 0)
                rc = id < 0 ? SW_ECORRUPT
                            : name_put(&run->ranks[r].names[k], (uint32_t)id,
                                       (const char *)sqlite3_column_text(q, 3));
    }
    return rc;
}

/* Is there a write-ahead log beside the file with something in it? (SQLite makes an empty
 * one when it opens a file.) */
static int has_wal(const char *path) {
    char wal[4096];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &st) == 0 && st.st_size > 0;
}

static int load_ranks(sw_run *run) {
    int64_t n = 0;
    int rc = sw__sql_int(run->db, "SELECT count(*) FROM ranks", SW__NO_BIND, &n);
    if (rc != 0)
        return rc;
    if (n == 0) { /* created but the metadata never written, or kept in a lost WAL */
        return sw__error(SW_ECORRUPT, "%s: holds no run (no rank's metadata): %s", run->path,
                         has_wal(run->path)
                             ? "its writer had only just created it, or its write-ahead "
                               "log (-wal) is damaged"
                             : "its writer had only just created it, or it was copied "
                               "without its write-ahead log (-wal), which holds what was "
                               "written until the run ends");
    }
    run->ranks = calloc((size_t)n, sizeof *run->ranks);
    if (run->ranks == NULL)
        return SW_ENOMEM;
    sqlite3_stmt *q = NULL;
    rank_list ranks = {run, n};
    rc = sw__sql_prepare(run->db, "SELECT rank FROM ranks ORDER BY rank", &q);
    if (rc == 0)
        rc = sw__sql_each_row(q, rank_row, &ranks);
    if (rc == 0)
        rc = sw__sql_prepare(run->db, "SELECT rank, kind, id, name FROM names", &q);
    return rc == 0 ? sw__sql_each_row(q, name_row, run) : rc;
}

static const rank_info *find_rank(const sw_run *run, int rank) {
    if (run == NULL || run->nranks == 0)
        return NULL;
    if (rank < 0)
        return &run->ranks[0];
    for (int i = 0; i < run->nranks; i++)
        if (run->ranks[i].rank == rank)
            return &run->ranks[i];
    return NULL;
}

static const char *lookup(const sw_run *run, int rank, int kind, uint32_t id) {
    const rank_info *r = find_rank(run, rank);
    if (r == NULL || id >= r->names[kind].n)
        return NULL;
    return r->names[kind].names[id];
}

const char *sw_run_action_name(const sw_run *run, int rank, sw_id action) {
    return lookup(run, rank, KIND_ACTION, action);
}
const char *sw_run_phase_name(const sw_run *run, int rank, sw_phase phase) {
    return lookup(run, rank, KIND_PHASE, phase);
}
const char *sw_run_counter_name(const sw_run *run, int rank, sw_id counter) {
    return lookup(run, rank, KIND_COUNTER, counter);
}

/* ---- open / close ---- */

/* A failure reading a file that opened gets its sentence, in SQLite's words where it has
 * some ("no such table: steps"). The file opened as a run file, so an SQLite error here means
 * its tables are not what stepwatch writes: corrupt. */
static int reading(sw_run *run, int rc) {
    if (rc >= 0)
        return rc;
    if (rc == SW_ESQLITE)
        rc = SW_ECORRUPT;
    if (run->guard.tripped) { /* interrupted: the file made SQLite work without end */
        run->guard.tripped = 0;
        return sw__guard_error(&run->guard, run->path);
    }
    if (*sw_last_error() == '\0') {
        int code = sqlite3_errcode(run->db);
        int sqlite_said = code != SQLITE_OK && code != SQLITE_ROW && code != SQLITE_DONE;
        sw__error(rc, "%s: %s", run->path,
                  sqlite_said         ? sqlite3_errmsg(run->db)
                  : rc == SW_ECORRUPT ? "damaged: it holds values stepwatch never writes"
                                      : sw_strerror(rc));
    }
    return rc;
}

int sw__run_said(sw_run *run, int rc) {
    return rc == SW_ESQLITE || rc == SW_ECORRUPT ? reading(run, rc) : rc;
}

int sw_run_open(const char *path, sw_run **out) {
    sw__error_clear();
    if (path == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    int rc = check_path(path);
    if (rc != 0)
        return rc;
    sw_run *run = calloc(1, sizeof *run);
    if (run == NULL || (run->path = sw__strdup(path)) == NULL) {
        free(run);
        return SW_ENOMEM;
    }
    /* Read-only; a file left by a killed writer may need its WAL recovered, which SQLite
     * can only do with write access, so fall back to read-write (we never write). */
    int flags[2] = {SQLITE_OPEN_READONLY, SQLITE_OPEN_READWRITE};
    for (int attempt = 0; attempt < 2; attempt++) {
        sqlite3_close(run->db);
        run->db = NULL;
        sw__error_clear();
        rc = sw__guard_open(path, flags[attempt], &run->db, &run->guard);
        int sys = run->db ? sqlite3_system_errno(run->db) : 0;
        if (rc != 0 && sys != 0) /* "unable to open database file" alone names no cause */
            sw__error(rc, "%s: %s (%s)", path, sqlite3_errmsg(run->db), strerror(sys));
        else if (rc != 0)
            sw__error(rc, "%s: %s", path, run->db ? sqlite3_errmsg(run->db) : sw_strerror(rc));
        if (rc == 0) {
            sqlite3_busy_timeout(run->db, 2000);
            rc = check_header(run->db, path);
        }
        if (rc == 0)
            rc = check_database(run->db, path, &run->version);
        if (rc != SW_EIO && rc != SW_ESQLITE)
            break;
    }
    if (rc == 0)
        rc = reading(run, load_ranks(run));
    if (rc != 0) {
        sw_run_close(run);
        return rc;
    }
    *out = run;
    return 0;
}

void sw_run_close(sw_run *run) {
    if (run == NULL)
        return;
    for (int r = 0; r < run->nranks; r++)
        for (int k = 0; k < KIND_COUNT; k++) {
            for (uint32_t i = 0; i < run->ranks[r].names[k].n; i++)
                free(run->ranks[r].names[k].names[i]);
            free(run->ranks[r].names[k].names);
        }
    free(run->ranks);
    sqlite3_close(run->db);
    free(run->path);
    free(run);
}

int sw_run_rank_count(const sw_run *run) {
    return run ? run->nranks : 0;
}

sqlite3 *sw__run_db(sw_run *run) {
    return run->db;
}

int sw_run_rank_id(const sw_run *run, int index) {
    if (run == NULL || index < 0 || index >= run->nranks)
        return -1;
    return run->ranks[index].rank;
}

/* ---- snapshots ---- */

static void column_stats(sqlite3_stmt *q, int col, sw_stats *s) {
    s->count = (uint64_t)sqlite3_column_int64(q, col + 0);
    s->total_ns = (uint64_t)sqlite3_column_int64(q, col + 1);
    s->self_ns = (uint64_t)sqlite3_column_int64(q, col + 2);
    s->mean_ns = sqlite3_column_double(q, col + 3);
    s->m2 = sqlite3_column_double(q, col + 4);
    s->min_ns = (uint64_t)sqlite3_column_int64(q, col + 5);
    s->max_ns = (uint64_t)sqlite3_column_int64(q, col + 6);
    s->min_step = sqlite3_column_int64(q, col + 7);
    s->max_step = sqlite3_column_int64(q, col + 8);
    s->samples = (uint64_t)sqlite3_column_int64(q, col + 9);
}

/* The row of one rank in "ranks": the snapshot's header (found set). */
typedef struct header_read {
    sw_snapshot *s;
    int found;
} header_read;

static int header_row(sqlite3_stmt *q, void *ctx) {
    header_read *h = ctx;
    sw_snapshot *s = h->s;
    h->found = 1;
    s->name = sw__snapshot_string(s, (const char *)sqlite3_column_text(q, 0));
    s->host = sw__snapshot_string(s, (const char *)sqlite3_column_text(q, 1));
    s->command = sw__snapshot_string(s, (const char *)sqlite3_column_text(q, 2));
    s->pid = sqlite3_column_int64(q, 3);
    s->rank = sqlite3_column_int(q, 4);
    s->world_size = sqlite3_column_int(q, 5);
    s->start_unix_ns = (uint64_t)sqlite3_column_int64(q, 6);
    s->elapsed_ns = (uint64_t)sqlite3_column_int64(q, 7);
    s->wall_ns = (uint64_t)sqlite3_column_int64(q, 8);
    s->steps = (uint64_t)sqlite3_column_int64(q, 9);
    s->warmup_steps = (uint32_t)sqlite3_column_int64(q, 10);
    s->threads = (uint64_t)sqlite3_column_int64(q, 11);
    s->dropped_events = (uint64_t)sqlite3_column_int64(q, 12);
    uint64_t *misuse[] = {&s->misuse.end_without_begin, &s->misuse.mismatched_end,
                          &s->misuse.depth_overflow,    &s->misuse.bad_id,
                          &s->misuse.phase_mismatch,    &s->misuse.step_overlap,
                          &s->misuse.bad_record,        &s->misuse.open_at_snapshot};
    for (int i = 0; i < 8; i++)
        *misuse[i] = (uint64_t)sqlite3_column_int64(q, 13 + i);
    s->local_rank = sqlite3_column_int(q, 21);
    uint64_t *memory[] = {&s->memory.rss_steps,          &s->memory.rss_max,
                          &s->memory.rss_last,           &s->memory.allocator_steps,
                          &s->memory.peak_allocated_max, &s->memory.allocated_last,
                          &s->memory.reserved_max,       &s->memory.reserved_last};
    for (int i = 0; i < 8; i++)
        *memory[i] = (uint64_t)sqlite3_column_int64(q, 22 + i);
    return 0;
}

static int read_header(sw_run *run, int rank, sw_snapshot *s) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        run->db,
        "SELECT name, host, command, pid, rank, world_size, start_unix_ns, elapsed_ns,"
        " wall_ns, steps, warmup_steps, threads, dropped_events, misuse_end_without_begin,"
        " misuse_mismatched_end, misuse_depth_overflow, misuse_bad_id, misuse_phase_mismatch,"
        " misuse_step_overlap, misuse_bad_record, misuse_open_at_snapshot, local_rank,"
        " mem_rss_steps, mem_rss_max, mem_rss_last, mem_allocator_steps,"
        " mem_peak_allocated_max, mem_allocated_last, mem_reserved_max, mem_reserved_last"
        " FROM ranks WHERE rank = ?",
        rank, &q);
    if (rc != 0)
        return rc;
    header_read h = {s, 0};
    rc = sw__sql_each_row(q, header_row, &h);
    return rc == 0 && !h.found ? SW_ENOTFOUND : rc;
}

/* A row of "aggregates": one sw_row into the snapshot (the row struct is reused). */
typedef struct rows_read {
    sw_snapshot *s;
    sw_row *row;
} rows_read;

static int aggregate_row(sqlite3_stmt *q, void *ctx) {
    rows_read *r = ctx;
    sw_row *row = r->row;
    memset(row, 0, sizeof *row);
    row->action = (sw_id)sqlite3_column_int64(q, 0);
    row->phase = (sw_phase)sqlite3_column_int64(q, 1);
    row->action_name = (const char *)sqlite3_column_text(q, 2);
    row->phase_name = (const char *)sqlite3_column_text(q, 3);
    int category = sqlite3_column_int(q, 4);
    if (category < 0 || category >= SW_CAT_COUNT || row->action_name == NULL ||
        row->phase_name == NULL)
        return SW_ECORRUPT;
    row->category = (sw_category)category;
    column_stats(q, 5, &row->stats);
    column_stats(q, 15, &row->warmup);
    int rc = sw__hist_decode(sqlite3_column_blob(q, 25), (size_t)sqlite3_column_bytes(q, 25),
                             &row->hist);
    return rc == 0 ? sw__snapshot_add_row(r->s, row) : rc;
}

static int read_rows(sw_run *run, int rank, sw_snapshot *s) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        run->db,
        "SELECT action, phase, action_name, phase_name, category,"
        " count, total_ns, self_ns, mean_ns, m2, min_ns, max_ns, min_step, max_step, samples,"
        " w_count, w_total_ns, w_self_ns, w_mean_ns, w_m2, w_min_ns, w_max_ns, w_min_step,"
        " w_max_step, w_samples, hist FROM aggregates WHERE rank = ? ORDER BY seq",
        rank, &q);
    if (rc != 0)
        return rc;
    /* A sw_row holds a 2.4 kB histogram: keep it off the stack. */
    rows_read r = {s, malloc(sizeof *r.row)};
    if (r.row == NULL) {
        sqlite3_finalize(q);
        return SW_ENOMEM;
    }
    rc = sw__sql_each_row(q, aggregate_row, &r);
    free(r.row);
    return rc;
}

static int counter_summary_row(sqlite3_stmt *q, void *s) {
    sw_counter_summary c = {.name = (const char *)sqlite3_column_text(q, 0),
                            .count = (uint64_t)sqlite3_column_int64(q, 1),
                            .last = sqlite3_column_double(q, 2),
                            .min = sqlite3_column_double(q, 3),
                            .max = sqlite3_column_double(q, 4),
                            .mean = sqlite3_column_double(q, 5)};
    return c.name ? sw__snapshot_add_counter(s, &c) : SW_ECORRUPT;
}

static int read_counters(sw_run *run, int rank, sw_snapshot *s) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        run->db,
        "SELECT name, count, last, min, max, mean FROM counter_summaries WHERE rank = ?"
        " ORDER BY seq",
        rank, &q);
    return rc == 0 ? sw__sql_each_row(q, counter_summary_row, s) : rc;
}

static int note_row(sqlite3_stmt *q, void *s) {
    const char *key = (const char *)sqlite3_column_text(q, 0);
    const char *value = (const char *)sqlite3_column_text(q, 1);
    return key ? sw__snapshot_set_note(s, key, value) : SW_ECORRUPT;
}

static int read_notes(sw_run *run, int rank, sw_snapshot *s) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        run->db, "SELECT key, value FROM notes WHERE rank = ? ORDER BY seq", rank, &q);
    return rc == 0 ? sw__sql_each_row(q, note_row, s) : rc;
}

static int module_row(sqlite3_stmt *q, void *s) {
    sw_module_row m = {
        .path = (const char *)sqlite3_column_text(q, 0),
        .kind = (const char *)sqlite3_column_text(q, 1),
        .forward_calls = (uint64_t)sqlite3_column_int64(q, 2),
        .forward_ns = (uint64_t)sqlite3_column_int64(q, 3),
        .forward_self_ns = (uint64_t)sqlite3_column_int64(q, 4),
        .backward_calls = (uint64_t)sqlite3_column_int64(q, 5),
        .backward_ns = (uint64_t)sqlite3_column_int64(q, 6),
        .backward_self_ns = (uint64_t)sqlite3_column_int64(q, 7),
        .activation_bytes = sqlite3_column_int64(q, 8),
        .param_bytes = sqlite3_column_int64(q, 9),
        .grad_bytes = sqlite3_column_int64(q, 10),
        .optimizer_bytes = sqlite3_column_int64(q, 11),
        .device_forward_calls = (uint64_t)sqlite3_column_int64(q, 12),
        .device_forward_ns = (uint64_t)sqlite3_column_int64(q, 13),
        .device_forward_self_ns = (uint64_t)sqlite3_column_int64(q, 14),
        .device_backward_calls = (uint64_t)sqlite3_column_int64(q, 15),
        .device_backward_ns = (uint64_t)sqlite3_column_int64(q, 16),
        .device_backward_self_ns = (uint64_t)sqlite3_column_int64(q, 17),
    };
    return m.path && m.kind ? sw__snapshot_add_module(s, &m) : SW_ECORRUPT;
}

static int read_modules(sw_run *run, int rank, sw_snapshot *s) {
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(run->db,
                                 "SELECT path, class, forward_calls, forward_ns, forward_self_ns,"
                                 " backward_calls, backward_ns, backward_self_ns,"
                                 " activation_bytes, param_bytes, grad_bytes, optimizer_bytes,"
                                 " device_forward_calls, device_forward_ns,"
                                 " device_forward_self_ns, device_backward_calls,"
                                 " device_backward_ns, device_backward_self_ns"
                                 " FROM modules WHERE rank = ? ORDER BY seq",
                                 rank, &q);
    return rc == 0 ? sw__sql_each_row(q, module_row, s) : rc;
}

/* The slow steps summed up (run_slow.c writes them; docs/slow-steps.md). */
static int read_slow(sw_run *run, int rank, sw_slow_summary *out) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *q = NULL;
    int rc = sw__sql_prepare_int(
        run->db,
        "SELECT cause, count(*), sum(duration_ns), sum(duration_ns - median_ns),"
        " sum(kept) FROM slow_steps WHERE ?1 = -1 OR rank = ?1 GROUP BY cause",
        rank, &q);
    int step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        uint64_t n = (uint64_t)sqlite3_column_int64(q, 1);
        out->by_cause[sw__cause_parse((const char *)sqlite3_column_text(q, 0))] += n;
        out->slow += n;
        out->slow_ns += (uint64_t)sqlite3_column_int64(q, 2);
        out->excess_ns += (uint64_t)sqlite3_column_int64(q, 3);
        out->windows_kept += (uint64_t)sqlite3_column_int64(q, 4);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sw__sqlite_rc(step);
    sqlite3_finalize(q);
    out->windows_dropped = out->slow - out->windows_kept;
    if (rc == 0) {
        int64_t judged = 0;
        rc = sw__sql_int(
            run->db, "SELECT coalesce(sum(slow_judged), 0) FROM ranks WHERE ?1 = -1 OR rank = ?1",
            rank, &judged);
        out->judged = (uint64_t)judged;
    }
    return rc;
}

static int rank_snapshot(sw_run *run, int rank, sw_snapshot **out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_snapshot *s = sw__snapshot_new();
    if (s == NULL)
        return SW_ENOMEM;
    /* One read transaction: a live writer's next flush cannot split the picture. */
    int rc = sw__sqlite_rc(sqlite3_exec(run->db, "BEGIN", NULL, NULL, NULL));
    if (rc == 0)
        rc = read_header(run, rank, s);
    if (rc == 0)
        rc = read_rows(run, rank, s);
    if (rc == 0)
        rc = read_counters(run, rank, s);
    if (rc == 0)
        rc = read_notes(run, rank, s);
    if (rc == 0)
        rc = read_modules(run, rank, s);
    if (rc == 0)
        rc = read_slow(run, rank, &s->slow);
    if (rc != SW_ENOTFOUND)
        rc = reading(run, rc); /* before COMMIT, which would reset SQLite's message */
    sqlite3_exec(run->db, "COMMIT", NULL, NULL, NULL);
    if (rc != 0) {
        sw_snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- all ranks merged ---- */

static sw_row *find_row(sw_snapshot *s, const char *action, const char *phase) {
    return (sw_row *)sw_snapshot_find(s, action, phase);
}

/* The id an action gets in the merged snapshot: its order of first appearance. */
static sw_id merged_action_id(const sw_snapshot *s, const char *action) {
    sw_id next = 0;
    for (size_t i = 0; i < s->nrows; i++) {
        if (strcmp(s->rows[i].action_name, action) == 0)
            return s->rows[i].action;
        if (s->rows[i].action >= next)
            next = s->rows[i].action + 1;
    }
    return next;
}

static int merge_into(sw_snapshot *all, const sw_snapshot *one) {
    for (size_t i = 0; i < one->nrows; i++) {
        const sw_row *r = &one->rows[i];
        if (r->phase == SW_PHASE_ALL)
            continue; /* roll-ups are rebuilt by sw__snapshot_finish */
        sw_row *into = find_row(all, r->action_name, r->phase_name);
        if (into != NULL) {
            sw_stats_merge(&into->stats, &r->stats);
            sw_stats_merge(&into->warmup, &r->warmup);
            sw_hist_merge(&into->hist, &r->hist);
            continue;
        }
        sw_id id = merged_action_id(all, r->action_name);
        int rc = sw__snapshot_add_row(all, r);
        if (rc != 0)
            return rc;
        all->rows[all->nrows - 1].action = id;
    }
    for (size_t i = 0; i < one->ncounters; i++) {
        const sw_counter_summary *c = &one->counters[i];
        sw_counter_summary *into = NULL;
        for (size_t k = 0; k < all->ncounters; k++)
            if (strcmp(all->counters[k].name, c->name) == 0)
                into = &all->counters[k];
        if (into == NULL) {
            int rc = sw__snapshot_add_counter(all, c);
            if (rc != 0)
                return rc;
            continue;
        }
        uint64_t n = into->count + c->count;
        if (n > 0)
            into->mean = (into->mean * (double)into->count + c->mean * (double)c->count) /
                         (double)n;
        if (c->count > 0) {
            into->min = into->count ? (c->min < into->min ? c->min : into->min) : c->min;
            into->max = into->count ? (c->max > into->max ? c->max : into->max) : c->max;
            into->last = c->last; /* the highest rank's */
        }
        into->count = n;
    }
    for (size_t i = 0; i < one->nnotes; i++) { /* ranks come in order: the lowest's value stays */
        int rc = sw__snapshot_set_note(all, one->notes[i].key, one->notes[i].value);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < one->nmodules; i++) { /* summed by path */
        int rc = sw__snapshot_add_module(all, &one->modules[i]);
        if (rc != 0)
            return rc;
    }
    uint64_t *from = (uint64_t *)&one->misuse, *to = (uint64_t *)&all->misuse;
    for (size_t k = 0; k < sizeof one->misuse / sizeof(uint64_t); k++)
        to[k] += from[k];
    /* Memory: the steps add up; every figure is the largest rank's (the rank that runs out
     * first is the one to watch). */
    const uint64_t *mem_from = (const uint64_t *)&one->memory;
    uint64_t *mem_to = (uint64_t *)&all->memory;
    for (size_t k = 0; k < sizeof one->memory / sizeof(uint64_t); k++) {
        int steps = k == 0 || &mem_to[k] == &all->memory.allocator_steps;
        mem_to[k] = steps                     ? mem_to[k] + mem_from[k]
                    : mem_from[k] > mem_to[k] ? mem_from[k]
                                              : mem_to[k];
    }
    uint64_t *slow_from = (uint64_t *)&one->slow, *slow_to = (uint64_t *)&all->slow;
    for (size_t k = 0; k < sizeof one->slow / sizeof(uint64_t); k++) /* every figure adds up */
        slow_to[k] += slow_from[k];
    all->steps += one->steps;
    all->threads += one->threads;
    all->dropped_events += one->dropped_events;
    all->wall_ns += one->wall_ns;
    if (one->elapsed_ns > all->elapsed_ns)
        all->elapsed_ns = one->elapsed_ns;
    if (all->start_unix_ns == 0 || one->start_unix_ns < all->start_unix_ns)
        all->start_unix_ns = one->start_unix_ns;
    if (one->world_size > all->world_size)
        all->world_size = one->world_size;
    return 0;
}

static int snapshot(sw_run *run, sw_snapshot **out) {
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    if (run->nranks == 1)
        return rank_snapshot(run, run->ranks[0].rank, out);
    sw_snapshot *all = sw__snapshot_new();
    if (all == NULL)
        return SW_ENOMEM;
    int rc = 0;
    for (int r = 0; rc == 0 && r < run->nranks; r++) {
        sw_snapshot *one = NULL;
        rc = rank_snapshot(run, run->ranks[r].rank, &one);
        if (rc == 0 && r == 0) {
            /* Identity of the merged run: the first rank's, with rank -1 for "all". */
            all->name = sw__snapshot_string(all, one->name);
            all->host = sw__snapshot_string(all, one->host);
            all->command = sw__snapshot_string(all, one->command);
            all->pid = one->pid;
            all->rank = -1;
            all->warmup_steps = one->warmup_steps;
        }
        if (rc == 0)
            rc = merge_into(all, one);
        sw_snapshot_free(one);
    }
    uint64_t wall = all->wall_ns;
    if (rc == 0)
        rc = sw__snapshot_finish(all);
    /* Percentages of the merged run are shares of the time of all ranks together. */
    all->wall_ns = wall;
    if (rc != 0) {
        sw_snapshot_free(all);
        return rc;
    }
    *out = all;
    return 0;
}

int sw_run_rank_snapshot(sw_run *run, int rank, sw_snapshot **out) {
    sw__error_clear();
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    int rc = rank_snapshot(run, rank, out);
    if (rc == SW_ENOTFOUND)
        return sw__error(rc, "%s: no rank %d in this run file", run->path, rank);
    return reading(run, rc);
}

int sw_run_snapshot(sw_run *run, sw_snapshot **out) {
    sw__error_clear();
    if (run == NULL || out == NULL)
        return SW_EINVAL;
    return reading(run, snapshot(run, out));
}

/* ---- how the run ended ---- */

/* One rank's line of sw_run_incomplete: why its file was not completed, and how much of the
 * run the file covers. */
static void describe_incomplete(sqlite3_stmt *q, const char *path, char *out, size_t size) {
    int rank = sqlite3_column_int(q, 0);
    if (sqlite3_column_int64(q, 5) == 0 && !has_wal(path)) { /* no snapshot ever written */
        snprintf(out, size,
                 "rank %d: the file holds only the run's start (its metadata, no steps): it was "
                 "copied without its write-ahead log (-wal), which holds what was written until "
                 "the run ends, or its writer was killed right after creating it",
                 rank);
        return;
    }
    int64_t pid = sqlite3_column_int64(q, 1);
    const char *host = (const char *)sqlite3_column_text(q, 2);
    double covered_s = (double)(sqlite3_column_int64(q, 4) - sqlite3_column_int64(q, 3)) / 1e9;
    char here[256];
    sw__hostname(here, sizeof here);
    /* The writer may still be at work: its process is alive on this host. */
    int alive = host != NULL && strcmp(host, here) == 0 && pid > 0 && kill((pid_t)pid, 0) == 0;
    if (alive)
        snprintf(out, size,
                 "rank %d is still being written by its process (pid %lld on this host); the "
                 "file covers its first %.1f s so far",
                 rank, (long long)pid, covered_s);
    else
        snprintf(out, size,
                 "rank %d stopped without completing its file (killed, or crashed); the file "
                 "covers its first %.1f s, and what was recorded in the last second before "
                 "that (totals, the last flush of steps) may be missing",
                 rank, covered_s);
}

/* The clauses of sw_run_incomplete, one per row of an incomplete rank. */
typedef struct incomplete_text {
    const char *path;
    char *what;
    size_t size;
    int ranks;
} incomplete_text;

static int incomplete_row(sqlite3_stmt *q, void *ctx) {
    incomplete_text *t = ctx;
    if (t->what != NULL && t->size > 0) {
        size_t used = strlen(t->what);
        if (t->ranks == 0)
            used += (size_t)snprintf(t->what + used, t->size - used, "incomplete: ");
        else if (used < t->size)
            used += (size_t)snprintf(t->what + used, t->size - used, "; ");
        if (used < t->size)
            describe_incomplete(q, t->path, t->what + used, t->size - used);
    }
    t->ranks++;
    return 0;
}

int sw_run_incomplete(sw_run *run, char *what, size_t size) {
    sw__error_clear();
    if (run == NULL)
        return SW_EINVAL;
    if (what != NULL && size > 0)
        what[0] = '\0';
    sqlite3_stmt *q = NULL;
    int rc = reading(run, sw__sql_prepare(run->db,
                                          "SELECT rank, pid, host, start_unix_ns,"
                                          " updated_unix_ns, wall_ns FROM ranks"
                                          " WHERE complete = 0 ORDER BY rank",
                                          &q));
    incomplete_text t = {run->path, what, size, 0};
    if (rc == 0)
        rc = reading(run, sw__sql_each_row(q, incomplete_row, &t));
    return rc != 0 ? rc : t.ranks;
}

/* ---- records ---- */

/* Prepare a query with an optional "WHERE rank = ?" (rank -1 = all ranks). */
static int prepare_ranked(sw_run *run, const char *select, const char *order, int rank,
                          sqlite3_stmt **q) {
    char sql[512];
    snprintf(sql, sizeof sql, "%s%s ORDER BY %s", select, rank >= 0 ? " WHERE rank = ?" : "",
             order);
    int rc = reading(run, sw__sql_prepare(run->db, sql, q));
    if (rc == 0 && rank >= 0)
        sqlite3_bind_int(*q, 1, rank);
    return rc;
}

/* A walk over records for the caller's fn (one of the three). A nonzero value of fn stops
 * the walk and is returned as it is; SQLite's errors get their sentence (reading). */
typedef struct visit {
    sw_run *run;
    sw_step_fn step_fn;
    sw_span_fn span_fn;
    sw_counter_fn counter_fn;
    void *ctx;
    int stopped;          /* fn returned nonzero */
    uint64_t done, total; /* spans, for the progress callback */
} visit;

static int visited(visit *v, int rc) {
    v->stopped = rc != 0;
    return rc;
}

static int visit_end(visit *v, int rc) {
    return v->stopped ? rc : reading(v->run, rc);
}

static int step_row(sqlite3_stmt *q, void *ctx) {
    sw_step_record r = {.step = (uint64_t)sqlite3_column_int64(q, 1),
                        .phase = (sw_phase)sqlite3_column_int64(q, 2),
                        .batch_size = (uint32_t)sqlite3_column_int64(q, 3),
                        .warmup = sqlite3_column_int(q, 4),
                        .thread = (uint32_t)sqlite3_column_int64(q, 5),
                        .start_ns = (uint64_t)sqlite3_column_int64(q, 6),
                        .duration_ns = (uint64_t)sqlite3_column_int64(q, 7)};
    for (int c = 0; c < SW_CAT_COUNT; c++)
        r.category_ns[c] = (uint64_t)sqlite3_column_int64(q, 8 + c);
    int col = 8 + SW_CAT_COUNT; /* memory: NULL where it was not measured */
    r.rss_bytes = (uint64_t)sqlite3_column_int64(q, col);
    r.has_allocator = sqlite3_column_type(q, col + 1) != SQLITE_NULL;
    r.allocated_bytes = (uint64_t)sqlite3_column_int64(q, col + 1);
    r.peak_allocated_bytes = (uint64_t)sqlite3_column_int64(q, col + 2);
    r.reserved_bytes = (uint64_t)sqlite3_column_int64(q, col + 3);
    visit *v = ctx;
    return visited(v, v->step_fn(v->ctx, sqlite3_column_int(q, 0), &r));
}

int sw_run_foreach_step(sw_run *run, int rank, sw_step_fn fn, void *ctx) {
    sw__error_clear();
    if (run == NULL || fn == NULL)
        return SW_EINVAL;
    sqlite3_stmt *q = NULL;
    int rc = prepare_ranked(run,
                            "SELECT rank, step, phase, batch_size, warmup, thread, start_ns,"
                            " duration_ns, data_ns, forward_ns, loss_ns, backward_ns,"
                            " optimizer_ns, zero_grad_ns, callback_ns, collective_ns, other_ns,"
                            " rss_bytes,"
                            " allocated_bytes, peak_allocated_bytes, reserved_bytes FROM steps",
                            rank >= 0 ? "step" : "start_ns, rank", rank, &q);
    visit v = {.run = run, .step_fn = fn, .ctx = ctx};
    return rc == 0 ? visit_end(&v, sw__sql_each_row(q, step_row, &v)) : rc;
}

static int counter_row(sqlite3_stmt *q, void *ctx) {
    sw_counter_record r = {.counter = (sw_id)sqlite3_column_int64(q, 1),
                           .thread = (uint32_t)sqlite3_column_int64(q, 2),
                           .time_ns = (uint64_t)sqlite3_column_int64(q, 3),
                           .value = sqlite3_column_double(q, 4)};
    visit *v = ctx;
    return visited(v, v->counter_fn(v->ctx, sqlite3_column_int(q, 0), &r));
}

int sw_run_foreach_counter(sw_run *run, int rank, sw_counter_fn fn, void *ctx) {
    sw__error_clear();
    if (run == NULL || fn == NULL)
        return SW_EINVAL;
    sqlite3_stmt *q = NULL;
    int rc = prepare_ranked(run, "SELECT rank, counter, thread, time_ns, value FROM counters",
                            "time_ns, rank", rank, &q);
    visit v = {.run = run, .counter_fn = fn, .ctx = ctx};
    return rc == 0 ? visit_end(&v, sw__sql_each_row(q, counter_row, &v)) : rc;
}

void sw_run_set_progress(sw_run *run, sw_progress_fn fn, void *ctx) {
    if (run == NULL)
        return;
    run->progress = fn;
    run->progress_ctx = ctx;
}

#define PROGRESS_EVERY 65536u

/* Tell the progress callback, every PROGRESS_EVERY spans and when done == total. */
static void progress(const sw_run *run, const char *stage, uint64_t done, uint64_t total) {
    if (run->progress != NULL && total > 0 && (done % PROGRESS_EVERY == 0 || done == total))
        run->progress(run->progress_ctx, stage, done, total);
}

/* How many spans the file holds (of one rank, or all with rank -1). */
static int count_spans(sw_run *run, int rank, uint64_t *total) {
    int64_t n = 0;
    int rc = sw__sql_int(run->db,
                         "SELECT coalesce(sum(count), 0) FROM span_chunks"
                         " WHERE ?1 < 0 OR rank = ?1",
                         rank, &n);
    *total = (uint64_t)n;
    return rc;
}

/* A row of span_chunks: its spans decoded and copied into the sorted table. */
typedef struct chunk_copy {
    const sw_run *run;
    sqlite3_stmt *insert;
    sw_span_record *chunk; /* SW__SPAN_CHUNK_MAX */
    uint64_t done, total;
} chunk_copy;

static int chunk_row(sqlite3_stmt *q, void *ctx) {
    chunk_copy *c = ctx;
    int chunk_rank = sqlite3_column_int(q, 0);
    int64_t thread = sqlite3_column_int64(q, 1);
    size_t got = 0;
    if (thread < 0 || thread > UINT32_MAX)
        return SW_ECORRUPT;
    int rc = sw__spans_decode(sqlite3_column_blob(q, 3), (size_t)sqlite3_column_bytes(q, 3),
                              (uint32_t)thread, c->chunk, SW__SPAN_CHUNK_MAX, &got);
    if (rc == 0 && got != (size_t)sqlite3_column_int64(q, 2))
        rc = SW_ECORRUPT;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        const sw_span_record *s = &c->chunk[i];
        sqlite3_bind_int(c->insert, 1, chunk_rank);
        sqlite3_bind_int64(c->insert, 2, s->thread);
        sqlite3_bind_int64(c->insert, 3, s->depth);
        sqlite3_bind_int64(c->insert, 4, (int64_t)s->start_ns);
        sqlite3_bind_int64(c->insert, 5, (int64_t)s->duration_ns);
        sqlite3_bind_int64(c->insert, 6, s->action);
        sqlite3_bind_int64(c->insert, 7, s->phase);
        sqlite3_bind_int64(c->insert, 8, s->step);
        rc = sw__sqlite_rc(sqlite3_step(c->insert));
        sqlite3_reset(c->insert);
        progress(c->run, "reading spans", ++c->done, c->total);
    }
    return rc;
}

/* Spans are stored in packed chunks, each thread's in the order they ended (a parent after
 * its children). To visit them by start time they are decoded into a temporary table and
 * read back through SQLite's sorter, which spills to temporary files: memory stays bounded
 * however long the timeline. */
static int spans_to_temp_table(sw_run *run, int rank, uint64_t *total) {
    sqlite3_stmt *q = NULL;
    chunk_copy c = {.run = run};
    int rc = sw__sqlite_rc(sqlite3_exec(
        run->db,
        "PRAGMA temp_store = FILE;"
        "DROP TABLE IF EXISTS temp.sw_sorted_spans;"
        "CREATE TEMP TABLE sw_sorted_spans(rank INTEGER, thread INTEGER, depth INTEGER,"
        " start_ns INTEGER, duration_ns INTEGER, action INTEGER, phase INTEGER, step INTEGER);"
        "BEGIN",
        NULL, NULL, NULL));
    /* Counted in the same read transaction as the copy: a run still writing the file adds
     * chunks to neither. */
    if (rc == 0)
        rc = count_spans(run, rank, total);
    c.total = *total;
    if (rc == 0)
        rc = sw__sql_prepare(run->db, "INSERT INTO temp.sw_sorted_spans VALUES(?,?,?,?,?,?,?,?)",
                             &c.insert);
    c.chunk = malloc(SW__SPAN_CHUNK_MAX * sizeof *c.chunk);
    if (c.chunk == NULL && rc == 0)
        rc = SW_ENOMEM;
    if (rc == 0)
        rc = prepare_ranked(run, "SELECT rank, thread, count, data FROM span_chunks", "rank, rowid",
                            rank, &q);
    if (rc == 0)
        rc = sw__sql_each_row(q, chunk_row, &c);
    free(c.chunk);
    sqlite3_finalize(c.insert);
    int committed = sw__sqlite_rc(sqlite3_exec(run->db, "COMMIT", NULL, NULL, NULL));
    return rc ? rc : committed;
}

static int span_row(sqlite3_stmt *q, void *ctx) {
    sw_span_record r = {.thread = (uint32_t)sqlite3_column_int64(q, 1),
                        .depth = (uint32_t)sqlite3_column_int64(q, 2),
                        .start_ns = (uint64_t)sqlite3_column_int64(q, 3),
                        .duration_ns = (uint64_t)sqlite3_column_int64(q, 4),
                        .action = (sw_id)sqlite3_column_int64(q, 5),
                        .phase = (sw_phase)sqlite3_column_int64(q, 6),
                        .step = sqlite3_column_int64(q, 7)};
    visit *v = ctx;
    int rc = visited(v, v->span_fn(v->ctx, sqlite3_column_int(q, 0), &r));
    progress(v->run, "writing spans", ++v->done, v->total);
    return rc;
}

int sw_run_foreach_span(sw_run *run, int rank, sw_span_fn fn, void *ctx) {
    sw__error_clear();
    if (run == NULL || fn == NULL)
        return SW_EINVAL;
    visit v = {.run = run, .span_fn = fn, .ctx = ctx};
    int rc = reading(run, spans_to_temp_table(run, rank, &v.total));
    sqlite3_stmt *q = NULL;
    progress(run, "sorting spans", 0, v.total); /* SQLite sorts at the first row it returns */
    if (rc == 0)
        rc = reading(
            run, sw__sql_prepare(run->db,
                                 "SELECT rank, thread, depth, start_ns, duration_ns,"
                                 " action, phase,"
                                 " step FROM temp.sw_sorted_spans ORDER BY start_ns, rank, thread,"
                                 " depth",
                                 &q));
    if (rc == 0)
        rc = visit_end(&v, sw__sql_each_row(q, span_row, &v));
    /* The sorted copy lives in a temporary file until dropped. */
    sqlite3_exec(run->db, "DROP TABLE IF EXISTS temp.sw_sorted_spans", NULL, NULL, NULL);
    return rc;
}
