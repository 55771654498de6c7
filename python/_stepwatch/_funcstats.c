/*
 * _funcstats.c — what the function profiler (_funcprof.c) recorded, for Python, and the
 * Profiler methods that switch it on and read it:
 *
 *   function_stats(action)  a stepwatch.functions.FunctionStats: pstats' stats dict (so
 *                           pstats.Stats, snakeviz, gprof2dot read it; dump_stats writes the
 *                           file they load) and cProfile's getstats() entries
 *   function_report(...)    the table a cProfile user reads (sw_fprofile_write_table)
 *   collapsed(action)       collapsed stacks for flame graphs
 *   function_actions()      the actions profiled so far
 *   clear_functions()       forget what was recorded
 */
#include "_stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sw_py_profiler_watch(ProfilerObject *self, sw_id id) {
    if (self->p == NULL) {
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        if (st)
            sw_py_raise(st, SW_ESTATE, "profiler is closed");
        return -1;
    }
    if (self->funcs == NULL && !(self->funcs = sw_py_funcs_new(self->p, self->builtins)))
        return -1;
    int rc = sw_watch(self->p, id, 1);
    if (rc < 0) {
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        if (st)
            sw_py_raise(st, rc, "functions");
        return -1;
    }
    return 0;
}

/* What was recorded; NULL when nothing was ever profiled (or with an exception set). */
static const sw_fprofile *profile_of(ProfilerObject *self, PyObject **objects) {
    if (self->funcs == NULL)
        return NULL;
    sw_py_funcs_calibrate(self->funcs); /* the GIL off meanwhile */
    return sw_py_funcs_profile(self->funcs, objects);
}

/* Text written by fn into a memory FILE, as str. */
static PyObject *text_of(ProfilerObject *self, int (*fn)(void *ctx, FILE *out), void *ctx) {
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (out == NULL)
        return PyErr_SetFromErrno(PyExc_OSError);
    int rc = fn(ctx, out);
    if (fclose(out) != 0 && rc == 0)
        rc = SW_EIO;
    PyObject *text = NULL;
    if (rc == 0) {
        text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
    } else if (rc == SW_ENOTFOUND) {
        PyErr_SetString(PyExc_KeyError, "no functions were profiled in that action");
    } else {
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        if (st)
            sw_py_raise(st, rc, "function report");
    }
    free(buf);
    return text;
}

/* ---- function_stats --------------------------------------------------------------------- */

static PyObject *label_of(const sw_fprofile *fp, uint32_t func) {
    const sw_func *f = sw_fprofile_func(fp, func);
    return Py_BuildValue("(sIs)", f->file, (unsigned)f->line, f->name);
}

static double seconds(uint64_t ns) {
    return (double)ns / 1e9;
}

/* d[key] += (a, b, c, e) element-wise (new reference to a 4-tuple of numbers); builds
 * pstats' sums when two functions share a label. */
