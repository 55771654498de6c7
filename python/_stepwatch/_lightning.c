/*
 * _lightning.c — spans started and stopped by name, in C (stepwatch._stepwatch.Spans).
 *
 * Lightning hands its profiler every span as two calls, start(name) and stop(name), with a
 * name it formats anew each time ("[Callback]X.on_train_batch_end"), about 20 of them per
 * training step before any callback of the user's. stepwatch.lightning makes a Spans' bound
 * start and stop its Profiler's own, so each is one C call: a lookup of the name in a table of
 * its own (a stop finds its span by the very name object its start got), a clock read,
 * sw_begin_at/sw_end_at. Nothing is allocated per call.
 *
 * A name is classified once, when first started, by the Python function given to the
 * constructor: classify(name) returns None for a name not to be timed, else a tuple
 * (category, role, phase): the category ("data", ..., None for the one its name says, False
 * for a name not timed that still has its role), and its role in the loop's structure:
 *   ROLE_NONE  (0)  a span, nothing more;
 *   ROLE_STEP  (1)  its start begins a step in phase `phase` (Lightning's *_next: a step
 *                   begins with its data wait); an open step ends first, and the phase
 *                   changes when it differs;
 *   ROLE_CLOSE (2)  its start ends the open step and its phase (the work between phases:
 *                   on_validation_start, on_train_epoch_end, ...);
 *   ROLE_EPOCH (3)  its span is an epoch (run_training_epoch): the phase "epoch" opens before
 *                   it and closes after it, ending any step and phase left open inside.
 * A classify that raises is reported as unraisable and the name is timed as a plain span:
 * start and stop never raise on the loop's account.
 *
 * Each name keeps the durations of its last `keep` calls (Lightning's recorded_durations),
 * in a ring allocated with the name: memory grows with the names, never with the calls. A stop without an open span of its name, and a start of a name already open, are
 * counted in .unbalanced (Lightning's SimpleProfiler raises ValueError), never raised; the
 * second start still opens a nested span.
 */
#include "_stepwatch.h"

#include <structmember.h>
#include <stdlib.h>

enum { ROLE_NONE = 0, ROLE_STEP = 1, ROLE_CLOSE = 2, ROLE_EPOCH = 3 };

#define OPEN_MAX 64 /* open spans remembered for the stop's lookup (deeper ones: the table) */

typedef struct {
    PyObject *name; /* the first object seen with this text (a reference) */
    uint64_t hash;  /* name_hash of it */
    sw_id id;
    int skip; /* not timed (classify gave None) */
    int role;
    sw_phase phase;    /* ROLE_STEP: the phase of its steps */
    uint32_t open;     /* spans begun and not yet ended */
    uint64_t start_ns; /* the latest begin */
    uint64_t *kept;    /* the last `keep` durations (ns), a ring; next is the oldest */
    Py_ssize_t next;
    uint64_t stops; /* durations recorded; min(stops, keep) are kept */
} entry;

typedef struct {
    PyObject_HEAD ProfilerObject *owner;
    PyObject *classify;
    entry *entries; /* in the order first seen */
    Py_ssize_t n, cap;
    Py_ssize_t *slots; /* open addressing: entry index + 1, 0 = empty; load <= 1/2 */
    size_t mask;
    Py_ssize_t keep;
    unsigned long long unbalanced;
    /* The open spans, innermost last: the name object each start got (a reference) and its
     * entry. Lightning stops a span with the very object it started it with (profile()
     * holds it), so a stop is found by identity, without hashing the name again. */
    PyObject *open_name[OPEN_MAX];
    Py_ssize_t open_entry[OPEN_MAX];
    int depth;
    /* The loop's structure (the training thread; the GIL orders the calls). */
    int step_open;
    sw_phase phase; /* the open step's phase, SW_PHASE_NONE when none is open */
    uint32_t epochs_open;
    PyObject *shape_name;
    PyTypeObject *scope_type; /* SpanScope, what profile() returns */
    sw_id copy;               /* h2d_copy (SW_ID_NONE until the first batch) */
    char tapped;  /* batch() records only while the adapter taps a run (a partial of it left
                     under another tool's wrapper calls through once untapped) */
    int in_batch; /* a batch() runs: one nested in it (a partial stacked on a partial left
                     under another wrapper) only calls through */
} SpansObject;

