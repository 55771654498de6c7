/*
 * _torch_loop.h — what the files of stepwatch.torch's Loop share (private to them; the rest
 * of the extension knows only sw_py_loop_spec and sw_py_hook_spec from _stepwatch.h).
 *
 *   _torch_loop.c          the Loop type: made by stepwatch.torch.instrument(), hands out the
 *                          hooks, close(), mark()/mark_end() (stepwatch.step()),
 *                          module_begin/module_end
 *   _torch_loop_rules.c    the step rules: where steps begin and end (optimizer, backward,
 *                          DataLoader, forward, manual), the train/valid phases, the
 *                          held-back events, the notes
 *   _torch_loop_hooks.c    the torch hooks: LoopHook, the C callables patched over torch's
 *                          entry points; each times its event and tells the rules about it
 *   _torch_loop_batches.c  the batches fetched and not consumed yet: which step each
 *                          belongs to, and their copies to the device
 *
 * Calls point down: _torch_loop.c calls the hooks and the rules, the hooks call the rules
 * and the batches, the rules call the batches; never back up (the `layers` test).
 *
 * The Loop holds the profiler, the ids, and the state of the step in progress; the hooks
 * change the state of the calls running now, the rules the state of the step.
 */
#ifndef SW_PY_LOOP_H
#define SW_PY_LOOP_H

#include "_stepwatch.h"

#include <stdbool.h>

enum { TRAIN = 0, VALID = 1, NO_STEP = -1 };

typedef enum {
    RULE_NONE,       /* no step yet, or no backward yet: steps end at the next batch */
    RULE_DATALOADER, /* steps end at the next DataLoader batch (no backward seen) */
    RULE_FORWARD,    /* steps end when the model is called again (no loader, no backward) */
    RULE_BACKWARD,   /* no optimizer object: a training step ends with the backward */
    RULE_OPTIMIZER,  /* a training step ends with the optimizer step */
    RULE_MANUAL,     /* stepwatch.step() */
} step_rule;

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
 * with grad on and runs the forward under no_grad): see _torch_loop_batches.c. */
typedef struct {
    int startup;  /* a loader's start-up, not a batch */
    int iterator; /* its iterator's slot in LoopObject.iterators */
    uint32_t batch_size;
    PyObject *key; /* a weak reference to the batch's first array-like (NULL: it has none or
                      takes no weak reference): identity only, and once the batch is freed
                      (a loop that gives the forward a copy) its address, reused by a new
                      object, matches nothing */
    uint64_t start, end;
    uint64_t copy_start, copy_ns; /* its copy to the device (h2d_copy): its first copy's
                                     start, and the time of all its copies (0: none) */
} queued_batch;

#define MAX_PENDING 8
#define MAX_QUEUED 64   /* batches fetched ahead of their forwards (gradient accumulation) */
#define MAX_ITERATORS 4 /* loaders in use at once (zipped, nested) */
#define MAX_MODULES 4   /* models called in one step (encoder and decoder, teacher, ...) */

