/*
 * _loop.c — the per-step hot path of stepwatch.torch, in C (stepwatch._stepwatch.Loop).
 *
 * stepwatch.torch.instrument() patches a few torch entry points (the DataLoader iterators'
 * __next__, nn.Module.__call__, torch.autograd.backward) and registers torch's global
 * optimizer step hooks. They run several times per step, so each is a Hook: a small C
 * callable that calls through to the original and marks the step on its way, with no
 * Python frame of its own. A Loop holds what the hooks share: the profiler, the ids of the
 * actions and phases, and the state of the step in progress. torch.py only installs them.
 *
 * What each hook does:
 *   next            close what the previous step left open and end it; enter "train" or
 *                   "valid" by torch's grad mode (read when a new iterator starts); fetch.
 *                   When a batch came, begin the step at the time the fetch began and
 *                   record the fetch as "data". A fetch that ends the epoch (StopIteration)
 *                   opens no step.
 *   call            the outermost module call only: "loss" for a loss module, else "forward".
 *   backward        first "loss" from the end of the forward to now when no loss module ran
 *                   (a functional loss such as F.cross_entropy), then "backward".
 *   optimizer_pre,  "optimizer" around the outermost Optimizer.step.
 *   optimizer_post
 *
 * Hooks never raise on their own account and never swallow the user's exceptions: a closed
 * profiler makes them call straight through.
 */
#include "_stepwatch.h"

#include <structmember.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    ProfilerObject *owner;
    sw_id data, forward, loss, backward, optimizer;
    sw_phase train, valid;    /* SW_PHASE_NONE when phases are off */
    PyObject *loss_type;      /* module calls of this type are "loss" */
    PyObject *grad_enabled;   /* torch.is_grad_enabled */
    PyObject *shape;          /* the interned string "shape" */
    PyObject *iterator;       /* weak reference to the DataLoader iterator last fetched from */
    /* The step in progress (the training thread's; the GIL orders the hooks). */
    int step_open;
    sw_phase phase;           /* train or valid once entered, else SW_PHASE_NONE */
    sw_id inside;             /* action of the running outermost module call, or SW_ID_NONE */
    uint64_t forward_end;     /* end of the last outermost forward; 0 once backward began */
    int loss_seen;            /* a loss module ran since that forward */
    int optimizer_depth;      /* nested Optimizer.step calls */
} LoopObject;

typedef enum {
    HOOK_NEXT,
    HOOK_CALL,
    HOOK_BACKWARD,
    HOOK_OPTIMIZER_PRE,
    HOOK_OPTIMIZER_POST,
    HOOK_KINDS
} hook_kind;

static const char *const hook_names[HOOK_KINDS] = {"next", "call", "backward",
                                                   "optimizer_pre", "optimizer_post"};

typedef struct {
    PyObject_HEAD
    LoopObject *loop;
    PyObject *func;           /* the original; NULL for the optimizer hooks */
    hook_kind kind;
    PyObject *dict;           /* __wrapped__ and friends from functools.update_wrapper */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} HookObject;

/* ------------------------------------------------------------------------------------------
 * The step's bookkeeping
 * ---------------------------------------------------------------------------------------- */

/* End what the step in progress left open (an exception may have skipped a hook), then the
 * step itself. */
static void loop_boundary(LoopObject *loop, sw_profiler *p) {
    if (loop->inside != SW_ID_NONE) {
        sw_end(p, loop->inside);
        loop->inside = SW_ID_NONE;
    }
    if (loop->optimizer_depth > 0) {
        sw_end(p, loop->optimizer);
        loop->optimizer_depth = 0;
    }
    loop->forward_end = 0;
    loop->loss_seen = 0;
    if (loop->step_open) {
        sw_step_end(p);
        loop->step_open = 0;
    }
}

/* Be in "train" under grad mode, "valid" under no_grad/inference_mode. Grad mode is read
 * when the loop starts fetching from another DataLoader iterator (a new epoch, or the
 * validation loader), not on every batch: each call into torch between two steps of real
 * work runs from cold caches and costs microseconds. */
