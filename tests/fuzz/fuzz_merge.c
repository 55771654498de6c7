/* fuzz_merge.c — two fuzzed run files (fuzz_rows.h, ranks 0 and 1) merged: sw_run_merge
 * refuses them with a code or writes a file that reads back. */
#include "fuzz_rows.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char a[256], b_path[256];
    snprintf(a, sizeof a, "%s", fuzz_path("merge-a.db"));
    snprintf(b_path, sizeof b_path, "%s", fuzz_path("merge-b.db"));
    const char *merged = fuzz_path("merged.db");
    fuzz_bytes b = {data, size, 0};
    if (fuzz_make_run(a, 0, &b) == 0 && fuzz_make_run(b_path, 1, &b) == 0) {
        const char *inputs[2] = {a, b_path};
        fuzz_remove(merged);
        if (sw_run_merge(inputs, 2, merged) == 0) {
            sw_run *run = NULL;
            if (sw_run_open(merged, &run) == 0)
                fuzz_exercise(run);
            sw_run_close(run);
        }
    }
    fuzz_remove(a);
    fuzz_remove(b_path);
    fuzz_remove(merged);
    return 0;
}
