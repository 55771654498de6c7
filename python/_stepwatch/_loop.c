/*
 * _loop.c — the per-step hot path of stepwatch.torch, in C (stepwatch._stepwatch.Loop).
 *
 * stepwatch.torch.instrument() patches a few torch entry points (the DataLoader iterators'
 * __next__, nn.Module.__call__, torch.autograd.backward, the zero_grads, the functional
 * losses) and registers torch's global optimizer step hooks. They run several times per
 * step, so each is a Hook: a small C callable that calls through to the original and tells
 * the Loop what happened, with no Python frame of its own. The Loop holds the profiler, the
 * ids, and the state of the step in progress, and decides where steps begin and end.
 *
 * Steps come from the training itself (docs/python.md, "How steps are found"):
 *   - a training step ends when the optimizer steps (the first optimizer that steps; another
 *     one that steps twice in a row without it takes over), or, when no optimizer object
 *     exists, when the backward ends; with gradient accumulation one step holds several
 *     forward/backward passes;
 *   - a validation step (a forward under no_grad/inference_mode or of a module in eval()
 *     mode) ends at the next DataLoader batch, or without a loader at a forward after the
 *     step's loss or of a model the step has called already; a training step ends at the
 *     next batch too while no backward has been seen;
 *   - stepwatch.step() marks steps by hand and turns the rules off.
 * A step begins where the previous step of the same kind ended (so what the script does
 * between two updates, like drawing a batch without a loader, is the step's "other"), or,
 * after a step of the other kind, an epoch's end or at the start, at its first event. A
 * step closed by a later event ends at its own last event. DataLoader batches and zero_grad
 * calls are held back ("pending") until the step they belong to is known, so a batch fetched
 * before a `break` opens no step.
 *
 * Categories: data = the loader's next(); forward = the outermost module call (or compiled
 * function); loss = a loss module, a functional loss, a plain module returning a scalar
 * after the forward, else (training) the time from the forward's end to the backward;
 * backward; optimizer (its own time: a closure's forward and backward are theirs);
 * zero_grad. A module called while a batch is fetched is the data pipeline's.
 *
 * Hooks never raise on their own account and never swallow the user's exceptions: a closed
 * profiler or a closed Loop makes them call straight through.
 */
#include "_stepwatch.h"

#include <dlfcn.h>
#include <frameobject.h>
#include <stdbool.h>
#include <structmember.h>
#include <string.h>

enum { TRAIN = 0, VALID = 1, NO_STEP = -1 };

typedef enum {
    RULE_NONE,       /* no step yet, or no backward yet: steps end at the next batch */
    RULE_DATALOADER, /* steps end at the next DataLoader batch (no backward seen) */
    RULE_FORWARD,    /* steps end when the model is called again (no loader, no backward) */
    RULE_BACKWARD,   /* no optimizer object: a training step ends with the backward */
    RULE_OPTIMIZER,  /* a training step ends with the optimizer step */
    RULE_MANUAL,     /* stepwatch.step() */
} step_rule;

static const char *const rule_names[] = {"none",     "dataloader", "forward",
                                         "backward", "optimizer",  "manual"};

/* A DataLoader batch or a zero_grad whose step is not known yet. */
typedef struct {
    sw_id action;
    int kind;            /* TRAIN or VALID: the step it belongs to */
    uint32_t batch_size; /* for a batch */
    int iterator;        /* for a batch: its iterator's slot in LoopObject.iterators */
    uint64_t start, end;
} pending_event;

/* A DataLoader batch, or a loader's start-up (its iterator made: the worker processes
 * start), fetched and not consumed yet. It belongs to the step whose forward consumes it,
 * whenever and with whatever grad mode it was fetched (loaders that read ahead, an
 * update's micro-batches drawn before its first forward, an evaluation loop that fetches
 * with grad on and runs the forward under no_grad): see take_batches. */
typedef struct {
    int startup;         /* a loader's start-up, not a batch */
    int iterator;        /* its iterator's slot in LoopObject.iterators */
    uint32_t batch_size;
    const void *key;     /* the batch's first array-like (identity only, never dereferenced) */
    uint64_t start, end;
} queued_batch;

#define MAX_PENDING 8
#define MAX_QUEUED 64   /* batches fetched ahead of their forwards (gradient accumulation) */
#define MAX_ITERATORS 4 /* loaders in use at once (zipped, nested) */
#define MAX_MODULES 4   /* models called in one step (encoder and decoder, teacher, ...) */

typedef struct {
    PyObject_HEAD
    ProfilerObject *owner;
    sw_id data, forward, loss, backward, optimizer, zero_grad;
    sw_id closure;             /* the rest of an optimizer's closure (SW_ID_NONE: not timed) */
    sw_id startup;             /* from instrument() to the first step (the script's start) */
    sw_id loader_startup;      /* a DataLoader's iterator made (its workers started) */
    sw_phase phases[2];        /* train, valid; SW_PHASE_NONE when phases are off */
    PyObject *loss_type;       /* module calls of this type are "loss" */
    PyObject *grad_enabled;    /* torch.is_grad_enabled */
    bool (*grad_mode)(void);   /* c10::GradMode::is_enabled, when found (read_grad_mode) */
    PyObject *optimizer_exists; /* callable: has any torch optimizer been made? */
    PyObject *shape, *training, *loss_key, *closure_key; /* interned names */
    int active;                /* 0 after close(): every hook calls straight through */

    /* The step in progress (the training thread's; the GIL orders the hooks). */
    int kind;                  /* TRAIN, VALID or NO_STEP */
    int step_fetches, step_forwards;
    uint32_t step_samples;
    const void *step_modules[MAX_MODULES]; /* the step's outermost calls (identities, never
                                  dereferenced): a loader-less validation step ends when one
                                  comes again */
    int step_nmodules;
    uint64_t step_last;        /* end of the step's last event */
    int last_kind;             /* the previous step: its kind and end (0: not contiguous) */
    uint64_t last_end;
    sw_phase phase_in;         /* the train/valid phase entered, or SW_PHASE_NONE */
    step_rule rule;
    const void *boundary;      /* the optimizer whose step ends a step (identity only) */
    const void *other;         /* another optimizer that stepped, and how often in a row */
    int other_steps;
    pending_event pending[MAX_PENDING];
    int npending;
    queued_batch queue[MAX_QUEUED]; /* fetched, not consumed yet, oldest first */
    int nqueued;
    int may_consume;           /* a fetch or a backward since a forward last took a batch */
    PyObject *iterators[MAX_ITERATORS]; /* weak references to the loader iterators in use */
    int matched[MAX_ITERATORS]; /* a forward was given a batch of this iterator as fetched */
    int next_iterator;
    uint64_t prev_end;         /* end of the last step of either kind (steps never overlap) */
    uint64_t installed_at;     /* when the Loop was made: the start of "startup" */
    int started;               /* a step has begun (startup is recorded) */
    int external;              /* bound_steps(True): a front end ends the training steps */

    /* Calls running now. */
    sw_id inside;              /* "forward" or "loss" while an outermost call runs */
    int candidate;             /* that call is timed first and named by its result */
    int loss_inside;           /* a functional loss ran inside that call */
    uint64_t call_start;
    int in_fetch, in_zero_grad, in_backward;
    int optimizer_depth;       /* nested Optimizer.step calls */
    int optimizer_paused;      /* a closure's part runs inside the outermost one */
    int closure_depth;         /* inside the optimizer's closure: the optimizer stays paused */
    uint64_t closure_parts;    /* the time of the timed parts run inside it so far */
    uint64_t optimizer_start, optimizer_inner, paused_at;
    sw_py_funcs *optimizer_funcs; /* the function profiler told of the outermost step */
    uint64_t forward_end;      /* end of the last outermost forward; 0 once backward began */
    const void *forward_caller; /* the frame that called it (identity only) */
    PyObject *loss_frame;      /* the user's loss function running now (see user_loss) */
    int loss_seen;             /* a loss ran since that forward */
    int eval_is_train;         /* a backward followed a forward read as validation only by
                                  module.training: from then on grad mode alone decides */
    int last_forward_by_flag;

    /* What the notes say (see update_notes). */
    uint64_t steps, steps_with_batch, steps_with_forward;
    int loss_in_forward, saw_batch, noted_data, noted_forward, noted_loss;
} LoopObject;

