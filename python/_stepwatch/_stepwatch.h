/*
 * _stepwatch.h — what the extension's C files share (internal; not installed).
 *
 * The extension is laid out like CPython's multi-file modules (Modules/_sqlite/, _io/):
 * one file per type or concern, this header for the module state, the object layouts more
 * than one file reads, and the type specs and helpers the files hand each other. Every
 * name shared between the files starts with sw_py_. README.md (this folder) lists the
 * files: the module, the core's types and features, and one room per framework.
 *
 * Dependencies point down: the type files call _util.c, each other's helpers below them,
 * _module_def.c and the core (stepwatch.h); only _stepwatch.c knows every type (the
 * `layers` test checks it).
 */
#ifndef SW_PY_STEPWATCH_H
#define SW_PY_STEPWATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stepwatch.h"

/* ------------------------------------------------------------------------------------------
 * Module state (_stepwatch.c). No C globals: everything a module instance owns is here.
 * ---------------------------------------------------------------------------------------- */

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
    PyTypeObject *fitmarks_type;
    PyTypeObject *handler_timer_type;
    PyTypeObject *spans_type;
    PyTypeObject *scope_type;
    PyTypeObject *intervals_type;
    PyTypeObject *fire_event_type;
    PyTypeObject *live_type;
    PyTypeObject *modules_type;
    PyTypeObject *modules_hook_type;
    PyTypeObject *node_hook_type;
    PyTypeObject *collectives_type;
    PyTypeObject *collective_wait_type;
    PyObject *error;           /* stepwatch.Error */
    PyObject *update_wrapper;  /* functools.update_wrapper, for the decorator form */
    PyObject *shape_name;      /* the interned string "shape", for batch_size() */
    PyObject *on_new_profiler; /* _watch_profilers(callback): stepwatch.autorun's, or NULL */
} module_state;

static inline module_state *sw_py_state_of_module(PyObject *module) {
    return (module_state *)PyModule_GetState(module);
}

/* The module's definition (_module_def.c), the identity PyType_GetModuleByDef looks for.
 * It is a file of its own, below every other: the type files need the definition to find
 * the state, and _stepwatch.c, which registers the types, fills in the rest of it (its
 * functions, exec slot and GC hooks) at PyInit__stepwatch, so no type file depends on the
 * file that registers it. The getters are inline here, as CPython's Modules/_io/_iomodule.h
 * has them. */
extern PyModuleDef sw_py_module_def;

/* The state of the module that defined tp (or one of its bases: Profiler and Timer may be
 * subclassed). NULL with an exception set when there is none. */
static inline module_state *sw_py_state_of_type(PyTypeObject *tp) {
    PyObject *module = PyType_GetModuleByDef(tp, &sw_py_module_def);
    return module ? sw_py_state_of_module(module) : NULL;
}

/* The type specs, one per type; _stepwatch.c makes the types from them at module exec. */
extern PyType_Spec sw_py_profiler_spec; /* _profiler.c */
/* _watch_profilers(callback or None): callback(None) before each Profiler is made, then
 * callback(profiler) (_profiler.c; stepwatch.autorun hands its run to the program's). */
