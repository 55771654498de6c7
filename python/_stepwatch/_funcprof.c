/*
 * _funcprof.c — the function profiler: every Python function (and, with builtins=True, every
 * C builtin) called inside chosen actions, per action, counted as cProfile counts, into call
 * trees (stepwatch/functions.h).
 *
 * Switching. The Profiler marks its function actions watched (sw_watch); the core calls
 * fp_watch on the thread that opens or closes one, whichever front end does it (a `with`, a
 * Lightning hook, the torch Loop). The first open action on a thread switches a hook on for
 * that thread, the last one to close switches it off: nothing runs while none is open.
 *
 * Two hooks, one bookkeeping (the thread's sw_fstack, src/funcs/fstack.c):
 *   - builtins=False: the frame evaluation function (PEP 523). The interpreter calls it for
 *     every Python frame it runs, a new call or a generator or coroutine resumed, and it
 *     times the frame around the default evaluator. Nothing else changes: on 3.11 a profile
 *     function (below) makes the interpreter run every instruction through its tracing path
 *     with specialization off, which alone costs about two thirds of what cProfile adds;
 *     this hook costs one C call per Python call. It is per interpreter, so it passes
 *     through at once on threads with no open function action. It sees no C functions:
 *     their time stays in their Python caller.
 *   - builtins=True on 3.11: the profile function (PyEval_SetProfile, this thread only),
 *     which also sees C builtins, as cProfile does.
 *   - builtins=True from 3.12 on: sys.monitoring (PEP 669), the events cProfile itself
 *     records through there: PY_START/RESUME/THROW begin a Python call, PY_RETURN/YIELD/
 *     UNWIND end it, CALL begins a C builtin's call and C_RETURN/C_RAISE end it. Only the
 *     instructions that fire events leave their fast paths; a profile function (built on
 *     the same events on 3.12) also makes a frame object per call and reports every C call.
 *     The events are per interpreter: other threads pay the call of a callback that returns
 *     at once, and only while some thread has a function action open.
 * On 3.12 the interpreter resumes some generators and coroutines inside the running frame
 * (SEND_GEN), without the frame evaluation function: there builtins=False takes
 * sys.monitoring too, without the C events, so every resume is counted (3.11 and 3.13 both
 * call the evaluation function for every resume).
 * Where sys.monitoring has no free tool id (see monitor_acquire), the profile function
 * stands in.
 *
 * Per call the work is a hash probe (keyed by the code object's or C function's address)
 * and two reads of the time-stamp counter; no Python object is made after a function's
 * first call (its label is made then, once). cProfile by comparison looks the function up in
 * a splay tree, the caller/callee pair in another, keeps recursion levels for both, and on
 * 3.11 reads its clock through the same tracing path.
 *
 * Threads and the GIL. Everything here runs with the GIL held (hooks, the watcher checks),
 * so the trees of a profiler need no lock; each thread has its own shadow stack (TLS) and
 * its own trees. Fork: a child starts with the hooks off and, at first use, empty profiles.
 */
#include "_stepwatch.h"

#include <frameobject.h>
#if PY_VERSION_HEX < 0x030C0000
/* 3.11 has no public accessor for a frame's code object: the frame's layout is read from the
 * interpreter's own header (PyUnstable_InterpreterFrame_GetCode from 3.12 on). */
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FP_LIKELY(x) __builtin_expect(!!(x), 1)
#define FP_UNLIKELY(x) __builtin_expect(!!(x), 0)

enum { FP_OFF = 0, FP_EVAL, FP_PROFILE, FP_MONITOR };

#if PY_VERSION_HEX >= 0x030C0000
#define FP_HAVE_MONITORING 1
#else
#define FP_HAVE_MONITORING 0
#endif

/* One generation of a profiler's function profile. clear() starts a new one; an action
 * still open keeps the old one alive (refs) until it ends. */
typedef struct fp_data {
    sw_fprofile *fp;
    PyObject *objects; /* list, by function index: the code object (kept alive, so its address
                          names no other function), a built-in's label, or None */
    Py_ssize_t refs;   /* the owner's and one per open action */
    uint64_t serial;   /* never reused: tells cached trees of old generations apart */
} fp_data;

struct sw_py_funcs {
    sw_profiler *p;
    int builtins;
    fp_data *data;
    unsigned fork_gen; /* the process generation data was made in */
};

typedef struct fp_cached_tree {
    uint64_t serial;
    sw_id action;
    sw_ftree *tree;
} fp_cached_tree;

typedef struct fp_thread {
    sw_fstack *stack;
    fp_data *data[SW_FSTACK_MAX_OPEN]; /* of each open action */
    int engine;
    int c_calls;             /* the profile or monitoring hook records C builtins */
    Py_tracefunc saved_func; /* a profile function we displaced (restored when done) */
    PyObject *saved_obj;
    fp_cached_tree *trees; /* this thread's trees, by (data serial, action) */
    uint32_t ntrees, trees_cap;
    uint64_t calls_begun; /* the monitoring hook's depth of calls (depth_begin) */
} fp_thread;

