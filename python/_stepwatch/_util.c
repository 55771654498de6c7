/*
 * _util.c — helpers the extension's type files share: SW_E* codes to Python exceptions,
 * argument parsing, dict building, batch sizes, binding like a function.
 */
#include "_stepwatch.h"

#include <errno.h>
#include <string.h>

/* stepwatch.Error(msg) with .code rc and .name. */
static PyObject *raise_error(module_state *st, int rc, PyObject *msg) {
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(st->error, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(sw_err_name(rc));
    if (code && name && PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "name", name) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
}

/* Raise the Python exception for a negative SW_E* code. `what` names the failed call. */
PyObject *sw_py_raise(module_state *st, int rc, const char *what) {
    if (rc == SW_ENOMEM)
        return PyErr_NoMemory();
    if (rc == SW_EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s: %s", what, sw_strerror(rc));
    /* The library's sentence names the file or name at fault and the cause, when it has one. */
    const char *why = *sw_last_error() ? sw_last_error() : sw_strerror(rc);
    return raise_error(st, rc, PyUnicode_FromFormat("%s: %s", what, why));
}

PyObject *sw_py_raise_write(module_state *st, const char *what, const char *path, int err) {
    return raise_error(
        st, SW_EIO,
        PyUnicode_FromFormat("%s: cannot write %s: %s", what, path, strerror(err ? err : EIO)));
}

/* A batch size argument: a non-negative int that fits 32 bits. */
int sw_py_parse_batch_size(PyObject *obj, uint32_t *out) {
    unsigned long v = PyLong_AsUnsignedLong(obj);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "batch_size must be an int in [0, 2**32)");
        }
        return -1;
    }
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be an int in [0, 2**32)");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int sw_py_parse_uint(PyObject *obj, const char *what, unsigned long max, unsigned int *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int negative = PyObject_RichCompareBool(obj, Py_False, Py_LT); /* False == 0 */
    if (negative < 0)
        return -1;
    if (negative) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0, not %R", what, obj);
        return -1;
    }
    unsigned long v = PyLong_AsUnsignedLong(obj);
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "%s must be at most %lu, not %R", what, max, obj);
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

const char *sw_py_name_utf8(PyObject *name, const char *what) {
    Py_ssize_t size = 0;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size);
    if (utf8 != NULL && (Py_ssize_t)strlen(utf8) != size) {
        PyErr_Format(PyExc_ValueError, "%s: embedded null character in %R", what, name);
        return NULL;
    }
    return utf8;
}

/* The id of obj, which must be an Action or Phase (type) of profiler; else a TypeError
 * "<who>: <what> must be ...". */
int sw_py_named_id(PyObject *obj, PyTypeObject *type, ProfilerObject *profiler, const char *who,
                   const char *what, uint32_t *id) {
    if (!PyObject_TypeCheck(obj, type) || ((NamedObject *)obj)->owner != profiler) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a %s of the same Profiler", who, what,
                     type->tp_name);
        return -1;
    }
    *id = ((NamedObject *)obj)->id;
    return 0;
}

/* Set d[key] = value (stolen); returns -1 on error. */
int sw_py_dict_put(PyObject *d, const char *key, PyObject *value) {
    if (!value)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

PyObject *sw_py_str_or_none(const char *s) {
    return s ? PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace") : Py_NewRef(Py_None);
}

/* Bind like a function, so decorated methods get self (Timed, LoopHook). */
PyObject *sw_py_bind_as_method(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Samples in a batch: the first dimension of its first array-like, looking through a few
 * levels of tuples, lists and dicts; 0 when it cannot be told (never an exception). shape is
 * the interned string "shape" (the caller keeps it, to spare a lookup per batch). */
/* The first array-like of a batch (borrowed from it): the first item of a tuple or list,
 * the first value of a dict or of another mapping (Hugging Face's BatchEncoding), down to 4
 * levels; the batch itself when it is none of these; NULL for an empty one. */
PyObject *sw_py_batch_leaf(PyObject *batch, PyObject *shape_name) {
    for (int level = 0; level < 4 && batch != NULL; level++) {
        if (PyTuple_Check(batch) || PyList_Check(batch)) {
            if (PySequence_Fast_GET_SIZE(batch) == 0)
                return NULL;
            batch = PySequence_Fast_GET_ITEM(batch, 0);
            continue;
        }
        if (PyDict_Check(batch)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            batch = PyDict_Next(batch, &pos, &key, &value) ? value : NULL;
            continue;
        }
        if (PyUnicode_Check(batch) || PyBytes_Check(batch) || !PyMapping_Check(batch) ||
            PyObject_HasAttr(batch, shape_name))
            return batch;
        /* A mapping of another type: its first value, which it keeps alive. */
        PyObject *values = PyMapping_Values(batch);
        if (values == NULL) {
            PyErr_Clear();
            return batch;
        }
        PyObject *first = PyList_GET_SIZE(values) > 0 ? PyList_GET_ITEM(values, 0) : NULL;
        Py_DECREF(values);
        batch = first;
    }
    return batch;
}

uint32_t sw_py_batch_size(PyObject *batch, PyObject *shape_name) {
    batch = sw_py_batch_leaf(batch, shape_name);
    if (batch == NULL)
        return 0;
    PyObject *shape = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    int found = PyObject_GetOptionalAttr(batch, shape_name, &shape);
#else
    int found = _PyObject_LookupAttr(batch, shape_name, &shape);
#endif
    unsigned long size = 0;
    if (found > 0 && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0)
        size = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(shape, 0));
    Py_XDECREF(shape);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return size > UINT32_MAX ? 0 : (uint32_t)size;
}

PyObject *sw_py_text_of(module_state *st, sw_py_writer write, void *ctx, const char *what) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return PyErr_SetFromErrno(PyExc_OSError);
    int rc;
    Py_BEGIN_ALLOW_THREADS /* a diagnosis reads every step of a run file */
        rc = write(ctx, f);
    Py_END_ALLOW_THREADS
        /* A stream in memory fails only for want of memory: said so, not "input/output
         * error" (a run file's read error keeps its own code and sentence). */
        int in_memory_failed = ferror(f);
    if (fclose(f) != 0)
        in_memory_failed = 1;
    if (in_memory_failed && (rc == 0 || rc == SW_EIO))
        rc = SW_ENOMEM;
    PyObject *text = rc == 0 ? PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace")
                             : sw_py_raise(st, rc, what);
    free(buf);
    return text;
}
