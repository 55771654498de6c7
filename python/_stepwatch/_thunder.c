/*
 * _thunder.c — thunder's TimeProfiler marks, in C (stepwatch._stepwatch.Intervals).
 *
 * thunder's TimeProfiler keeps, per key ("train batch", "train epoch", ...), the time of every
 * mark its callback hooks make, and pairs them up at the end of each training epoch: the 1st
 * and 2nd marks are one interval, the 3rd and 4th the next, and a mark left alone is an
 * interval of length 0. Lightning calls a callback's hooks through its own dispatch (about a
 * microsecond each here), so what the hooks do themselves should cost little:
 * stepwatch.lightning.TimeProfiler sets functools.partial(intervals.mark, key) as its hooks, so
 * each is one C call that sums the interval as it closes (memory does not grow with the marks).
 *
 *   mark(key, *ignored)        one mark of key (an index, or a tuple of indices: several keys
 *                              marked at once); the hook's own arguments are ignored
 *   mark_batch(key, trainer, module, batch, *ignored)
 *                              a mark of key, and one batch of stepwatch.batch_size(batch)
 *                              samples counted for it (thunder's batch sizes)
 *   state()                    per key: (open mark in ns or None, seconds summed, intervals,
 *                              batches, samples)
 *   set_state(rows), clear()
 *
 * Marks never raise on the loop's account: a bad key is ignored.
 */
#include "_stepwatch.h"

#include <structmember.h>
#include <stdlib.h>

typedef struct {
    uint64_t open_ns; /* the mark that opened the current interval; 0 when none is open */
    uint64_t total_ns;
    uint64_t intervals;
    uint64_t batches, samples;
} key_state;

typedef struct {
    PyObject_HEAD Py_ssize_t nkeys;
    key_state *keys;
    PyObject *shape_name;
} IntervalsObject;

static void mark_one(IntervalsObject *self, Py_ssize_t i, uint64_t now) {
    if (i < 0 || i >= self->nkeys)
        return;
    key_state *k = &self->keys[i];
    if (k->open_ns == 0) {
        k->open_ns = now;
        return;
    }
    k->total_ns += now > k->open_ns ? now - k->open_ns : 0;
    k->intervals++;
    k->open_ns = 0;
}

/* Mark the key (an int) or keys (a tuple of ints) of arg; returns the first key or -1. */
static Py_ssize_t mark_keys(IntervalsObject *self, PyObject *arg) {
    uint64_t now = sw_now_ns();
    if (PyLong_CheckExact(arg)) {
        Py_ssize_t i = PyLong_AsSsize_t(arg);
        if (i == -1 && PyErr_Occurred())
            PyErr_Clear();
        mark_one(self, i, now);
        return i;
    }
    Py_ssize_t first = -1;
    if (PyTuple_Check(arg)) {
        for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(arg); t++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(arg, t));
            if (i == -1 && PyErr_Occurred())
                PyErr_Clear();
            mark_one(self, i, now);
            first = t == 0 ? i : first;
        }
    }
    return first;
}

static PyObject *Intervals_mark(IntervalsObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs >= 1)
        mark_keys(self, args[0]);
    Py_RETURN_NONE;
}

static PyObject *Intervals_mark_batch(IntervalsObject *self, PyObject *const *args,
                                      Py_ssize_t nargs) {
    if (nargs < 1)
        Py_RETURN_NONE;
    Py_ssize_t i = mark_keys(self, args[0]);
    if (i >= 0 && i < self->nkeys) {
        self->keys[i].batches++;
        if (nargs >= 4)
            self->keys[i].samples += sw_py_batch_size(args[3], self->shape_name);
    }
    Py_RETURN_NONE;
}

static PyObject *Intervals_state(IntervalsObject *self, PyObject *unused) {
    PyObject *out = PyList_New(self->nkeys);
    for (Py_ssize_t i = 0; out != NULL && i < self->nkeys; i++) {
        const key_state *k = &self->keys[i];
        PyObject *open = k->open_ns ? PyLong_FromUnsignedLongLong(k->open_ns) : Py_NewRef(Py_None);
        PyObject *row = open ? Py_BuildValue("(NdKKK)", open, (double)k->total_ns / 1e9,
                                             (unsigned long long)k->intervals,
                                             (unsigned long long)k->batches,
                                             (unsigned long long)k->samples)
                             : NULL;
        if (row == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, row);
    }
    return out;
}