/* ------------------------------------------------------------------------------------------
 * Names: classified once, then found in a table of their own
 *
 * Lightning formats each name anew, so every lookup hashes a new string: the table hashes a
 * few words of the text (name_hash), several times cheaper than the SipHash of a str's own
 * hash over all of it, then compares the text.
 * ---------------------------------------------------------------------------------------- */

/* 8 bytes of data at `at` (fewer at the end, zero-padded). */
static uint64_t word_at(const unsigned char *data, size_t n, size_t at) {
    uint64_t w = 0;
    memcpy(&w, data + at, n - at < 8 ? n - at : 8);
    return w;
}

/* The hash of a str's text (its kind and code units): its length and three 8-byte words,
 * the start, the middle and the end (all of a text of up to 24 bytes), where Lightning's
 * names differ, each times its own odd constant so that the multiplies run side by side.
 * Texts that share those words probe further and are told apart by comparing them whole. */
static uint64_t name_hash(PyObject *name) {
    const unsigned char *data = PyUnicode_DATA(name);
    size_t n = (size_t)PyUnicode_GET_LENGTH(name) * PyUnicode_KIND(name);
    size_t mid = n > 24 ? n / 2 - 4 : 8, end = n > 24 ? n - 8 : 16;
    uint64_t h = ((uint64_t)n << 3 | (uint64_t)PyUnicode_KIND(name)) ^
                 word_at(data, n, 0) * 0x9e3779b97f4a7c15ull ^
                 (n > 8 ? word_at(data, n, mid) * 0xc2b2ae3d27d4eb4full : 0) ^
                 (n > 16 ? word_at(data, n, end) * 0x165667b19e3779f9ull : 0);
    h = (h ^ (h >> 32)) * 0xd6e8feb86659fd93ull;
    return h ^ (h >> 29);
}

static int same_text(PyObject *a, PyObject *b) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    return a == b ||
           (n == PyUnicode_GET_LENGTH(b) && PyUnicode_KIND(a) == PyUnicode_KIND(b) &&
            memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0);
}

/* The slot where name is, or the empty one where it would go. */
static Py_ssize_t *slot_of(SpansObject *self, PyObject *name, uint64_t hash) {
    for (size_t i = (size_t)hash & self->mask;; i = (i + 1) & self->mask) {
        Py_ssize_t *slot = &self->slots[i];
        if (*slot == 0)
            return slot;
        const entry *e = &self->entries[*slot - 1];
        if (e->hash == hash && same_text(e->name, name))
            return slot;
    }
}

/* Make room for one more name: double the slots when they would be over half full. */
static int table_reserve(SpansObject *self) {
    if ((size_t)(self->n + 1) * 2 <= self->mask + 1)
        return 0;
    size_t size = self->slots ? 2 * (self->mask + 1) : 128;
    Py_ssize_t *slots = calloc(size, sizeof *slots);
    if (slots == NULL)
        return -1;
    free(self->slots);
    self->slots = slots;
    self->mask = size - 1;
    for (Py_ssize_t k = 0; k < self->n; k++)
        *slot_of(self, self->entries[k].name, self->entries[k].hash) = k + 1;
    return 0;
}

/* The id of the name's action, interned with its category (cat NULL/None: from the name). A
 * name that already has another category keeps it. Past a full table: SW_OTHER_ACTIONS's id. */
static sw_id intern_action(sw_profiler *p, const char *utf8, PyObject *cat) {
    if (cat != NULL && cat != Py_None && PyUnicode_Check(cat)) {
        const char *want = PyUnicode_AsUTF8(cat);
        for (int c = 0; want != NULL && c < SW_CAT_COUNT; c++) {
            if (strcmp(want, sw_category_name((sw_category)c)) == 0) {
                sw_id id = sw_action_with_category(p, utf8, (sw_category)c);
                if (id != SW_ID_NONE)
                    return id;
            }
        }
        PyErr_Clear();
    }
    return sw_action(p, utf8);
}

