/*
 * _stepwatch.c — the CPython face of the C core (stepwatch._stepwatch).
 *
 * Laid out like CPython's Modules/_lsprof.c: multi-phase initialisation, per-module state
 * (no C globals), and heap types made with PyType_FromModuleAndSpec.
 *
 * Types
 *   Profiler  owns one sw_profiler; hands out Action, Phase and Step objects.
 *   Action    a pre-made action: `with a:` is one C call into sw_begin on entry and one into
 *             sw_end on exit, with no allocation (see Prebound). Calling it with a function
 *             gives a Timed wrapper (the decorator form).
 *   Timed     a function wrapped by an action (vectorcall: begin, call, end).
 *   Phase     a phase as a context manager (sw_phase_begin / sw_phase_end).
 *   Step      one step as a context manager, with its batch size.
 *   Snapshot  a sw_snapshot: report text, plain records (list of dicts), run metadata.
 *   Timer     Ignite's Timer over sw_timer.
 *   Loop      the per-step hot path of stepwatch.torch, with its LoopHooks (_loop.c).
 *   Marks     the per-iteration marks of stepwatch.ignite (_marks.c).
 *
 * The hot path (Action/Phase/Step enter and exit, Timed calls) never raises: a closed
 * profiler turns them into no-ops and misuse is counted by the core.
 */
#include "_stepwatch.h"

#include <structmember.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* The run-file reader is another part of the library. Weak references keep this module
 * importable in a build that lacks it; load() then raises SW_EUNSUPPORTED. */
#pragma weak sw_run_open
#pragma weak sw_run_close
#pragma weak sw_run_snapshot
#pragma weak sw_run_foreach_step
#pragma weak sw_run_phase_name

/* ------------------------------------------------------------------------------------------
 * Module state
 * ---------------------------------------------------------------------------------------- */


static struct PyModuleDef stepwatch_module;

static module_state *state_of_module(PyObject *module) {
    return (module_state *)PyModule_GetState(module);
}

/* The state of the module that defined tp (or one of its bases: Timer may be subclassed). */
module_state *state_of_type(PyTypeObject *tp) {
    PyObject *module = PyType_GetModuleByDef(tp, &stepwatch_module);
    return module ? state_of_module(module) : NULL;
}

/* Raise the Python exception for a negative SW_E* code. `what` names the failed call. */
static PyObject *raise_rc(module_state *st, int rc, const char *what) {
    if (rc == SW_ENOMEM)
        return PyErr_NoMemory();
    if (rc == SW_EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s: %s", what, sw_strerror(rc));
    PyObject *msg = PyUnicode_FromFormat("%s: %s", what, sw_strerror(rc));
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(st->error, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(sw_err_name(rc));
    if (code && name && PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "name", name) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
}

/* A batch size argument: a non-negative int that fits 32 bits. */
static int parse_batch_size(PyObject *obj, uint32_t *out) {
    unsigned long v = PyLong_AsUnsignedLong(obj);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "batch_size must be an int in [0, 2**32)");
        }
        return -1;
    }
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be an int in [0, 2**32)");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Object layouts
 * ---------------------------------------------------------------------------------------- */


typedef struct {
    PyObject_HEAD
    ActionObject *action;
    PyObject *func;
    PyObject *dict;     /* __name__, __doc__, __wrapped__ from functools.update_wrapper */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} TimedObject;

typedef struct {
    PyObject_HEAD
    sw_snapshot *s;
} SnapshotObject;

typedef struct {
    PyObject_HEAD
    sw_timer t;
} TimerObject;

/* ------------------------------------------------------------------------------------------
 * Prebound: `with` without an allocation
 *
 * `with a:` looks __enter__ and __exit__ up on a's type on every statement, and for methods
 * written in C each lookup allocates a bound method object: about half of what an empty
 * `with` costs (85 ns of 145 here). So an Action (or Phase) binds its two methods once, when
 * it is made (NamedObject.enter/.exit), and its type's __enter__ and __exit__ are Prebound
 * descriptors that hand those out. A `with` then allocates nothing and makes one C call on
 * entry and one on exit. (Member descriptors would do the same, a few ns slower.)
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyTypeObject *owner; /* Action or Phase */
    int exits;           /* __exit__, else __enter__ */
} PreboundObject;

static PyObject *Prebound_get(PyObject *self, PyObject *obj, PyObject *type) {
    PreboundObject *slot = (PreboundObject *)self;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    if (!PyObject_TypeCheck(obj, slot->owner))
        return PyErr_Format(PyExc_TypeError, "%s.%s needs a %s, not %s", slot->owner->tp_name,
                            slot->exits ? "__exit__" : "__enter__", slot->owner->tp_name,
                            Py_TYPE(obj)->tp_name);
    PyObject *bound = slot->exits ? ((NamedObject *)obj)->exit : ((NamedObject *)obj)->enter;
    if (bound == NULL) /* only while the collector clears a dead cycle */
        return PyErr_Format(PyExc_AttributeError, "%R has no %s", obj,
                            slot->exits ? "__exit__" : "__enter__");
    return Py_NewRef(bound);
}

static int Prebound_traverse(PreboundObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static int Prebound_clear(PreboundObject *self) {
    Py_CLEAR(self->owner);
    return 0;
}

static void Prebound_dealloc(PreboundObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Prebound_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot Prebound_slots[] = {
    {Py_tp_doc, "__enter__/__exit__ of Action and Phase: the method bound when it was made."},
    {Py_tp_descr_get, Prebound_get},
    {Py_tp_traverse, Prebound_traverse},
    {Py_tp_clear, Prebound_clear},
    {Py_tp_dealloc, Prebound_dealloc},
    {0, NULL},
};

static PyType_Spec Prebound_spec = {
    .name = "stepwatch.Prebound",
    .basicsize = sizeof(PreboundObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Prebound_slots,
};

/* Make owner's __enter__ and __exit__ Prebound descriptors (once, at module init). */
static int add_prebound(PyTypeObject *prebound_type, PyTypeObject *owner) {
    for (int exits = 0; exits <= 1; exits++) {
        PreboundObject *slot = PyObject_GC_New(PreboundObject, prebound_type);
        if (!slot)
            return -1;
        slot->owner = (PyTypeObject *)Py_NewRef(owner);
        slot->exits = exits;
        PyObject_GC_Track(slot);
        int rc = PyDict_SetItemString(owner->tp_dict, exits ? "__exit__" : "__enter__",
                                      (PyObject *)slot);
        Py_DECREF(slot);
        if (rc < 0)
            return -1;
    }
    PyType_Modified(owner);
    return 0;
}

/* Bind o's __enter__ and __exit__ (methods[0] and [1]) for its Prebound descriptors. */
static int bind_with_methods(NamedObject *o, PyMethodDef methods[2]) {
    o->enter = PyCFunction_NewEx(&methods[0], (PyObject *)o, NULL);
    o->exit = PyCFunction_NewEx(&methods[1], (PyObject *)o, NULL);
    return o->enter && o->exit ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------
 * Action
 * ---------------------------------------------------------------------------------------- */

static PyObject *Action_enter(ActionObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_begin(p, self->id);
    return Py_NewRef(self);
}

static PyObject *Action_exit(ActionObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_end(p, self->id);
    Py_RETURN_FALSE; /* never swallow the user's exception */
}

static PyMethodDef Action_with_methods[2] = {
    {"__enter__", (PyCFunction)Action_enter, METH_NOARGS, "Begin the span; returns the action."},
    {"__exit__", (PyCFunction)(void (*)(void))Action_exit, METH_FASTCALL,
     "End the span; never suppresses an exception."},
};

static PyObject *Timed_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames);

static PyObject *Action_call(ActionObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *func;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Action(func) takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Action", 1, 1, &func))
        return NULL;
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "an Action decorates a callable");
        return NULL;
    }
    module_state *st = state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    TimedObject *t = PyObject_GC_New(TimedObject, st->timed_type);
    if (!t)
        return NULL;
    t->action = (ActionObject *)Py_NewRef(self);
    t->func = Py_NewRef(func);
    t->dict = NULL;
    t->weakrefs = NULL;
    t->vectorcall = Timed_vectorcall;
    PyObject_GC_Track(t);
    PyObject *r = PyObject_CallFunctionObjArgs(st->update_wrapper, (PyObject *)t, func, NULL);
    if (!r) {
        Py_DECREF(t);
        return NULL;
    }
    Py_DECREF(r);
    return (PyObject *)t;
}

static PyObject *Action_repr(ActionObject *self) {
    return PyUnicode_FromFormat("<stepwatch.Action %R id=%u>", self->name, (unsigned)self->id);
}

static int Named_traverse(NamedObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->enter);
    Py_VISIT(self->exit);
    return 0;
}

