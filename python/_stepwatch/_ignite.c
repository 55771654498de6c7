/*
 * _ignite.c — the per-iteration marks of an event-driven loop, in C (stepwatch._stepwatch.Marks).
 *
 * PyTorch-Ignite announces each iteration by events (GET_BATCH_STARTED, GET_BATCH_COMPLETED,
 * ITERATION_STARTED, ITERATION_COMPLETED) and calls each handler through its own dispatch,
 * which alone costs about 250 ns per handler here. stepwatch.ignite registers a Marks' bound
 * methods as those handlers, so each mark is one C call: no Python frame, and no float or
 * tuple made per iteration. The last max_rows iterations are kept for Ignite's
 * per-iteration CSV in a ring of C rows (memory bounded, the overwritten ones counted).
 *
 *   fetch_begin()          the last GET_BATCH_STARTED handler: the fetch begins.
 *   fetch_end(engine)      the first GET_BATCH_COMPLETED handler: the step begins at the time
 *                          its fetch began, with engine.state.batch's size, and the fetch is
 *                          recorded as "data". A fetch that ends the data (StopIteration)
 *                          reaches no fetch_end, so it opens no step; the next batch's data
 *                          wait then counts from that fetch (Ignite restarts the iterator
 *                          without a new GET_BATCH_STARTED).
 *   work_begin()           the last ITERATION_STARTED handler: the process function begins
 *                          (and the step, when the engine runs without data).
 *   work_end()             the first ITERATION_COMPLETED handler: "processing" ends.
 *   slot_begin(i), slot_end(i)
 *                          around the user's handlers of an iteration event: recorded as the
 *                          slot's action (callback:Events.X) and kept in the row. Handlers
 *                          that ran between steps (GET_BATCH_STARTED) are recorded once the
 *                          step of their batch begins, so they carry its index.
 *   iteration_end(engine)  the last ITERATION_COMPLETED handler: ends the work if still open,
 *                          keeps the row (engine.state.epoch and .iteration), ends the step.
 *
 * On an engine whose events stepwatch fires itself (FireEvent, _ignite_fire_event.c) none of these
 * is registered: FireEvent calls sw_py_marks_before/after around each iteration event's
 * handlers, which make the same marks without a handler call. There, slot i times the
 * handlers of iteration event i (SW_PY_GET_BATCH_STARTED...).
 *
 * HandlerTimer (below) is the per-handler timing of HandlersTimeProfiler, also in C.
 *
 * Like the rest of the hot path, marks never raise on the loop's account: a closed profiler
 * makes them no-ops, and an engine state that cannot be read gives zeros.
 */
#include "_ignite.h"

#include <structmember.h>
#include <stdlib.h>
#include <string.h>

#define MARKS_SLOTS 4

typedef struct {
    uint64_t epoch, iteration;
    uint64_t data_ns, work_ns;
    uint64_t slot_ns[MARKS_SLOTS];
} marks_row;

typedef struct {
    PyObject_HEAD ProfilerObject *owner;
    sw_id data, work;
    sw_id slot[MARKS_SLOTS];
    int nslots;
    /* interned attribute names read from the engine */
    PyObject *state_name, *batch_name, *epoch_name, *iteration_name, *shape_name;
    /* The iteration in progress (the engine's thread; the GIL orders the marks). */
    int step_open;
    uint64_t fetch_start;                  /* 0: no fetch pending */
    uint64_t work_start;                   /* 0: no work in progress */
    uint64_t slot_start[MARKS_SLOTS];      /* 0: slot not open */
    uint64_t slot_pending[MARKS_SLOTS][2]; /* a slot that ended between steps (the fetch's
                                              GET_BATCH_STARTED handlers): recorded in the
                                              step its batch begins, so it has its index */
    marks_row row;
    /* The kept rows: a ring holding the last `capacity` iterations. */
    marks_row *rows;
    Py_ssize_t capacity, kept, next;
    unsigned long long dropped;
} MarksObject;

/* ------------------------------------------------------------------------------------------
 * Reading the engine's state (zeros when it cannot be read)
 * ---------------------------------------------------------------------------------------- */

/* engine.state, or NULL (no exception) when it cannot be read. */
static PyObject *engine_state(MarksObject *self, PyObject *engine) {
    PyObject *state = PyObject_GetAttr(engine, self->state_name);
    if (state == NULL)
        PyErr_Clear();
    return state;
}