/* Fill e from classify(name). Never raises: a failing classify leaves a plain span. */
static void classify_name(SpansObject *self, sw_profiler *p, PyObject *name, entry *e) {
    const char *utf8 = PyUnicode_AsUTF8(name);
    if (utf8 == NULL) {
        PyErr_Clear();
        e->skip = 1;
        return;
    }
    PyObject *how = self->classify ? PyObject_CallOneArg(self->classify, name)
                                   : Py_NewRef(Py_False);
    PyObject *cat = NULL;
    if (how == NULL) {
        PyErr_WriteUnraisable(self->classify);
    } else if (how == Py_None) {
        e->skip = 1;
    } else if (PyTuple_Check(how) && PyTuple_GET_SIZE(how) == 3) {
        cat = PyTuple_GET_ITEM(how, 0);
        e->skip = cat == Py_False;
        long role = PyLong_AsLong(PyTuple_GET_ITEM(how, 1));
        PyObject *phase = PyTuple_GET_ITEM(how, 2);
        const char *phase_name = PyUnicode_Check(phase) ? PyUnicode_AsUTF8(phase) : NULL;
        if (role == ROLE_STEP && phase_name != NULL)
            e->phase = sw_phase_id(p, phase_name);
        e->role = role >= ROLE_NONE && role <= ROLE_EPOCH &&
                          (role != ROLE_STEP || e->phase != SW_PHASE_NONE)
                      ? (int)role
                      : ROLE_NONE;
        PyErr_Clear();
    }
    if (!e->skip)
        e->id = intern_action(p, utf8, cat);
    Py_XDECREF(how);
}

/* The entry of name, or NULL when there is none yet (create 0) or it cannot be made. */
static entry *find(SpansObject *self, PyObject *name, sw_profiler *p, int create) {
    if (!PyUnicode_Check(name))
        return NULL;
    uint64_t hash = name_hash(name);
    if (self->slots != NULL) {
        Py_ssize_t *slot = slot_of(self, name, hash);
        if (*slot != 0)
            return &self->entries[*slot - 1];
    }
    if (!create || table_reserve(self) < 0)
        return NULL;
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? 2 * self->cap : 64;
        entry *grown = realloc(self->entries, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        self->entries = grown;
        self->cap = cap;
    }
    entry *e = &self->entries[self->n];
    memset(e, 0, sizeof *e);
    e->phase = SW_PHASE_NONE;
    classify_name(self, p, name, e);
    if (!e->skip && self->keep > 0 &&
        (e->kept = calloc((size_t)self->keep, sizeof *e->kept)) == NULL)
        return NULL;
    e->name = Py_NewRef(name);
    e->hash = hash;
    *slot_of(self, name, hash) = ++self->n;
    return e;
}

static void keep_duration(SpansObject *self, entry *e, uint64_t ns) {
    if (e->kept != NULL) {
        e->kept[e->next] = ns;
        if (++e->next == self->keep)
            e->next = 0;
    }
    e->stops++;
}

/* ------------------------------------------------------------------------------------------
 * The loop's structure
 * ---------------------------------------------------------------------------------------- */

static void close_step(SpansObject *self, sw_profiler *p) {
    if (self->step_open) {
        sw_py_step_end(self->owner, 0);
        self->step_open = 0;
    }
    if (self->phase != SW_PHASE_NONE) {
        sw_phase_end(p, self->phase);
        self->phase = SW_PHASE_NONE;
    }
}

