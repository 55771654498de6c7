/*
 * _stepwatch.c — the CPython face of the C core (stepwatch._stepwatch): the module itself.
 *
 * Laid out like CPython's multi-file modules (Modules/_sqlite/, Modules/_io/): this file
 * holds the module definition, its multi-phase initialisation, the per-module state (no C
 * globals) and the small module functions; each type lives in a file of its own and hands
 * its PyType_Spec over through _stepwatch.h, which lists the files. The types are heap types
 * made here with PyType_FromModuleAndSpec.
 *
 * Types
 *   Profiler  owns one sw_profiler; hands out Action, Phase and Step objects (_profiler.c).
 *   Action    a pre-made action: `with a:` and the decorator form (Timed) (_actions.c).
 *   Phase     a phase as a context manager (_actions.c).
 *   Step      one step as a context manager, with its batch size (_actions.c).
 *   Snapshot  a sw_snapshot: report text, plain records, run metadata (_snapshot.c).
 *   Timer     Ignite's Timer over sw_timer (_timer.c).
 *   Loop      the per-step hot path of stepwatch.torch (_loop.c), its step rules
 *             (_loop_rules.c) and its LoopHooks (_loop_hooks.c).
 *   Marks     the per-iteration marks of stepwatch.ignite (_marks.c), and HandlerTimer, its
 *             timing of each user handler.
 *   FitMarks  the per-batch marks of stepwatch.fastai (_fitmarks.c).
 *   Spans     spans started and stopped by name: stepwatch.lightning's hot path (_spans.c).
 *   SpanScope Spans.profile(name): a span as a context manager, Lightning's profile() (_spans.c).
 *   Intervals thunder's TimeProfiler marks, paired and summed (_intervals.c).
 *   FireEvent Ignite's Engine._fire_event in C, making Marks' marks (_fire_event.c).
 *   Live      the live status line's figures over a window (_live.c).
 * Functions over run files: load(), load_steps() (_runfile.c); html(), export_chrome(),
 * diagnose(), compare() (_analysis.c).
 */
#include "_stepwatch.h"

static struct PyModuleDef stepwatch_module;

module_state *sw_py_state_of_type(PyTypeObject *tp) {
    PyObject *module = PyType_GetModuleByDef(tp, &stepwatch_module);
    return module ? sw_py_state_of_module(module) : NULL;
}

/* ------------------------------------------------------------------------------------------
 * Module functions (load and load_steps: _runfile.c)
 * ---------------------------------------------------------------------------------------- */

static PyObject *mod_now_ns(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(sw_now_ns());
}

static PyObject *mod_strerror(PyObject *module, PyObject *arg) {
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(sw_strerror((int)rc));
}

static PyObject *mod_category_of(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    return PyUnicode_FromString(sw_category_name(sw_category_of(name)));
}

/* write_output(path, data): sw_output_write_file (stepwatch/output.h): all or nothing. */
static PyObject *mod_write_output(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "write_output(path, data) takes 2 arguments");
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(args[0], &path))
        return NULL;
    Py_buffer data;
    PyObject *encoded = NULL;
    if (PyUnicode_Check(args[1]))
        encoded = PyUnicode_AsUTF8String(args[1]);
    if ((PyUnicode_Check(args[1]) && !encoded) ||
        PyObject_GetBuffer(encoded ? encoded : args[1], &data, PyBUF_SIMPLE) < 0) {
        Py_XDECREF(encoded);
        Py_DECREF(path);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = sw_output_write_file(PyBytes_AS_STRING(path), data.buf,
                                                     (size_t)data.len);
    Py_END_ALLOW_THREADS PyBuffer_Release(&data);
    Py_XDECREF(encoded);
    Py_DECREF(path);
    if (rc != 0)
        return sw_py_raise(sw_py_state_of_module(module), rc, "write_output");
    Py_RETURN_NONE;
}

/* scale_time(seconds) -> str: sw_format_scale_time, fastxtend's durations (stepwatch.fastai's
 * report uses the C writer's own cells). */
static PyObject *mod_scale_time(PyObject *module, PyObject *seconds) {
    double v = PyFloat_AsDouble(seconds);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    char buf[64];
    return PyUnicode_FromString(sw_format_scale_time(v, buf, sizeof buf));
}