/* ---- process-wide state (the hooks are per thread and per interpreter; GIL-protected) ---- */

static _Thread_local fp_thread *tls_thread;
static pthread_key_t thread_key; /* frees a thread's fp_thread at its exit */
static pthread_once_t process_once = PTHREAD_ONCE_INIT;
static unsigned fork_gen;
static uint64_t next_serial = 1;
static struct {
    PyInterpreterState *interp;
    _PyFrameEvalFunction prev; /* what ran frames before us */
    int installed;
    int threads; /* threads with open actions on this hook */
} eval_hook;

/* ---- functions: a label the first time a key is seen ---------------------------------------- */

/* The name cProfile gives a C function (_lsprof's normalizeUserObj). New reference. */
static PyObject *builtin_label(PyCFunctionObject *fn) {
    PyObject *self = fn->m_self, *module = fn->m_module;
    if (self == NULL) {
        PyObject *modname = NULL;
        if (module && PyUnicode_Check(module))
            modname = Py_NewRef(module);
        else if (module && PyModule_Check(module) && !(modname = PyModule_GetNameObject(module)))
            PyErr_Clear();
        PyObject *r;
        if (modname && PyUnicode_CompareWithASCIIString(modname, "builtins") != 0)
            r = PyUnicode_FromFormat("<%U.%s>", modname, fn->m_ml->ml_name);
        else
            r = PyUnicode_FromFormat("<%s>", fn->m_ml->ml_name);
        Py_XDECREF(modname);
        return r;
    }
    PyObject *name = PyUnicode_FromString(fn->m_ml->ml_name);
    if (name) {
        PyObject *descr = _PyType_Lookup(Py_TYPE(self), name); /* borrowed */
        Py_DECREF(name);
        if (descr) {
            PyObject *r = PyObject_Repr(descr);
            if (r)
                return r;
        }
    }
    PyErr_Clear();
    if (module && PyUnicode_Check(module))
        return PyUnicode_FromFormat("<built-in method %U.%s>", module, fn->m_ml->ml_name);
    return PyUnicode_FromFormat("<built-in method %s>", fn->m_ml->ml_name);
}

/* A C method descriptor called on self ("list.append" through `xs.append(1)`, as the
 * monitoring CALL event reports it) bound to self, as cProfile names it. New reference. */
static PyObject *bound_builtin(PyObject *descr, PyObject *self) {
    if (PyCFunction_Check(descr))
        return Py_NewRef(descr);
    PyObject *fn = Py_TYPE(descr)->tp_descr_get(descr, self, (PyObject *)Py_TYPE(self));
    if (fn && !PyCFunction_Check(fn))
        Py_CLEAR(fn);
    return fn;
}

/* Add the function keyed key, named by obj (a code object; or when is_c a PyCFunction, or a
 * method descriptor called on self_arg), to d. Runs inside the hooks, possibly with an
 * exception pending (a generator thrown into): that exception is kept. The function's index,
 * or SW_FNODE_NONE. */
static uint32_t add_function(fp_data *d, uint64_t key, PyObject *obj, PyObject *self_arg,
                             int is_c) {
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    uint32_t index = SW_FNODE_NONE;
    PyObject *keep = NULL;
    sw_func f = {.file = "~", .line = 0};
    if (is_c) {
        PyObject *fn = bound_builtin(obj, self_arg);
        keep = fn ? builtin_label((PyCFunctionObject *)fn) : NULL;
        Py_XDECREF(fn);
        f.name = keep ? PyUnicode_AsUTF8(keep) : NULL;
    } else {
        PyCodeObject *code = (PyCodeObject *)obj;
        keep = Py_NewRef(obj);
        f.file = PyUnicode_AsUTF8(code->co_filename);
        f.line = (uint32_t)code->co_firstlineno;
        f.name = PyUnicode_AsUTF8(code->co_name);
    }
    if (f.file && f.name && sw_fprofile_add_func(d->fp, key, &f, &index) == 0) {
        /* objects[index] = keep; other functions (nested actions) may have taken indexes */
        while (PyList_GET_SIZE(d->objects) < (Py_ssize_t)index)
            if (PyList_Append(d->objects, Py_None) < 0)
                break;
        if (PyList_GET_SIZE(d->objects) == (Py_ssize_t)index)
            PyList_Append(d->objects, keep);
    }
    Py_XDECREF(keep);
    sw_py_put_back(&aside);
    return index;
}

/* A call of the function keyed key begins (an action is open on t); ident names it for its
 * return; obj and self_arg name the function (add_function). Nonzero when it is recorded. */
static inline int fp_enter(fp_thread *t, uint64_t key, uintptr_t ident, PyObject *obj,
                           PyObject *self_arg, int is_c) {
    int r = sw_fstack_enter(t->stack, key, ident);
    if (FP_UNLIKELY(r == 0)) { /* a call path seen for the first time */
        fp_data *d = t->data[sw_fstack_open_count(t->stack) - 1];
        uint32_t func = sw_fprofile_find_func(d->fp, key);
        if (func == SW_FNODE_NONE)
            func = add_function(d, key, obj, self_arg, is_c);
        r = sw_fstack_enter_new(t->stack, key, ident, func);
    }
    return r > 0;
}

