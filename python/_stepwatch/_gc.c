/*
 * _gc.c — Python's garbage collector as a slow-step signal (docs/slow-steps.md): a C
 * callable in gc.callbacks, put there by every Profiler, that times each collection from its
 * "start" to its "stop" and hands the time, the generation and the objects collected to the
 * core (sw_gc_collection), which counts them in the open step. STEPWATCH_GC=0 leaves it out.
 *
 * The callable holds a capsule of its own state, not the Profiler: gc.callbacks keeps no
 * Profiler alive. close() (and dealloc) set the state's profiler to NULL before the profiler
 * goes, so a collection after it records nothing; close() also takes the callable out of the
 * list.
 */
#include "_stepwatch.h"

#include <stdlib.h>
#include <string.h>

typedef struct gc_state {
    sw_profiler *p; /* NULL once its Profiler closed */
    uint64_t start_ns;
    PyObject *generation_key, *collected_key; /* interned "generation", "collected" */
} gc_state;

#define CAPSULE "stepwatch._gc_state"

static void state_free(PyObject *capsule) {
    gc_state *g = PyCapsule_GetPointer(capsule, CAPSULE);
    if (g == NULL)
        return;
    Py_XDECREF(g->generation_key);
    Py_XDECREF(g->collected_key);
    free(g);
}

static long info_long(PyObject *info, PyObject *key) {
    PyObject *v = PyDict_Check(info) ? PyDict_GetItemWithError(info, key) : NULL;
    long n = v ? PyLong_AsLong(v) : -1;
    if (PyErr_Occurred())
        PyErr_Clear();
    return n;
}

/* gc.callbacks' call: (phase, info). Never raises (the collector would print it). */
static PyObject *on_gc(PyObject *capsule, PyObject *const *args, Py_ssize_t nargs) {
    gc_state *g = PyCapsule_GetPointer(capsule, CAPSULE);
    if (g == NULL || g->p == NULL || nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* "start" or "stop": their lengths tell them apart. */
    if (PyUnicode_GET_LENGTH(args[0]) == 5) {
        g->start_ns = sw_now_ns();
    } else if (g->start_ns != 0) {
        uint64_t end = sw_now_ns();
        long generation = info_long(args[1], g->generation_key);
        long collected = info_long(args[1], g->collected_key);
        sw_gc_collection(g->p, g->start_ns, end, (int)generation,
                         collected > 0 ? (uint64_t)collected : 0);
        g->start_ns = 0;
    }
    Py_RETURN_NONE;
}

static PyMethodDef on_gc_def = {"stepwatch_gc_callback", (PyCFunction)(void (*)(void))on_gc,
                                METH_FASTCALL, "stepwatch: times Python's collections"};

/* gc.callbacks, or NULL with the error cleared. */
static PyObject *callbacks_list(void) {
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *list = gc ? PyObject_GetAttrString(gc, "callbacks") : NULL;
    Py_XDECREF(gc);
    if (list == NULL || !PyList_Check(list)) {
        Py_XDECREF(list);
        PyErr_Clear();
        return NULL;
    }
    return list;
}

PyObject *sw_py_gc_start(sw_profiler *p) {
    const char *env = getenv("STEPWATCH_GC");
    if (p == NULL || (env && strcmp(env, "0") == 0))
        return NULL;
    gc_state *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->p = p;
    g->generation_key = PyUnicode_InternFromString("generation");
    g->collected_key = PyUnicode_InternFromString("collected");
    PyObject *capsule = g->generation_key && g->collected_key
                            ? PyCapsule_New(g, CAPSULE, state_free)
                            : NULL;
    if (capsule == NULL) {
        Py_XDECREF(g->generation_key);
        Py_XDECREF(g->collected_key);
        free(g);
        PyErr_Clear();
        return NULL;
    }
    PyObject *fn = PyCFunction_New(&on_gc_def, capsule);
    Py_DECREF(capsule);
    PyObject *list = fn ? callbacks_list() : NULL;
    if (list == NULL || PyList_Append(list, fn) < 0) {
        Py_XDECREF(list);
        Py_XDECREF(fn);
        PyErr_Clear(); /* no collector signal: slow steps go on without it */
        return NULL;
    }
    Py_DECREF(list);
    return fn;
}

/* The callable's profiler goes: it records nothing from now on. */
static void forget(PyObject *fn) {
    PyObject *capsule = PyCFunction_GetSelf(fn);
    gc_state *g = capsule ? PyCapsule_GetPointer(capsule, CAPSULE) : NULL;
    if (g)
        g->p = NULL;
    PyErr_Clear();
}

void sw_py_gc_forget(PyObject *fn) {
    if (fn)
        forget(fn);
}

void sw_py_gc_stop(PyObject *fn) {
    if (fn == NULL)
        return;
    forget(fn);
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    PyObject *list = callbacks_list();
    if (list) {
        Py_ssize_t i = PySequence_Index(list, fn);
        if (i >= 0)
            PySequence_DelItem(list, i);
        Py_DECREF(list);
    }
    sw_py_put_back(&aside);
}