PyObject *sw_py_watch_profilers(PyObject *module, PyObject *callback);
extern PyType_Spec sw_py_action_spec; /* _actions.c */
extern PyType_Spec sw_py_prebound_spec;
extern PyType_Spec sw_py_timed_spec;
extern PyType_Spec sw_py_phase_spec;
extern PyType_Spec sw_py_step_spec;
extern PyType_Spec sw_py_snapshot_spec; /* _snapshot.c */
extern PyType_Spec sw_py_timer_spec;    /* _ignite_timer.c */
extern PyType_Spec sw_py_loop_spec;     /* _torch_loop.c */
extern PyType_Spec sw_py_hook_spec;     /* _torch_loop_hooks.c */
extern PyType_Spec sw_py_marks_spec;    /* _ignite.c */
extern PyType_Spec sw_py_handler_timer_spec;
extern PyType_Spec sw_py_fitmarks_spec; /* _fastai.c */
extern PyType_Spec sw_py_spans_spec;    /* _lightning.c */
extern PyType_Spec sw_py_scope_spec;
extern PyType_Spec sw_py_intervals_spec;  /* _thunder.c */
extern PyType_Spec sw_py_fire_event_spec; /* _ignite_fire_event.c */
extern PyType_Spec sw_py_modules_spec;    /* _modules.c */
extern PyType_Spec sw_py_modules_hook_spec;
extern PyType_Spec sw_py_node_hook_spec;
extern PyType_Spec sw_py_collectives_spec; /* _collectives.c */
extern PyType_Spec sw_py_collective_wait_spec;
/* A framework's module functions, in its room; _stepwatch.c adds them at exec. */
extern PyMethodDef sw_py_ignite_functions[];      /* _ignite.c: Ignite's print_results texts */
extern PyMethodDef sw_py_fastai_functions[];      /* _fastai.c: fastxtend's scale_time */
extern PyMethodDef sw_py_collectives_functions[]; /* _collectives.c: quiet() */

/* ------------------------------------------------------------------------------------------
 * The program's exception, set aside
 * ---------------------------------------------------------------------------------------- */

/* Where stepwatch's own work runs while an exception is on its way (after the user's call it
 * wraps raised, in a hook firing as a frame unwinds), that exception waits aside: the work
 * may run Python (a lookup, a function profiler's watcher, a device clock, torch's
 * allocator), and Python run with an exception set loses it or turns it into a SystemError.
 * sw_py_put_back restores it as it was (type, value, traceback) and drops whatever the work
 * left set; with nothing set aside it only clears. 3.12 has one object for the three. */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *type, *value, *traceback;
#endif
} sw_py_aside;

static inline void sw_py_set_aside(sw_py_aside *aside) {
#if PY_VERSION_HEX >= 0x030C0000
    aside->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&aside->type, &aside->value, &aside->traceback);
#endif
}

static inline void sw_py_put_back(sw_py_aside *aside) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(aside->exc);
#else
    PyErr_Restore(aside->type, aside->value, aside->traceback);
#endif
}

/* The exception set aside, as one object with its traceback (borrowed; NULL when none): what
 * a look at the exception itself needs (is it an out-of-memory error? where from?). */
static inline PyObject *sw_py_aside_exception(sw_py_aside *aside) {
#if PY_VERSION_HEX >= 0x030C0000
    return aside->exc;
#else
    PyErr_NormalizeException(&aside->type, &aside->value, &aside->traceback);
    if (aside->value != NULL && aside->traceback != NULL)
        PyException_SetTraceback(aside->value, aside->traceback);
    return aside->value;
#endif
}

/* ------------------------------------------------------------------------------------------
 * Object layouts read by more than one file
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_py_funcs sw_py_funcs;   /* _funcprof.c */
typedef struct sw_py_memory sw_py_memory; /* _memory.c */

typedef struct {
    PyObject_HEAD sw_profiler *p; /* NULL once closed */
    sw_py_funcs *funcs;           /* the function profiler, made by the first function action */
    int builtins;                 /* it records C builtins too (Profiler(builtins=...)) */
    PyObject *actions;            /* name -> Action */
    PyObject *phases;             /* name -> Phase */
    PyObject *counters;           /* name -> int counter id */
    PyObject *name;               /* the run name, for repr */
    PyObject *weakrefs;           /* weak references to it (its device samplers hold one) */
    const char *events_in;        /* device time's events: "C" (the CUDA runtime), "Python", NULL */
    sw_py_memory *memory;         /* the CUDA allocator's memory per step; NULL: memory=False */
    PyObject *modules; /* Profiler(modules=...): stepwatch._modules' ModuleTimes, or NULL */
    PyObject *flops;   /* Profiler(flops=...): stepwatch.flops' Watch, or NULL */
    PyObject *final;   /* the Snapshot taken at close: what report() and snapshot() give then */
    PyObject *gc;      /* its callable in gc.callbacks (_gc.c), or NULL */
    sw_device_timing *timing; /* its device timing, asked once when made; NULL: none */
} ProfilerObject;

