/*
 * _snapshot.c — Snapshot: a consistent copy of everything measured (a sw_snapshot, from
 * Profiler.snapshot() or load()), as report text, plain records (one dict per row, ready for
 * pandas.DataFrame) and run metadata.
 */
#include "_stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD sw_snapshot *s;
} SnapshotObject;

PyObject *sw_py_snapshot_wrap(module_state *st, sw_snapshot *s) {
    SnapshotObject *obj = PyObject_New(SnapshotObject, st->snapshot_type);
    if (!obj) {
        sw_snapshot_free(s);
        return NULL;
    }
    obj->s = s;
    return (PyObject *)obj;
}

static void Snapshot_dealloc(SnapshotObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    sw_snapshot_free(self->s);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

const sw_snapshot *sw_py_snapshot_of(module_state *st, PyObject *obj) {
    return Py_IS_TYPE(obj, st->snapshot_type) ? ((SnapshotObject *)obj)->s : NULL;
}

int sw_py_parse_format(const char *name, sw_format *out) {
    int rc = sw_format_parse(name, out);
    if (rc < 0) {
        char list[128] = ""; /* the library's names (its writer table is the one list) */
        for (sw_format f = 0; sw_format_name(f) != NULL; f++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", sw_format_name(f));
        }
        PyErr_Format(PyExc_ValueError, "unknown report format '%s' (%s)", name, list);
        return -1;
    }
    return 0;
}

typedef struct {
    const sw_snapshot *s;
    sw_format fmt;
    const sw_write_options *opts;
} report_job;

static int write_report(void *ctx, FILE *f) {
    report_job *job = ctx;
    return sw_snapshot_write_ex(job->s, job->fmt, f, job->opts);
}

/* The report text of s in fmt, written by the C report writers into a memory FILE. */
static PyObject *snapshot_report_text(module_state *st, const sw_snapshot *s, const char *fmt_name,
                                      const sw_write_options *opts) {
    report_job job = {.s = s, .opts = opts};
    if (sw_py_parse_format(fmt_name, &job.fmt) < 0)
        return NULL;
    return sw_py_text_of(st, write_report, &job, "report");
}

static PyObject *row_record(const sw_snapshot *s, const sw_row *r) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const sw_stats *st = &r->stats;
    double pct = s->wall_ns ? 100.0 * (double)st->total_ns / (double)s->wall_ns : 0.0;
    uint64_t p50 = sw_stats_quantile(st, &r->hist, 0.50),
             p90 = sw_stats_quantile(st, &r->hist, 0.90),
             p99 = sw_stats_quantile(st, &r->hist, 0.99);
    int ok =
        sw_py_dict_put(d, "action", sw_py_str_or_none(r->action_name)) == 0 &&
        sw_py_dict_put(d, "phase", sw_py_str_or_none(r->phase_name)) == 0 &&
        sw_py_dict_put(d, "category", sw_py_str_or_none(sw_category_name(r->category))) == 0 &&
        sw_py_dict_put(d, "count", PyLong_FromUnsignedLongLong(st->count)) == 0 &&
        sw_py_dict_put(d, "total_ns", PyLong_FromUnsignedLongLong(st->total_ns)) == 0 &&
        sw_py_dict_put(d, "self_ns", PyLong_FromUnsignedLongLong(st->self_ns)) == 0 &&
        sw_py_dict_put(d, "mean_ns", PyFloat_FromDouble(st->count ? st->mean_ns : 0.0)) == 0 &&
        sw_py_dict_put(d, "std_ns", PyFloat_FromDouble(sw_stats_stddev(st))) == 0 &&
        sw_py_dict_put(d, "min_ns", PyLong_FromUnsignedLongLong(st->count ? st->min_ns : 0)) == 0 &&
        sw_py_dict_put(d, "min_step", PyLong_FromLongLong(st->min_step)) == 0 &&
        sw_py_dict_put(d, "max_ns", PyLong_FromUnsignedLongLong(st->max_ns)) == 0 &&
        sw_py_dict_put(d, "max_step", PyLong_FromLongLong(st->max_step)) == 0 &&
        sw_py_dict_put(d, "p50_ns", PyLong_FromUnsignedLongLong(p50)) == 0 &&
        sw_py_dict_put(d, "p90_ns", PyLong_FromUnsignedLongLong(p90)) == 0 &&
        sw_py_dict_put(d, "p99_ns", PyLong_FromUnsignedLongLong(p99)) == 0 &&
        sw_py_dict_put(d, "samples", PyLong_FromUnsignedLongLong(st->samples)) == 0 &&
        sw_py_dict_put(d, "samples_per_s", PyFloat_FromDouble(sw_stats_samples_per_s(st))) == 0 &&
        sw_py_dict_put(d, "percent", PyFloat_FromDouble(pct)) == 0 &&
        sw_py_dict_put(d, "warmup_count", PyLong_FromUnsignedLongLong(r->warmup.count)) == 0 &&
        sw_py_dict_put(d, "warmup_total_ns", PyLong_FromUnsignedLongLong(r->warmup.total_ns)) == 0;
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *snapshot_records(const sw_snapshot *s, const char *phase) {
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (phase && (!r->phase_name || strcmp(phase, r->phase_name) != 0))
            continue;
        PyObject *d = row_record(s, r);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *misuse_dict(const sw_misuse *m) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
#define SW__PUT_MISUSE(field)                                                   \
    if (sw_py_dict_put(d, #field, PyLong_FromUnsignedLongLong(m->field)) < 0) { \
        Py_DECREF(d);                                                           \
        return NULL;                                                            \
    }
    SW__PUT_MISUSE(end_without_begin)
    SW__PUT_MISUSE(mismatched_end)
    SW__PUT_MISUSE(depth_overflow)
    SW__PUT_MISUSE(bad_id)
    SW__PUT_MISUSE(phase_mismatch)
    SW__PUT_MISUSE(step_overlap)
    SW__PUT_MISUSE(bad_record)
    SW__PUT_MISUSE(open_at_snapshot)
#undef SW__PUT_MISUSE
    return d;
}

/* sw_memory_summary as a dict, bytes; a part not measured (no step with it) is None. */
static PyObject *memory_dict(const sw_memory_summary *m) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const struct {
        const char *key;
        uint64_t value, steps;
    } items[] = {{"rss_steps", m->rss_steps, 1},
                 {"rss_max", m->rss_max, m->rss_steps},
                 {"rss_last", m->rss_last, m->rss_steps},
                 {"allocator_steps", m->allocator_steps, 1},
                 {"peak_allocated_max", m->peak_allocated_max, m->allocator_steps},
                 {"allocated_last", m->allocated_last, m->allocator_steps},
                 {"reserved_max", m->reserved_max, m->allocator_steps},
                 {"reserved_last", m->reserved_last, m->allocator_steps}};
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
        PyObject *v = items[i].steps ? PyLong_FromUnsignedLongLong(items[i].value)
                                     : Py_NewRef(Py_None);
        if (sw_py_dict_put(d, items[i].key, v) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

static PyObject *counters_list(const sw_snapshot *s) {
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        PyObject *d = Py_BuildValue("{s:N,s:K,s:d,s:d,s:d,s:d}", "name", sw_py_str_or_none(c->name),
                                    "count", (unsigned long long)c->count, "last", c->last, "min",
                                    c->min, "max", c->max, "mean", c->mean);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *notes_dict(const sw_snapshot *s) {
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < s->nnotes; i++)
        if (sw_py_dict_put(d, s->notes[i].key, sw_py_str_or_none(s->notes[i].value)) < 0)
            Py_CLEAR(d);
    return d;
}

static PyObject *snapshot_info(const sw_snapshot *s) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    int ok = sw_py_dict_put(d, "name", sw_py_str_or_none(s->name)) == 0 &&
             sw_py_dict_put(d, "host", sw_py_str_or_none(s->host)) == 0 &&
             sw_py_dict_put(d, "command", sw_py_str_or_none(s->command)) == 0 &&
             sw_py_dict_put(d, "pid", PyLong_FromLongLong(s->pid)) == 0 &&
             sw_py_dict_put(d, "rank", PyLong_FromLong(s->rank)) == 0 &&
             sw_py_dict_put(d, "world_size", PyLong_FromLong(s->world_size)) == 0 &&
             sw_py_dict_put(d, "start_unix_ns", PyLong_FromUnsignedLongLong(s->start_unix_ns)) ==
                 0 &&
             sw_py_dict_put(d, "elapsed_ns", PyLong_FromUnsignedLongLong(s->elapsed_ns)) == 0 &&
             sw_py_dict_put(d, "wall_ns", PyLong_FromUnsignedLongLong(s->wall_ns)) == 0 &&
             sw_py_dict_put(d, "steps", PyLong_FromUnsignedLongLong(s->steps)) == 0 &&
             sw_py_dict_put(d, "warmup_steps", PyLong_FromUnsignedLong(s->warmup_steps)) == 0 &&
             sw_py_dict_put(d, "threads", PyLong_FromUnsignedLongLong(s->threads)) == 0 &&
             sw_py_dict_put(d, "dropped_events", PyLong_FromUnsignedLongLong(s->dropped_events)) ==
                 0 &&
             sw_py_dict_put(d, "misuse", misuse_dict(&s->misuse)) == 0 &&
             sw_py_dict_put(d, "memory", memory_dict(&s->memory)) == 0 &&
             sw_py_dict_put(d, "counters", counters_list(s)) == 0 &&
             sw_py_dict_put(d, "notes", notes_dict(s)) == 0;
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyObject *sw_py_snapshot_report(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"format", "width", "full_names", "brief", NULL};
    const char *fmt = "table";
    PyObject *width = Py_None;
    int full_names = 0, brief = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|s$Opp:report", kwlist, &fmt, &width,
                                     &full_names, &brief))
        return NULL;
    sw_write_options opts = {.size = sizeof opts, .full_names = full_names, .brief = brief};
    if (width != Py_None) {
        Py_ssize_t w = PyNumber_AsSsize_t(width, PyExc_OverflowError);
        if (w == -1 && PyErr_Occurred())
            return NULL;
        if (w < 1) {
            PyErr_Format(PyExc_ValueError, "report: width must be at least 1, not %zd", w);
            return NULL;
        }
        opts.width = (size_t)w;
    }
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    return st ? snapshot_report_text(st, ((SnapshotObject *)self)->s, fmt, &opts) : NULL;
}

