/*
 * _torch_loop.c — the per-step hot path of stepwatch.torch, in C (stepwatch._stepwatch.Loop).
 *
 * stepwatch.torch.instrument() makes a Loop from the profiler and its actions, patches a few
 * torch entry points with the Loop's hooks (_torch_loop_hooks.c: each times its event) and calls
 * close() when it is undone. The Loop holds the profiler, the ids, and the state of the step
 * in progress (_torch_loop.h); the rules (_torch_loop_rules.c) decide where steps begin and end.
 */
#include "_torch_loop.h"

#include <dlfcn.h>

static PyObject *Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler", "data",      "forward",        "loss",
                               "backward", "optimizer", "zero_grad",      "train",
                               "valid",    "loss_type", "grad_enabled",   "optimizer_exists",
                               "closure",  "startup",   "loader_startup", "copy",
                               NULL};
    enum { NACTIONS = 6, NOPTIONAL = 4 };
    PyObject *profiler, *actions[NACTIONS], *train, *valid, *loss_type, *grad_enabled,
        *optimizer_exists, *optional[NOPTIONAL] = {Py_None, Py_None, Py_None, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOO|$OOOO:Loop", keywords, &profiler,
                                     &actions[0], &actions[1], &actions[2], &actions[3],
                                     &actions[4], &actions[5], &train, &valid, &loss_type,
                                     &grad_enabled, &optimizer_exists, &optional[0], &optional[1],
                                     &optional[2], &optional[3]))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "Loop: profiler must be a stepwatch.Profiler");
        return NULL;
    }
    if (!PyType_Check(loss_type) || !PyCallable_Check(grad_enabled) ||
        !PyCallable_Check(optimizer_exists)) {
        PyErr_SetString(PyExc_TypeError, "Loop: loss_type must be a type, grad_enabled and "
                                         "optimizer_exists callables");
        return NULL;
    }
    ProfilerObject *owner = (ProfilerObject *)profiler;
    uint32_t ids[NACTIONS], phases[2] = {SW_PHASE_NONE, SW_PHASE_NONE};
    for (int i = 0; i < NACTIONS; i++)
        if (sw_py_named_id(actions[i], st->action_type, owner, "Loop", keywords[i + 1], &ids[i]) <
            0)
            return NULL;
    uint32_t more[NOPTIONAL] = {SW_ID_NONE, SW_ID_NONE, SW_ID_NONE,
                                SW_ID_NONE}; /* None: not timed */
    for (int i = 0; i < NOPTIONAL; i++)
        if (optional[i] != Py_None && sw_py_named_id(optional[i], st->action_type, owner, "Loop",
                                                     keywords[12 + i], &more[i]) < 0)
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
    self->training = PyUnicode_InternFromString("training");
    self->loss_key = PyUnicode_InternFromString("loss");
    self->closure_key = PyUnicode_InternFromString("closure");
    if (self->shape == NULL || self->training == NULL || self->loss_key == NULL ||
        self->closure_key == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->data = ids[0];
    self->forward = ids[1];
    self->loss = ids[2];
    self->backward = ids[3];
    self->optimizer = ids[4];
    self->zero_grad = ids[5];
    self->closure = more[0];
    self->startup = more[1];
    self->loader_startup = more[2];
    self->copy = more[3];
    self->installed_at = sw_now_ns();
    self->phases[TRAIN] = phases[0];
    self->phases[VALID] = phases[1];
    self->loss_type = Py_NewRef(loss_type);
    self->grad_enabled = Py_NewRef(grad_enabled);
    self->optimizer_exists = Py_NewRef(optimizer_exists);
    self->active = 1;
    self->kind = NO_STEP;
    self->last_kind = NO_STEP;
    self->phase_in = SW_PHASE_NONE;
    self->inside = SW_ID_NONE;
    self->rule = RULE_NONE;
    return (PyObject *)self;
}

/* close(): end the step in progress, leave the train/valid phase, write the notes; the
 * hooks call straight through from now on (uninstrument). */
static PyObject *Loop_close(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active) {
        sw_py_loop_user_loss_ended(self); /* the hooks' part first: the rules never call them */
        sw_py_loop_close_all(self, p);
    }
    self->active = 0;
    Py_RETURN_NONE;
}

/* read_grad_mode(path) -> bool: read grad mode through c10::GradMode::is_enabled() of the
 * torch library at path (already loaded by `import torch`; RTLD_NOLOAD loads nothing), which
 * spares a Python call per batch and per forward. False, and torch.is_grad_enabled is kept,
 * when it is not there. */
