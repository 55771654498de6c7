/*
 * _memory.c — memory per step from torch's CUDA caching allocator (sw_step_memory).
 *
 * Every front end of the extension ends its steps through sw_py_step_end, which first hands
 * the core the allocator's figures of the step, when the program's torch has initialized
 * CUDA: bytes allocated now, the peak since the previous step's end, and bytes reserved now.
 * They are read from the allocator's own statistics (torch._C._cuda_memoryStats, what
 * torch.cuda.memory_stats() flattens), which copy counters under the allocator's lock and never
 * synchronize with the device; torch._C._cuda_resetPeakMemoryStats then starts the next step's
 * peak, likewise without a synchronization. CUDA is never initialized here: torch.cuda's own
 * _initialized flag is read first, one attribute load per step on a CPU run. The RSS per step
 * is the core's (sw_step_memory_mode).
 *
 * The same statistics give the allocator's retries and out-of-memory errors
 * (num_alloc_retries, num_ooms: sw_step_allocator), which explain slow steps.
 *
 * Side effect, documented in docs/python.md: the program's own torch.cuda.max_memory_allocated()
 * then tells the peak since the last step's end; Profiler(memory=False) leaves the allocator
 * alone.
 *
 * Never raises into the training: a failure (a torch without these functions) turns the
 * allocator's part off for this profiler and says why in the note "step_memory".
 */
#include "_stepwatch.h"

struct sw_py_memory {
    PyObject *cuda;             /* the module torch.cuda, once imported; NULL before */
    PyObject *cuda_name;        /* "torch.cuda" */
    PyObject *initialized_name; /* "_initialized" */
    PyObject *get_device;       /* torch._C._cuda_getDevice */
    PyObject *memory_stats;     /* torch._C._cuda_memoryStats */
    PyObject *reset_peak;       /* torch._C._cuda_resetPeakMemoryStats */
    int off;                    /* the allocator's part failed once: no more tries */
};

sw_py_memory *sw_py_memory_new(void) {
    sw_py_memory *m = PyMem_Calloc(1, sizeof *m);
    if (m == NULL)
        return (sw_py_memory *)PyErr_NoMemory();
    /* Made once: a step that looks for torch.cuda allocates nothing. */
    m->cuda_name = PyUnicode_InternFromString("torch.cuda");
    m->initialized_name = PyUnicode_InternFromString("_initialized");
    if (m->cuda_name == NULL || m->initialized_name == NULL) {
        sw_py_memory_free(m);
        return NULL;
    }
    return m;
}

void sw_py_memory_free(sw_py_memory *m) {
    if (m == NULL)
        return;
    Py_CLEAR(m->cuda);
    Py_CLEAR(m->cuda_name);
    Py_CLEAR(m->initialized_name);
    Py_CLEAR(m->get_device);
    Py_CLEAR(m->memory_stats);
    Py_CLEAR(m->reset_peak);
    PyMem_Free(m);
}

int sw_py_memory_traverse(sw_py_memory *m, visitproc visit, void *arg) {
    if (m != NULL) {
        Py_VISIT(m->cuda);
        Py_VISIT(m->get_device);
        Py_VISIT(m->memory_stats);
        Py_VISIT(m->reset_peak);
    }
    return 0;
}

/* Turn the allocator's part off, saying why in the run's notes; clears the exception. */
static void give_up(sw_py_memory *m, sw_profiler *p, const char *why) {
    PyErr_Clear();
    m->off = 1;
    sw_set_note(p, "step_memory", why);
}

