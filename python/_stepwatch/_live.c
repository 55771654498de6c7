/*
 * _live.c — Live(profiler, window_s=10.0): the figures of the live status line, for Python
 * (stepwatch.live.TensorBoard writes them to TensorBoard). update() snapshots the profiler
 * and returns a dict over the last window (sw_live_update); format() is the status line's
 * text.
 */
#include "_stepwatch.h"

#include <math.h>

typedef struct {
    PyObject_HEAD ProfilerObject *owner; /* keeps the profiler (and so its sw_profiler) alive */
    sw_live *w;
    sw_live_values last;
} LiveObject;

static PyObject *Live_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"profiler", "window_s", NULL};
    module_state *st = sw_py_state_of_type(type);
    if (!st)
        return NULL;
    PyObject *profiler;
    double window_s = 10.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|d:Live", kwlist, st->profiler_type,
                                     &profiler, &window_s))
        return NULL;
    ProfilerObject *owner = (ProfilerObject *)profiler;
    if (!owner->p)
        return sw_py_raise(st, SW_ESTATE, "Live: the profiler is closed");
    if (!(window_s > 0))
        return PyErr_Format(PyExc_ValueError, "Live: window_s must be above 0");
    LiveObject *self = (LiveObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->last = (sw_live_values)SW_LIVE_VALUES_INIT;
    int rc = sw_live_new(owner->p, window_s, &self->w);
    if (rc < 0) {
        Py_DECREF(self);
        return sw_py_raise(st, rc, "Live");
    }
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    return (PyObject *)self;
}

static PyObject *number_or_none(double v) {
    return isfinite(v) ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

static PyObject *Live_update(LiveObject *self, PyObject *unused) {
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (!st)
        return NULL;
    if (!self->owner->p)
        return sw_py_raise(st, SW_ESTATE, "Live.update: the profiler is closed");
    int rc = sw_live_update(self->w, &self->last);
    if (rc < 0)
        return sw_py_raise(st, rc, "Live.update");
    const sw_live_values *v = &self->last;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const char *slowest = v->slowest == SW_CAT_COUNT ? NULL : sw_category_name(v->slowest);
    if (sw_py_dict_put(d, "window_s", PyFloat_FromDouble(v->window_s)) < 0 ||
        sw_py_dict_put(d, "steps", PyLong_FromUnsignedLongLong(v->steps)) < 0 ||
        sw_py_dict_put(d, "total_steps", PyLong_FromUnsignedLongLong(v->total_steps)) < 0 ||
        sw_py_dict_put(d, "steps_per_s", number_or_none(v->steps_per_s)) < 0 ||
        sw_py_dict_put(d, "samples_per_s", number_or_none(v->samples_per_s)) < 0 ||
        sw_py_dict_put(d, "step_p50_ns", number_or_none(v->step_p50_ns)) < 0 ||
        sw_py_dict_put(d, "step_p99_ns", number_or_none(v->step_p99_ns)) < 0 ||
        sw_py_dict_put(d, "data_share", number_or_none(v->data_share)) < 0 ||
        sw_py_dict_put(d, "slowest", sw_py_str_or_none(slowest)) < 0 ||
        sw_py_dict_put(d, "slowest_share", number_or_none(v->slowest_share)) < 0 ||
        sw_py_dict_put(d, "flops_per_s", number_or_none(v->flops_per_s)) < 0 ||
        sw_py_dict_put(d, "mfu", number_or_none(v->mfu)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *Live_format(LiveObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"width", NULL};
    int width = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:format", kwlist, &width))
        return NULL;
    char buf[512];
    return PyUnicode_FromString(sw_live_format(&self->last, buf, sizeof buf, width));
}

static int Live_traverse(LiveObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static void Live_dealloc(LiveObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    sw_live_free(self->w);
    Py_CLEAR(self->owner);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Live_methods[] = {
    {"update", (PyCFunction)Live_update, METH_NOARGS,
     "update($self, /)\n--\n\n"
     "-> dict: snapshot the profiler; the figures of the last window: window_s, "
     "steps, total_steps, steps_per_s, samples_per_s, step_p50_ns, step_p99_ns, "
     "data_share, slowest (a category), slowest_share, flops_per_s, mfu (Profiler(flops=...)). "
     "None where undefined."},
    {"format", (PyCFunction)(void (*)(void))Live_format, METH_VARARGS | METH_KEYWORDS,
     "format($self, /, width=0)\n--\n\n"
     "-> str: the status line's text for the last update."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Live_slots[] = {
    {Py_tp_doc, "Live(profiler, window_s=10.0)\n--\n\n"
                "The live status line's figures over a sliding window (sw_live_*)."},
    {Py_tp_new, Live_new},
    {Py_tp_methods, Live_methods},
    {Py_tp_traverse, Live_traverse},
    {Py_tp_dealloc, Live_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_live_spec = {
    .name = "stepwatch._stepwatch.Live",
    .basicsize = sizeof(LiveObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Live_slots,
};