/* state.<name> as a count; 0 when it cannot be read. */
static uint64_t state_count(PyObject *state, PyObject *name) {
    PyObject *value = PyObject_GetAttr(state, name);
    unsigned long long n = 0;
    if (value != NULL && PyLong_Check(value))
        n = PyLong_AsUnsignedLongLong(value);
    Py_XDECREF(value);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * The marks
 * ---------------------------------------------------------------------------------------- */

static void marks_step_end(MarksObject *self) {
    if (self->step_open) {
        sw_py_step_end(self->owner, 0);
        self->step_open = 0;
    }
}

static void marks_fetch_begin(MarksObject *self) {
    self->fetch_start = sw_now_ns();
}

static void marks_fetch_end(MarksObject *self, PyObject *engine) {
    uint64_t now = sw_now_ns();
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    uint64_t start = self->fetch_start != 0 && self->fetch_start <= now ? self->fetch_start : now;
    self->fetch_start = 0;
    marks_step_end(self); /* the previous iteration did not finish (terminated, raised) */
    uint32_t size = 0;
    PyObject *state = engine_state(self, engine);
    if (state != NULL) {
        PyObject *batch = PyObject_GetAttr(state, self->batch_name);
        if (batch != NULL)
            size = sw_py_batch_size(batch, self->shape_name);
        else
            PyErr_Clear();
        Py_XDECREF(batch);
        Py_DECREF(state);
    }
    sw_step_begin_at(p, size, start);
    sw_record(p, self->data, start, now);
    self->step_open = 1;
    for (int i = 0; i < self->nslots; i++) {
        if (self->slot_pending[i][1] != 0)
            sw_record(p, self->slot[i], self->slot_pending[i][0], self->slot_pending[i][1]);
        self->slot_pending[i][0] = self->slot_pending[i][1] = 0;
    }
    self->row.data_ns = now - start;
}

static void marks_work_begin(MarksObject *self) {
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    if (!self->step_open) { /* engine.run(data=None): no fetch marks the step */
        sw_step_begin(p, 0);
        self->step_open = 1;
    }
    self->work_start = sw_now_ns();
}

static void marks_work_end(MarksObject *self) {
    uint64_t now = sw_now_ns();
    sw_profiler *p = self->owner->p;
    if (p == NULL || self->work_start == 0 || self->work_start > now)
        return;
    sw_record(p, self->work, self->work_start, now);
    self->row.work_ns = now - self->work_start;
    self->work_start = 0;
}

static void marks_slot_begin(MarksObject *self, int i) {
    self->slot_start[i] = sw_now_ns();
}

static void marks_slot_end(MarksObject *self, int i) {
    uint64_t now = sw_now_ns();
    uint64_t start = self->slot_start[i];
    self->slot_start[i] = 0;
    sw_profiler *p = self->owner->p;
    if (p == NULL || start == 0 || start > now)
        return;
    if (self->step_open) {
        sw_record(p, self->slot[i], start, now);
    } else {
        self->slot_pending[i][0] = start;
        self->slot_pending[i][1] = now;
    }
    self->row.slot_ns[i] = now - start;
}

static void marks_iteration_end(MarksObject *self, PyObject *engine) {
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    marks_work_end(self);
    PyObject *state = engine_state(self, engine);
    if (state != NULL) {
        self->row.epoch = state_count(state, self->epoch_name);
        self->row.iteration = state_count(state, self->iteration_name);
        Py_DECREF(state);
    }
    if (self->kept == self->capacity)
        self->dropped++;
    else
        self->kept++;
    self->rows[self->next] = self->row;
    self->next = (self->next + 1) % self->capacity;
    memset(&self->row, 0, sizeof self->row);
    marks_step_end(self);
}

/* ------------------------------------------------------------------------------------------
 * The marks of one whole event, for FireEvent (_ignite_fire_event.c): what the handlers above do
 * when registered first and last, without a handler call.
 * ---------------------------------------------------------------------------------------- */

int sw_py_marks_slots(PyObject *marks) {
    return ((MarksObject *)marks)->nslots;
}

void sw_py_marks_before(PyObject *marks, int event, int timed, PyObject *engine) {
    MarksObject *self = (MarksObject *)marks;
    if (event == SW_PY_GET_BATCH_COMPLETED)
        marks_fetch_end(self, engine);
    else if (event == SW_PY_ITERATION_COMPLETED)
        marks_work_end(self);
    if (timed)
        marks_slot_begin(self, event);
}

void sw_py_marks_after(PyObject *marks, int event, int timed, PyObject *engine) {
    MarksObject *self = (MarksObject *)marks;
    if (timed)
        marks_slot_end(self, event);
    if (event == SW_PY_GET_BATCH_STARTED)
        marks_fetch_begin(self);
    else if (event == SW_PY_ITERATION_STARTED)
        marks_work_begin(self);
    else if (event == SW_PY_ITERATION_COMPLETED)
        marks_iteration_end(self, engine);
}

/* ------------------------------------------------------------------------------------------
 * The marks as handlers (Python methods)
 * ---------------------------------------------------------------------------------------- */

static PyObject *Marks_fetch_begin(MarksObject *self, PyObject *unused) {
    marks_fetch_begin(self);
    Py_RETURN_NONE;
}

static PyObject *Marks_fetch_end(MarksObject *self, PyObject *engine) {
    marks_fetch_end(self, engine);
    Py_RETURN_NONE;
}

static PyObject *Marks_work_begin(MarksObject *self, PyObject *unused) {
    marks_work_begin(self);
    Py_RETURN_NONE;
}

static PyObject *Marks_work_end(MarksObject *self, PyObject *unused) {
    marks_work_end(self);
    Py_RETURN_NONE;
}

static int slot_index(MarksObject *self, PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i >= self->nslots) {
        PyErr_Format(PyExc_IndexError, "Marks: slot %ld out of range (%d slots)", i, self->nslots);
        return -1;
    }
    return (int)i;
}

