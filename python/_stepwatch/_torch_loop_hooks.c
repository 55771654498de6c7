/*
 * _torch_loop_hooks.c — the torch hooks of stepwatch.torch's Loop
 * (stepwatch._stepwatch.LoopHook).
 *
 * stepwatch.torch.instrument() patches a few torch entry points (the DataLoader iterators'
 * __next__, nn.Module.__call__, torch.autograd.backward, the zero_grads, the functional
 * losses) and registers torch's global optimizer step hooks. They run several times per
 * step, so each is a Hook: a small C callable that calls through to the original and tells
 * the Loop what happened, with no Python frame of its own. The hooks time the events and
 * name them; where a step begins and ends is the rules' (_torch_loop_rules.c).
 *
 * Categories: data = the loader's next(); forward = the outermost module call (or compiled
 * function); loss = a loss module, a functional loss, a plain module returning a scalar
 * after the forward, else (training) the time from the forward's end to the backward;
 * backward; optimizer (its own time: a closure's forward and backward are theirs, the rest
 * of the closure is "closure"); zero_grad. A module called while a batch is fetched is the
 * data pipeline's. DataLoader.__iter__ is the loader's start-up (its workers start). A
 * Tensor.to or .cuda called outside the model while a fetched batch waits for its forward is
 * the batch's copy to the device (h2d_copy, data); anywhere else it costs one check.
 *
 * Hooks never raise on their own account and never swallow the user's exceptions: a closed
 * profiler or a closed Loop makes them call straight through, and once the call a hook wraps
 * raised, its exception waits aside (sw_py_set_aside) while the hook's own work runs: that
 * work may run Python (is there an optimizer?, a function profiler's watcher, the device
 * clock, torch's allocator at a step's end). An optimizer step that raised gets no post-hook
 * from torch: the next step finds it open but not running, and drops it.
 */
#include "_torch_loop.h"

#include <frameobject.h>
#include <structmember.h>
#include <string.h>

typedef enum {
    HOOK_NEXT,
    HOOK_CALL,
    HOOK_FUNCTION, /* a compiled function: timed as the forward */
    HOOK_LOSS,     /* a functional loss (torch.nn.functional.cross_entropy, ...) */
    HOOK_BACKWARD,
    HOOK_ZERO_GRAD,
    HOOK_OPTIMIZER_PRE,
    HOOK_OPTIMIZER_POST,
    HOOK_ITER,    /* DataLoader.__iter__: the loader's start-up */
    HOOK_CLOSURE, /* the closure an optimizer step was given (made by the pre-hook) */
    HOOK_COPY,    /* Tensor.to, Tensor.cuda, a batch class's to: the batch's copy (h2d_copy) */
    HOOK_KINDS
} hook_kind;

static const char *const hook_names[HOOK_KINDS] = {
    "next",          "call",           "function", "loss",    "backward", "zero_grad",
    "optimizer_pre", "optimizer_post", "iter",     "closure", "copy"};

typedef struct {
    PyObject_HEAD LoopObject *loop;
    PyObject *func; /* the original; NULL for the optimizer hooks */
    hook_kind kind;
    PyObject *dict; /* __wrapped__ and friends from functools.update_wrapper */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} HookObject;

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

/* (Inside a closure the optimizer stays paused until the closure returns.) */
static void resume_optimizer(LoopObject *loop) {
    if (loop->optimizer_paused && loop->closure_depth == 0) {
        loop->optimizer_paused = 0;
        loop->optimizer_inner += sw_now_ns() - loop->paused_at;
    }
}

/* ------------------------------------------------------------------------------------------
 * The events
 * ---------------------------------------------------------------------------------------- */

/* An outermost module (or compiled function) call begins; returns 0 when it is not one to
 * time (inside another, in the data pipeline). */
