/*
 * status_line.h — the live status line, a sink (core/sink.h) that draws the run's figures at
 * the bottom of the terminal while it runs. status_line.c says how it stays out of the way of
 * the program's own output.
 */
#ifndef SW_LIVE_STATUS_LINE_H
#define SW_LIVE_STATUS_LINE_H

#include "core/core.h"

/* Attach a status line to p when its options (live), the environment (STEPWATCH_LIVE) and
 * stderr call for one: rank 0 only, one line per process. Never fails the profiler: a line
 * that cannot start is left out. */
void sw__status_line_open(sw_profiler *p);

#endif