static inline int fp_active(const fp_thread *t, int engine) {
    return t != NULL && t->engine == engine && sw_fstack_open_count(t->stack) > 0;
}

/* ---- hook 1: the frame evaluation function (Python functions) --------------------------------- */

static inline PyObject *eval_prev(PyThreadState *ts, struct _PyInterpreterFrame *frame, int exc) {
    return eval_hook.prev(ts, frame, exc);
}

/* The first evaluation of a generator's, coroutine's or async generator's frame only makes
 * the object (RETURN_GENERATOR): cProfile does not count it as a call, nor do we. */
static inline int makes_generator(struct _PyInterpreterFrame *frame, PyCodeObject *code) {
    if (FP_LIKELY(!(code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    return _PyInterpreterFrame_LASTI(frame) < 0;
#else
    return PyUnstable_InterpreterFrame_GetLasti(frame) <= 0;
#endif
}

static PyObject *fp_eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *frame, int exc) {
    fp_thread *t = tls_thread;
    if (FP_LIKELY(!fp_active(t, FP_EVAL)))
        return eval_prev(ts, frame, exc);
#if PY_VERSION_HEX < 0x030C0000
    PyCodeObject *code = frame->f_code;
#else
    PyCodeObject *code = (PyCodeObject *)PyUnstable_InterpreterFrame_GetCode(frame);
    Py_DECREF(code); /* the frame holds it */
#endif
    if (makes_generator(frame, code) ||
        !fp_enter(t, (uint64_t)(uintptr_t)code, (uintptr_t)frame, (PyObject *)code, NULL, 0))
        return eval_prev(ts, frame, exc);
    PyObject *result = eval_prev(ts, frame, exc);
    sw_fstack_leave(t->stack, (uintptr_t)frame);
    return result;
}

static void eval_hook_acquire(void) {
    if (eval_hook.threads++ > 0)
        return;
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != fp_eval_frame) {
        eval_hook.prev = current; /* the default evaluator, or someone else's to chain to */
        eval_hook.interp = interp;
        _PyInterpreterState_SetEvalFrameFunc(interp, fp_eval_frame);
    }
    eval_hook.installed = 1;
}

static void eval_hook_release(void) {
    if (--eval_hook.threads > 0)
        return;
    /* If another evaluator was set over ours, it chains to ours: leave both in place. */
    if (eval_hook.installed &&
        _PyInterpreterState_GetEvalFrameFunc(eval_hook.interp) == fp_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(eval_hook.interp, eval_hook.prev);
    eval_hook.installed = 0;
}

/* ---- hook 2: the profile function (Python functions and C builtins) --------------------------- */

static void profile_off(fp_thread *t) {
    PyObject *obj = t->saved_obj;
    t->saved_obj = NULL;
    PyEval_SetProfile(t->saved_func, obj); /* takes its own reference */
    Py_XDECREF(obj);
    t->saved_func = NULL;
}

static int fp_profile(PyObject *unused, PyFrameObject *frame, int what, PyObject *arg) {
    fp_thread *t = tls_thread;
    if (FP_UNLIKELY(!fp_active(t, FP_PROFILE))) {
        /* left on in a fork child (fork_child reset the thread): take it off */
        if (t && t->engine == FP_PROFILE) {
            t->engine = FP_OFF;
            profile_off(t);
        } else if (t == NULL) {
            PyEval_SetProfile(NULL, NULL);
        }
        return 0;
    }
    switch (what) {
    case PyTrace_CALL: {
        PyCodeObject *code = PyFrame_GetCode(frame);
        fp_enter(t, (uint64_t)(uintptr_t)code, (uintptr_t)frame, (PyObject *)code, NULL, 0);
        Py_DECREF(code); /* the frame holds it; new functions' code objects are kept */
        break;
    }
    case PyTrace_RETURN:
        sw_fstack_leave(t->stack, (uintptr_t)frame);
        break;
    case PyTrace_C_CALL:
        if (t->c_calls && PyCFunction_Check(arg))
            fp_enter(t, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml, (uintptr_t)arg, arg,
                     NULL, 1);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (t->c_calls && PyCFunction_Check(arg))
            sw_fstack_leave(t->stack, (uintptr_t)arg);
        break;
    }
    return 0;
}

/* ---- hook 3: sys.monitoring (3.12+: Python functions, and C builtins as cProfile) ---------- */

#if FP_HAVE_MONITORING
/* The event sets, from sys.monitoring.events: a Python call begins (PY_START, PY_RESUME,
 * PY_THROW) or ends (PY_RETURN, PY_YIELD, PY_UNWIND); a call from Python code begins (CALL:
 * a C builtin's is recorded) or a C one ends (C_RETURN, C_RAISE). */
enum { EV_PY_BEGIN, EV_PY_END, EV_CALL, EV_C_END, EV_SETS };
static const char *const event_names[EV_SETS][3] = {
    {"PY_START", "PY_RESUME", "PY_THROW"},
    {"PY_RETURN", "PY_YIELD", "PY_UNWIND"},
    {"CALL", NULL, NULL},
    {"C_RETURN", "C_RAISE", NULL},
};

static struct {
    int tool;              /* the sys.monitoring tool id held, or -1 */
    int threads;           /* threads with open actions on this hook */
    int c_threads;         /* of them, those recording C builtins (the CALL events are on) */
    int noop;              /* the benchmark's floor: callbacks that return at once */
    long bits[EV_SETS][3]; /* each event's bit (0: none), as event_names */
    long events[EV_SETS];  /* each set's bits */
    PyObject *missing;     /* sys.monitoring.MISSING: CALL's arg0 when there is none */
    PyObject *callbacks[EV_SETS];
    PyObject *noop_callback;
} monitor = {.tool = -1};

/* A call's identity for its return: the thread's depth of begun calls when it began. The
 * events nest strictly on a thread (every begin has its end, innermost first: an exception
 * unwinds each frame with PY_UNWIND, a C call ends with C_RETURN or C_RAISE), so the end
 * event at the same depth is its return; a return of a call begun before the action opened
 * (or before the hook was on) comes at a smaller depth and matches nothing recorded. Cheaper
 * than reading the frame through the thread state; the depth is relative, any start works. */
static inline uintptr_t depth_begin(fp_thread *t) {
    return (uintptr_t)++t->calls_begun;
}

static inline uintptr_t depth_end(fp_thread *t) {
    return (uintptr_t)t->calls_begun--;
}

static void monitor_stop(void);

/* An event with no action open on this thread: another thread's (the events are per
 * interpreter), or one left on in a fork child, where no thread records any more. */
static PyObject *monitor_idle(void) {
    if (monitor.threads == 0 && !monitor.noop)
        monitor_stop();
    Py_RETURN_NONE;
}

static PyObject *mon_py_begin(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    fp_thread *t = tls_thread;
    if (FP_UNLIKELY(!fp_active(t, FP_MONITOR) || nargs < 1))
        return monitor_idle();
    PyObject *code = args[0];
    fp_enter(t, (uint64_t)(uintptr_t)code, depth_begin(t), code, NULL, 0);
    Py_RETURN_NONE;
}

static PyObject *mon_py_end(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    fp_thread *t = tls_thread;
    if (FP_UNLIKELY(!fp_active(t, FP_MONITOR)))
        return monitor_idle();
    sw_fstack_leave(t->stack, depth_end(t));
    Py_RETURN_NONE;
}

/* The C function a call from Python runs, as cProfile takes it: a builtin function or bound
 * builtin method, or a method descriptor called with its self ("xs.append(1)" calls
 * list.append on xs). NULL for anything else (Python functions report their own events). */
static inline PyMethodDef *c_method(PyObject *callable, PyObject *arg0) {
    if (PyCFunction_Check(callable))
        return ((PyCFunctionObject *)callable)->m_ml;
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && arg0 != monitor.missing)
        return ((PyMethodDescrObject *)callable)->d_method;
    return NULL;
}

/* CALL fires for every call from Python code, most of them Python functions': those return
 * before the thread-local lookup. */
static PyObject *mon_c_begin(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    PyMethodDef *ml = nargs == 4 ? c_method(args[2], args[3]) : NULL;
    if (ml == NULL)
        Py_RETURN_NONE;
    fp_thread *t = tls_thread;
    if (FP_UNLIKELY(!fp_active(t, FP_MONITOR)))
        return monitor_idle();
    if (t->c_calls)
        fp_enter(t, (uint64_t)(uintptr_t)ml, depth_begin(t), args[2], args[3], 1);
    Py_RETURN_NONE;
}

static PyObject *mon_c_end(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || c_method(args[2], args[3]) == NULL)
        Py_RETURN_NONE;
    fp_thread *t = tls_thread;
    if (FP_UNLIKELY(!fp_active(t, FP_MONITOR)))
        return monitor_idle();
    if (t->c_calls)
        sw_fstack_leave(t->stack, depth_end(t));
    Py_RETURN_NONE;
}

