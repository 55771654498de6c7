/* fuzz_decode.c — the run file's packed encodings (run_store.c): span chunks and histograms;
 * and the ranks' payloads (src/ranks), which arrive from other processes. Any blob decodes or
 * gives SW_ECORRUPT; what decodes encodes back to the same spans; any bytes reduce to a
 * cross-rank view (damaged payloads are ranks that did not answer). */
#include "fuzz_util.h"
#include "runfile/run_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sw_span_record spans[SW__SPAN_CHUNK_MAX], again[SW__SPAN_CHUNK_MAX];
    size_t n = 0;
    if (sw__spans_decode(data, size, 7, spans, SW__SPAN_CHUNK_MAX, &n) == 0 && n > 0) {
        unsigned char *blob = NULL;
        size_t blob_size = 0, m = 0;
        if (sw__spans_encode(spans, n, &blob, &blob_size) == 0) {
            if (sw__spans_decode(blob, blob_size, 7, again, SW__SPAN_CHUNK_MAX, &m) != 0 ||
                m != n || memcmp(spans, again, n * sizeof *spans) != 0)
                abort(); /* a round trip that changes the spans */
            free(blob);
        }
    }
    sw_hist h;
    if (sw__hist_decode(data, size, &h) == 0) {
        sw_hist_quantile(&h, 0.5);
        sw_hist_quantile(&h, 0.99);
    }
    int world = (int)(size / SW_RANK_PAYLOAD_SIZE);
    sw_ranks *ranks = NULL;
    if (world > 0 && sw_ranks_reduce(data, world, &ranks) == 0) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            sw_ranks_write(ranks, SW_FORMAT_TABLE, 0, null);
            sw_ranks_write(ranks, SW_FORMAT_JSON, 0, null);
            fclose(null);
        }
    }
    sw_ranks_free(ranks);
    return 0;
}
