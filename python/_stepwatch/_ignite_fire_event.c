/*
 * _ignite_fire_event.c — Ignite's Engine._fire_event in C, making stepwatch's marks
 * (stepwatch._stepwatch.FireEvent).
 *
 * Ignite's Engine calls self._fire_event(event) for every event, handlers or not: four per
 * iteration. Its Python loop costs about 1.3 us per event here, most of it formatting a
 * debug message that no logger prints, and every handler a profiler registers adds a call
 * through that loop. stepwatch.ignite instead sets a FireEvent as the engine's instance
 * attribute _fire_event for the length of a run. It does what Ignite's own does (0.5.3 to
 * 0.5.5: engine.py, Engine._fire_event; stepwatch.ignite uses it only where Ignite's own has
 * the source of those, known by its fingerprint, and warns once otherwise):
 *
 *   - logs "<epoch> | <iteration>, Firing handlers for event <event>" on engine.logger at
 *     DEBUG (the message is made only when the logger is enabled for DEBUG; Ignite makes it
 *     always, then the logger drops it);
 *   - sets engine.last_event_name;
 *   - calls each (func, args, kwargs) of engine._event_handlers[event], in order, as Ignite
 *     does: kwargs updated with the event's keyword arguments; when args[0] is a weak
 *     reference (to the engine) it is resolved and passed first, then the event's arguments,
 *     then the rest of args. A list changed during the loop is seen as a Python for loop
 *     sees it.
 *
 * Around the handlers of the four per-iteration events it makes the marks of its Marks
 * (sw_py_marks_before/after: the fetch, the process function, the step and, for
 * BasicTimeProfiler, each event's handlers as one block). So the profiler registers no
 * per-iteration handler: an iteration costs it a few clock reads, an event without
 * handlers nothing but the loop.
 *
 * It holds the engine by a weak reference, as Ignite's handlers do since 0.5.3: an engine
 * that keeps it as its _fire_event makes no reference cycle with it.
 *
 * close() drops the marks: what is left is Ignite's loop alone (the run ended while someone
 * still holds the object). Like the marks, nothing here raises on the loop's account; an
 * exception comes only from what Ignite's loop would raise (a handler's, the engine's).
 */
#include "_ignite.h"

#include <structmember.h>

#define DEBUG_LEVEL 10 /* logging.DEBUG */
#define STACK_ARGS 8   /* handler arguments passed without allocating */

enum {
    NAME_EVENT_HANDLERS,
    NAME_LAST_EVENT_NAME,
    NAME_LOGGER,
    NAME_IS_ENABLED_FOR,
    NAME_DEBUG,
    NAME_STATE,
    NAME_EPOCH,
    NAME_ITERATION,
    NAME_UPDATE,
    NAMES
};

static const char *const name_text[NAMES] = {
    "_event_handlers", "last_event_name", "logger",    "isEnabledFor", "debug",
    "state",           "epoch",           "iteration", "update",
};

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *engine_ref;                     /* a weak reference to the engine */
    PyObject *marks;                          /* a Marks; NULL once closed (or none given) */
    PyObject *events[SW_PY_ITERATION_EVENTS]; /* Events.GET_BATCH_STARTED, ... */
    int timed[SW_PY_ITERATION_EVENTS];        /* time event i's handlers as Marks slot i */
    PyObject *names[NAMES];                   /* interned */
    PyObject *debug_level;                    /* int DEBUG_LEVEL */
    PyObject *empty;                          /* "", the format spec of an f-string field */
} FireEventObject;

/* ------------------------------------------------------------------------------------------
 * Ignite's loop
 * ---------------------------------------------------------------------------------------- */

/* f"{state.epoch} | {state.iteration}, Firing handlers for event {event}", as Ignite writes
 * it. New reference; NULL with an exception set. */
static PyObject *debug_message(FireEventObject *self, PyObject *engine, PyObject *event) {
    PyObject *state = PyObject_GetAttr(engine, self->names[NAME_STATE]);
    if (state == NULL)
        return NULL;
    PyObject *epoch = PyObject_GetAttr(state, self->names[NAME_EPOCH]);
    PyObject *iteration = epoch ? PyObject_GetAttr(state, self->names[NAME_ITERATION]) : NULL;
    Py_DECREF(state);
    PyObject *parts[3] = {epoch ? PyObject_Format(epoch, self->empty) : NULL,
                          iteration ? PyObject_Format(iteration, self->empty) : NULL,
                          iteration ? PyObject_Format(event, self->empty) : NULL};
    PyObject *msg = NULL;
    if (parts[0] && parts[1] && parts[2])
        msg = PyUnicode_FromFormat("%U | %U, Firing handlers for event %U", parts[0], parts[1],
                                   parts[2]);
    Py_XDECREF(epoch);
    Py_XDECREF(iteration);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(parts[i]);
    return msg;
}