typedef enum {
    HOOK_NEXT,
    HOOK_CALL,
    HOOK_FUNCTION, /* a compiled function: timed as the forward */
    HOOK_LOSS,     /* a functional loss (torch.nn.functional.cross_entropy, ...) */
    HOOK_BACKWARD,
    HOOK_ZERO_GRAD,
    HOOK_OPTIMIZER_PRE,
    HOOK_OPTIMIZER_POST,
    HOOK_ITER,     /* DataLoader.__iter__: the loader's start-up */
    HOOK_CLOSURE,  /* the closure an optimizer step was given (made by optimizer_pre) */
    HOOK_KINDS
} hook_kind;

static const char *const hook_names[HOOK_KINDS] = {
    "next",      "call",          "function",       "loss",   "backward",
    "zero_grad", "optimizer_pre", "optimizer_post", "iter",   "closure"};

typedef struct {
    PyObject_HEAD
    LoopObject *loop;
    PyObject *func;           /* the original; NULL for the optimizer hooks */
    hook_kind kind;
    PyObject *dict;           /* __wrapped__ and friends from functools.update_wrapper */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} HookObject;

/* ------------------------------------------------------------------------------------------
 * Notes: how steps were found, what could not be told apart
 * ---------------------------------------------------------------------------------------- */

static void set_rule(LoopObject *loop, sw_profiler *p, step_rule rule) {
    if (loop->rule == rule)
        return;
    loop->rule = rule;
    sw_set_note(p, "step_rule", rule_names[rule]);
    sw_set_note(p, "not_separated.optimizer",
                rule == RULE_BACKWARD ? "no optimizer object steps: the parameter update is "
                                        "in \"other\""
                                      : NULL);
}

/* After each step, and only when something changed: the categories the steps so far could
 * not see. */
static void update_notes(LoopObject *loop, sw_profiler *p) {
    int no_batch = loop->steps_with_batch == 0 && loop->steps > 0;
    if (no_batch != loop->noted_data) {
        loop->noted_data = no_batch;
        sw_set_note(p, "not_separated.data",
                    no_batch ? "no DataLoader: batches the script makes itself (get_batch, "
                               "slicing, a generator) are in \"other\""
                             : NULL);
    }
    int no_forward = loop->steps_with_forward == 0 && loop->steps > 0;
    if (no_forward != loop->noted_forward) {
        loop->noted_forward = no_forward;
        sw_set_note(p, "not_separated.forward",
                    no_forward ? "no nn.Module call in the steps: the model's time is in "
                                 "\"other\""
                               : NULL);
    }
    if (loop->loss_in_forward && !loop->noted_loss) {
        loop->noted_loss = 1;
        sw_set_note(p, "not_separated.loss",
                    "the loss is computed inside the model's forward: it is counted as "
                    "\"forward\"");
    }
}

/* ------------------------------------------------------------------------------------------
 * Phases and steps
 * ---------------------------------------------------------------------------------------- */

static void enter_phase(LoopObject *loop, sw_profiler *p, int kind) {
    sw_phase want = loop->phases[kind];
    if (want == SW_PHASE_NONE || want == loop->phase_in)
        return;
    if (loop->phase_in != SW_PHASE_NONE)
        sw_phase_end(p, loop->phase_in);
    sw_phase_begin(p, want);
    loop->phase_in = want;
}

static void record_pending(LoopObject *loop, sw_profiler *p, const pending_event *e) {
    sw_record(p, e->action, e->start, e->end);
    if (e->action != loop->data)
        return;
    loop->saw_batch = 1;
    if (loop->kind == NO_STEP)
        return;
    /* The step's samples: every batch it fetched (gradient accumulation: several). */
    loop->step_fetches++;
    loop->step_samples += e->batch_size;
    sw_step_set_batch_size(p, loop->step_samples);
}

/* Record the held-back events whose kind is (same = 1) or is not (same = 0) kind, in the
 * open step or in none; the others stay held, in order. */
static void flush_pending(LoopObject *loop, sw_profiler *p, int kind, int same) {
    int kept = 0;
    for (int i = 0; i < loop->npending; i++) {
        pending_event *e = &loop->pending[i];
        if ((e->kind == kind) == same)
            record_pending(loop, p, e);
        else
            loop->pending[kept++] = *e;
    }
    loop->npending = kept;
}

/* A closure's forward, loss, backward or zero_grad runs inside Optimizer.step (LBFGS,
 * Lightning): each part is counted as itself, and the optimizer gets its own time, recorded
 * as one span when it ends (no span is open while the parts run). */
static void pause_optimizer(LoopObject *loop) {
    if (loop->optimizer_depth > 0 && !loop->optimizer_paused) {
        loop->optimizer_paused = 1;
        loop->paused_at = sw_now_ns();
    }
}

/* A timed part (forward, loss, backward, zero_grad, a fetch) took ns: inside a closure, that
 * is not the closure's own time. */
static void part_took(LoopObject *loop, uint64_t ns) {
    if (loop->closure_depth > 0)
        loop->closure_parts += ns;
}

static void resume_optimizer(LoopObject *loop) {
    if (loop->optimizer_paused && loop->closure_depth == 0) {
        loop->optimizer_paused = 0;
        loop->optimizer_inner += sw_now_ns() - loop->paused_at;
    }
}

/* A batch or a zero_grad ended: into the open step when it is one the optimizer (or the
 * backward, or a mark) ends, else held until its step is known. */
static void settle(LoopObject *loop, sw_profiler *p, const pending_event *e) {
    int open_ended = loop->rule == RULE_OPTIMIZER || loop->rule == RULE_BACKWARD ||
                     loop->rule == RULE_MANUAL;
    if ((loop->kind == TRAIN && open_ended) || (loop->kind != NO_STEP &&
                                                loop->rule == RULE_MANUAL)) {
        record_pending(loop, p, e); /* (a closure's: the optimizer's span is paused) */
        loop->step_last = e->end;
    } else if (loop->npending == MAX_PENDING) { /* more than a step's worth: in no step */
        record_pending(loop, p, e);
    } else {
        loop->pending[loop->npending++] = *e;
    }
}

/* End the open step at end (0: now). */
static void close_step(LoopObject *loop, sw_profiler *p, uint64_t end) {
    if (loop->kind == NO_STEP)
        return;
    if (end == 0)
        end = sw_now_ns();
    sw_step_end_at(p, end);
    loop->steps++;
    loop->steps_with_batch += loop->step_fetches > 0;
    loop->steps_with_forward += loop->step_forwards > 0;
    loop->last_kind = loop->kind;
    loop->last_end = end;
    loop->prev_end = end > loop->prev_end ? end : loop->prev_end;
    loop->kind = NO_STEP;
    update_notes(loop, p);
}

/* A step of kind begins with an event that started at `at` (or earlier: the batches it
 * consumes, fetched at `at` at the latest). */
static void open_step(LoopObject *loop, sw_profiler *p, int kind, uint64_t at,
                      uint64_t earliest) {
    flush_pending(loop, p, kind, 0); /* the other kind's: before this step, in no step */
    uint64_t start = earliest != 0 && earliest < at ? earliest : at;
    for (int i = 0; i < loop->npending; i++)
        start = loop->pending[i].start < start ? loop->pending[i].start : start;
    if (loop->last_end != 0 && loop->last_kind == kind && loop->last_end < start)
        start = loop->last_end; /* what happened since the previous step is this step's */
    if (start < loop->prev_end)
        start = loop->prev_end; /* a batch read ahead during the previous step */
    if (!loop->started) {
        /* The script's start (imports, building the model) until its first step: apart
         * from "fit"'s own time. */
        loop->started = 1;
        if (loop->startup != SW_ID_NONE && start > loop->installed_at)
            sw_record(p, loop->startup, loop->installed_at, start);
    }
    enter_phase(loop, p, kind);
    sw_step_begin_at(p, 0, start);
    loop->kind = kind;
    loop->step_fetches = loop->step_forwards = 0;
    loop->step_samples = 0;
    loop->step_nmodules = 0;
    loop->step_last = at;
    loop->forward_end = 0;
    loop->loss_seen = 0;
    flush_pending(loop, p, kind, 1);
}