/* set_state(rows): rows as state() gives them (an open mark may be None). */
static PyObject *Intervals_set_state(IntervalsObject *self, PyObject *rows) {
    PyObject *seq = PySequence_Fast(rows, "set_state: rows must be a sequence");
    if (seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != self->nkeys) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "set_state: %zd rows for %zd keys",
                            PySequence_Fast_GET_SIZE(rows), self->nkeys);
    }
    key_state *keys = calloc((size_t)self->nkeys, sizeof *keys);
    int ok = keys != NULL;
    for (Py_ssize_t i = 0; ok && i < self->nkeys; i++) {
        PyObject *open;
        double total = 0;
        unsigned long long intervals = 0, batches = 0, samples = 0;
        PyObject *row = PySequence_Tuple(PySequence_Fast_GET_ITEM(seq, i));
        ok = row != NULL && PyArg_ParseTuple(row, "OdKKK:set_state", &open, &total, &intervals,
                                             &batches, &samples);
        if (ok && open != Py_None) {
            keys[i].open_ns = PyLong_AsUnsignedLongLong(open);
            ok = !PyErr_Occurred();
        }
        Py_XDECREF(row);
        keys[i].total_ns = total > 0 ? (uint64_t)(total * 1e9 + 0.5) : 0;
        keys[i].intervals = intervals;
        keys[i].batches = batches;
        keys[i].samples = samples;
    }
    Py_DECREF(seq);
    if (!ok) {
        free(keys);
        return keys == NULL ? PyErr_NoMemory() : NULL;
    }
    free(self->keys);
    self->keys = keys;
    Py_RETURN_NONE;
}

static PyObject *Intervals_clear(IntervalsObject *self, PyObject *unused) {
    memset(self->keys, 0, (size_t)self->nkeys * sizeof *self->keys);
    Py_RETURN_NONE;
}

static PyObject *Intervals_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"nkeys", NULL};
    Py_ssize_t nkeys;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:Intervals", keywords, &nkeys))
        return NULL;
    if (nkeys < 1 || (size_t)nkeys > SIZE_MAX / sizeof(key_state)) {
        PyErr_SetString(PyExc_ValueError, "Intervals: nkeys must be >= 1");
        return NULL;
    }
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    IntervalsObject *self = (IntervalsObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->keys = calloc((size_t)nkeys, sizeof *self->keys);
    if (self->keys == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->nkeys = nkeys;
    self->shape_name = Py_NewRef(st->shape_name);
    return (PyObject *)self;
}

static void Intervals_dealloc(IntervalsObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->shape_name);
    free(self->keys);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Intervals_methods[] = {
    {"mark", (PyCFunction)(void (*)(void))Intervals_mark, METH_FASTCALL,
     "mark($self, key, /, *ignored)\n--\n\n"
     "One mark of key (an index or a tuple of indices)."},
    {"mark_batch", (PyCFunction)(void (*)(void))Intervals_mark_batch, METH_FASTCALL,
     "mark_batch($self, key, trainer, module, batch, /, *ignored)\n--\n\n"
     "A mark of key and one batch of batch_size(batch) samples counted for it."},
    {"state", (PyCFunction)Intervals_state, METH_NOARGS,
     "state($self, /)\n--\n\n"
     "-> [(open_ns or None, seconds, intervals, batches, samples)] per key."},
    {"set_state", (PyCFunction)Intervals_set_state, METH_O,
     "set_state($self, rows, /)\n--\n\n"
     "As state() gives."},
    {"clear", (PyCFunction)Intervals_clear, METH_NOARGS,
     "clear($self, /)\n--\n\n"
     "No marks."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Intervals_members[] = {
    {"nkeys", T_PYSSIZET, offsetof(IntervalsObject, nkeys), READONLY, "Keys kept."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Intervals_slots[] = {
    {Py_tp_doc, "Intervals(nkeys)\n--\n\n"
                "Thunder's TimeProfiler marks per key, paired and summed in C "
                "(stepwatch.lightning.TimeProfiler); see python/_stepwatch/_thunder.c."},
    {Py_tp_new, Intervals_new},
    {Py_tp_methods, Intervals_methods},
    {Py_tp_members, Intervals_members},
    {Py_tp_dealloc, Intervals_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_intervals_spec = {
    .name = "stepwatch.Intervals",
    .basicsize = sizeof(IntervalsObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Intervals_slots,
};