typedef struct {
    PyObject_HEAD ProfilerObject *owner;
    sw_id data, forward, loss, backward, optimizer, zero_grad;
    sw_id closure;              /* the rest of an optimizer's closure (SW_ID_NONE: not timed) */
    sw_id startup;              /* from instrument() to the first step (the script's start) */
    sw_id loader_startup;       /* a DataLoader's iterator made (its workers started) */
    sw_id copy;                 /* h2d_copy: the batch's copy to the device (SW_ID_NONE: not
                                   timed) */
    sw_phase phases[2];         /* train, valid; SW_PHASE_NONE when phases are off */
    PyObject *loss_type;        /* module calls of this type are "loss" */
    PyObject *grad_enabled;     /* torch.is_grad_enabled */
    bool (*grad_mode)(void);    /* c10::GradMode::is_enabled, when found (read_grad_mode) */
    PyObject *optimizer_exists; /* callable: has any torch optimizer been made? */
    PyObject *shape, *training, *loss_key, *closure_key; /* interned names */
    PyObject *on_batch_type; /* called with each new type of batch (its own to: patched) */
    PyObject *batch_type;    /* the type of the last batch fetched */
    int active;              /* 0 after close(): every hook calls straight through */

    /* The step in progress (the training thread's; the GIL orders the hooks). */
    int kind; /* TRAIN, VALID or NO_STEP */
    int step_fetches, step_forwards;
    uint32_t step_samples;
    const void *step_modules[MAX_MODULES]; /* the step's outermost calls (identities, never
                                  dereferenced): a loader-less validation step ends when one
                                  comes again */
    int step_nmodules;
    uint64_t step_last; /* end of the step's last event */
    int last_kind;      /* the previous step: its kind and end (0: not contiguous) */
    uint64_t last_end;
    sw_phase phase_in; /* the train/valid phase entered, or SW_PHASE_NONE */
    step_rule rule;
    const void *boundary; /* the optimizer whose step ends a step (identity only) */
    const void *other;    /* another optimizer that stepped, and how often in a row */
    int other_steps;
    pending_event pending[MAX_PENDING];
    int npending;
    queued_batch queue[MAX_QUEUED]; /* fetched, not consumed yet, oldest first */
    int nqueued;
    int may_consume; /* a fetch or a backward since a forward last took a batch */
    PyObject *iterators[MAX_ITERATORS]; /* weak references to the loader iterators in use */
    int matched[MAX_ITERATORS]; /* a forward was given a batch of this iterator as fetched */
    int next_iterator;
    uint64_t prev_end;     /* end of the last step of either kind (steps never overlap) */
    uint64_t installed_at; /* when the Loop was made: the start of "startup" */
    int started;           /* a step has begun (startup is recorded) */
    int external;          /* bound_steps(True): a front end ends the training steps */

    /* Calls running now. */
    sw_id inside;    /* "forward" or "loss" while an outermost call runs */
    int candidate;   /* that call is timed first and named by its result */
    int loss_inside; /* a functional loss ran inside that call */
    uint64_t call_start;
    int in_fetch, in_zero_grad, in_backward, in_copy;
    int optimizer_depth;    /* nested Optimizer.step calls */
    int optimizer_paused;   /* a closure's part runs inside the outermost one */
    int closure_depth;      /* inside the optimizer's closure: the optimizer stays paused */
    uint64_t closure_parts; /* the time of the timed parts run inside it so far */
    uint64_t optimizer_start, optimizer_inner, paused_at;
    sw_py_funcs *optimizer_funcs; /* the function profiler told of the outermost step */
    uint64_t forward_end;         /* end of the last outermost forward; 0 once backward began */
    const void *forward_caller;   /* the frame that called it (identity only) */
    PyObject *loss_frame;         /* the user's loss function running now (see user_loss) */
    int loss_seen;                /* a loss ran since that forward */
    int eval_is_train;            /* a backward followed a forward read as validation only by
                                  module.training: from then on grad mode alone decides */
    int last_forward_by_flag;

    /* What the notes say (see update_notes). */
    uint64_t steps, steps_with_batch, steps_with_forward;
    int loss_in_forward, saw_batch, noted_data, noted_forward, noted_loss;
} LoopObject;

/* ------------------------------------------------------------------------------------------
 * The step rules (_torch_loop_rules.c). p is the open profiler (loop->owner->p, not NULL).
 * ---------------------------------------------------------------------------------------- */

const char *sw_py_loop_rule_name(step_rule rule);
void sw_py_loop_set_rule(LoopObject *loop, sw_profiler *p, step_rule rule);
/* Record the held-back events whose kind is (same = 1) or is not (same = 0) kind. */
void sw_py_loop_flush_pending(LoopObject *loop, sw_profiler *p, int kind, int same);
/* A batch or a zero_grad ended: into the open step, or held until its step is known. */
void sw_py_loop_settle(LoopObject *loop, sw_profiler *p, const pending_event *e);
/* No step is open, and the next training step begins where the last one ended: an event now
 * (a checkpoint saved after the update) is that step's, and is held for it with
 * sw_py_loop_hold. */
int sw_py_loop_between(const LoopObject *loop);
void sw_py_loop_hold(LoopObject *loop, sw_profiler *p, sw_id action, uint64_t start, uint64_t end);
void sw_py_loop_close_step(LoopObject *loop, sw_profiler *p, uint64_t end);
/* Train or valid: grad mode; for an outermost forward, then module.training. */
int sw_py_loop_grad_kind(LoopObject *loop);
int sw_py_loop_forward_kind(LoopObject *loop, PyObject *module);
/* Is the training step bounded by the parameter update (optimizer or backward rule)? */
int sw_py_loop_update_bounded(const LoopObject *loop);
/* An event that is part of a step begins: join the open step, or begin one (at `earliest`
 * when not 0 and earlier: the batches it consumes). */
