/*
 * _fastai.c — the per-batch marks of fastai's Learner, in C (stepwatch._stepwatch.FitMarks).
 *
 * fastai calls every callback on every event of every batch; stepwatch.fastai's callbacks
 * hand the events they time straight to a FitMarks' bound methods, so each mark is one C
 * call. A FitMarks keeps what fastxtend's Throughput and Simple profilers report, with
 * fastxtend's definitions, in fixed memory (no list per batch):
 *
 *   draw      before_draw -> before_batch         forward   before_batch -> after_pred
 *   batch     before_batch -> after_batch         loss      after_pred -> after_loss
 *   step      draw + batch                        backward  before_backward -> before_step
 *   opt_step  before_step -> after_step           zero_grad after_step -> after_batch (early)
 *
 * A batch's values are kept pending until its after_batch and then committed together, so a
 * batch that never finished (CancelTrain, CancelEpoch, an exception) leaves nothing behind.
 * The first `drop` committed batches of each phase (train, valid) are left out of the
 * statistics, as fastxtend's drop_first_batch does. Per action and phase: count, mean,
 * population std and total (sw_stats), and fastxtend's samples/s: the mean over batches of
 * bs/duration (for draw: bs/(draw+batch) - bs/batch, the rate the draw costs). Over every
 * batch, dropped ones included: the mean of bs/(draw+batch) (fastxtend's phase rows). The
 * last `rolling` training batches stay in a ring for the rolling samples/s fastxtend logs.
 *
 * With a stepwatch Profiler the marks also record into it: a step per batch from its
 * before_draw (with learn.xb's batch size), its draw as "data", then "forward", "loss",
 * "backward", "optimizer", "zero_grad". The step ends at the next before_draw or when the
 * phase ends, so the after_batch work of later callbacks is part of its step.
 *
 * Marks never raise on the loop's account and allocate nothing after construction.
 */
#include "_stepwatch.h"

#include <structmember.h>
#include <stdlib.h>
#include <string.h>

/* fastxtend's actions, in its report order. FX_FORWARD is "predict" in the valid phase. */
enum { FX_STEP, FX_DRAW, FX_BATCH, FX_FORWARD, FX_LOSS, FX_BACKWARD, FX_OPT, FX_ZERO, FX_N };
static const char *const fx_names[FX_N] = {"step", "draw",     "batch",    "forward",
                                           "loss", "backward", "opt_step", "zero_grad"};
/* The core's actions for the parts of a batch that have one (FX_STEP and FX_BATCH do not). */
enum { CORE_DATA, CORE_FORWARD, CORE_LOSS, CORE_BACKWARD, CORE_OPTIMIZER, CORE_ZERO, CORE_N };
static const char *const core_names[CORE_N] = {"data",     "forward",   "loss",
                                               "backward", "optimizer", "zero_grad"};

enum { PH_TRAIN, PH_VALID, PH_N };

typedef struct {
    uint64_t ns[FX_N];
    uint32_t bs;
} fx_batch;

typedef struct {
    sw_stats stats[FX_N];  /* durations of the batches kept (after the dropped ones) */
    double rate_sum[FX_N]; /* sum of the kept batches' samples/s */
    uint64_t rate_n[FX_N];
    uint64_t batches;    /* committed batches, dropped ones included */
    double all_rate_sum; /* bs/(draw+batch) summed over every committed batch */
    uint64_t all_rate_n;
} fx_phase;

typedef struct {
    PyObject_HEAD ProfilerObject *owner; /* NULL: fastxtend's statistics only */
    PyObject *learn;                     /* read for learn.xb's batch size */
    PyObject *xb_name, *shape_name;
    sw_id core[CORE_N];
    int drop;
    int phase; /* PH_TRAIN or PH_VALID */
    /* The batch in progress (the training thread's; the GIL orders the marks). */
    uint64_t t_draw, t_batch, t_loss, t_backward, t_opt, t_zero; /* 0: not begun */
    fx_batch pending;
    unsigned measured; /* bit per FX_* action measured in the pending batch */
    int step_open;     /* a core step is open */
    fx_phase phases[PH_N];
    /* The rolling window of training batches, and fastxtend's logging cadence. */
    fx_batch *ring;
    Py_ssize_t rolling, kept, next;
    long long log_iter; /* fastxtend's _iter: starts at -drop */
} FitMarksObject;

