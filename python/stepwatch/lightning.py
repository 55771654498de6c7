"""stepwatch.lightning — PyTorch Lightning front end.

    Trainer(profiler=stepwatch.lightning.Profiler())                 # SimpleProfiler's place
    Trainer(callbacks=[stepwatch.lightning.TimeProfiler("backward")])  # thunder's callback

``Profiler`` takes ``SimpleProfiler``'s place: the same arguments (``dirpath``, ``filename``,
``extended``), files (``{stage}-{filename}-{local_rank}.txt``) and report titles
(``FIT Profiler Report``), ``start``/``stop``/``profile``/``summary``/``describe``/``setup``/
``teardown``, ``recorded_durations``; picklable and deep-copyable. Every Lightning action
keeps its name and gets its category (data, forward, loss, backward, optimizer, zero_grad,
callback; docs/python.md lists the rules). Its ``start``, ``stop`` and ``profile`` are C
(``Spans``, python/_stepwatch/_lightning.c): Lightning calls them 18 times each per training step
of a bare Trainer, 6 more per callback, most of them through ``profile()``, which in C costs
less than Lightning's own generator-based one in its default PassThroughProfiler.

``TimeProfiler`` is thunder's callback: the same keys, definitions and logging.

Under DDP (``strategy="ddp"``: a process group of more than one rank at ``setup``),
``stepwatch.distributed`` watches the profiler: every rank keeps its run file, DDP's gradient
all-reduce is timed, and at ``describe()`` the ranks' payloads are gathered to rank 0, whose
report (Lightning writes it on rank 0 only, unless ``filename`` is given) ends with the
cross-rank view: the straggler ranks and their blame (docs/ranks.md).
"""
import atexit
import collections.abc
import functools
import multiprocessing
import multiprocessing.util
import os
import re
import sys
import warnings
import weakref

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler as _LightningProfiler

import stepwatch as _sw
from stepwatch import _checkpoint, _oom, _patching
from stepwatch.lightning_advanced import AdvancedProfiler  # noqa: F401 (cProfile tables)
from stepwatch.lightning_devicestats import DeviceStatsMonitor  # noqa: F401 (device stats)
from stepwatch.thunder import TimeProfiler  # noqa: F401 (thunder's callback, its own module)
from stepwatch.lightning_throughput import (  # noqa: F401 (Lightning's throughput, FLOPs counted)
    Throughput, ThroughputMonitor, get_available_flops, measure_flops)

from ._stepwatch import Spans as _Spans

__all__ = ["AdvancedProfiler", "Profiler", "SimpleProfiler", "TimeProfiler", "Throughput",
           "ThroughputMonitor", "get_available_flops", "measure_flops"]

# ---- what each Lightning action is -----------------------------------------------------------

# Roles in the loop's structure (python/_stepwatch/_lightning.c).
_NONE, _STEP, _CLOSE, _EPOCH = 0, 1, 2, 3

# Lightning name -> category; the first match wins, other names are "other" (their time counts
# as the enclosing span's category, or the step's "other").
_CATEGORIES = [(re.compile(p), c) for p, c in [
    (r"_next$", "data"),  # [_TrainingEpochLoop].train_dataloader_next, [_EvaluationLoop].val_next
    (r"^\[Strategy\][^.]*\.batch_to_device$", "data"),
    (r"^\[Lightning(Data)?Module\][^.]*\."
     r"(on_before_batch_transfer|transfer_batch_to_device|on_after_batch_transfer)$", "data"),
    (r"^\[Strategy\][^.]*\.(training|validation|test|predict)_step$", "forward"),
    (r"^\[Strategy\][^.]*\.backward$", "backward"),
    (r"^\[LightningModule\][^.]*\.optimizer_zero_grad$", "zero_grad"),
    (r"^\[LightningModule\][^.]*\.(optimizer_step|configure_gradient_clipping|lr_scheduler_step)$",
     "optimizer"),
    (r"^optimizer_step$", "optimizer"),  # manual optimization
    (r"^\[Loss\]", "loss"),  # loss modules (Profiler.loss_hooks)
    (r"^\[Callback\]", "callback"),
    (r"^\[Lightning(Data)?Module\][^.]*\.on_", "callback"),  # the module's own hooks
]]
# A *_next begins a step of its loop's phase.
_STEP_NAME = re.compile(r"\.(train|val|test|predict)(?:_dataloader)?_next$")
_STEP_PHASE = {"train": "train", "val": "valid", "test": "test", "predict": "predict"}
# The first hooks of the work between a loop's batches and what follows: they end the open
# step (else the last batch of a loop would take in validation's start or a checkpoint save).
_CLOSE_NAME = re.compile(r"\.on_((validation|test|predict)_(model_eval|start)"
                         r"|(train|validation|test|predict)_(epoch_end|end)|sanity_check_end)$")


