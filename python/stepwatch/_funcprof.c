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
 * Two hooks, one bookkeeping:
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
 * Both push a frame on this thread's shadow stack at a call and pop it at the return,
 * adding the time to the node of its call path in the innermost open action's tree.
 *
 * Per call the work is a hash probe (sw_ftree_child, keyed by the code object's or C
 * function's address) and two clock reads; no Python object is made after a function's first
 * call (its label is made then, once). The clock is the CPU's time-stamp counter where it
 * runs at a constant rate (x86-64 with invariant TSC: about 8 ns a read against 20-45 ns for
 * clock_gettime here); trees keep its ticks, and the profile's unit (ns per tick, measured
 * against CLOCK_MONOTONIC since the first use) converts them when they are read. cProfile by comparison looks the function up in a
 * splay tree, the caller/callee pair in another, keeps recursion levels for both, and on 3.11
 * reads its clock through the same tracing path.
 *
 * Actions. A call is recorded in the innermost function action open on its thread when it
 * begins (each shadow frame knows its action); a call made directly by the code that opened
 * the action hangs from the tree's root, node 0, which holds the action's own time. Actions
 * need not nest with the calls: Lightning's profile() opens one inside a context manager's
 * __enter__, which returns while the action goes on. When an action ends, the calls it left
 * running are cut at that time (cProfile's disable does the same), and if it was nested in
 * another function action, its time appears in the outer tree as one node
 * "{stepwatch action <name>}" under the outer action's innermost running call.
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
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#define FP_LIKELY(x) __builtin_expect(!!(x), 1)
#define FP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FP_MAX_OPEN 32          /* nested function actions per thread */
#define FP_MAX_DEPTH (1u << 16) /* shadow frames per thread */

enum { FP_OFF = 0, FP_EVAL, FP_PROFILE };

/* One generation of a profiler's function profile. clear() starts a new one; an action
 * still open keeps the old one alive (refs) until it ends. */
typedef struct fp_data {
    sw_fprofile *fp;
    PyObject *objects; /* list, by function index: the code object (kept alive, so its address
                          names no other function) or the built-in's label */
    Py_ssize_t refs;   /* the owner's and one per open action */
    uint64_t serial;   /* never reused: tells cached trees of old generations apart */
} fp_data;

struct sw_py_funcs {
    sw_profiler *p;
    int builtins;
    fp_data *data;
    unsigned fork_gen; /* the process generation data was made in */
};

typedef struct fp_frame {
    uint64_t t0;
    uint64_t subt;   /* time in recorded callees */
    uintptr_t ident; /* the frame or callable, to match the return */
    uint32_t node;   /* in the tree of opens[open] */
    uint32_t open;   /* the action the call belongs to */
} fp_frame;

typedef struct fp_open {
    sw_py_funcs *funcs;
    fp_data *data;
    sw_ftree *tree;
    sw_id action;
    uint64_t t0;   /* when it began */
    uint64_t subt; /* time in the calls hanging from its root */
} fp_open;

typedef struct fp_cached_tree {
    uint64_t serial;
    sw_id action;
    sw_ftree *tree;
} fp_cached_tree;

typedef struct fp_thread {
    fp_frame *frames;
    uint32_t depth, cap;
    fp_open opens[FP_MAX_OPEN];
    uint32_t nopen;
    int engine;
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

/* ---- the clock -------------------------------------------------------------------------- */

static struct {
    int tsc;               /* read the time-stamp counter (else CLOCK_MONOTONIC, in ns) */
    uint64_t tick0, ns0;   /* both clocks at the first use, to measure ns per tick */
} fp_clock;

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t fp_now(void) {
#if defined(__x86_64__)
    if (FP_LIKELY(fp_clock.tsc))
        return __rdtsc();
#endif
    return monotonic_ns();
}

static void clock_init(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    /* CPUID 0x80000007 EDX bit 8: the counter ticks at a constant rate in every state */
    fp_clock.tsc = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
#endif
    fp_clock.ns0 = monotonic_ns();
    fp_clock.tick0 = fp_now();
}

/* ns per clock unit, measured over the time since clock_init. */
static double ns_per_tick(void) {
    if (!fp_clock.tsc)
        return 1.0;
    uint64_t ns = monotonic_ns(), tick = fp_now();
    if (tick <= fp_clock.tick0 || ns <= fp_clock.ns0)
        return 1.0;
    return (double)(ns - fp_clock.ns0) / (double)(tick - fp_clock.tick0);
}

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
    if (f.file && f.name && sw_fprofile_add_func(d->fp, key, &f, &index) == 0 &&
        PyList_Append(d->objects, keep) < 0)
        index = SW_FNODE_NONE;
    Py_XDECREF(keep);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return index;
}

/* ---- the shadow stack ------------------------------------------------------------------------ */

static int grow_frames(fp_thread *t) {
    if (t->cap >= FP_MAX_DEPTH)
        return -1;
    uint32_t cap = t->cap ? t->cap * 2 : 256;
    fp_frame *frames = realloc(t->frames, cap * sizeof *frames);
    if (frames == NULL)
        return -1;
    t->frames = frames;
    t->cap = cap;
    return 0;
}

/* A call path seen for the first time: its node (and the function's label if new). */
static __attribute__((noinline)) uint32_t new_node(fp_open *o, uint32_t parent, uint64_t key,
                                                   PyObject *obj, int is_c) {
    uint32_t func = sw_fprofile_find_func(o->data->fp, key);
    if (func == SW_FNODE_NONE)
        func = add_function(o->data, key, obj, is_c);
    uint32_t node = func == SW_FNODE_NONE ? SW_FNODE_NONE
                                          : sw_ftree_add_child(o->tree, parent, key, func);
    if (node == SW_FNODE_NONE)
        sw_ftree_fold(o->tree, 1);
    return node;
}

/* A call of the function keyed key begins on t (an action is open). ident names the call
 * for its return. 0 when it is not recorded (the tree or the stack is full). */
static inline int fp_enter(fp_thread *t, uint64_t key, uintptr_t ident, PyObject *obj, int is_c) {
    uint32_t open = t->nopen - 1;
    fp_open *o = &t->opens[open];
    uint32_t parent = 0; /* the action's root, unless the caller is one of its calls */
    if (t->depth > 0 && t->frames[t->depth - 1].open == open)
        parent = t->frames[t->depth - 1].node;
    uint32_t node = sw_ftree_child(o->tree, parent, key);
    if (FP_UNLIKELY(node == SW_FNODE_NONE)) {
        node = new_node(o, parent, key, obj, is_c);
        if (node == SW_FNODE_NONE)
            return 0;
    }
    if (FP_UNLIKELY(t->depth == t->cap) && grow_frames(t) < 0) {
        sw_ftree_fold(o->tree, 1);
        return 0;
    }
    fp_frame *f = &t->frames[t->depth++];
    f->subt = 0;
    f->ident = ident;
    f->node = node;
    f->open = open;
    f->t0 = fp_now();
    return 1;
}

/* Close the top frame at time now: its tree gets the call, its caller (a call of the same
 * action, else the action's root) the time. */
static inline void pop_frame(fp_thread *t, uint64_t now) {
    fp_frame *f = &t->frames[--t->depth];
    uint64_t dt = now > f->t0 ? now - f->t0 : 0;
    fp_open *o = &t->opens[f->open];
    sw_ftree_record(o->tree, f->node, dt, dt > f->subt ? dt - f->subt : 0);
    if (t->depth > 0 && f[-1].open == f->open)
        f[-1].subt += dt;
    else
        o->subt += dt;
}

/* The call named ident returns: pop it if it is the top frame (returns of calls that began
 * before any action, and of calls cut off when an action ended, are not). */
static inline void fp_leave(fp_thread *t, uintptr_t ident) {
    uint64_t now = fp_now();
    if (FP_LIKELY(t->depth > 0 && t->frames[t->depth - 1].ident == ident))
        pop_frame(t, now);
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
    if (FP_LIKELY(t == NULL || t->engine != FP_EVAL || t->nopen == 0))
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
    fp_leave(t, (uintptr_t)frame);
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
    if (FP_UNLIKELY(t == NULL || t->engine != FP_PROFILE || t->nopen == 0)) {
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
        fp_leave(t, (uintptr_t)frame);
        break;
    case PyTrace_C_CALL:
        if (PyCFunction_Check(arg))
            fp_enter(t, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml, (uintptr_t)arg,
                     arg, 1);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (PyCFunction_Check(arg))
            fp_leave(t, (uintptr_t)arg);
        break;
    }
    return 0;
}

/* ---- threads -------------------------------------------------------------------------------- */

static void thread_free(void *arg) {
    fp_thread *t = arg;
    /* At thread exit, without the GIL: open actions (ended never) keep their references. */
    free(t->frames);
    free(t->trees);
    free(t);
}

static void fork_child(void) {
    fork_gen++;
    fp_thread *t = tls_thread; /* the thread that forked: the child's only one */
    if (t) {
        t->nopen = 0;
        t->depth = 0;
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
    clock_init();
    pthread_key_create(&thread_key, thread_free);
    pthread_atfork(NULL, NULL, fork_child);
}

static fp_thread *thread_get(void) {
    fp_thread *t = tls_thread;
    if (FP_LIKELY(t != NULL))
        return t;
    t = calloc(1, sizeof *t);
    if (t == NULL || grow_frames(t) < 0) {
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
    if (t == NULL || t->nopen == FP_MAX_OPEN)
        return;
    fp_data *d = current_data(f);
    sw_ftree *tree = d ? thread_tree(t, f, d, action) : NULL;
    if (tree == NULL) {
        PyErr_Clear(); /* the hot path never raises: this action is not profiled */
        return;
    }
    if (t->nopen == 0) {
        if (f->builtins) {
            PyThreadState *ts = PyThreadState_Get();
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
    fp_open *o = &t->opens[t->nopen++];
    *o = (fp_open){.funcs = f, .data = d, .tree = tree, .action = action};
    o->t0 = fp_now();
}

/* A 64-bit key for a nested action's node, from its name (odd: no address is). */
static uint64_t action_key(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return h << 1 | 1;
}

/* The node of a nested action's span in the tree of the action it ran in (under parent). */
static uint32_t nested_action_node(fp_open *outer, uint32_t parent, const char *name) {
    uint64_t key = action_key(name);
    uint32_t node = sw_ftree_child(outer->tree, parent, key);
    if (node != SW_FNODE_NONE)
        return node;
    uint32_t func = sw_fprofile_find_func(outer->data->fp, key);
    if (func == SW_FNODE_NONE) {
        PyObject *label = PyUnicode_FromFormat("<stepwatch action %s>", name);
        const char *text = label ? PyUnicode_AsUTF8(label) : NULL;
        sw_func fn = {.file = "~", .line = 0, .name = text};
        if (text == NULL || sw_fprofile_add_func(outer->data->fp, key, &fn, &func) < 0 ||
            PyList_Append(outer->data->objects, label) < 0)
            func = SW_FNODE_NONE;
        Py_XDECREF(label);
        PyErr_Clear();
    }
    return func == SW_FNODE_NONE ? SW_FNODE_NONE
                                 : sw_ftree_add_child(outer->tree, parent, key, func);
}

/* End t's innermost open action at now: cut the calls still running, record the action's
 * time in its root, and in the enclosing action's tree if there is one. */
static void close_top(fp_thread *t, uint64_t now) {
    uint32_t open = t->nopen - 1;
    fp_open *o = &t->opens[open];
    while (t->depth > 0 && t->frames[t->depth - 1].open == open)
        pop_frame(t, now);
    uint64_t dt = now > o->t0 ? now - o->t0 : 0;
    sw_ftree_record(o->tree, 0, dt, dt > o->subt ? dt - o->subt : 0);
    if (open > 0) {
        fp_open *outer = &t->opens[open - 1];
        fp_frame *caller = t->depth > 0 && t->frames[t->depth - 1].open == open - 1
                               ? &t->frames[t->depth - 1]
                               : NULL;
        uint32_t node = nested_action_node(outer, caller ? caller->node : 0,
                                           sw_ftree_action(o->tree));
        if (node != SW_FNODE_NONE)
            sw_ftree_record(outer->tree, node, dt, dt);
        if (caller)
            caller->subt += dt;
        else
            outer->subt += dt;
    }
    fp_data *d = o->data;
    t->nopen--;
    data_release(d);
}

static void action_end(sw_py_funcs *f, sw_id action) {
    fp_thread *t = tls_thread;
    if (t == NULL || t->nopen == 0)
        return;
    uint32_t k = t->nopen;
    while (k > 0 && !(t->opens[k - 1].funcs == f && t->opens[k - 1].action == action))
        k--;
    if (k == 0)
        return; /* not opened here (watched while open, or a stack that was full) */
    uint64_t now = fp_now();
    while (t->nopen >= k)
        close_top(t, now);
    if (t->nopen == 0) {
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

int sw_py_funcs_builtins(const sw_py_funcs *f) {
    return f->builtins;
}

void sw_py_funcs_close(sw_py_funcs *f) {
    if (f == NULL || f->p == NULL)
        return;
    /* This thread's open actions of f end now; other threads must not record any more. */
    fp_thread *t = tls_thread;
    for (uint32_t k = t ? t->nopen : 0; k > 0; k--)
        if (t->opens[k - 1].funcs == f)
            action_end(f, t->opens[k - 1].action);
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
    sw_fprofile_set_unit(d->fp, ns_per_tick());
    return d->fp;
}

PyObject *sw_py_funcs_thread_state(PyObject *module, PyObject *unused) {
    fp_thread *t = tls_thread;
    static const char *const engines[] = {"off", "eval", "profile"};
    int frame_hook = 0;
    if (eval_hook.interp)
        frame_hook = _PyInterpreterState_GetEvalFrameFunc(eval_hook.interp) == fp_eval_frame;
    return Py_BuildValue("{sssIsIsisO}", "hook", engines[t ? t->engine : FP_OFF], "open",
                         t ? t->nopen : 0u, "depth", t ? t->depth : 0u, "frame_hook_threads",
                         eval_hook.threads, "frame_hook_installed", frame_hook ? Py_True : Py_False);
}
