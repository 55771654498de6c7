/*
 * _device.c — device statistics and device time for Python (stepwatch/device.h,
 * docs/device.md).
 *
 *   _device_reader(gpus) / _device_read(reader)   the statistics read once, for the
 *       adapters' monitors (stepwatch/devicestats.py): a capsule over sw_device_reader and
 *       a dict of what it read.
 *   Profiler(device_stats=..., device_time=...)   the sampler on the profiler, and GPU time
 *       per phase: with device_time=True the CUDA runtime torch loaded records the events
 *       from C on torch's current stream (asked once per step); where that runtime cannot
 *       be found, and with a factory passed as device_time, a clock whose events are Python
 *       objects with torch.cuda.Event's methods (record(), query(), elapsed_time(end) in ms).
 *
 * The Python clock's calls come from the core on the thread that marks the steps, which
 * holds the GIL when Python marks them; closing the profiler releases the GIL first, so each
 * call takes it (PyGILState_Ensure, cheap when held). torch's own sampling of its allocator runs
 * on a Python daemon thread (devicestats.py), so the sampler's C thread never waits for the
 * GIL and never meets a finalizing interpreter.
 */
#include "_stepwatch.h"

/* ---- the reader ---- */

static void reader_free(PyObject *capsule) {
    sw_device_reader_free(PyCapsule_GetPointer(capsule, "stepwatch.device_reader"));
}

PyObject *sw_py_device_reader(PyObject *module, PyObject *gpus) {
    int want = PyObject_IsTrue(gpus);
    if (want < 0)
        return NULL;
    sw_device_reader *r = NULL;
    int rc = sw_device_reader_new(want, &r);
    if (rc != 0) {
        module_state *st = sw_py_state_of_module(module);
        return sw_py_raise(st, rc, "device reader");
    }
    PyObject *capsule = PyCapsule_New(r, "stepwatch.device_reader", reader_free);
    if (capsule == NULL)
        sw_device_reader_free(r);
    return capsule;
}

/* Put value under key unless it could not be read (-1). */
static int put_known(PyObject *d, const char *key, double value) {
    return value < 0 ? 0 : sw_py_dict_put(d, key, PyFloat_FromDouble(value));
}

PyObject *sw_py_device_read(PyObject *module, PyObject *capsule) {
    sw_device_reader *r = PyCapsule_GetPointer(capsule, "stepwatch.device_reader");
    if (r == NULL)
        return NULL;
    sw_device_stats st;
    int rc = sw_device_read(r, &st);
    if (rc != 0)
        return sw_py_raise(sw_py_state_of_module(module), rc, "device read");
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    /* Lightning's names for the system's figures, stepwatch's for the rest (the sampler's
     * counter names). */
    int bad = put_known(d, "cpu_percent", st.cpu_percent) < 0 ||
              put_known(d, "cpu_vm_percent", st.vm_percent) < 0 ||
              put_known(d, "cpu_swap_percent", st.swap_percent) < 0 ||
              put_known(d, "process_cpu_percent", st.process_cpu_percent) < 0 ||
              put_known(d, "process_rss_bytes", st.rss_bytes) < 0 ||
              put_known(d, "process_peak_rss_bytes", st.peak_rss_bytes) < 0;
    for (int g = 0; !bad && g < st.ngpus; g++) {
        const sw_gpu_stats *gpu = &st.gpus[g];
        const char *names[] = {"utilization_percent", "memory_used_bytes", "memory_total_bytes",
                               "power_w", "temperature_c"};
        const double values[] = {gpu->utilization_percent, gpu->memory_used_bytes,
                                 gpu->memory_total_bytes, gpu->power_w, gpu->temperature_c};
        for (int i = 0; !bad && i < 5; i++) {
            char key[64];
            snprintf(key, sizeof key, "gpu%d.%s", g, names[i]);
            bad = put_known(d, key, values[i]) < 0;
        }
    }
    if (!bad && sw_py_dict_put(d, "gpu_error", sw_py_str_or_none(sw_device_gpu_error(r))) < 0)
        bad = 1;
    if (bad)
        Py_CLEAR(d);
    return d;
}

