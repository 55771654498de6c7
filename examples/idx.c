/*
 * idx.c — IDX reading with a clear error for every way a file can be wrong.
 */
#include "idx.h"

#include "stepwatch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int idx_fail(int rc, char *err, size_t errsize, const char *fmt, ...) {
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static size_t idx_type_size(uint8_t type) {
    switch (type) {
    case 0x08:
    case 0x09:
        return 1;
    case 0x0B:
        return 2;
    case 0x0C:
    case 0x0D:
        return 4;
    case 0x0E:
        return 8;
    default:
        return 0;
    }
}

static int idx_host_is_little(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

int idx_read(const char *path, idx_array *out, char *err, size_t errsize) {
    if (!path || !out)
        return idx_fail(SW_EINVAL, err, errsize, "idx_read: NULL argument");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return idx_fail(errno == ENOENT ? SW_ENOTFOUND : SW_EIO, err, errsize,
                        "%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    uint8_t head[4];
    if (fread(head, 1, 4, f) != 4) {
        rc = idx_fail(SW_ECORRUPT, err, errsize, "%s: truncated header (under 4 bytes)", path);
        goto done;
    }
    if (head[0] != 0 || head[1] != 0) {
        rc = idx_fail(SW_ECORRUPT, err, errsize,
                      "%s: not an IDX file (magic starts 0x%02x 0x%02x, expected 0x00 0x00;"
                      " a gzip file starts 0x1f 0x8b: gunzip it first)",
                      path, head[0], head[1]);
        goto done;
    }
    out->type = head[2];
    out->elem_size = idx_type_size(head[2]);
    if (out->elem_size == 0) {
        rc = idx_fail(SW_ECORRUPT, err, errsize, "%s: unknown IDX element type 0x%02x", path,
                      head[2]);
        goto done;
    }
    out->ndims = head[3];
    if (out->ndims < 1 || out->ndims > IDX_MAX_DIMS) {
        rc = idx_fail(SW_ECORRUPT, err, errsize, "%s: %d dimensions (1 to %d supported)", path,
                      out->ndims, IDX_MAX_DIMS);
        goto done;
    }
    size_t count = 1;
    for (int d = 0; d < out->ndims; d++) {
        uint8_t b[4];
        if (fread(b, 1, 4, f) != 4) {
            rc = idx_fail(SW_ECORRUPT, err, errsize, "%s: truncated header (dimension %d)", path,
                          d);
            goto done;
        }
        out->dims[d] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (out->dims[d] != 0 && count > SIZE_MAX / 8 / out->dims[d]) {
            rc = idx_fail(SW_ECORRUPT, err, errsize, "%s: dimensions too large", path);
            goto done;
        }
        count *= out->dims[d];
    }
    out->count = count;
    size_t bytes = count * out->elem_size;
    /* What the file holds, before allocating what its header promises: a 20-byte file can
     * promise gigabytes (found by fuzz_idx). */
    struct stat st;
    long header = ftell(f);
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && header >= 0 &&
        (uint64_t)st.st_size - (uint64_t)header < bytes) {
        rc = idx_fail(SW_ECORRUPT, err, errsize,
                      "%s: truncated: the header promises %zu bytes of data, the file has %zu",
                      path, bytes, (size_t)(st.st_size - header));
        goto done;
    }
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        rc = idx_fail(SW_ENOMEM, err, errsize, "%s: out of memory for %zu bytes", path, bytes);
        goto done;
    }
    size_t got = fread(out->data, 1, bytes, f);
    if (ferror(f)) {
        rc = idx_fail(SW_EIO, err, errsize, "%s: read error", path);
        goto done;
    }
    if (got != bytes) {
        rc = idx_fail(SW_ECORRUPT, err, errsize,
                      "%s: truncated: the header promises %zu bytes of data, the file has %zu",
                      path, bytes, got);
        goto done;
    }
    if (fgetc(f) != EOF) {
        rc = idx_fail(SW_ECORRUPT, err, errsize,
                      "%s: trailing bytes after the %zu bytes of data the header promises", path,
                      bytes);
        goto done;
    }
    /* Elements are big-endian: swap each one on a little-endian host. */
    if (out->elem_size > 1 && idx_host_is_little()) {
        uint8_t *p = out->data;
        for (size_t i = 0; i < count; i++, p += out->elem_size)
            for (size_t a = 0, b = out->elem_size - 1; a < b; a++, b--) {
                uint8_t t = p[a];
                p[a] = p[b];
                p[b] = t;
            }
    }
done:
    fclose(f);
    if (rc < 0)
        idx_free(out);
    return rc;
}

void idx_free(idx_array *a) {
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

double idx_get(const idx_array *a, size_t i) {
    const uint8_t *p = (const uint8_t *)a->data + i * a->elem_size;
    int16_t s16;
    int32_t s32;
    float f32;
    double f64;
    switch (a->type) {
    case 0x08:
        return *p;
    case 0x09:
        return (int8_t)*p;
    case 0x0B:
        memcpy(&s16, p, 2);
        return s16;
    case 0x0C:
        memcpy(&s32, p, 4);
        return s32;
    case 0x0D:
        memcpy(&f32, p, 4);
        return f32;
    default:
        memcpy(&f64, p, 8);
        return f64;
    }
}

int idx_write_u8(const char *path, const uint32_t *dims, int ndims, const uint8_t *data) {
    if (!path || !dims || ndims < 1 || ndims > IDX_MAX_DIMS || !data)
        return SW_EINVAL;
    sw_output *out = NULL; /* all or nothing: a failed write leaves no half dataset */
    int rc = sw_output_open(path, &out);
    if (rc != 0)
        return rc;
    FILE *f = sw_output_stream(out);
    uint8_t head[4] = {0, 0, 0x08, (uint8_t)ndims};
    int ok = fwrite(head, 1, 4, f) == 4;
    size_t count = 1;
    for (int d = 0; d < ndims && ok; d++) {
        uint8_t b[4] = {(uint8_t)(dims[d] >> 24), (uint8_t)(dims[d] >> 16), (uint8_t)(dims[d] >> 8),
                        (uint8_t)dims[d]};
        ok = fwrite(b, 1, 4, f) == 4;
        count *= dims[d];
    }
    if (ok)
        ok = fwrite(data, 1, count, f) == count;
    if (!ok) {
        sw_output_abort(out);
        return SW_EIO;
    }
    return sw_output_commit(out);
}