/* Action, Phase and Step: small objects of one profiler, sharing one layout (and so one
 * traverse and dealloc). */
typedef struct {
    PyObject_HEAD ProfilerObject *owner; /* strong reference; owner->p is read on every call */
    union {
        uint32_t id;         /* Action: its sw_id; Phase: its sw_phase */
        uint32_t batch_size; /* Step */
    };
    PyObject *name;  /* NULL for a Step */
    PyObject *enter; /* Action, Phase: their __enter__ and __exit__, bound once (see */
    PyObject *exit;  /* Prebound in _actions.c); NULL for a Step */
} NamedObject;
typedef NamedObject ActionObject;
typedef NamedObject PhaseObject;
typedef NamedObject StepObject;

/* ------------------------------------------------------------------------------------------
 * _actions.c: making Actions, Phases and Steps (Profiler caches and hands them out)
 * ---------------------------------------------------------------------------------------- */

/* A new Action (is_phase 0) or Phase (is_phase 1) of owner, for the core's id, with its
 * __enter__/__exit__ bound. New reference; NULL with an exception set. */
PyObject *sw_py_named_new(module_state *st, ProfilerObject *owner, PyObject *name, uint32_t id,
                          int is_phase);

/* A new Step of owner with batch_size. New reference. */
PyObject *sw_py_step_new(module_state *st, ProfilerObject *owner, uint32_t batch_size);

/* Action.record(start_ns, end_ns) on action (Profiler.record shares it). */
PyObject *sw_py_action_record(ActionObject *action, PyObject *const *args, Py_ssize_t nargs);

/* Make owner's (Action's, Phase's) __enter__ and __exit__ Prebound descriptors (module
 * exec). */
int sw_py_add_prebound(PyTypeObject *prebound_type, PyTypeObject *owner);

/* ------------------------------------------------------------------------------------------
 * _memory.c: memory per step (torch's CUDA allocator, read without a synchronization)
 * ---------------------------------------------------------------------------------------- */

/* The allocator's reader of a profiler (Profiler(memory=True)); NULL with an exception. */
sw_py_memory *sw_py_memory_new(void);
void sw_py_memory_free(sw_py_memory *m); /* NULL is fine */
int sw_py_memory_traverse(sw_py_memory *m, visitproc visit, void *arg);
/* The open step's allocator figures into the core (sw_step_memory) when torch has
 * initialized CUDA; nothing otherwise. Never raises (a failure turns it off, with a note). */
void sw_py_step_memory(sw_py_memory *m, sw_profiler *p);
/* End owner's open step at end_ns (0: now) with its memory: how every front end of the
 * extension ends a step. Keeps a pending exception as it was. */
void sw_py_step_end(ProfilerObject *owner, uint64_t end_ns);

/* ------------------------------------------------------------------------------------------
 * _gc.c: Python's collections, timed into the open step (docs/slow-steps.md)
 * ---------------------------------------------------------------------------------------- */

/* Put a callable timing p's collections into gc.callbacks; it, or NULL (STEPWATCH_GC=0, or
 * it could not: no error set, slow steps go on without the collector). */
PyObject *sw_py_gc_start(sw_profiler *p);
/* Its profiler goes: it records nothing more (dealloc: nothing else may run); stop also
 * takes it out of gc.callbacks and keeps any pending exception. NULL is fine. */
void sw_py_gc_forget(PyObject *fn);
void sw_py_gc_stop(PyObject *fn);

/* ------------------------------------------------------------------------------------------
 * _oom.c: where an out-of-memory error happened (stepwatch/_oom.py does the work)
 * ---------------------------------------------------------------------------------------- */

