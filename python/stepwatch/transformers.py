"""stepwatch.transformers — the Hugging Face Trainer, profiled by a TrainerCallback.

    from stepwatch.transformers import Callback
    trainer = Trainer(model=model, args=args, ..., callbacks=[Callback(run_file="run.db")])
    trainer.train()       # the report at the end; stepwatch/* figures in every log

The callback times the Trainer's loop with ``stepwatch.torch`` (the data wait, forward,
loss, backward, optimizer and zero_grad of every step; under ``stepwatch run`` it joins the
instrumentation already on), on the Trainer's own terms:

- a training step is one of the Trainer's: it ends at ``on_step_end``, so the train steps
  equal ``state.global_step`` (gradient accumulation: one step per update, an update whose
  optimizer step was skipped too);
- validation steps are the evaluation loop's batches (a batch is the step that consumes it);
- every ``logging_steps`` the figures of the steps since the last log go into the Trainer's
  logs (``stepwatch/samples_per_s``, ``stepwatch/step_ms`` and ``stepwatch/<category>_ms``,
  the mean per step, and ``stepwatch/valid_samples_per_s`` after an evaluation): the
  ``report_to`` loggers (TensorBoard, W&B, ...) and ``state.log_history`` get them;
- with ``flops=True`` (or under ``stepwatch run --flops``) the FLOPs of a training step are
  counted once per input shape (stepwatch.flops), and the logs get ``stepwatch/tflops``
  (achieved over the steps since the last log), ``stepwatch/mfu`` (on a GPU in stepwatch's
  peak table) and ``stepwatch/tokens_per_sec`` (for token-id inputs);
- the Trainer's checkpoint saving (``_save_checkpoint``) is timed as ``checkpoint``, inside
  the step it follows (that step ends at ``on_save``), so a slow save makes that step slow
  for that reason (docs/slow-steps.md); a save after an evaluation is in no step;
- at ``on_train_end`` the report (stderr, or ``output``) on the main process;
- under DDP (a torch.distributed group of several ranks) the profiler joins
  ``stepwatch.distributed``: rank 0's report ends with the cross-rank view, also kept in
  ``callback.ranks`` (a RankView) and its run file.

The loggers run as callbacks too, before the ones passed in ``callbacks=`` or added with
``trainer.add_callback``; so at ``on_init_end`` (and at ``on_train_begin``, for a callback
added after the Trainer was built) this one moves itself ahead of them in the Trainer's list,
``trainer.callback_handler.callbacks`` (right after its DefaultFlowCallback), so what it adds
to ``logs`` reaches them. The list is found from what refers to the callback (``gc``), not
from who called it.
"""
import gc
import sys
import warnings

from transformers import TrainerCallback
from transformers.trainer_callback import DefaultFlowCallback

import stepwatch as _sw

__all__ = ["Callback"]

# The step's own parts: the library's categories (stepwatch.CATEGORIES) but the handlers'
# and the rest.
_CATEGORIES = tuple(c for c in _sw.CATEGORIES if c not in ("callback", "other"))


def _totals(records):
    """Cumulative figures of one phase's rows: steps, samples, step ns, ns per category."""
    out = {"steps": 0, "samples": 0, "step_ns": 0}
    for c in _CATEGORIES:
        out[c] = 0
    for r in records:
        if r["action"] == "step":
            out["steps"] = r["count"] + r["warmup_count"]
            out["samples"] = r["samples"]
            out["step_ns"] = r["total_ns"] + r["warmup_total_ns"]
        elif r["category"] in _CATEGORIES:
            out[r["category"]] += r["self_ns"]
    return out


def _handler_list(callback):
    """The list of the CallbackHandler that holds ``callback`` (the Trainer's
    ``callback_handler.callbacks``), found among the objects that refer to it: the list that
    begins with the Trainer's DefaultFlowCallback. None if no such list holds it. One scan of
    the collector's objects (tens of ms in a process that imported torch), once per Trainer."""
    for ref in gc.get_referrers(callback):
        if isinstance(ref, list) and ref and isinstance(ref[0], DefaultFlowCallback) and \
                any(c is callback for c in ref):
            return ref
    return None