def classify(name, owners=None):
    """How stepwatch.lightning records a Lightning action name: (category, role, phase), as
    python/_stepwatch/_lightning.c reads it; category False: not timed. Called once per name.

    owners maps Lightning's prefixes ("[LightningModule]Net", "[Callback]<state_key>", ...) to
    the objects of the run: a hook its object's class does not override is Lightning calling
    its own base method, and is not timed (_lightnings_own; Profiler(empty_hooks=True) passes
    no owners)."""
    category = next((c for pattern, c in _CATEGORIES if pattern.search(name)), "other")
    prefix, _, hook = name.rpartition(".")
    if owners and prefix in owners and _lightnings_own(owners[prefix], hook):
        category = False
    step = _STEP_NAME.search(name)
    if step:
        return category, _STEP, _STEP_PHASE[step.group(1)]
    if name == "run_training_epoch":
        return category, _EPOCH, None
    if _CLOSE_NAME.search(name):
        return category, _CLOSE, None
    return category, _NONE, None


# LightningModule methods timed even as Lightning wrote them: their spans carry a category.
_MODULE_TIMED = frozenset({"optimizer_step", "optimizer_zero_grad", "lr_scheduler_step"})


def _lightnings_own(obj, hook):
    """Whether obj's hook, as Lightning calls it, runs only the method of obj's Lightning base
    class: a hook ("on_...") of the module, datamodule, strategy or a callback (empty methods
    there), or another method of the module or datamodule (transfer_batch_to_device,
    configure_gradient_clipping, ...: their time shows in the span around them)."""
    from lightning.pytorch import LightningDataModule, LightningModule
    from lightning.pytorch.strategies import Strategy
    if hook in vars(obj):
        return False  # set on the instance
    for base in (LightningModule, LightningDataModule, Callback, Strategy):
        if isinstance(obj, base):
            theirs = getattr(base, hook, None)
            if theirs is None or getattr(type(obj), hook, None) is not theirs:
                return False  # overridden, or not Lightning's
            if hook.startswith("on_"):
                return True
            return base in (LightningModule, LightningDataModule) and hook not in _MODULE_TIMED
    return False


def _owners_of(trainer):
    """Lightning's name prefixes of the run's module, datamodule, strategy and callbacks."""
    owners = {f"[Strategy]{type(trainer.strategy).__name__}": trainer.strategy}
    for kind, obj in (("LightningModule", trainer.lightning_module),
                      ("LightningDataModule", trainer.datamodule)):
        if obj is not None:
            owners[f"[{kind}]{type(obj).__name__}"] = obj
    for callback in trainer.callbacks:
        owners[f"[Callback]{callback.state_key}"] = callback
    return owners


# ---- the profiler ----------------------------------------------------------------------------

_PENDING_MAX = 1024  # spans buffered before the recorder exists (see Profiler.start)