/* Is torch's grad mode on (off under no_grad and inference_mode)? The C++ call when
 * read_grad_mode found it (it is what torch.is_grad_enabled returns), else that. */
static int grad_on(LoopObject *loop) {
    if (loop->grad_mode != NULL)
        return loop->grad_mode();
    PyObject *enabled = PyObject_CallNoArgs(loop->grad_enabled);
    if (enabled == NULL) {
        PyErr_Clear();
        return 1;
    }
    int on = enabled == Py_True;
    Py_DECREF(enabled);
    return on;
}

static int grad_kind(LoopObject *loop) {
    return grad_on(loop) ? TRAIN : VALID;
}

/* Train or valid, for an outermost forward: grad mode, then module.training. */
static int forward_kind(LoopObject *loop, PyObject *module) {
    loop->last_forward_by_flag = 0;
    if (!grad_on(loop))
        return VALID;
    if (module == NULL || loop->eval_is_train)
        return TRAIN;
    PyObject *training = PyObject_GetAttr(module, loop->training);
    if (training == NULL) {
        PyErr_Clear();
        return TRAIN;
    }
    int eval = training == Py_False;
    Py_DECREF(training);
    loop->last_forward_by_flag = eval;
    return eval ? VALID : TRAIN;
}

static int update_bounded(const LoopObject *loop) {
    return loop->rule == RULE_OPTIMIZER || loop->rule == RULE_BACKWARD;
}

/* An event that is part of a step begins (a backward or an optimizer step: train = 1, which
 * ends a validation step; a loss: train = 0, whose kind is grad mode's): join the open step,
 * or begin one. */
static void join(LoopObject *loop, sw_profiler *p, int train, uint64_t at, uint64_t earliest) {
    if (loop->rule == RULE_MANUAL) {
        if (loop->kind != NO_STEP)
            flush_pending(loop, p, loop->kind, 1);
        return;
    }
    if (loop->kind == VALID && train)
        close_step(loop, p, loop->step_last);
    if (loop->kind == NO_STEP)
        open_step(loop, p, train ? TRAIN : grad_kind(loop), at, earliest);
    else
        flush_pending(loop, p, loop->kind, 1);
}