void sw_py_loop_join(LoopObject *loop, sw_profiler *p, int train, uint64_t at, uint64_t earliest);
/* An outermost forward of kind begins (consuming batches: `consumes`, the first fetched at
 * `earliest`): does it begin a step? Returns 1 when it did. */
int sw_py_loop_forward_begins(LoopObject *loop, sw_profiler *p, int kind, uint64_t at,
                              const void *module, int consumes, uint64_t earliest);
/* The training step in progress ends now (Loop.step_end, under bound_steps). */
void sw_py_loop_step_end(LoopObject *loop, sw_profiler *p);
/* What the hooks saw end: a DataLoader's StopIteration, a backward, an optimizer step. */
void sw_py_loop_loader_done(LoopObject *loop, sw_profiler *p);
void sw_py_loop_backward_done(LoopObject *loop, sw_profiler *p);
void sw_py_loop_optimizer_done(LoopObject *loop, sw_profiler *p, const void *optimizer);
/* stepwatch.step(): a mark (batch 0: no batch size given), the end of its `with` block. */
void sw_py_loop_mark(LoopObject *loop, sw_profiler *p, uint32_t batch);
void sw_py_loop_mark_end(LoopObject *loop, sw_profiler *p);
/* Everything still open, when the loop closes (after sw_py_loop_user_loss_ended). */
void sw_py_loop_close_all(LoopObject *loop, sw_profiler *p);

/* ------------------------------------------------------------------------------------------
 * The batches fetched and not consumed yet (_torch_loop_batches.c)
 * ---------------------------------------------------------------------------------------- */

/* Holds b; the queue owns its key from then on. */
void sw_py_loop_enqueue(LoopObject *loop, sw_profiler *p, const queued_batch *b);
/* A copy to the device ran from start to end (Tensor.to, .cuda, the batch's own .to outside
 * the model): the oldest held batch's (loaders that read ahead copy a batch once the next is
 * fetched). 1 when it was a batch's, 0 when no batch is held. */
int sw_py_loop_copied(LoopObject *loop, uint64_t start, uint64_t end);
/* Is a fetched batch waiting for its forward (a copy now is the batch's)? */
int sw_py_loop_batch_held(const LoopObject *loop);
/* The latest held batch a call is given as fetched (inputs: its arguments), or -1. */
int sw_py_loop_matched_input(const LoopObject *loop, PyObject *const *inputs, Py_ssize_t n);
/* What a forward (or a backward without one) consumes: take[i] = 1 for the held entries it
 * takes; returns the batches among them; *earliest: the first fetch start (0: none). */
int sw_py_loop_take(LoopObject *loop, int matched, char *take, uint64_t *earliest);
/* Record the entries marked in take into the open step; all of them (take NULL). */
void sw_py_loop_consume(LoopObject *loop, sw_profiler *p, const char *take);
/* Entries no forward will consume, into no step: of loops that are over (finished_only), or
 * all (the Loop closes). Returns how many. */
int sw_py_loop_drop(LoopObject *loop, sw_profiler *p, int finished_only);

/* ------------------------------------------------------------------------------------------
 * The hooks (_torch_loop_hooks.c)
 * ---------------------------------------------------------------------------------------- */

/* Loop.hook(kind, original=None): the LoopHook of kind wrapping original. */
PyObject *sw_py_loop_hook(LoopObject *loop, PyObject *args, PyObject *kwargs);
/* An outermost module call begins (0: not one to time) and ends (result NULL: it raised).
 * inputs: its arguments after the module (positional, then keyword values). */
int sw_py_loop_call_begin(LoopObject *loop, sw_profiler *p, PyObject *module, int is_module,
                          PyObject *const *inputs, Py_ssize_t ninputs);
void sw_py_loop_call_end(LoopObject *loop, PyObject *result);
/* The user's loss function (see _torch_loop_hooks.c) ends now, if one runs. */
void sw_py_loop_user_loss_ended(LoopObject *loop);

#endif