class Profiler(_LightningProfiler):
    """Lightning's SimpleProfiler, recorded in C.

    Args:
        dirpath, filename: as SimpleProfiler (the report goes to
            ``{dirpath}/{stage}-{filename}-{local_rank}.txt``, else to the log).
        extended: as SimpleProfiler, for ``format="lightning"``: False gives its short
            layout (Action, Mean duration, Total time). The stepwatch table ignores it.
        format: the report's layout, one of stepwatch.FORMATS: table (default: Lightning's
            columns and std, p50, p99, self time), lightning (SimpleProfiler's), and the rest.
        warmup_steps: first steps of each phase kept out of the statistics.
        run_file: also write a stepwatch run file; "{rank}" expands to the rank, read when
            Lightning sets the profiler up (``stepwatch.distributed_rank``), "{stage}" to the
            stage of that setup (fit, validate, ...; ddp_spawn and ddp_fork run each stage
            in new processes: give each its own file).
        profiler: record into this stepwatch.Profiler instead of one made at setup.
        keep_durations: per action, how many of the latest durations ``recorded_durations``
            keeps (SimpleProfiler keeps all of them; the statistics cover every call).
        loss_hooks: time loss modules (``torch.nn`` losses held by the LightningModule) as
            "loss": their forward is wrapped on the instance during the run.
        empty_hooks: also time the hooks no one overrides (Lightning calling the empty base
            methods of the module, the strategy and every callback; SimpleProfiler times
            them). Off: their calls count in their parent's time.
        modules: True (every 10th step) or a step interval: the forward and backward time
            and the memory of each nn.Module, in the report's Modules table
            (``stepwatch.Profiler(modules=...)``; ignored with ``profiler=``).
        live: the display in a Jupyter notebook's cell during the fit, redrawn every few
            seconds and left as the final summary (stepwatch.notebook); None (default): when
            running in a Jupyter kernel; False: never.
        flops: True or a dict of stepwatch.flops.watch's options: the training step's FLOPs
            counted (``stepwatch.Profiler(flops=...)``; ignored with ``profiler=``); every
            ``log_every_n_steps`` optimizer steps the trainer's loggers get
            ``stepwatch/tflops``, ``stepwatch/mfu`` (where the peak is known) and
            ``stepwatch/tokens_per_sec`` over the training steps since the last log.
    """

    def __init__(self, dirpath=None, filename=None, extended=True, format="table",
                 warmup_steps=0, run_file=None, profiler=None, keep_durations=1000,
                 loss_hooks=True, empty_hooks=False, modules=False, live=None,
                 flops=False):
        super().__init__(dirpath=dirpath, filename=filename)
        if format not in _sw.FORMATS and format != "md":
            raise ValueError(f"unknown report format {format!r}; one of {_sw.FORMATS}")
        if keep_durations < 0:
            raise ValueError(f"keep_durations must be >= 0, not {keep_durations}")
        if profiler is not None and not isinstance(profiler, _sw.Profiler):
            raise TypeError(f"profiler must be a stepwatch.Profiler, not {type(profiler).__name__}")
        self.extended = extended
        self.format = format
        self.warmup_steps = warmup_steps
        self.run_file = run_file
        self.keep_durations = keep_durations
        self.loss_hooks = loss_hooks
        self.empty_hooks = empty_hooks
        self.modules = modules
        self.live = live
        if flops is not False and flops is not None and flops is not True \
                and not isinstance(flops, dict):
            raise ValueError("flops must be True, False or a dict of stepwatch.flops.watch's "
                             "options (flops_per_batch, length_fn, peak_flops)")
        self.flops = flops
        self._given = profiler
        self._reset_recording()
        atexit.register(_describe_at_exit, weakref.ref(self))

    def _reset_recording(self):
        """No recorder yet: it is made at setup (or at first use without a Trainer)."""
        self._recorder = self._given
        self._spans = None
        self._ranks = None            # the stepwatch.distributed watch under DDP
        self._pending = []            # [name, start_ns, end_ns or None] before the recorder
        self._pending_unbalanced = 0
        self._fit_open = False
        self._described = False
        self._notebook = None         # stepwatch.notebook.auto's display during a stage
        self._taps = []               # (object, attribute, original, wrapper) set by _tap
        self._owners = {}             # Lightning name prefix -> its object (see classify)
        if self._recorder is not None:
            self._attach(self._recorder)

    # ---- the recorder: made late, when the rank is known ---------------------------------

    @property
    def profiler(self):
        """The stepwatch.Profiler recorded into (made on first use outside a Trainer)."""
        return self._ensure()

    def _ensure(self, trainer=None):
        if self._recorder is None:
            where = _sw.distributed_rank(trainer)
            rank, world = where if where is not None else (0, 0)
            options = dict(name="lightning", warmup_steps=self.warmup_steps, rank=rank,
                           world_size=world, modules=self.modules, flops=self.flops or None)
            run_file = self.run_file
            try:
                if run_file:
                    run_file = run_file.replace("{stage}", self._stage or "none")
                    folder = os.path.dirname(run_file.replace("{rank}", str(rank)))
                    os.makedirs(folder or ".", exist_ok=True)
                recorder = _sw.Profiler(run_file=run_file, **options)
            except (OSError, _sw.Error) as e:
                # never stop the training for the profiler's sake: record without the file
                warnings.warn(f"stepwatch: cannot write the run file {self.run_file!r} ({e}); "
                              "recording without it", RuntimeWarning, stacklevel=2)
                recorder = _sw.Profiler(**options)
            self._attach(recorder)
            if multiprocessing.parent_process() is not None:
                # A multiprocessing child (ddp_spawn, ddp_fork) may end by os._exit, which runs
                # no atexit: its finalizers complete the report and the run file instead.
                multiprocessing.util.Finalize(self, _finish, args=(weakref.ref(self), recorder),
                                              exitpriority=10)
        return self._recorder

    def _attach(self, recorder):
        self._recorder = recorder
        how = classify if self.empty_hooks else functools.partial(classify, owners=self._owners)
        self._spans = _Spans(recorder, how, self.keep_durations)
        # Lightning calls self.start/self.stop and enters self.profile(name) around every hook:
        # from now on the C methods answer directly (profile: a C context manager, where
        # Lightning's base class has a generator-based one that costs more than the span).
        self.start = self._spans.start
        self.stop = self._spans.stop
        self.profile = self._spans.profile
        pending, self._pending = self._pending, []
        for name, start, end in pending:
            if end is None:
                self._spans.start_at(name, start)
            else:
                self._spans.record(name, start, end)

    # Before the recorder exists (Lightning's configure_callbacks hook runs before setup, when
    # the rank may not be known yet) spans wait in a short list.
    def start(self, action_name):
        if len(self._pending) >= _PENDING_MAX:
            self._ensure()
            return self.start(action_name)
        if any(span[0] == action_name and span[2] is None for span in self._pending):
            self._pending_unbalanced += 1  # started again while open (as Spans counts it)
        self._pending.append([action_name, _sw.now_ns(), None])

    def stop(self, action_name):
        now = _sw.now_ns()
        for span in reversed(self._pending):
            if span[0] == action_name and span[2] is None:
                span[2] = now
                return
        self._pending_unbalanced += 1

    # ---- the Lightning Profiler contract ------------------------------------------------

    def setup(self, stage, local_rank=None, log_dir=None):
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        trainer = _trainer_of(self)
        recorder = self._ensure(trainer)
        self._described = False
        if trainer is not None:
            self._tap(trainer)
        if not self._fit_open:
            recorder.phase("fit").begin()
            self._fit_open = True
        if self._notebook is None and (trainer is None or trainer.is_global_zero):
            from stepwatch import notebook
            self._notebook = notebook.auto(recorder, self.live)
        if self._ranks is None:
            import stepwatch.distributed as swdist
            self._ranks = swdist.watch_group(recorder, quiet=True)

    def summary(self):
        """The report, titled as Lightning titles it ("FIT Profiler Report"); names whole."""
        recorder = self._ensure()
        self._spans.close()
        text = recorder.report(self.format, full_names=True, brief=not self.extended)
        view = self._ranks.view if self._ranks is not None else None
        if view is not None:  # the view's own formats; the peers' table styles get the table
            text += view.report_after(self.format)
        if self.format in ("csv", "json"):
            return text
        stage = f"{self._stage.upper()} " if self._stage is not None else ""
        if self.format == "lightning":  # its first line is "Profiler Report"
            return stage + text
        return f"{stage}Profiler Report\n{text}"

    def describe(self):
        """Write the report (once per stage) to the file or the log."""
        if self._described:
            return
        self._described = True
        self._ensure()
        self._spans.close()
        self._untap()
        if self._fit_open:
            self._recorder.phase("fit").end()
            self._fit_open = False
        if self._ranks is not None:  # collective: Lightning describes on every rank
            import stepwatch.distributed as swdist
            swdist.finish(self._recorder)
        from stepwatch import notebook  # the final summary stays in the cell
        notebook.finish(self._notebook)
        self._notebook = None
        super().describe()

    def _repr_html_(self):
        from stepwatch import notebook
        return notebook.repr_html(self._recorder)

    # ---- reading back -------------------------------------------------------------------

    def records(self, phase=None):
        """The report's rows as a list of dicts (pandas.DataFrame(records))."""
        return self._ensure().records(phase)

    @property
    def recorded_durations(self):
        """SimpleProfiler's recorded_durations, read-only: action -> its latest durations
        in seconds (at most keep_durations of them)."""
        self._ensure()
        return _Durations(self._spans)

    @property
    def unbalanced(self):
        """Stops without a start and starts of an action already open: counted, not raised."""
        spans = self._spans.unbalanced if self._spans is not None else 0
        return spans + self._pending_unbalanced

    # ---- what Lightning tells the strategy and the model but not the profiler ---------------

    def _tap(self, trainer):
        """Lightning hands profilers neither batches nor exceptions. For the run it is set up
        for, the profiler taps the trainer's strategy (instance attributes, removed again by
        describe()): batch_to_device, which every loop calls with each batch, gives the step
        its batch size (for samples/s); teardown, which Lightning calls also when the run
        stops by an exception or Ctrl-C (then skipping describe()), names where an
        out-of-memory error happened (stepwatch/_oom.py) and writes the report.
        With loss_hooks, the LightningModule's loss modules are timed as "loss": their
        forward, on the instance, becomes Spans.timed around it (a torch forward hook would
        send each call down torch's slow path, about 2 us). No callback: Lightning would ask
        it for each of its 6 hooks per training step, at about 60 ns each, even unused."""
        if self._taps:
            return
        self._owners.update(_owners_of(trainer))
        strategy = trainer.strategy
        self._set_tap(strategy, "batch_to_device",
                      functools.partial(self._spans.batch, strategy.batch_to_device))
        self._set_tap(strategy, "teardown",
                      functools.partial(_teardown, weakref.ref(self), strategy.teardown))
        self._spans.tapped = True
        watch = getattr(self._recorder, "flops", None)
        if watch is not None and hasattr(strategy, "optimizer_step"):
            logged = _FlopsLog(watch, self._recorder, weakref.ref(trainer))
            self._set_tap(strategy, "optimizer_step",
                          functools.partial(logged.after, strategy.optimizer_step))
        # trainer.save_checkpoint (ModelCheckpoint's and the user's) as "checkpoint": inside
        # a step (every_n_train_steps) it is the step's cause when it makes the step slow
        self._set_tap(trainer, "save_checkpoint",
                      _checkpoint.timed(self._recorder, trainer.save_checkpoint,
                                        target=(0, "filepath")))
        if self.loss_hooks and trainer.lightning_module is not None:
            import torch
            for m in trainer.lightning_module.modules():
                if isinstance(m, torch.nn.modules.loss._Loss) and "forward" not in vars(m):
                    self._set_tap(m, "forward", functools.partial(
                        self._spans.timed, f"[Loss]{type(m).__name__}", m.forward))

    def _set_tap(self, owner, name, wrapper):
        self._taps.append((owner, name, owner.__dict__.get(name, _patching.MISSING), wrapper))
        setattr(owner, name, wrapper)

    def _untap(self):
        """The taps still ours go; one another tool wrapped since stays (_patching.restore),
        and batch() under it only calls through."""
        if self._spans is not None:
            self._spans.tapped = False
        _patching.restore(self._taps, "stepwatch.lightning: the run's end")
        self._owners.clear()  # the names seen are classified: let the run's objects go

    # ---- pickling: the options travel, the recording does not ---------------------------

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in _TRANSIENT}
        state["_output_file"] = None  # the file stays with its process
        state["_write_stream"] = None
        state["_given"] = None  # a live stepwatch.Profiler cannot travel: the copy makes its own
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_recording()
        atexit.register(_describe_at_exit, weakref.ref(self))