static int called_in_step(const LoopObject *loop, const void *module) {
    for (int i = 0; i < loop->step_nmodules; i++)
        if (loop->step_modules[i] == module)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Batches: each belongs to the step whose forward consumes it
 * ---------------------------------------------------------------------------------------- */

/* Record a held batch (or loader start-up): in the open step, which consumed it (in_step),
 * or in no step. */
static void record_batch(LoopObject *loop, sw_profiler *p, const queued_batch *b, int in_step) {
    if (b->startup) {
        if (loop->loader_startup != SW_ID_NONE)
            sw_record(p, loop->loader_startup, b->start, b->end);
        return;
    }
    sw_record(p, loop->data, b->start, b->end);
    loop->saw_batch = 1;
    if (!in_step || loop->kind == NO_STEP)
        return;
    loop->step_fetches++;
    loop->step_samples += b->batch_size;
    sw_step_set_batch_size(p, loop->step_samples);
}

static void enqueue(LoopObject *loop, sw_profiler *p, const queued_batch *b) {
    if (loop->nqueued == MAX_QUEUED) { /* never consumed: the oldest goes, in no step */
        record_batch(loop, p, &loop->queue[0], 0);
        memmove(loop->queue, loop->queue + 1, (MAX_QUEUED - 1) * sizeof loop->queue[0]);
        loop->nqueued--;
    }
    loop->queue[loop->nqueued++] = *b;
}

/* Record the held entries marked in take into the open step, keep the others in order. */
static void consume(LoopObject *loop, sw_profiler *p, const char *take) {
    int kept = 0;
    for (int i = 0; i < loop->nqueued; i++) {
        if (take[i])
            record_batch(loop, p, &loop->queue[i], 1);
        else
            loop->queue[kept++] = loop->queue[i];
    }
    loop->nqueued = kept;
}

static void take_all(LoopObject *loop, sw_profiler *p) {
    for (int i = 0; i < loop->nqueued; i++)
        record_batch(loop, p, &loop->queue[i], 1);
    loop->nqueued = 0;
}

/* The oldest held batch whose first array-like is obj (a dataset that returns the same
 * tensor each time: the batches are consumed in order), if later than best. */
static int match_in(const LoopObject *loop, PyObject *obj, int best) {
    for (int i = 0; i < loop->nqueued; i++)
        if (!loop->queue[i].startup && loop->queue[i].key == (const void *)obj)
            return i > best ? i : best;
    return best;
}

/* The latest held batch that a call is given as it was fetched (an argument, or an item
 * of a tuple, list or dict argument: the Trainer's model(**inputs), model(x) of a batch
 * (x, y)), or -1. Identity only: nothing is called. */
static int matched_input(const LoopObject *loop, PyObject *const *args, Py_ssize_t n) {
    int best = -1;
    for (Py_ssize_t a = 0; a < n && loop->nqueued > 0; a++) {
        PyObject *arg = args[a];
        best = match_in(loop, arg, best);
        if (PyTuple_Check(arg) || PyList_Check(arg)) {
            Py_ssize_t size = PySequence_Fast_GET_SIZE(arg);
            for (Py_ssize_t i = 0; i < size && i < 8; i++)
                best = match_in(loop, PySequence_Fast_GET_ITEM(arg, i), best);
        } else if (PyDict_Check(arg)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            for (int i = 0; i < 8 && PyDict_Next(arg, &pos, &key, &value); i++)
                best = match_in(loop, value, best);
        }
    }
    return best;
}

/* What a forward (or a backward without one) consumes of the held entries: take[i] = 1.
 * Given the batch it was called with as fetched (matched >= 0): that one, the older
 * entries of its iterator (a batch skipped, the loader's start-up), and the entries of
 * other iterators fetched after it up to its iterator's next batch (zipped loaders); a
 * batch read ahead stays for the forward it is given to. Called with no batch as fetched
 * (moved to a device, transformed, summed), once per fetch or backward: the oldest batch
 * of each iterator whose batches are not given as fetched, with their start-ups. Returns
 * the batches taken (start-ups not counted); *earliest: the first fetch start among them. */
static int take_batches(LoopObject *loop, int matched, char *take, uint64_t *earliest) {
    int n = 0;
    memset(take, 0, MAX_QUEUED);
    if (matched >= 0) {
        int it = loop->queue[matched].iterator;
        loop->matched[it] = 1;
        for (int i = 0; i <= matched; i++)
            take[i] = loop->queue[i].iterator == it;
        for (int i = matched + 1; i < loop->nqueued && loop->queue[i].iterator != it; i++)
            take[i] = 1;
    } else if (loop->may_consume) {
        int seen[MAX_ITERATORS] = {0};
        for (int i = 0; i < loop->nqueued; i++) {
            const queued_batch *b = &loop->queue[i];
            if (loop->matched[b->iterator])
                continue;
            if (seen[b->iterator])
                break;
            take[i] = 1;
            seen[b->iterator] = !b->startup;
        }
    }
    for (int i = 0; i < loop->nqueued; i++)
        if (take[i]) {
            n += !loop->queue[i].startup;
            if (*earliest == 0 || loop->queue[i].start < *earliest)
                *earliest = loop->queue[i].start;
        }
    return n;
}

/* Entries of a loop that is over (its iterator dropped) that no forward consumed: in no
 * step (a batch fetched before a `break`). */
static void drop_finished(LoopObject *loop, sw_profiler *p) {
    int kept = 0;
    for (int i = 0; i < loop->nqueued; i++) {
        PyObject *ref = loop->iterators[loop->queue[i].iterator];
        if (ref == NULL || PyWeakref_GET_OBJECT(ref) == Py_None)
            record_batch(loop, p, &loop->queue[i], 0);
        else
            loop->queue[kept++] = loop->queue[i];
    }
    loop->nqueued = kept;
}

/* An outermost forward of kind begins (consuming batches: `consumes`, the first fetched at
 * `earliest`): does it begin a step? Returns 1 when it did. */
static int forward_begins(LoopObject *loop, sw_profiler *p, int kind, uint64_t at,
                          const void *module, int consumes, uint64_t earliest) {
    if (loop->rule == RULE_MANUAL) {
        join(loop, p, 0, at, 0);
        return 0;
    }
    int split = 0;
    if (loop->kind == TRAIN && !update_bounded(loop)) {
        /* No backward yet: the next batch (or a validation forward) ends the step. */
        split = kind == VALID || (consumes && loop->step_forwards > 0);
        if (split && kind == TRAIN)
            set_rule(loop, p, RULE_DATALOADER);
    } else if (loop->kind == VALID) {
        /* Without a loader: a forward after the step's loss, or of a model the step has
         * called already, is the next batch's. */
        split = kind == TRAIN || consumes ||
                (loop->step_fetches == 0 && loop->step_forwards > 0 &&
                 (loop->loss_seen || called_in_step(loop, module)));
    }
    if (split)
        close_step(loop, p, loop->step_last);
    int began = loop->kind == NO_STEP;
    if (began) {
        if (kind == VALID && loop->rule == RULE_NONE)
            set_rule(loop, p, RULE_FORWARD); /* until a batch or a backward says more */
        open_step(loop, p, kind, at, earliest);
    } else {
        flush_pending(loop, p, loop->kind, 1);
    }
    if (loop->step_nmodules < MAX_MODULES && !called_in_step(loop, module))
        loop->step_modules[loop->step_nmodules++] = module;
    return began;
}

/* Everything still open, when the loop closes: the step ends at its last event. */
static void user_loss_ended(LoopObject *loop);

static void close_all(LoopObject *loop, sw_profiler *p) {
    if (loop->loss_frame != NULL)
        user_loss_ended(loop);
    if (loop->inside != SW_ID_NONE && !loop->candidate)
        sw_end(p, loop->inside);
    loop->inside = SW_ID_NONE;
    loop->optimizer_depth = 0;
    loop->optimizer_paused = 0;
    if (loop->kind != NO_STEP) {
        flush_pending(loop, p, loop->kind, 1);
        close_step(loop, p, loop->step_last);
    }
    flush_pending(loop, p, NO_STEP, 0); /* the rest, outside any step */
    for (int i = 0; i < loop->nqueued; i++)
        record_batch(loop, p, &loop->queue[i], 0);
    loop->nqueued = 0;
    if (loop->phase_in != SW_PHASE_NONE)
        sw_phase_end(p, loop->phase_in);
    loop->phase_in = SW_PHASE_NONE;
    update_notes(loop, p);
    sw_set_note(p, "no_steps",
                loop->steps > 0 ? NULL
                : loop->saw_batch
                    ? "DataLoader batches were fetched, but no model call, backward or "
                      "optimizer step followed them"
                    : "no DataLoader batch, model call, backward or optimizer step ran while "
                      "stepwatch.torch was on");
}

/* ------------------------------------------------------------------------------------------
 * The events
 * ---------------------------------------------------------------------------------------- */

/* An outermost module (or compiled function) call begins; returns 0 when it is not one to
 * time (inside another, in the data pipeline). */
static int call_begin(LoopObject *loop, sw_profiler *p, PyObject *module, int is_module,
                      PyObject *const *inputs, Py_ssize_t ninputs) {
    if (loop->inside != SW_ID_NONE || loop->in_fetch || !loop->active)
        return 0;
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    loop->call_start = now;
    loop->candidate = 0;
    loop->loss_inside = 0;
    if (is_module && PyObject_TypeCheck(module, (PyTypeObject *)loop->loss_type)) {
        join(loop, p, 0, now, 0);
        loop->inside = loop->loss;
        sw_begin(p, loop->loss);
        return 1;
    }
    int kind = forward_kind(loop, is_module ? module : NULL);
    loop->forward_caller = PyEval_GetFrame(); /* cached on the frame after the first time */
    char take[MAX_QUEUED];
    uint64_t earliest = 0;
    int taken = loop->nqueued == 0
                    ? 0
                    : take_batches(loop, matched_input(loop, inputs, ninputs), take, &earliest);
    int began = forward_begins(loop, p, kind, now, module, taken > 0, earliest);
    if (earliest != 0)
        consume(loop, p, take);
    loop->may_consume = 0;
    loop->inside = loop->forward;
    /* After a forward of this step and before its backward, a plain module may be the loss:
     * timed first, then named by its result (a scalar is a loss). */
    loop->candidate = !began && loop->step_forwards > 0 && loop->forward_end != 0 &&
                      !loop->loss_seen && is_module;
    if (!loop->candidate)
        sw_begin(p, loop->forward);
    return 1;
}

static int is_scalar(LoopObject *loop, PyObject *result) {
    if (result == NULL)
        return 0;
    PyObject *shape = PyObject_GetAttr(result, loop->shape);
    if (shape == NULL) {
        PyErr_Clear();
        return 0;
    }
    int scalar = PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 0;
    Py_DECREF(shape);
    return scalar;
}

/* Does a forward's result carry the loss (a scalar tensor as an item of a tuple or list, or
 * as a dict's "loss": nanoGPT's (logits, loss), Hugging Face's outputs)? Then the loss was
 * computed inside, even where no functional loss call was seen (compiled code). A bare
 * tensor is not looked at: the common case stays one type check. */
static int carries_loss(LoopObject *loop, PyObject *result) {
    if (result == NULL)
        return 0;
    if (PyTuple_Check(result) || PyList_Check(result)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(result);
        for (Py_ssize_t i = 0; i < n && i < 4; i++)
            if (is_scalar(loop, PySequence_Fast_GET_ITEM(result, i)))
                return 1;
        return 0;
    }
    if (PyDict_Check(result)) {
        PyObject *loss = PyDict_GetItemWithError(result, loop->loss_key);
        if (loss == NULL)
            PyErr_Clear();
        return loss != NULL && is_scalar(loop, loss);
    }
    return 0;
}

/* The call begun by call_begin ended with result (NULL: it raised). */
static void call_end(LoopObject *loop, PyObject *result) {
    sw_id action = loop->inside;
    sw_profiler *p = loop->owner->p;
    loop->inside = SW_ID_NONE;
    if (p == NULL || action == SW_ID_NONE)
        return;
    uint64_t now = sw_now_ns();
    if (loop->candidate) {
        loop->candidate = 0;
        action = is_scalar(loop, result) ? loop->loss : loop->forward;
        sw_record(p, action, loop->call_start, now);
    } else {
        sw_end(p, action);
    }
    if (action == loop->forward) {
        int inside = loop->loss_inside || carries_loss(loop, result);
        loop->forward_end = now;
        loop->step_forwards += loop->kind != NO_STEP;
        loop->loss_in_forward |= inside;
        loop->loss_seen = inside; /* then what follows up to the backward is not the loss */
    } else {
        loop->loss_seen = 1;
    }
    part_took(loop, now - loop->call_start);
    loop->step_last = now;
    resume_optimizer(loop);
}

/* The spans the Loop records after the fact (sw_record): a function profiler watching their
 * action (stepwatch run --functions) is told when they begin and end, as they run. */
static sw_py_funcs *funcs_begin(LoopObject *loop, sw_profiler *p, sw_id action) {
    sw_py_funcs *funcs = sw_watched(p, action) ? loop->owner->funcs : NULL;
    if (funcs)
        sw_py_funcs_span(funcs, action, 1);
    return funcs;
}

static void funcs_end(LoopObject *loop, sw_py_funcs *funcs, sw_id action) {
    if (funcs && loop->owner->funcs == funcs)
        sw_py_funcs_span(funcs, action, 0);
}

/* Was the iterator of this held batch dropped (the loop it came from ended)? */
static int iterator_gone(const LoopObject *loop, const pending_event *e) {
    PyObject *ref = loop->iterators[e->iterator];
    return e->action == loop->data && (ref == NULL || PyWeakref_GET_OBJECT(ref) == Py_None);
}

/* The slot of a DataLoader iterator. One the loop has not fetched from lately is a new loop
 * over a loader (an epoch, or a loop after a `break`): the next step begins at its first
 * event, and when the previous loop is over (its iterator dropped), what it left held
 * belongs to no step, so a checkpoint after a `break` is in no step either. Zipped and
 * nested loaders stay known. */
static int iterator_slot(LoopObject *loop, sw_profiler *p, PyObject *iterator) {
    for (int i = 0; i < MAX_ITERATORS; i++)
        if (loop->iterators[i] != NULL && PyWeakref_GET_OBJECT(loop->iterators[i]) == iterator)
            return i;
    loop->last_end = 0;
    for (int i = 0; loop->kind == NO_STEP && i < loop->npending; i++)
        if (iterator_gone(loop, &loop->pending[i])) {
            flush_pending(loop, p, NO_STEP, 0);
            break;
        }
    if (loop->kind == NO_STEP)
        drop_finished(loop, p);
    int slot = loop->next_iterator;
    loop->matched[slot] = 0;
    loop->next_iterator = (slot + 1) % MAX_ITERATORS;
    PyObject *ref = PyWeakref_NewRef(iterator, NULL);
    if (ref == NULL)
        PyErr_Clear(); /* not weakly referable: every batch looks new, which only costs this */
    Py_XSETREF(loop->iterators[slot], ref);
    return slot;
}

static PyObject *hook_next(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_fetch || PyVectorcall_NARGS(nargsf) < 1)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    int slot = iterator_slot(loop, p, args[0]);
    int kind = grad_kind(loop);
    pause_optimizer(loop);
    sw_py_funcs *funcs = funcs_begin(loop, p, loop->data);
    loop->in_fetch++;
    uint64_t start = sw_now_ns();
    PyObject *batch = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->in_fetch--;
    part_took(loop, end - start);
    funcs_end(loop, funcs, loop->data);
    if ((p = loop->owner->p) == NULL)
        return batch;
    if (batch != NULL && loop->rule == RULE_MANUAL) {
        pending_event e = {loop->data, kind, sw_py_batch_size(batch, loop->shape), slot, start,
                           end};
        settle(loop, p, &e);
    } else if (batch != NULL) {
        queued_batch b = {0, slot, sw_py_batch_size(batch, loop->shape),
                          sw_py_batch_leaf(batch, loop->shape), start, end};
        enqueue(loop, p, &b);
    }
    loop->may_consume = 1;
    resume_optimizer(loop);
    if (batch == NULL) {
        if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
            /* The loader is done: a batch-bounded step ends, and whatever the script does
             * before its next loop (an epoch's end) belongs to no step. */
            if (loop->kind == VALID || (loop->kind == TRAIN && !update_bounded(loop) &&
                                        loop->rule != RULE_MANUAL))
                close_step(loop, p, loop->step_last);
            loop->last_end = 0;
            if (loop->kind == NO_STEP)
                flush_pending(loop, p, NO_STEP, 0);
        }
    }
    return batch;
}

