/* make_seeds.c — writes the seed corpora under tests/fuzz/corpus/ (committed; rerun after a
 * schema change: build/fuzz/tests/fuzz/make_seeds tests/fuzz/corpus). Each seed is a small
 * valid input of its target, so the fuzzer starts from inside the format. */
#include "fuzz_util.h"
#include "runfile/run_store.h"

#include <sys/stat.h>

static char g_root[200];

static void put(const char *target, const char *name, const void *data, size_t size) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", g_root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void put_file(const char *target, const char *name, const char *from) {
    FILE *f = fopen(from, "rb");
    static unsigned char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    put(target, name, buf, n);
}

/* A small run: two steps of a loop with a counter and the timeline; left complete, or in WAL
 * mode as a killed run leaves it (the profiler never freed: its file stays in WAL mode). */
static void run_seed(const char *path, int complete) {
    sw_options o = {.size = sizeof(sw_options),
                    .run_file = path,
                    .timeline = 1,
                    .name = "seed",
                    .no_signal_handlers = 1};
    sw_profiler *p = NULL;
    if (sw_profiler_new(&o, &p) != 0)
        exit(1);
    sw_id fwd = sw_action(p, "forward"), data = sw_action(p, "data");
    sw_id c = sw_counter_id(p, "loss");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 2; i++) {
        sw_step_begin(p, 4);
        sw_begin(p, data);
        sw_end(p, data);
        sw_begin(p, fwd);
        sw_end(p, fwd);
        sw_counter(p, c, i);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    if (complete)
        sw_profiler_free(p);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    snprintf(g_root, sizeof g_root, "%s", argv[1]);
    mkdir(g_root, 0755);
    const char *path = fuzz_path("seed.db");
    fuzz_remove(path);
    run_seed(path, 1);
    put_file("fuzz_run_file", "complete.db", path);
    fuzz_remove(path);

    /* Rows: a few rows per table of every kind of value (fuzz_rows.h reads a kind, then it). */
    unsigned char rows[512];
    for (size_t i = 0; i < sizeof rows; i++)
        rows[i] = (unsigned char)(i * 37 + 11);
    put("fuzz_run_rows", "pattern", rows, sizeof rows);
    put("fuzz_merge", "pattern", rows, sizeof rows);
    unsigned char small[] = {3, 1, 0, 0, 0, 0, 0, 0, 0, 5, 4, 4, 'd', 'a', 't', 'a', 2, 7};
    put("fuzz_run_rows", "small", small, sizeof small);
    put("fuzz_merge", "small", small, sizeof small);

    /* Decode: real span and histogram blobs. */
    sw_span_record spans[3] = {
        {.action = 1, .phase = 3, .depth = 1, .step = 0, .start_ns = 100, .duration_ns = 50},
        {.action = 2, .phase = 3, .depth = 1, .step = 0, .start_ns = 160, .duration_ns = 30},
        {.action = 0, .phase = 3, .depth = 0, .step = -1, .start_ns = 90, .duration_ns = 120}};
    unsigned char *blob = NULL;
    size_t size = 0;
    if (sw__spans_encode(spans, 3, &blob, &size) == 0)
        put("fuzz_decode", "spans", blob, size);
    free(blob);
    sw_hist h = {0};
    sw_hist_add(&h, 5);
    sw_hist_add(&h, 1000);
    sw_hist_add(&h, 1000000);
    if (sw__hist_encode(&h, &blob, &size) == 0)
        put("fuzz_decode", "hist", blob, size);
    free(blob);
    /* two ranks' payloads, as a transport gathers them */
    sw_profiler *p = NULL;
    if (sw_profiler_new(&(sw_options){.size = sizeof(sw_options), .no_signal_handlers = 1}, &p) !=
        0)
        exit(1);
    sw_id data = sw_action(p, "data"), coll = sw_action(p, "collective:allreduce");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 3; i++) {
        sw_step_begin(p, 4);
        sw_begin(p, data);
        sw_end(p, data);
        sw_begin(p, coll);
        sw_end(p, coll);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    static unsigned char payloads[2 * SW_RANK_PAYLOAD_SIZE];
    if (sw_rank_payload(p, 0, 2, payloads, SW_RANK_PAYLOAD_SIZE) != 0 ||
        sw_rank_payload(p, 1, 2, payloads + SW_RANK_PAYLOAD_SIZE, SW_RANK_PAYLOAD_SIZE) != 0)
        exit(1);
    sw_profiler_free(p);
    put("fuzz_decode", "payloads", payloads, sizeof payloads);

    /* IDX: one file of each element type. */
    const unsigned char types[] = {0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E};
    const unsigned sizes[] = {1, 1, 2, 4, 4, 8};
    for (int t = 0; t < 6; t++) {
        unsigned char idx[4 + 8 + 4 * 8];
        size_t n = 0;
        idx[n++] = 0, idx[n++] = 0, idx[n++] = types[t], idx[n++] = 2;
        const unsigned char dims[8] = {0, 0, 0, 2, 0, 0, 0, 2};
        memcpy(idx + n, dims, 8);
        n += 8;
        for (unsigned k = 0; k < 4 * sizes[t]; k++)
            idx[n++] = (unsigned char)(k * 29 + 1);
        char name[16];
        snprintf(name, sizeof name, "type-%02x", types[t]);
        put("fuzz_idx", name, idx, n);
    }

    /* Command lines: arguments separated by NULs. */
    static const char args1[] = "-f\0json\0-r\0003\0-o\0out.json\0run.db";
    static const char args2[] = "--format=md\0--rank=0\0--output\0-\0run.db\0extra";
    static const char args3[] = "-fcsv\0-r-1\0--help";
    put("fuzz_cli_args", "short", args1, sizeof args1 - 1);
    put("fuzz_cli_args", "long", args2, sizeof args2 - 1);
    put("fuzz_cli_args", "bad", args3, sizeof args3 - 1);
    return 0;
}