int sw_py_loop_call_begin(LoopObject *loop, sw_profiler *p, PyObject *module, int is_module,
                          PyObject *const *inputs, Py_ssize_t ninputs) {
    if (loop->inside != SW_ID_NONE || loop->in_fetch || !loop->active)
        return 0;
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    loop->call_start = now;
    loop->candidate = 0;
    loop->loss_inside = 0;
    if (is_module && PyObject_TypeCheck(module, (PyTypeObject *)loop->loss_type)) {
        sw_py_loop_join(loop, p, 0, now, 0);
        loop->inside = loop->loss;
        sw_begin(p, loop->loss);
        return 1;
    }
    int kind = sw_py_loop_forward_kind(loop, is_module ? module : NULL);
    loop->forward_caller = PyEval_GetFrame(); /* kept on the frame after the first time */
    /* The batches it consumes: its step's, whenever they were fetched (_torch_loop_batches.c). */
    char take[MAX_QUEUED];
    uint64_t earliest = 0;
    int taken = loop->nqueued == 0
                    ? 0
                    : sw_py_loop_take(loop, sw_py_loop_matched_input(loop, inputs, ninputs), take,
                                      &earliest);
    int began = sw_py_loop_forward_begins(loop, p, kind, now, module, taken > 0, earliest);
    if (earliest != 0)
        sw_py_loop_consume(loop, p, take);
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
void sw_py_loop_call_end(LoopObject *loop, PyObject *result) {
    sw_id action = loop->inside;
    sw_profiler *p = loop->owner->p;
    loop->inside = SW_ID_NONE;
    if (p == NULL || action == SW_ID_NONE)
        return;
    uint64_t now = sw_now_ns();
    sw_py_aside aside = {0};
    if (result == NULL) /* the ends below tell the watchers, which may run Python */
        sw_py_set_aside(&aside);
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
    if (result == NULL)
        sw_py_put_back(&aside);
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
            sw_py_loop_flush_pending(loop, p, NO_STEP, 0);
            break;
        }
    /* The batches of loops that are over, and with them what was held for their next step
     * (a zero_grad after the last update): in no step. */
    if (loop->kind == NO_STEP && sw_py_loop_drop(loop, p, 1) > 0)
        sw_py_loop_flush_pending(loop, p, NO_STEP, 0);
    int slot = loop->next_iterator;
    loop->matched[slot] = 0;
    loop->next_iterator = (slot + 1) % MAX_ITERATORS;
    PyObject *ref = PyWeakref_NewRef(iterator, NULL);
    if (ref == NULL)
        PyErr_Clear(); /* not weakly referable: every batch looks new, which only costs this */
    Py_XSETREF(loop->iterators[slot], ref);
    return slot;
}

/* A batch of a type not seen last: the front end may time its own to (a batch class). */
static void new_batch_type(LoopObject *loop, PyObject *batch) {
    PyObject *type = (PyObject *)Py_TYPE(batch);
    Py_XSETREF(loop->batch_type, Py_NewRef(type));
    PyObject *r = PyObject_CallOneArg(loop->on_batch_type, type);
    if (r == NULL)
        PyErr_Clear(); /* never fail the fetch for the profiler's sake */
    Py_XDECREF(r);
}

/* The loader's next() raised: a StopIteration says the loader is done, which may end a step
 * (Python: torch's allocator); anything else only ends the fetch. */
static PyObject *fetch_raised(LoopObject *loop, sw_py_funcs *funcs) {
    int loader_done = PyErr_ExceptionMatches(PyExc_StopIteration);
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    funcs_end(loop, funcs, loop->data);
    sw_profiler *p = loop->owner->p;
    if (p != NULL) {
        loop->may_consume = 1;
        resume_optimizer(loop);
        if (loader_done)
            sw_py_loop_loader_done(loop, p);
    }
    sw_py_put_back(&aside);
    return NULL;
}

static PyObject *hook_next(LoopObject *loop, sw_profiler *p, PyObject *func, PyObject *const *args,
                           size_t nargsf, PyObject *kwnames) {
    if (loop->in_fetch || PyVectorcall_NARGS(nargsf) < 1)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    int slot = iterator_slot(loop, p, args[0]);
    int kind = sw_py_loop_grad_kind(loop);
    pause_optimizer(loop);
    sw_py_funcs *funcs = funcs_begin(loop, p, loop->data);
    loop->in_fetch++;
    uint64_t start = sw_now_ns();
    PyObject *batch = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->in_fetch--;
    part_took(loop, end - start);
    if (batch == NULL)
        return fetch_raised(loop, funcs);
    funcs_end(loop, funcs, loop->data);
    if ((p = loop->owner->p) == NULL)
        return batch;
    if (loop->rule == RULE_MANUAL) {
        pending_event e = {loop->data, kind,  sw_py_batch_size(batch, loop->shape),
                           slot,       start, end};
        sw_py_loop_settle(loop, p, &e);
    } else { /* held until a forward consumes it */
        if (loop->on_batch_type != NULL && (PyObject *)Py_TYPE(batch) != loop->batch_type)
            new_batch_type(loop, batch);
        PyObject *leaf = sw_py_batch_leaf(batch, loop->shape);
        queued_batch b = {.iterator = slot,
                          .batch_size = sw_py_batch_size(batch, loop->shape),
                          .key = leaf == NULL ? NULL : PyWeakref_NewRef(leaf, NULL),
                          .start = start,
                          .end = end};
        if (leaf != NULL && b.key == NULL)
            PyErr_Clear(); /* not weakly referable (a number): only consumed in order */
        sw_py_loop_enqueue(loop, p, &b);
    }
    loop->may_consume = 1;
    resume_optimizer(loop);
    return batch;
}