/* Has the program's torch initialized CUDA? 1, 0; -1 with an exception set. */
static int cuda_initialized(sw_py_memory *m) {
    if (m->cuda == NULL) {
        m->cuda = PyImport_GetModule(m->cuda_name); /* only if imported: never an import */
        if (m->cuda == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *flag = PyObject_GetAttr(m->cuda, m->initialized_name);
    if (flag == NULL)
        return -1;
    int on = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return on;
}

/* torch._C's allocator functions, looked up once CUDA is up. 0, or -1 with an exception. */
static int find_functions(sw_py_memory *m) {
    if (m->memory_stats != NULL)
        return 0;
    PyObject *c = PyImport_ImportModule("torch._C"); /* imported with torch.cuda */
    if (c == NULL)
        return -1;
    m->get_device = PyObject_GetAttrString(c, "_cuda_getDevice");
    m->reset_peak = m->get_device ? PyObject_GetAttrString(c, "_cuda_resetPeakMemoryStats") : NULL;
    m->memory_stats = m->reset_peak ? PyObject_GetAttrString(c, "_cuda_memoryStats") : NULL;
    Py_DECREF(c);
    return m->memory_stats ? 0 : -1;
}

/* stats[group]["all"][which] as bytes into *out. 0, or -1 with an exception. */
static int stat_of(PyObject *stats, const char *group, const char *which, uint64_t *out) {
    PyObject *g = PyDict_Check(stats) ? PyDict_GetItemString(stats, group) : NULL;
    PyObject *all = g && PyDict_Check(g) ? PyDict_GetItemString(g, "all") : NULL;
    PyObject *v = all && PyDict_Check(all) ? PyDict_GetItemString(all, which) : NULL;
    if (v == NULL || !PyLong_Check(v)) {
        PyErr_Format(PyExc_KeyError, "%s.all.%s", group, which);
        return -1;
    }
    long long n = PyLong_AsLongLong(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    *out = n > 0 ? (uint64_t)n : 0;
    return 0;
}

/* stats[key] as a count, or -1 when absent (an older torch): the allocator's retries and
 * out-of-memory errors, for the slow steps' signals (docs/slow-steps.md). */
static long long count_of(PyObject *stats, const char *key) {
    PyObject *v = PyDict_Check(stats) ? PyDict_GetItemString(stats, key) : NULL;
    long long n = v != NULL && PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
    if (n == -1 && PyErr_Occurred())
        PyErr_Clear();
    return n;
}

void sw_py_step_memory(sw_py_memory *m, sw_profiler *p) {
    if (m == NULL || m->off || p == NULL || sw_step_index(p) < 0)
        return;
    int on = cuda_initialized(m);
    if (on <= 0) {
        if (on < 0)
            give_up(m, p, "off: torch.cuda's state could not be read");
        return;
    }
    if (find_functions(m) < 0) {
        give_up(m, p, "off: this torch lacks torch._C._cuda_memoryStats");
        return;
    }
    PyObject *device = PyObject_CallNoArgs(m->get_device);
    PyObject *stats = device ? PyObject_CallOneArg(m->memory_stats, device) : NULL;
    uint64_t allocated = 0, peak = 0, reserved = 0;
    int ok = stats != NULL && stat_of(stats, "allocated_bytes", "current", &allocated) == 0 &&
             stat_of(stats, "allocated_bytes", "peak", &peak) == 0 &&
             stat_of(stats, "reserved_bytes", "current", &reserved) == 0;
    long long retries = ok ? count_of(stats, "num_alloc_retries") : -1;
    long long ooms = ok ? count_of(stats, "num_ooms") : -1;
    if (retries >= 0 && ooms >= 0)
        sw_step_allocator(p, (uint64_t)retries, (uint64_t)ooms);
    Py_XDECREF(stats);
    PyObject *reset = ok ? PyObject_CallOneArg(m->reset_peak, device) : NULL;
    Py_XDECREF(device);
    if (reset == NULL) {
        give_up(m, p, "off: torch's CUDA allocator statistics could not be read");
        return;
    }
    Py_DECREF(reset);
    sw_step_memory(p, allocated, peak, reserved);
}

void sw_py_step_end(ProfilerObject *owner, uint64_t end_ns) {
    sw_profiler *p = owner != NULL ? owner->p : NULL;
    if (p == NULL)
        return;
    if (owner->memory != NULL) {
        /* A step may end while an exception is on its way (a hook's): keep it intact. */
        sw_py_aside aside;
        sw_py_set_aside(&aside);
        sw_py_step_memory(owner->memory, p);
        sw_py_put_back(&aside);
    }
    sw_step_end_at(p, end_ns);
}