static PyObject *Loop_read_grad_mode(LoopObject *self, PyObject *path) {
    const char *file = PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
    if (file == NULL)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "read_grad_mode(path: str)");
    void *lib = dlopen(file, RTLD_NOW | RTLD_NOLOAD);
    void *fn = lib ? dlsym(lib, "_ZN3c108GradMode10is_enabledEv") : NULL;
    if (lib != NULL)
        dlclose(lib); /* torch keeps it loaded */
    /* C's bool and C++'s bool are the same type in every ABI torch is built for. */
    self->grad_mode = (bool (*)(void))fn;
    return PyBool_FromLong(fn != NULL);
}

/* mark(batch_size=0): stepwatch.step(). The step in progress ends here and the next begins
 * (at the batch fetched for it, if one was); from the first mark on, only marks make steps. */
static PyObject *Loop_mark(LoopObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint32_t batch = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "mark(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && sw_py_parse_batch_size(args[0], &batch) < 0)
        return NULL;
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active)
        sw_py_loop_mark(self, p, batch);
    Py_RETURN_NONE;
}

/* mark_end(): the end of a `with stepwatch.step():` block. */
static PyObject *Loop_mark_end(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active)
        sw_py_loop_mark_end(self, p);
    Py_RETURN_NONE;
}

/* module_begin(module) -> bool: for forward="hooks" (torch's global forward pre-hook). */
static PyObject *Loop_module_begin(LoopObject *self, PyObject *module) {
    sw_profiler *p = self->active ? self->owner->p : NULL;
    return PyBool_FromLong(p != NULL && sw_py_loop_call_begin(self, p, module, 1, NULL, 0));
}

/* bound_steps(on): a front end that knows the loop (stepwatch.transformers) ends the
 * training steps with step_end(); the optimizer step no longer does. */
static PyObject *Loop_bound_steps(LoopObject *self, PyObject *on) {
    int value = PyObject_IsTrue(on);
    if (value < 0)
        return NULL;
    self->external = value;
    Py_RETURN_NONE;
}

/* step_end(): the training step in progress ends now (the Trainer's on_step_end). */
static PyObject *Loop_step_end(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active)
        sw_py_loop_step_end(self, p);
    Py_RETURN_NONE;
}

/* between() -> bool: is this a moment between two training steps whose time is the next
 * step's (sw_py_loop_between)? */
static PyObject *Loop_between(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->active ? self->owner->p : NULL;
    return PyBool_FromLong(p != NULL && sw_py_loop_between(self));
}

/* hold(action, start, end): a span of action (sw_now_ns times) that ran between two
 * training steps, held for the next one (stepwatch._checkpoint: a save after the update). */
static PyObject *Loop_hold(LoopObject *self, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    uint32_t action;
    if (st == NULL)
        return NULL;
    if (nargs != 3 || !PyLong_Check(args[1]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "hold(action, start: int, end: int)");
        return NULL;
    }
    if (sw_py_named_id(args[0], st->action_type, self->owner, "hold", "action", &action) < 0)
        return NULL;
    uint64_t start = PyLong_AsUnsignedLongLong(args[1]), end = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    sw_profiler *p = self->active ? self->owner->p : NULL;
    if (p != NULL && end >= start)
        sw_py_loop_hold(self, p, action, start, end);
    Py_RETURN_NONE;
}

/* module_end(output): the forward hook of that module. */
static PyObject *Loop_module_end(LoopObject *self, PyObject *output) {
    sw_py_loop_call_end(self, output);
    Py_RETURN_NONE;
}

static int Loop_traverse(LoopObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->loss_type);
    Py_VISIT(self->grad_enabled);
    Py_VISIT(self->optimizer_exists);
    Py_VISIT(self->loss_frame);
    Py_VISIT(self->on_batch_type);
    Py_VISIT(self->batch_type);
    for (int i = 0; i < MAX_ITERATORS; i++)
        Py_VISIT(self->iterators[i]);
    for (int i = 0; i < self->nqueued; i++)
        Py_VISIT(self->queue[i].key);
    return 0;
}

static int Loop_clear(LoopObject *self) {
    /* owner stays until dealloc: hooks read it on every call. */
    Py_CLEAR(self->loss_type);
    Py_CLEAR(self->grad_enabled);
    Py_CLEAR(self->optimizer_exists);
    Py_CLEAR(self->loss_frame);
    Py_CLEAR(self->on_batch_type);
    Py_CLEAR(self->batch_type);
    for (int i = 0; i < MAX_ITERATORS; i++)
        Py_CLEAR(self->iterators[i]);
    for (int i = 0; i < self->nqueued; i++)
        Py_CLEAR(self->queue[i].key);
    return 0;
}