static int Named_clear(NamedObject *self) {
    /* owner stays: the hot path reads it unconditionally; the profiler side breaks that
     * cycle. The bound __enter__/__exit__ refer back to self and have no clear of their own. */
    Py_CLEAR(self->enter);
    Py_CLEAR(self->exit);
    return 0;
}

static void Named_dealloc(NamedObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->name);
    Py_CLEAR(self->enter);
    Py_CLEAR(self->exit);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Action_begin(ActionObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_begin(p, self->id);
    Py_RETURN_NONE;
}

static PyObject *Action_end(ActionObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_end(p, self->id);
    Py_RETURN_NONE;
}

/* record(start_ns, end_ns): a span measured elsewhere, on the now_ns() clock. */
static PyObject *Action_record(ActionObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record(start_ns, end_ns) takes two ints");
        return NULL;
    }
    unsigned long long start = PyLong_AsUnsignedLongLong(args[0]);
    if (start == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long end = PyLong_AsUnsignedLongLong(args[1]);
    if (end == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    sw_profiler *p = self->owner->p;
    if (p)
        sw_record(p, self->id, start, end);
    Py_RETURN_NONE;
}

static PyMethodDef Action_methods[] = {
    {"begin", (PyCFunction)Action_begin, METH_NOARGS, "Begin a span of this action."},
    {"end", (PyCFunction)Action_end, METH_NOARGS, "End the innermost span of this action."},
    {"record", (PyCFunction)(void (*)(void))Action_record, METH_FASTCALL,
     "record(start_ns, end_ns): add a span timed elsewhere (stepwatch.now_ns clock)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Action_members[] = {
    {"name", T_OBJECT, offsetof(ActionObject, name), READONLY, "The action's name."},
    {"id", T_UINT, offsetof(ActionObject, id), READONLY, "The interned id."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Action_slots[] = {
    {Py_tp_doc, "An interned action of a Profiler: a context manager and a decorator.\n\n"
                "    fwd = prof.action('forward')\n    with fwd: ...\n"
                "    @prof.action('loss')\n    def compute_loss(...): ..."},
    {Py_tp_methods, Action_methods},
    {Py_tp_members, Action_members},
    {Py_tp_call, Action_call},
    {Py_tp_repr, Action_repr},
    {Py_tp_traverse, Named_traverse},
    {Py_tp_clear, Named_clear},
    {Py_tp_dealloc, Named_dealloc},
    {0, NULL},
};

static PyType_Spec Action_spec = {
    .name = "stepwatch.Action",
    .basicsize = sizeof(ActionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Action_slots,
};

/* ------------------------------------------------------------------------------------------
 * Timed: a function wrapped by an action
 * ---------------------------------------------------------------------------------------- */

static PyObject *Timed_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    TimedObject *self = (TimedObject *)callable;
    if (!self->action || !self->func) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: timed function was cleared");
        return NULL;
    }
    ProfilerObject *owner = self->action->owner;
    sw_id id = self->action->id;
    sw_profiler *p = owner->p;
    if (p)
        sw_begin(p, id);
    PyObject *r = PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    p = owner->p; /* the call may have closed the profiler */
    if (p)
        sw_end(p, id);
    return r;
}

/* Bind like a function, so decorated methods get self (Timed, LoopHook). */
PyObject *bind_as_method(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Samples in a batch: the first dimension of its first array-like, looking through a few
 * levels of tuples, lists and dicts; 0 when it cannot be told (never an exception). shape is
 * the interned string "shape" (the caller keeps it, to spare a lookup per batch). */
uint32_t sw_py_batch_size(PyObject *batch, PyObject *shape_name) {
    for (int level = 0; level < 4; level++) {
        if (PyTuple_Check(batch) || PyList_Check(batch)) {
            if (PySequence_Fast_GET_SIZE(batch) == 0)
                return 0;
            batch = PySequence_Fast_GET_ITEM(batch, 0);
            continue;
        }
        if (PyDict_Check(batch)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            if (!PyDict_Next(batch, &pos, &key, &value))
                return 0;
            batch = value;
            continue;
        }
        PyObject *shape = NULL;
#if PY_VERSION_HEX >= 0x030D0000
        int found = PyObject_GetOptionalAttr(batch, shape_name, &shape);
#else
        int found = _PyObject_LookupAttr(batch, shape_name, &shape);
#endif
        unsigned long size = 0;
        if (found > 0 && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0)
            size = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(shape, 0));
        Py_XDECREF(shape);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return size > UINT32_MAX ? 0 : (uint32_t)size;
    }
    return 0;
}

/* The id of obj, which must be an Action or Phase (type) of profiler; else a TypeError
 * "<who>: <what> must be ...". */
int sw_py_named_id(PyObject *obj, PyTypeObject *type, ProfilerObject *profiler, const char *who,
                   const char *what, uint32_t *id) {
    if (!PyObject_TypeCheck(obj, type) || ((NamedObject *)obj)->owner != profiler) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a %s of the same Profiler", who, what,
                     type->tp_name);
        return -1;
    }
    *id = ((NamedObject *)obj)->id;
    return 0;
}

static int Timed_traverse(TimedObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->action);
    Py_VISIT(self->func);
    Py_VISIT(self->dict);
    return 0;
}

