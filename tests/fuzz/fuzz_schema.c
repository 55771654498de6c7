/* fuzz_schema.c — crafted schemas (docs/reliability.md, "Hostile run files"): a run file whose
 * rows are fuzzed (fuzz_rows.h) and whose schema is then changed the ways an attacker would:
 * a table replaced by a view (recursive, or handing out values of up to a gigabyte), triggers,
 * indexes, generated columns, extra tables and views, schema rows edited by hand. Every
 * reader meets it: sw_run_open and all it feeds (reports, exports, diagnose, HTML, compare:
 * fuzz_exercise), and sw_run_merge. Each must refuse or read it under the memory and time
 * limits scripts/fuzz.sh gives (-rss_limit_mb, -timeout), with no crash. */
#include "fuzz_rows.h"

static const char *const TABLES[] = {
    "meta",  "ranks",    "names",       "aggregates", "counter_summaries",
    "steps", "counters", "span_chunks", "functions",  "function_nodes",
    "notes", "threads",  "rank_rounds", "actions",    "phases"};

/* One change to the schema: template k of a table t with a number n. */
static void change(sqlite3 *db, unsigned k, const char *t, uint64_t n) {
    static const char *const TEMPLATES[] = {
        "DROP TABLE %1$s; CREATE VIEW %1$s AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
        "SELECT x + 1 FROM r) SELECT x AS rank, x AS kind, x AS id, x AS name FROM r",
        "DROP TABLE %1$s; CREATE VIEW %1$s AS SELECT 0 AS rank, 'action' AS kind, 0 AS id, "
        "zeroblob(%2$llu) AS name, zeroblob(%2$llu) AS data",
        "CREATE TRIGGER tr_%1$s AFTER INSERT ON %1$s BEGIN SELECT zeroblob(%2$llu); END",
        "CREATE INDEX ix_%1$s_%2$llu ON %1$s(rank)",
        "DROP TABLE %1$s",
        "ALTER TABLE %1$s ADD COLUMN g%2$llu AS (zeroblob(%2$llu))",
        "CREATE TABLE extra_%2$llu(x); INSERT INTO extra_%2$llu VALUES(zeroblob(%2$llu %% 65536))",
        "CREATE VIEW v_%2$llu AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)"
        " SELECT x FROM r",
        "DROP VIEW IF EXISTS %1$s; CREATE VIEW %1$s AS WITH RECURSIVE r(x) AS (SELECT 1 UNION "
        "ALL SELECT x + 1 FROM r) SELECT x AS rank, x AS id, zeroblob(%2$llu) AS name FROM r",
        "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = replace(sql, 'INTEGER', "
        "'INTEGER AS (zeroblob(%2$llu))') WHERE name = '%1$s'; PRAGMA writable_schema = OFF",
        "PRAGMA writable_schema = ON; UPDATE sqlite_master SET type = 'view', sql = 'CREATE VIEW "
        "%1$s AS SELECT zeroblob(%2$llu)' WHERE name = '%1$s'; PRAGMA writable_schema = OFF",
        "CREATE TABLE sqlite_stat1(tbl, idx, stat); ANALYZE",
    };
    char sql[1024];
    snprintf(sql, sizeof sql, TEMPLATES[k % (sizeof TEMPLATES / sizeof *TEMPLATES)], t,
             (unsigned long long)n);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* A second of SQLite work without a row ends a read (the default is a minute), and
     * SQLite's heap stays far below the fuzzer's RSS limit. */
    setenv("STEPWATCH_READ_BUDGET_S", "1", 1);
    sqlite3_hard_heap_limit64(256 << 20);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    snprintf(path, sizeof path, "%s", fuzz_path("schema.db"));
    const char *merged = fuzz_path("schema-merged.db");
    fuzz_bytes b = {data, size, 0};
    unsigned changes = fuzz_u8(&b) % 4;
    unsigned k[4];
    const char *table[4];
    uint64_t n[4];
    for (unsigned i = 0; i < changes; i++) {
        k[i] = fuzz_u8(&b);
        table[i] = TABLES[fuzz_u8(&b) % (sizeof TABLES / sizeof *TABLES)];
        n[i] = fuzz_u64(&b, 4) % ((uint64_t)1 << 30); /* up to a gigabyte */
    }
    if (fuzz_make_run(path, 0, &b) == 0) {
        sqlite3 *db = NULL;
        if (sqlite3_open(path, &db) == SQLITE_OK)
            for (unsigned i = 0; i < changes; i++)
                change(db, k[i], table[i], n[i]);
        sqlite3_close(db);
        sw_run *run = NULL;
        if (sw_run_open(path, &run) == 0)
            fuzz_exercise(run);
        sw_run_close(run);
        const char *inputs[1] = {path};
        fuzz_remove(merged);
        sw_run_merge(inputs, 1, merged);
    }
    fuzz_remove(path);
    fuzz_remove(merged);
    return 0;
}