/* ------------------------------------------------------------------------------------------
 * The marks
 * ---------------------------------------------------------------------------------------- */

static sw_profiler *core_of(FitMarksObject *self) {
    return self->owner != NULL ? self->owner->p : NULL;
}

static void end_core_step(FitMarksObject *self) {
    sw_profiler *p = core_of(self);
    if (self->step_open && p != NULL)
        sw_py_step_end(self->owner, 0);
    self->step_open = 0;
}

/* Measure action fx from *start to now; record it as core action `core` (-1: none). */
static void measure(FitMarksObject *self, int fx, uint64_t *start, uint64_t now, int core) {
    if (*start == 0 || *start > now)
        return;
    self->pending.ns[fx] = now - *start;
    self->measured |= 1u << fx;
    sw_profiler *p = core_of(self);
    if (core >= 0 && p != NULL)
        sw_record(p, self->core[core], *start, now);
    *start = 0;
}

static void forget_batch(FitMarksObject *self) {
    self->t_draw = self->t_batch = self->t_loss = self->t_backward = self->t_opt = 0;
    self->t_zero = 0;
    self->measured = 0;
    memset(&self->pending, 0, sizeof self->pending);
}

static PyObject *FitMarks_before_draw(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns();
    end_core_step(self); /* the previous batch's step ends where this one's draw begins */
    forget_batch(self);
    self->t_draw = now;
    Py_RETURN_NONE;
}

static PyObject *FitMarks_before_batch(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns();
    uint32_t bs = 0;
    PyObject *xb = self->learn ? PyObject_GetAttr(self->learn, self->xb_name) : NULL;
    if (xb != NULL)
        bs = sw_py_batch_size(xb, self->shape_name);
    else
        PyErr_Clear();
    Py_XDECREF(xb);
    self->pending.bs = bs;
    uint64_t start = self->t_draw != 0 && self->t_draw <= now ? self->t_draw : now;
    sw_profiler *p = core_of(self);
    if (p != NULL) {
        if (self->step_open) /* no before_draw came: a loop that calls one_batch itself */
            sw_py_step_end(self->owner, 0);
        sw_step_begin_at(p, bs, start);
        self->step_open = 1;
    }
    measure(self, FX_DRAW, &self->t_draw, now, CORE_DATA);
    self->t_batch = now;
    Py_RETURN_NONE;
}

static PyObject *FitMarks_after_pred(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns(), start = self->t_batch;
    measure(self, FX_FORWARD, &start, now, CORE_FORWARD);
    self->t_loss = now;
    Py_RETURN_NONE;
}

static PyObject *FitMarks_after_loss(FitMarksObject *self, PyObject *unused) {
    measure(self, FX_LOSS, &self->t_loss, sw_now_ns(), CORE_LOSS);
    Py_RETURN_NONE;
}

static PyObject *FitMarks_before_backward(FitMarksObject *self, PyObject *unused) {
    self->t_backward = sw_now_ns();
    Py_RETURN_NONE;
}

static PyObject *FitMarks_before_step(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns();
    measure(self, FX_BACKWARD, &self->t_backward, now, CORE_BACKWARD);
    self->t_opt = now;
    Py_RETURN_NONE;
}

static PyObject *FitMarks_after_step(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns();
    measure(self, FX_OPT, &self->t_opt, now, CORE_OPTIMIZER);
    self->t_zero = now;
    Py_RETURN_NONE;
}

static PyObject *FitMarks_zero_grad_end(FitMarksObject *self, PyObject *unused) {
    measure(self, FX_ZERO, &self->t_zero, sw_now_ns(), CORE_ZERO);
    Py_RETURN_NONE;
}

static double rate(uint32_t bs, uint64_t ns) {
    return (double)bs * 1e9 / (double)ns;
}

/* Add the finished batch to its phase; for training batches also to the rolling window.
 * Returns 1 when fastxtend would log its rolling samples/s after this batch. */
