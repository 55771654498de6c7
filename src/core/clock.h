/*
 * clock.h — the profiler clock (nanoseconds), inline for the hot path: a call to the exported
 * sw_now_ns (clock.c) may go through the PLT of a shared library.
 *
 * CLOCK_MONOTONIC by default. On x86-64, a profiler made with sw_options.clock = SW_CLOCK_TSC
 * (or SW_CLOCK=tsc in the environment) switches the process to the time-stamp counter when
 * the CPU says it is invariant (constant rate, never stopped): one rdtsc and a multiply,
 * where clock_gettime adds the vDSO's call, its sequence lock and its own conversion. The
 * TSC clock is calibrated against CLOCK_MONOTONIC and starts from it (clock.c), so times read
 * before and after the switch are on one scale. The switch is for the whole process, once.
 */
#ifndef SW_CORE_CLOCK_H
#define SW_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* The TSC clock: ns = ns0 + ((tsc - tsc0) * mult) >> 32. on is set (release) after the rest. */
typedef struct sw__tsc_clock {
    int on;
    uint64_t tsc0, ns0, mult;
} sw__tsc_clock;
extern sw__tsc_clock sw__tsc;

static inline __attribute__((always_inline)) uint64_t sw__monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline __attribute__((always_inline)) uint64_t sw__clock_ns(void) {
#if defined(__x86_64__)
    if (__builtin_expect(__atomic_load_n(&sw__tsc.on, __ATOMIC_ACQUIRE), 0)) {
        uint64_t ticks = __rdtsc() - sw__tsc.tsc0;
        return sw__tsc.ns0 + (uint64_t)(((unsigned __int128)ticks * sw__tsc.mult) >> 32);
    }
#endif
    return sw__monotonic_ns();
}

/* The tick counter, for code that turns ticks into ns only when it reads its records back
 * (the function profiler: one rdtsc per call, no multiply): the TSC where invariant, else
 * CLOCK_MONOTONIC in ns. It does not depend on the clock above being switched. Hidden: the
 * hot path reads the flag straight, not through the GOT. */
typedef struct sw__tick_clock {
    int tsc;             /* ticks are the TSC's, else ns */
    uint64_t tick0, ns0; /* both clocks at sw__ticks_start, to measure ns per tick */
} sw__tick_clock;
extern __attribute__((visibility("hidden"))) sw__tick_clock sw__ticks_state;

static inline __attribute__((always_inline)) uint64_t sw__ticks(void) {
#if defined(__x86_64__)
    if (__builtin_expect(sw__ticks_state.tsc, 1))
        return __rdtsc();
#endif
    return sw__monotonic_ns();
}

/* Before the first sw__ticks read (once per process; any thread may call it). */
void sw__ticks_start(void);
/* ns per tick (1.0 for CLOCK_MONOTONIC): calibrated as the TSC clock is, from sw__ticks_start
 * to now, after sleeping what is left of 20 ms when less has passed. */
double sw__ticks_unit(void);

/* Switch the process to the TSC clock if invariant (the cpuid bit; a test passes 0 to see
 * the fallback). Returns 1 when the TSC clock is in use after the call, else 0 (the clock
 * stays CLOCK_MONOTONIC). Calibration sleeps about 20 ms, once. */
int sw__clock_use_tsc(int invariant);

/* Whether this CPU's time-stamp counter is invariant (cpuid 0x80000007, EDX bit 8). */
int sw__tsc_invariant(void);

#endif /* SW_CORE_CLOCK_H */