/* exc left what owner (may be NULL) watches: when it is an out-of-memory error no one named
 * yet, stepwatch._oom names where it happened from its traceback (stderr, run-file notes).
 * Only a RuntimeError is looked at; never raises; a pending exception stays pending. */
void sw_py_oom_seen(ProfilerObject *owner, PyObject *exc);
/* The same for the exception pending now (it stays pending, its traceback attached). */
void sw_py_oom_seen_pending(ProfilerObject *owner);
/* Is exc an out-of-memory error not named yet? (Profiler(modules=...)'s hook asks, then
 * names the module itself with sw_py_oom_report: stepwatch._oom writes the line and notes.) */
int sw_py_oom_unnamed(PyObject *exc);
void sw_py_oom_report(ProfilerObject *owner, PyObject *exc, PyObject *path, const char *phase);

/* ------------------------------------------------------------------------------------------
 * _snapshot.c: Snapshot objects (Profiler.snapshot() and load() make them)
 * ---------------------------------------------------------------------------------------- */

/* A Snapshot owning s (freed here on failure). New reference. */
PyObject *sw_py_snapshot_wrap(module_state *st, sw_snapshot *s);

/* The snapshot a Snapshot object holds, or NULL (no exception) when obj is not one. */
const sw_snapshot *sw_py_snapshot_of(module_state *st, PyObject *obj);
/* Parse a format name ("table", "json", ...) into *out; ValueError and -1 on an unknown one. */
int sw_py_parse_format(const char *name, sw_format *out);

/* Snapshot.report(format='table') and Snapshot.records(phase=None) on a Snapshot (Profiler's
 * report() and records() share them). */
PyObject *sw_py_snapshot_report(PyObject *snapshot, PyObject *args, PyObject *kwargs);
PyObject *sw_py_snapshot_records(PyObject *snapshot, PyObject *args, PyObject *kwargs);

/* ------------------------------------------------------------------------------------------
 * _runfile.c: the module functions over the run-file reader
 * ---------------------------------------------------------------------------------------- */

PyObject *sw_py_load(PyObject *module, PyObject *path);
PyObject *sw_py_load_steps(PyObject *module, PyObject *path);
/* run_ranks(path, format='table', top=3) -> str: the cross-rank view of a run file. */
PyObject *sw_py_run_ranks(PyObject *module, PyObject *args, PyObject *kwargs);

/* ------------------------------------------------------------------------------------------
 * _ranks.c: many ranks (stepwatch/ranks.h)
 * ---------------------------------------------------------------------------------------- */

/* ranks_view(payloads, world_size, format='table', top=3) -> str. */
PyObject *sw_py_ranks_view(PyObject *module, PyObject *args, PyObject *kwargs);
/* The view of an open run file as text (run_ranks). */
PyObject *sw_py_run_ranks_text(PyObject *module, sw_run *run, const char *fmt, int top);
/* Profiler.rank_payload(rank=0, world_size=0), .add_ranks(payloads, world_size, final=False),
 * .set_clock_offset(ns), .set_world_size(n) (docs in _profiler.c's method table). */
PyObject *sw_py_profiler_rank_payload(ProfilerObject *self, PyObject *args, PyObject *kwargs);
PyObject *sw_py_profiler_add_ranks(ProfilerObject *self, PyObject *args, PyObject *kwargs);
PyObject *sw_py_profiler_set_clock_offset(ProfilerObject *self, PyObject *arg);
PyObject *sw_py_profiler_set_world_size(ProfilerObject *self, PyObject *arg);

/* Open the run file at path (str or os.PathLike); NULL with FileNotFoundError or
 * stepwatch.Error set. The caller closes it with sw_run_close. */
sw_run *sw_py_open_run(module_state *st, PyObject *path);

/* ------------------------------------------------------------------------------------------
 * _analysis.c: html(), export_chrome(), diagnose(), compare() over the C analyses
 * ---------------------------------------------------------------------------------------- */