static PyObject *hook_backward(LoopObject *loop, sw_profiler *p, PyObject *func,
                               PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_backward || loop->inside != SW_ID_NONE)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    if (loop->loss_frame != NULL)
        user_loss_ended(loop); /* the backward began inside it */
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    if (loop->kind == VALID && loop->last_forward_by_flag)
        loop->eval_is_train = 1; /* a model in eval() mode is being trained */
    /* No forward took the batches (a model without nn.Module calls): the backward does. */
    char take[MAX_QUEUED];
    uint64_t earliest = 0;
    if (loop->nqueued > 0 && (loop->kind != TRAIN || loop->step_forwards == 0))
        take_batches(loop, -1, take, &earliest);
    join(loop, p, 1, now, earliest);
    if (earliest != 0)
        consume(loop, p, take);
    if (loop->forward_end != 0 && !loop->loss_seen) {
        sw_record(p, loop->loss, loop->forward_end, now); /* a loss written by hand */
        part_took(loop, now - loop->forward_end);
    }
    loop->forward_end = 0;
    loop->loss_seen = 0;
    loop->in_backward = 1;
    sw_begin(p, loop->backward);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    loop->in_backward = 0;
    if ((p = loop->owner->p) == NULL)
        return result;
    sw_end(p, loop->backward);
    loop->step_last = sw_now_ns();
    part_took(loop, loop->step_last - now);
    loop->may_consume = 1; /* the next micro-batch's forward takes its batch */
    if (loop->rule != RULE_MANUAL && !update_bounded(loop)) {
        PyObject *exists = PyObject_CallNoArgs(loop->optimizer_exists);
        if (exists == NULL)
            PyErr_Clear();
        set_rule(loop, p, exists == Py_False ? RULE_BACKWARD : RULE_OPTIMIZER);
        Py_XDECREF(exists);
    }
    if (loop->rule == RULE_BACKWARD && loop->optimizer_depth == 0)
        close_step(loop, p, loop->step_last);
    resume_optimizer(loop);
    return result;
}

static PyObject *hook_zero_grad(LoopObject *loop, sw_profiler *p, PyObject *func,
                                PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_zero_grad || loop->inside != SW_ID_NONE || loop->in_fetch)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    pause_optimizer(loop);
    sw_py_funcs *funcs = funcs_begin(loop, p, loop->zero_grad);
    loop->in_zero_grad = 1;
    uint64_t start = sw_now_ns();
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->in_zero_grad = 0;
    part_took(loop, end - start);
    funcs_end(loop, funcs, loop->zero_grad);
    if ((p = loop->owner->p) != NULL) {
        pending_event e = {loop->zero_grad, TRAIN, 0, 0, start, end};
        settle(loop, p, &e);
    }
    resume_optimizer(loop);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * The loss as the user's function: `loss = my_loss(out, y)`, which does its own work and
 * calls a torch functional loss. The whole function, called between the forward and the
 * backward, is the loss: from the forward's end until the function returns, which a
 * profile function (the thread's, only while it runs; never when another is set) sees.
 * ---------------------------------------------------------------------------------------- */

static void user_loss_ended(LoopObject *loop) {
    PyEval_SetProfile(NULL, NULL);
    uint64_t now = sw_now_ns();
    sw_profiler *p = loop->active ? loop->owner->p : NULL;
    if (p != NULL && loop->forward_end != 0) {
        sw_record(p, loop->loss, loop->forward_end, now);
        part_took(loop, now - loop->forward_end);
        loop->step_last = now;
    }
    Py_CLEAR(loop->loss_frame);
}

static int user_loss_returns(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    LoopObject *loop = (LoopObject *)obj;
    if (what == PyTrace_RETURN && (PyObject *)frame == loop->loss_frame)
        user_loss_ended(loop);
    return 0;
}

/* The user's function a functional loss was called in (new reference), or NULL: the
 * outermost frame below the one that called the step's forward, when that frame is on the
 * stack within 8 calls (the loss called by the loop itself, or by Lightning's
 * training_step that also called the forward, is just the torch call). `wrapped`: the
 * functional loss sits behind a Python wrapper (torch.py's _traceable). */
static PyObject *user_loss_frame(LoopObject *loop, int wrapped) {
    if (loop->forward_end == 0 || loop->loss_seen || loop->forward_caller == NULL ||
        PyThreadState_Get()->c_profilefunc != NULL)
        return NULL;
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        return NULL;
    PyFrameObject *caller = wrapped ? PyFrame_GetBack(frame) : (PyFrameObject *)Py_NewRef(frame);
    PyFrameObject *below = NULL;
    for (int depth = 0; caller != NULL && depth < 8; depth++) {
        if ((const void *)caller == loop->forward_caller) {
            Py_DECREF(caller);
            return (PyObject *)below;
        }
        Py_XDECREF(below);
        below = caller;
        caller = PyFrame_GetBack(below);
    }
    Py_XDECREF(caller);
    Py_XDECREF(below);
    return NULL;
}

/* A functional loss: outside a forward it is the loss; inside one it is the model's. */
static PyObject *hook_loss(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->inside != SW_ID_NONE || loop->in_fetch) {
        loop->loss_inside |= loop->inside == loop->forward;
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    }
    if (loop->loss_frame != NULL) /* inside the user's loss function: timed whole */
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    join(loop, p, 0, now, 0);
    PyObject *user = user_loss_frame(loop, 1);
    if (user != NULL) {
        loop->loss_frame = user;
        loop->loss_seen = 1;
        PyEval_SetProfile(user_loss_returns, (PyObject *)loop);
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    }
    loop->inside = loop->loss;
    loop->candidate = 0;
    loop->call_start = now;
    sw_begin(p, loop->loss);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    call_end(loop, result);
    return result;
}

