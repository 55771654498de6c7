/*
 * _torch_loop_rules.c — the step rules of stepwatch.torch's Loop: where steps begin and end.
 *
 * The hooks (_torch_loop_hooks.c) time torch's events and tell these functions about them; these
 * decide, from the events alone, where each step begins and ends, which phase (train or
 * valid) it is in, and what the notes say. They call the core (sw_step_*, sw_phase_*,
 * sw_record) and nothing of torch but grad mode and "has an optimizer been made?".
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
 */
#include "_torch_loop.h"

static const char *const rule_names[] = {"none",     "dataloader", "forward",
                                         "backward", "optimizer",  "manual"};

/* ------------------------------------------------------------------------------------------
 * Notes: how steps were found, what could not be told apart
 * ---------------------------------------------------------------------------------------- */

const char *sw_py_loop_rule_name(step_rule rule) {
    return rule_names[rule];
}

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
void sw_py_loop_flush_pending(LoopObject *loop, sw_profiler *p, int kind, int same) {
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

/* A batch or a zero_grad ended: into the open step when it is one the optimizer (or the
 * backward, or a mark) ends, else held until its step is known. */
void sw_py_loop_settle(LoopObject *loop, sw_profiler *p, const pending_event *e) {
    int open_ended = loop->rule == RULE_OPTIMIZER || loop->rule == RULE_BACKWARD ||
                     loop->rule == RULE_MANUAL;
    if ((loop->kind == TRAIN && open_ended) ||
        (loop->kind != NO_STEP && loop->rule == RULE_MANUAL)) {
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
    sw_py_step_end(loop->owner, end);
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
 * consumes, the first fetched at `earliest`, 0: none). */
static void open_step(LoopObject *loop, sw_profiler *p, int kind, uint64_t at, uint64_t earliest) {
    sw_py_loop_flush_pending(loop, p, kind, 0); /* the other kind's: before this step, in no step */
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
    sw_py_loop_flush_pending(loop, p, kind, 1);
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

int sw_py_loop_grad_kind(LoopObject *loop) {
    return grad_on(loop) ? TRAIN : VALID;
}

/* Train or valid, for an outermost forward: grad mode, then module.training. */
int sw_py_loop_forward_kind(LoopObject *loop, PyObject *module) {
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

/* Between two training steps, where the next one will begin at the last one's end (open_step:
 * the same kind, and no new loop over a loader since): what runs now is that step's time,
 * so its span is held for it (sw_py_loop_hold), not left in no step. */
int sw_py_loop_between(const LoopObject *loop) {
    return loop->kind == NO_STEP && loop->last_kind == TRAIN && loop->last_end != 0 &&
           (loop->external || update_bounded(loop));
}

/* An event that ran between two training steps (a checkpoint saved after the optimizer
 * step): held for the next training step, as a zero_grad after the update is. */
void sw_py_loop_hold(LoopObject *loop, sw_profiler *p, sw_id action, uint64_t start, uint64_t end) {
    pending_event e = {action, TRAIN, 0, 0, start, end};
    sw_py_loop_settle(loop, p, &e);
}

/* An event that is part of a step begins (a backward or an optimizer step: train = 1, which
 * ends a validation step; a loss: train = 0, whose kind is grad mode's): join the open step,
 * or begin one. */
void sw_py_loop_join(LoopObject *loop, sw_profiler *p, int train, uint64_t at, uint64_t earliest) {
    if (loop->rule == RULE_MANUAL) {
        if (loop->kind != NO_STEP)
            sw_py_loop_flush_pending(loop, p, loop->kind, 1);
        return;
    }
    if (loop->kind == VALID && train)
        close_step(loop, p, loop->step_last);
    if (loop->kind == NO_STEP)
        open_step(loop, p, train ? TRAIN : sw_py_loop_grad_kind(loop), at, earliest);
    else
        sw_py_loop_flush_pending(loop, p, loop->kind, 1);
}

static int called_in_step(const LoopObject *loop, const void *module) {
    for (int i = 0; i < loop->step_nmodules; i++)
        if (loop->step_modules[i] == module)
            return 1;
    return 0;
}

/* An outermost forward of kind begins (consuming batches: `consumes`): does it begin a
 * step? Returns 1 when it did. */
int sw_py_loop_forward_begins(LoopObject *loop, sw_profiler *p, int kind, uint64_t at,
                              const void *module, int consumes, uint64_t earliest) {
    if (loop->rule == RULE_MANUAL) {
        sw_py_loop_join(loop, p, 0, at, earliest);
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
        sw_py_loop_flush_pending(loop, p, loop->kind, 1);
    }
    if (loop->step_nmodules < MAX_MODULES && !called_in_step(loop, module))
        loop->step_modules[loop->step_nmodules++] = module;
    return began;
}

/* Everything still open, when the loop closes: the step ends at its last event. The
 * user's loss function the hooks time has ended already (Loop.close ends it first). */
void sw_py_loop_close_all(LoopObject *loop, sw_profiler *p) {
    if (loop->inside != SW_ID_NONE && !loop->candidate)
        sw_end(p, loop->inside);
    loop->inside = SW_ID_NONE;
    loop->optimizer_depth = 0;
    loop->optimizer_paused = 0;
    if (loop->kind != NO_STEP) {
        sw_py_loop_flush_pending(loop, p, loop->kind, 1);
        close_step(loop, p, loop->step_last);
    }
    sw_py_loop_flush_pending(loop, p, NO_STEP, 0); /* the rest, outside any step */
    sw_py_loop_drop(loop, p, 0);                   /* batches no forward consumed */
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
 * What the hooks saw end
 * ---------------------------------------------------------------------------------------- */

/* The loader is done (its StopIteration): a batch-bounded step ends, and whatever the script
 * does before its next loop (an epoch's end) belongs to no step. */
void sw_py_loop_loader_done(LoopObject *loop, sw_profiler *p) {
    if (loop->kind == VALID ||
        (loop->kind == TRAIN && !update_bounded(loop) && loop->rule != RULE_MANUAL))
        close_step(loop, p, loop->step_last);
    loop->last_end = 0;
    if (loop->kind == NO_STEP)
        sw_py_loop_flush_pending(loop, p, NO_STEP, 0);
}

/* The backward ended: the first one sets the rule (the optimizer's, unless no optimizer
 * object exists), and under the backward's rule it ends the training step. */
void sw_py_loop_backward_done(LoopObject *loop, sw_profiler *p) {
    if (loop->rule != RULE_MANUAL && !update_bounded(loop)) {
        PyObject *exists = PyObject_CallNoArgs(loop->optimizer_exists);
        if (exists == NULL)
            PyErr_Clear();
        set_rule(loop, p, exists == Py_False ? RULE_BACKWARD : RULE_OPTIMIZER);
        Py_XDECREF(exists);
    }
    if (loop->rule == RULE_BACKWARD && loop->optimizer_depth == 0)
        close_step(loop, p, loop->step_last);
}

/* The outermost Optimizer.step of `optimizer` ended (its span recorded): the step's boundary? */
void sw_py_loop_optimizer_done(LoopObject *loop, sw_profiler *p, const void *optimizer) {
    if (loop->rule == RULE_MANUAL)
        return;
    set_rule(loop, p, RULE_OPTIMIZER);
    if (loop->external)
        return; /* the front end ends the step (sw_py_loop_step_end) */
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
 * Steps by hand: stepwatch.step()
 * ---------------------------------------------------------------------------------------- */

/* A mark: the step in progress ends here and the next begins (at the batch fetched for it, if
 * one was); from the first mark on, only marks make steps. batch 0: no batch size given. */
void sw_py_loop_mark(LoopObject *loop, sw_profiler *p, uint32_t batch) {
    if (loop->rule != RULE_MANUAL) {
        close_step(loop, p, loop->step_last); /* what the rules had begun */
        set_rule(loop, p, RULE_MANUAL);
        loop->last_end = 0;
    }
    uint64_t now = sw_now_ns();
    if (loop->kind != NO_STEP) {
        sw_py_loop_flush_pending(loop, p, loop->kind, 1);
        close_step(loop, p, now);
    }
    loop->last_end = 0;
    int kind = sw_py_loop_grad_kind(loop);
    open_step(loop, p, kind, now, 0);
    sw_py_loop_consume(loop, p, NULL); /* the batches fetched for it */
    if (batch != 0) {
        loop->step_samples = batch;
        sw_step_set_batch_size(p, batch);
    }
}

/* The end of a `with stepwatch.step():` block. */
void sw_py_loop_mark_end(LoopObject *loop, sw_profiler *p) {
    if (loop->rule == RULE_MANUAL && loop->kind != NO_STEP) {
        sw_py_loop_flush_pending(loop, p, loop->kind, 1);
        close_step(loop, p, 0);
    }
}

/* Under bound_steps (stepwatch.transformers: the Trainer's on_step_end): the training step
 * in progress ends now. */
void sw_py_loop_step_end(LoopObject *loop, sw_profiler *p) {
    if (loop->rule != RULE_MANUAL && loop->kind == TRAIN) {
        sw_py_loop_flush_pending(loop, p, TRAIN, 1);
        close_step(loop, p, 0);
    }
}