def _lead(callback):
    """Moves ``callback`` right after the DefaultFlowCallback of its handler's list, ahead of
    the loggers. In place: the handler may be iterating over the list now (this callback is
    called from it), and an item moved from after the current one to before it leaves every
    other callback called once. True when the list was found."""
    callbacks = _handler_list(callback)
    if callbacks is None:
        return False
    callbacks.remove(callback)
    flows = [i for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)]
    callbacks.insert(flows[-1] + 1 if flows else 0, callback)
    return True


class Callback(TrainerCallback):
    """A ``transformers.TrainerCallback`` that profiles the Trainer's steps (see the module).

    ``profiler``: a stepwatch.Profiler to record into (default: the one ``stepwatch run``
    instruments with, else a new one with ``run_file`` and ``warmup_steps``). ``format`` and
    ``output``: the report at the end of training (``output=None``: stderr; ``report=False``:
    none). ``prefix``: of the keys added to the Trainer's logs. ``modules``: True (every 10th
    step) or a step interval: the Modules table, each nn.Module's forward and backward time
    and memory (``stepwatch.Profiler(modules=...)``, for the profiler made here)."""

    def __init__(self, profiler=None, *, run_file=None, warmup_steps=0, format="table",
                 output=None, report=True, prefix="stepwatch/", modules=False, flops=False,
                 live=None):
        if format not in _sw.FORMATS and format != "md":
            raise ValueError(f"Callback: unknown format {format!r} "
                             f"(one of {', '.join(_sw.FORMATS)})")
        self.profiler = profiler
        self.run_file = run_file
        self.warmup_steps = warmup_steps
        self.format = format
        self.output = output
        self.report = report
        self.prefix = prefix
        self.modules = modules
        self.flops = flops
        self._flops_last = (0.0, 0)  # the Watch's (FLOPs, tokens) at the last log
        self.report_text = None   # the last report written
        self.ranks = None         # the cross-rank view (rank 0 under DDP)
        self._inst = None         # the stepwatch.torch instrumentation in use
        self._own_inst = False
        self._own_profiler = False
        self._watch = None
        self._last = {}           # phase -> totals at the last log
        self._placed = False      # moved ahead of the loggers
        self.live = live          # the notebook display: None in a Jupyter kernel, or on/off
        self._notebook = None     # stepwatch.notebook.auto's display during the fit
        self._save_pending = False  # the training step ends at on_save (a save follows)
        self._patches = []        # the Trainer's _save_checkpoint, timed while training

    # -- order: ahead of the report_to loggers --

    def on_init_end(self, args, state, control, **kwargs):
        self._placed = _lead(self)

    def _place(self):
        if not self._placed:  # added with trainer.add_callback: no on_init_end
            self._placed = _lead(self)

    # -- the run --

    def on_train_begin(self, args, state, control, **kwargs):
        self._place()
        import stepwatch.torch as swtorch
        active = swtorch.instrumented()
        if active is not None and (self.profiler is None or self.profiler is active.profiler):
            self._inst, self._own_inst = active, False  # stepwatch run: join it
            self.profiler = active.profiler
        else:
            if self.profiler is None or self.profiler.closed:
                self.profiler = _sw.Profiler(name="transformers", run_file=self.run_file,
                                             warmup_steps=self.warmup_steps,
                                             modules=self.modules)
                self._own_profiler = True
            if active is not None:
                swtorch.uninstrument()
            self._inst, self._own_inst = swtorch.instrument(self.profiler,
                                                            flops=self.flops or None,
                                                            live=False), True
        if getattr(self._inst, "_notebook", None) is None:  # one display, the joined one's
            from stepwatch import notebook
            self._notebook = notebook.auto(self.profiler, self.live)
        self._inst.bound_steps(True)  # the Trainer's on_step_end ends the training steps
        self._patch_save()
        self._last = {phase: _totals(self.profiler.records(phase)) for phase in ("train", "valid")}
        try:
            import stepwatch.distributed as swdist
            self._watch = swdist.watch_group(self.profiler, quiet=True)
        except Exception as exc:  # no torch.distributed: one process
            warnings.warn(f"stepwatch.transformers: no cross-rank view ({exc!r})",
                          RuntimeWarning, stacklevel=2)

    def on_step_end(self, args, state, control, **kwargs):
        if self._inst is None:
            return
        if control.should_save and not control.should_evaluate:
            # The Trainer saves right after this (_maybe_log_save_evaluate): the step ends
            # at on_save, so a slow save makes its step slow, for that reason. With an
            # evaluation first, its steps come between: the save is then in no step.
            self._save_pending = True
        else:
            self._inst.step_end()

    def on_save(self, args, state, control, **kwargs):
        self._end_pending()

    def on_step_begin(self, args, state, control, **kwargs):
        self._end_pending()  # a save announced and not made (a subclass skipped it)

    def _end_pending(self):
        if self._save_pending:
            self._save_pending = False
            if self._inst is not None:
                self._inst.step_end()

    def _patch_save(self):
        """The Trainer's _save_checkpoint timed as "checkpoint" while training (its torch.save
        calls inside are the same span)."""
        from transformers import Trainer
        from stepwatch import _checkpoint
        if self._patches:
            return
        original = Trainer.__dict__["_save_checkpoint"]
        wrapper = _checkpoint.timed(self.profiler, original)
        Trainer._save_checkpoint = wrapper
        self._patches = [(Trainer, "_save_checkpoint", original, wrapper)]

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._inst is None or logs is None or self.profiler.closed:
            return
        figures = self.figures()
        if not figures:
            return
        logs.update(figures)
        history = state.log_history
        if history and history[-1].get("step") == state.global_step and \
                all(history[-1].get(k) == v for k, v in logs.items() if k not in figures):
            history[-1].update(figures)

    def figures(self):
        """The figures of the steps since the last call (per phase, the mean per step): the
        keys the logs get."""
        out = {}
        for phase in ("train", "valid"):
            now = _totals(self.profiler.records(phase))
            last = self._last.get(phase) or {k: 0 for k in now}
            self._last[phase] = now
            steps = now["steps"] - last["steps"]
            if steps <= 0:
                continue
            ns = now["step_ns"] - last["step_ns"]
            samples = now["samples"] - last["samples"]
            name = self.prefix if phase == "train" else self.prefix + "valid_"
            if samples > 0 and ns > 0:
                out[name + "samples_per_s"] = samples / (ns / 1e9)
            out[name + "step_ms"] = ns / steps / 1e6
            if phase == "train" and ns > 0:
                out.update(self._flops_figures(ns))
            if phase == "train":
                parts = 0
                for c in _CATEGORIES:
                    part = now[c] - last[c]
                    parts += part
                    out[f"{name}{c}_ms"] = part / steps / 1e6
                out[name + "other_ms"] = max(ns - parts, 0) / steps / 1e6
        return out

    def _flops_figures(self, ns):
        """stepwatch/tflops, /mfu, /tokens_per_sec over ns of training steps since the last
        log, when FLOPs are counted."""
        watch = getattr(self._inst, "flops", None)
        if watch is None:
            return {}
        flops, tokens = watch.running()
        d_flops, d_tokens = flops - self._flops_last[0], tokens - self._flops_last[1]
        self._flops_last = (flops, tokens)
        out = {}
        if d_flops > 0:
            out[self.prefix + "tflops"] = d_flops / (ns / 1e9) / 1e12
            _label, peak = watch.peak()
            if peak:
                out[self.prefix + "mfu"] = d_flops / (ns / 1e9) / peak
        if d_tokens > 0:
            out[self.prefix + "tokens_per_sec"] = d_tokens / (ns / 1e9)
        return out

    def _repr_html_(self):
        from stepwatch import notebook
        return notebook.repr_html(self.profiler)

    def on_train_end(self, args, state, control, **kwargs):
        if self._inst is None:
            return
        self._end_pending()
        inst, self._inst = self._inst, None
        inst.bound_steps(False)
        from stepwatch import _patching
        _patching.restore(self._patches, "stepwatch.transformers: the run's end")
        if self._watch is not None:
            import stepwatch.distributed as swdist
            self.ranks = swdist.finish(self.profiler)
            self._watch = None
        if self._own_inst:
            import stepwatch.torch as swtorch
            if swtorch.instrumented() is inst:
                swtorch.uninstrument()
        from stepwatch import notebook  # the final summary stays in the cell
        notebook.finish(self._notebook)
        self._notebook = None
        if self.report and state.is_world_process_zero:
            text = self.profiler.report(self.format, full_names=bool(self.output))
            if self.ranks is not None:
                text += "\n" + self.ranks.report_after(self.format)
            self.report_text = text
            if self.output:
                _sw.write_output(self.output, text)
            else:
                sys.stderr.write(text)
                sys.stderr.flush()
        if self._own_profiler:
            self.profiler.close()  # completes the run file