static PyObject *Marks_slot_begin(MarksObject *self, PyObject *arg) {
    int i = slot_index(self, arg);
    if (i < 0)
        return NULL;
    marks_slot_begin(self, i);
    Py_RETURN_NONE;
}

static PyObject *Marks_slot_end(MarksObject *self, PyObject *arg) {
    int i = slot_index(self, arg);
    if (i < 0)
        return NULL;
    marks_slot_end(self, i);
    Py_RETURN_NONE;
}

static PyObject *Marks_iteration_end(MarksObject *self, PyObject *engine) {
    marks_iteration_end(self, engine);
    Py_RETURN_NONE;
}

/* close(): end the step in progress (the run ended or raised inside an iteration). */
static PyObject *Marks_close(MarksObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL)
        marks_step_end(self);
    self->fetch_start = self->work_start = 0;
    memset(self->slot_start, 0, sizeof self->slot_start);
    memset(self->slot_pending, 0, sizeof self->slot_pending);
    memset(&self->row, 0, sizeof self->row);
    Py_RETURN_NONE;
}

/* rows(): the kept rows, oldest first, as tuples (epoch, iteration, data_s, work_s,
 * slot_s...) with one slot_s per slot. */
static PyObject *Marks_rows(MarksObject *self, PyObject *unused) {
    PyObject *out = PyList_New(self->kept);
    if (out == NULL)
        return NULL;
    Py_ssize_t first = (self->next - self->kept + self->capacity) % self->capacity;
    for (Py_ssize_t k = 0; k < self->kept; k++) {
        const marks_row *r = &self->rows[(first + k) % self->capacity];
        PyObject *item = PyTuple_New(4 + self->nslots);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, item);
        PyObject *values[4 + MARKS_SLOTS] = {PyLong_FromUnsignedLongLong(r->epoch),
                                             PyLong_FromUnsignedLongLong(r->iteration),
                                             PyFloat_FromDouble((double)r->data_ns / 1e9),
                                             PyFloat_FromDouble((double)r->work_ns / 1e9)};
        for (int i = 0; i < self->nslots; i++)
            values[4 + i] = PyFloat_FromDouble((double)r->slot_ns[i] / 1e9);
        int failed = 0;
        for (int i = 0; i < 4 + self->nslots; i++) {
            failed |= values[i] == NULL;
            PyTuple_SET_ITEM(item, i, values[i]); /* a NULL item is fine in a tuple we drop */
        }
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ------------------------------------------------------------------------------------------
 * The type
 * ---------------------------------------------------------------------------------------- */

static PyObject *intern(const char *s, int *failed) {
    PyObject *name = PyUnicode_InternFromString(s);
    *failed |= name == NULL;
    return name;
}

static PyObject *Marks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler", "data", "work", "slots", "max_rows", NULL};
    PyObject *profiler, *data, *work, *slots = NULL;
    Py_ssize_t max_rows = 100000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|On:Marks", keywords, &profiler, &data,
                                     &work, &slots, &max_rows))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "Marks: profiler must be a stepwatch.Profiler");
        return NULL;
    }
    if (max_rows < 1 || (size_t)max_rows > SIZE_MAX / sizeof(marks_row)) {
        PyErr_SetString(PyExc_ValueError, "Marks: max_rows must be >= 1");
        return NULL;
    }
    ProfilerObject *owner = (ProfilerObject *)profiler;
    sw_id ids[2 + MARKS_SLOTS];
    if (sw_py_named_id(data, st->action_type, owner, "Marks", "data", &ids[0]) < 0 ||
        sw_py_named_id(work, st->action_type, owner, "Marks", "work", &ids[1]) < 0)
        return NULL;
    Py_ssize_t nslots = 0;
    if (slots != NULL && slots != Py_None) {
        if (!PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) > MARKS_SLOTS) {
            PyErr_Format(PyExc_TypeError, "Marks: slots must be a tuple of at most %d Actions",
                         MARKS_SLOTS);
            return NULL;
        }
        nslots = PyTuple_GET_SIZE(slots);
        for (Py_ssize_t i = 0; i < nslots; i++)
            if (sw_py_named_id(PyTuple_GET_ITEM(slots, i), st->action_type, owner, "Marks",
                               "each slot", &ids[2 + i]) < 0)
                return NULL;
    }

    MarksObject *self = (MarksObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->rows = calloc((size_t)max_rows, sizeof *self->rows);
    if (self->rows == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    int failed = 0;
    self->state_name = intern("state", &failed);
    self->batch_name = intern("batch", &failed);
    self->epoch_name = intern("epoch", &failed);
    self->iteration_name = intern("iteration", &failed);
    self->shape_name = intern("shape", &failed);
    if (failed) {
        Py_DECREF(self);
        return NULL;
    }
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->data = ids[0];
    self->work = ids[1];
    for (Py_ssize_t i = 0; i < nslots; i++)
        self->slot[i] = ids[2 + i];
    self->nslots = (int)nslots;
    self->capacity = max_rows;
    return (PyObject *)self;
}

static int Marks_traverse(MarksObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static void Marks_dealloc(MarksObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->state_name);
    Py_CLEAR(self->batch_name);
    Py_CLEAR(self->epoch_name);
    Py_CLEAR(self->iteration_name);
    Py_CLEAR(self->shape_name);
    free(self->rows);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Marks_methods[] = {
    {"fetch_begin", (PyCFunction)Marks_fetch_begin, METH_NOARGS,
     "fetch_begin($self, /)\n--\n\n"
     "The fetch of a batch begins (last GET_BATCH_STARTED handler)."},
    {"fetch_end", (PyCFunction)Marks_fetch_end, METH_O,
     "fetch_end($self, engine, /)\n--\n\n"
     "The batch arrived (first GET_BATCH_COMPLETED handler): the step begins at "
     "its fetch, with engine.state.batch's size; the fetch is 'data'."},
    {"work_begin", (PyCFunction)Marks_work_begin, METH_NOARGS,
     "work_begin($self, /)\n--\n\n"
     "The process function begins (last ITERATION_STARTED handler)."},
    {"work_end", (PyCFunction)Marks_work_end, METH_NOARGS,
     "work_end($self, /)\n--\n\n"
     "The process function ended (first ITERATION_COMPLETED handler)."},
    {"slot_begin", (PyCFunction)Marks_slot_begin, METH_O,
     "slot_begin($self, i, /)\n--\n\n"
     "The user's handlers of slot i's event begin."},
    {"slot_end", (PyCFunction)Marks_slot_end, METH_O,
     "slot_end($self, i, /)\n--\n\n"
     "They ended: recorded as slot i's action and kept in the row."},
    {"iteration_end", (PyCFunction)Marks_iteration_end, METH_O,
     "iteration_end($self, engine, /)\n--\n\n"
     "Keep the iteration's row and end the step (last ITERATION_COMPLETED handler)."},
    {"close", (PyCFunction)Marks_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "End the step in progress."},
    {"rows", (PyCFunction)Marks_rows, METH_NOARGS,
     "rows($self, /)\n--\n\n"
     "The kept rows, oldest first: (epoch, iteration, data_s, work_s, slot_s...)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Marks_members[] = {
    {"dropped", T_ULONGLONG, offsetof(MarksObject, dropped), READONLY,
     "Rows let go because more than max_rows iterations ran."},
    {"max_rows", T_PYSSIZET, offsetof(MarksObject, capacity), READONLY,
     "How many iterations' rows are kept."},
    {NULL, 0, 0, 0, NULL},
};

static Py_ssize_t Marks_len(MarksObject *self) {
    return self->kept;
}

static PyType_Slot Marks_slots[] = {
    {Py_tp_doc, "Marks(profiler, data, work, slots=(), max_rows=100000)\n--\n\n"
                "The per-iteration marks of an event-driven loop (stepwatch.ignite), as C "
                "handlers. len() is the number of rows kept."},
    {Py_tp_new, Marks_new},
    {Py_tp_methods, Marks_methods},
    {Py_tp_members, Marks_members},
    {Py_sq_length, Marks_len},
    {Py_tp_traverse, Marks_traverse},
    {Py_tp_dealloc, Marks_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_marks_spec = {
    .name = "stepwatch.Marks",
    .basicsize = sizeof(MarksObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Marks_slots,
};

/* ------------------------------------------------------------------------------------------
 * HandlerTimer: one user handler, timed in C (stepwatch.ignite.HandlersTimeProfiler)
 *
 * Ignite's HandlersTimeProfiler wraps every user handler in a Python closure that times it.
 * A HandlerTimer is that wrapper as a C callable: it calls the handler, records the call as
 * its action, and keeps the last max_rows durations for Ignite's per-handler CSV column.
 * For a filtered event (every=, once=...) Ignite's wrapper runs on every event and a call
 * shorter than the threshold is the filter saying no: it is not a call (as Ignite).
 * It has a __dict__, so functools.update_wrapper gives it the handler's name and attributes
 * (Ignite's _parent, which has_event_handler/remove_event_handler compare).
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    ProfilerObject *owner;
    PyObject *handler;
    PyObject *dict;
    sw_id action;
    uint64_t threshold_ns; /* 0: every call counts */
    uint64_t *times;       /* ring of the last `capacity` durations, ns */
    Py_ssize_t capacity, kept, next;
} HandlerTimerObject;

static PyObject *HandlerTimer_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                         PyObject *kwnames) {
    HandlerTimerObject *self = (HandlerTimerObject *)callable;
    uint64_t start = sw_now_ns();
    PyObject *result = PyObject_Vectorcall(self->handler, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    sw_py_aside aside = {0};
    if (result == NULL) /* the record tells the device timing, which may run Python */
        sw_py_set_aside(&aside);
    sw_profiler *p = self->owner->p;
    uint64_t ns = end >= start ? end - start : 0;
    if (p != NULL && ns >= self->threshold_ns) {
        sw_record(p, self->action, start, end);
        self->times[self->next] = ns;
        self->next = (self->next + 1) % self->capacity;
        if (self->kept < self->capacity)
            self->kept++;
    }
    if (result == NULL)
        sw_py_put_back(&aside);
    return result;
}

/* times(): the kept durations in seconds, oldest first. */
static PyObject *HandlerTimer_times(HandlerTimerObject *self, PyObject *unused) {
    PyObject *out = PyList_New(self->kept);
    if (out == NULL)
        return NULL;
    Py_ssize_t first = (self->next - self->kept + self->capacity) % self->capacity;
    for (Py_ssize_t k = 0; k < self->kept; k++) {
        PyObject *v = PyFloat_FromDouble((double)self->times[(first + k) % self->capacity] / 1e9);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, v);
    }
    return out;
}

static PyObject *HandlerTimer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"handler", "action", "threshold_s", "max_rows", NULL};
    PyObject *handler, *action;
    double threshold_s = 0;
    Py_ssize_t max_rows = 100000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|dn:HandlerTimer", keywords, &handler,
                                     &action, &threshold_s, &max_rows))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyCallable_Check(handler)) {
        PyErr_SetString(PyExc_TypeError, "HandlerTimer: handler must be callable");
        return NULL;
    }
    if (!PyObject_TypeCheck(action, st->action_type)) {
        PyErr_SetString(PyExc_TypeError, "HandlerTimer: action must be a stepwatch Action");
        return NULL;
    }
    if (max_rows < 1 || (size_t)max_rows > SIZE_MAX / sizeof(uint64_t) || threshold_s < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "HandlerTimer: max_rows must be >= 1 and threshold_s >= 0");
        return NULL;
    }
    HandlerTimerObject *self = (HandlerTimerObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->times = calloc((size_t)max_rows, sizeof *self->times);
    if (self->times == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    ActionObject *a = (ActionObject *)action;
    self->vectorcall = HandlerTimer_vectorcall;
    self->owner = (ProfilerObject *)Py_NewRef(a->owner);
    self->handler = Py_NewRef(handler);
    self->action = a->id;
    self->threshold_ns = (uint64_t)(threshold_s * 1e9);
    self->capacity = max_rows;
    return (PyObject *)self;
}

static int HandlerTimer_traverse(HandlerTimerObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->handler);
    Py_VISIT(self->dict);
    return 0;
}