static PyObject *mon_noop(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    Py_RETURN_NONE;
}

static PyMethodDef callback_defs[EV_SETS + 1] = {
    {"_stepwatch_py_begin", (PyCFunction)(void (*)(void))mon_py_begin, METH_FASTCALL, NULL},
    {"_stepwatch_py_end", (PyCFunction)(void (*)(void))mon_py_end, METH_FASTCALL, NULL},
    {"_stepwatch_c_begin", (PyCFunction)(void (*)(void))mon_c_begin, METH_FASTCALL, NULL},
    {"_stepwatch_c_end", (PyCFunction)(void (*)(void))mon_c_end, METH_FASTCALL, NULL},
    {"_stepwatch_noop", (PyCFunction)(void (*)(void))mon_noop, METH_FASTCALL, NULL},
};

/* sys.monitoring's method name called with args (a Py_BuildValue format). 0, or -1 with an
 * exception. */
static int monitoring_call(const char *method, const char *format, ...) {
    PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
    if (mon == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
        return -1;
    }
    va_list va;
    va_start(va, format);
    PyObject *args = Py_VaBuildValue(format, va);
    va_end(va);
    PyObject *fn = args ? PyObject_GetAttrString(mon, method) : NULL;
    PyObject *r = fn ? PyObject_CallObject(fn, args) : NULL;
    int rc = r ? 0 : -1;
    if (r && strcmp(method, "get_tool") == 0 && r != Py_None)
        rc = 1; /* the id is taken */
    Py_XDECREF(r);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    return rc;
}

