/*
 * _stepwatch.c — the CPython face of the C core (stepwatch._stepwatch): the module itself.
 *
 * Laid out like CPython's multi-file modules (Modules/_sqlite/, Modules/_io/): this file
 * holds the multi-phase initialisation, the per-module state's lifetime (no C globals), the
 * table of every type and the small module functions; each type lives in a file of its own
 * and hands its PyType_Spec over through _stepwatch.h (README.md lists the files). The types
 * are heap types made here with PyType_FromModuleAndSpec; a framework's module functions
 * live in its room and are added here too. The definition itself is _module_def.c's.
 */
#include "_stepwatch.h"

#include <stddef.h>

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

/* Every type of the module: its spec and the slot of the module state that holds it. The one
 * list module_exec, module_traverse and module_clear go through. */
static const struct {
    PyType_Spec *spec;
    size_t slot; /* offsetof(module_state, ...) */
} types[] = {
    {&sw_py_profiler_spec, offsetof(module_state, profiler_type)},
    {&sw_py_action_spec, offsetof(module_state, action_type)},
    {&sw_py_prebound_spec, offsetof(module_state, prebound_type)},
    {&sw_py_timed_spec, offsetof(module_state, timed_type)},
    {&sw_py_phase_spec, offsetof(module_state, phase_type)},
    {&sw_py_step_spec, offsetof(module_state, step_type)},
    {&sw_py_snapshot_spec, offsetof(module_state, snapshot_type)},
    {&sw_py_timer_spec, offsetof(module_state, timer_type)},
    {&sw_py_loop_spec, offsetof(module_state, loop_type)},
    {&sw_py_hook_spec, offsetof(module_state, hook_type)},
    {&sw_py_marks_spec, offsetof(module_state, marks_type)},
    {&sw_py_fitmarks_spec, offsetof(module_state, fitmarks_type)},
    {&sw_py_handler_timer_spec, offsetof(module_state, handler_timer_type)},
    {&sw_py_spans_spec, offsetof(module_state, spans_type)},
    {&sw_py_scope_spec, offsetof(module_state, scope_type)},
    {&sw_py_intervals_spec, offsetof(module_state, intervals_type)},
    {&sw_py_fire_event_spec, offsetof(module_state, fire_event_type)},
    {&sw_py_live_spec, offsetof(module_state, live_type)},
    {&sw_py_modules_spec, offsetof(module_state, modules_type)},
    {&sw_py_modules_hook_spec, offsetof(module_state, modules_hook_type)},
    {&sw_py_node_hook_spec, offsetof(module_state, node_hook_type)},
    {&sw_py_collectives_spec, offsetof(module_state, collectives_type)},
    {&sw_py_collective_wait_spec, offsetof(module_state, collective_wait_type)},
};

#define NTYPES (sizeof types / sizeof types[0])

static PyTypeObject **type_slot(module_state *st, size_t i) {
    return (PyTypeObject **)((char *)st + types[i].slot);
}

/* The module functions of a framework's room (_ignite.c, _fastai.c), beside this file's. */
static PyMethodDef *const framework_functions[] = {sw_py_ignite_functions, sw_py_fastai_functions,
                                                   sw_py_collectives_functions};

/* A tuple of the n names name_of(0..n-1), as the module's attribute `attr`. */
static int add_names(PyObject *module, const char *attr, Py_ssize_t n,
                     const char *(*name_of)(int)) {
    PyObject *names = PyTuple_New(n);
    for (Py_ssize_t i = 0; names != NULL && i < n; i++) {
        PyObject *name = PyUnicode_FromString(name_of((int)i));
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, name);
    }
    int rc = names ? PyModule_AddObjectRef(module, attr, names) : -1;
    Py_XDECREF(names);
    return rc;
}

static const char *format_name(int i) {
    return sw_format_name((sw_format)i);
}

static const char *category_name(int i) {
    return sw_category_name((sw_category)i);
}

/* FORMATS, the report format names (the library's writer table: sw_format_name from 0), and
 * CATEGORIES, the step breakdown's categories (sw_category_name): read from the library, the
 * one place each list is written, so Python never types them again. */
static int add_lists(PyObject *module) {
    Py_ssize_t nformats = 0;
    while (sw_format_name((sw_format)nformats) != NULL)
        nformats++;
    if (add_names(module, "FORMATS", nformats, format_name) < 0)
        return -1;
    return add_names(module, "CATEGORIES", SW_CAT_COUNT, category_name);
}

static int module_exec(PyObject *module) {
    module_state *st = sw_py_state_of_module(module);
    for (size_t i = 0; i < NTYPES; i++) {
        PyTypeObject **slot = type_slot(st, i);
        *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, types[i].spec, NULL);
        /* DISALLOW_INSTANTIATION types are still exposed, for isinstance checks. */
        if (!*slot || PyModule_AddType(module, *slot) < 0)
            return -1;
    }
    if (sw_py_add_prebound(st->prebound_type, st->action_type) < 0 ||
        sw_py_add_prebound(st->prebound_type, st->phase_type) < 0)
        return -1;
    for (size_t i = 0; i < sizeof framework_functions / sizeof framework_functions[0]; i++)
        if (PyModule_AddFunctions(module, framework_functions[i]) < 0)
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
    if (add_lists(module) < 0 ||
        PyModule_AddStringConstant(module, "__version__", SW_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(module, "JSON_SCHEMA_VERSION", SW_JSON_SCHEMA_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_RING_CAPACITY", SW_MAX_RING_CAPACITY) < 0 ||
        PyModule_AddIntConstant(module, "RANK_PAYLOAD_SIZE", SW_RANK_PAYLOAD_SIZE) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    module_state *st = sw_py_state_of_module(module);
    for (size_t i = 0; i < NTYPES; i++)
        Py_VISIT(*type_slot(st, i));
    Py_VISIT(st->error);
    Py_VISIT(st->update_wrapper);
    Py_VISIT(st->shape_name);
    Py_VISIT(st->on_new_profiler);
    return 0;
}

static int module_clear(PyObject *module) {
    module_state *st = sw_py_state_of_module(module);
    for (size_t i = 0; i < NTYPES; i++)
        Py_CLEAR(*type_slot(st, i));
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

/* The definition lives in _module_def.c (the type files find the state by it); what the
 * module runs is this file's, filled in before Python sees the definition. */
PyMODINIT_FUNC PyInit__stepwatch(void) {
    sw_py_module_def.m_methods = module_methods;
    sw_py_module_def.m_slots = module_slots;
    sw_py_module_def.m_traverse = module_traverse;
    sw_py_module_def.m_clear = module_clear;
    sw_py_module_def.m_free = module_free;
    return PyModuleDef_Init(&sw_py_module_def);
}
