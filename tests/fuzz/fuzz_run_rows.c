/* fuzz_run_rows.c — a run file with a whole schema and fuzzed rows (fuzz_rows.h): the reader,
 * the merged snapshot, the exports, diagnose and HTML meet every value the file can hold. */
#include "fuzz_rows.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path("rows.db");
    fuzz_bytes b = {data, size, 0};
    sw_run *run = NULL;
    if (fuzz_make_run(path, 0, &b) == 0 && sw_run_open(path, &run) == 0)
        fuzz_exercise(run);
    sw_run_close(run);
    fuzz_remove(path);
    return 0;
}