/* The event numbers, MISSING and the callbacks, once. 0, or -1 with an exception. */
static int monitor_init(void) {
    if (monitor.missing)
        return 0;
    PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
    PyObject *events = mon ? PyObject_GetAttrString(mon, "events") : NULL;
    if (events == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
        return -1;
    }
    for (int i = 0; i < EV_SETS; i++)
        for (int k = 0; k < 3 && event_names[i][k]; k++) {
            PyObject *v = PyObject_GetAttrString(events, event_names[i][k]);
            long bit = v ? PyLong_AsLong(v) : -1;
            Py_XDECREF(v);
            if (bit < 0 || (bit == -1 && PyErr_Occurred())) {
                Py_DECREF(events);
                return -1;
            }
            monitor.bits[i][k] = bit;
            monitor.events[i] |= bit;
        }
    Py_DECREF(events);
    for (int i = 0; i <= EV_SETS; i++) {
        PyObject *fn = PyCFunction_New(&callback_defs[i], NULL);
        if (fn == NULL)
            return -1;
        if (i < EV_SETS)
            monitor.callbacks[i] = fn;
        else
            monitor.noop_callback = fn;
    }
    monitor.missing = PyObject_GetAttrString(mon, "MISSING");
    return monitor.missing ? 0 : -1;
}

/* Take a free tool id and register the callbacks. Ids 3 and 4 have no role in PEP 669; 2
 * (PROFILER_ID) is left to cProfile, so that a user's cProfile runs beside stepwatch (and
 * records the same calls). 0 or -1 (none free: the caller takes the profile function). */
static int monitor_acquire(void) {
    static const int ids[] = {4, 3};
    if (monitor_init() < 0)
        return -1;
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        if (monitoring_call("get_tool", "(i)", ids[i]) != 0) {
            PyErr_Clear();
            continue;
        }
        if (monitoring_call("use_tool_id", "(is)", ids[i], "stepwatch") < 0) {
            PyErr_Clear();
            continue;
        }
        monitor.tool = ids[i];
        for (int k = 0; k < EV_SETS; k++)
            for (int e = 0; e < 3 && monitor.bits[k][e]; e++) {
                PyObject *fn = monitor.noop ? monitor.noop_callback : monitor.callbacks[k];
                if (monitoring_call("register_callback", "(ilO)", monitor.tool, monitor.bits[k][e],
                                    fn) < 0) {
                    monitor_stop();
                    return -1;
                }
            }
        return 0;
    }
    return -1;
}

/* The Python calls' events on, and with c_events the C calls' too. 0 or -1 with an
 * exception. */
static int monitor_set_events(int c_events) {
    long events = monitor.events[EV_PY_BEGIN] | monitor.events[EV_PY_END];
    if (c_events)
        events |= monitor.events[EV_CALL] | monitor.events[EV_C_END];
    return monitoring_call("set_events", "(il)", monitor.tool, events);
}

/* Events off, callbacks unregistered, the tool id given back. Keeps any exception pending. */
static void monitor_stop(void) {
    if (monitor.tool < 0)
        return;
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    monitoring_call("set_events", "(ii)", monitor.tool, 0);
    PyErr_Clear();
    for (int k = 0; k < EV_SETS; k++)
        for (int e = 0; e < 3 && monitor.bits[k][e]; e++) {
            monitoring_call("register_callback", "(ilO)", monitor.tool, monitor.bits[k][e],
                            Py_None);
            PyErr_Clear();
        }
    monitoring_call("free_tool_id", "(i)", monitor.tool);
    PyErr_Clear();
    monitor.tool = -1;
    monitor.noop = 0;
    sw_py_put_back(&aside);
}

/* A thread's first action opens on this hook (c_calls: it records C builtins). 0, or -1
 * when sys.monitoring cannot be had. Keeps any exception pending. */
static int monitor_begin(int c_calls) {
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    int rc = 0;
    if (monitor.noop) /* the floor was left on: ours takes the tool over */
        monitor_stop();
    if (monitor.tool < 0 && monitor_acquire() < 0)
        rc = -1;
    if (rc == 0) {
        monitor.threads++;
        monitor.c_threads += c_calls;
        if (monitor_set_events(monitor.c_threads > 0) < 0) {
            monitor.threads--;
            monitor.c_threads -= c_calls;
            if (monitor.threads == 0)
                monitor_stop();
            rc = -1;
        }
    }
    sw_py_put_back(&aside);
    return rc;
}