static int commit(FitMarksObject *self) {
    fx_batch *b = &self->pending;
    fx_phase *ph = &self->phases[self->phase];
    b->ns[FX_STEP] = b->ns[FX_DRAW] + b->ns[FX_BATCH];
    self->measured |= 1u << FX_STEP;
    uint64_t db = b->ns[FX_STEP];
    if (b->bs > 0 && db > 0) {
        ph->all_rate_sum += rate(b->bs, db);
        ph->all_rate_n++;
    }
    if (ph->batches++ >= (uint64_t)self->drop) {
        for (int a = 0; a < FX_N; a++) {
            if (!(self->measured & (1u << a)))
                continue;
            sw_stats_add(&ph->stats[a], b->ns[a], b->ns[a], -1, b->bs);
            if (b->bs == 0 || a == FX_ZERO)
                continue; /* fastxtend shows no samples/s for zero_grad */
            if (a == FX_DRAW) {
                if (b->ns[FX_BATCH] == 0 || db == 0)
                    continue;
                ph->rate_sum[a] += rate(b->bs, db) - rate(b->bs, b->ns[FX_BATCH]);
            } else if (b->ns[a] > 0) {
                ph->rate_sum[a] += rate(b->bs, b->ns[a]);
            } else {
                continue;
            }
            ph->rate_n[a]++;
        }
    }
    if (self->phase != PH_TRAIN)
        return 0;
    self->ring[self->next] = *b;
    self->next = (self->next + 1) % self->rolling;
    if (self->kept < self->rolling)
        self->kept++;
    long long it = self->log_iter++;
    return it >= self->rolling && it % self->rolling == 0;
}

static PyObject *FitMarks_after_batch(FitMarksObject *self, PyObject *unused) {
    uint64_t now = sw_now_ns();
    if (self->t_batch == 0 || self->t_batch > now)
        Py_RETURN_NONE; /* no before_batch came */
    self->pending.ns[FX_BATCH] = now - self->t_batch;
    self->measured |= 1u << FX_BATCH;
    int log_due = commit(self);
    forget_batch(self);
    if (log_due)
        Py_RETURN_TRUE;
    Py_RETURN_NONE;
}

/* set_phase(training): a phase begins; what the previous one left open is let go. */
static PyObject *FitMarks_set_phase(FitMarksObject *self, PyObject *training) {
    int t = PyObject_IsTrue(training);
    if (t < 0)
        return NULL;
    end_core_step(self);
    forget_batch(self);
    self->phase = t ? PH_TRAIN : PH_VALID;
    Py_RETURN_NONE;
}

