/*
 * clock.c — sw_now_ns, the profiler clock for callers outside the library, and the switch to
 * the time-stamp counter (clock.h).
 *
 * Calibration, as the kernel and Tracy do it: read CLOCK_MONOTONIC between two TSC reads,
 * twice, at least 20 ms apart; the rate is the ratio of the two spans. Of a few tries at each
 * end the read with the shortest TSC bracket is kept (a preemption inside a bracket would
 * skew it). 20 ms against brackets of tens of ns gives the rate to a few ppm; the clock
 * starts at the second CLOCK_MONOTONIC read, so it continues that clock. The tick counter
 * (sw__ticks, the function profiler's) is calibrated the same way, from its start to when it
 * is read back.
 */
#include "clock.h"

#include <pthread.h>

#include "stepwatch.h"

sw__tsc_clock sw__tsc;
sw__tick_clock sw__ticks_state;
static pthread_once_t ticks_once = PTHREAD_ONCE_INIT;
static void ticks_init(void); /* per machine, below */

void sw__ticks_start(void) {
    pthread_once(&ticks_once, ticks_init);
}

uint64_t sw_now_ns(void) {
    return sw__clock_ns();
}

sw_clock_kind sw_clock_in_use(void) {
    return __atomic_load_n(&sw__tsc.on, __ATOMIC_ACQUIRE) ? SW_CLOCK_TSC : SW_CLOCK_MONOTONIC;
}

#if defined(__x86_64__)
#include <cpuid.h>

int sw__tsc_invariant(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1u;
}

/* One CLOCK_MONOTONIC read and the TSC at it: the middle of the tightest of 5 brackets
 * (*bracket: its width in ticks). */
static void paired_read(uint64_t *ns, uint64_t *tsc, uint64_t *bracket) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t before = __rdtsc();
        uint64_t t = sw__monotonic_ns();
        uint64_t after = __rdtsc();
        if (after - before < best) {
            best = after - before;
            *ns = t;
            *tsc = before + (after - before) / 2;
        }
    }
    *bracket = best;
}

#define CALIBRATION_NS (20 * 1000 * 1000)

/* The second paired read of a calibration whose first was at ns0: at least 20 ms later (a
 * span of brackets of tens of ns gives the rate to a few ppm). */
static void second_read(uint64_t ns0, uint64_t *ns, uint64_t *tsc, uint64_t *bracket) {
    uint64_t since = sw__monotonic_ns() - ns0;
    if (since < CALIBRATION_NS) {
        struct timespec pause = {0, (long)(CALIBRATION_NS - since)};
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
    paired_read(ns, tsc, bracket);
}

static void ticks_init(void) {
    uint64_t bracket;
    sw__ticks_state.tsc = sw__tsc_invariant();
    if (sw__ticks_state.tsc)
        paired_read(&sw__ticks_state.ns0, &sw__ticks_state.tick0, &bracket);
}

double sw__ticks_unit(void) {
    sw__ticks_start();
    if (!sw__ticks_state.tsc)
        return 1.0;
    uint64_t ns, tick, bracket;
    second_read(sw__ticks_state.ns0, &ns, &tick, &bracket);
    if (tick <= sw__ticks_state.tick0 || ns <= sw__ticks_state.ns0)
        return 1.0;
    return (double)(ns - sw__ticks_state.ns0) / (double)(tick - sw__ticks_state.tick0);
}

static pthread_mutex_t switch_lock = PTHREAD_MUTEX_INITIALIZER;

int sw__clock_use_tsc(int invariant) {
    if (!invariant)
        return sw_clock_in_use() == SW_CLOCK_TSC;
    pthread_mutex_lock(&switch_lock);
    if (!sw__tsc.on) {
        uint64_t ns0, tsc0, ns1, tsc1, bracket;
        paired_read(&ns0, &tsc0, &bracket);
        second_read(ns0, &ns1, &tsc1, &bracket);
        if (tsc1 > tsc0 && ns1 > ns0) {
            /* ns per tick in 32.32 fixed point */
            sw__tsc.mult = (uint64_t)(((unsigned __int128)(ns1 - ns0) << 32) / (tsc1 - tsc0));
            sw__tsc.tsc0 = tsc1;
            /* Half a bracket ahead: no TSC time is below a CLOCK_MONOTONIC time read before
             * it (a span begun on one clock and ended on the other never ends before it
             * begins). */
            sw__tsc.ns0 = ns1 + (uint64_t)(((unsigned __int128)bracket * sw__tsc.mult) >> 32) + 1;
            __atomic_store_n(&sw__tsc.on, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&switch_lock);
    return sw_clock_in_use() == SW_CLOCK_TSC;
}
#else
int sw__tsc_invariant(void) {
    return 0;
}

int sw__clock_use_tsc(int invariant) {
    (void)invariant;
    return 0;
}

static void ticks_init(void) {
}

double sw__ticks_unit(void) {
    return 1.0;
}
#endif
