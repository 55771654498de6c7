/* fuzz_run_file.c — any bytes as a run file: sw_run_open must refuse them with a code, or
 * open them and read everything without a crash (seeds: real run files, corpus/run_file). */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path("file.db");
    if (fuzz_write_file(path, data, size) != 0)
        return 0;
    sw_run *run = NULL;
    if (sw_run_open(path, &run) == 0)
        fuzz_exercise(run);
    sw_run_close(run);
    fuzz_remove(path);
    return 0;
}
