/*
 * _profiler.c — Profiler: owns one sw_profiler (the core recorder, and the run file when
 * asked for one). It interns action and phase names once and caches the Action and Phase
 * objects (_actions.c) that then record without a lookup; it makes Steps, counters,
 * snapshots and reports. close() frees the core profiler; every object it handed out then
 * reads a NULL profiler and records nothing.
 */
#include "_stepwatch.h"

#include <structmember.h>

#include <string.h>

/* The core marks the environment when this process takes the run file `stepwatch run` named
 * (STEPWATCH_RUN_FILE_OWNER, docs/reliability.md), so children leave it alone. os.environ
 * is a copy made at start-up: a child started with env=dict(os.environ) must see the mark
 * too. Best effort: nothing to say if it cannot be done. */
static void sync_run_file_owner(void) {
    const char *owner = getenv("STEPWATCH_RUN_FILE_OWNER");
    if (owner == NULL)
        return;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *environ = os ? PyObject_GetAttrString(os, "environ") : NULL;
    PyObject *key = PyUnicode_FromString("STEPWATCH_RUN_FILE_OWNER");
    PyObject *value = PyUnicode_FromString(owner);
    PyObject *seen = environ && key ? PyObject_CallMethod(environ, "get", "O", key) : NULL;
    if (value && seen && PyObject_RichCompareBool(seen, value, Py_EQ) != 1)
        PyObject_SetItem(environ, key, value);
    Py_XDECREF(seen);
    Py_XDECREF(value);
    Py_XDECREF(key);
    Py_XDECREF(environ);
    Py_XDECREF(os);
    PyErr_Clear();
}

static PyObject *profiler_named(ProfilerObject *self, PyObject *name, int is_phase, int cat);

/* Profiler(functions=[...]): profile the functions of each named action. */
static int watch_functions(ProfilerObject *self, PyObject *names) {
    if (PyUnicode_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "functions must be a list of action names, not a str");
        return -1;
    }
    PyObject *seq = PySequence_Fast(names, "functions must be a list of action names");
    if (seq == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *action = profiler_named(self, PySequence_Fast_GET_ITEM(seq, i), 0, -1);
        rc = action ? sw_py_profiler_watch(self, ((ActionObject *)action)->id) : -1;
        Py_XDECREF(action);
    }
    Py_DECREF(seq);
    return rc;
}

PyObject *sw_py_watch_profilers(PyObject *module, PyObject *callback) {
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "_watch_profilers() takes a callable or None");
        return NULL;
    }
    module_state *st = sw_py_state_of_module(module);
    Py_XSETREF(st->on_new_profiler, callback == Py_None ? NULL : Py_NewRef(callback));
    Py_RETURN_NONE;
}

/* Tell the watcher (autorun) about a Profiler being made: made is None before, the new one
 * after. What it raises is reported as unraisable: making the profiler goes on. */
static void tell_watcher(module_state *st, PyObject *made) {
    PyObject *callback = st->on_new_profiler;
    if (callback == NULL)
        return;
    Py_INCREF(callback); /* it may stop watching from inside */
    PyObject *r = PyObject_CallOneArg(callback, made);
    if (r == NULL)
        PyErr_WriteUnraisable(callback);
    Py_XDECREF(r);
    Py_DECREF(callback);
}

/* Profiler(modules=True or k): per-module time and memory, every k-th step
 * (stepwatch/_modules.py installs the hooks of _modules.c). */
static int attach_modules(ProfilerObject *self, PyObject *modules, unsigned int warmup) {
    int on = PyObject_IsTrue(modules);
    if (on <= 0)
        return on;
    PyObject *helper = PyImport_ImportModule("stepwatch._modules");
    if (helper == NULL)
        return -1;
    self->modules = PyObject_CallMethod(helper, "attach", "OOI", (PyObject *)self, modules, warmup);
    Py_DECREF(helper);
    return self->modules ? 0 : -1;
}

/* A helper's last call before the profiler goes (the modules' last flush and their hooks
 * off: "close"; the FLOPs' figures and the goodput into the notes: "closing"), and the
 * reference dropped: never raises. */
static void close_helper(PyObject **slot, const char *method) {
    PyObject *helper = *slot;
    if (helper == NULL)
        return;
    *slot = NULL;
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    PyObject *r = PyObject_CallMethod(helper, method, NULL);
    if (r == NULL)
        PyErr_WriteUnraisable(helper);
    Py_XDECREF(r);
    Py_DECREF(helper);
    sw_py_put_back(&aside);
}

/* Profiler(flops=True or a dict of options): the training steps' FLOPs, TFLOP/s and MFU
 * into the notes at close (stepwatch/flops.py's Watch; its attach() checks the options). */