/* A thread's last action on this hook closes. */
static void monitor_end(int c_calls) {
    if (monitor.threads == 0) /* a fork child: the events go off at the next one */
        return;
    monitor.threads--;
    monitor.c_threads -= c_calls;
    if (monitor.threads == 0) {
        monitor_stop();
    } else if (c_calls && monitor.c_threads == 0) {
        sw_py_aside aside;
        sw_py_set_aside(&aside);
        monitor_set_events(0); /* the CALL events off; failing, they stay and are skipped */
        sw_py_put_back(&aside);
    }
}
#endif /* FP_HAVE_MONITORING */

/* ---- threads -------------------------------------------------------------------------------- */

static void thread_free(void *arg) {
    fp_thread *t = arg;
    /* At thread exit, without the GIL: open actions (never ended) keep their references. */
    sw_fstack_free(t->stack);
    free(t->trees);
    free(t);
}

static void fork_child(void) {
    fork_gen++;
    fp_thread *t = tls_thread; /* the thread that forked: the child's only one */
    if (t) {
        sw_fstack_reset(t->stack);
        if (t->engine == FP_EVAL || t->engine == FP_MONITOR)
            t->engine = FP_OFF;
        /* FP_PROFILE stays: the hook takes itself off at its next call, with the GIL */
    }
#if FP_HAVE_MONITORING
    /* The events stay on until the next one, which finds no thread recording (monitor_idle):
     * no Python here, before the interpreter is set up again in the child. */
    monitor.threads = monitor.c_threads = 0;
#endif
    if (eval_hook.installed && eval_hook.interp &&
        _PyInterpreterState_GetEvalFrameFunc(eval_hook.interp) == fp_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(eval_hook.interp, eval_hook.prev);
    eval_hook.installed = 0;
    eval_hook.threads = 0;
}

static void process_init(void) {
    pthread_key_create(&thread_key, thread_free);
    pthread_atfork(NULL, NULL, fork_child);
}

static fp_thread *thread_get(void) {
    fp_thread *t = tls_thread;
    if (FP_LIKELY(t != NULL))
        return t;
    t = calloc(1, sizeof *t);
    if (t == NULL || sw_fstack_new(&t->stack) < 0) {
        free(t);
        return NULL;
    }
    t->calls_begun = (uint64_t)1 << 62; /* no call's identity is 0 */
    pthread_setspecific(thread_key, t);
    tls_thread = t;
    return t;
}

/* This thread's tree of action in d (made on first use). */
static sw_ftree *thread_tree(fp_thread *t, sw_py_funcs *f, fp_data *d, sw_id action) {
    for (uint32_t i = 0; i < t->ntrees; i++)
        if (t->trees[i].serial == d->serial && t->trees[i].action == action)
            return t->trees[i].tree;
    if (t->ntrees == t->trees_cap) {
        uint32_t cap = t->trees_cap ? t->trees_cap * 2 : 16;
        if (cap > 4096) { /* old generations' entries pile up: start over (one more tree) */
            t->ntrees = 0;
            cap = t->trees_cap;
        }
        fp_cached_tree *trees = realloc(t->trees, cap * sizeof *trees);
        if (trees == NULL)
            return NULL;
        t->trees = trees;
        t->trees_cap = cap;
    }
    const char *name = sw_action_name(f->p, action);
    sw_ftree *tree = sw_fprofile_add_tree(d->fp, name ? name : "?");
    if (tree)
        t->trees[t->ntrees++] = (fp_cached_tree){d->serial, action, tree};
    return tree;
}

/* ---- profile generations -------------------------------------------------------------------- */

static fp_data *data_new(void) {
    fp_data *d = calloc(1, sizeof *d);
    if (d == NULL || sw_fprofile_new(&d->fp) < 0 || !(d->objects = PyList_New(0))) {
        if (d)
            sw_fprofile_free(d->fp);
        free(d);
        PyErr_NoMemory();
        return NULL;
    }
    d->refs = 1;
    d->serial = next_serial++;
    return d;
}

static void data_release(fp_data *d) {
    if (d == NULL || --d->refs > 0)
        return;
    sw_fprofile_free(d->fp);
    Py_XDECREF(d->objects);
    free(d);
}

/* f's current generation; a fork child gets a fresh, empty one. NULL + exception. */
static fp_data *current_data(sw_py_funcs *f) {
    if (FP_UNLIKELY(f->fork_gen != fork_gen)) {
        fp_data *fresh = data_new();
        if (fresh == NULL)
            return NULL;
        data_release(f->data);
        f->data = fresh;
        f->fork_gen = fork_gen;
    }
    return f->data;
}

/* ---- actions open and close (the watcher) --------------------------------------------------- */

/* The hook a thread's first function action switches on (see the top of this file). */
static int engine_for(int builtins) {
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
    (void)builtins;
    return FP_MONITOR; /* 3.12: resumes the frame hook misses (above) */
#elif FP_HAVE_MONITORING
    return builtins ? FP_MONITOR : FP_EVAL;
#else
    return builtins ? FP_PROFILE : FP_EVAL;
#endif
}

/* Switch the thread's hook off (its last function action closed). */
static void engine_off(fp_thread *t) {
    if (t->engine == FP_PROFILE)
        profile_off(t);
    else if (t->engine == FP_EVAL)
        eval_hook_release();
#if FP_HAVE_MONITORING
    else if (t->engine == FP_MONITOR)
        monitor_end(t->c_calls);
#endif
    t->engine = FP_OFF;
}

static void action_begin(sw_py_funcs *f, sw_id action) {
    fp_thread *t = thread_get();
    if (t == NULL || sw_fstack_open_count(t->stack) == SW_FSTACK_MAX_OPEN)
        return;
    fp_data *d = current_data(f);
    sw_ftree *tree = d ? thread_tree(t, f, d, action) : NULL;
    if (tree == NULL) {
        PyErr_Clear(); /* the hot path never raises: this action is not profiled */
        return;
    }
    if (sw_fstack_open_count(t->stack) == 0) {
        int engine = engine_for(f->builtins);
        t->c_calls = f->builtins;
#if FP_HAVE_MONITORING
        if (engine == FP_MONITOR && monitor_begin(f->builtins) < 0)
            engine = FP_PROFILE; /* no tool id free: the profile function records the same */
#endif
        if (engine == FP_PROFILE) {
            PyThreadState *ts = PyThreadState_Get();
            t->saved_func = ts->c_profilefunc;
            t->saved_obj = Py_XNewRef(ts->c_profileobj);
            PyEval_SetProfile(fp_profile, NULL);
        } else if (engine == FP_EVAL) {
            eval_hook_acquire();
        }
        t->engine = engine;
    }
    d->refs++;
    t->data[sw_fstack_open_count(t->stack)] = d;
    sw_fstack_open(t->stack, tree, f, action);
}

static void action_end(sw_py_funcs *f, sw_id action) {
    fp_thread *t = tls_thread;
    int k = t ? sw_fstack_find(t->stack, f, action) : -1;
    if (k < 0)
        return; /* not opened here (watched while open, or too many open) */
    uint64_t now = sw_fclock_now();
    while (sw_fstack_open_count(t->stack) > (uint32_t)k) {
        sw_fstack_close_top(t->stack, now);
        data_release(t->data[sw_fstack_open_count(t->stack)]);
    }
    if (sw_fstack_open_count(t->stack) == 0)
        engine_off(t);
}

static void fp_watch(void *ctx, sw_id action, int begins) {
    if (!PyGILState_Check()) /* only Python threads, holding the GIL, record functions */
        return;
    if (begins)
        action_begin(ctx, action);
    else
        action_end(ctx, action);
}

/* ---- the Profiler's side (_stepwatch.h) ------------------------------------------------------ */

void sw_py_funcs_span(sw_py_funcs *f, sw_id action, int begins) {
    fp_watch(f, action, begins);
}

sw_py_funcs *sw_py_funcs_new(sw_profiler *p, int builtins) {
    pthread_once(&process_once, process_init);
    sw_py_funcs *f = calloc(1, sizeof *f);
    if (f == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    f->p = p;
    f->builtins = builtins;
    f->fork_gen = fork_gen;
    f->data = data_new();
    if (f->data == NULL) {
        free(f);
        return NULL;
    }
    int rc = sw_watcher_set(p, fp_watch, f);
    if (rc < 0) {
        data_release(f->data);
        free(f);
        PyErr_Format(PyExc_RuntimeError, "function profiling: %s", sw_strerror(rc));
        return NULL;
    }
    return f;
}

/* sw_fclock_unit (a tick's length in ns) waits once per process until 20 ms after the tick
 * clock started: its calibration sleeps the rest. Waited out here, at the start of the Python
 * calls that read the unit (reading the profile, clearing it, closing), without the GIL: the
 * program's other threads run meanwhile, and the unit read afterwards returns at once. Safe:
 * nothing of Python's or of f's is touched while the GIL is off (the calibration is the C
 * core's, behind its own once-lock), and at the start of a call the state is what it is at
 * any bytecode boundary. Nothing recorded yet: nothing needs the unit (nor starts the clock
 * here). */
void sw_py_funcs_calibrate(sw_py_funcs *f) {
    if (f == NULL || f->data == NULL || sw_fprofile_tree_count(f->data->fp) == 0)
        return;
    Py_BEGIN_ALLOW_THREADS /* the program's other threads run */
    sw_fclock_unit();      /* the unit itself is read afterwards, with the GIL */
    Py_END_ALLOW_THREADS
}

/* Add what f recorded to its profiler's run file, if it has one (sw_run_add_functions). */
static void keep_in_run_file(sw_py_funcs *f) {
    fp_data *d = f->data;
    if (f->p == NULL || d == NULL || sw_fprofile_tree_count(d->fp) == 0)
        return;
    sw_fprofile_set_unit(d->fp, sw_fclock_unit());
    sw_run_add_functions(f->p, d->fp); /* SW_ENOTFOUND: no run file; others: nothing to do */
}

void sw_py_funcs_close(sw_py_funcs *f) {
    if (f == NULL || f->p == NULL)
        return;
    /* This thread's open actions of f end now; other threads must not record any more. */
    fp_thread *t = tls_thread;
    for (uint32_t k = t ? sw_fstack_open_count(t->stack) : 0; k > 0; k--) {
        if (sw_fstack_owner(t->stack, k - 1) != f)
            continue;
        uint64_t now = sw_fclock_now();
        while (sw_fstack_open_count(t->stack) >= k) {
            sw_fstack_close_top(t->stack, now);
            data_release(t->data[sw_fstack_open_count(t->stack)]);
        }
        k = sw_fstack_open_count(t->stack) + 1;
    }
    if (t && sw_fstack_open_count(t->stack) == 0 && t->engine != FP_OFF)
        engine_off(t);
    if (f->fork_gen == fork_gen)
        keep_in_run_file(f);
    sw_watcher_set(f->p, NULL, NULL);
    f->p = NULL;
}

void sw_py_funcs_free(sw_py_funcs *f) {
    if (f == NULL)
        return;
    sw_py_funcs_close(f);
    data_release(f->data);
    free(f);
}

int sw_py_funcs_clear(sw_py_funcs *f) {
    if (f->fork_gen == fork_gen)
        keep_in_run_file(f); /* the file keeps what is forgotten here */
    fp_data *fresh = data_new();
    if (fresh == NULL)
        return -1;
    data_release(f->data);
    f->data = fresh;
    f->fork_gen = fork_gen;
    return 0;
}

const sw_fprofile *sw_py_funcs_profile(sw_py_funcs *f, PyObject **objects) {
    fp_data *d = current_data(f);
    if (d == NULL)
        return NULL;
    if (objects)
        *objects = d->objects;
    sw_fprofile_set_unit(d->fp, sw_fclock_unit());
    return d->fp;
}

/* The benchmark's floors: each hook installed on this thread doing nothing at all. */
static int noop_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    return 0;
}

PyObject *sw_py_funcs_floor(PyObject *module, PyObject *kind) {
    static int eval_on;
    pthread_once(&process_once, process_init);
    if (kind == Py_None) {
        PyEval_SetProfile(NULL, NULL);
        if (eval_on)
            eval_hook_release();
        eval_on = 0;
#if FP_HAVE_MONITORING
        if (monitor.noop)
            monitor_stop();
#endif
        Py_RETURN_NONE;
    }
    const char *name = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    int builtins = name && strcmp(name, "builtins") == 0, engine = FP_OFF;
    if (builtins || (name && strcmp(name, "python") == 0))
        engine = engine_for(builtins);
    else if (name && strcmp(name, "profile") == 0)
        engine = FP_PROFILE;
    else if (name && strcmp(name, "eval") == 0)
        engine = FP_EVAL;
    if (engine == FP_OFF) {
        PyErr_Clear();
        return PyErr_Format(PyExc_ValueError,
                            "kind must be 'python', 'builtins', 'profile', 'eval' or None, not %R",
                            kind);
    }
    if (engine == FP_PROFILE) {
        PyEval_SetProfile(noop_profile, NULL);
    } else if (engine == FP_EVAL) {
        if (!eval_on) /* installed, and passing every frame straight through here */
            eval_hook_acquire();
        eval_on = 1;
    }
#if FP_HAVE_MONITORING
    else if (engine == FP_MONITOR) {
        if (monitor.threads > 0)
            return PyErr_Format(PyExc_RuntimeError, "a function action is open");
        if (monitor.tool < 0) {
            monitor.noop = 1;
            if (monitor_acquire() < 0) {
                monitor.noop = 0;
                PyErr_Clear();
                return PyErr_Format(PyExc_RuntimeError, "no sys.monitoring tool id is free");
            }
        }
        if (monitor_set_events(builtins) < 0)
            return NULL;
    }
#endif
    Py_RETURN_NONE;
}

PyObject *sw_py_funcs_thread_state(PyObject *module, PyObject *unused) {
    fp_thread *t = tls_thread;
    static const char *const engines[] = {"off", "eval", "profile", "monitoring"};
    int frame_hook = 0;
    if (eval_hook.interp)
        frame_hook = _PyInterpreterState_GetEvalFrameFunc(eval_hook.interp) == fp_eval_frame;
    return Py_BuildValue("{sssIsIsisO}", "hook", engines[t ? t->engine : FP_OFF], "open",
                         t ? sw_fstack_open_count(t->stack) : 0u, "depth",
                         t ? sw_fstack_depth(t->stack) : 0u, "frame_hook_threads",
                         eval_hook.threads, "frame_hook_installed",
                         frame_hook ? Py_True : Py_False);
}
