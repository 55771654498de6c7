/*
 * engine_history.c — the last cap durations of one column of the handlers CSV
 * (engine_handlers_csv.c): a ring that grows as values come, up to cap, so memory is bounded
 * and nothing is allocated when cap is 0. The engine adds to it as handlers and iterations
 * finish.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

void sw__history_init(sw__history *h, uint32_t cap) {
    memset(h, 0, sizeof *h);
    h->cap = cap;
}

void sw__history_add(sw__history *h, uint64_t ns) {
    if (h->cap == 0)
        return;
    uint32_t slot = (uint32_t)(h->count % h->cap);
    /* Still filling up: the room doubles, up to cap. Out of memory drops the value. */
    if (sw__grow_at_most(&h->values, sizeof *h->values, &h->allocated, (size_t)slot + 1, 64,
                         h->cap) != 0)
        return;
    h->values[slot] = ns;
    h->count++;
}

void sw__history_free(sw__history *h) {
    free(h->values);
    memset(h, 0, sizeof *h);
}

uint64_t sw__history_len(const sw__history *h) {
    return h->count < h->cap ? h->count : h->cap;
}

uint64_t sw__history_at(const sw__history *h, uint64_t k) {
    uint64_t first = h->count < h->cap ? 0 : h->count % h->cap;
    return h->values[(first + k) % h->cap];
}