/* self.logger.debug(message) when engine.logger is enabled for DEBUG (a logger without
 * isEnabledFor is always given the message, as Ignite gives it). 0, or -1 with an exception
 * set. */
static int log_debug(FireEventObject *self, PyObject *engine, PyObject *event) {
    PyObject *logger = PyObject_GetAttr(engine, self->names[NAME_LOGGER]);
    if (logger == NULL)
        return -1;
    PyObject *on = PyObject_CallMethodOneArg(logger, self->names[NAME_IS_ENABLED_FOR],
                                             self->debug_level);
    int enabled = on != NULL ? PyObject_IsTrue(on) : -1;
    Py_XDECREF(on);
    if (enabled < 0 && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        enabled = 1;
    }
    if (enabled > 0) {
        PyObject *msg = debug_message(self, engine, event);
        PyObject *r = msg ? PyObject_CallMethodOneArg(logger, self->names[NAME_DEBUG], msg) : NULL;
        enabled = r != NULL ? 0 : -1;
        Py_XDECREF(msg);
        Py_XDECREF(r);
    }
    Py_DECREF(logger);
    return enabled < 0 ? -1 : 0;
}

/* kwargs.update(event_kwargs). 0, or -1 with an exception set. */
static int update_kwargs(FireEventObject *self, PyObject *kwargs, PyObject *event_kwargs) {
    if (PyDict_Check(kwargs))
        return PyDict_Update(kwargs, event_kwargs);
    PyObject *r = PyObject_CallMethodOneArg(kwargs, self->names[NAME_UPDATE], event_kwargs);
    Py_XDECREF(r);
    return r != NULL ? 0 : -1;
}

/* One handler entry (func, args, kwargs) called as Ignite calls it, with the event's
 * arguments (event_args[0..nevent)) and keyword arguments (a dict, or NULL for none).
 * 0, or -1 with an exception set. */