static int add_four(PyObject *d, PyObject *key, uint64_t a, uint64_t b, double c, double e,
                    PyObject *tail) {
    PyObject *old = PyDict_GetItemWithError(d, key);
    if (old == NULL && PyErr_Occurred())
        return -1;
    if (old) {
        a += PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(old, 0));
        b += PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(old, 1));
        c += PyFloat_AsDouble(PyTuple_GET_ITEM(old, 2));
        e += PyFloat_AsDouble(PyTuple_GET_ITEM(old, 3));
        if (tail)
            tail = PyTuple_GET_ITEM(old, 4);
    }
    PyObject *v = tail
                      ? Py_BuildValue("(KKddO)", (unsigned long long)a, (unsigned long long)b, c, e,
                                      tail)
                      : Py_BuildValue("(KKdd)", (unsigned long long)a, (unsigned long long)b, c, e);
    int rc = v ? PyDict_SetItem(d, key, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* pstats' stats: {(file, line, name): (cc, nc, tt, ct, {caller: (nc, cc, tt, ct)})}. */
static PyObject *pstats_dict(const sw_fprofile *fp, const sw_fstats *s) {
    PyObject *stats = PyDict_New();
    PyObject **labels = PyMem_Calloc(sw_fprofile_func_count(fp) + 1, sizeof *labels);
    int ok = stats && labels;
    for (size_t i = 0; ok && i < s->nfuncs; i++) {
        const sw_fstat *f = &s->funcs[i];
        PyObject *callers = PyDict_New();
        labels[f->func] = label_of(fp, f->func);
        ok = callers && labels[f->func] &&
             add_four(stats, labels[f->func], f->primitive_calls, f->calls, seconds(f->tottime_ns),
                      seconds(f->cumtime_ns), callers) == 0;
        Py_XDECREF(callers);
    }
    for (size_t i = 0; ok && i < s->nedges; i++) {
        const sw_fedge *e = &s->edges[i];
        PyObject *entry = PyDict_GetItemWithError(stats, labels[e->callee]);
        ok = entry != NULL &&
             add_four(PyTuple_GET_ITEM(entry, 4), labels[e->caller], e->calls, e->primitive_calls,
                      seconds(e->tottime_ns), seconds(e->cumtime_ns), NULL) == 0;
    }
    for (uint32_t i = 0; labels && i < sw_fprofile_func_count(fp); i++)
        Py_XDECREF(labels[i]);
    PyMem_Free(labels);
    if (!ok) {
        Py_XDECREF(stats);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return stats;
}

/* What getstats() names function func by: its code object, else its label (a built-in's, as
 * cProfile gives; a nested action's). Borrowed from objects, or a new string in *made. */
static PyObject *code_of(const sw_fprofile *fp, PyObject *objects, uint32_t func, PyObject **made) {
    if ((Py_ssize_t)func < PyList_GET_SIZE(objects) && PyList_GET_ITEM(objects, func) != Py_None)
        return PyList_GET_ITEM(objects, func);
    Py_XDECREF(*made);
    *made = PyUnicode_FromString(sw_fprofile_func(fp, func)->name);
    return *made;
}

/* cProfile's getstats(): (code, callcount, reccallcount, totaltime, inlinetime, calls) per
 * function, calls being (code, callcount, reccallcount, totaltime, inlinetime) per callee. */
static PyObject *entries_list(const sw_fprofile *fp, const sw_fstats *s, PyObject *objects) {
    PyObject *made = NULL;
    PyObject *entries = PyList_New(0);
    for (size_t i = 0; entries && i < s->nfuncs; i++) {
        const sw_fstat *f = &s->funcs[i];
        PyObject *calls = PyList_New(0);
        for (size_t j = 0; calls && j < s->nedges; j++) {
            const sw_fedge *e = &s->edges[j];
            if (e->caller != f->func)
                continue;
            PyObject *code = code_of(fp, objects, e->callee, &made);
            PyObject *sub = code == NULL
                                ? NULL
                                : Py_BuildValue("(OKKdd)", code, (unsigned long long)e->calls,
                                                (unsigned long long)(e->calls - e->primitive_calls),
                                                seconds(e->cumtime_ns), seconds(e->tottime_ns));
            if (!sub || PyList_Append(calls, sub) < 0)
                Py_CLEAR(calls);
            Py_XDECREF(sub);
        }
        PyObject *code = calls ? code_of(fp, objects, f->func, &made) : NULL;
        PyObject *entry = code
                              ? Py_BuildValue("(OKKddO)", code, (unsigned long long)f->calls,
                                              (unsigned long long)(f->calls - f->primitive_calls),
                                              seconds(f->cumtime_ns), seconds(f->tottime_ns), calls)
                              : NULL;
        Py_XDECREF(calls);
        if (!entry || PyList_Append(entries, entry) < 0)
            Py_CLEAR(entries);
        Py_XDECREF(entry);
    }
    Py_XDECREF(made);
    return entries;
}

PyObject *sw_py_profiler_function_stats(ProfilerObject *self, PyObject *action) {
    const char *name = PyUnicode_AsUTF8(action);
    if (name == NULL)
        return NULL;
    PyObject *objects = NULL;
    const sw_fprofile *fp = profile_of(self, &objects);
    if (fp == NULL && PyErr_Occurred())
        return NULL;
    sw_fstats *s = NULL;
    int rc = fp ? sw_fprofile_stats(fp, name, &s) : SW_ENOTFOUND;
    if (rc == SW_ENOTFOUND)
        return PyErr_Format(PyExc_KeyError, "no functions were profiled in action %R", action);
    if (rc < 0) {
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        return st ? sw_py_raise(st, rc, "function_stats") : NULL;
    }
    PyObject *d = PyDict_New();
    int ok = d && sw_py_dict_put(d, "action", PyUnicode_FromString(name)) == 0 &&
             sw_py_dict_put(d, "spans", PyLong_FromUnsignedLongLong(s->spans)) == 0 &&
             sw_py_dict_put(d, "total_ns", PyLong_FromUnsignedLongLong(s->total_ns)) == 0 &&
             sw_py_dict_put(d, "self_ns", PyLong_FromUnsignedLongLong(s->self_ns)) == 0 &&
             sw_py_dict_put(d, "folded_calls", PyLong_FromUnsignedLongLong(s->folded_calls)) == 0 &&
             sw_py_dict_put(d, "builtins", PyBool_FromLong(self->builtins)) == 0 &&
             sw_py_dict_put(d, "stats", pstats_dict(fp, s)) == 0 &&
             sw_py_dict_put(d, "entries", entries_list(fp, s, objects)) == 0;
    sw_fstats_free(s);
    PyObject *result = NULL;
    if (ok) {
        PyObject *module = PyImport_ImportModule("stepwatch.functions");
        if (module) {
            result = PyObject_CallMethod(module, "FunctionStats", "O", d);
            Py_DECREF(module);
        }
    }
    Py_XDECREF(d);
    return result;
}

/* ---- function_report, collapsed --------------------------------------------------------- */

typedef struct {
    const sw_fprofile *fp;
    const char *action;
    sw_ftable_options opts;
} report_args;

static int write_table(void *ctx, FILE *out) {
    report_args *a = ctx;
    return a->fp ? sw_fprofile_write_table(a->fp, a->action, &a->opts, out) : 0;
}

static int write_collapsed(void *ctx, FILE *out) {
    report_args *a = ctx;
    return a->fp ? sw_fprofile_write_collapsed(a->fp, a->action, out) : 0;
}

PyObject *sw_py_profiler_function_report(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"action", "restriction", "sort", "suffix", "full_paths", NULL};
    report_args a = {.opts = SW_FTABLE_OPTIONS_INIT};
    PyObject *restriction = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zOzzp:function_report", kwlist, &a.action,
                                     &restriction, &a.opts.sort, &a.opts.suffix,
                                     &a.opts.full_paths))
        return NULL;
    /* pstats' restriction: an int keeps that many lines, a float in [0, 1) that share */
    if (PyLong_Check(restriction)) {
        long n = PyLong_AsLong(restriction);
        if (n == -1 && PyErr_Occurred())
            return NULL;
        if (n < 1 || n > (long)UINT32_MAX)
            return PyErr_Format(PyExc_ValueError,
                                "restriction must be a positive line count, "
                                "not %ld",
                                n);
        a.opts.max_lines = (uint32_t)n;
    } else if (PyFloat_Check(restriction)) {
        a.opts.fraction = PyFloat_AsDouble(restriction);
    } else if (restriction != Py_None) {
        return PyErr_Format(PyExc_TypeError, "restriction must be an int or a float, not %s",
                            Py_TYPE(restriction)->tp_name);
    }
    a.fp = profile_of(self, NULL);
    if (a.fp == NULL && PyErr_Occurred())
        return NULL;
    if (a.opts.sort && strcmp(a.opts.sort, "cumulative") && strcmp(a.opts.sort, "cumtime") &&
        strcmp(a.opts.sort, "tottime") && strcmp(a.opts.sort, "time") &&
        strcmp(a.opts.sort, "ncalls") && strcmp(a.opts.sort, "calls"))
        return PyErr_Format(PyExc_ValueError,
                            "sort must be 'cumulative', 'tottime' or 'ncalls', not '%s'",
                            a.opts.sort);
    return text_of(self, write_table, &a);
}