static void structure_start(SpansObject *self, sw_profiler *p, const entry *e) {
    switch (e->role) {
    case ROLE_STEP:
        if (self->step_open) {
            sw_py_step_end(self->owner, 0);
            self->step_open = 0;
        }
        if (self->phase != e->phase) {
            if (self->phase != SW_PHASE_NONE)
                sw_phase_end(p, self->phase);
            sw_phase_begin(p, e->phase);
            self->phase = e->phase;
        }
        sw_step_begin(p, 0);
        self->step_open = 1;
        break;
    case ROLE_CLOSE:
        close_step(self, p);
        break;
    case ROLE_EPOCH:
        close_step(self, p);
        sw_phase_begin(p, SW_PHASE_EPOCH);
        self->epochs_open++;
        break;
    }
}

/* ------------------------------------------------------------------------------------------
 * start and stop: the hot path
 * ---------------------------------------------------------------------------------------- */

/* The open span that a stop of name ends: by identity with the innermost start's name, else
 * by the name's entry; it leaves the open list. NULL when name has no entry. */
static entry *pop_open(SpansObject *self, PyObject *name, sw_profiler *p) {
    if (self->depth > 0 && self->open_name[self->depth - 1] == name) {
        self->depth--;
        Py_DECREF(name);
        return &self->entries[self->open_entry[self->depth]];
    }
    entry *e = find(self, name, p, 0);
    if (e == NULL)
        return NULL;
    Py_ssize_t index = e - self->entries;
    for (int k = self->depth - 1; k >= 0; k--) {
        if (self->open_entry[k] == index) {
            Py_DECREF(self->open_name[k]);
            memmove(&self->open_name[k], &self->open_name[k + 1],
                    (size_t)(self->depth - 1 - k) * sizeof self->open_name[0]);
            memmove(&self->open_entry[k], &self->open_entry[k + 1],
                    (size_t)(self->depth - 1 - k) * sizeof self->open_entry[0]);
            self->depth--;
            break;
        }
    }
    return e;
}

static void forget_open(SpansObject *self) {
    while (self->depth > 0)
        Py_DECREF(self->open_name[--self->depth]);
}

static void span_start(SpansObject *self, PyObject *name, uint64_t at) {
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    entry *e = find(self, name, p, 1);
    if (e == NULL)
        return;
    if (self->depth < OPEN_MAX) {
        self->open_name[self->depth] = Py_NewRef(name);
        self->open_entry[self->depth++] = e - self->entries;
    }
    if (e->role != ROLE_NONE)
        structure_start(self, p, e);
    if (e->skip)
        return;
    if (e->open)
        self->unbalanced++;
    e->open++;
    e->start_ns = at ? at : sw_now_ns();
    sw_begin_at(p, e->id, e->start_ns);
}

/* start(name, *ignored) and stop(name, *ignored): the arguments after the name are ignored
 * (a caller may hand them hook arguments). */
static PyObject *Spans_start(SpansObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs >= 1)
        span_start(self, args[0], 0);
    Py_RETURN_NONE;
}

static void span_stop(SpansObject *self, PyObject *name, uint64_t now) {
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    entry *e = pop_open(self, name, p);
    if (e != NULL && e->skip)
        return;
    if (e == NULL || e->open == 0) {
        self->unbalanced++;
        return;
    }
    e->open--;
    if (e->role == ROLE_EPOCH)
        close_step(self, p); /* the last step and phase nest inside the epoch's span */
    sw_end_at(p, e->id, now);
    keep_duration(self, e, now > e->start_ns ? now - e->start_ns : 0);
    if (e->role == ROLE_EPOCH && self->epochs_open > 0) {
        sw_phase_end(p, SW_PHASE_EPOCH);
        self->epochs_open--;
    }
}

static PyObject *Spans_stop(SpansObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t now = sw_now_ns();
    if (nargs >= 1)
        span_stop(self, args[0], now);
    Py_RETURN_NONE;
}

/* profile(name): Lightning's Profiler.profile(name), the context manager every hook's call
 * runs in (`with trainer.profiler.profile("[Callback]X.on_train_batch_end"): ...`), in C:
 * a Scope holding the name, whose __enter__ starts the span and returns the name (as
 * Lightning's yields it) and whose __exit__ stops it, also when the block raises (the
 * exception passes through). Lightning's own is a generator-based contextlib context manager,
 * about 1,000 instructions per use even in its PassThroughProfiler; a Scope is one small
 * allocation and two C calls. */