static PyObject *hook_backward(LoopObject *loop, sw_profiler *p, PyObject *func,
                               PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_backward || loop->inside != SW_ID_NONE)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    sw_py_loop_user_loss_ended(loop); /* the backward began inside the user's loss function */
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    if (loop->kind == VALID && loop->last_forward_by_flag)
        loop->eval_is_train = 1; /* a model in eval() mode is being trained */
    /* No forward took the batches (a model without nn.Module calls): the backward does. */
    char take[MAX_QUEUED];
    uint64_t earliest = 0;
    if (loop->nqueued > 0 && (loop->kind != TRAIN || loop->step_forwards == 0))
        sw_py_loop_take(loop, -1, take, &earliest);
    sw_py_loop_join(loop, p, 1, now, earliest);
    if (earliest != 0)
        sw_py_loop_consume(loop, p, take);
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
    if (result == NULL) /* out of memory in the backward? (_oom.c) */
        sw_py_oom_seen_pending(loop->owner);
    if ((p = loop->owner->p) == NULL)
        return result;
    /* The rules below call Python (is there an optimizer?): the backward's exception, if
     * any, waits aside, else it would be lost (a SystemError instead). */
    sw_py_aside aside = {0};
    if (result == NULL)
        sw_py_set_aside(&aside);
    sw_end(p, loop->backward);
    loop->step_last = sw_now_ns();
    part_took(loop, loop->step_last - now);
    loop->may_consume = 1; /* the next micro-batch's forward takes its batch */
    sw_py_loop_backward_done(loop, p);
    resume_optimizer(loop);
    if (result == NULL)
        sw_py_put_back(&aside);
    return result;
}

static PyObject *hook_zero_grad(LoopObject *loop, sw_profiler *p, PyObject *func,
                                PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (loop->in_zero_grad || loop->inside != SW_ID_NONE || loop->in_fetch)
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    pause_optimizer(loop);
    sw_py_funcs *funcs = funcs_begin(loop, p, loop->zero_grad);
    loop->in_zero_grad = 1;
    sw_device_mark(p, loop->zero_grad, 1); /* timed on the GPU when a step is open */
    uint64_t start = sw_now_ns();
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    sw_py_aside aside = {0};
    if (result == NULL) /* the device clock and the watcher may run Python */
        sw_py_set_aside(&aside);
    if (loop->owner->p == p)
        sw_device_mark(p, loop->zero_grad, 0);
    loop->in_zero_grad = 0;
    part_took(loop, end - start);
    funcs_end(loop, funcs, loop->zero_grad);
    if ((p = loop->owner->p) != NULL) {
        pending_event e = {loop->zero_grad, TRAIN, 0, 0, start, end};
        sw_py_loop_settle(loop, p, &e);
    }
    resume_optimizer(loop);
    if (result == NULL)
        sw_py_put_back(&aside);
    return result;
}

/* Tensor.to, Tensor.cuda (and a batch class's own to): timed as the batch's copy to the device
 * only while a fetched batch waits for its forward, outside the model, the loss, a backward,
 * an optimizer step, a fetch and another copy (a batch class's to calling Tensor.to); every
 * other call (the model's own casts, model.to) costs these checks and calls through. On a GPU
 * the device timing records its events at the copy's boundaries (sw_device_mark). */