static int attach_flops(ProfilerObject *self, PyObject *flops) {
    if (flops == Py_None || flops == Py_False)
        return 0;
    PyObject *helper = PyImport_ImportModule("stepwatch.flops");
    if (helper == NULL)
        return -1;
    self->flops = PyObject_CallMethod(helper, "attach", "OO", (PyObject *)self, flops);
    Py_DECREF(helper);
    return self->flops ? 0 : -1;
}

static PyObject *Profiler_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    /* clang-format off */
    static char *kwlist[] = {
        "name",       "warmup_steps", "run_file",   "timeline",      "max_depth",   "rank",
        "world_size", "command",      "enabled",    "ring_capacity", "on_full",     "functions",
        "builtins",   "live",         "local_rank", "device_stats",  "device_time", "clock",
        "memory",     "modules",      "flops",      NULL};
    /* clang-format on */
    const char *name = NULL, *run_file = NULL, *command = NULL, *on_full = "drop", *clock = NULL;
    unsigned int warmup = 0, max_depth = 0, ring_capacity = 0;
    int timeline = 0, rank = 0, world_size = 0, enabled = 1, builtins = 0, local_rank = 0;
    PyObject *functions = Py_None, *live = Py_None, *device_stats = Py_False,
             *device_time = Py_False, *warmup_obj = NULL, *depth_obj = NULL, *ring_obj = NULL,
             *memory_obj = Py_None, *modules = Py_False, *flops = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zOzpOiizpOsOpOiOOzOOO:Profiler", kwlist, &name,
                                     &warmup_obj, &run_file, &timeline, &depth_obj, &rank,
                                     &world_size, &command, &enabled, &ring_obj, &on_full,
                                     &functions, &builtins, &live, &local_rank, &device_stats,
                                     &device_time, &clock, &memory_obj, &modules, &flops))
        return NULL;
    /* Checked, never wrapped: Python's "I" format takes -1 as 4,294,967,295. */
    if ((warmup_obj &&
         sw_py_parse_uint(warmup_obj, "Profiler: warmup_steps", UINT32_MAX, &warmup) < 0) ||
        (depth_obj &&
         sw_py_parse_uint(depth_obj, "Profiler: max_depth", UINT32_MAX, &max_depth) < 0) ||
        (ring_obj &&
         sw_py_parse_uint(ring_obj, "Profiler: ring_capacity", UINT32_MAX, &ring_capacity) < 0))
        return NULL;
    sw_clock_kind clock_kind = SW_CLOCK_AUTO;
    if (clock != NULL && strcmp(clock, "tsc") == 0)
        clock_kind = SW_CLOCK_TSC;
    else if (clock != NULL && strcmp(clock, "monotonic") == 0)
        clock_kind = SW_CLOCK_MONOTONIC;
    else if (clock != NULL)
        return PyErr_Format(PyExc_ValueError,
                            "Profiler: clock must be None, 'monotonic' or 'tsc', not '%s'", clock);
    /* memory=None: on unless `stepwatch run --no-step-memory` said no (STEPWATCH_STEP_MEMORY=0). */
    const char *memory_env = getenv("STEPWATCH_STEP_MEMORY");
    int memory = memory_obj == Py_None ? memory_env == NULL || strcmp(memory_env, "0") != 0
                                       : PyObject_IsTrue(memory_obj);
    if (memory < 0)
        return NULL;
    int live_on = live == Py_None ? 0 : PyObject_IsTrue(live);
    if (live_on < 0)
        return NULL;
    int block = strcmp(on_full, "block") == 0;
    if (!block && strcmp(on_full, "drop") != 0)
        return PyErr_Format(PyExc_ValueError,
                            "Profiler: on_full must be 'drop' or 'block', not '%s'", on_full);
    if (ring_capacity > SW_MAX_RING_CAPACITY)
        return PyErr_Format(PyExc_ValueError,
                            "Profiler: ring_capacity %u is over the limit of %u events",
                            ring_capacity, SW_MAX_RING_CAPACITY);
    module_state *st = sw_py_state_of_type(type);
    if (!st)
        return NULL;
    tell_watcher(st, Py_None); /* before: the watcher may let the environment's run file go */
    ProfilerObject *self = (ProfilerObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->actions = PyDict_New();
    self->phases = PyDict_New();
    self->counters = PyDict_New();
    self->name = PyUnicode_FromString(name ? name : "stepwatch");
    self->memory = memory ? sw_py_memory_new() : NULL;
    if (!self->actions || !self->phases || !self->counters || !self->name ||
        (memory && !self->memory)) {
        Py_DECREF(self);
        return NULL;
    }
    sw_options opts = SW_OPTIONS_INIT;
    opts.name = name;
    opts.warmup_steps = warmup;
    opts.run_file = run_file;
    opts.timeline = timeline;
    opts.max_depth = max_depth;
    opts.rank = rank;
    opts.world_size = world_size;
    opts.local_rank = local_rank;
    opts.command = command;
    opts.ring_capacity = ring_capacity;
    opts.on_full = block ? SW_FULL_BLOCK : SW_FULL_DROP;
    opts.live = live == Py_None ? SW_LIVE_AUTO : live_on ? SW_LIVE_ON : SW_LIVE_OFF;
    opts.clock = clock_kind;
    opts.step_memory = !memory                 ? SW_STEP_MEMORY_OFF
                       : memory_obj == Py_None ? SW_STEP_MEMORY_AUTO
                                               : SW_STEP_MEMORY_ON;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* opening a run file touches the disk */
        rc = sw_profiler_new(&opts, &self->p);
    Py_END_ALLOW_THREADS if (rc < 0) {
        Py_DECREF(self);
        return sw_py_raise(st, rc, "Profiler");
    }
    if (!enabled)
        sw_set_enabled(self->p, 0);
    self->builtins = builtins;
    if ((functions != Py_None && watch_functions(self, functions) < 0) ||
        sw_py_device_start(self, device_stats, device_time) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->timing = sw_device_timing_of(self->p); /* once: it takes the profiler's lock */
    if (attach_modules(self, modules, warmup) < 0 || attach_flops(self, flops) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->gc = sw_py_gc_start(self->p);
    sync_run_file_owner();
    tell_watcher(st, (PyObject *)self);
    return (PyObject *)self;
}

static int Profiler_traverse(ProfilerObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->actions);
    Py_VISIT(self->phases);
    Py_VISIT(self->counters);
    Py_VISIT(self->modules);
    Py_VISIT(self->flops);
    Py_VISIT(self->final);
    return sw_py_memory_traverse(self->memory, visit, arg);
}

static int Profiler_clear(ProfilerObject *self) {
    Py_CLEAR(self->actions);
    Py_CLEAR(self->phases);
    Py_CLEAR(self->counters);
    Py_CLEAR(self->modules);
    Py_CLEAR(self->flops);
    Py_CLEAR(self->final);
    sw_py_memory_free(self->memory);
    self->memory = NULL;
    return 0;
}

/* The run as it stands at close, kept so that report() and snapshot() still answer after
 * `with Profiler() as prof:` (as cProfile's and torch.profiler's do). A failure only loses
 * that: the run file is completed all the same. */
static void keep_final_snapshot(ProfilerObject *self) {
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    sw_snapshot *s = NULL;
    if (st == NULL || sw_snapshot_take(self->p, &s) < 0) {
        PyErr_Clear();
        return;
    }
    Py_XSETREF(self->final, sw_py_snapshot_wrap(st, s));
    if (self->final == NULL)
        PyErr_Clear();
}

/* close() and the with block's end (not dealloc: there nothing may run meanwhile). */
static void profiler_close(ProfilerObject *self) {
    sw_py_funcs_calibrate(self->funcs);    /* the GIL off meanwhile: first, before anything */
    close_helper(&self->flops, "closing"); /* its notes read the steps' records: first */
    close_helper(&self->modules, "close");
    sw_py_funcs_close(self->funcs); /* with the GIL: the hooks come off */
    if (self->p)
        keep_final_snapshot(self);
    sw_py_gc_stop(self->gc);
    Py_CLEAR(self->gc);
    sw_profiler *p = self->p;
    self->timing = NULL;
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
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    sw_py_funcs_free(self->funcs);
    self->funcs = NULL;
    sw_py_gc_forget(self->gc);
    Py_CLEAR(self->gc);
    sw_profiler_free(self->p);
    self->timing = NULL;
    self->p = NULL;
    Profiler_clear(self);
    Py_CLEAR(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Raise SW_ESTATE if the profiler was closed. */
static sw_profiler *open_profiler(ProfilerObject *self) {
    if (!self->p) {
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        if (st)
            sw_py_raise(st, SW_ESTATE, "profiler is closed");
    }
    return self->p;
}

/* The category named name ("data", ..., "other") into *out; ValueError for another name. */
static int parse_category(const char *name, sw_category *out) {
    for (int c = 0; c < SW_CAT_COUNT; c++) {
        if (strcmp(name, sw_category_name((sw_category)c)) == 0) {
            *out = (sw_category)c;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "unknown category '%s' (data, forward, loss, backward, optimizer, zero_grad, "
                 "callback, collective, other)",
                 name);
    return -1;
}

/* ValueError: name exists with another category than asked for. Returns NULL. */
static PyObject *category_conflict(sw_profiler *p, PyObject *name, sw_id id, sw_category cat) {
    return PyErr_Format(PyExc_ValueError, "action %R has category '%s', not '%s'", name,
                        sw_category_name(sw_action_category(p, id)), sw_category_name(cat));
}

/* The Action (is_phase 0) or Phase (is_phase 1) named name: from the profiler's cache, else
 * interned in the core and cached. An action is interned with category cat (an SW_CAT_*;
 * -1: the category its name says); asking for a cached one with another cat raises. New
 * reference. */
static PyObject *profiler_named(ProfilerObject *self, PyObject *name, int is_phase, int cat) {
    const char *what = is_phase ? "phase" : "action";
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s name must be str, not %.100s", what,
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    PyObject *cache = is_phase ? self->phases : self->actions;
    PyObject *cached = PyDict_GetItemWithError(cache, name);
    if (cached) {
        sw_id id = ((ActionObject *)cached)->id;
        if (cat >= 0 && self->p && sw_action_category(self->p, id) != (sw_category)cat)
            return category_conflict(self->p, name, id, (sw_category)cat);
        return Py_NewRef(cached);
    }
    if (PyErr_Occurred())
        return NULL;
    sw_profiler *p = open_profiler(self);
    if (!p)
        return NULL;
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    const char *utf8 = sw_py_name_utf8(name, is_phase ? "phase" : "action");
    if (!st || !utf8)
        return NULL;
    uint32_t id;
    if (is_phase)
        id = sw_phase_id(p, utf8);
    else if (cat < 0)
        id = sw_action(p, utf8);
    else if ((id = sw_action_with_category(p, utf8, (sw_category)cat)) == SW_ID_NONE) {
        sw_id existing = sw_action(p, utf8); /* a phase's name, say: it has its own */
        if (existing != SW_ID_NONE)
            return category_conflict(p, name, existing, (sw_category)cat);
    }
    if (id == (is_phase ? (uint32_t)SW_PHASE_NONE : SW_ID_NONE))
        return sw_py_raise(st, SW_ELIMIT, what);
    /* A name past a full table got the overflow name's id (include/stepwatch.h): the
     * overflow name's object, cached under that name only, so the cache grows with the
     * table and not with the names a loop makes per step. */
    const char *other = is_phase ? SW_OTHER_PHASES : SW_OTHER_ACTIONS;
    const char *stored = is_phase ? sw_phase_name(p, id) : sw_action_name(p, id);
    if (stored != NULL && strcmp(stored, other) == 0 && strcmp(utf8, other) != 0) {
        PyObject *other_name = PyUnicode_FromString(other);
        PyObject *o = other_name ? profiler_named(self, other_name, is_phase, -1) : NULL;
        Py_XDECREF(other_name);
        return o;
    }
    PyObject *o = sw_py_named_new(st, self, name, id, is_phase);
    if (!o || PyDict_SetItem(cache, name, o) < 0) {
        Py_XDECREF(o);
        return NULL;
    }
    return o;
}

/* action(name, category=None) */
static PyObject *Profiler_action(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    static const char *const usage = "action(name, category=None)";
    PyObject *name = NULL, *category = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs < 1 || nargs + nkw > 2 ||
        (nkw == 1 &&
         PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "category") != 0)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    name = args[0];
    if (nargs + nkw == 2)
        category = args[1];
    int cat = -1;
    if (category != Py_None) {
        const char *cname = PyUnicode_Check(category) ? PyUnicode_AsUTF8(category) : NULL;
        if (!cname) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "category must be str, not %.100s",
                             Py_TYPE(category)->tp_name);
            return NULL;
        }
        sw_category c;
        if (parse_category(cname, &c) < 0)
            return NULL;
        cat = (int)c;
    }
    return profiler_named(self, name, 0, cat);
}

static PyObject *Profiler_functions(ProfilerObject *self, PyObject *name) {
    PyObject *action = profiler_named(self, name, 0, -1);
    if (action && sw_py_profiler_watch(self, ((ActionObject *)action)->id) < 0)
        Py_CLEAR(action);
    return action;
}

/* An Action argument, or a str naming one (interned on first use). New reference. */
static ActionObject *as_action(ProfilerObject *self, PyObject *obj) {
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    if (Py_IS_TYPE(obj, st->action_type)) {
        if (((ActionObject *)obj)->owner != self) {
            PyErr_SetString(PyExc_ValueError, "the action belongs to another Profiler");
            return NULL;
        }
        return (ActionObject *)Py_NewRef(obj);
    }
    return (ActionObject *)profiler_named(self, obj, 0, -1);
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
    PyObject *r = sw_py_action_record(a, args + 1, 2);
    Py_DECREF(a);
    return r;
}

static PyObject *Profiler_phase(ProfilerObject *self, PyObject *name) {
    return profiler_named(self, name, 1, -1);
}

static PyObject *Profiler_step(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint32_t bs = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "step(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && sw_py_parse_batch_size(args[0], &bs) < 0)
        return NULL;
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    return sw_py_step_new(st, self, bs);
}

static PyObject *Profiler_step_begin(ProfilerObject *self, PyObject *const *args,
                                     Py_ssize_t nargs) {
    uint32_t bs = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "step_begin(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && sw_py_parse_batch_size(args[0], &bs) < 0)
        return NULL;
    if (self->p)
        sw_step_begin(self->p, bs);
    Py_RETURN_NONE;
}

static PyObject *Profiler_step_end(ProfilerObject *self, PyObject *unused) {
    sw_py_step_end(self, 0);
    Py_RETURN_NONE;
}

static PyObject *Profiler_set_batch_size(ProfilerObject *self, PyObject *arg) {
    uint32_t bs;
    if (sw_py_parse_batch_size(arg, &bs) < 0)
        return NULL;
    if (self->p)
        sw_step_set_batch_size(self->p, bs);
    Py_RETURN_NONE;
}

/* checkpoint_bytes(n): a checkpoint saved in the open step (or held for the next) wrote n
 * bytes (stepwatch._checkpoint). */
static PyObject *Profiler_checkpoint_bytes(ProfilerObject *self, PyObject *arg) {
    unsigned long long n = PyLong_Check(arg) ? PyLong_AsUnsignedLongLong(arg) : 0;
    if (!PyLong_Check(arg) || PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "checkpoint_bytes(n): n must be an int >= 0");
        return NULL;
    }
    if (self->p)
        sw_step_checkpoint_bytes(self->p, n);
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
        const char *utf8 = sw_py_name_utf8(args[0], "counter");
        if (!utf8)
            return NULL;
        id = sw_counter_id(p, utf8);
        if (id == SW_ID_NONE) {
            module_state *st = sw_py_state_of_type(Py_TYPE(self));
            return st ? sw_py_raise(st, SW_ELIMIT, "counter") : NULL;
        }
        /* A name folded into the overflow counter is not cached (see profiler_named). */
        const char *stored = sw_counter_name(p, id);
        int folded = stored != NULL && strcmp(stored, SW_OTHER_COUNTERS) == 0 &&
                     strcmp(utf8, SW_OTHER_COUNTERS) != 0;
        if (!folded && sw_py_dict_put(self->counters, utf8, PyLong_FromUnsignedLong(id)) < 0)
            return NULL;
    }
    sw_counter(p, id, value);
    Py_RETURN_NONE;
}