static void loop_enter_phase(LoopObject *loop, sw_profiler *p, PyObject *iterator) {
    if (loop->train == SW_PHASE_NONE)
        return;
    if (loop->iterator != NULL && PyWeakref_GET_OBJECT(loop->iterator) == iterator)
        return;
    Py_CLEAR(loop->iterator);
    loop->iterator = PyWeakref_NewRef(iterator, NULL);
    if (loop->iterator == NULL)
        PyErr_Clear(); /* not weakly referable: read grad mode on every fetch */
    PyObject *enabled = PyObject_CallNoArgs(loop->grad_enabled);
    if (enabled == NULL) {
        PyErr_Clear(); /* cannot tell: stay where we are */
        return;
    }
    sw_phase want = enabled == Py_True ? loop->train : loop->valid;
    Py_DECREF(enabled);
    if (want == loop->phase)
        return;
    if (loop->phase != SW_PHASE_NONE)
        sw_phase_end(p, loop->phase);
    sw_phase_begin(p, want);
    loop->phase = want;
}

/* The outermost module call begins (returns 0 when one is already running). */
static int loop_module_begin(LoopObject *loop, sw_profiler *p, PyObject *module) {
    if (loop->inside != SW_ID_NONE)
        return 0;
    loop->inside = PyObject_TypeCheck(module, (PyTypeObject *)loop->loss_type) ? loop->loss
                                                                               : loop->forward;
    sw_begin(p, loop->inside);
    return 1;
}

static void loop_module_end(LoopObject *loop) {
    sw_id action = loop->inside;
    sw_profiler *p = loop->owner->p;
    loop->inside = SW_ID_NONE;
    if (p == NULL || action == SW_ID_NONE)
        return;
    sw_end(p, action);
    if (action == loop->forward)
        loop->forward_end = sw_now_ns();
    else
        loop->loss_seen = 1;
}

/* ------------------------------------------------------------------------------------------
 * Hook: the callables that replace torch's entry points
 * ---------------------------------------------------------------------------------------- */

static PyObject *hook_next(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    loop_boundary(loop, p);
    if (PyVectorcall_NARGS(nargsf) >= 1)
        loop_enter_phase(loop, p, args[0]);
    /* "data" is recorded after the fact; its function profile needs the fetch as a span */
    sw_py_funcs *funcs = sw_watched(p, loop->data) ? loop->owner->funcs : NULL;
    if (funcs)
        sw_py_funcs_span(funcs, loop->data, 1);
    uint64_t fetch = sw_now_ns();
    PyObject *batch = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t arrived = sw_now_ns();
    if (funcs && loop->owner->funcs == funcs)
        sw_py_funcs_span(funcs, loop->data, 0);
    if (batch == NULL)
        return NULL; /* StopIteration at the end of the epoch, or the loader's own error */
    p = loop->owner->p;
    if (p != NULL) {
        sw_step_begin_at(p, sw_py_batch_size(batch, loop->shape), fetch);
        sw_record(p, loop->data, fetch, arrived);
        loop->step_open = 1;
    }
    return batch;
}

static PyObject *hook_call(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) < 1 || !loop_module_begin(loop, p, args[0]))
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    loop_module_end(loop);
    return result;
}

static PyObject *hook_backward(LoopObject *loop, sw_profiler *p, PyObject *func,
                               PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->forward_end != 0 && !loop->loss_seen)
        sw_record(p, loop->loss, loop->forward_end, sw_now_ns());
    loop->forward_end = 0;
    loop->loss_seen = 0;
    sw_begin(p, loop->backward);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    if ((p = loop->owner->p) != NULL)
        sw_end(p, loop->backward);
    return result;
}

static PyObject *Hook_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HookObject *self = (HookObject *)callable;
    LoopObject *loop = self->loop;
    if (loop == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: hook was cleared");
        return NULL;
    }
    sw_profiler *p = loop->owner->p;
    switch (self->kind) {
    case HOOK_OPTIMIZER_PRE:
        if (p != NULL && ++loop->optimizer_depth == 1)
            sw_begin(p, loop->optimizer);
        Py_RETURN_NONE;
    case HOOK_OPTIMIZER_POST:
        if (p != NULL && loop->optimizer_depth > 0 && --loop->optimizer_depth == 0)
            sw_end(p, loop->optimizer);
        Py_RETURN_NONE;
    default:
        break;
    }
    if (self->func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: hook was cleared");
        return NULL;
    }
    if (p == NULL)
        return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    switch (self->kind) {
    case HOOK_NEXT:
        return hook_next(loop, p, self->func, args, nargsf, kwnames);
    case HOOK_CALL:
        return hook_call(loop, p, self->func, args, nargsf, kwnames);
    default:
        return hook_backward(loop, p, self->func, args, nargsf, kwnames);
    }
}