/* ---- the GPU clock on Python event objects ---- */

typedef struct py_clock {
    PyObject *factory; /* () -> a new event */
    PyObject *ready;   /* () -> bool: the device is in use (and not capturing); NULL: always */
    PyObject *record, *query, *elapsed_time; /* the methods' names */
} py_clock;

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* A call that raised: say what it was once (the core then stops the timing), return -1. */
static int failed(PyObject *what) {
    PyErr_WriteUnraisable(what);
    return -1;
}

/* Every call into Python below runs between enter() and leave(). The core's hook can fire
 * while the program's own exception is on its way (a frame unwinding drops the last
 * reference to an object whose end closes a span): that exception is put aside, so no
 * Python function is ever called with an exception set (CPython's "SystemError ... returned a
 * result with an exception set"), and put back untouched, whatever the calls do. */
typedef struct py_call {
    PyGILState_STATE gil;
    sw_py_aside pending;
} py_call;

static void enter(py_call *call) {
    call->gil = PyGILState_Ensure();
    sw_py_set_aside(&call->pending);
}

static void leave(py_call *call) {
    sw_py_put_back(&call->pending); /* ours, if any, are said and dropped: never the program's */
    PyGILState_Release(call->gil);
}

static int clock_ready(void *ctx) {
    py_clock *c = ctx;
    py_call call;
    enter(&call);
    PyObject *r = PyObject_CallNoArgs(c->ready);
    int ready = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (ready < 0) { /* cannot tell: time nothing this step */
        PyErr_Clear();
        ready = 0;
    }
    leave(&call);
    return ready;
}

static int clock_event_new(void *ctx, void **event) {
    py_clock *c = ctx;
    py_call call;
    enter(&call);
    PyObject *e = PyObject_CallNoArgs(c->factory);
    int rc = e ? 0 : failed(c->factory);
    *event = e;
    leave(&call);
    return rc;
}

static int clock_record(void *ctx, void *event) {
    py_clock *c = ctx;
    py_call call;
    enter(&call);
    PyObject *r = PyObject_CallMethodNoArgs(event, c->record);
    int rc = r ? 0 : failed(event);
    Py_XDECREF(r);
    leave(&call);
    return rc;
}

/* event.query() as 1/0, -1 when it raised; not reached while the interpreter goes away. */
static int query_event(py_clock *c, PyObject *event) {
    if (finalizing())
        return 0;
    PyObject *r = PyObject_CallMethodNoArgs(event, c->query);
    int reached = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    return reached < 0 ? failed(event) : reached;
}

static int clock_query(void *ctx, void *event) {
    py_call call;
    enter(&call);
    int reached = query_event(ctx, event);
    leave(&call);
    return reached;
}

static int clock_elapsed(void *ctx, void *start, void *end, uint64_t *ns) {
    py_clock *c = ctx;
    py_call call;
    enter(&call);
    int rc = query_event(c, end); /* elapsed_time raises on an event not reached yet */
    if (rc == 1) {
        PyObject *ms = PyObject_CallMethodOneArg(start, c->elapsed_time, end);
        double v = ms ? PyFloat_AsDouble(ms) : -1;
        Py_XDECREF(ms);
        if (v == -1 && PyErr_Occurred()) {
            rc = failed(start);
        } else {
            *ns = v > 0 ? (uint64_t)(v * 1e6 + 0.5) : 0;
            rc = 0;
        }
    } else if (rc == 0) {
        rc = 1;
    }
    leave(&call);
    return rc;
}

static void clock_event_free(void *ctx, void *event) {
    (void)ctx;
    py_call call;
    enter(&call);
    Py_XDECREF((PyObject *)event);
    leave(&call);
}

static void clock_release(void *ctx) {
    py_clock *c = ctx;
    py_call call;
    enter(&call);
    Py_XDECREF(c->factory);
    Py_XDECREF(c->ready);
    Py_XDECREF(c->record);
    Py_XDECREF(c->query);
    Py_XDECREF(c->elapsed_time);
    leave(&call);
    PyMem_RawFree(c);
}

/* ---- the CUDA runtime's events from C, on torch's current stream ---- */

