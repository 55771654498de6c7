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
 *   - builtins=True: the profile function (PyEval_SetProfile, this thread only), which also
 *     sees C builtins, as cProfile does.
 * On 3.12 the interpreter resumes some generators and coroutines inside the running frame
 * (SEND_GEN), without the frame evaluation function: there builtins=False takes the profile
 * function too, skipping its C events, so every resume is counted (3.11 and 3.13 both call
 * the evaluation function for every resume).
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
#include <stdlib.h>

#define FP_LIKELY(x) __builtin_expect(!!(x), 1)
#define FP_UNLIKELY(x) __builtin_expect(!!(x), 0)

enum { FP_OFF = 0, FP_EVAL, FP_PROFILE };

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
    int c_calls;             /* the profile hook records C builtins */
    Py_tracefunc saved_func; /* a profile function we displaced (restored when done) */
    PyObject *saved_obj;
    fp_cached_tree *trees; /* this thread's trees, by (data serial, action) */
    uint32_t ntrees, trees_cap;
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

/* Add the function keyed key, named by obj (a code object, or a PyCFunction when is_c), to
 * d. Runs inside the hooks, possibly with an exception pending (a generator thrown into):
 * that exception is kept. The function's index, or SW_FNODE_NONE. */
static uint32_t add_function(fp_data *d, uint64_t key, PyObject *obj, int is_c) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    uint32_t index = SW_FNODE_NONE;
    PyObject *keep = NULL;
    sw_func f = {.file = "~", .line = 0};
    if (is_c) {
        keep = builtin_label((PyCFunctionObject *)obj);
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
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return index;
}

/* A call of the function keyed key begins (an action is open on t); ident names it for its
 * return. Nonzero when it is recorded. */
static inline int fp_enter(fp_thread *t, uint64_t key, uintptr_t ident, PyObject *obj, int is_c) {
    int r = sw_fstack_enter(t->stack, key, ident);
    if (FP_UNLIKELY(r == 0)) { /* a call path seen for the first time */
        fp_data *d = t->data[sw_fstack_open_count(t->stack) - 1];
        uint32_t func = sw_fprofile_find_func(d->fp, key);
        if (func == SW_FNODE_NONE)
            func = add_function(d, key, obj, is_c);
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
        !fp_enter(t, (uint64_t)(uintptr_t)code, (uintptr_t)frame, (PyObject *)code, 0))
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
        fp_enter(t, (uint64_t)(uintptr_t)code, (uintptr_t)frame, (PyObject *)code, 0);
        Py_DECREF(code); /* the frame holds it; new functions' code objects are kept */
        break;
    }
    case PyTrace_RETURN:
        sw_fstack_leave(t->stack, (uintptr_t)frame);
        break;
    case PyTrace_C_CALL:
        if (t->c_calls && PyCFunction_Check(arg))
            fp_enter(t, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml, (uintptr_t)arg, arg,
                     1);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (t->c_calls && PyCFunction_Check(arg))
            sw_fstack_leave(t->stack, (uintptr_t)arg);
        break;
    }
    return 0;
}

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
        if (t->engine == FP_EVAL)
            t->engine = FP_OFF;
        /* FP_PROFILE stays: the hook takes itself off at its next call, with the GIL */
    }
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
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
        int frame_hook = 0; /* 3.12: resumes the frame hook misses (above) */
#else
        int frame_hook = !f->builtins;
#endif
        if (!frame_hook) {
            PyThreadState *ts = PyThreadState_Get();
            t->c_calls = f->builtins;
            t->saved_func = ts->c_profilefunc;
            t->saved_obj = Py_XNewRef(ts->c_profileobj);
            PyEval_SetProfile(fp_profile, NULL);
            t->engine = FP_PROFILE;
        } else {
            eval_hook_acquire();
            t->engine = FP_EVAL;
        }
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
    if (sw_fstack_open_count(t->stack) == 0) {
        if (t->engine == FP_PROFILE)
            profile_off(t);
        else if (t->engine == FP_EVAL)
            eval_hook_release();
        t->engine = FP_OFF;
    }
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
    if (t && sw_fstack_open_count(t->stack) == 0 && t->engine != FP_OFF) {
        if (t->engine == FP_PROFILE)
            profile_off(t);
        else
            eval_hook_release();
        t->engine = FP_OFF;
    }
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
    } else if (PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "builtins") == 0) {
        PyEval_SetProfile(noop_profile, NULL);
    } else if (PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "python") == 0) {
        if (!eval_on) /* installed, and passing every frame straight through here */
            eval_hook_acquire();
        eval_on = 1;
    } else {
        return PyErr_Format(PyExc_ValueError, "kind must be 'python', 'builtins' or None");
    }
    Py_RETURN_NONE;
}

PyObject *sw_py_funcs_thread_state(PyObject *module, PyObject *unused) {
    fp_thread *t = tls_thread;
    static const char *const engines[] = {"off", "eval", "profile"};
    int frame_hook = 0;
    if (eval_hook.interp)
        frame_hook = _PyInterpreterState_GetEvalFrameFunc(eval_hook.interp) == fp_eval_frame;
    return Py_BuildValue("{sssIsIsisO}", "hook", engines[t ? t->engine : FP_OFF], "open",
                         t ? sw_fstack_open_count(t->stack) : 0u, "depth",
                         t ? sw_fstack_depth(t->stack) : 0u, "frame_hook_threads",
                         eval_hook.threads, "frame_hook_installed",
                         frame_hook ? Py_True : Py_False);
}
