/* clock.c — sw_now_ns, the profiler clock for callers outside the library (clock.h). */
#include "clock.h"

#include "stepwatch.h"

uint64_t sw_now_ns(void) {
    return sw__clock_ns();
}