static int Hook_traverse(HookObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->loop);
    Py_VISIT(self->func);
    Py_VISIT(self->dict);
    return 0;
}

static int Hook_clear(HookObject *self) {
    Py_CLEAR(self->loop);
    Py_CLEAR(self->func);
    Py_CLEAR(self->dict);
    return 0;
}

static void Hook_dealloc(HookObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    Hook_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Hook_repr(HookObject *self) {
    return PyUnicode_FromFormat("<stepwatch loop hook %s of %R>", hook_names[self->kind],
                                self->func ? self->func : Py_None);
}

static PyMemberDef Hook_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(HookObject, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HookObject, weakrefs), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(HookObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Hook_slots[] = {
    {Py_tp_doc, "A torch entry point wrapped by a Loop (see Loop.hook)."},
    {Py_tp_members, Hook_members},
    {Py_tp_getset, Hook_getset},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, sw_py_bind_as_method}, /* patched onto a class: gets the instance */
    {Py_tp_repr, Hook_repr},
    {Py_tp_traverse, Hook_traverse},
    {Py_tp_clear, Hook_clear},
    {Py_tp_dealloc, Hook_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_hook_spec = {
    .name = "stepwatch.LoopHook",
    .basicsize = sizeof(HookObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Hook_slots,
};

/* ------------------------------------------------------------------------------------------
 * Loop
 * ---------------------------------------------------------------------------------------- */

static PyObject *Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler", "data", "forward", "loss", "backward", "optimizer",
                               "train", "valid", "loss_type", "grad_enabled", NULL};
    PyObject *profiler, *data, *forward, *loss, *backward, *optimizer, *train, *valid;
    PyObject *loss_type, *grad_enabled;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOO:Loop", keywords, &profiler,
                                     &data, &forward, &loss, &backward, &optimizer, &train,
                                     &valid, &loss_type, &grad_enabled))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "Loop: profiler must be a stepwatch.Profiler");
        return NULL;
    }
    if (!PyType_Check(loss_type) || !PyCallable_Check(grad_enabled)) {
        PyErr_SetString(PyExc_TypeError,
                        "Loop: loss_type must be a type and grad_enabled a callable");
        return NULL;
    }
    ProfilerObject *owner = (ProfilerObject *)profiler;
    uint32_t ids[5], phases[2] = {SW_PHASE_NONE, SW_PHASE_NONE};
    PyObject *const actions[5] = {data, forward, loss, backward, optimizer};
    for (int i = 0; i < 5; i++)
        if (sw_py_named_id(actions[i], st->action_type, owner, "Loop", keywords[i + 1],
                           &ids[i]) < 0)
            return NULL;
    int phases_on = train != Py_None && valid != Py_None;
    if (phases_on &&
        (sw_py_named_id(train, st->phase_type, owner, "Loop", "train", &phases[0]) < 0 ||
         sw_py_named_id(valid, st->phase_type, owner, "Loop", "valid", &phases[1]) < 0))
        return NULL;

    LoopObject *self = (LoopObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->shape = PyUnicode_InternFromString("shape");
    if (self->shape == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->data = ids[0];
    self->forward = ids[1];
    self->loss = ids[2];
    self->backward = ids[3];
    self->optimizer = ids[4];
    self->train = phases[0];
    self->valid = phases[1];
    self->loss_type = Py_NewRef(loss_type);
    self->grad_enabled = Py_NewRef(grad_enabled);
    self->phase = SW_PHASE_NONE;
    self->inside = SW_ID_NONE;
    return (PyObject *)self;
}

/* hook(kind, original=None): the Hook of kind wrapping original (the optimizer hooks wrap
 * nothing). */
static PyObject *Loop_hook(LoopObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"kind", "original", NULL};
    const char *kind_name;
    PyObject *original = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|O:hook", keywords, &kind_name, &original))
        return NULL;
    hook_kind kind = HOOK_KINDS;
    for (int k = 0; k < HOOK_KINDS; k++)
        if (strcmp(kind_name, hook_names[k]) == 0)
            kind = (hook_kind)k;
    if (kind == HOOK_KINDS)
        return PyErr_Format(PyExc_ValueError,
                            "hook: unknown kind %R (next, call, backward, optimizer_pre, "
                            "optimizer_post)",
                            PyTuple_GET_ITEM(args, 0));
    int wraps = kind != HOOK_OPTIMIZER_PRE && kind != HOOK_OPTIMIZER_POST;
    if (wraps && !PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError, "hook %s: original must be callable", kind_name);
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    HookObject *hook = PyObject_GC_New(HookObject, st->hook_type);
    if (hook == NULL)
        return NULL;
    hook->loop = (LoopObject *)Py_NewRef(self);
    hook->func = wraps ? Py_NewRef(original) : NULL;
    hook->kind = kind;
    hook->dict = NULL;
    hook->weakrefs = NULL;
    hook->vectorcall = Hook_vectorcall;
    PyObject_GC_Track(hook);
    return (PyObject *)hook;
}