/* note(key, value): a note about the run (sw_set_note); value None removes it. */
static PyObject *Profiler_note(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0]) ||
        (args[1] != Py_None && !PyUnicode_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "note(key: str, value: str | None)");
        return NULL;
    }
    const char *key = sw_py_name_utf8(args[0], "note");
    const char *value = args[1] == Py_None || !key ? NULL : sw_py_name_utf8(args[1], "note");
    if (!key || (args[1] != Py_None && !value))
        return NULL;
    sw_profiler *p = open_profiler(self);
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (!p || !st)
        return NULL;
    int rc = sw_set_note(p, key, value);
    if (rc == SW_EINVAL)
        return PyErr_Format(PyExc_ValueError, "note: the key must be 1 to %d bytes",
                            SW_NOTE_KEY_MAX);
    return rc < 0 ? sw_py_raise(st, rc, "note") : Py_NewRef(Py_None);
}

static PyObject *Profiler_snapshot(ProfilerObject *self, PyObject *unused) {
    if (self->p == NULL && self->final != NULL)
        return Py_NewRef(self->final); /* closed: the run as it stood then */
    sw_profiler *p = open_profiler(self);
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (!p || !st)
        return NULL;
    sw_snapshot *s = NULL;
    int rc = sw_snapshot_take(p, &s);
    if (rc < 0)
        return sw_py_raise(st, rc, "snapshot");
    return sw_py_snapshot_wrap(st, s);
}