/* ---- Ignite's print_results texts (sw_ignite_write_*), from cells stepwatch.ignite made ---- */

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
static PyObject *mod_ignite_basic_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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
static PyObject *mod_ignite_handlers_text(PyObject *module, PyObject *rows_arg) {
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

static PyObject *mod_batch_size(PyObject *module, PyObject *batch) {
    module_state *st = sw_py_state_of_module(module);
    return PyLong_FromUnsignedLong(sw_py_batch_size(batch, st->shape_name));
}

static PyObject *mod_clock_in_use(PyObject *module, PyObject *unused) {
    return PyUnicode_FromString(sw_clock_in_use() == SW_CLOCK_TSC ? "tsc" : "monotonic");
}

static PyMethodDef module_methods[] = {
    {"now_ns", mod_now_ns, METH_NOARGS,
     "now_ns($module, /)\n--\n\n"
     "-> int: the profiler clock (CLOCK_MONOTONIC, or the TSC: clock_in_use())."},
    {"clock_in_use", mod_clock_in_use, METH_NOARGS,
     "clock_in_use($module, /)\n--\n\n"
     "-> 'monotonic' or 'tsc': the clock now_ns() and every profiler read "
     "(Profiler(clock='tsc') or SW_CLOCK=tsc switch the process to the TSC where invariant)."},
    {"load", sw_py_load, METH_O,
     "load($module, path, /)\n--\n\n"
     "-> Snapshot of a run file (all ranks merged)."},
    {"load_steps", sw_py_load_steps, METH_O,
     "load_steps($module, path, /)\n--\n\n"
     "-> list of dicts, one per step of a run file, with per-category ns."},
    {"run_ranks", (PyCFunction)(void (*)(void))sw_py_run_ranks, METH_VARARGS | METH_KEYWORDS,
     "run_ranks($module, /, path, format='table', top=3)\n--\n\n"
     "-> str: the cross-rank view of a run file (a merged one, or rank 0's of a "
     "run that aggregated); stepwatch.Error NOTFOUND when it has none."},
    {"ranks_view", (PyCFunction)(void (*)(void))sw_py_ranks_view, METH_VARARGS | METH_KEYWORDS,
     "ranks_view($module, /, payloads, world_size, format='table', top=3)\n--\n\n"
     "-> str: the cross-rank view of world_size payloads (Profiler.rank_payload(), "
     "rank r's at r * RANK_PAYLOAD_SIZE; zeroed: did not answer). format: table, "
     "markdown, json."},
    {"html", (PyCFunction)(void (*)(void))sw_py_html, METH_FASTCALL,
     "html($module, run, path, /)\n--\n\n"
     "Write the self-contained HTML report of a run file (sw_html_write); html([a, "
     "b], path): one page comparing run files a (baseline) and b (sw_html_write_compare)."},
    {"export_chrome", (PyCFunction)(void (*)(void))sw_py_export_chrome, METH_FASTCALL,
     "export_chrome($module, run, path, /)\n--\n\n"
     "Write a run file's timeline as Chrome Trace Event JSON, for Perfetto "
     "(sw_run_export_chrome)."},
    {"diagnose", (PyCFunction)(void (*)(void))sw_py_diagnose, METH_VARARGS | METH_KEYWORDS,
     "diagnose($module, /, run, format='table')\n--\n\n"
     "-> str: the findings about a run file (sw_diagnose_write); format table, "
     "markdown or json."},
    {"compare", (PyCFunction)(void (*)(void))sw_py_compare, METH_VARARGS | METH_KEYWORDS,
     "compare($module, /, baseline, new, format='table')\n--\n\n"
     "-> str: what changed between two runs (run files or Snapshots), means and "
     "tails (sw_compare_write); format table, markdown, csv or json."},
    {"strerror", mod_strerror, METH_O,
     "strerror($module, code, /)\n--\n\n"
     "-> str (sw_strerror)."},
    {"scale_time", mod_scale_time, METH_O,
     "scale_time($module, seconds, /)\n--\n\n"
     "-> str: fastxtend's scale_time, as the fastxtend report writes its durations "
     "(sw_format_scale_time): '838.2ms', '-' for zero, NaN and the infinities."},
    {"ignite_basic_text", (PyCFunction)(void (*)(void))mod_ignite_basic_text, METH_FASTCALL,
     "ignite_basic_text($module, processing, dataflow, total, events, /)\n--\n\n"
     "-> str: Ignite's BasicTimeProfiler.print_results text from its cells "
     "(sw_ignite_write_basic); events: (event, handlers, stats) str triples."},
    {"ignite_handlers_text", mod_ignite_handlers_text, METH_O,
     "ignite_handlers_text($module, rows, /)\n--\n\n"
     "-> str: Ignite's HandlersTimeProfiler.print_results text from its rows as cells "
     "(sw_ignite_write_handlers): 9-tuples (handler, event, total, min, min_index, max, "
     "max_index, mean, std) of str, an index None for a cell alone."},
    {"write_output", (PyCFunction)(void (*)(void))mod_write_output, METH_FASTCALL,
     "write_output($module, path, data, /)\n--\n\n"
     "Write str or bytes to path all or nothing: a temporary file renamed into "
     "place (the old file untouched on failure); a device or FIFO is written as a "
     "stream. Raises stepwatch.Error saying why."},
    {"category_of", mod_category_of, METH_O,
     "category_of($module, action_name, /)\n--\n\n"
     "-> str."},
    {"_function_hook_state", sw_py_funcs_thread_state, METH_NOARGS,
     "_function_hook_state($module, /)\n--\n\n"
     "-> dict: the function profiler's hooks on this thread (tests)."},
    {"_function_hook_floor", sw_py_funcs_floor, METH_O,
     "_function_hook_floor($module, kind, /)\n--\n\n"
     ": the hooks doing nothing (the benchmark's floor)."},
    {"_device_reader", sw_py_device_reader, METH_O,
     "_device_reader($module, gpus, /)\n--\n\n"
     "-> a reader of the device statistics (stepwatch.devicestats)."},
    {"_device_read", sw_py_device_read, METH_O,
     "_device_read($module, reader, /)\n--\n\n"
     "-> dict of the statistics now (stepwatch.devicestats)."},
    {"_watch_profilers", sw_py_watch_profilers, METH_O,
     "_watch_profilers(callback, /)\n--\n\n"
     "callback(None) before each Profiler is made, callback(profiler) after; None stops. "
     "stepwatch.autorun's: the program's own profiler takes the run over."},
    {"batch_size", mod_batch_size, METH_O,
     "batch_size($module, batch, /)\n--\n\n"
     "-> int: samples in a batch, the first dimension of its first array-like "
     "(through tuples, lists and dicts); 0 when it cannot be told."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------------------------
 * Module lifetime
 * ---------------------------------------------------------------------------------------- */

static int add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **slot) {
    *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (!*slot)
        return -1;
    /* DISALLOW_INSTANTIATION types are still exposed, for isinstance checks. */
    return PyModule_AddType(module, *slot);
}

static int module_exec(PyObject *module) {
    module_state *st = sw_py_state_of_module(module);
    if (add_type(module, &sw_py_profiler_spec, &st->profiler_type) < 0 ||
        add_type(module, &sw_py_action_spec, &st->action_type) < 0 ||
        add_type(module, &sw_py_prebound_spec, &st->prebound_type) < 0 ||
        add_type(module, &sw_py_timed_spec, &st->timed_type) < 0 ||
        add_type(module, &sw_py_phase_spec, &st->phase_type) < 0 ||
        add_type(module, &sw_py_step_spec, &st->step_type) < 0 ||
        add_type(module, &sw_py_snapshot_spec, &st->snapshot_type) < 0 ||
        add_type(module, &sw_py_timer_spec, &st->timer_type) < 0 ||
        add_type(module, &sw_py_loop_spec, &st->loop_type) < 0 ||
        add_type(module, &sw_py_hook_spec, &st->hook_type) < 0 ||
        add_type(module, &sw_py_marks_spec, &st->marks_type) < 0 ||
        add_type(module, &sw_py_fitmarks_spec, &st->fitmarks_type) < 0 ||
        add_type(module, &sw_py_handler_timer_spec, &st->handler_timer_type) < 0 ||
        add_type(module, &sw_py_spans_spec, &st->spans_type) < 0 ||
        add_type(module, &sw_py_scope_spec, &st->scope_type) < 0 ||
        add_type(module, &sw_py_intervals_spec, &st->intervals_type) < 0 ||
        add_type(module, &sw_py_fire_event_spec, &st->fire_event_type) < 0 ||
        add_type(module, &sw_py_live_spec, &st->live_type) < 0 ||
        add_type(module, &sw_py_modules_spec, &st->modules_type) < 0 ||
        add_type(module, &sw_py_modules_hook_spec, &st->modules_hook_type) < 0 ||
        add_type(module, &sw_py_node_hook_spec, &st->node_hook_type) < 0 ||
        sw_py_add_prebound(st->prebound_type, st->action_type) < 0 ||
        sw_py_add_prebound(st->prebound_type, st->phase_type) < 0)
        return -1;
    st->error = PyErr_NewExceptionWithDoc(
        "stepwatch.Error", "A stepwatch call failed; .code is the SW_E* code, .name its name.",
        PyExc_RuntimeError, NULL);
    if (!st->error || PyModule_AddObjectRef(module, "Error", st->error) < 0)
        return -1;
    PyObject *functools = PyImport_ImportModule("functools");
    if (!functools)
        return -1;
    st->update_wrapper = PyObject_GetAttrString(functools, "update_wrapper");
    Py_DECREF(functools);
    if (!st->update_wrapper)
        return -1;
    st->shape_name = PyUnicode_InternFromString("shape");
    if (!st->shape_name)
        return -1;
    if (PyModule_AddStringConstant(module, "__version__", SW_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(module, "JSON_SCHEMA_VERSION", SW_JSON_SCHEMA_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_RING_CAPACITY", SW_MAX_RING_CAPACITY) < 0 ||
        PyModule_AddIntConstant(module, "RANK_PAYLOAD_SIZE", SW_RANK_PAYLOAD_SIZE) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    module_state *st = sw_py_state_of_module(module);
    Py_VISIT(st->profiler_type);
    Py_VISIT(st->action_type);
    Py_VISIT(st->prebound_type);
    Py_VISIT(st->timed_type);
    Py_VISIT(st->phase_type);
    Py_VISIT(st->step_type);
    Py_VISIT(st->snapshot_type);
    Py_VISIT(st->timer_type);
    Py_VISIT(st->loop_type);
    Py_VISIT(st->hook_type);
    Py_VISIT(st->modules_type);
    Py_VISIT(st->modules_hook_type);
    Py_VISIT(st->node_hook_type);
    Py_VISIT(st->marks_type);
    Py_VISIT(st->fitmarks_type);
    Py_VISIT(st->handler_timer_type);
    Py_VISIT(st->spans_type);
    Py_VISIT(st->scope_type);
    Py_VISIT(st->intervals_type);
    Py_VISIT(st->fire_event_type);
    Py_VISIT(st->live_type);
    Py_VISIT(st->error);
    Py_VISIT(st->update_wrapper);
    Py_VISIT(st->shape_name);
    Py_VISIT(st->on_new_profiler);
    return 0;
}

static int module_clear(PyObject *module) {
    module_state *st = sw_py_state_of_module(module);
    Py_CLEAR(st->profiler_type);
    Py_CLEAR(st->action_type);
    Py_CLEAR(st->prebound_type);
    Py_CLEAR(st->timed_type);
    Py_CLEAR(st->phase_type);
    Py_CLEAR(st->step_type);
    Py_CLEAR(st->snapshot_type);
    Py_CLEAR(st->timer_type);
    Py_CLEAR(st->loop_type);
    Py_CLEAR(st->hook_type);
    Py_CLEAR(st->modules_type);
    Py_CLEAR(st->modules_hook_type);
    Py_CLEAR(st->node_hook_type);
    Py_CLEAR(st->marks_type);
    Py_CLEAR(st->fitmarks_type);
    Py_CLEAR(st->handler_timer_type);
    Py_CLEAR(st->spans_type);
    Py_CLEAR(st->scope_type);
    Py_CLEAR(st->intervals_type);
    Py_CLEAR(st->fire_event_type);
    Py_CLEAR(st->live_type);
    Py_CLEAR(st->error);
    Py_CLEAR(st->update_wrapper);
    Py_CLEAR(st->shape_name);
    Py_CLEAR(st->on_new_profiler);
    return 0;
}

static void module_free(void *module) {
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef stepwatch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stepwatch._stepwatch",
    .m_doc = "The C core of stepwatch: profiler, actions, phases, steps, reports, Timer.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__stepwatch(void) {
    return PyModuleDef_Init(&stepwatch_module);
}
