/*
 * _actions.c — the objects a Profiler hands out, and `with` on them (the hot path).
 *
 *   Action    a pre-made action: `with a:` is one C call into sw_begin on entry and one into
 *             sw_end on exit, with no allocation (see Prebound). Calling it with a function
 *             gives a Timed wrapper (the decorator form).
 *   Timed     a function wrapped by an action (vectorcall: begin, call, end).
 *   Phase     a phase as a context manager (sw_phase_begin / sw_phase_end).
 *   Step      one step as a context manager, with its batch size.
 *   Prebound  the __enter__/__exit__ descriptors of Action and Phase.
 *
 * The hot path (enter and exit, Timed calls) never raises: a closed profiler turns them into
 * no-ops and misuse is counted by the core. It stays in this one file, so the compiler sees
 * every call it makes except the core's.
 */
#include "_stepwatch.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD ActionObject *action;
    PyObject *func;
    PyObject *dict; /* __name__, __doc__, __wrapped__ from functools.update_wrapper */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} TimedObject;

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
    PyObject_HEAD PyTypeObject *owner; /* Action or Phase */
    int exits;                         /* __exit__, else __enter__ */
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

/* Named like a method descriptor, which is what profilers print for the bound method. */
static PyObject *Prebound_repr(PreboundObject *self) {
    return PyUnicode_FromFormat("<method '%s' of '%s' objects>",
                                self->exits ? "__exit__" : "__enter__", self->owner->tp_name);
}

static PyType_Slot Prebound_slots[] = {
    {Py_tp_doc, "__enter__/__exit__ of Action and Phase: the method bound when it was made."},
    {Py_tp_repr, Prebound_repr},
    {Py_tp_descr_get, Prebound_get},
    {Py_tp_traverse, Prebound_traverse},
    {Py_tp_clear, Prebound_clear},
    {Py_tp_dealloc, Prebound_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_prebound_spec = {
    .name = "stepwatch.Prebound",
    .basicsize = sizeof(PreboundObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Prebound_slots,
};

/* Make owner's __enter__ and __exit__ Prebound descriptors (once, at module init). */
int sw_py_add_prebound(PyTypeObject *prebound_type, PyTypeObject *owner) {
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
    {"__enter__", (PyCFunction)Action_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Begin the span; returns the action."},
    {"__exit__", (PyCFunction)(void (*)(void))Action_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\n"
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
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
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
PyObject *sw_py_action_record(ActionObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
    {"begin", (PyCFunction)Action_begin, METH_NOARGS,
     "begin($self, /)\n--\n\n"
     "Begin a span of this action."},
    {"end", (PyCFunction)Action_end, METH_NOARGS,
     "end($self, /)\n--\n\n"
     "End the innermost span of this action."},
    {"record", (PyCFunction)(void (*)(void))sw_py_action_record, METH_FASTCALL,
     "record($self, start_ns, end_ns, /)\n--\n\n"
     "Add a span timed elsewhere (stepwatch.now_ns clock)."},
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

PyType_Spec sw_py_action_spec = {
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
    sw_py_aside aside = {0};
    if (r == NULL) /* the end tells the watchers, which may run Python */
        sw_py_set_aside(&aside);
    p = owner->p; /* the call may have closed the profiler */
    if (p)
        sw_end(p, id);
    if (r == NULL)
        sw_py_put_back(&aside);
    return r;
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
    {Py_tp_descr_get, sw_py_bind_as_method},
    {Py_tp_repr, Timed_repr},
    {Py_tp_traverse, Timed_traverse},
    {Py_tp_clear, Timed_clear},
    {Py_tp_dealloc, Timed_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_timed_spec = {
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
    if (nargs >= 2 && args[1] != Py_None) /* an exception leaves it: an out-of-memory error? */
        sw_py_oom_seen(self->owner, args[1]);
    sw_profiler *p = self->owner->p;
    if (p)
        sw_phase_end(p, self->id);
    Py_RETURN_FALSE;
}

static PyMethodDef Phase_with_methods[2] = {
    {"__enter__", (PyCFunction)Phase_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Enter the phase."},
    {"__exit__", (PyCFunction)(void (*)(void))Phase_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\n"
     "Leave the phase."},
};

static PyObject *Phase_repr(PhaseObject *self) {
    return PyUnicode_FromFormat("<stepwatch.Phase %R id=%u>", self->name, (unsigned)self->id);
}

static PyMethodDef Phase_methods[] = {
    {"begin", (PyCFunction)Phase_enter, METH_NOARGS,
     "begin($self, /)\n--\n\n"
     "Enter the phase."},
    {"end", (PyCFunction)(void (*)(void))Phase_exit, METH_FASTCALL,
     "end($self, /, *exc_info)\n--\n\n"
     "Leave the phase."},
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

PyType_Spec sw_py_phase_spec = {
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
    if (nargs >= 2 && args[1] != Py_None) /* an exception leaves it: an out-of-memory error? */
        sw_py_oom_seen(self->owner, args[1]);
    sw_py_step_end(self->owner, 0);
    Py_RETURN_FALSE;
}

/* set_batch_size(n): the batch size of the step now open, once the data arrived. */
static PyObject *Step_set_batch_size(StepObject *self, PyObject *arg) {
    uint32_t bs;
    if (sw_py_parse_batch_size(arg, &bs) < 0)
        return NULL;
    self->batch_size = bs;
    sw_profiler *p = self->owner->p;
    if (p)
        sw_step_set_batch_size(p, bs);
    Py_RETURN_NONE;
}

static PyMethodDef Step_methods[] = {
    {"__enter__", (PyCFunction)Step_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Begin the step."},
    {"__exit__", (PyCFunction)(void (*)(void))Step_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\n"
     "End the step."},
    {"set_batch_size", (PyCFunction)Step_set_batch_size, METH_O,
     "set_batch_size($self, value, /)\n--\n\n"
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

PyType_Spec sw_py_step_spec = {
    .name = "stepwatch.Step",
    .basicsize = sizeof(StepObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Step_slots,
};

/* ------------------------------------------------------------------------------------------
 * Making them (the Profiler interns the names and caches the objects)
 * ---------------------------------------------------------------------------------------- */

PyObject *sw_py_named_new(module_state *st, ProfilerObject *owner, PyObject *name, uint32_t id,
                          int is_phase) {
    NamedObject *o = PyObject_GC_New(NamedObject, is_phase ? st->phase_type : st->action_type);
    if (!o)
        return NULL;
    o->owner = (ProfilerObject *)Py_NewRef(owner);
    o->id = id;
    o->name = Py_NewRef(name);
    o->enter = o->exit = NULL;
    PyObject_GC_Track(o);
    /* __enter__ and __exit__ bound once, for the Prebound descriptors. */
    PyMethodDef *with = is_phase ? Phase_with_methods : Action_with_methods;
    o->enter = PyCFunction_NewEx(&with[0], (PyObject *)o, NULL);
    o->exit = PyCFunction_NewEx(&with[1], (PyObject *)o, NULL);
    if (!o->enter || !o->exit) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

PyObject *sw_py_step_new(module_state *st, ProfilerObject *owner, uint32_t batch_size) {
    StepObject *o = PyObject_GC_New(StepObject, st->step_type);
    if (!o)
        return NULL;
    o->owner = (ProfilerObject *)Py_NewRef(owner);
    o->batch_size = batch_size;
    o->name = NULL;
    o->enter = o->exit = NULL;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}
