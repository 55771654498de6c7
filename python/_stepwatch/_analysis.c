/*
 * _analysis.c — the analyses of the C library for Python, the same calls the stepwatch
 * command makes: html(run, path) or html([a, b], path), export_chrome(run, path),
 * diagnose(run, format) and compare(a, b, format). A run is a run file's path; compare also takes Snapshots
 * (Profiler.snapshot(), load()).
 */
#include "_stepwatch.h"

#include <errno.h>
#include <stdio.h>

/* ---- writing a file from a run: html() and export_chrome() ---- */

typedef int (*run_writer)(sw_run *run, FILE *out);
typedef int (*pair_writer)(sw_run *a, sw_run *b, FILE *out);

/* Open the nruns (1 or 2) run files and write what writer (one run) or pair (two) makes of
 * them to path through sw_output (all or nothing: a failure leaves the old file untouched
 * and no half-written one). None. */
static PyObject *write_runs_to(module_state *st, PyObject *const *runs, int nruns, PyObject *path,
                               const char *who, run_writer writer, pair_writer pair) {
    PyObject *out_path = NULL;
    if (!PyUnicode_FSConverter(path, &out_path))
        return NULL;
    sw_run *run[2] = {NULL, NULL};
    for (int i = 0; i < nruns; i++)
        if (!(run[i] = sw_py_open_run(st, runs[i]))) {
            if (i)
                sw_run_close(run[0]);
            Py_DECREF(out_path);
            return NULL;
        }
    int rc, write_errno = -1; /* >= 0: the stream failed (errno then, 0 unknown) */
    Py_BEGIN_ALLOW_THREADS    /* reads every step (and span) of the run files */
        sw_output *o = NULL;
    rc = sw_output_open(PyBytes_AS_STRING(out_path), &o);
    if (rc == 0) {
        FILE *f = sw_output_stream(o);
        errno = 0;
        rc = nruns == 2 ? pair(run[0], run[1], f) : writer(run[0], f);
        if (rc != 0 && ferror(f)) /* a full disk: named with the path, as the commit would */
            write_errno = errno;
        if (rc == 0)
            rc = sw_output_commit(o);
        else
            sw_output_abort(o);
    }
    Py_END_ALLOW_THREADS for (int i = nruns - 1; i >= 0; i--) sw_run_close(run[i]);
    PyObject *result = rc == 0 ? Py_NewRef(Py_None)
                       : write_errno >= 0
                           ? sw_py_raise_write(st, who, PyBytes_AS_STRING(out_path), write_errno)
                           : sw_py_raise(st, rc, who);
    Py_DECREF(out_path);
    return result;
}

/* who(run, path) with one run file. */
static PyObject *write_run_to(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              const char *who, run_writer writer) {
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "%s(run, path) takes 2 arguments (%zd given)", who,
                            nargs);
    return write_runs_to(sw_py_state_of_module(module), args, 1, args[1], who, writer, NULL);
}

/* html(run, path), or html([a, b], path): the comparison page of two run files (a the
 * baseline); html([run], path) is html(run, path). */
PyObject *sw_py_html(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])))
        return write_run_to(module, args, nargs, "html", sw_html_write);
    PyObject *runs = PySequence_Fast(args[0], "html: runs");
    if (!runs)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(runs);
    PyObject *r = NULL;
    if (n == 1 || n == 2)
        r = write_runs_to(sw_py_state_of_module(module), PySequence_Fast_ITEMS(runs), (int)n,
                          args[1], "html", sw_html_write, sw_html_write_compare);
    else
        PyErr_Format(PyExc_ValueError, "html([a, b], path) compares two run files; %zd given", n);
    Py_DECREF(runs);
    return r;
}

PyObject *sw_py_export_chrome(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    return write_run_to(module, args, nargs, "export_chrome", sw_run_export_chrome);
}

/* ---- text from runs: diagnose() and compare() ---- */

typedef struct {
    sw_run *run;
    const sw_snapshot *a, *b;
    sw_format fmt;
} analysis_job;

static int write_diagnosis(void *ctx, FILE *f) {
    analysis_job *job = ctx;
    return sw_diagnose_write(job->run, job->fmt, f);
}

static int write_comparison(void *ctx, FILE *f) {
    analysis_job *job = ctx;
    return sw_compare_write(job->a, job->b, job->fmt, f);
}

/* A format that the analyses take: table, markdown, csv or json. */
static int analysis_format(const char *name, const char *who, sw_format *out) {
    if (sw_py_parse_format(name, out) < 0)
        return -1;
    if (*out == SW_FORMAT_TABLE || *out == SW_FORMAT_MARKDOWN || *out == SW_FORMAT_CSV ||
        *out == SW_FORMAT_JSON)
        return 0;
    PyErr_Format(PyExc_ValueError,
                 "%s: format '%s' is a report format; use table, markdown, "
                 "csv or json",
                 who, name);
    return -1;
}

PyObject *sw_py_diagnose(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"run", "format", NULL};
    module_state *st = sw_py_state_of_module(module);
    PyObject *path;
    const char *fmt = "table";
    analysis_job job = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|s:diagnose", kwlist, &path, &fmt) ||
        analysis_format(fmt, "diagnose", &job.fmt) < 0)
        return NULL;
    if (job.fmt == SW_FORMAT_CSV)
        return PyErr_Format(PyExc_ValueError, "diagnose: format 'csv' is not offered; use "
                                              "table, markdown or json");
    job.run = sw_py_open_run(st, path);
    if (!job.run)
        return NULL;
    PyObject *text = sw_py_text_of(st, write_diagnosis, &job, "diagnose");
    sw_run_close(job.run);
    return text;
}

/* A Snapshot as it is, or a run file's path loaded (*owned set: the caller frees it). */
static const sw_snapshot *snapshot_arg(module_state *st, PyObject *obj, sw_snapshot **owned) {
    const sw_snapshot *s = sw_py_snapshot_of(st, obj);
    if (s)
        return s;
    sw_run *run = sw_py_open_run(st, obj);
    if (!run)
        return NULL;
    int rc = sw_run_snapshot(run, owned);
    sw_run_close(run);
    if (rc < 0) {
        sw_py_raise(st, rc, "compare");
        return NULL;
    }
    return *owned;
}

PyObject *sw_py_compare(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"baseline", "new", "format", NULL};
    module_state *st = sw_py_state_of_module(module);
    PyObject *a, *b;
    const char *fmt = "table";
    analysis_job job = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|s:compare", kwlist, &a, &b, &fmt) ||
        analysis_format(fmt, "compare", &job.fmt) < 0)
        return NULL;
    sw_snapshot *owned_a = NULL, *owned_b = NULL;
    PyObject *text = NULL;
    job.a = snapshot_arg(st, a, &owned_a);
    job.b = job.a ? snapshot_arg(st, b, &owned_b) : NULL;
    if (job.a && job.b)
        text = sw_py_text_of(st, write_comparison, &job, "compare");
    sw_snapshot_free(owned_a);
    sw_snapshot_free(owned_b);
    return text;
}
