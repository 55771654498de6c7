/*
 * _ignite.h — what the files of stepwatch.ignite's C types share (private to them; the rest
 * of the extension knows only their specs and sw_py_ignite_functions from _stepwatch.h).
 *
 *   _ignite.c             Marks and HandlerTimer: the per-iteration marks and the handler
 *                         timing; Ignite's print_results texts (module functions)
 *   _ignite_fire_event.c  FireEvent: Ignite's Engine._fire_event in C, calling the marks of
 *                         a whole iteration event below
 *   _ignite_timer.c       Timer: Ignite's Timer over the core's sw_timer
 */
#ifndef SW_PY_IGNITE_H
#define SW_PY_IGNITE_H

#include "_stepwatch.h"

/* Ignite's per-iteration events, in the order FireEvent takes them; Marks' slot i times the
 * handlers of event i. */
enum {
    SW_PY_GET_BATCH_STARTED,
    SW_PY_GET_BATCH_COMPLETED,
    SW_PY_ITERATION_STARTED,
    SW_PY_ITERATION_COMPLETED,
    SW_PY_ITERATION_EVENTS
};

/* The number of slots of marks, a Marks. */
int sw_py_marks_slots(PyObject *marks);

/* The marks before and after the handlers of iteration event `event` (SW_PY_*) on marks, a
 * Marks; `timed`: the handlers are timed as slot `event` (< sw_py_marks_slots). engine: the
 * Ignite engine whose state is read. Never raise. */
void sw_py_marks_before(PyObject *marks, int event, int timed, PyObject *engine);
void sw_py_marks_after(PyObject *marks, int event, int timed, PyObject *engine);

#endif
