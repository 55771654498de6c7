/*
 * callgrind_marks.c — libsw_callgrind_marks.so, loaded by bench/bench_instructions.py through
 * ctypes: valgrind's callgrind client requests, which Python cannot issue itself (each is a
 * magic instruction sequence that valgrind recognizes; run natively, it does nothing).
 *
 * The benchmark runs under `valgrind --tool=callgrind --instr-atstart=no`: nothing is counted
 * until sw_cg_start(), so the interpreter's start, the imports and the warm-up steps cost no
 * instrumentation; sw_cg_stop(label) stops counting and writes what was counted since the
 * start as one dump, its description the label, which the benchmark reads back.
 */
#include <valgrind/callgrind.h>

/* Nonzero when running under valgrind. */
int sw_cg_running(void) {
    return (int)RUNNING_ON_VALGRIND;
}

/* Count from here on, from zero. */
void sw_cg_start(void) {
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
}

/* Stop counting; dump the counts since sw_cg_start() under label. */
void sw_cg_stop(const char *label) {
    CALLGRIND_STOP_INSTRUMENTATION;
    CALLGRIND_DUMP_STATS_AT(label);
}
