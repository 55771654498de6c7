/*
 * idx.h — a reader (and a small writer) for the IDX format of the MNIST files.
 *
 * An IDX file: two zero bytes, a type byte (0x08 unsigned byte, 0x09 signed byte, 0x0B
 * int16, 0x0C int32, 0x0D float32, 0x0E float64), a byte with the number of dimensions,
 * then each dimension as a big-endian uint32, then the elements, big-endian, row-major.
 */
#ifndef SW_EXAMPLE_IDX_H
#define SW_EXAMPLE_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 8

typedef struct idx_array {
    uint8_t type; /* the IDX type byte */
    int ndims;
    uint32_t dims[IDX_MAX_DIMS];
    size_t count; /* elements */
    size_t elem_size;
    void *data; /* count elements in host byte order */
} idx_array;

/* Read path into *out. 0, or a negative SW_E* code with a sentence in err (if not NULL):
 * SW_ENOTFOUND (cannot open), SW_EIO (read error), SW_ECORRUPT (bad magic, unknown type,
 * bad dimensions, truncated data or trailing bytes), SW_ENOMEM. */
int idx_read(const char *path, idx_array *out, char *err, size_t errsize);
void idx_free(idx_array *a);
/* Element i as a double. */
double idx_get(const idx_array *a, size_t i);
/* Write unsigned-byte data (the MNIST type). 0 or SW_EINVAL / SW_EIO. */
int idx_write_u8(const char *path, const uint32_t *dims, int ndims, const uint8_t *data);

#endif