static int Timed_clear(TimedObject *self) {
    Py_CLEAR(self->action);
    Py_CLEAR(self->func);
    Py_CLEAR(self->dict);
    return 0;
}

static void Timed_dealloc(TimedObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    Timed_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Timed_repr(TimedObject *self) {
    return PyUnicode_FromFormat("<stepwatch timed %R of %R>", self->func,
                                self->action ? self->action->name : Py_None);
}

static PyMemberDef Timed_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(TimedObject, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TimedObject, weakrefs), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(TimedObject, vectorcall), READONLY, NULL},
    {"action", T_OBJECT, offsetof(TimedObject, action), READONLY, "The action timing calls."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Timed_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Timed_slots[] = {
    {Py_tp_doc, "A function whose every call is one span of an action."},
    {Py_tp_members, Timed_members},
    {Py_tp_getset, Timed_getset},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, bind_as_method},
    {Py_tp_repr, Timed_repr},
    {Py_tp_traverse, Timed_traverse},
    {Py_tp_clear, Timed_clear},
    {Py_tp_dealloc, Timed_dealloc},
    {0, NULL},
};

static PyType_Spec Timed_spec = {
    .name = "stepwatch.Timed",
    .basicsize = sizeof(TimedObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Timed_slots,
};

/* ------------------------------------------------------------------------------------------
 * Phase and Step: context managers over the training structure
 * ---------------------------------------------------------------------------------------- */

static PyObject *Phase_enter(PhaseObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_phase_begin(p, self->id);
    return Py_NewRef(self);
}

static PyObject *Phase_exit(PhaseObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_phase_end(p, self->id);
    Py_RETURN_FALSE;
}

static PyMethodDef Phase_with_methods[2] = {
    {"__enter__", (PyCFunction)Phase_enter, METH_NOARGS, "Enter the phase."},
    {"__exit__", (PyCFunction)(void (*)(void))Phase_exit, METH_FASTCALL, "Leave the phase."},
};

static PyObject *Phase_repr(PhaseObject *self) {
    return PyUnicode_FromFormat("<stepwatch.Phase %R id=%u>", self->name, (unsigned)self->id);
}

static PyMethodDef Phase_methods[] = {
    {"begin", (PyCFunction)Phase_enter, METH_NOARGS, "Enter the phase."},
    {"end", (PyCFunction)(void (*)(void))Phase_exit, METH_FASTCALL, "Leave the phase."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Phase_members[] = {
    {"name", T_OBJECT, offsetof(PhaseObject, name), READONLY, "The phase's name."},
    {"id", T_UINT, offsetof(PhaseObject, id), READONLY, "The phase id."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Phase_slots[] = {
    {Py_tp_doc, "A phase (fit, epoch, train, valid or your own) as a context manager."},
    {Py_tp_methods, Phase_methods},
    {Py_tp_members, Phase_members},
    {Py_tp_repr, Phase_repr},
    {Py_tp_traverse, Named_traverse},
    {Py_tp_clear, Named_clear},
    {Py_tp_dealloc, Named_dealloc},
    {0, NULL},
};

static PyType_Spec Phase_spec = {
    .name = "stepwatch.Phase",
    .basicsize = sizeof(PhaseObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Phase_slots,
};

static PyObject *Step_enter(StepObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_step_begin(p, self->batch_size);
    return Py_NewRef(self);
}

static PyObject *Step_exit(StepObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_profiler *p = self->owner->p;
    if (p)
        sw_step_end(p);
    Py_RETURN_FALSE;
}

/* set_batch_size(n): the batch size of the step now open, once the data arrived. */
static PyObject *Step_set_batch_size(StepObject *self, PyObject *arg) {
    uint32_t bs;
    if (parse_batch_size(arg, &bs) < 0)
        return NULL;
    self->batch_size = bs;
    sw_profiler *p = self->owner->p;
    if (p)
        sw_step_set_batch_size(p, bs);
    Py_RETURN_NONE;
}

static PyMethodDef Step_methods[] = {
    {"__enter__", (PyCFunction)Step_enter, METH_NOARGS, "Begin the step."},
    {"__exit__", (PyCFunction)(void (*)(void))Step_exit, METH_FASTCALL, "End the step."},
    {"set_batch_size", (PyCFunction)Step_set_batch_size, METH_O,
     "Set the open step's batch size (samples/s)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Step_members[] = {
    {"batch_size", T_UINT, offsetof(StepObject, batch_size), READONLY, "Batch size (0 = unknown)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Step_slots[] = {
    {Py_tp_doc, "One step (a batch: data wait + compute) as a context manager."},
    {Py_tp_methods, Step_methods},
    {Py_tp_members, Step_members},
    {Py_tp_traverse, Named_traverse},
    {Py_tp_clear, Named_clear},
    {Py_tp_dealloc, Named_dealloc},
    {0, NULL},
};

static PyType_Spec Step_spec = {
    .name = "stepwatch.Step",
    .basicsize = sizeof(StepObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Step_slots,
};

/* ------------------------------------------------------------------------------------------
 * Snapshot: reports and records
 * ---------------------------------------------------------------------------------------- */

static PyObject *snapshot_wrap(module_state *st, sw_snapshot *s) {
    SnapshotObject *obj = PyObject_New(SnapshotObject, st->snapshot_type);
    if (!obj) {
        sw_snapshot_free(s);
        return NULL;
    }
    obj->s = s;
    return (PyObject *)obj;
}

static void Snapshot_dealloc(SnapshotObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    sw_snapshot_free(self->s);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Parse a format name ("table", "json", ...) into *out; raises on an unknown name. */
static int parse_format(module_state *st, const char *name, sw_format *out) {
    int rc = sw_format_parse(name, out);
    if (rc < 0) {
        PyErr_Format(PyExc_ValueError,
                     "unknown report format '%s' (table, lightning, fastxtend, ignite, "
                     "markdown, csv, json)",
                     name);
        return -1;
    }
    return 0;
}

/* The report text of s in fmt, written by the C report writers into a memory FILE. */
static PyObject *snapshot_report_text(module_state *st, const sw_snapshot *s, const char *fmt_name) {
    sw_format fmt;
    if (parse_format(st, fmt_name, &fmt) < 0)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return PyErr_SetFromErrno(PyExc_OSError);
    int rc = sw_snapshot_write(s, fmt, f);
    if (fclose(f) != 0 && rc == 0)
        rc = SW_EIO;
    PyObject *text = rc == 0 ? PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace")
                             : raise_rc(st, rc, "report");
    free(buf);
    return text;
}

/* Set d[key] = value (stolen); returns -1 on error. */
static int dict_put(PyObject *d, const char *key, PyObject *value) {
    if (!value)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *str_or_none(const char *s) {
    return s ? PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace") : Py_NewRef(Py_None);
}

/* One row as a plain dict: every key is a column when loaded into pandas.DataFrame. */
static PyObject *row_record(const sw_snapshot *s, const sw_row *r) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const sw_stats *st = &r->stats;
    double pct = s->wall_ns ? 100.0 * (double)st->total_ns / (double)s->wall_ns : 0.0;
    int ok =
        dict_put(d, "action", str_or_none(r->action_name)) == 0 &&
        dict_put(d, "phase", str_or_none(r->phase_name)) == 0 &&
        dict_put(d, "category", str_or_none(sw_category_name(r->category))) == 0 &&
        dict_put(d, "count", PyLong_FromUnsignedLongLong(st->count)) == 0 &&
        dict_put(d, "total_ns", PyLong_FromUnsignedLongLong(st->total_ns)) == 0 &&
        dict_put(d, "self_ns", PyLong_FromUnsignedLongLong(st->self_ns)) == 0 &&
        dict_put(d, "mean_ns", PyFloat_FromDouble(st->count ? st->mean_ns : 0.0)) == 0 &&
        dict_put(d, "std_ns", PyFloat_FromDouble(sw_stats_stddev(st))) == 0 &&
        dict_put(d, "min_ns", PyLong_FromUnsignedLongLong(st->count ? st->min_ns : 0)) == 0 &&
        dict_put(d, "min_step", PyLong_FromLongLong(st->min_step)) == 0 &&
        dict_put(d, "max_ns", PyLong_FromUnsignedLongLong(st->max_ns)) == 0 &&
        dict_put(d, "max_step", PyLong_FromLongLong(st->max_step)) == 0 &&
        dict_put(d, "p50_ns", PyLong_FromUnsignedLongLong(sw_hist_quantile(&r->hist, 0.50))) == 0 &&
        dict_put(d, "p90_ns", PyLong_FromUnsignedLongLong(sw_hist_quantile(&r->hist, 0.90))) == 0 &&
        dict_put(d, "p99_ns", PyLong_FromUnsignedLongLong(sw_hist_quantile(&r->hist, 0.99))) == 0 &&
        dict_put(d, "samples", PyLong_FromUnsignedLongLong(st->samples)) == 0 &&
        dict_put(d, "samples_per_s", PyFloat_FromDouble(sw_stats_samples_per_s(st))) == 0 &&
        dict_put(d, "percent", PyFloat_FromDouble(pct)) == 0 &&
        dict_put(d, "warmup_count", PyLong_FromUnsignedLongLong(r->warmup.count)) == 0 &&
        dict_put(d, "warmup_total_ns", PyLong_FromUnsignedLongLong(r->warmup.total_ns)) == 0;
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *snapshot_records(const sw_snapshot *s, const char *phase) {
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (phase && (!r->phase_name || strcmp(phase, r->phase_name) != 0))
            continue;
        PyObject *d = row_record(s, r);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *misuse_dict(const sw_misuse *m) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
#define SW__PUT_MISUSE(field)                                                            \
    if (dict_put(d, #field, PyLong_FromUnsignedLongLong(m->field)) < 0) {                \
        Py_DECREF(d);                                                                    \
        return NULL;                                                                     \
    }
    SW__PUT_MISUSE(end_without_begin)
    SW__PUT_MISUSE(mismatched_end)
    SW__PUT_MISUSE(depth_overflow)
    SW__PUT_MISUSE(bad_id)
    SW__PUT_MISUSE(phase_mismatch)
    SW__PUT_MISUSE(step_overlap)
    SW__PUT_MISUSE(bad_record)
    SW__PUT_MISUSE(open_at_snapshot)
#undef SW__PUT_MISUSE
    return d;
}

static PyObject *counters_list(const sw_snapshot *s) {
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        PyObject *d = Py_BuildValue("{s:N,s:K,s:d,s:d,s:d,s:d}", "name", str_or_none(c->name),
                                    "count", (unsigned long long)c->count, "last", c->last,
                                    "min", c->min, "max", c->max, "mean", c->mean);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *snapshot_info(const sw_snapshot *s) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    int ok = dict_put(d, "name", str_or_none(s->name)) == 0 &&
             dict_put(d, "host", str_or_none(s->host)) == 0 &&
             dict_put(d, "command", str_or_none(s->command)) == 0 &&
             dict_put(d, "pid", PyLong_FromLongLong(s->pid)) == 0 &&
             dict_put(d, "rank", PyLong_FromLong(s->rank)) == 0 &&
             dict_put(d, "world_size", PyLong_FromLong(s->world_size)) == 0 &&
             dict_put(d, "start_unix_ns", PyLong_FromUnsignedLongLong(s->start_unix_ns)) == 0 &&
             dict_put(d, "elapsed_ns", PyLong_FromUnsignedLongLong(s->elapsed_ns)) == 0 &&
             dict_put(d, "wall_ns", PyLong_FromUnsignedLongLong(s->wall_ns)) == 0 &&
             dict_put(d, "steps", PyLong_FromUnsignedLongLong(s->steps)) == 0 &&
             dict_put(d, "warmup_steps", PyLong_FromUnsignedLong(s->warmup_steps)) == 0 &&
             dict_put(d, "threads", PyLong_FromUnsignedLongLong(s->threads)) == 0 &&
             dict_put(d, "dropped_events", PyLong_FromUnsignedLongLong(s->dropped_events)) == 0 &&
             dict_put(d, "misuse", misuse_dict(&s->misuse)) == 0 &&
             dict_put(d, "counters", counters_list(s)) == 0;
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *Snapshot_report(SnapshotObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"format", NULL};
    const char *fmt = "table";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|s:report", kwlist, &fmt))
        return NULL;
    module_state *st = state_of_type(Py_TYPE(self));
    return st ? snapshot_report_text(st, self->s, fmt) : NULL;
}

static PyObject *Snapshot_records(SnapshotObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"phase", NULL};
    const char *phase = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:records", kwlist, &phase))
        return NULL;
    return snapshot_records(self->s, phase);
}

static PyObject *Snapshot_info(SnapshotObject *self, PyObject *unused) {
    return snapshot_info(self->s);
}

static PyMethodDef Snapshot_methods[] = {
    {"report", (PyCFunction)(void (*)(void))Snapshot_report, METH_VARARGS | METH_KEYWORDS,
     "report(format='table') -> str: table, lightning, fastxtend, ignite, markdown, csv, json."},
    {"records", (PyCFunction)(void (*)(void))Snapshot_records, METH_VARARGS | METH_KEYWORDS,
     "records(phase=None) -> list of dicts, one per (action, phase) row; phase 'all' is the "
     "roll-up over phases. pandas.DataFrame(records) loads it."},
    {"info", (PyCFunction)Snapshot_info, METH_NOARGS,
     "info() -> dict: run metadata, steps, misuse counts, counters."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Snapshot_slots[] = {
    {Py_tp_doc, "A consistent copy of everything measured (Profiler.snapshot(), load())."},
    {Py_tp_methods, Snapshot_methods},
    {Py_tp_dealloc, Snapshot_dealloc},
    {0, NULL},
};

static PyType_Spec Snapshot_spec = {
    .name = "stepwatch.Snapshot",
    .basicsize = sizeof(SnapshotObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Snapshot_slots,
};

/* ------------------------------------------------------------------------------------------
 * Profiler
 * ---------------------------------------------------------------------------------------- */

static PyObject *Profiler_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"name", "warmup_steps", "run_file", "timeline", "max_depth",
                             "rank", "world_size", "command", "enabled", "ring_capacity",
                             "on_full", NULL};
    const char *name = NULL, *run_file = NULL, *command = NULL, *on_full = "drop";
    unsigned int warmup = 0, max_depth = 0, ring_capacity = 0;
    int timeline = 0, rank = 0, world_size = 0, enabled = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zIzpIiizpIs:Profiler", kwlist, &name,
                                     &warmup, &run_file, &timeline, &max_depth, &rank,
                                     &world_size, &command, &enabled, &ring_capacity, &on_full))
        return NULL;
    int block = strcmp(on_full, "block") == 0;
    if (!block && strcmp(on_full, "drop") != 0)
        return PyErr_Format(PyExc_ValueError,
                            "Profiler: on_full must be 'drop' or 'block', not '%s'", on_full);
    if (ring_capacity > SW_MAX_RING_CAPACITY)
        return PyErr_Format(PyExc_ValueError,
                            "Profiler: ring_capacity %u is over the limit of %u events",
                            ring_capacity, SW_MAX_RING_CAPACITY);
    module_state *st = state_of_type(type);
    if (!st)
        return NULL;
    ProfilerObject *self = (ProfilerObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->actions = PyDict_New();
    self->phases = PyDict_New();
    self->counters = PyDict_New();
    self->name = PyUnicode_FromString(name ? name : "stepwatch");
    if (!self->actions || !self->phases || !self->counters || !self->name) {
        Py_DECREF(self);
        return NULL;
    }
    sw_options opts = {0};
    opts.name = name;
    opts.warmup_steps = warmup;
    opts.run_file = run_file;
    opts.timeline = timeline;
    opts.max_depth = max_depth;
    opts.rank = rank;
    opts.world_size = world_size;
    opts.command = command;
    opts.ring_capacity = ring_capacity;
    opts.on_full = block ? SW_FULL_BLOCK : SW_FULL_DROP;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* opening a run file touches the disk */
    rc = sw_profiler_new(&opts, &self->p);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(self);
        return raise_rc(st, rc, "Profiler");
    }
    if (!enabled)
        sw_set_enabled(self->p, 0);
    return (PyObject *)self;
}

static int Profiler_traverse(ProfilerObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->actions);
    Py_VISIT(self->phases);
    Py_VISIT(self->counters);
    return 0;
}

static int Profiler_clear(ProfilerObject *self) {
    Py_CLEAR(self->actions);
    Py_CLEAR(self->phases);
    Py_CLEAR(self->counters);
    return 0;
}

static void profiler_close(ProfilerObject *self) {
    sw_profiler *p = self->p;
    self->p = NULL; /* Actions see NULL from now on: their calls become no-ops */
    if (p) {
        Py_BEGIN_ALLOW_THREADS /* completing the run file waits for the flusher */
        sw_profiler_free(p);
        Py_END_ALLOW_THREADS
    }
}

static void Profiler_dealloc(ProfilerObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    sw_profiler_free(self->p);
    self->p = NULL;
    Profiler_clear(self);
    Py_CLEAR(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Raise SW_ESTATE if the profiler was closed. */
static sw_profiler *open_profiler(ProfilerObject *self) {
    if (!self->p) {
        module_state *st = state_of_type(Py_TYPE(self));
        if (st)
            raise_rc(st, SW_ESTATE, "profiler is closed");
    }
    return self->p;
}

/* The Action (is_phase 0) or Phase (is_phase 1) named name: from the profiler's cache, else
 * interned in the core and cached. New reference. */
static PyObject *profiler_named(ProfilerObject *self, PyObject *name, int is_phase) {
    const char *what = is_phase ? "phase" : "action";
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s name must be str, not %.100s", what,
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    PyObject *cache = is_phase ? self->phases : self->actions;
    PyObject *cached = PyDict_GetItemWithError(cache, name);
    if (cached)
        return Py_NewRef(cached);
    if (PyErr_Occurred())
        return NULL;
    sw_profiler *p = open_profiler(self);
    if (!p)
        return NULL;
    module_state *st = state_of_type(Py_TYPE(self));
    const char *utf8 = PyUnicode_AsUTF8(name);
    if (!st || !utf8)
        return NULL;
    uint32_t id = is_phase ? sw_phase_id(p, utf8) : sw_action(p, utf8);
    if (id == (is_phase ? (uint32_t)SW_PHASE_NONE : SW_ID_NONE))
        return raise_rc(st, SW_ELIMIT, what);
    NamedObject *o = PyObject_GC_New(NamedObject, is_phase ? st->phase_type : st->action_type);
    if (!o)
        return NULL;
    o->owner = (ProfilerObject *)Py_NewRef(self);
    o->id = id;
    o->name = Py_NewRef(name);
    o->enter = o->exit = NULL;
    PyObject_GC_Track(o);
    if (bind_with_methods(o, is_phase ? Phase_with_methods : Action_with_methods) < 0 ||
        PyDict_SetItem(cache, name, (PyObject *)o) < 0) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static PyObject *Profiler_action(ProfilerObject *self, PyObject *name) {
    return profiler_named(self, name, 0);
}

/* An Action argument, or a str naming one (interned on first use). New reference. */
static ActionObject *as_action(ProfilerObject *self, PyObject *obj) {
    module_state *st = state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    if (Py_IS_TYPE(obj, st->action_type)) {
        if (((ActionObject *)obj)->owner != self) {
            PyErr_SetString(PyExc_ValueError, "the action belongs to another Profiler");
            return NULL;
        }
        return (ActionObject *)Py_NewRef(obj);
    }
    return (ActionObject *)Profiler_action(self, obj);
}

static PyObject *Profiler_begin(ProfilerObject *self, PyObject *obj) {
    ActionObject *a = as_action(self, obj);
    if (!a)
        return NULL;
    if (self->p)
        sw_begin(self->p, a->id);
    Py_DECREF(a);
    Py_RETURN_NONE;
}

static PyObject *Profiler_end(ProfilerObject *self, PyObject *obj) {
    ActionObject *a = as_action(self, obj);
    if (!a)
        return NULL;
    if (self->p)
        sw_end(self->p, a->id);
    Py_DECREF(a);
    Py_RETURN_NONE;
}

static PyObject *Profiler_record(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(action, start_ns, end_ns)");
        return NULL;
    }
    ActionObject *a = as_action(self, args[0]);
    if (!a)
        return NULL;
    PyObject *r = Action_record(a, args + 1, 2);
    Py_DECREF(a);
    return r;
}

static PyObject *Profiler_phase(ProfilerObject *self, PyObject *name) {
    return profiler_named(self, name, 1);
}

static PyObject *Profiler_step(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint32_t bs = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "step(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && parse_batch_size(args[0], &bs) < 0)
        return NULL;
    module_state *st = state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    StepObject *o = PyObject_GC_New(StepObject, st->step_type);
    if (!o)
        return NULL;
    o->owner = (ProfilerObject *)Py_NewRef(self);
    o->batch_size = bs;
    o->name = NULL;
    o->enter = o->exit = NULL;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

static PyObject *Profiler_step_begin(ProfilerObject *self, PyObject *const *args,
                                     Py_ssize_t nargs) {
    uint32_t bs = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "step_begin(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && parse_batch_size(args[0], &bs) < 0)
        return NULL;
    if (self->p)
        sw_step_begin(self->p, bs);
    Py_RETURN_NONE;
}

static PyObject *Profiler_step_end(ProfilerObject *self, PyObject *unused) {
    if (self->p)
        sw_step_end(self->p);
    Py_RETURN_NONE;
}

static PyObject *Profiler_set_batch_size(ProfilerObject *self, PyObject *arg) {
    uint32_t bs;
    if (parse_batch_size(arg, &bs) < 0)
        return NULL;
    if (self->p)
        sw_step_set_batch_size(self->p, bs);
    Py_RETURN_NONE;
}

/* counter(name, value): one sample of a numeric counter. */
static PyObject *Profiler_counter(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "counter(name: str, value: float)");
        return NULL;
    }
    double value = PyFloat_AsDouble(args[1]);
    if (value == -1.0 && PyErr_Occurred())
        return NULL;
    sw_profiler *p = open_profiler(self);
    if (!p)
        return NULL;
    PyObject *idobj = PyDict_GetItemWithError(self->counters, args[0]);
    sw_id id;
    if (idobj) {
        id = (sw_id)PyLong_AsUnsignedLong(idobj);
    } else {
        if (PyErr_Occurred())
            return NULL;
        const char *utf8 = PyUnicode_AsUTF8(args[0]);
        if (!utf8)
            return NULL;
        id = sw_counter_id(p, utf8);
        if (id == SW_ID_NONE) {
            module_state *st = state_of_type(Py_TYPE(self));
            return st ? raise_rc(st, SW_ELIMIT, "counter") : NULL;
        }
        if (dict_put(self->counters, utf8, PyLong_FromUnsignedLong(id)) < 0)
            return NULL;
    }
    sw_counter(p, id, value);
    Py_RETURN_NONE;
}

static PyObject *Profiler_snapshot(ProfilerObject *self, PyObject *unused) {
    sw_profiler *p = open_profiler(self);
    module_state *st = state_of_type(Py_TYPE(self));
    if (!p || !st)
        return NULL;
    sw_snapshot *s = NULL;
    int rc = sw_snapshot_take(p, &s);
    if (rc < 0)
        return raise_rc(st, rc, "snapshot");
    return snapshot_wrap(st, s);
}

static PyObject *Profiler_report(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    SnapshotObject *snap = (SnapshotObject *)Profiler_snapshot(self, NULL);
    if (!snap)
        return NULL;
    PyObject *r = Snapshot_report(snap, args, kwargs);
    Py_DECREF(snap);
    return r;
}

static PyObject *Profiler_records(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    SnapshotObject *snap = (SnapshotObject *)Profiler_snapshot(self, NULL);
    if (!snap)
        return NULL;
    PyObject *r = Snapshot_records(snap, args, kwargs);
    Py_DECREF(snap);
    return r;
}

static PyObject *Profiler_close(ProfilerObject *self, PyObject *unused) {
    profiler_close(self);
    Py_RETURN_NONE;
}

static PyObject *Profiler_get_enabled(ProfilerObject *self, void *closure) {
    return PyBool_FromLong(self->p ? sw_enabled(self->p) : 0);
}

static int Profiler_set_enabled(ProfilerObject *self, PyObject *value, void *closure) {
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete 'enabled'");
        return -1;
    }
    int on = PyObject_IsTrue(value);
    if (on < 0)
        return -1;
    if (self->p)
        sw_set_enabled(self->p, on);
    return 0;
}

static PyObject *Profiler_get_step_count(ProfilerObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->p ? sw_step_count(self->p) : 0);
}

static PyObject *Profiler_get_step_index(ProfilerObject *self, void *closure) {
    return PyLong_FromLongLong(self->p ? sw_step_index(self->p) : -1);
}

static PyObject *Profiler_get_closed(ProfilerObject *self, void *closure) {
    return PyBool_FromLong(self->p == NULL);
}

static PyObject *Profiler_repr(ProfilerObject *self) {
    return PyUnicode_FromFormat("<stepwatch.Profiler %R%s>", self->name,
                                self->p ? "" : " closed");
}

static PyMethodDef Profiler_methods[] = {
    {"action", (PyCFunction)Profiler_action, METH_O,
     "action(name) -> Action: the interned action (same object for the same name)."},
    {"begin", (PyCFunction)Profiler_begin, METH_O, "begin(action or name): open a span."},
    {"end", (PyCFunction)Profiler_end, METH_O, "end(action or name): close a span."},
    {"record", (PyCFunction)(void (*)(void))Profiler_record, METH_FASTCALL,
     "record(action, start_ns, end_ns): add a span timed elsewhere."},
    {"phase", (PyCFunction)Profiler_phase, METH_O,
     "phase(name) -> Phase: fit, epoch, train, valid, or a name of your own."},
    {"step", (PyCFunction)(void (*)(void))Profiler_step, METH_FASTCALL,
     "step(batch_size=0) -> Step context manager."},
    {"step_begin", (PyCFunction)(void (*)(void))Profiler_step_begin, METH_FASTCALL,
     "step_begin(batch_size=0): begin a step (ends an open one, counted as misuse)."},
    {"step_end", (PyCFunction)Profiler_step_end, METH_NOARGS, "step_end(): end the step."},
    {"set_batch_size", (PyCFunction)Profiler_set_batch_size, METH_O,
     "set_batch_size(n): the open step's batch size, once known."},
    {"counter", (PyCFunction)(void (*)(void))Profiler_counter, METH_FASTCALL,
     "counter(name, value): record a sample of a numeric counter."},
    {"snapshot", (PyCFunction)Profiler_snapshot, METH_NOARGS,
     "snapshot() -> Snapshot of everything recorded so far."},
    {"report", (PyCFunction)(void (*)(void))Profiler_report, METH_VARARGS | METH_KEYWORDS,
     "report(format='table') -> str."},
    {"records", (PyCFunction)(void (*)(void))Profiler_records, METH_VARARGS | METH_KEYWORDS,
     "records(phase=None) -> list of dicts (pandas.DataFrame(records))."},
    {"close", (PyCFunction)Profiler_close, METH_NOARGS,
     "close(): complete the run file and free the core profiler. Idempotent; actions become "
     "no-ops."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Profiler_getset[] = {
    {"enabled", (getter)Profiler_get_enabled, (setter)Profiler_set_enabled,
     "Recording on/off (one relaxed atomic load on the hot path).", NULL},
    {"step_count", (getter)Profiler_get_step_count, NULL, "Steps begun so far.", NULL},
    {"step_index", (getter)Profiler_get_step_index, NULL,
     "Global index of the open step, -1 outside a step.", NULL},
    {"closed", (getter)Profiler_get_closed, NULL, "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Profiler_members[] = {
    {"name", T_OBJECT, offsetof(ProfilerObject, name), READONLY, "The run name."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Profiler_slots[] = {
    {Py_tp_doc,
     "Profiler(name=None, warmup_steps=0, run_file=None, timeline=False, max_depth=0, rank=0,\n"
     "         world_size=0, command=None, enabled=True, ring_capacity=0, on_full='drop')\n\n"
     "One stepwatch profiler (sw_profiler). Actions, phases and steps are recorded in C.\n"
     "ring_capacity: events buffered per thread for the run file (0 = 65536). on_full: when\n"
     "the run file's writer falls behind, 'drop' counts and drops events (training never\n"
     "waits), 'block' waits for the writer (a complete timeline, may slow training)."},
    {Py_tp_new, Profiler_new},
    {Py_tp_methods, Profiler_methods},
    {Py_tp_getset, Profiler_getset},
    {Py_tp_members, Profiler_members},
    {Py_tp_repr, Profiler_repr},
    {Py_tp_traverse, Profiler_traverse},
    {Py_tp_clear, Profiler_clear},
    {Py_tp_dealloc, Profiler_dealloc},
    {0, NULL},
};

static PyType_Spec Profiler_spec = {
    .name = "stepwatch.Profiler",
    .basicsize = sizeof(ProfilerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = Profiler_slots,
};

/* ------------------------------------------------------------------------------------------
 * Timer: Ignite's Timer (start, pause, resume, reset, step, value). Methods take and ignore
 * positional arguments so they can be attached as event handlers.
 * ---------------------------------------------------------------------------------------- */

static int Timer_init(TimerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"average", NULL};
    int average = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:Timer", kwlist, &average))
        return -1;
    sw_timer_init(&self->t, average);
    return 0;
}

static PyObject *Timer_reset(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_reset(&self->t);
    return Py_NewRef(self);
}

static PyObject *Timer_pause(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_pause(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_resume(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_resume(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_step(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_step(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_value(TimerObject *self, PyObject *unused) {
    return PyFloat_FromDouble(sw_timer_value(&self->t));
}

static PyObject *Timer_is_running(TimerObject *self, PyObject *unused) {
    return PyBool_FromLong(self->t.running);
}

static PyObject *Timer_get_average(TimerObject *self, void *closure) {
    return PyBool_FromLong(self->t.average);
}

static PyObject *Timer_get_steps(TimerObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->t.steps);
}

static void Timer_dealloc(TimerObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int Timer_traverse(TimerObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyMethodDef Timer_methods[] = {
    {"reset", (PyCFunction)(void (*)(void))Timer_reset, METH_FASTCALL,
     "reset($self, /, *args)\n--\n\nReset and start running; returns self."},
    {"pause", (PyCFunction)(void (*)(void))Timer_pause, METH_FASTCALL,
     "pause($self, /, *args)\n--\n\nPause."},
    {"resume", (PyCFunction)(void (*)(void))Timer_resume, METH_FASTCALL,
     "resume($self, /, *args)\n--\n\nResume."},
    {"step", (PyCFunction)(void (*)(void))Timer_step, METH_FASTCALL,
     "step($self, /, *args)\n--\n\nCount one step (for average=True)."},
    {"value", (PyCFunction)Timer_value, METH_NOARGS,
     "Seconds elapsed (divided by the steps if average)."},
    {"is_running", (PyCFunction)Timer_is_running, METH_NOARGS, "True while running."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Timer_getset[] = {
    {"average", (getter)Timer_get_average, NULL, "Whether value() averages per step.", NULL},
    {"step_count", (getter)Timer_get_steps, NULL, "Steps counted.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Timer_slots[] = {
    {Py_tp_doc, "Timer(average=False): Ignite's Timer, in C. Starts running on creation."},
    {Py_tp_init, Timer_init},
    {Py_tp_methods, Timer_methods},
    {Py_tp_getset, Timer_getset},
    {Py_tp_traverse, Timer_traverse},
    {Py_tp_dealloc, Timer_dealloc},
    {0, NULL},
};

static PyType_Spec Timer_spec = {
    .name = "stepwatch.Timer",
    .basicsize = sizeof(TimerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Timer_slots,
};

/* ------------------------------------------------------------------------------------------
 * Module functions
 * ---------------------------------------------------------------------------------------- */

static PyObject *mod_now_ns(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(sw_now_ns());
}

/* Path argument (str or os.PathLike) as a bytes object; NULL on error. */
static PyObject *fs_path(PyObject *arg) {
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    return bytes;
}

static int run_reader_available(module_state *st) {
    if (sw_run_open && sw_run_close && sw_run_snapshot && sw_run_foreach_step &&
        sw_run_phase_name)
        return 1;
    raise_rc(st, SW_EUNSUPPORTED, "run file reader");
    return 0;
}

/* Open a run file, raising FileNotFoundError / stepwatch.Error. */
static sw_run *open_run(module_state *st, PyObject *pathobj, PyObject *path) {
    sw_run *run = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_run_open(PyBytes_AS_STRING(path), &run);
    Py_END_ALLOW_THREADS
    if (rc == SW_ENOTFOUND) {
        PyErr_SetObject(PyExc_FileNotFoundError,
                        Py_BuildValue("(isO)", ENOENT, sw_strerror(rc), pathobj));
        return NULL;
    }
    if (rc < 0) {
        raise_rc(st, rc, PyBytes_AS_STRING(path));
        return NULL;
    }
    return run;
}

static PyObject *mod_load(PyObject *module, PyObject *arg) {
    module_state *st = state_of_module(module);
    if (!run_reader_available(st))
        return NULL;
    PyObject *path = fs_path(arg);
    if (!path)
        return NULL;
    sw_run *run = open_run(st, arg, path);
    Py_DECREF(path);
    if (!run)
        return NULL;
    sw_snapshot *s = NULL;
    int rc = sw_run_snapshot(run, &s);
    sw_run_close(run);
    if (rc < 0)
        return raise_rc(st, rc, "load");
    return snapshot_wrap(st, s);
}

typedef struct {
    sw_run *run;
    PyObject *list;
} steps_ctx;

static int collect_step(void *ctx, int rank, const sw_step_record *r) {
    steps_ctx *c = (steps_ctx *)ctx;
    PyObject *d = Py_BuildValue("{s:K,s:i,s:N,s:I,s:O,s:I,s:K,s:K}", "step",
                                (unsigned long long)r->step, "rank", rank, "phase",
                                str_or_none(sw_run_phase_name(c->run, rank, r->phase)),
                                "batch_size", (unsigned)r->batch_size, "warmup",
                                r->warmup ? Py_True : Py_False, "thread", (unsigned)r->thread,
                                "start_ns", (unsigned long long)r->start_ns, "duration_ns",
                                (unsigned long long)r->duration_ns);
    if (!d)
        return -1;
    for (int cat = 0; cat < SW_CAT_COUNT; cat++) {
        char key[48];
        snprintf(key, sizeof key, "%s_ns", sw_category_name((sw_category)cat));
        if (dict_put(d, key, PyLong_FromUnsignedLongLong(r->category_ns[cat])) < 0) {
            Py_DECREF(d);
            return -1;
        }
    }
    int rc = PyList_Append(c->list, d);
    Py_DECREF(d);
    return rc < 0 ? -1 : 0;
}

static PyObject *mod_load_steps(PyObject *module, PyObject *arg) {
    module_state *st = state_of_module(module);
    if (!run_reader_available(st))
        return NULL;
    PyObject *path = fs_path(arg);
    if (!path)
        return NULL;
    sw_run *run = open_run(st, arg, path);
    Py_DECREF(path);
    if (!run)
        return NULL;
    steps_ctx ctx = {run, PyList_New(0)};
    if (!ctx.list) {
        sw_run_close(run);
        return NULL;
    }
    int rc = sw_run_foreach_step(run, -1, collect_step, &ctx);
    sw_run_close(run);
    if (rc != 0) {
        Py_DECREF(ctx.list);
        if (PyErr_Occurred())
            return NULL;
        return raise_rc(st, rc < 0 ? rc : SW_EIO, "load_steps");
    }
    return ctx.list;
}

static PyObject *mod_strerror(PyObject *module, PyObject *arg) {
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(sw_strerror((int)rc));
}

static PyObject *mod_category_of(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    return PyUnicode_FromString(sw_category_name(sw_category_of(name)));
}

static PyObject *mod_batch_size(PyObject *module, PyObject *batch) {
    return PyLong_FromUnsignedLong(sw_py_batch_size(batch, state_of_module(module)->shape_name));
}

static PyMethodDef module_methods[] = {
    {"now_ns", mod_now_ns, METH_NOARGS, "now_ns() -> int: the profiler clock (CLOCK_MONOTONIC)."},
    {"load", mod_load, METH_O, "load(path) -> Snapshot of a run file (all ranks merged)."},
    {"load_steps", mod_load_steps, METH_O,
     "load_steps(path) -> list of dicts, one per step of a run file, with per-category ns."},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str (sw_strerror)."},
    {"category_of", mod_category_of, METH_O, "category_of(action_name) -> str."},
    {"batch_size", mod_batch_size, METH_O,
     "batch_size(batch) -> int: samples in a batch, the first dimension of its first "
     "array-like (through tuples, lists and dicts); 0 when it cannot be told."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------------------------
 * Module lifetime
 * ---------------------------------------------------------------------------------------- */

static int add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **slot) {
    *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (!*slot)
        return -1;
    /* DISALLOW_INSTANTIATION types are still exposed, for isinstance checks. */
    return PyModule_AddType(module, *slot);
}

static int module_exec(PyObject *module) {
    module_state *st = state_of_module(module);
    if (add_type(module, &Profiler_spec, &st->profiler_type) < 0 ||
        add_type(module, &Action_spec, &st->action_type) < 0 ||
        add_type(module, &Prebound_spec, &st->prebound_type) < 0 ||
        add_type(module, &Timed_spec, &st->timed_type) < 0 ||
        add_type(module, &Phase_spec, &st->phase_type) < 0 ||
        add_type(module, &Step_spec, &st->step_type) < 0 ||
        add_type(module, &Snapshot_spec, &st->snapshot_type) < 0 ||
        add_type(module, &Timer_spec, &st->timer_type) < 0 ||
        add_type(module, &sw_py_loop_spec, &st->loop_type) < 0 ||
        add_type(module, &sw_py_hook_spec, &st->hook_type) < 0 ||
        add_type(module, &sw_py_marks_spec, &st->marks_type) < 0 ||
        add_prebound(st->prebound_type, st->action_type) < 0 ||
        add_prebound(st->prebound_type, st->phase_type) < 0)
        return -1;
    st->error = PyErr_NewExceptionWithDoc(
        "stepwatch.Error", "A stepwatch call failed; .code is the SW_E* code, .name its name.",
        PyExc_RuntimeError, NULL);
    if (!st->error || PyModule_AddObjectRef(module, "Error", st->error) < 0)
        return -1;
    PyObject *functools = PyImport_ImportModule("functools");
    if (!functools)
        return -1;
    st->update_wrapper = PyObject_GetAttrString(functools, "update_wrapper");
    Py_DECREF(functools);
    if (!st->update_wrapper)
        return -1;
    st->shape_name = PyUnicode_InternFromString("shape");
    if (!st->shape_name)
        return -1;
    if (PyModule_AddStringConstant(module, "__version__", SW_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(module, "JSON_SCHEMA_VERSION", SW_JSON_SCHEMA_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_RING_CAPACITY", SW_MAX_RING_CAPACITY) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    module_state *st = state_of_module(module);
    Py_VISIT(st->profiler_type);
    Py_VISIT(st->action_type);
    Py_VISIT(st->prebound_type);
    Py_VISIT(st->timed_type);
    Py_VISIT(st->phase_type);
    Py_VISIT(st->step_type);
    Py_VISIT(st->snapshot_type);
    Py_VISIT(st->timer_type);
    Py_VISIT(st->loop_type);
    Py_VISIT(st->hook_type);
    Py_VISIT(st->marks_type);
    Py_VISIT(st->error);
    Py_VISIT(st->update_wrapper);
    Py_VISIT(st->shape_name);
    return 0;
}

static int module_clear(PyObject *module) {
    module_state *st = state_of_module(module);
    Py_CLEAR(st->profiler_type);
    Py_CLEAR(st->action_type);
    Py_CLEAR(st->prebound_type);
    Py_CLEAR(st->timed_type);
    Py_CLEAR(st->phase_type);
    Py_CLEAR(st->step_type);
    Py_CLEAR(st->snapshot_type);
    Py_CLEAR(st->timer_type);
    Py_CLEAR(st->loop_type);
    Py_CLEAR(st->hook_type);
    Py_CLEAR(st->marks_type);
    Py_CLEAR(st->error);
    Py_CLEAR(st->update_wrapper);
    Py_CLEAR(st->shape_name);
    return 0;
}

static void module_free(void *module) {
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef stepwatch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stepwatch._stepwatch",
    .m_doc = "The C core of stepwatch: profiler, actions, phases, steps, reports, Timer.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__stepwatch(void) {
    return PyModuleDef_Init(&stepwatch_module);
}