SimpleProfiler = Profiler  # `from stepwatch.lightning import SimpleProfiler`: the one-line switch

# What a pickled or copied Profiler leaves behind: the recording (it stays in this process).
_TRANSIENT = frozenset({"_recorder", "_spans", "start", "stop", "profile", "_pending", "_pending_unbalanced",
                        "_fit_open", "_described", "_taps", "_owners",
                        "_lightning_module", "_ranks", "_notebook"})


class _FlopsLog:
    """Profiler(flops=...): every log_every_n_steps optimizer steps, the trainer's loggers get
    the model FLOP/s, MFU and tokens/s of the training steps since the last log (their time:
    the "train" phase's step rows)."""

    def __init__(self, watch, recorder, trainer_ref):
        self.watch, self.recorder, self.trainer_ref = watch, recorder, trainer_ref
        self.steps = 0
        self.last = (0.0, 0, 0)  # FLOPs, tokens, step ns at the last log

    def after(self, optimizer_step, *args, **kwargs):
        out = optimizer_step(*args, **kwargs)
        self.steps += 1
        trainer = self.trainer_ref()
        every = getattr(trainer, "log_every_n_steps", 50) or 50
        if trainer is not None and self.steps % every == 0:
            try:
                self.log(trainer)
            except Exception as exc:  # a figure less, never a failed step
                print(f"stepwatch.lightning: no stepwatch/* figures ({exc!r})", file=sys.stderr)
        return out

    def log(self, trainer):
        step = next((r for r in self.recorder.records("train") if r["action"] == "step"), None)
        step_ns = (step["total_ns"] + step["warmup_total_ns"]) if step else 0
        from stepwatch import flops as _flops
        seconds = (step_ns - self.last[2]) / 1e9
        metrics, mark = _flops.log_rates(self.watch, self.last[:2], seconds)
        self.last = mark + (step_ns,)
        if not metrics:
            return
        for logger in trainer.loggers:  # at the optimizer steps done (global_step counts
            logger.log_metrics(metrics, step=self.steps)  # this one only after it returns)