static int call_handler(FireEventObject *self, PyObject *entry, PyObject *const *event_args,
                        Py_ssize_t nevent, PyObject *event_kwargs) {
    PyObject *items = entry; /* `for func, args, kwargs in ...`: any sequence of three */
    if (!PyTuple_CheckExact(entry) && (items = PySequence_Tuple(entry)) == NULL)
        return -1;
    PyObject *first = NULL, *kwdict = NULL, *result = NULL;
    PyObject *stack[STACK_ARGS], **argv = stack;
    if (PyTuple_GET_SIZE(items) != 3) {
        PyErr_Format(PyExc_ValueError,
                     "an event handler entry must be (func, args, kwargs), "
                     "not %zd items",
                     PyTuple_GET_SIZE(items));
        goto done;
    }
    PyObject *func = PyTuple_GET_ITEM(items, 0), *args = PyTuple_GET_ITEM(items, 1),
             *kwargs = PyTuple_GET_ITEM(items, 2);
    if (event_kwargs != NULL && update_kwargs(self, kwargs, event_kwargs) < 0)
        goto done;
    if (!PyTuple_Check(args)) { /* Ignite adds it to the event's tuple of arguments */
        PyErr_Format(PyExc_TypeError, "can only concatenate tuple (not \"%.200s\") to tuple",
                     Py_TYPE(args)->tp_name);
        goto done;
    }
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), skip = 0;
    if (nargs > 0 && PyWeakref_CheckRef(PyTuple_GET_ITEM(args, 0))) {
        first = PyObject_CallNoArgs(PyTuple_GET_ITEM(args, 0));
        if (first == NULL)
            goto done;
        if (first == Py_None) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Engine reference not resolved. Cannot execute event handler.");
            goto done;
        }
        skip = 1;
    }
    Py_ssize_t n = (first != NULL) + nevent + nargs - skip;
    if (n > STACK_ARGS && (argv = PyMem_Malloc((size_t)n * sizeof *argv)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t k = 0;
    if (first != NULL)
        argv[k++] = first;
    for (Py_ssize_t i = 0; i < nevent; i++)
        argv[k++] = event_args[i];
    for (Py_ssize_t i = skip; i < nargs; i++)
        argv[k++] = PyTuple_GET_ITEM(args, i);
    if (PyDict_Check(kwargs)) {
        kwdict = PyDict_GET_SIZE(kwargs) ? Py_NewRef(kwargs) : NULL;
    } else { /* `**kwargs` takes any mapping */
        kwdict = PyDict_New();
        if (kwdict == NULL || PyDict_Update(kwdict, kwargs) < 0)
            goto done;
    }
    result = PyObject_VectorcallDict(func, argv, (size_t)n, kwdict);
done:
    if (argv != stack)
        PyMem_Free(argv);
    Py_XDECREF(kwdict);
    Py_XDECREF(first);
    if (items != entry)
        Py_DECREF(items);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

/* Every entry of handlers (engine._event_handlers[event]). 0, or -1 with an exception set. */
static int call_handlers(FireEventObject *self, PyObject *handlers, PyObject *const *event_args,
                         Py_ssize_t nevent, PyObject *event_kwargs) {
    if (PyList_CheckExact(handlers)) { /* as a for loop: the length is read at each entry */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(handlers); i++) {
            PyObject *entry = Py_NewRef(PyList_GET_ITEM(handlers, i));
            int rc = call_handler(self, entry, event_args, nevent, event_kwargs);
            Py_DECREF(entry);
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    PyObject *it = PyObject_GetIter(handlers), *entry;
    if (it == NULL)
        return -1;
    while ((entry = PyIter_Next(it)) != NULL) {
        int rc = call_handler(self, entry, event_args, nevent, event_kwargs);
        Py_DECREF(entry);
        if (rc < 0)
            break;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* The event's keyword arguments as a dict (NULL with an exception set). */
static PyObject *kwargs_dict(PyObject *const *values, PyObject *kwnames) {
    PyObject *d = PyDict_New();
    for (Py_ssize_t i = 0; d != NULL && i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kwnames, i), values[i]) < 0)
            Py_CLEAR(d);
    return d;
}

/* Fire event on engine: Ignite's loop over its handlers, with the marks of an iteration
 * event around it. args[0] is the event; then its arguments, then keyword arguments'
 * values, named by kwnames. */
static PyObject *fire(FireEventObject *self, PyObject *engine, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *event = args[0];
    if (log_debug(self, engine, event) < 0 ||
        PyObject_SetAttr(engine, self->names[NAME_LAST_EVENT_NAME], event) < 0)
        return NULL;
    PyObject *table = PyObject_GetAttr(engine, self->names[NAME_EVENT_HANDLERS]);
    if (table == NULL)
        return NULL;
    PyObject *handlers = PyObject_GetItem(table, event); /* a defaultdict adds the key */
    Py_DECREF(table);
    if (handlers == NULL)
        return NULL;
    PyObject *event_kwargs = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0 &&
        (event_kwargs = kwargs_dict(args + nargs, kwnames)) == NULL) {
        Py_DECREF(handlers);
        return NULL;
    }

    int which = -1; /* an iteration event: its index */
    for (int i = 0; i < SW_PY_ITERATION_EVENTS; i++)
        if (event == self->events[i])
            which = i;
    if (which >= 0 && self->marks != NULL)
        sw_py_marks_before(self->marks, which, self->timed[which], engine);
    int rc = call_handlers(self, handlers, args + 1, nargs - 1, event_kwargs);
    /* the marks are read again: a handler may have closed them */
    if (rc == 0 && which >= 0 && self->marks != NULL)
        sw_py_marks_after(self->marks, which, self->timed[which], engine);
    Py_DECREF(handlers);
    Py_XDECREF(event_kwargs);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* engine._fire_event(event_name, *event_args, **event_kwargs) */
static PyObject *FireEvent_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    FireEventObject *self = (FireEventObject *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError,
                        "_fire_event() missing 1 required positional argument: 'event_name'");
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *engine = NULL;
    if (PyWeakref_GetRef(self->engine_ref, &engine) < 0)
        return NULL;
#else
    PyObject *engine = PyWeakref_GetObject(self->engine_ref);
    engine = engine == Py_None ? NULL : Py_XNewRef(engine);
#endif
    if (engine == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "FireEvent: its engine no longer exists");
        return NULL;
    }
    PyObject *result = fire(self, engine, args, nargs, kwnames);
    Py_DECREF(engine);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * The type
 * ---------------------------------------------------------------------------------------- */

static PyObject *FireEvent_close(FireEventObject *self, PyObject *unused) {
    Py_CLEAR(self->marks);
    Py_RETURN_NONE;
}

static PyObject *FireEvent_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"engine", "marks", "events", "timed", NULL};
    PyObject *engine, *marks, *events, *timed = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:FireEvent", keywords, &engine, &marks,
                                     &events, &timed))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (marks != Py_None && !PyObject_TypeCheck(marks, st->marks_type)) {
        PyErr_SetString(PyExc_TypeError, "FireEvent: marks must be a stepwatch Marks or None");
        return NULL;
    }
    if (!PyTuple_Check(events) || PyTuple_GET_SIZE(events) != SW_PY_ITERATION_EVENTS) {
        PyErr_SetString(PyExc_TypeError,
                        "FireEvent: events must be the tuple (GET_BATCH_STARTED, "
                        "GET_BATCH_COMPLETED, ITERATION_STARTED, ITERATION_COMPLETED)");
        return NULL;
    }
    int flags[SW_PY_ITERATION_EVENTS] = {0};
    if (timed != NULL && timed != Py_None) {
        if (!PyTuple_Check(timed) || PyTuple_GET_SIZE(timed) != SW_PY_ITERATION_EVENTS) {
            PyErr_SetString(PyExc_TypeError, "FireEvent: timed must be a tuple of 4 booleans");
            return NULL;
        }
        int slots = marks != Py_None ? sw_py_marks_slots(marks) : 0;
        for (int i = 0; i < SW_PY_ITERATION_EVENTS; i++) {
            if ((flags[i] = PyObject_IsTrue(PyTuple_GET_ITEM(timed, i))) < 0)
                return NULL;
            if (flags[i] && i >= slots) {
                PyErr_Format(PyExc_ValueError,
                             "FireEvent: timed[%d] needs a Marks with at "
                             "least %d slots (it has %d)",
                             i, i + 1, slots);
                return NULL;
            }
        }
    }

    FireEventObject *self = (FireEventObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = FireEvent_vectorcall;
    self->engine_ref = PyWeakref_NewRef(engine, NULL);
    if (self->engine_ref == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->marks = marks != Py_None ? Py_NewRef(marks) : NULL;
    for (int i = 0; i < SW_PY_ITERATION_EVENTS; i++) {
        self->events[i] = Py_NewRef(PyTuple_GET_ITEM(events, i));
        self->timed[i] = flags[i];
    }
    int failed = 0;
    for (int i = 0; i < NAMES; i++)
        failed |= (self->names[i] = PyUnicode_InternFromString(name_text[i])) == NULL;
    self->debug_level = PyLong_FromLong(DEBUG_LEVEL);
    self->empty = PyUnicode_New(0, 0);
    if (failed || self->debug_level == NULL || self->empty == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int FireEvent_traverse(FireEventObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->engine_ref);
    Py_VISIT(self->marks);
    for (int i = 0; i < SW_PY_ITERATION_EVENTS; i++)
        Py_VISIT(self->events[i]);
    return 0;
}

static int FireEvent_clear(FireEventObject *self) {
    Py_CLEAR(self->engine_ref);
    Py_CLEAR(self->marks);
    for (int i = 0; i < SW_PY_ITERATION_EVENTS; i++)
        Py_CLEAR(self->events[i]);
    return 0;
}

static void FireEvent_dealloc(FireEventObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    FireEvent_clear(self);
    for (int i = 0; i < NAMES; i++)
        Py_CLEAR(self->names[i]);
    Py_CLEAR(self->debug_level);
    Py_CLEAR(self->empty);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef FireEvent_methods[] = {
    {"close", (PyCFunction)FireEvent_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Drop the marks: from now on only Ignite's loop runs."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef FireEvent_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FireEventObject, vectorcall), READONLY, NULL},
    {"marks", T_OBJECT, offsetof(FireEventObject, marks), READONLY,
     "The Marks made around the iteration events (None once closed)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot FireEvent_slots[] = {
    {Py_tp_doc, "FireEvent(engine, marks, events, timed=None)\n--\n\n"
                "Ignite's engine._fire_event(event, *args, **kwargs) in C, making marks' "
                "marks around the handlers of events (GET_BATCH_STARTED, GET_BATCH_COMPLETED, "
                "ITERATION_STARTED, ITERATION_COMPLETED); timed[i]: event i's handlers are "
                "timed as the Marks' slot i (stepwatch.ignite)."},
    {Py_tp_new, FireEvent_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_methods, FireEvent_methods},
    {Py_tp_members, FireEvent_members},
    {Py_tp_traverse, FireEvent_traverse},
    {Py_tp_clear, FireEvent_clear},
    {Py_tp_dealloc, FireEvent_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_fire_event_spec = {
    .name = "stepwatch.FireEvent",
    .basicsize = sizeof(FireEventObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = FireEvent_slots,
};
