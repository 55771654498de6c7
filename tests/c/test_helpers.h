/* test_helpers.h — small things the C tests share. */
#ifndef SW_TEST_HELPERS_H
#define SW_TEST_HELPERS_H

#include "stepwatch.h"

/* Busy-wait ns nanoseconds on the profiler clock (sleeping would be too coarse). */
static inline void sw_test_spin(uint64_t ns) {
    uint64_t end = sw_now_ns() + ns;
    while (sw_now_ns() < end) {
    }
}

/* A fresh profiler or a failed test. */
#define SW_TEST_PROFILER(var, ...)                                                  \
    sw_profiler *var = NULL;                                                        \
    do {                                                                            \
        sw_options sw__test_opts = {__VA_ARGS__};                                   \
        assert_int_equal(sw_profiler_new(&sw__test_opts, &var), 0);                 \
        assert_non_null(var);                                                       \
    } while (0)

#endif