typedef struct {
    PyObject_HEAD SpansObject *spans;
    PyObject *name;
} ScopeObject;

static PyObject *Spans_profile(SpansObject *self, PyObject *name) {
    ScopeObject *scope = PyObject_New(ScopeObject, self->scope_type);
    if (scope == NULL)
        return NULL;
    scope->spans = (SpansObject *)Py_NewRef(self);
    scope->name = Py_NewRef(name);
    return (PyObject *)scope;
}

static PyObject *Scope_enter(ScopeObject *self, PyObject *unused) {
    span_start(self->spans, self->name, 0);
    return Py_NewRef(self->name);
}

static PyObject *Scope_exit(ScopeObject *self, PyObject *const *args, Py_ssize_t nargs) {
    span_stop(self->spans, self->name, sw_now_ns());
    Py_RETURN_FALSE;
}

/* A Scope holds its Spans and a str and nothing holds a Scope but its caller: it can close
 * no cycle, so it is not tracked by the garbage collector (a cheaper allocation). */
static void Scope_dealloc(ScopeObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_DECREF(self->spans);
    Py_DECREF(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Scope_methods[] = {
    {"__enter__", (PyCFunction)Scope_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Start the span; returns its name."},
    {"__exit__", (PyCFunction)(void (*)(void))Scope_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\n"
     "Stop the span; the exception, if any, passes through."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Scope_slots[] = {
    {Py_tp_doc,
     "A span of Spans.profile(name) as a context manager (python/_stepwatch/_lightning.c)."},
    {Py_tp_methods, Scope_methods},
    {Py_tp_dealloc, Scope_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_scope_spec = {
    .name = "stepwatch.SpanScope",
    .basicsize = sizeof(ScopeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Scope_slots,
};

/* timed(name, function, *args, **kwargs): function(*args, **kwargs) as a span of name, also
 * when it raises (the exception passes through untouched). functools.partial(spans.timed,
 * name, module.forward) set as a loss module's forward times it with no torch hook (a hook
 * sends every call of that module down torch's slow path, about 2 us). */
static PyObject *Spans_timed(SpansObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "timed(name, function, *args, **kwargs)");
        return NULL;
    }
    span_start(self, args[0], 0);
    PyObject *result = PyObject_Vectorcall(args[1], args + 2, (size_t)(nargs - 2), kwnames);
    uint64_t now = sw_now_ns();
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    span_stop(self, args[0], now);
    sw_py_put_back(&aside);
    return result;
}

/* batch(function, batch, *args, **kwargs): function(batch, *args, **kwargs), after giving the
 * open step the batch's size, timed as the batch's copy to the device (h2d_copy, category
 * data). functools.partial(spans.batch, strategy.batch_to_device) takes the place of
 * Lightning's Strategy.batch_to_device, which every loop calls with each batch: it runs the
 * module's transfer_batch_to_device hooks and moves the batch (the batch's own .to too). */
static PyObject *Spans_batch(SpansObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "batch(function, batch, *args, **kwargs)");
        return NULL;
    }
    sw_profiler *p = self->owner->p;
    if (p == NULL || !self->tapped || self->in_batch)
        return PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), kwnames);
    if (self->step_open)
        sw_step_set_batch_size(p, sw_py_batch_size(args[1], self->shape_name));
    if (self->copy == SW_ID_NONE)
        self->copy = sw_action(p, "h2d_copy");
    sw_begin(p, self->copy);
    self->in_batch = 1;
    PyObject *result = PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), kwnames);
    self->in_batch = 0;
    sw_py_aside aside = {0};
    if (result == NULL) /* the end tells the watchers, which may run Python */
        sw_py_set_aside(&aside);
    if (self->owner->p == p)
        sw_end(p, self->copy);
    if (result == NULL)
        sw_py_put_back(&aside);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * Off the hot path
 * ---------------------------------------------------------------------------------------- */

static uint64_t parse_ns(PyObject *obj, int *failed) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    *failed |= v == (unsigned long long)-1 && PyErr_Occurred();
    return v;
}