static PyObject *hook_call(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames,
                           PyObject *module, int is_module) {
    /* the call's inputs: after the module, positional then keyword values */
    Py_ssize_t ninputs = PyVectorcall_NARGS(nargsf) - is_module +
                         (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (!call_begin(loop, p, module, is_module, args + is_module, ninputs))
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    call_end(loop, result);
    return result;
}

/* DataLoader.__iter__: a new loop over a loader. Making its iterator starts the worker
 * processes (each epoch, unless persistent_workers): the loader's start-up, data of the
 * step that consumes the loop's first batch. */
static PyObject *hook_iter(LoopObject *loop, sw_profiler *p, PyObject *func,
                           PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_fetch)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    loop->in_fetch++; /* modules it calls are the data pipeline's */
    uint64_t start = sw_now_ns();
    PyObject *iterator = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->in_fetch--;
    part_took(loop, end - start);
    if (iterator == NULL || (p = loop->owner->p) == NULL)
        return iterator;
    queued_batch b = {1, iterator_slot(loop, p, iterator), 0, NULL, start, end};
    enqueue(loop, p, &b);
    loop->last_end = 0; /* a new loop, also over the same persistent iterator */
    return iterator;
}

/* The closure an optimizer step runs (Lightning's training_step and backward, LBFGS's
 * re-evaluation): the optimizer is paused while it runs, its forward, loss, backward and
 * zero_grad count as themselves, and the rest of it (the user's code in training_step
 * after the loss, the framework's bookkeeping) is the action "closure". */
static PyObject *hook_closure(LoopObject *loop, sw_profiler *p, PyObject *func,
                              PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    pause_optimizer(loop);
    uint64_t outer_parts = loop->closure_parts, start = sw_now_ns();
    loop->closure_parts = 0;
    loop->closure_depth++;
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->closure_depth--;
    /* Its own time, recorded as one span when it ends, as the optimizer's: the batches a
     * forward in it consumes were fetched outside it, so no span may enclose the parts. */
    uint64_t own = end - start > loop->closure_parts ? end - start - loop->closure_parts : 0;
    loop->closure_parts = outer_parts;
    part_took(loop, end - start); /* a closure inside a closure */
    if ((p = loop->owner->p) != NULL)
        sw_record(p, loop->closure, end - own, end);
    resume_optimizer(loop);
    return result;
}

static PyObject *make_hook(LoopObject *loop, hook_kind kind, PyObject *original);

/* The optimizer step pre-hook's answer: its (args, kwargs) with the closure wrapped in a
 * closure hook, or None (no closure; anything unexpected: the step runs as it was). */
static PyObject *wrap_closure(LoopObject *loop, PyObject *args, PyObject *kwargs) {
    if (loop->closure == SW_ID_NONE)
        Py_RETURN_NONE;
    PyObject *closure = NULL, *hook = NULL, *new_args = NULL, *new_kwargs = NULL, *out = NULL;
    int positional = PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 2; /* (self, closure) */
    if (positional)
        closure = PyTuple_GET_ITEM(args, 1);
    else if (PyDict_Check(kwargs))
        closure = PyDict_GetItemWithError(kwargs, loop->closure_key);
    if (closure == NULL || closure == Py_None || !PyCallable_Check(closure))
        goto done;
    if ((hook = make_hook(loop, HOOK_CLOSURE, closure)) == NULL)
        goto done;
    if (positional) {
        Py_ssize_t n = PyTuple_GET_SIZE(args);
        if ((new_args = PyTuple_New(n)) == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(new_args, i, Py_NewRef(i == 1 ? hook : PyTuple_GET_ITEM(args, i)));
        new_kwargs = Py_NewRef(kwargs);
    } else {
        new_args = Py_NewRef(args);
        if ((new_kwargs = PyDict_Copy(kwargs)) == NULL ||
            PyDict_SetItem(new_kwargs, loop->closure_key, hook) < 0)
            goto done;
    }
    out = PyTuple_Pack(2, new_args, new_kwargs);
done:
    Py_XDECREF(hook);
    Py_XDECREF(new_args);
    Py_XDECREF(new_kwargs);
    if (out == NULL) {
        PyErr_Clear(); /* never fail the step for the profiler's sake */
        Py_RETURN_NONE;
    }
    return out;
}

static void optimizer_pre(LoopObject *loop, sw_profiler *p) {
    if (++loop->optimizer_depth != 1)
        return;
    uint64_t now = sw_now_ns();
    join(loop, p, 1, now, 0);
    loop->optimizer_funcs = funcs_begin(loop, p, loop->optimizer);
    loop->optimizer_start = sw_now_ns();
    loop->optimizer_inner = 0;
    loop->optimizer_paused = 0;
}

/* The outermost Optimizer.step of `optimizer` ended: its own time, and the step's boundary? */
static void optimizer_post(LoopObject *loop, sw_profiler *p, const void *optimizer) {
    if (loop->optimizer_depth == 0 || --loop->optimizer_depth > 0)
        return;
    uint64_t now = sw_now_ns();
    funcs_end(loop, loop->optimizer_funcs, loop->optimizer);
    loop->optimizer_funcs = NULL;
    uint64_t took = now - loop->optimizer_start;
    took = took > loop->optimizer_inner ? took - loop->optimizer_inner : 0;
    sw_record(p, loop->optimizer, now - took, now);
    loop->step_last = now;
    if (loop->rule == RULE_MANUAL)
        return;
    set_rule(loop, p, RULE_OPTIMIZER);
    if (loop->external)
        return; /* the front end ends the step (Loop.step_end) */
    if (loop->boundary == NULL)
        loop->boundary = optimizer;
    if (optimizer != loop->boundary) {
        loop->other_steps = optimizer == loop->other ? loop->other_steps + 1 : 1;
        loop->other = optimizer;
        if (loop->other_steps < 2)
            return;
        loop->boundary = optimizer; /* it steps on its own: the loop that matters now */
    }
    loop->other_steps = 0;
    close_step(loop, p, loop->step_last);
}

/* ------------------------------------------------------------------------------------------
 * Hook: the callables that replace torch's entry points
 * ---------------------------------------------------------------------------------------- */

static PyObject *Hook_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HookObject *self = (HookObject *)callable;
    LoopObject *loop = self->loop;
    if (loop == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: hook was cleared");
        return NULL;
    }
    sw_profiler *p = loop->active ? loop->owner->p : NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    switch (self->kind) {
    case HOOK_OPTIMIZER_PRE:
        if (p == NULL)
            Py_RETURN_NONE;
        optimizer_pre(loop, p);
        if (loop->optimizer_depth != 1 || nargs < 3)
            Py_RETURN_NONE;
        return wrap_closure(loop, args[1], args[2]); /* (optimizer, args, kwargs) */
    case HOOK_OPTIMIZER_POST:
        if (p != NULL)
            optimizer_post(loop, p, nargs >= 1 ? (const void *)args[0] : NULL);
        Py_RETURN_NONE;
    default:
        break;
    }
    if (self->func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: hook was cleared");
        return NULL;
    }
    if (p == NULL)
        return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    switch (self->kind) {
    case HOOK_NEXT:
        return hook_next(loop, p, self->func, args, nargsf, kwnames);
    case HOOK_CALL:
        if (nargs < 1)
            return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
        return hook_call(loop, p, self->func, args, nargsf, kwnames, args[0], 1);
    case HOOK_FUNCTION:
        return hook_call(loop, p, self->func, args, nargsf, kwnames, callable, 0);
    case HOOK_LOSS:
        return hook_loss(loop, p, self->func, args, nargsf, kwnames);
    case HOOK_ZERO_GRAD:
        return hook_zero_grad(loop, p, self->func, args, nargsf, kwnames);
    case HOOK_ITER:
        return hook_iter(loop, p, self->func, args, nargsf, kwnames);
    case HOOK_CLOSURE:
        return hook_closure(loop, p, self->func, args, nargsf, kwnames);
    default:
        return hook_backward(loop, p, self->func, args, nargsf, kwnames);
    }
}