/* close(): the phase (or the fit) ended: end the core step, let an unfinished batch go. */
static PyObject *FitMarks_close(FitMarksObject *self, PyObject *unused) {
    end_core_step(self);
    forget_batch(self);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------
 * Reading the results
 * ---------------------------------------------------------------------------------------- */

/* {action: (count, mean_s, std_s, total_s, samples_per_s or None)} for phase ph. */
static PyObject *phase_dict(const fx_phase *ph) {
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int a = 0; a < FX_N; a++) {
        const sw_stats *s = &ph->stats[a];
        if (s->count == 0)
            continue;
        PyObject *r = ph->rate_n[a] ? PyFloat_FromDouble(ph->rate_sum[a] / (double)ph->rate_n[a])
                                    : Py_NewRef(Py_None);
        PyObject *row = r ? Py_BuildValue("(KdddN)", (unsigned long long)s->count, s->mean_ns / 1e9,
                                          sw_stats_pstddev(s) / 1e9, (double)s->total_ns / 1e9, r)
                          : NULL;
        if (sw_py_dict_put(d, fx_names[a], row) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* results(): {"train"|"valid": {"actions": {...}, "batches": n, "samples_per_s": mean bs/step
 * over every batch or None}}. */
static PyObject *FitMarks_results(FitMarksObject *self, PyObject *unused) {
    static const char *const phase_names[PH_N] = {"train", "valid"};
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (int i = 0; i < PH_N; i++) {
        const fx_phase *ph = &self->phases[i];
        PyObject *actions = phase_dict(ph);
        PyObject *sps = ph->all_rate_n
                            ? PyFloat_FromDouble(ph->all_rate_sum / (double)ph->all_rate_n)
                            : Py_NewRef(Py_None);
        PyObject *entry = actions && sps
                              ? Py_BuildValue("{sNsKsN}", "actions", actions, "batches",
                                              (unsigned long long)ph->batches, "samples_per_s", sps)
                              : NULL;
        if (entry == NULL) {
            Py_XDECREF(actions);
            Py_XDECREF(sps);
        }
        if (sw_py_dict_put(out, phase_names[i], entry) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* rolling(): fastxtend's rolling samples/s over the last `rolling` training batches:
 * {action: samples/s} for every action measured in them (step and draw from the mean draw
 * and batch; zero_grad as bs/duration, as fastxtend logs it). */
static PyObject *FitMarks_rolling(FitMarksObject *self, PyObject *unused) {
    PyObject *d = PyDict_New();
    if (d == NULL || self->kept == 0)
        return d;
    double mean[FX_N] = {0}, bs = 0;
    unsigned seen = 0;
    for (Py_ssize_t k = 0; k < self->kept; k++) {
        const fx_batch *b = &self->ring[k];
        bs += b->bs;
        for (int a = 0; a < FX_N; a++) {
            mean[a] += (double)b->ns[a] / 1e9;
            if (b->ns[a])
                seen |= 1u << a;
        }
    }
    bs /= (double)self->kept;
    for (int a = 0; a < FX_N; a++)
        mean[a] /= (double)self->kept;
    double db = mean[FX_DRAW] + mean[FX_BATCH];
    for (int a = 0; a < FX_N; a++) {
        double v;
        if (a == FX_STEP || a == FX_DRAW) {
            if (db <= 0 || mean[FX_BATCH] <= 0)
                continue;
            v = bs / db - (a == FX_DRAW ? bs / mean[FX_BATCH] : 0);
        } else if (seen & (1u << a)) {
            v = bs / mean[a];
        } else {
            continue;
        }
        if (sw_py_dict_put(d, fx_names[a], PyFloat_FromDouble(v)) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* ------------------------------------------------------------------------------------------
 * The type
 * ---------------------------------------------------------------------------------------- */

static PyObject *FitMarks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"learn", "profiler", "drop", "rolling", NULL};
    PyObject *learn, *profiler = Py_None;
    int drop = 1;
    Py_ssize_t rolling = 10;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Oin:FitMarks", keywords, &learn, &profiler,
                                     &drop, &rolling))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (profiler != Py_None && !PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "FitMarks: profiler must be a stepwatch.Profiler or None");
        return NULL;
    }
    if (drop < 0) {
        PyErr_SetString(PyExc_ValueError, "FitMarks: drop must be >= 0");
        return NULL;
    }
    if (rolling < 1 || (size_t)rolling > SIZE_MAX / sizeof(fx_batch)) {
        PyErr_SetString(PyExc_ValueError, "FitMarks: rolling must be >= 1");
        return NULL;
    }
    ProfilerObject *owner = profiler != Py_None ? (ProfilerObject *)profiler : NULL;
    if (owner != NULL && owner->p == NULL) {
        PyErr_SetString(PyExc_ValueError, "FitMarks: the profiler is closed");
        return NULL;
    }
    FitMarksObject *self = (FitMarksObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->ring = calloc((size_t)rolling, sizeof *self->ring);
    self->xb_name = PyUnicode_InternFromString("xb");
    self->shape_name = Py_NewRef(st->shape_name);
    if (self->ring == NULL || self->xb_name == NULL) {
        if (self->ring == NULL)
            PyErr_NoMemory();
        Py_DECREF(self);
        return NULL;
    }
    self->learn = Py_NewRef(learn);
    if (owner != NULL) {
        self->owner = (ProfilerObject *)Py_NewRef(owner);
        for (int c = 0; c < CORE_N; c++)
            self->core[c] = sw_action(owner->p, core_names[c]);
    }
    for (int i = 0; i < PH_N; i++)
        for (int a = 0; a < FX_N; a++)
            sw_stats_init(&self->phases[i].stats[a]);
    self->drop = drop;
    self->rolling = rolling;
    self->log_iter = -(long long)drop;
    return (PyObject *)self;
}

static int FitMarks_traverse(FitMarksObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->learn);
    return 0;
}

static int FitMarks_clear(FitMarksObject *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->learn);
    return 0;
}

static void FitMarks_dealloc(FitMarksObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    FitMarks_clear(self);
    Py_CLEAR(self->xb_name);
    Py_CLEAR(self->shape_name);
    free(self->ring);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

#define MARK(name, doc) \
    { #name, (PyCFunction)FitMarks_##name, METH_NOARGS, doc }
static PyMethodDef FitMarks_methods[] = {
    MARK(before_draw, "A batch is about to be drawn (its step begins)."),
    MARK(before_batch, "The batch arrived: draw ends, batch and forward begin."),
    MARK(after_pred, "forward ends, loss begins (after_pred, late)."),
    MARK(after_loss, "loss ends (after_loss, late)."),
    MARK(before_backward, "backward begins (before_backward, early)."),
    MARK(before_step, "backward ends, opt_step begins (before_step, early)."),
    MARK(after_step, "opt_step ends, zero_grad begins (after_step, late)."),
    MARK(zero_grad_end, "zero_grad ends (after_batch, early)."),
    {"after_batch", (PyCFunction)FitMarks_after_batch, METH_NOARGS,
     "after_batch($self, /)\n--\n\n"
     "The batch ends (after_batch, late): it is committed. True when fastxtend "
     "would log its rolling samples/s now, else None."},
    {"set_phase", (PyCFunction)FitMarks_set_phase, METH_O,
     "set_phase($self, training, /)\n--\n\n"
     "The train (True) or valid (False) phase begins."},
    MARK(close, "The phase or fit ended: end the core step, let an unfinished batch go."),
    MARK(results, "{'train'|'valid': {'actions': {name: (count, mean_s, std_s, total_s, "
                  "samples_per_s)}, 'batches': n, 'samples_per_s': mean over every batch}}"),
    MARK(rolling, "{action: samples/s} over the last `rolling` training batches."),
    {NULL, NULL, 0, NULL},
};
#undef MARK

static PyMemberDef FitMarks_members[] = {
    {"drop", T_INT, offsetof(FitMarksObject, drop), READONLY,
     "Batches of each phase left out of the statistics."},
    {"rolling", T_PYSSIZET, offsetof(FitMarksObject, rolling), READONLY,
     "Training batches in the rolling window."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot FitMarks_slots[] = {
    {Py_tp_doc, "FitMarks(learn, profiler=None, drop=1, rolling=10)\n--\n\n"
                "The per-batch marks of a fastai Learner (stepwatch.fastai), as C methods; "
                "fastxtend's statistics in fixed memory, and a stepwatch Profiler's steps and "
                "actions when given one."},
    {Py_tp_new, FitMarks_new},
    {Py_tp_methods, FitMarks_methods},
    {Py_tp_members, FitMarks_members},
    {Py_tp_traverse, FitMarks_traverse},
    {Py_tp_clear, FitMarks_clear},
    {Py_tp_dealloc, FitMarks_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_fitmarks_spec = {
    .name = "stepwatch.FitMarks",
    .basicsize = sizeof(FitMarksObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = FitMarks_slots,
};

/* ------------------------------------------------------------------------------------------
 * The module functions of stepwatch.fastai (added to the module at exec, _stepwatch.c)
 * ---------------------------------------------------------------------------------------- */

/* scale_time(seconds) -> str: sw_format_scale_time, fastxtend's durations (stepwatch.fastai's
 * report uses the C writer's own cells). */
static PyObject *fastai_scale_time(PyObject *module, PyObject *seconds) {
    double v = PyFloat_AsDouble(seconds);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    char buf[64];
    return PyUnicode_FromString(sw_format_scale_time(v, buf, sizeof buf));
}

PyMethodDef sw_py_fastai_functions[] = {
    {"scale_time", fastai_scale_time, METH_O,
     "scale_time($module, seconds, /)\n--\n\n"
     "-> str: fastxtend's scale_time, as the fastxtend report writes its durations "
     "(sw_format_scale_time): '838.2ms', '-' for zero, NaN and the infinities."},
    {NULL, NULL, 0, NULL},
};
