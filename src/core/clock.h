/*
 * clock.h — the profiler clock (CLOCK_MONOTONIC, nanoseconds), inline for the hot path: a
 * call to the exported sw_now_ns (clock.c) may go through the PLT of a shared library.
 */
#ifndef SW_CORE_CLOCK_H
#define SW_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline __attribute__((always_inline)) uint64_t sw__clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* SW_CORE_CLOCK_H */