PyObject *sw_py_profiler_collapsed(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"action", NULL};
    report_args a = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:collapsed", kwlist, &a.action))
        return NULL;
    a.fp = profile_of(self, NULL);
    if (a.fp == NULL && PyErr_Occurred())
        return NULL;
    return text_of(self, write_collapsed, &a);
}

PyObject *sw_py_profiler_function_actions(ProfilerObject *self, PyObject *unused) {
    const sw_fprofile *fp = profile_of(self, NULL);
    if (fp == NULL && PyErr_Occurred())
        return NULL;
    PyObject *names = PyList_New(0);
    for (uint32_t i = 0; names && fp && i < sw_fprofile_action_count(fp); i++) {
        PyObject *name = PyUnicode_DecodeUTF8(
            sw_fprofile_action(fp, i), (Py_ssize_t)strlen(sw_fprofile_action(fp, i)), "replace");
        if (!name || PyList_Append(names, name) < 0)
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    return names;
}

PyObject *sw_py_profiler_clear_functions(ProfilerObject *self, PyObject *unused) {
    sw_py_funcs_calibrate(self->funcs); /* the GIL off meanwhile */
    if (self->funcs && sw_py_funcs_clear(self->funcs) < 0)
        return NULL;
    Py_RETURN_NONE;
}
