/*
 * _ranks.c — many ranks, for stepwatch.distributed: a Profiler's payload (the bytes every
 * rank sends), keeping a round in rank 0's run file and the clock offset in any rank's, and
 * the cross-rank view of gathered payloads as text (stepwatch/ranks.h). The transport is
 * Python's (torch.distributed); everything else is the library's.
 */
#include "_stepwatch.h"

#include <limits.h>
#include <stdlib.h>

/* The cross-rank view of r in format fmt_name, as str. */
static PyObject *view_text(module_state *st, const sw_ranks *r, const char *fmt_name, int top) {
    sw_format fmt;
    if (sw_format_parse(fmt_name, &fmt) != 0 ||
        (fmt != SW_FORMAT_TABLE && fmt != SW_FORMAT_MARKDOWN && fmt != SW_FORMAT_JSON))
        return PyErr_Format(PyExc_ValueError,
                            "unknown cross-rank view format '%s' (table, markdown, json)",
                            fmt_name);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return PyErr_SetFromErrno(PyExc_OSError);
    int rc = sw_ranks_write(r, fmt, top, f);
    if (fclose(f) != 0 && rc == 0)
        rc = SW_EIO;
    PyObject *text = rc == 0 ? PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace")
                             : sw_py_raise(st, rc, "cross-rank view");
    free(buf);
    return text;
}

PyObject *sw_py_ranks_view(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"payloads", "world_size", "format", "top", NULL};
    Py_buffer payloads;
    int world = 0, top = 3;
    const char *fmt = "table";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i|si:ranks_view", kwlist, &payloads, &world,
                                     &fmt, &top))
        return NULL;
    module_state *st = sw_py_state_of_module(module);
    PyObject *text = NULL;
    if (world < 1 || payloads.len != (Py_ssize_t)world * SW_RANK_PAYLOAD_SIZE) {
        PyErr_Format(PyExc_ValueError, "ranks_view: %zd bytes are not %d payloads of %d bytes",
                     payloads.len, world, SW_RANK_PAYLOAD_SIZE);
    } else {
        sw_ranks *r = NULL;
        int rc = sw_ranks_reduce(payloads.buf, world, &r);
        text = rc == 0 ? view_text(st, r, fmt, top) : sw_py_raise(st, rc, "ranks_view");
        sw_ranks_free(r);
    }
    PyBuffer_Release(&payloads);
    return text;
}

PyObject *sw_py_run_ranks_text(PyObject *module, sw_run *run, const char *fmt, int top) {
    module_state *st = sw_py_state_of_module(module);
    sw_ranks *r = NULL;
    int rc = sw_run_ranks(run, &r);
    PyObject *text = rc == 0 ? view_text(st, r, fmt, top) : sw_py_raise(st, rc, "run_ranks");
    sw_ranks_free(r);
    return text;
}

/* ---- Profiler methods ---- */

/* The open core profiler of self, or NULL with ValueError. */
static sw_profiler *open_profiler(ProfilerObject *self, const char *what) {
    if (self->p == NULL)
        PyErr_Format(PyExc_ValueError, "%s on a closed Profiler", what);
    return self->p;
}

PyObject *sw_py_profiler_rank_payload(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"rank", "world_size", NULL};
    int rank = 0, world = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|ii:rank_payload", kwlist, &rank, &world))
        return NULL;
    if (world > 0 && (rank < 0 || rank >= world))
        return PyErr_Format(PyExc_ValueError, "rank_payload: rank %d of %d", rank, world);
    sw_profiler *p = open_profiler(self, "rank_payload");
    if (p == NULL)
        return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, SW_RANK_PAYLOAD_SIZE);
    if (bytes == NULL)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = sw_rank_payload(p, rank, world, PyBytes_AS_STRING(bytes),
                                                SW_RANK_PAYLOAD_SIZE);
    Py_END_ALLOW_THREADS if (rc != 0) {
        Py_DECREF(bytes);
        module_state *st = sw_py_state_of_type(Py_TYPE(self));
        return st ? sw_py_raise(st, rc, "rank_payload") : NULL;
    }
    return bytes;
}

/* True when kept, False when the profiler has no run file (or it is complete). */
static PyObject *kept(ProfilerObject *self, int rc, const char *what) {
    if (rc == 0)
        Py_RETURN_TRUE;
    if (rc == SW_ENOTFOUND || rc == SW_ESTATE)
        Py_RETURN_FALSE;
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    return st ? sw_py_raise(st, rc, what) : NULL;
}

PyObject *sw_py_profiler_add_ranks(ProfilerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"payloads", "world_size", "final", NULL};
    Py_buffer payloads;
    int world = 0, final = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i|p:add_ranks", kwlist, &payloads, &world,
                                     &final))
        return NULL;
    PyObject *result = NULL;
    sw_profiler *p = open_profiler(self, "add_ranks");
    if (p != NULL && (world < 1 || payloads.len != (Py_ssize_t)world * SW_RANK_PAYLOAD_SIZE))
        PyErr_Format(PyExc_ValueError, "add_ranks: %zd bytes are not %d payloads of %d bytes",
                     payloads.len, world, SW_RANK_PAYLOAD_SIZE);
    else if (p != NULL)
        result = kept(self, sw_run_add_ranks(p, payloads.buf, SW_RANK_PAYLOAD_SIZE, world, final),
                      "add_ranks");
    PyBuffer_Release(&payloads);
    return result;
}

PyObject *sw_py_profiler_set_clock_offset(ProfilerObject *self, PyObject *arg) {
    long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred())
        return NULL;
    sw_profiler *p = open_profiler(self, "set_clock_offset");
    return p ? kept(self, sw_run_set_clock_offset(p, ns), "set_clock_offset") : NULL;
}

PyObject *sw_py_profiler_set_world_size(ProfilerObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    sw_profiler *p = open_profiler(self, "set_world_size");
    if (p == NULL)
        return NULL;
    if (n < 1 || n > INT_MAX)
        return PyErr_Format(PyExc_ValueError, "set_world_size: %ld ranks (at least 1)", n);
    sw_set_world_size(p, (int)n);
    Py_RETURN_NONE;
}
