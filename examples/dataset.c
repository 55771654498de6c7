/*
 * dataset.c — generated and MNIST data sets, and the batch loader.
 */
#include "dataset.h"

#include "idx.h"
#include "mlp.h"
#include "stepwatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIDE 28

static int ds_uniform(uint64_t *s, int n) {
    return (int)(mlp_rand(s) % (uint64_t)n);
}

/* A class shape: three thick strokes between random points of the central 20x20 area. */
static void ds_draw_shape(uint8_t *img, uint64_t *s) {
    memset(img, 0, SIDE * SIDE);
    for (int stroke = 0; stroke < 3; stroke++) {
        int x0 = 4 + ds_uniform(s, 20), y0 = 4 + ds_uniform(s, 20);
        int x1 = 4 + ds_uniform(s, 20), y1 = 4 + ds_uniform(s, 20);
        for (int t = 0; t <= 32; t++) {
            int x = x0 + (x1 - x0) * t / 32, y = y0 + (y1 - y0) * t / 32;
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++)
                    if (x + dx < SIDE && y + dy < SIDE)
                        img[(y + dy) * SIDE + x + dx] = 255;
        }
    }
}

int dataset_generate(dataset *d, int n, int classes, uint64_t shape_seed, uint64_t sample_seed) {
    memset(d, 0, sizeof *d);
    if (n <= 0 || classes < 2 || classes > 256)
        return SW_EINVAL;
    uint8_t *shapes = malloc((size_t)classes * SIDE * SIDE);
    d->x = malloc((size_t)n * SIDE * SIDE);
    d->y = malloc((size_t)n);
    if (!shapes || !d->x || !d->y) {
        free(shapes);
        dataset_free(d);
        return SW_ENOMEM;
    }
    d->n = n;
    d->dim = SIDE * SIDE;
    d->classes = classes;
    uint64_t s = shape_seed | 1;
    for (int c = 0; c < classes; c++)
        ds_draw_shape(shapes + (size_t)c * SIDE * SIDE, &s);
    s = sample_seed | 1;
    for (int i = 0; i < n; i++) {
        int c = ds_uniform(&s, classes);
        int sx = ds_uniform(&s, 7) - 3, sy = ds_uniform(&s, 7) - 3; /* shift by up to 3 px */
        int level = 128 + ds_uniform(&s, 128);
        const uint8_t *shape = shapes + (size_t)c * SIDE * SIDE;
        uint8_t *img = d->x + (size_t)i * SIDE * SIDE;
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++) {
                int ox = x - sx, oy = y - sy;
                int v = ox >= 0 && ox < SIDE && oy >= 0 && oy < SIDE ? shape[oy * SIDE + ox] : 0;
                v = v * level / 255;
                if (ds_uniform(&s, 100) < 25) /* 25 % salt-and-pepper noise */
                    v = ds_uniform(&s, 256);
                img[y * SIDE + x] = (uint8_t)v;
            }
        d->y[i] = (uint8_t)c;
    }
    free(shapes);
    return 0;
}

int dataset_load_mnist(dataset *d, const char *images, const char *labels, char *err,
                       size_t errsize) {
    memset(d, 0, sizeof *d);
    idx_array im, lb;
    int rc = idx_read(images, &im, err, errsize);
    if (rc < 0)
        return rc;
    rc = idx_read(labels, &lb, err, errsize);
    if (rc < 0) {
        idx_free(&im);
        return rc;
    }
    if (im.type != 0x08 || im.ndims != 3 || lb.type != 0x08 || lb.ndims != 1) {
        snprintf(err, errsize,
                 "%s / %s: expected unsigned-byte images (n x rows x cols) and labels (n)", images,
                 labels);
        rc = SW_ECORRUPT;
    } else if (im.dims[0] != lb.dims[0]) {
        snprintf(err, errsize, "%s has %u images but %s has %u labels", images,
                 (unsigned)im.dims[0], labels, (unsigned)lb.dims[0]);
        rc = SW_ECORRUPT;
    } else if (im.dims[0] == 0 || im.dims[0] > INT32_MAX) {
        snprintf(err, errsize, "%s: %u images", images, (unsigned)im.dims[0]);
        rc = SW_ECORRUPT;
    }
    for (size_t i = 0; rc == 0 && i < lb.count; i++)
        if (((uint8_t *)lb.data)[i] > 9) {
            snprintf(err, errsize, "%s: label %u at index %zu is not a digit", labels,
                     ((uint8_t *)lb.data)[i], i);
            rc = SW_ECORRUPT;
        }
    if (rc < 0) {
        idx_free(&im);
        idx_free(&lb);
        return rc;
    }
    /* Take over the arrays: unsigned bytes are already the layout the loader wants. */
    d->n = (int)im.dims[0];
    d->dim = (int)(im.dims[1] * im.dims[2]);
    d->classes = 10;
    d->x = im.data;
    d->y = lb.data;
    return 0;
}

void dataset_free(dataset *d) {
    if (!d)
        return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

int loader_init(loader *l, const dataset *ds, int batch_size, int shuffle, uint64_t delay_ns,
                uint64_t seed) {
    memset(l, 0, sizeof *l);
    if (!ds || ds->n <= 0 || batch_size <= 0)
        return SW_EINVAL;
    l->ds = ds;
    l->batch_size = batch_size;
    l->shuffle = shuffle;
    l->delay_ns = delay_ns;
    l->rng = seed | 1;
    l->order = malloc((size_t)ds->n * sizeof(int));
    l->x = malloc((size_t)batch_size * (size_t)ds->dim * sizeof(float));
    l->y = malloc((size_t)batch_size);
    if (!l->order || !l->x || !l->y) {
        loader_free(l);
        return SW_ENOMEM;
    }
    for (int i = 0; i < ds->n; i++)
        l->order[i] = i;
    return 0;
}

void loader_free(loader *l) {
    if (!l)
        return;
    free(l->order);
    free(l->x);
    free(l->y);
    memset(l, 0, sizeof *l);
}

int64_t loader_length(const loader *l) {
    return (l->ds->n + l->batch_size - 1) / l->batch_size;
}

int loader_reset(void *ctx) {
    loader *l = ctx;
    l->pos = 0;
    if (l->shuffle) /* Fisher-Yates */
        for (int i = l->ds->n - 1; i > 0; i--) {
            int j = ds_uniform(&l->rng, i + 1);
            int t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    return 0;
}

/* Sleep ns, resuming after signals; returns the time really slept. */
static uint64_t ds_sleep(uint64_t ns) {
    uint64_t start = sw_now_ns();
    struct timespec req = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)}, rem;
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
    return sw_now_ns() - start;
}

int loader_next(void *ctx, void **out, uint32_t *batch_size) {
    loader *l = ctx;
    if (l->pos >= l->ds->n)
        return 0;
    if (l->delay_ns)
        l->slept_ns += ds_sleep(l->delay_ns);
    int n = l->ds->n - l->pos < l->batch_size ? l->ds->n - l->pos : l->batch_size;
    int dim = l->ds->dim;
    for (int r = 0; r < n; r++) {
        int i = l->order[l->pos + r];
        const uint8_t *px = l->ds->x + (size_t)i * dim;
        for (int k = 0; k < dim; k++)
            l->x[(size_t)r * dim + k] = px[k] / 255.0f;
        l->y[r] = l->ds->y[i];
    }
    l->pos += n;
    l->batches++;
    l->cur.x = l->x;
    l->cur.y = l->y;
    l->cur.n = n;
    *out = &l->cur;
    *batch_size = (uint32_t)n;
    return 1;
}