PyObject *sw_py_html(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *sw_py_export_chrome(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *sw_py_diagnose(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sw_py_compare(PyObject *module, PyObject *args, PyObject *kwargs);

/* ------------------------------------------------------------------------------------------
 * _live.c: Live, the figures of the last seconds of a running profiler (sw_live_*)
 * ---------------------------------------------------------------------------------------- */

extern PyType_Spec sw_py_live_spec;

/* ------------------------------------------------------------------------------------------
 * _funcprof.c: the function profiler of one Profiler (its watcher on the core profiler)
 * ---------------------------------------------------------------------------------------- */

/* A function profiler watching p's function actions; builtins: also C builtins (the profile
 * hook on 3.11, sys.monitoring from 3.12 on), else Python functions only (the frame
 * evaluation hook; sys.monitoring on 3.12). NULL + exception. */
sw_py_funcs *sw_py_funcs_new(sw_profiler *p, int builtins);
/* Before p is freed: end this thread's open function actions and stop watching. */
void sw_py_funcs_close(sw_py_funcs *f);
void sw_py_funcs_free(sw_py_funcs *f); /* closes first; NULL is a no-op */
/* Profile the functions of a span of action that the core records after the fact
 * (sw_record): begins 1 before it, 0 after it, on the recording thread (the torch Loop's
 * data fetch). */
void sw_py_funcs_span(sw_py_funcs *f, sw_id action, int begins);
/* Waits out the clock's calibration without the GIL (call first, with nothing borrowed from f). */
void sw_py_funcs_calibrate(sw_py_funcs *f);
/* Forget what was recorded (actions still open keep recording into the old profile). */
int sw_py_funcs_clear(sw_py_funcs *f);
/* What was recorded, and (if objects) the list naming each function: its code object, or a
 * built-in's label. Borrowed, valid until the next clear; NULL + exception. */
const sw_fprofile *sw_py_funcs_profile(sw_py_funcs *f, PyObject **objects);
/* _function_hook_state() -> dict: this thread's hook ("off", "eval", "profile",
 * "monitoring"), open
 * function actions and shadow depth, and whether the frame evaluation hook is installed. For
 * tests: "costs nothing when off" is checked through it. */
PyObject *sw_py_funcs_thread_state(PyObject *module, PyObject *unused);
/* _function_hook_floor(kind): the hook of a detail ("python", "builtins") or a named one
 * ("profile", "eval") installed doing nothing (passing every frame through, callbacks that
 * return at once); None takes them off: what the interpreter's hooks cost before any
 * profiler records anything (bench_functions.py). */
PyObject *sw_py_funcs_floor(PyObject *module, PyObject *kind);

/* ------------------------------------------------------------------------------------------
 * _funcstats.c: the Profiler's function-profiling methods
 * ---------------------------------------------------------------------------------------- */

/* Profile the functions of action id of self (made on first use). -1 + exception. */
int sw_py_profiler_watch(ProfilerObject *self, sw_id id);
/* Profiler.function_stats(action), .function_report(...), .function_actions(),
 * .collapsed(action=None), .clear_functions() (docs in _profiler.c's method table). */
PyObject *sw_py_profiler_function_stats(ProfilerObject *self, PyObject *action);
PyObject *sw_py_profiler_function_report(ProfilerObject *self, PyObject *args, PyObject *kwargs);
PyObject *sw_py_profiler_function_actions(ProfilerObject *self, PyObject *unused);
PyObject *sw_py_profiler_collapsed(ProfilerObject *self, PyObject *args, PyObject *kwargs);
PyObject *sw_py_profiler_clear_functions(ProfilerObject *self, PyObject *unused);

/* ------------------------------------------------------------------------------------------
 * _device.c: device statistics and device time
 * ---------------------------------------------------------------------------------------- */

/* _device_reader(gpus) -> capsule; _device_read(reader) -> dict (module functions). */
PyObject *sw_py_device_reader(PyObject *module, PyObject *gpus);
PyObject *sw_py_device_read(PyObject *module, PyObject *capsule);
/* Profiler(device_stats=, device_time=) on self's new profiler; -1 + exception. */
int sw_py_device_start(ProfilerObject *self, PyObject *stats, PyObject *timing);
/* Profiler.device_time_info() -> dict, or None without device time. */
PyObject *sw_py_profiler_device_time(ProfilerObject *self, PyObject *unused);
/* Profiler.device_comm_begin() -> int token (0: not timed) and device_comm_end(token): a
 * communication interval on the step's stream (sw_device_interval_on). */
PyObject *sw_py_profiler_comm_begin(ProfilerObject *self, PyObject *unused);
PyObject *sw_py_profiler_comm_end(ProfilerObject *self, PyObject *token);
/* Profiler.device_comm_ns(ns): communication timed elsewhere (sw_device_comm_ns). */
PyObject *sw_py_profiler_comm_ns(ProfilerObject *self, PyObject *ns);

/* ------------------------------------------------------------------------------------------
 * _util.c: shared helpers
 * ---------------------------------------------------------------------------------------- */

/* Raise the Python exception for a negative SW_E* code (MemoryError, ValueError, else
 * stepwatch.Error with .code and .name). `what` names the failed call. Returns NULL. */
PyObject *sw_py_raise(module_state *st, int rc, const char *what);
/* stepwatch.Error (SW_EIO) for a write to path that failed with errno err (0: EIO): "what:
 * cannot write path: No space left on device". NULL. */
PyObject *sw_py_raise_write(module_state *st, const char *what, const char *path, int err);

/* A batch size argument: a non-negative int that fits 32 bits; else -1 and ValueError. */
int sw_py_parse_batch_size(PyObject *obj, uint32_t *out);
/* An unsigned argument named what (say "Profiler: warmup_steps"): an int from 0 to max;
 * else -1 and TypeError (not an int), ValueError (negative) or OverflowError (over max) --
 * never wrapped (-1 became 4,294,967,295, and 2**32+3 became 3). */
int sw_py_parse_uint(PyObject *obj, const char *what, unsigned long max, unsigned int *out);
/* A name (action, phase, counter, note, thread) as UTF-8; NULL and ValueError when it holds a
 * NUL ("a\0b" and "a\0c" were one name), or the str's own error. */
const char *sw_py_name_utf8(PyObject *name, const char *what);

/* Set d[key] = value, stealing value (NULL: an error already set); -1 on error. */
int sw_py_dict_put(PyObject *d, const char *key, PyObject *value);

/* s decoded as UTF-8 (bad bytes replaced), or None for NULL. New reference. */
PyObject *sw_py_str_or_none(const char *s);

/* What a C writer wrote into a FILE, as str: write(ctx, f) returns 0 or an SW_E* code, which
 * is raised (named `what`). Runs without the GIL: write must not touch Python objects. */
typedef int (*sw_py_writer)(void *ctx, FILE *f);
PyObject *sw_py_text_of(module_state *st, sw_py_writer write, void *ctx, const char *what);

/* tp_descr_get of callables that bind like functions (a method gets its instance). */
PyObject *sw_py_bind_as_method(PyObject *self, PyObject *obj, PyObject *type);

/* Samples in a batch (first dimension of its first array-like); 0 when unknown, never an
 * exception. shape_name: the interned string "shape". */
uint32_t sw_py_batch_size(PyObject *batch, PyObject *shape_name);
/* That first array-like (borrowed from batch: a tuple's or list's first item, a mapping's
 * first value, down to 4 levels), NULL for an empty batch; never an exception. */
PyObject *sw_py_batch_leaf(PyObject *batch, PyObject *shape_name);

/* The id of obj, an Action or Phase (type) of profiler, into *id; else -1 and a TypeError
 * that starts with who. */
int sw_py_named_id(PyObject *obj, PyTypeObject *type, ProfilerObject *profiler, const char *who,
                   const char *what, uint32_t *id);

#endif
