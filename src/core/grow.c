/*
 * grow.c — the one way an array of the library grows (core.h): its capacity doubles until the
 * elements needed fit, so n appends cost O(n) copies in all.
 */
#include "core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int sw__grow(void *array, size_t size, size_t *cap, size_t need, size_t first) {
    if (need <= *cap)
        return 0;
    size_t grown_cap = *cap ? *cap : first ? first : 1;
    while (grown_cap < need) {
        if (grown_cap > SIZE_MAX / 2)
            return SW_ENOMEM;
        grown_cap *= 2;
    }
    if (grown_cap > SIZE_MAX / size)
        return SW_ENOMEM;
    void *old; /* *array is a T *: read and written as bytes, whatever T is */
    memcpy(&old, array, sizeof old);
    char *grown = realloc(old, grown_cap * size);
    if (grown == NULL)
        return SW_ENOMEM;
    memset(grown + *cap * size, 0, (grown_cap - *cap) * size);
    memcpy(array, &grown, sizeof grown);
    *cap = grown_cap;
    return 0;
}
