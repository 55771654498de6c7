/* fuzz_util.h — what the libFuzzer targets share: a scratch file per process for the readers
 * that take a path, a cursor over the fuzzer's bytes, and one walk through everything the
 * library does with a run file that opened. */
#ifndef SW_FUZZ_UTIL_H
#define SW_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stepwatch.h"

/* A path of this process's own on tmpfs (or /tmp): name is a short suffix. */
static inline const char *fuzz_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/sw_fuzz_%d_%s",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid(), name);
    return path;
}

/* Remove a run file with what SQLite may have left beside it. */
static inline void fuzz_remove(const char *path) {
    char side[300];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-journal", path);
    unlink(side);
}

static inline int fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    fuzz_remove(path);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(data, 1, size, f);
    return fclose(f) == 0 && n == size ? 0 : -1;
}

/* The fuzzer's bytes, taken a piece at a time; past the end everything is zero. */
typedef struct fuzz_bytes {
    const uint8_t *data;
    size_t size, pos;
} fuzz_bytes;

static inline uint8_t fuzz_u8(fuzz_bytes *b) {
    return b->pos < b->size ? b->data[b->pos++] : 0;
}

static inline uint64_t fuzz_u64(fuzz_bytes *b, int nbytes) {
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++)
        v = v << 8 | fuzz_u8(b);
    return v;
}

/* A piece of up to max bytes (its length from the stream); *len set. Not NUL-terminated. */
static inline const uint8_t *fuzz_piece(fuzz_bytes *b, size_t max, size_t *len) {
    size_t n = fuzz_u8(b) % (max + 1);
    if (n > b->size - b->pos)
        n = b->size - b->pos;
    const uint8_t *p = b->data + b->pos;
    b->pos += n;
    *len = n;
    return p;
}

static int fuzz_step(void *ctx, int rank, const sw_step_record *s) {
    (void)ctx;
    (void)rank;
    (void)s;
    return 0;
}
static int fuzz_span(void *ctx, int rank, const sw_span_record *s) {
    (void)ctx;
    (void)rank;
    (void)s;
    return 0;
}
static int fuzz_counter(void *ctx, int rank, const sw_counter_record *s) {
    (void)ctx;
    (void)rank;
    (void)s;
    return 0;
}

/* Everything the library does with an open run file, outputs into memory. Errors are fine;
 * crashes, leaks and undefined behaviour are what the sanitizers look for. */
static inline void fuzz_exercise(sw_run *run) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        return;
    char what[512];
    sw_run_incomplete(run, what, sizeof what);
    sw_snapshot *all = NULL;
    if (sw_run_snapshot(run, &all) == 0) {
        for (sw_format f = SW_FORMAT_TABLE; f <= SW_FORMAT_JSON; f++)
            sw_snapshot_write(all, f, out);
        sw_compare_write(all, all, SW_FORMAT_TABLE, out);
        sw_compare_write(all, all, SW_FORMAT_JSON, out);
        size_t regressions = 0;
        sw_compare_regressions(all, all, &regressions);
    }
    sw_snapshot_free(all);
    sw_ranks *ranks = NULL;
    if (sw_run_ranks(run, &ranks) == 0) {
        sw_ranks_write(ranks, SW_FORMAT_TABLE, 0, out);
        sw_ranks_write(ranks, SW_FORMAT_JSON, 0, out);
    }
    sw_ranks_free(ranks);
    for (int i = 0; i < sw_run_rank_count(run); i++) {
        int rank = sw_run_rank_id(run, i);
        sw_snapshot *one = NULL;
        if (sw_run_rank_snapshot(run, rank, &one) == 0)
            sw_snapshot_write(one, SW_FORMAT_CSV, out);
        sw_snapshot_free(one);
        for (sw_id id = 0; id < 8; id++) {
            sw_run_action_name(run, rank, id);
            sw_run_phase_name(run, rank, id);
            sw_run_counter_name(run, rank, id);
        }
    }
    sw_run_foreach_step(run, -1, fuzz_step, NULL);
    sw_run_foreach_span(run, -1, fuzz_span, NULL);
    sw_run_foreach_counter(run, -1, fuzz_counter, NULL);
    sw_run_export_chrome(run, out);
    sw_run_export_steps_csv(run, out);
    sw_run_export_collapsed(run, out);
    sw_fprofile *functions = NULL;
    sw_run_functions(run, -1, &functions);
    sw_fprofile_free(functions);
    sw_diagnose_write(run, SW_FORMAT_TABLE, out);
    sw_diagnose_write(run, SW_FORMAT_JSON, out);
    size_t problems = 0;
    sw_diagnose_count(run, &problems);
    sw_html_write(run, out);
    fclose(out);
    free(text);
}

#endif