static PyObject *Profiler_report(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *snap = Profiler_snapshot(self, NULL);
    if (!snap)
        return NULL;
    PyObject *r = sw_py_snapshot_report(snap, args, kwargs);
    Py_DECREF(snap);
    return r;
}

static PyObject *Profiler_records(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *snap = Profiler_snapshot(self, NULL);
    if (!snap)
        return NULL;
    PyObject *r = sw_py_snapshot_records(snap, args, kwargs);
    Py_DECREF(snap);
    return r;
}

static PyObject *Profiler_name_thread(ProfilerObject *self, PyObject *name) {
    const char *text = sw_py_name_utf8(name, "name_thread");
    if (text == NULL)
        return NULL;
    if (self->p != NULL && sw_thread_name(self->p, text) == SW_ENOMEM)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* close() in an except or finally block while an exception goes by (it may be an
 * out-of-memory error: named first, while the run file takes notes). */
static PyObject *Profiler_close(ProfilerObject *self, PyObject *unused) {
    PyObject *handled = PyErr_GetHandledException();
    if (handled != NULL && self->p != NULL)
        sw_py_oom_seen(self, handled);
    Py_XDECREF(handled);
    profiler_close(self);
    Py_RETURN_NONE;
}

static PyObject *Profiler_enter(ProfilerObject *self, PyObject *unused) {
    return Py_NewRef(self);
}

/* `with Profiler(...) as prof:` closes it at the end; an exception leaving the block is
 * looked at first (an out-of-memory error is named) and goes on. */
static PyObject *Profiler_exit(ProfilerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs >= 2 && args[1] != Py_None && self->p != NULL)
        sw_py_oom_seen(self, args[1]);
    profiler_close(self);
    Py_RETURN_FALSE;
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

static PyObject *Profiler_get_run_file(ProfilerObject *self, void *closure) {
    const char *path = NULL;
    if (self->p)
        sw_profiler_run_file(self->p, &path);
    if (path == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(path);
}

static PyObject *Profiler_get_run_file_error(ProfilerObject *self, void *closure) {
    int rc = self->p ? sw_profiler_run_file(self->p, NULL) : SW_ENOTFOUND;
    if (rc == 0 || rc == SW_ENOTFOUND)
        Py_RETURN_NONE;
    char why[640]; /* the file and the cause, as said on stderr */
    const char *text = sw_profiler_run_file_error(self->p, why, sizeof why);
    if (text[0] == '\0')
        text = sw_strerror(rc);
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

static PyObject *Profiler_repr(ProfilerObject *self) {
    return PyUnicode_FromFormat("<stepwatch.Profiler %R%s>", self->name, self->p ? "" : " closed");
}

static PyMethodDef Profiler_methods[] = {
    {"action", (PyCFunction)(void (*)(void))Profiler_action, METH_FASTCALL | METH_KEYWORDS,
     "action($self, /, name, category=None)\n--\n\n"
     "-> Action: the interned action (same object for the same\n"
     "name). category: data, forward, loss, backward, optimizer, zero_grad, callback,\n"
     "collective or other, for a name that does not say it (default: from the name).\n"
     "A name has one category: asking for another raises ValueError."},
    {"begin", (PyCFunction)Profiler_begin, METH_O,
     "begin($self, action, /)\n--\n\n"
     "Open a span."},
    {"end", (PyCFunction)Profiler_end, METH_O,
     "end($self, action, /)\n--\n\n"
     "Close a span."},
    {"record", (PyCFunction)(void (*)(void))Profiler_record, METH_FASTCALL,
     "record($self, action, start_ns, end_ns, /)\n--\n\n"
     "Add a span timed elsewhere."},
    {"phase", (PyCFunction)Profiler_phase, METH_O,
     "phase($self, name, /)\n--\n\n"
     "-> Phase: fit, epoch, train, valid, or a name of your own."},
    {"step", (PyCFunction)(void (*)(void))Profiler_step, METH_FASTCALL,
     "step($self, batch_size=0, /)\n--\n\n"
     "-> Step context manager."},
    {"step_begin", (PyCFunction)(void (*)(void))Profiler_step_begin, METH_FASTCALL,
     "step_begin($self, batch_size=0, /)\n--\n\n"
     "Begin a step (ends an open one, counted as misuse)."},
    {"step_end", (PyCFunction)Profiler_step_end, METH_NOARGS,
     "step_end($self, /)\n--\n\n"
     "End the step."},
    {"checkpoint_bytes", (PyCFunction)Profiler_checkpoint_bytes, METH_O,
     "checkpoint_bytes($self, n, /)\n--\n\n"
     "A checkpoint saved in the open step (or held for the next one) wrote n bytes."},
    {"set_batch_size", (PyCFunction)Profiler_set_batch_size, METH_O,
     "set_batch_size($self, n, /)\n--\n\n"
     "The open step's batch size, once known."},
    {"counter", (PyCFunction)(void (*)(void))Profiler_counter, METH_FASTCALL,
     "counter($self, name, value, /)\n--\n\n"
     "Record a sample of a numeric counter."},
    {"note", (PyCFunction)(void (*)(void))Profiler_note, METH_FASTCALL,
     "note($self, key, value, /)\n--\n\n"
     "A short fact about the run, kept in snapshots, the run file and reports "
     "(value None removes it)."},
    {"snapshot", (PyCFunction)Profiler_snapshot, METH_NOARGS,
     "snapshot($self, /)\n--\n\n"
     "-> Snapshot of everything recorded so far; once closed, of the run as it stood at\n"
     "close (report() and records() as well)."},
    {"report", (PyCFunction)(void (*)(void))Profiler_report, METH_VARARGS | METH_KEYWORDS,
     "report($self, /, format='table', *, width=None, full_names=False, brief=False)\n--\n\n"
     "-> str (see Snapshot.report)."},
    {"records", (PyCFunction)(void (*)(void))Profiler_records, METH_VARARGS | METH_KEYWORDS,
     "records($self, /, phase=None)\n--\n\n"
     "-> list of dicts (pandas.DataFrame(records))."},
    {"functions", (PyCFunction)Profiler_functions, METH_O,
     "functions($self, name, /)\n--\n\n"
     "-> Action: the action, whose function calls are profiled from now on (`with "
     "prof.functions('data'):`)."},
    {"function_stats", (PyCFunction)sw_py_profiler_function_stats, METH_O,
     "function_stats($self, action, /)\n--\n\n"
     "-> stepwatch.functions.FunctionStats: what ran inside the action, in "
     "cProfile's shapes (pstats.Stats(...) reads it; dump_stats(path))."},
    {"function_report", (PyCFunction)(void (*)(void))sw_py_profiler_function_report,
     METH_VARARGS | METH_KEYWORDS,
     "function_report($self, /, action=None, restriction=None, sort='cumulative', "
     "suffix=None, full_paths=False)\n--\n\n"
     "-> str: per action, the table pstats prints."},
    {"collapsed", (PyCFunction)(void (*)(void))sw_py_profiler_collapsed,
     METH_VARARGS | METH_KEYWORDS,
     "collapsed($self, /, action=None)\n--\n\n"
     "-> str: collapsed stacks (flamegraph.pl, speedscope), values in ns."},
    {"function_actions", (PyCFunction)sw_py_profiler_function_actions, METH_NOARGS,
     "function_actions($self, /)\n--\n\n"
     "-> list of the actions whose functions were profiled."},
    {"clear_functions", (PyCFunction)sw_py_profiler_clear_functions, METH_NOARGS,
     "clear_functions($self, /)\n--\n\n"
     "Forget the function profiles recorded so far."},
    {"device_time_info", (PyCFunction)sw_py_profiler_device_time, METH_NOARGS,
     "device_time_info($self, /)\n--\n\n"
     "-> dict (steps_timed, steps_dropped, spans_dropped, warmup_steps, failed) of "
     "the device time (Profiler(device_time=...)), or None without it."},
    {"device_comm_begin", (PyCFunction)sw_py_profiler_comm_begin, METH_NOARGS,
     "device_comm_begin($self, /)\n--\n\n"
     "-> int: a communication interval on the step's stream begins now (GPU events, "
     "docs/device.md); 0 when not timed (no device time, no step timed open)."},
    {"device_comm_end", (PyCFunction)sw_py_profiler_comm_end, METH_O,
     "device_comm_end($self, token, /)\n--\n\n"
     "The interval device_comm_begin() began ends now (0: nothing)."},
    {"device_comm_ns", (PyCFunction)sw_py_profiler_comm_ns, METH_O,
     "device_comm_ns($self, ns, /)\n--\n\n"
     "ns of communication on the device timed elsewhere (NCCL's own timing), counted in "
     "the step open now."},
    {"name_thread", (PyCFunction)Profiler_name_thread, METH_O,
     "name_thread($self, name, /)\n--\n\n"
     "The calling thread's name in the run file and the Chrome trace "
     "(threading.current_thread().name, say); until then it has the system's name."},
    {"rank_payload", (PyCFunction)(void (*)(void))sw_py_profiler_rank_payload,
     METH_VARARGS | METH_KEYWORDS,
     "rank_payload($self, /, rank=0, world_size=0)\n--\n\n"
     "-> bytes: this rank's run summed up in RANK_PAYLOAD_SIZE bytes, as rank of "
     "world_size in the transport (0: the profiler's own), what "
     "stepwatch.distributed gathers to rank 0 (docs/ranks.md)."},
    {"add_ranks", (PyCFunction)(void (*)(void))sw_py_profiler_add_ranks,
     METH_VARARGS | METH_KEYWORDS,
     "add_ranks($self, /, payloads, world_size, final=False)\n--\n\n"
     "-> bool: keep a round of gathered payloads in the run file (rank 0's); False "
     "without a run file."},
    {"set_clock_offset", (PyCFunction)sw_py_profiler_set_clock_offset, METH_O,
     "set_clock_offset($self, ns, /)\n--\n\n"
     "-> bool: this rank's wall clock minus rank 0's, kept in the run file's "
     "metadata (exports put the ranks on one clock); False without a run file."},
    {"set_world_size", (PyCFunction)sw_py_profiler_set_world_size, METH_O,
     "set_world_size($self, n, /)\n--\n\n"
     "The number of ranks, learned after the profiler was made (Lightning starts the\n"
     "other ranks itself): the snapshots and the run file's metadata say n from now on."},
    {"close", (PyCFunction)Profiler_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Complete the run file and free the core profiler. Idempotent; actions become no-ops.\n"
     "Called while an out-of-memory error is being handled (except, finally), it first\n"
     "names where that error happened (docs/python.md)."},
    {"__enter__", (PyCFunction)Profiler_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "-> the profiler."},
    {"__exit__", (PyCFunction)(void (*)(void))Profiler_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\n"
     "Close the profiler (an out-of-memory error leaving the block is named first); never\n"
     "suppresses an exception."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Profiler_getset[] = {
    {"enabled", (getter)Profiler_get_enabled, (setter)Profiler_set_enabled,
     "Recording on/off (one relaxed atomic load on the hot path).", NULL},
    {"step_count", (getter)Profiler_get_step_count, NULL, "Steps begun so far.", NULL},
    {"step_index", (getter)Profiler_get_step_index, NULL,
     "Global index of the open step, -1 outside a step.", NULL},
    {"closed", (getter)Profiler_get_closed, NULL, "True after close().", NULL},
    {"run_file", (getter)Profiler_get_run_file, NULL,
     "The run file's path ({rank}/{pid} expanded), or None when none was asked for.", NULL},
    {"run_file_error", (getter)Profiler_get_run_file_error, NULL,
     "None while the run file is written; else why not (it could not be created, the disk "
     "is full, ...). A run file never stops the program: one line on stderr said why.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Profiler_members[] = {
    {"name", T_OBJECT, offsetof(ProfilerObject, name), READONLY, "The run name."},
    {"flops", T_OBJECT, offsetof(ProfilerObject, flops), READONLY,
     "Profiler(flops=...)'s stepwatch.flops.Watch until close(), else None."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ProfilerObject, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Profiler_slots[] = {
    {Py_tp_doc,
     "Profiler(name=None, warmup_steps=0, run_file=None, timeline=False, max_depth=0, "
     "rank=0, world_size=0, command=None, enabled=True, ring_capacity=0, on_full='drop', "
     "functions=None, builtins=False, live=None, local_rank=0, device_stats=False, "
     "device_time=False, clock=None, memory=None, modules=False, flops=None)\n--\n\n"
     "One stepwatch profiler (sw_profiler). Actions, phases and steps are recorded in C.\n"
     "ring_capacity: events buffered per thread for the run file (0 = 65536). on_full: when\n"
     "the run file's writer falls behind, 'drop' counts and drops events (training never\n"
     "waits), 'block' waits for the writer (a complete timeline, may slow training).\n"
     "functions: action names whose function calls are profiled (see functions(name));\n"
     "builtins: also record C builtins, as cProfile does (slower: the interpreter's\n"
     "tracing hook); by default Python functions only, a builtin's time in its caller.\n"
     "live: the status line on stderr while the run goes on; None = when stderr is "
     "a terminal\n"
     "(or as `stepwatch run --live/--no-live` says), True = always, False = never.\n"
     "device_stats: True (every 0.5 s) or an interval in seconds: sample CPU, memory, GPUs\n"
     "(NVML) and torch's CUDA allocator into counters. device_time: True: the GPU time of\n"
     "each phase from torch.cuda.Event, never synchronizing (docs/device.md).\n"
     "memory: memory per step, the RSS and (once torch has initialized CUDA) the CUDA\n"
     "allocator's allocated, peak and reserved bytes; None = on unless\n"
     "STEPWATCH_STEP_MEMORY=0 (docs/python.md, Memory per step).\n"
     "clock: None (SW_CLOCK in the environment, else CLOCK_MONOTONIC), "
     "'monotonic', or 'tsc':\n"
     "the x86-64 time-stamp counter where invariant, for the whole process (else monotonic,\n"
     "said on stderr); stepwatch.clock_in_use() tells which.\n"
     "modules: True (every 10th step) or a step interval k: the forward and backward time\n"
     "of each nn.Module, self and cumulative, and its memory, every k-th step; the module\n"
     "an out-of-memory error comes from is named (docs/python.md).\n"
     "flops: True, or a dict of stepwatch.flops.watch's options (flops_per_batch, length_fn,\n"
     "peak_flops): one training step's FLOPs counted per input shape; TFLOP/s, MFU, tokens/s\n"
     "and goodput in the notes at close (docs/efficiency.md); the Watch is prof.flops."},
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

PyType_Spec sw_py_profiler_spec = {
    .name = "stepwatch.Profiler",
    .basicsize = sizeof(ProfilerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = Profiler_slots,
};
