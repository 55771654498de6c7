/*
 * _runfile.c — the module functions over the run-file reader (sw_run_*): load(path), a
 * Snapshot of a run file with all ranks merged, and load_steps(path), one dict per step.
 */
#include "_stepwatch.h"

#include <errno.h>
#include <stdio.h>

/* The run-file reader is another part of the library. Weak references keep this module
 * importable in a build that lacks it; load() then raises SW_EUNSUPPORTED. */
#pragma weak sw_run_open
#pragma weak sw_run_close
#pragma weak sw_run_snapshot
#pragma weak sw_run_foreach_step
#pragma weak sw_run_phase_name

/* Open the run file at arg (str or os.PathLike), raising SW_EUNSUPPORTED when this build
 * has no reader, FileNotFoundError, or stepwatch.Error. */
sw_run *sw_py_open_run(module_state *st, PyObject *arg) {
    if (!(sw_run_open && sw_run_close && sw_run_snapshot && sw_run_foreach_step &&
          sw_run_phase_name)) {
        sw_py_raise(st, SW_EUNSUPPORTED, "run file reader");
        return NULL;
    }
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    sw_run *run = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = sw_run_open(PyBytes_AS_STRING(path), &run);
    Py_END_ALLOW_THREADS if (rc == SW_ENOTFOUND) {
        PyObject *exc_args = Py_BuildValue("(isO)", ENOENT, sw_strerror(rc), arg);
        if (exc_args) {
            PyErr_SetObject(PyExc_FileNotFoundError, exc_args);
            Py_DECREF(exc_args);
        }
    }
    else if (rc < 0) {
        sw_py_raise(st, rc, PyBytes_AS_STRING(path));
    }
    Py_DECREF(path);
    return rc < 0 ? NULL : run;
}

PyObject *sw_py_load(PyObject *module, PyObject *arg) {
    module_state *st = sw_py_state_of_module(module);
    sw_run *run = sw_py_open_run(st, arg);
    if (!run)
        return NULL;
    sw_snapshot *s = NULL;
    int rc = sw_run_snapshot(run, &s);
    sw_run_close(run);
    if (rc < 0)
        return sw_py_raise(st, rc, "load");
    return sw_py_snapshot_wrap(st, s);
}

typedef struct {
    sw_run *run;
    PyObject *list;
} steps_ctx;

static int collect_step(void *ctx, int rank, const sw_step_record *r) {
    steps_ctx *c = (steps_ctx *)ctx;
    PyObject *d = Py_BuildValue(
        "{s:K,s:i,s:N,s:I,s:O,s:I,s:K,s:K}", "step", (unsigned long long)r->step, "rank", rank,
        "phase", sw_py_str_or_none(sw_run_phase_name(c->run, rank, r->phase)), "batch_size",
        (unsigned)r->batch_size, "warmup", r->warmup ? Py_True : Py_False, "thread",
        (unsigned)r->thread, "start_ns", (unsigned long long)r->start_ns, "duration_ns",
        (unsigned long long)r->duration_ns);
    if (!d)
        return -1;
    for (int cat = 0; cat < SW_CAT_COUNT; cat++) {
        char key[48];
        snprintf(key, sizeof key, "%s_ns", sw_category_name((sw_category)cat));
        if (sw_py_dict_put(d, key, PyLong_FromUnsignedLongLong(r->category_ns[cat])) < 0) {
            Py_DECREF(d);
            return -1;
        }
    }
    /* Memory in bytes; None where it was not measured. */
    const struct {
        const char *key;
        uint64_t value;
        int known;
    } memory[] = {{"rss_bytes", r->rss_bytes, r->rss_bytes != 0},
                  {"allocated_bytes", r->allocated_bytes, r->has_allocator},
                  {"peak_allocated_bytes", r->peak_allocated_bytes, r->has_allocator},
                  {"reserved_bytes", r->reserved_bytes, r->has_allocator}};
    for (size_t i = 0; i < sizeof memory / sizeof *memory; i++) {
        PyObject *v = memory[i].known ? PyLong_FromUnsignedLongLong(memory[i].value)
                                      : Py_NewRef(Py_None);
        if (sw_py_dict_put(d, memory[i].key, v) < 0) {
            Py_DECREF(d);
            return -1;
        }
    }
    int rc = PyList_Append(c->list, d);
    Py_DECREF(d);
    return rc < 0 ? -1 : 0;
}

PyObject *sw_py_load_steps(PyObject *module, PyObject *arg) {
    module_state *st = sw_py_state_of_module(module);
    sw_run *run = sw_py_open_run(st, arg);
    if (!run)
        return NULL;
    steps_ctx ctx = {run, PyList_New(0)};
    if (!ctx.list) {
        sw_run_close(run);
        return NULL;
    }
    int rc = sw_run_foreach_step(run, -1, collect_step, &ctx);
    sw_run_close(run);
    if (rc != 0) {
        Py_DECREF(ctx.list);
        if (PyErr_Occurred())
            return NULL;
        return sw_py_raise(st, rc < 0 ? rc : SW_EIO, "load_steps");
    }
    return ctx.list;
}

PyObject *sw_py_run_ranks(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "format", "top", NULL};
    PyObject *path;
    const char *fmt = "table";
    int top = 3;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|si:run_ranks", kwlist, &path, &fmt, &top))
        return NULL;
    sw_run *run = sw_py_open_run(sw_py_state_of_module(module), path);
    if (!run)
        return NULL;
    PyObject *text = sw_py_run_ranks_text(module, run, fmt, top);
    sw_run_close(run);
    return text;
}