static PyObject *hook_copy(LoopObject *loop, sw_profiler *p, PyObject *func, PyObject *const *args,
                           size_t nargsf, PyObject *kwnames) {
    if (loop->in_copy || loop->inside != SW_ID_NONE || loop->in_fetch || loop->in_backward ||
        loop->in_zero_grad || loop->optimizer_depth > 0 || loop->copy == SW_ID_NONE ||
        !sw_py_loop_batch_held(loop))
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    loop->in_copy = 1;
    sw_device_mark(p, loop->copy, 1);
    uint64_t start = sw_now_ns();
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    sw_py_aside aside = {0};
    if (result == NULL) /* the device clock may run Python */
        sw_py_set_aside(&aside);
    if (loop->owner->p == p)
        sw_device_mark(p, loop->copy, 0);
    loop->in_copy = 0;
    if (result != NULL && loop->owner->p == p)
        sw_py_loop_copied(loop, start, end);
    if (result == NULL)
        sw_py_put_back(&aside);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * The loss as the user's function: `loss = my_loss(out, y)`, which does its own work and
 * calls a torch functional loss. The whole function, called between the forward and the
 * backward, is the loss: from the forward's end until the function returns, which a
 * profile function (the thread's, only while it runs; never when another is set) sees.
 * ---------------------------------------------------------------------------------------- */

void sw_py_loop_user_loss_ended(LoopObject *loop) {
    if (loop->loss_frame == NULL)
        return;
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
        sw_py_loop_user_loss_ended(loop);
    return 0;
}

/* The user's function a functional loss was called in (new reference), or NULL: the
 * outermost frame below the one that called the step's forward, when that frame is on the
 * stack within 8 calls (a loss called by the loop itself, or by Lightning's training_step
 * that also called the forward, is the torch call alone). The functional losses sit behind
 * torch.py's Python wrapper (_traceable): its caller is the loss's. */
static PyObject *user_loss_frame(LoopObject *loop) {
    if (loop->forward_end == 0 || loop->loss_seen || loop->forward_caller == NULL ||
        PyThreadState_Get()->c_profilefunc != NULL)
        return NULL;
    PyFrameObject *frame = PyEval_GetFrame();
    PyFrameObject *caller = frame != NULL ? PyFrame_GetBack(frame) : NULL;
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
static PyObject *hook_loss(LoopObject *loop, sw_profiler *p, PyObject *func, PyObject *const *args,
                           size_t nargsf, PyObject *kwnames) {
    if (loop->inside != SW_ID_NONE || loop->in_fetch) {
        loop->loss_inside |= loop->inside == loop->forward;
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    }
    if (loop->loss_frame != NULL) /* inside the user's loss function: timed whole */
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t now = sw_now_ns();
    pause_optimizer(loop);
    sw_py_loop_join(loop, p, 0, now, 0);
    PyObject *user = user_loss_frame(loop);
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
    if (result == NULL) /* out of memory in the loss? (_oom.c) */
        sw_py_oom_seen_pending(loop->owner);
    sw_py_loop_call_end(loop, result);
    return result;
}

static PyObject *hook_call(LoopObject *loop, sw_profiler *p, PyObject *func, PyObject *const *args,
                           size_t nargsf, PyObject *kwnames, PyObject *module, int is_module) {
    /* the call's inputs: after the module, positional then keyword values */
    Py_ssize_t ninputs = PyVectorcall_NARGS(nargsf) - is_module +
                         (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (!sw_py_loop_call_begin(loop, p, module, is_module, args + is_module, ninputs))
        return PyObject_Vectorcall(func, args, nargsf, kwnames);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    if (result == NULL) /* out of memory in the model? (_oom.c: named from the traceback) */
        sw_py_oom_seen_pending(loop->owner);
    sw_py_loop_call_end(loop, result);
    return result;
}

/* DataLoader.__iter__: a new loop over a loader. Making its iterator starts the worker
 * processes (each epoch, unless persistent_workers): the loader's start-up, data of the
 * step that consumes the loop's first batch. */
static PyObject *hook_iter(LoopObject *loop, sw_profiler *p, PyObject *func, PyObject *const *args,
                           size_t nargsf, PyObject *kwnames) {
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
    queued_batch b = {
        .startup = 1, .iterator = iterator_slot(loop, p, iterator), .start = start, .end = end};
    sw_py_loop_enqueue(loop, p, &b);
    loop->last_end = 0; /* a new loop, also over the same persistent iterator */
    return iterator;
}

/* The closure an optimizer step runs (Lightning's training_step and backward, LBFGS's
 * re-evaluation): the optimizer is paused while it runs, its forward, loss, backward and
 * zero_grad count as themselves, and the rest of it (the user's code in training_step
 * after the loss, the framework's bookkeeping) is the action "closure", recorded as one
 * span when it returns, as the optimizer's own time: the batches a forward in it consumes
 * were fetched outside it, so no span may enclose the parts. */
static PyObject *hook_closure(LoopObject *loop, sw_profiler *p, PyObject *func,
                              PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    pause_optimizer(loop);
    uint64_t outer_parts = loop->closure_parts, start = sw_now_ns();
    loop->closure_parts = 0;
    loop->closure_depth++;
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t end = sw_now_ns();
    loop->closure_depth--;
    uint64_t own = end - start > loop->closure_parts ? end - start - loop->closure_parts : 0;
    loop->closure_parts = outer_parts;
    part_took(loop, end - start); /* a closure inside a closure */
    sw_py_aside aside = {0};
    if (result == NULL) /* the device clock may run Python */
        sw_py_set_aside(&aside);
    if ((p = loop->owner->p) != NULL)
        sw_record(p, loop->closure, end - own, end);
    resume_optimizer(loop);
    if (result == NULL)
        sw_py_put_back(&aside);
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

/* Does an optimizer step run around this one (a step inside a step: Lookahead, ZeRO)? torch
 * calls the pre-hooks from its step wrapper: another frame of that code further up the stack
 * is a step that has not returned. Asked only while a step is open here (no cost otherwise);
 * a nested step's outer frame is a few calls up, 64 is far beyond. */
static int inside_a_step(void) {
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed: torch's step wrapper */
    if (frame == NULL)
        return 0;
    PyCodeObject *wrapper = PyFrame_GetCode(frame);
    PyFrameObject *up = PyFrame_GetBack(frame);
    int found = 0;
    for (int depth = 0; up != NULL && !found && depth < 64; depth++) {
        PyCodeObject *code = PyFrame_GetCode(up);
        found = code == wrapper;
        Py_DECREF(code);
        PyFrameObject *next = PyFrame_GetBack(up);
        Py_DECREF(up);
        up = next;
    }
    Py_XDECREF(up);
    Py_DECREF(wrapper);
    if (PyErr_Occurred()) /* a frame object that could not be made (no memory) */
        PyErr_Clear();
    return found;
}

/* The outermost step open here is not running: it raised (torch calls no post-hook then)
 * and the program went on. It ends now, recorded nowhere: its time stays in the step's
 * "other". */
static void optimizer_dropped(LoopObject *loop, sw_profiler *p) {
    sw_device_mark(p, loop->optimizer, 0); /* marks come in pairs */
    funcs_end(loop, loop->optimizer_funcs, loop->optimizer);
    loop->optimizer_funcs = NULL;
    loop->optimizer_depth = 0;
    loop->optimizer_paused = 0;
}

static void optimizer_pre(LoopObject *loop, sw_profiler *p) {
    if (loop->optimizer_depth > 0 && !inside_a_step())
        optimizer_dropped(loop, p);
    if (++loop->optimizer_depth != 1)
        return;
    uint64_t now = sw_now_ns();
    sw_py_loop_join(loop, p, 1, now, 0);
    loop->optimizer_funcs = funcs_begin(loop, p, loop->optimizer);
    sw_device_mark(p, loop->optimizer, 1); /* its GPU events at its real boundaries */
    loop->optimizer_start = sw_now_ns();
    loop->optimizer_inner = 0;
    loop->optimizer_paused = 0;
}

/* The outermost Optimizer.step of `optimizer` ended: its own time, and the step's boundary? */
static void optimizer_post(LoopObject *loop, sw_profiler *p, const void *optimizer) {
    if (loop->optimizer_depth == 0 || --loop->optimizer_depth > 0)
        return;
    uint64_t now = sw_now_ns();
    sw_device_mark(p, loop->optimizer, 0);
    funcs_end(loop, loop->optimizer_funcs, loop->optimizer);
    loop->optimizer_funcs = NULL;
    uint64_t took = now - loop->optimizer_start;
    took = took > loop->optimizer_inner ? took - loop->optimizer_inner : 0;
    sw_record(p, loop->optimizer, now - took, now);
    loop->step_last = now;
    sw_py_loop_optimizer_done(loop, p, optimizer);
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
    case HOOK_COPY:
        return hook_copy(loop, p, self->func, args, nargsf, kwnames);
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

/* hook(kind, original=None): the Hook of kind wrapping original (the optimizer hooks wrap
 * nothing). */
PyObject *sw_py_loop_hook(LoopObject *self, PyObject *args, PyObject *kwargs) {
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
                            "zero_grad, optimizer_pre, optimizer_post, iter, copy)",
                            PyTuple_GET_ITEM(args, 0));
    int wraps = kind != HOOK_OPTIMIZER_PRE && kind != HOOK_OPTIMIZER_POST;
    if (wraps && !PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError, "hook %s: original must be callable", kind_name);
    return make_hook(self, kind, wraps ? original : NULL);
}

/* A LoopHook of kind calling original (NULL for the optimizer hooks). */
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

PyType_Spec sw_py_hook_spec = {
    .name = "stepwatch.LoopHook",
    .basicsize = sizeof(HookObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Hook_slots,
};