static int HandlerTimer_clear(HandlerTimerObject *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->handler);
    Py_CLEAR(self->dict);
    return 0;
}

static void HandlerTimer_dealloc(HandlerTimerObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    HandlerTimer_clear(self);
    free(self->times);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef HandlerTimer_methods[] = {
    {"times", (PyCFunction)HandlerTimer_times, METH_NOARGS,
     "times($self, /)\n--\n\n"
     "The last max_rows durations counted, in seconds, oldest first."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef HandlerTimer_members[] = {
    {"handler", T_OBJECT, offsetof(HandlerTimerObject, handler), READONLY, "The handler timed."},
    {"__dictoffset__", T_PYSSIZET, offsetof(HandlerTimerObject, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(HandlerTimerObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef HandlerTimer_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot HandlerTimer_slots[] = {
    {Py_tp_doc,
     "HandlerTimer(handler, action, threshold_s=0, max_rows=100000)\n--\n\n"
     "Calls handler and records each call as action (stepwatch.ignite.HandlersTimeProfiler)."},
    {Py_tp_new, HandlerTimer_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_methods, HandlerTimer_methods},
    {Py_tp_members, HandlerTimer_members},
    {Py_tp_getset, HandlerTimer_getset},
    {Py_tp_traverse, HandlerTimer_traverse},
    {Py_tp_clear, HandlerTimer_clear},
    {Py_tp_dealloc, HandlerTimer_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_handler_timer_spec = {
    .name = "stepwatch.HandlerTimer",
    .basicsize = sizeof(HandlerTimerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = HandlerTimer_slots,
};

/* ------------------------------------------------------------------------------------------
 * The module functions of stepwatch.ignite (added to the module at exec, _stepwatch.c):
 * Ignite's print_results texts (sw_ignite_write_*), from cells stepwatch.ignite made
 * ---------------------------------------------------------------------------------------- */

/* The UTF-8 of a str cell (None as NULL when none_ok); NULL with an exception otherwise. The
 * text lives as long as the str. */
static int ignite_cell(PyObject *v, int none_ok, const char **out) {
    *out = NULL;
    if (v == Py_None && none_ok)
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "Ignite cell: expected str, got %.80s", Py_TYPE(v)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    *out = PyUnicode_AsUTF8AndSize(v, &n);
    if (*out == NULL)
        return -1;
    if ((size_t)n != strlen(*out)) {
        PyErr_SetString(PyExc_ValueError, "Ignite cell: contains a NUL character");
        return -1;
    }
    return 0;
}

/* The cells of seq (a list or tuple, from PySequence_Fast: the str objects stay alive with
 * it), each item a tuple of width str; an item's cell k may be None where bit k of none_ok
 * is set. PyMem-allocated, *n items of width cells; NULL with an exception. */
static const char **ignite_cells(PyObject *seq, Py_ssize_t width, unsigned none_ok, size_t *n,
                                 const char *what) {
    *n = (size_t)PySequence_Fast_GET_SIZE(seq);
    const char **cells = PyMem_Calloc(*n * (size_t)width + 1, sizeof *cells);
    if (!cells)
        return (const char **)PyErr_NoMemory();
    for (size_t i = 0; i < *n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != width) {
            PyErr_Format(PyExc_TypeError, "%s: each item is a %zd-tuple of str", what, width);
            goto fail;
        }
        for (Py_ssize_t k = 0; k < width; k++)
            if (ignite_cell(PyTuple_GET_ITEM(item, k), (none_ok >> k) & 1u,
                            &cells[i * (size_t)width + (size_t)k]) < 0)
                goto fail;
    }
    return cells;
fail:
    PyMem_Free(cells);
    return NULL;
}

typedef struct {
    const char *processing, *dataflow, *total;
    sw_ignite_event *events;
    size_t nevents;
    sw_ignite_row *rows;
    size_t nrows;
} ignite_text;

static int write_ignite_basic(void *ctx, FILE *out) {
    ignite_text *t = ctx;
    return sw_ignite_write_basic(out, t->processing, t->dataflow, t->total, t->events, t->nevents);
}

static int write_ignite_handlers(void *ctx, FILE *out) {
    ignite_text *t = ctx;
    return sw_ignite_write_handlers(out, t->rows, t->nrows);
}

/* ignite_basic_text(processing, dataflow, total, events) -> str, events: (event, handlers,
 * stats) str triples. */
static PyObject *ignite_basic_text_fn(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError,
                            "ignite_basic_text(processing, dataflow, total, events) takes 4 "
                            "arguments");
    ignite_text t = {0};
    if (ignite_cell(args[0], 0, &t.processing) < 0 || ignite_cell(args[1], 0, &t.dataflow) < 0 ||
        ignite_cell(args[2], 0, &t.total) < 0)
        return NULL;
    PyObject *events = PySequence_Fast(args[3], "ignite_basic_text: events must be a sequence");
    if (!events)
        return NULL;
    PyObject *text = NULL;
    const char **c = ignite_cells(events, 3, 0, &t.nevents, "ignite_basic_text");
    t.events = c ? PyMem_Calloc(t.nevents + 1, sizeof *t.events) : NULL;
    if (c && !t.events)
        PyErr_NoMemory();
    if (t.events) {
        for (size_t i = 0; i < t.nevents; i++)
            t.events[i] = (sw_ignite_event){c[3 * i], c[3 * i + 1], c[3 * i + 2]};
        text = sw_py_text_of(sw_py_state_of_module(module), write_ignite_basic, &t,
                             "ignite_basic_text");
    }
    PyMem_Free(t.events);
    PyMem_Free(c);
    Py_DECREF(events);
    return text;
}

/* ignite_handlers_text(rows) -> str, rows: 9-tuples of str (handler, event, total, min,
 * min_index, max, max_index, mean, std; an index None: the cell alone). */
static PyObject *ignite_handlers_text_fn(PyObject *module, PyObject *rows_arg) {
    PyObject *rows = PySequence_Fast(rows_arg, "ignite_handlers_text: rows must be a sequence");
    if (!rows)
        return NULL;
    PyObject *text = NULL;
    ignite_text t = {0};
    const char **c = ignite_cells(rows, 9, 1u << 4 | 1u << 6, &t.nrows, "ignite_handlers_text");
    if (c && t.nrows < 3)
        PyErr_SetString(PyExc_ValueError, "ignite_handlers_text: Ignite's rows end with the "
                                          "Total, Processing and Dataflow rows (3 at least)");
    else if (c && !(t.rows = PyMem_Calloc(t.nrows, sizeof *t.rows)))
        PyErr_NoMemory();
    if (t.rows) {
        for (size_t i = 0; i < t.nrows; i++) {
            const char **r = c + 9 * i;
            t.rows[i] = (sw_ignite_row){r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]};
        }
        text = sw_py_text_of(sw_py_state_of_module(module), write_ignite_handlers, &t,
                             "ignite_handlers_text");
    }
    PyMem_Free(t.rows);
    PyMem_Free(c);
    Py_DECREF(rows);
    return text;
}

PyMethodDef sw_py_ignite_functions[] = {
    {"ignite_basic_text", (PyCFunction)(void (*)(void))ignite_basic_text_fn, METH_FASTCALL,
     "ignite_basic_text($module, processing, dataflow, total, events, /)\n--\n\n"
     "-> str: Ignite's BasicTimeProfiler.print_results text from its cells "
     "(sw_ignite_write_basic); events: (event, handlers, stats) str triples."},
    {"ignite_handlers_text", ignite_handlers_text_fn, METH_O,
     "ignite_handlers_text($module, rows, /)\n--\n\n"
     "-> str: Ignite's HandlersTimeProfiler.print_results text from its rows as cells "
     "(sw_ignite_write_handlers): 9-tuples (handler, event, total, min, min_index, max, "
     "max_index, mean, std) of str, an index None for a cell alone."},
    {NULL, NULL, 0, NULL},
};
