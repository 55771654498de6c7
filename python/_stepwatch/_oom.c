/*
 * _oom.c — the C side of naming where an out-of-memory error happened: hands an exception
 * that leaves what stepwatch watches to stepwatch/_oom.py, which reads its traceback once,
 * writes the stderr line and the run-file notes, and marks it named.
 *
 * Only on the error path: a step that does not fail pays nothing here, its __exit__ one
 * comparison with None. Only a RuntimeError is looked at (torch.OutOfMemoryError is one, and
 * so are the allocator's and cuBLAS's errors): KeyboardInterrupt, StopIteration and the like
 * never import anything. The exception itself stays as it was, pending or not.
 */
#include "_stepwatch.h"

#include <stdarg.h>

/* stepwatch._oom.NAME(*args), args made by Py_BuildValue(format, ...) (a tuple format): its
 * result (new reference), or NULL. The pending exception, if any, waits aside meanwhile and
 * comes back as it was; every error of the call is cleared: it never raises. */
static PyObject *call_oom(const char *name, const char *format, ...) {
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    va_list va;
    va_start(va, format);
    PyObject *args = Py_VaBuildValue(format, va);
    va_end(va);
    PyObject *helper = args ? PyImport_ImportModule("stepwatch._oom") : NULL;
    PyObject *func = helper ? PyObject_GetAttrString(helper, name) : NULL;
    PyObject *r = func ? PyObject_CallObject(func, args) : NULL;
    Py_XDECREF(func);
    Py_XDECREF(helper);
    Py_XDECREF(args);
    sw_py_put_back(&aside); /* the call's own error, if any, is dropped */
    return r;
}

static PyObject *or_none(void *obj) {
    return obj ? (PyObject *)obj : Py_None;
}

void sw_py_oom_seen(ProfilerObject *owner, PyObject *exc) {
    if (exc == NULL || !PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_RuntimeError))
        return;
    Py_XDECREF(call_oom("seen", "(OO)", or_none(owner), exc));
}

void sw_py_oom_seen_pending(ProfilerObject *owner) {
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
        return;
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    sw_py_oom_seen(owner, sw_py_aside_exception(&aside));
    sw_py_put_back(&aside);
}

int sw_py_oom_unnamed(PyObject *exc) {
    if (exc == NULL || !PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_RuntimeError))
        return 0;
    PyObject *r = call_oom("unnamed", "(O)", exc);
    int yes = r == Py_True;
    Py_XDECREF(r);
    return yes;
}

void sw_py_oom_report(ProfilerObject *owner, PyObject *exc, PyObject *path, const char *phase) {
    Py_XDECREF(call_oom("report", "(OOOs)", or_none(owner), exc, or_none(path), phase));
}
