/*
 * grow.c — the one way an array of the library grows (core.h): its capacity doubles until the
 * elements needed fit, so n appends cost O(n) copies in all; an array with a bound stops
 * doubling at it. (Hash tables double too, but are rebuilt, every key placed anew: they grow
 * with sw__slots_grow, funcs.h.)
 */
#include "core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int sw__grow_at_most(void *array, size_t size, size_t *cap, size_t need, size_t first,
                     size_t most) {
    if (need <= *cap)
        return 0;
    if (need > most)
        return SW_ENOMEM;
    size_t grown_cap = *cap ? *cap : first ? first : 1;
    while (grown_cap < need) {
        if (grown_cap > SIZE_MAX / 2)
            return SW_ENOMEM;
        grown_cap *= 2;
    }
    if (grown_cap > most)
        grown_cap = most;
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

int sw__grow(void *array, size_t size, size_t *cap, size_t need, size_t first) {
    return sw__grow_at_most(array, size, cap, need, first, SIZE_MAX);
}
