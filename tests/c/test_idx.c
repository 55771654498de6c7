/*
 * test_idx.c — the IDX reader on small files written here: good files of each kind, and a
 * clear error for each way a file can be bad (missing, not IDX, gzip, unknown type,
 * truncated header/data, trailing bytes, images and labels that disagree).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dataset.h"
#include "idx.h"
#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void **state) {
    strcpy(dir, "/tmp/sw_idx_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void write_bytes(const char *name, const void *bytes, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static void test_u8_images_round_trip(void **state) {
    uint8_t px[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        px[i] = (uint8_t)(i * 10);
    uint32_t dims[3] = {2, 3, 4};
    assert_int_equal(idx_write_u8(path_of("img"), dims, 3, px), 0);
    idx_array a;
    char err[256] = "";
    assert_int_equal(idx_read(path_of("img"), &a, err, sizeof err), 0);
    assert_int_equal(a.type, 0x08);
    assert_int_equal(a.ndims, 3);
    assert_int_equal(a.dims[0], 2);
    assert_int_equal(a.dims[1], 3);
    assert_int_equal(a.dims[2], 4);
    assert_int_equal(a.count, 24);
    assert_memory_equal(a.data, px, 24);
    assert_true(idx_get(&a, 23) == 230.0);
    idx_free(&a);
}

static void test_int32_and_float_are_big_endian(void **state) {
    /* int32 vector of 2: 0x01020304 and -2 */
    const uint8_t i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xFF, 0xFF, 0xFF, 0xFE};
    write_bytes("i32", i32, sizeof i32);
    idx_array a;
    assert_int_equal(idx_read(path_of("i32"), &a, NULL, 0), 0);
    assert_true(idx_get(&a, 0) == (double)0x01020304);
    assert_true(idx_get(&a, 1) == -2.0);
    idx_free(&a);
    /* float32 1.5 = 0x3FC00000 */
    const uint8_t f32[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0};
    write_bytes("f32", f32, sizeof f32);
    assert_int_equal(idx_read(path_of("f32"), &a, NULL, 0), 0);
    assert_true(idx_get(&a, 0) == 1.5);
    idx_free(&a);
}

/* A bad file gives code rc and a message containing needle. */
static void expect_bad(const char *name, int rc, const char *needle) {
    idx_array a;
    char err[512] = "";
    assert_int_equal(idx_read(path_of(name), &a, err, sizeof err), rc);
    if (!strstr(err, needle))
        fail_msg("message \"%s\" lacks \"%s\"", err, needle);
    assert_null(a.data);
}

static void test_bad_files(void **state) {
    expect_bad("missing", SW_ENOTFOUND, "cannot open");
    write_bytes("empty", "", 0);
    expect_bad("empty", SW_ECORRUPT, "truncated header");
    const uint8_t gz[] = {0x1f, 0x8b, 8, 0, 0, 0};
    write_bytes("gz", gz, sizeof gz);
    expect_bad("gz", SW_ECORRUPT, "gunzip");
    const uint8_t type[] = {0, 0, 0x07, 1, 0, 0, 0, 1, 5};
    write_bytes("type", type, sizeof type);
    expect_bad("type", SW_ECORRUPT, "unknown IDX element type 0x07");
    const uint8_t nodims[] = {0, 0, 0x08, 0};
    write_bytes("nodims", nodims, sizeof nodims);
    expect_bad("nodims", SW_ECORRUPT, "dimensions");
    const uint8_t shortdim[] = {0, 0, 0x08, 2, 0, 0, 0, 3, 0, 0};
    write_bytes("shortdim", shortdim, sizeof shortdim);
    expect_bad("shortdim", SW_ECORRUPT, "truncated header (dimension 1)");
    const uint8_t shortdata[] = {0, 0, 0x08, 1, 0, 0, 0, 5, 1, 2, 3};
    write_bytes("shortdata", shortdata, sizeof shortdata);
    expect_bad("shortdata", SW_ECORRUPT, "promises 5 bytes of data, the file has 3");
    const uint8_t trailing[] = {0, 0, 0x08, 1, 0, 0, 0, 2, 1, 2, 3};
    write_bytes("trailing", trailing, sizeof trailing);
    expect_bad("trailing", SW_ECORRUPT, "trailing bytes");
    /* Found by fuzz_idx: a 20-byte file whose header promises 28 GB of float64 was read by
     * allocating what it promised first. It is truncated, and nothing is allocated. */
    const uint8_t promise[] = {0, 0, 0x0E, 1, 0xD7, 0xD7, 0xD7, 0, 0, 0, 0x10, 0, 0, 0, 0x3F};
    write_bytes("promise", promise, sizeof promise);
    expect_bad("promise", SW_ECORRUPT, "promises 28969973760 bytes of data, the file has 7");
}

static void test_mnist_pair(void **state) {
    uint8_t px[3 * 28 * 28];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i % 251);
    const uint8_t labels[3] = {7, 2, 1};
    uint32_t idims[3] = {3, 28, 28}, ldims[1] = {3};
    assert_int_equal(idx_write_u8(path_of("images"), idims, 3, px), 0);
    assert_int_equal(idx_write_u8(path_of("labels"), ldims, 1, labels), 0);
    dataset d;
    char err[512] = "";
    char images[256];
    snprintf(images, sizeof images, "%s", path_of("images"));
    assert_int_equal(dataset_load_mnist(&d, images, path_of("labels"), err, sizeof err), 0);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.dim, 784);
    assert_int_equal(d.y[0], 7);
    assert_int_equal(d.x[785], px[785]);
    dataset_free(&d);

    /* Labels that do not match the images in number, or are not digits. */
    uint32_t two[1] = {2};
    assert_int_equal(idx_write_u8(path_of("labels2"), two, 1, labels), 0);
    assert_int_equal(dataset_load_mnist(&d, images, path_of("labels2"), err, sizeof err),
                     SW_ECORRUPT);
    assert_non_null(strstr(err, "has 3 images but"));
    const uint8_t bad_labels[3] = {1, 12, 3};
    assert_int_equal(idx_write_u8(path_of("labels3"), ldims, 1, bad_labels), 0);
    assert_int_equal(dataset_load_mnist(&d, images, path_of("labels3"), err, sizeof err),
                     SW_ECORRUPT);
    assert_non_null(strstr(err, "label 12 at index 1"));
    /* Images given where labels belong. */
    assert_int_equal(dataset_load_mnist(&d, images, images, err, sizeof err), SW_ECORRUPT);
    assert_non_null(strstr(err, "expected unsigned-byte images"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u8_images_round_trip),
        cmocka_unit_test(test_int32_and_float_are_big_endian),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_mnist_pair),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