class _Durations(collections.abc.Mapping):
    """recorded_durations: action name -> list of its latest durations (s), read-only."""

    def __init__(self, spans):
        self._spans = spans

    def __getitem__(self, name):
        return self._spans.durations(name)

    def __iter__(self):
        return iter(self._spans.names())

    def __len__(self):
        return len(self._spans.names())


def _teardown(ref, teardown):
    """Strategy.teardown while a Profiler taps it: after the strategy's own, if an exception
    is being handled (Lightning tears down in its `except` branch, then skips describe()),
    the profiler writes its report: the exception has left every profiled block (profile()
    stops them on the way out), so nothing is open. An out-of-memory error is named first,
    its module by its path in the LightningModule."""
    teardown()
    prof = ref()
    failed = sys.exc_info()[1]
    if prof is not None and failed is not None:
        if prof._recorder is not None:  # an out-of-memory error: its module, under the model
            trainer = _trainer_of(prof)
            _oom.seen(prof._recorder, failed,
                      root=trainer.lightning_module if trainer is not None else None)
        prof.describe()


def _trainer_of(profiler):
    module = getattr(profiler, "_lightning_module", None)
    try:
        return module.trainer if module is not None else None
    except (ReferenceError, RuntimeError, AttributeError):
        return None


def _finish(ref, recorder):
    _describe_at_exit(ref)
    recorder.close()


def _describe_at_exit(ref):
    prof = ref()
    if prof is not None and not prof._described and prof._fit_open:
        try:
            prof.describe()
        except Exception:
            pass