PyObject *sw_py_snapshot_records(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"phase", NULL};
    const char *phase = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:records", kwlist, &phase))
        return NULL;
    return snapshot_records(((SnapshotObject *)self)->s, phase);
}

static PyObject *Snapshot_info(SnapshotObject *self, PyObject *unused) {
    return snapshot_info(self->s);
}

/* Jupyter's rich display of a snapshot: stepwatch.notebook.summary_html draws it. */
static PyObject *Snapshot_repr_html(SnapshotObject *self, PyObject *unused) {
    (void)unused;
    PyObject *module = PyImport_ImportModule("stepwatch.notebook");
    if (!module)
        return NULL;
    PyObject *html = PyObject_CallMethod(module, "summary_html", "O", (PyObject *)self);
    Py_DECREF(module);
    return html;
}

static PyMethodDef Snapshot_methods[] = {
    {"report", (PyCFunction)(void (*)(void))sw_py_snapshot_report, METH_VARARGS | METH_KEYWORDS,
     "report($self, /, format='table', *, width=None, full_names=False, brief=False)\n--\n\n"
     "-> str: format is one of stepwatch.FORMATS (or 'md'). width: columns the table may take\n"
     "(default: the terminal's); full_names: never shorten a name (for files); brief:\n"
     "Lightning's extended=False layout."},
    {"records", (PyCFunction)(void (*)(void))sw_py_snapshot_records, METH_VARARGS | METH_KEYWORDS,
     "records($self, /, phase=None)\n--\n\n"
     "-> list of dicts, one per (action, phase) row; phase 'all' is the roll-up "
     "over phases. pandas.DataFrame(records) loads it."},
    {"info", (PyCFunction)Snapshot_info, METH_NOARGS,
     "info($self, /)\n--\n\n"
     "-> dict: run metadata, steps, misuse counts, memory, counters, notes."},
    {"_repr_html_", (PyCFunction)Snapshot_repr_html, METH_NOARGS,
     "_repr_html_($self, /)\n--\n\n"
     "-> str: the at-a-glance bar and the top actions, for Jupyter (stepwatch.notebook)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Snapshot_slots[] = {
    {Py_tp_doc, "A consistent copy of everything measured (Profiler.snapshot(), load())."},
    {Py_tp_methods, Snapshot_methods},
    {Py_tp_dealloc, Snapshot_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_snapshot_spec = {
    .name = "stepwatch.Snapshot",
    .basicsize = sizeof(SnapshotObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Snapshot_slots,
};