static int Hook_traverse(HookObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->loop);
    Py_VISIT(self->func);
    Py_VISIT(self->dict);
    return 0;
}

static int Hook_clear(HookObject *self) {
    Py_CLEAR(self->loop);
    Py_CLEAR(self->func);
    Py_CLEAR(self->dict);
    return 0;
}

static void Hook_dealloc(HookObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    Hook_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Hook_repr(HookObject *self) {
    return PyUnicode_FromFormat("<stepwatch loop hook %s of %R>", hook_names[self->kind],
                                self->func ? self->func : Py_None);
}

static PyMemberDef Hook_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(HookObject, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HookObject, weakrefs), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(HookObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Hook_slots[] = {
    {Py_tp_doc, "A torch entry point wrapped by a Loop (see Loop.hook)."},
    {Py_tp_members, Hook_members},
    {Py_tp_getset, Hook_getset},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, sw_py_bind_as_method}, /* patched onto a class: gets the instance */
    {Py_tp_repr, Hook_repr},
    {Py_tp_traverse, Hook_traverse},
    {Py_tp_clear, Hook_clear},
    {Py_tp_dealloc, Hook_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_hook_spec = {
    .name = "stepwatch.LoopHook",
    .basicsize = sizeof(HookObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Hook_slots,
};

/* ------------------------------------------------------------------------------------------
 * Loop
 * ---------------------------------------------------------------------------------------- */

static PyObject *Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler",     "data",          "forward",
                               "loss",         "backward",      "optimizer",
                               "zero_grad",    "train",         "valid",
                               "loss_type",    "grad_enabled",  "optimizer_exists",
                               "closure",      "startup",       "loader_startup",
                               NULL};
    enum { NACTIONS = 6, NOPTIONAL = 3 };
    PyObject *profiler, *actions[NACTIONS], *train, *valid, *loss_type, *grad_enabled,
        *optimizer_exists, *optional[NOPTIONAL] = {Py_None, Py_None, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOO|$OOO:Loop", keywords,
                                     &profiler, &actions[0], &actions[1], &actions[2],
                                     &actions[3], &actions[4], &actions[5], &train, &valid,
                                     &loss_type, &grad_enabled, &optimizer_exists,
                                     &optional[0], &optional[1], &optional[2]))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type)) {
        PyErr_SetString(PyExc_TypeError, "Loop: profiler must be a stepwatch.Profiler");
        return NULL;
    }
    if (!PyType_Check(loss_type) || !PyCallable_Check(grad_enabled) ||
        !PyCallable_Check(optimizer_exists)) {
        PyErr_SetString(PyExc_TypeError, "Loop: loss_type must be a type, grad_enabled and "
                                         "optimizer_exists callables");
        return NULL;
    }
    ProfilerObject *owner = (ProfilerObject *)profiler;
    uint32_t ids[NACTIONS], phases[2] = {SW_PHASE_NONE, SW_PHASE_NONE};
    for (int i = 0; i < NACTIONS; i++)
        if (sw_py_named_id(actions[i], st->action_type, owner, "Loop", keywords[i + 1],
                           &ids[i]) < 0)
            return NULL;
    uint32_t more[NOPTIONAL] = {SW_ID_NONE, SW_ID_NONE, SW_ID_NONE}; /* None: not timed */
    for (int i = 0; i < NOPTIONAL; i++)
        if (optional[i] != Py_None &&
            sw_py_named_id(optional[i], st->action_type, owner, "Loop", keywords[12 + i],
                           &more[i]) < 0)
            return NULL;
    int phases_on = train != Py_None && valid != Py_None;
    if (phases_on &&
        (sw_py_named_id(train, st->phase_type, owner, "Loop", "train", &phases[0]) < 0 ||
         sw_py_named_id(valid, st->phase_type, owner, "Loop", "valid", &phases[1]) < 0))
        return NULL;

    LoopObject *self = (LoopObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->shape = PyUnicode_InternFromString("shape");
    self->training = PyUnicode_InternFromString("training");
    self->loss_key = PyUnicode_InternFromString("loss");
    self->closure_key = PyUnicode_InternFromString("closure");
    if (self->shape == NULL || self->training == NULL || self->loss_key == NULL ||
        self->closure_key == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->data = ids[0];
    self->forward = ids[1];
    self->loss = ids[2];
    self->backward = ids[3];
    self->optimizer = ids[4];
    self->zero_grad = ids[5];
    self->closure = more[0];
    self->startup = more[1];
    self->loader_startup = more[2];
    self->installed_at = sw_now_ns();
    self->phases[TRAIN] = phases[0];
    self->phases[VALID] = phases[1];
    self->loss_type = Py_NewRef(loss_type);
    self->grad_enabled = Py_NewRef(grad_enabled);
    self->optimizer_exists = Py_NewRef(optimizer_exists);
    self->active = 1;
    self->kind = NO_STEP;
    self->last_kind = NO_STEP;
    self->phase_in = SW_PHASE_NONE;
    self->inside = SW_ID_NONE;
    self->rule = RULE_NONE;
    return (PyObject *)self;
}

/* hook(kind, original=None): the Hook of kind wrapping original (the optimizer hooks wrap
 * nothing). */
static PyObject *Loop_hook(LoopObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"kind", "original", NULL};
    const char *kind_name;
    PyObject *original = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|O:hook", keywords, &kind_name, &original))
        return NULL;
    hook_kind kind = HOOK_KINDS;
    for (int k = 0; k < HOOK_KINDS; k++)
        if (strcmp(kind_name, hook_names[k]) == 0)
            kind = (hook_kind)k;
    if (kind == HOOK_KINDS || kind == HOOK_CLOSURE)
        return PyErr_Format(PyExc_ValueError,
                            "hook: unknown kind %R (next, call, function, loss, backward, "
                            "zero_grad, optimizer_pre, optimizer_post, iter)",
                            PyTuple_GET_ITEM(args, 0));
    int wraps = kind != HOOK_OPTIMIZER_PRE && kind != HOOK_OPTIMIZER_POST;
    if (wraps && !PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError, "hook %s: original must be callable", kind_name);
    return make_hook(self, kind, wraps ? original : NULL);
}

/* A Hook of kind calling original (NULL for the optimizer hooks). */
static PyObject *make_hook(LoopObject *loop, hook_kind kind, PyObject *original) {
    module_state *st = sw_py_state_of_type(Py_TYPE(loop));
    if (st == NULL)
        return NULL;
    HookObject *hook = PyObject_GC_New(HookObject, st->hook_type);
    if (hook == NULL)
        return NULL;
    hook->loop = (LoopObject *)Py_NewRef(loop);
    hook->func = Py_XNewRef(original);
    hook->kind = kind;
    hook->dict = NULL;
    hook->weakrefs = NULL;
    hook->vectorcall = Hook_vectorcall;
    PyObject_GC_Track(hook);
    return (PyObject *)hook;
}

/* close(): end the step in progress, leave the train/valid phase, write the notes; the
 * hooks call straight through from now on (uninstrument). */
