/*
 * dataset.h — the example's data: MNIST from IDX files, or a generated look-alike (28x28
 * "glyphs" of 10 classes, shifted and noisy) that needs no download; and a batch loader
 * usable as an sw_data_source, which can simulate slow loading with a delay per batch.
 */
#ifndef SW_EXAMPLE_DATASET_H
#define SW_EXAMPLE_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct dataset {
    int n, dim, classes;
    uint8_t *x; /* n x dim pixels, 0..255 */
    uint8_t *y; /* n labels, 0..classes-1 */
} dataset;

/* n generated 28x28 samples of `classes` classes. The class shapes come from shape_seed (use
 * the same for a training and a validation set), the samples from sample_seed.
 * 0, SW_EINVAL or SW_ENOMEM. */
int dataset_generate(dataset *d, int n, int classes, uint64_t shape_seed, uint64_t sample_seed);
/* MNIST: images (n x rows x cols, unsigned byte) and labels (n, 0..9) IDX files.
 * 0 or a negative SW_E* code with a sentence in err. */
int dataset_load_mnist(dataset *d, const char *images, const char *labels, char *err,
                       size_t errsize);
void dataset_free(dataset *d);

/* One batch as the loader hands it to the engine. */
typedef struct batch {
    const float *x; /* n x dim, scaled to 0..1 */
    const uint8_t *y;
    int n;
} batch;

typedef struct loader {
    const dataset *ds;
    int batch_size;
    int shuffle;
    uint64_t delay_ns; /* simulated loading time per batch (nanosleep) */
    uint64_t rng;
    int *order;
    int pos;
    float *x;
    uint8_t *y;
    batch cur;
    uint64_t slept_ns; /* the truth: time actually spent in the simulated delay */
    uint64_t batches;  /* batches handed out */
} loader;

int loader_init(loader *l, const dataset *ds, int batch_size, int shuffle, uint64_t delay_ns,
                uint64_t seed);
void loader_free(loader *l);
/* Batches per pass (the last one may be short). */
int64_t loader_length(const loader *l);
/* sw_data_source callbacks: ctx is the loader. */
int loader_next(void *ctx, void **batch, uint32_t *batch_size);
int loader_reset(void *ctx);

#endif