/* start_at(name, t): start with a time read earlier (sw_now_ns clock), for a span begun
 * before the Spans existed. */
static PyObject *Spans_start_at(SpansObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int failed = 0;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "start_at(name, t_ns)");
        return NULL;
    }
    uint64_t at = parse_ns(args[1], &failed);
    if (failed)
        return NULL;
    span_start(self, args[0], at ? at : 1);
    Py_RETURN_NONE;
}

/* record(name, start_ns, end_ns): a whole span timed earlier (before the Spans existed). */
static PyObject *Spans_record(SpansObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int failed = 0;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(name, start_ns, end_ns)");
        return NULL;
    }
    uint64_t start = parse_ns(args[1], &failed), end = parse_ns(args[2], &failed);
    if (failed)
        return NULL;
    sw_profiler *p = self->owner->p;
    entry *e = p != NULL ? find(self, args[0], p, 1) : NULL;
    if (e != NULL && !e->skip && end >= start) {
        sw_record(p, e->id, start, end);
        keep_duration(self, e, end - start);
    }
    Py_RETURN_NONE;
}

/* close(): end the open step, its phase and any epoch left open (the run ended or raised). */
static PyObject *Spans_close(SpansObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL) {
        close_step(self, p);
        for (; self->epochs_open > 0; self->epochs_open--)
            sw_phase_end(p, SW_PHASE_EPOCH);
    }
    Py_RETURN_NONE;
}

/* durations(name) -> list: the kept durations of name in seconds, oldest first. */
static PyObject *Spans_durations(SpansObject *self, PyObject *name) {
    entry *e = find(self, name, NULL, 0);
    if (e == NULL) {
        PyErr_SetObject(PyExc_KeyError, name);
        return NULL;
    }
    Py_ssize_t keep = self->keep;
    Py_ssize_t kept = e->stops < (uint64_t)keep ? (Py_ssize_t)e->stops : keep;
    Py_ssize_t first = kept < keep ? 0 : e->next; /* the oldest */
    PyObject *out = PyList_New(kept);
    for (Py_ssize_t k = 0; out != NULL && k < kept; k++) {
        PyObject *v = PyFloat_FromDouble((double)e->kept[(first + k) % keep] / 1e9);
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, v);
    }
    return out;
}

/* names() -> list: the names with at least one duration, in the order first seen. */
static PyObject *Spans_names(SpansObject *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    for (Py_ssize_t k = 0; out != NULL && k < self->n; k++) {
        const entry *e = &self->entries[k];
        if (e->stops > 0 && e->kept != NULL && PyList_Append(out, e->name) < 0)
            Py_CLEAR(out);
    }
    return out;
}

/* ------------------------------------------------------------------------------------------
 * The type
 * ---------------------------------------------------------------------------------------- */

static PyObject *Spans_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler", "classify", "keep", NULL};
    PyObject *profiler, *classify;
    Py_ssize_t keep = 1000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|n:Spans", keywords, &profiler, &classify,
                                     &keep))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "Spans: profiler must be a stepwatch.Profiler");
        return NULL;
    }
    if (!PyCallable_Check(classify)) {
        PyErr_SetString(PyExc_TypeError, "Spans: classify must be callable");
        return NULL;
    }
    if (keep < 0 || (size_t)keep > SIZE_MAX / sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "Spans: keep must be >= 0");
        return NULL;
    }
    SpansObject *self = (SpansObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->shape_name = Py_NewRef(st->shape_name);
    self->scope_type = (PyTypeObject *)Py_NewRef(st->scope_type);
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->classify = Py_NewRef(classify);
    self->keep = keep;
    self->phase = SW_PHASE_NONE;
    self->copy = SW_ID_NONE;
    return (PyObject *)self;
}