/* At each step's begin: stream() -> torch's current stream's handle (an int), or None when
 * the step is not to be timed. The one Python call of the step; the events are made,
 * recorded and read in C (src/device/cudart.c), with no object and no GIL per event. */
static int torch_stream(void *ctx, void **stream) {
    py_call call;
    enter(&call);
    PyObject *r = PyObject_CallNoArgs((PyObject *)ctx);
    int rc = 0;
    if (r == NULL) {
        PyErr_WriteUnraisable((PyObject *)ctx); /* said; this step is not timed */
    } else if (r != Py_None) {
        *stream = PyLong_AsVoidPtr(r);
        rc = PyErr_Occurred() ? 0 : 1;
    }
    Py_XDECREF(r);
    leave(&call);
    return rc;
}

static void torch_stream_release(void *ctx) {
    py_call call;
    enter(&call);
    Py_XDECREF((PyObject *)ctx);
    leave(&call);
}

/* Time p's steps with events made by factory (ready may be NULL). Steals nothing. */
static int start_clock(module_state *st, sw_profiler *p, PyObject *factory, PyObject *ready) {
    py_clock *c = PyMem_RawCalloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->factory = Py_NewRef(factory);
    c->ready = Py_XNewRef(ready);
    c->record = PyUnicode_InternFromString("record");
    c->query = PyUnicode_InternFromString("query");
    c->elapsed_time = PyUnicode_InternFromString("elapsed_time");
    if (!c->record || !c->query || !c->elapsed_time) {
        clock_release(c);
        return -1;
    }
    sw_gpu_clock clock = {.size = sizeof clock,
                          .ctx = c,
                          .ready = ready ? clock_ready : NULL,
                          .event_new = clock_event_new,
                          .record = clock_record,
                          .query = clock_query,
                          .elapsed_ns = clock_elapsed,
                          .event_free = clock_event_free,
                          .release = clock_release};
    int rc = sw_device_time_clock(p, &clock); /* releases c when it fails */
    if (rc != 0 && rc != SW_ESTATE) {
        sw_py_raise(st, rc, "device_time");
        return -1;
    }
    return 0;
}

/* Call stepwatch.devicestats.<name>(*args): the torch-specific parts live in Python. */
static PyObject *call_devicestats(const char *name, PyObject *args) {
    PyObject *mod = PyImport_ImportModule("stepwatch.devicestats");
    PyObject *fn = mod ? PyObject_GetAttrString(mod, name) : NULL;
    PyObject *r = fn ? PyObject_Call(fn, args, NULL) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(mod);
    return r;
}