static void Loop_dealloc(LoopObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Loop_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->shape);
    Py_CLEAR(self->training);
    Py_CLEAR(self->loss_key);
    Py_CLEAR(self->closure_key);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* watch_batch_types(fn): fn(type) for each new type of batch fetched (None: no more). */
static PyObject *Loop_watch_batch_types(LoopObject *self, PyObject *fn) {
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "watch_batch_types: fn must be callable or None");
    Py_XSETREF(self->on_batch_type, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_CLEAR(self->batch_type);
    Py_RETURN_NONE;
}

static PyObject *Loop_get_rule(LoopObject *self, void *closure) {
    return PyUnicode_FromString(sw_py_loop_rule_name(self->rule));
}

static PyMethodDef Loop_methods[] = {
    {"hook", (PyCFunction)(void (*)(void))sw_py_loop_hook, METH_VARARGS | METH_KEYWORDS,
     "hook($self, /, kind, original=None)\n--\n\n"
     "A callable to patch in for original. kind: 'next' (DataLoader iterator "
     "__next__), 'call' (nn.Module.__call__), 'function' (a compiled function), "
     "'loss' (a functional loss), 'backward' (torch.autograd.backward), "
     "'zero_grad', 'optimizer_pre'/'optimizer_post' (global step hooks), 'iter' "
     "(DataLoader.__iter__), 'copy' (Tensor.to, Tensor.cuda, a batch class's to)."},
    {"watch_batch_types", (PyCFunction)Loop_watch_batch_types, METH_O,
     "watch_batch_types($self, fn, /)\n--\n\n"
     "fn(type) for each new type of batch a DataLoader gives (None: stop)."},
    {"close", (PyCFunction)Loop_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "End the step in progress, leave the train/valid phase; the hooks call "
     "straight through from now on."},
    {"read_grad_mode", (PyCFunction)Loop_read_grad_mode, METH_O,
     "read_grad_mode($self, path, /)\n--\n\n"
     "-> bool: read grad mode from c10::GradMode::is_enabled in the loaded torch "
     "library at path, not through torch.is_grad_enabled."},
    {"mark", (PyCFunction)(void (*)(void))Loop_mark, METH_FASTCALL,
     "mark($self, batch_size=0, /)\n--\n\n"
     "A step boundary by hand (stepwatch.step())."},
    {"mark_end", (PyCFunction)Loop_mark_end, METH_NOARGS,
     "mark_end($self, /)\n--\n\n"
     "End the step begun by mark() (the end of `with stepwatch.step():`)."},
    {"bound_steps", (PyCFunction)Loop_bound_steps, METH_O,
     "bound_steps($self, on, /)\n--\n\n"
     "While on, training steps end at step_end(), not at the optimizer step."},
    {"step_end", (PyCFunction)Loop_step_end, METH_NOARGS,
     "step_end($self, /)\n--\n\n"
     "End the training step in progress now."},
    {"between", (PyCFunction)Loop_between, METH_NOARGS,
     "between($self, /)\n--\n\n"
     "-> bool: no step is open, and the next training step begins where the last one "
     "ended (what runs now is its time)."},
    {"hold", (PyCFunction)(void (*)(void))Loop_hold, METH_FASTCALL,
     "hold($self, action, start, end, /)\n--\n\n"
     "A span of action (now_ns() times) that ran between two training steps: recorded "
     "in the next one."},
    {"module_begin", (PyCFunction)Loop_module_begin, METH_O,
     "module_begin($self, module, /)\n--\n\n"
     "-> bool: begin the outermost module call (False when inside one)."},
    {"module_end", (PyCFunction)Loop_module_end, METH_O,
     "module_end($self, output, /)\n--\n\n"
     "End the outermost module call."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Loop_getset[] = {
    {"rule", (getter)Loop_get_rule, NULL,
     "How steps are found now: none, dataloader, forward, backward, optimizer or manual.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Loop_slots[] = {
    {Py_tp_doc, "Loop(profiler, data, forward, loss, backward, optimizer, zero_grad, train, valid, "
                "loss_type, grad_enabled, optimizer_exists, *, closure=None, startup=None, "
                "loader_startup=None, copy=None)\n--\n\n"
                "The per-step state of stepwatch.torch and the C hooks that keep it. "
                "train/valid None: no phases; the optional actions None: not timed."},
    {Py_tp_new, Loop_new},
    {Py_tp_methods, Loop_methods},
    {Py_tp_getset, Loop_getset},
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