static PyObject *Loop_close(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active)
        close_all(self, p);
    self->active = 0;
    Py_RETURN_NONE;
}

/* read_grad_mode(path) -> bool: read grad mode through c10::GradMode::is_enabled() of the
 * torch library at path (already loaded by `import torch`; RTLD_NOLOAD loads nothing), which
 * spares a Python call per batch and per forward. False, and torch.is_grad_enabled is kept,
 * when it is not there. */
static PyObject *Loop_read_grad_mode(LoopObject *self, PyObject *path) {
    const char *file = PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
    if (file == NULL)
        return PyErr_Occurred() ? NULL
                                : PyErr_Format(PyExc_TypeError, "read_grad_mode(path: str)");
    void *lib = dlopen(file, RTLD_NOW | RTLD_NOLOAD);
    void *fn = lib ? dlsym(lib, "_ZN3c108GradMode10is_enabledEv") : NULL;
    if (lib != NULL)
        dlclose(lib); /* torch keeps it loaded */
    /* C's bool and C++'s bool are the same type in every ABI torch is built for. */
    self->grad_mode = (bool (*)(void))fn;
    return PyBool_FromLong(fn != NULL);
}

/* mark(batch_size=0): stepwatch.step(). The step in progress ends here and the next begins
 * (at the batch fetched for it, if one was); from the first mark on, only marks make steps. */
static PyObject *Loop_mark(LoopObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint32_t batch = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "mark(batch_size=0)");
        return NULL;
    }
    if (nargs == 1 && sw_py_parse_batch_size(args[0], &batch) < 0)
        return NULL;
    sw_profiler *p = self->owner->p;
    if (p == NULL || !self->active)
        Py_RETURN_NONE;
    if (self->rule != RULE_MANUAL) {
        close_step(self, p, self->step_last); /* what the rules had begun */
        set_rule(self, p, RULE_MANUAL);
        self->last_end = 0;
    }
    uint64_t now = sw_now_ns();
    if (self->kind != NO_STEP) {
        flush_pending(self, p, self->kind, 1);
        close_step(self, p, now);
    }
    self->last_end = 0;
    int kind = grad_kind(self);
    open_step(self, p, kind, now, 0);
    take_all(self, p); /* the batches fetched for it */
    if (batch != 0) {
        self->step_samples = batch;
        sw_step_set_batch_size(p, batch);
    }
    Py_RETURN_NONE;
}

/* mark_end(): the end of a `with stepwatch.step():` block. */
static PyObject *Loop_mark_end(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active && self->rule == RULE_MANUAL && self->kind != NO_STEP) {
        flush_pending(self, p, self->kind, 1);
        close_step(self, p, 0);
    }
    Py_RETURN_NONE;
}

/* bound_steps(on): a front end that knows the loop (stepwatch.transformers) ends the
 * training steps with step_end(); the optimizer step no longer does. */
static PyObject *Loop_bound_steps(LoopObject *self, PyObject *on) {
    int value = PyObject_IsTrue(on);
    if (value < 0)
        return NULL;
    self->external = value;
    Py_RETURN_NONE;
}

/* step_end(): the training step in progress ends now (the Trainer's on_step_end). */
static PyObject *Loop_step_end(LoopObject *self, PyObject *unused) {
    sw_profiler *p = self->owner->p;
    if (p != NULL && self->active && self->rule != RULE_MANUAL && self->kind == TRAIN) {
        flush_pending(self, p, TRAIN, 1);
        close_step(self, p, 0);
    }
    Py_RETURN_NONE;
}

/* module_begin(module) -> bool: for forward="hooks" (torch's global forward pre-hook). */
static PyObject *Loop_module_begin(LoopObject *self, PyObject *module) {
    sw_profiler *p = self->active ? self->owner->p : NULL;
    return PyBool_FromLong(p != NULL && call_begin(self, p, module, 1, NULL, 0));
}

/* module_end(output): the forward hook of that module. */
static PyObject *Loop_module_end(LoopObject *self, PyObject *output) {
    call_end(self, output);
    Py_RETURN_NONE;
}

static int Loop_traverse(LoopObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->loss_type);
    Py_VISIT(self->grad_enabled);
    Py_VISIT(self->optimizer_exists);
    Py_VISIT(self->loss_frame);
    for (int i = 0; i < MAX_ITERATORS; i++)
        Py_VISIT(self->iterators[i]);
    return 0;
}

static int Loop_clear(LoopObject *self) {
    /* owner stays until dealloc: hooks read it on every call. */
    Py_CLEAR(self->loss_type);
    Py_CLEAR(self->grad_enabled);
    Py_CLEAR(self->optimizer_exists);
    Py_CLEAR(self->loss_frame);
    for (int i = 0; i < MAX_ITERATORS; i++)
        Py_CLEAR(self->iterators[i]);
    return 0;
}

static void Loop_dealloc(LoopObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Loop_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->shape);
    Py_CLEAR(self->training);
    Py_CLEAR(self->loss_key);
    Py_CLEAR(self->closure_key);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Loop_get_rule(LoopObject *self, void *closure) {
    return PyUnicode_FromString(rule_names[self->rule]);
}

static PyMethodDef Loop_methods[] = {
    {"hook", (PyCFunction)(void (*)(void))Loop_hook, METH_VARARGS | METH_KEYWORDS,
     "hook(kind, original=None): a callable to patch in for original. kind: 'next' "
     "(DataLoader iterator __next__), 'call' (nn.Module.__call__), 'function' (a compiled "
     "function), 'loss' (a functional loss), 'backward' (torch.autograd.backward), "
     "'zero_grad', 'optimizer_pre'/'optimizer_post' (global step hooks), 'iter' "
     "(DataLoader.__iter__)."},
    {"close", (PyCFunction)Loop_close, METH_NOARGS,
     "End the step in progress, leave the train/valid phase; the hooks call straight through "
     "from now on."},
    {"read_grad_mode", (PyCFunction)Loop_read_grad_mode, METH_O,
     "read_grad_mode(path) -> bool: read grad mode from c10::GradMode::is_enabled in the "
     "loaded torch library at path, not through torch.is_grad_enabled."},
    {"mark", (PyCFunction)(void (*)(void))Loop_mark, METH_FASTCALL,
     "mark(batch_size=0): a step boundary by hand (stepwatch.step())."},
    {"mark_end", (PyCFunction)Loop_mark_end, METH_NOARGS,
     "End the step begun by mark() (the end of `with stepwatch.step():`)."},
    {"bound_steps", (PyCFunction)Loop_bound_steps, METH_O,
     "bound_steps(on): while on, training steps end at step_end(), not at the optimizer "
     "step."},
    {"step_end", (PyCFunction)Loop_step_end, METH_NOARGS,
     "step_end(): end the training step in progress now."},
    {"module_begin", (PyCFunction)Loop_module_begin, METH_O,
     "module_begin(module) -> bool: begin the outermost module call (False when inside one)."},
    {"module_end", (PyCFunction)Loop_module_end, METH_O,
     "module_end(output): end the outermost module call."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Loop_getset[] = {
    {"rule", (getter)Loop_get_rule, NULL,
     "How steps are found now: none, dataloader, forward, backward, optimizer or manual.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Loop_slots[] = {
    {Py_tp_doc, "Loop(profiler, data, forward, loss, backward, optimizer, zero_grad, train, "
                "valid, loss_type, grad_enabled, optimizer_exists, *, closure=None, "
                "startup=None, loader_startup=None): the per-step state of stepwatch.torch "
                "and the C hooks that keep it. train/valid None: no phases; the optional "
                "actions None: not timed."},
    {Py_tp_new, Loop_new},
    {Py_tp_methods, Loop_methods},
    {Py_tp_getset, Loop_getset},
    {Py_tp_traverse, Loop_traverse},
    {Py_tp_clear, Loop_clear},
    {Py_tp_dealloc, Loop_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_loop_spec = {
    .name = "stepwatch.Loop",
    .basicsize = sizeof(LoopObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Loop_slots,
};
