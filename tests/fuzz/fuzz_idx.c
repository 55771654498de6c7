/* fuzz_idx.c — the example's IDX reader (examples/idx.c) on any bytes: a clear SW_E* code
 * with a sentence, or an array whose every element reads. */
#include "fuzz_util.h"
#include "idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path("data.idx");
    if (fuzz_write_file(path, data, size) != 0)
        return 0;
    idx_array a;
    char err[256];
    if (idx_read(path, &a, err, sizeof err) == 0) {
        double sum = 0;
        for (size_t i = 0; i < a.count; i++)
            sum += idx_get(&a, i);
        (void)sum;
        idx_free(&a);
    } else if (err[0] == '\0') {
        abort(); /* every refusal says why */
    }
    unlink(path);
    return 0;
}