static int Spans_traverse(SpansObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    for (int k = 0; k < self->depth; k++)
        Py_VISIT(self->open_name[k]);
    Py_VISIT(self->owner);
    Py_VISIT(self->classify);
    Py_VISIT(self->scope_type);
    return 0;
}

/* classify is the one reference that can close a cycle (a bound method of the object that
 * holds this Spans); the owner stays until dealloc, so a call never finds it gone. */
static int Spans_clear(SpansObject *self) {
    Py_CLEAR(self->classify);
    return 0;
}

static void Spans_dealloc(SpansObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    forget_open(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->classify);
    Py_CLEAR(self->shape_name);
    Py_CLEAR(self->scope_type);
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_DECREF(self->entries[i].name);
        free(self->entries[i].kept);
    }
    free(self->entries);
    free(self->slots);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Spans_methods[] = {
    {"start", (PyCFunction)(void (*)(void))Spans_start, METH_FASTCALL,
     "start($self, name, /, *ignored)\n--\n\n"
     "Begin a span of name."},
    {"stop", (PyCFunction)(void (*)(void))Spans_stop, METH_FASTCALL,
     "stop($self, name, /, *ignored)\n--\n\n"
     "End the open span of name."},
    {"profile", (PyCFunction)Spans_profile, METH_O,
     "profile($self, name, /)\n--\n\n"
     "A context manager timing its block as a span of name (Lightning's Profiler.profile)."},
    {"batch", (PyCFunction)(void (*)(void))Spans_batch, METH_FASTCALL | METH_KEYWORDS,
     "batch($self, /, function, batch, *args, **kwargs)\n--\n\n"
     "Function(batch, *args, **kwargs), after giving the open step the batch's size."},
    {"timed", (PyCFunction)(void (*)(void))Spans_timed, METH_FASTCALL | METH_KEYWORDS,
     "timed($self, /, name, function, *args, **kwargs)\n--\n\n"
     "Function(*args, **kwargs) as a span of name."},
    {"start_at", (PyCFunction)(void (*)(void))Spans_start_at, METH_FASTCALL,
     "start_at($self, name, t_ns, /)\n--\n\n"
     "Start(name) at a time read earlier (stepwatch.now_ns)."},
    {"record", (PyCFunction)(void (*)(void))Spans_record, METH_FASTCALL,
     "record($self, name, start_ns, end_ns, /)\n--\n\n"
     "A whole span of name timed earlier."},
    {"close", (PyCFunction)Spans_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "End the open step, its phase and an epoch left open."},
    {"durations", (PyCFunction)Spans_durations, METH_O,
     "durations($self, name, /)\n--\n\n"
     "-> list of the last `keep` durations of name in seconds, oldest first."},
    {"names", (PyCFunction)Spans_names, METH_NOARGS,
     "names($self, /)\n--\n\n"
     "-> the names with durations, in the order first seen."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Spans_members[] = {
    {"unbalanced", T_ULONGLONG, offsetof(SpansObject, unbalanced), READONLY,
     "Stops without an open span of their name, and starts of a name already open."},
    {"keep", T_PYSSIZET, offsetof(SpansObject, keep), READONLY, "Durations kept per name."},
    {"step_open", T_INT, offsetof(SpansObject, step_open), READONLY,
     "Nonzero while a step is open."},
    {"tapped", T_BOOL, offsetof(SpansObject, tapped), 0,
     "batch() records while True (the adapter taps a run); else it only calls through."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Spans_slots[] = {
    {Py_tp_doc, "Spans(profiler, classify, keep=1000)\n--\n\n"
                "Spans started and stopped by name (Lightning's Profiler.start/stop) in C; "
                "see python/_stepwatch/_lightning.c."},
    {Py_tp_new, Spans_new},
    {Py_tp_methods, Spans_methods},
    {Py_tp_members, Spans_members},
    {Py_tp_traverse, Spans_traverse},
    {Py_tp_clear, Spans_clear},
    {Py_tp_dealloc, Spans_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_spans_spec = {
    .name = "stepwatch.Spans",
    .basicsize = sizeof(SpansObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Spans_slots,
};