/* close(): end the step in progress and leave the train/valid phase (uninstrument). */
static PyObject *Loop_close(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL) {
        loop_boundary(self, p);
        if (self->phase != SW_PHASE_NONE)
            sw_phase_end(p, self->phase);
    }
    self->phase = SW_PHASE_NONE;
    Py_CLEAR(self->iterator);
    Py_RETURN_NONE;
}

/* module_begin(module) -> bool: for forward="hooks" (torch's global forward pre-hook). */
static PyObject *Loop_module_begin(LoopObject *self, PyObject *module) {
    sw_profiler *p = self->owner->p;
    return PyBool_FromLong(p != NULL && loop_module_begin(self, p, module));
}

static PyObject *Loop_module_end(LoopObject *self, PyObject *unused) {
    loop_module_end(self);
    Py_RETURN_NONE;
}

static int Loop_traverse(LoopObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->loss_type);
    Py_VISIT(self->grad_enabled);
    Py_VISIT(self->iterator);
    return 0;
}

static int Loop_clear(LoopObject *self) {
    /* owner stays until dealloc: hooks read it on every call. */
    Py_CLEAR(self->loss_type);
    Py_CLEAR(self->grad_enabled);
    Py_CLEAR(self->iterator);
    return 0;
}

static void Loop_dealloc(LoopObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Loop_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->shape);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Loop_methods[] = {
    {"hook", (PyCFunction)(void (*)(void))Loop_hook, METH_VARARGS | METH_KEYWORDS,
     "hook(kind, original=None): a callable to patch in for original. kind: 'next' "
     "(DataLoader iterator __next__), 'call' (nn.Module.__call__), 'backward' "
     "(torch.autograd.backward), 'optimizer_pre'/'optimizer_post' (global step hooks)."},
    {"close", (PyCFunction)Loop_close, METH_NOARGS,
     "End the step in progress and leave the train/valid phase."},
    {"module_begin", (PyCFunction)Loop_module_begin, METH_O,
     "module_begin(module) -> bool: begin the outermost module call (False when inside one)."},
    {"module_end", (PyCFunction)Loop_module_end, METH_NOARGS,
     "End the outermost module call."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Loop_slots[] = {
    {Py_tp_doc, "Loop(profiler, data, forward, loss, backward, optimizer, train, valid, "
                "loss_type, grad_enabled): the per-step state of stepwatch.torch and the C "
                "hooks that keep it. train/valid None: no phases."},
    {Py_tp_new, Loop_new},
    {Py_tp_methods, Loop_methods},
    {Py_tp_traverse, Loop_traverse},
    {Py_tp_clear, Loop_clear},
    {Py_tp_dealloc, Loop_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_loop_spec = {
    .name = "stepwatch.Loop",
    .basicsize = sizeof(LoopObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Loop_slots,
};
