/*
 * _ignite_timer.c — Timer: Ignite's Timer (start, pause, resume, reset, step, value) over the
 * core's sw_timer. Methods take and ignore positional arguments so they can be attached as
 * event handlers.
 */
#include "_stepwatch.h"

typedef struct {
    PyObject_HEAD sw_timer t;
} TimerObject;

static int Timer_init(TimerObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"average", NULL};
    int average = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:Timer", kwlist, &average))
        return -1;
    sw_timer_init(&self->t, average);
    return 0;
}

static PyObject *Timer_reset(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_reset(&self->t);
    return Py_NewRef(self);
}

static PyObject *Timer_pause(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_pause(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_resume(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_resume(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_step(TimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    sw_timer_step(&self->t);
    Py_RETURN_NONE;
}

static PyObject *Timer_value(TimerObject *self, PyObject *unused) {
    return PyFloat_FromDouble(sw_timer_value(&self->t));
}

static PyObject *Timer_is_running(TimerObject *self, PyObject *unused) {
    return PyBool_FromLong(self->t.running);
}

static PyObject *Timer_get_average(TimerObject *self, void *closure) {
    return PyBool_FromLong(self->t.average);
}

/* Ignite keeps step_count as a float. */
static PyObject *Timer_get_steps(TimerObject *self, void *closure) {
    return PyFloat_FromDouble((double)self->t.steps);
}

/* Ignite's total: the seconds of the closed intervals (value() adds the running one). */
static PyObject *Timer_get_total(TimerObject *self, void *closure) {
    return PyFloat_FromDouble((double)self->t.elapsed_ns / 1e9);
}

static PyObject *Timer_get_running(TimerObject *self, void *closure) {
    return PyBool_FromLong(self->t.running);
}

static void Timer_dealloc(TimerObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int Timer_traverse(TimerObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyMethodDef Timer_methods[] = {
    {"reset", (PyCFunction)(void (*)(void))Timer_reset, METH_FASTCALL,
     "reset($self, /, *args)\n--\n\nReset and start running; returns self."},
    {"pause", (PyCFunction)(void (*)(void))Timer_pause, METH_FASTCALL,
     "pause($self, /, *args)\n--\n\nPause."},
    {"resume", (PyCFunction)(void (*)(void))Timer_resume, METH_FASTCALL,
     "resume($self, /, *args)\n--\n\nResume."},
    {"step", (PyCFunction)(void (*)(void))Timer_step, METH_FASTCALL,
     "step($self, /, *args)\n--\n\nCount one step (for average=True)."},
    {"value", (PyCFunction)Timer_value, METH_NOARGS,
     "value($self, /)\n--\n\n"
     "Seconds elapsed (divided by the steps if average)."},
    {"is_running", (PyCFunction)Timer_is_running, METH_NOARGS,
     "is_running($self, /)\n--\n\n"
     "True while running."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Timer_getset[] = {
    {"average", (getter)Timer_get_average, NULL, "Whether value() averages per step.", NULL},
    {"step_count", (getter)Timer_get_steps, NULL, "Steps counted (a float, as Ignite's).", NULL},
    {"total", (getter)Timer_get_total, NULL,
     "Seconds of the closed intervals (Ignite's Timer.total; value() adds the running one).", NULL},
    {"running", (getter)Timer_get_running, NULL, "True while running (Ignite's Timer.running).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Timer_slots[] = {
    {Py_tp_doc, "Timer(average=False)\n--\n\n"
                "Ignite's Timer, in C. Starts running on creation."},
    {Py_tp_init, Timer_init},
    {Py_tp_methods, Timer_methods},
    {Py_tp_getset, Timer_getset},
    {Py_tp_traverse, Timer_traverse},
    {Py_tp_dealloc, Timer_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_timer_spec = {
    .name = "stepwatch.Timer",
    .basicsize = sizeof(TimerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Timer_slots,
};