/* device_stats: False/None (off), True (every 0.5 s), or the interval in seconds. */
static int start_stats(module_state *st, ProfilerObject *self, PyObject *stats) {
    if (stats == Py_None || stats == Py_False)
        return 0;
    double seconds = 0.5;
    if (stats != Py_True) {
        seconds = PyFloat_AsDouble(stats);
        if (seconds == -1 && PyErr_Occurred())
            return -1;
        if (!(seconds >= 0.001 && seconds <= 3600)) {
            PyErr_Format(PyExc_ValueError,
                         "Profiler: device_stats takes True or an interval in seconds "
                         "(0.001 to 3600), not %R",
                         stats);
            return -1;
        }
    }
    int rc = sw_device_stats_start(self->p, (uint32_t)(seconds * 1000 + 0.5));
    if (rc != 0 && rc != SW_ESTATE) { /* ESTATE: `stepwatch run --device-stats` started it */
        sw_py_raise(st, rc, "device_stats");
        return -1;
    }
    /* torch's allocator statistics, read on a Python thread while torch uses CUDA. */
    PyObject *args = Py_BuildValue("(Od)", (PyObject *)self, seconds);
    PyObject *r = args ? call_devicestats("_start_torch_memory", args) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* device_time: False/None (off), True (torch.cuda.Event while torch uses CUDA; a warning
 * and nothing without CUDA), or a factory of events with torch.cuda.Event's methods. */
static int start_time(module_state *st, ProfilerObject *self, PyObject *timing) {
    if (timing == Py_None || timing == Py_False)
        return 0;
    if (timing != Py_True) {
        if (!PyCallable_Check(timing)) {
            PyErr_Format(PyExc_TypeError,
                         "Profiler: device_time takes True or a factory of events, not %R", timing);
            return -1;
        }
        self->events_in = "Python";
        return start_clock(st, self->p, timing, NULL);
    }
    PyObject *empty = PyTuple_New(0);
    /* (factory, ready, stream), or None without CUDA */
    PyObject *clock = empty ? call_devicestats("_torch_clock", empty) : NULL;
    Py_XDECREF(empty);
    if (clock == NULL)
        return -1;
    int rc = 0;
    PyObject *factory, *ready, *stream;
    if (clock == Py_None) {
        rc = 0;
    } else if (!PyArg_ParseTuple(clock, "OOO", &factory, &ready, &stream)) {
        rc = -1;
    } else {
        /* The runtime torch loaded, from C; torch.cuda.Event only where it cannot be found. */
        int c = sw_device_time_cuda_streams(self->p, torch_stream, Py_NewRef(stream),
                                            torch_stream_release);
        self->events_in = c == 0 ? "C" : NULL;
        if (c == SW_EUNSUPPORTED) {
            self->events_in = "Python";
            rc = start_clock(st, self->p, factory, ready);
        } else if (c != 0 && c != SW_ESTATE) {
            rc = (sw_py_raise(st, c, "device_time"), -1);
        }
    }
    Py_DECREF(clock);
    return rc;
}

int sw_py_device_start(ProfilerObject *self, PyObject *stats, PyObject *timing) {
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return -1;
    return start_stats(st, self, stats) < 0 ? -1 : start_time(st, self, timing);
}

PyObject *sw_py_profiler_device_time(ProfilerObject *self, PyObject *unused) {
    sw_device_time_info info = SW_DEVICE_TIME_INFO_INIT;
    if (self->p == NULL || sw_device_time_info_get(self->p, &info) != 0)
        Py_RETURN_NONE;
    PyObject *d = Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "steps_timed",
        (unsigned long long)info.steps_timed, "steps_dropped",
        (unsigned long long)info.steps_dropped, "spans_dropped",
        (unsigned long long)info.spans_dropped, "warmup_steps",
        (unsigned long long)info.warmup_steps, "failed", info.failed ? Py_True : Py_False,
        "steps_sampled_out", (unsigned long long)info.steps_sampled_out, "sample_every",
        (unsigned long long)info.sample_every, "steps_captured",
        (unsigned long long)info.steps_captured, "boundaries_captured",
        (unsigned long long)info.boundaries_captured, "most_behind",
        (unsigned long long)info.most_behind, "events", (unsigned long long)info.events,
        "intervals", (unsigned long long)info.intervals, "intervals_timed",
        (unsigned long long)info.intervals_timed, "comm_intervals",
        (unsigned long long)info.comm_intervals);
    /* where the events come from: "C" (the CUDA runtime torch loaded), "Python" (event
     * objects), None (asked for through `stepwatch run`) */
    if (d != NULL && sw_py_dict_put(d, "events_in", sw_py_str_or_none(self->events_in)) < 0)
        Py_CLEAR(d);
    return d;
}

/* ---- communication on the device (stepwatch/collectives.py, distributed.py) ---- */

PyObject *sw_py_profiler_comm_begin(ProfilerObject *self, PyObject *unused) {
    (void)unused;
    uint64_t token = self->timing ? sw_device_interval_on(self->timing, 0, 0, NULL, SW_DEVICE_COMM)
                                  : 0;
    return PyLong_FromUnsignedLongLong(token);
}

PyObject *sw_py_profiler_comm_end(ProfilerObject *self, PyObject *token) {
    unsigned long long t = PyLong_AsUnsignedLongLong(token);
    if (t == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (self->timing != NULL)
        sw_device_interval_end(self->timing, t);
    Py_RETURN_NONE;
}

PyObject *sw_py_profiler_comm_ns(ProfilerObject *self, PyObject *ns) {
    unsigned long long v = PyLong_AsUnsignedLongLong(ns);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (self->timing != NULL)
        sw_device_comm_ns(self->timing, v);
    Py_RETURN_NONE;
}
