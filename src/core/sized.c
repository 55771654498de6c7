/*
 * sized.c — the structs that carry their size (stepwatch.h, "Structs that grow"): a caller's
 * struct, of whatever stepwatch.h it was compiled against, read into this library's struct
 * or filled from it.
 */
#include "core.h"

#include <string.h>

/* The size a caller's struct gives, checked against the first release's. */
static int given_size(const void *theirs, size_t first, const char *type, size_t *size) {
    memcpy(size, theirs, sizeof *size); /* every sized struct begins with its size_t size */
    if (*size < first)
        return sw__error(SW_EINVAL,
                         "%s.size is %zu, under the %zu bytes of the first release's %s: set "
                         "it with its initializer (sizeof(%s))",
                         type, *size, first, type, type);
    return 0;
}

int sw__sized_in(void *mine, size_t my_size, const void *theirs, size_t first, const char *type) {
    memset(mine, 0, my_size);
    if (theirs != NULL) {
        size_t size;
        int rc = given_size(theirs, first, type, &size);
        if (rc != 0)
            return rc;
        const unsigned char *bytes = theirs;
        for (size_t i = my_size; i < size; i++)
            if (bytes[i] != 0)
                return sw__error(SW_EUNSUPPORTED,
                                 "%s: byte %zu of its %zu is set, and this library's %s has "
                                 "%zu: an option of a newer stepwatch.h (%s here) that it "
                                 "does not know",
                                 type, i, size, type, my_size, SW_VERSION_STRING);
        memcpy(mine, theirs, size < my_size ? size : my_size);
    }
    memcpy(mine, &my_size, sizeof my_size);
    return 0;
}

int sw__sized_out(void *theirs, const void *mine, size_t my_size, size_t first, const char *type) {
    size_t size;
    int rc = given_size(theirs, first, type, &size);
    if (rc != 0)
        return rc;
    memcpy(theirs, mine, size < my_size ? size : my_size);
    if (size > my_size)
        memset((unsigned char *)theirs + my_size, 0, size - my_size);
    memcpy(theirs, &size, sizeof size); /* the caller's size stays its own */
    return 0;
}
