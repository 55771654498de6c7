/*
 * _stepwatch.h — what the extension's C files share: the module state and the layouts of
 * the objects more than one file reads (a Profiler, its Actions and Phases).
 *
 *   _stepwatch.c  the module and its general types (Profiler, Action, Timed, Phase, ...)
 *   _loop.c       the per-step hot path of stepwatch.torch (Loop and its Hooks)
 *   _marks.c      the per-iteration marks of stepwatch.ignite (Marks)
 */
#ifndef SW_PY_STEPWATCH_H
#define SW_PY_STEPWATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stepwatch.h"

typedef struct {
    PyTypeObject *profiler_type;
    PyTypeObject *action_type;
    PyTypeObject *prebound_type;
    PyTypeObject *timed_type;
    PyTypeObject *phase_type;
    PyTypeObject *step_type;
    PyTypeObject *snapshot_type;
    PyTypeObject *timer_type;
    PyTypeObject *loop_type;
    PyTypeObject *hook_type;
    PyTypeObject *marks_type;
    PyObject *error;          /* stepwatch.Error */
    PyObject *update_wrapper; /* functools.update_wrapper, for the decorator form */
    PyObject *shape_name;     /* the interned string "shape", for batch_size() */
} module_state;

/* The state of the module that defined tp (or one of its bases). NULL with an exception set
 * when there is none. */
module_state *state_of_type(PyTypeObject *tp);

typedef struct {
    PyObject_HEAD
    sw_profiler *p;      /* NULL once closed */
    PyObject *actions;   /* name -> Action */
    PyObject *phases;    /* name -> Phase */
    PyObject *counters;  /* name -> int counter id */
    PyObject *name;      /* the run name, for repr */
} ProfilerObject;

/* Action, Phase and Step: small objects of one profiler, sharing one layout (and so one
 * traverse and dealloc). */
typedef struct {
    PyObject_HEAD
    ProfilerObject *owner; /* strong reference; owner->p is read on every call */
    union {
        uint32_t id;         /* Action: its sw_id; Phase: its sw_phase */
        uint32_t batch_size; /* Step */
    };
    PyObject *name;        /* NULL for a Step */
    PyObject *enter;       /* Action, Phase: their __enter__ and __exit__, bound once (see */
    PyObject *exit;        /* Prebound in _stepwatch.c); NULL for a Step */
} NamedObject;
typedef NamedObject ActionObject;
typedef NamedObject PhaseObject;
typedef NamedObject StepObject;

/* tp_descr_get of callables that bind like functions (a method gets its instance). */
PyObject *bind_as_method(PyObject *self, PyObject *obj, PyObject *type);

/* Samples in a batch (first dimension of its first array-like); 0 when unknown, never an
 * exception. shape_name: the interned string "shape". */
uint32_t sw_py_batch_size(PyObject *batch, PyObject *shape_name);

/* The id of obj, an Action or Phase (type) of profiler, into *id; else -1 and a TypeError
 * that starts with who. */
int sw_py_named_id(PyObject *obj, PyTypeObject *type, ProfilerObject *profiler, const char *who,
                   const char *what, uint32_t *id);

/* The Loop type (_loop.c) and the Marks type (_marks.c). */
extern PyType_Spec sw_py_loop_spec;
extern PyType_Spec sw_py_hook_spec;
extern PyType_Spec sw_py_marks_spec;

#endif
