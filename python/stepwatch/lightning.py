"""stepwatch.lightning — PyTorch Lightning front end.

    Trainer(profiler=stepwatch.lightning.Profiler())                 # SimpleProfiler's place
    Trainer(callbacks=[stepwatch.lightning.TimeProfiler("backward")])  # thunder's callback

``Profiler`` honours ``lightning.pytorch.profilers.Profiler``'s contract: ``dirpath`` and
``filename`` (the report goes to ``{stage}-{filename}-{local_rank}.txt`` like Lightning's own
profilers, else to the log), ``start``/``stop``/``profile``/``summary``/``describe``. Every
Lightning action keeps its own name (``[Callback]X.on_train_batch_end``); the ones with a
common meaning are also timed under the shared vocabulary around it: ``*_next`` -> data,
``[Strategy]*.training_step`` (and validation/test/predict) -> forward, ``[Strategy]*.backward``
-> backward, ``*.optimizer_zero_grad`` -> zero_grad. (``optimizer_step`` runs the closure, i.e.
forward and backward, inside it, so it keeps its Lightning name only: its self time is the
optimizer's.) Steps begin at each ``*_next``; phases fit > epoch > train / valid. A step's
batch size (for samples/s) is read from its batch (``stepwatch.batch_size``) by a callback the
profiler adds to the Trainer at ``setup``: Lightning hands profilers no batches.

That callback's own hooks are not timed (they are the profiler's work, not the user's).

Under DDP (``strategy="ddp"``: a process group of more than one rank at ``setup``),
``stepwatch.distributed`` watches the profiler: every rank keeps its run file, DDP's gradient
all-reduce is timed, and at ``describe()`` the ranks' payloads are gathered to rank 0, whose
report (Lightning writes it on rank 0 only, unless ``filename`` is given) ends with the
cross-rank view: the straggler ranks and their blame (docs/ranks.md).

An unbalanced ``stop`` (or a second ``start``) is counted in ``unbalanced``, never raised. The
report is written at ``describe()``; if training stops by an exception or Ctrl-C (Lightning
then skips ``describe``), that callback's ``on_exception`` writes it instead.
"""
import atexit
import re
import weakref

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler as _LightningProfiler

import stepwatch as _sw
from stepwatch.lightning_advanced import AdvancedProfiler  # noqa: F401 (cProfile tables)
from stepwatch.lightning_devicestats import DeviceStatsMonitor  # noqa: F401 (device stats)

__all__ = ["Profiler", "TimeProfiler"]

# Lightning action name -> the common action timed around it.
_COMMON = [
    (re.compile(r"_next$"), "data"),
    (re.compile(r"^\[Strategy\].*\.(training|validation|test|predict)_step$"), "forward"),
    (re.compile(r"^\[Strategy\].*\.backward$"), "backward"),
    (re.compile(r"\.optimizer_zero_grad$"), "zero_grad"),
]
_TRAIN_NEXT = "train_dataloader_next"
_UNTIMED = object()  # the entry of an action the profiler does not time


class _ProfilerEvents(Callback):
    """Added by Profiler.setup, for what Lightning tells callbacks but not profilers: each
    step's batch (its batch size, for samples/s), and an exception or Ctrl-C, after which
    Lightning skips the profiler's describe() (the report is written here instead)."""

    def __init__(self, profiler):
        self._profiler = weakref.ref(profiler)

    def _batch(self, batch):
        prof = self._profiler()
        if prof is not None and prof._step_open:
            prof.profiler.set_batch_size(_sw.batch_size(batch))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._batch(batch)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch(batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch(batch)

    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch(batch)

    def on_exception(self, trainer, pl_module, exception):
        # The exception has left every profiled block, and this callback's own spans are not
        # recorded: nothing is open, the report is complete.
        prof = self._profiler()
        if prof is not None:
            prof.describe()


class Profiler(_LightningProfiler):
    """A Lightning profiler recording into a stepwatch Profiler (C hot path).

    Args:
        dirpath, filename: as Lightning's profilers (report file ``{stage}-{filename}-{rank}.txt``).
        format: report format: table (default), lightning, fastxtend, ignite, markdown, csv, json.
        warmup_steps: first steps of each phase kept out of the statistics.
        run_file: also write a stepwatch run file ("{rank}" expands to the rank).
        profiler: record into this stepwatch.Profiler instead of a new one.
    """

    def __init__(self, dirpath=None, filename=None, format="table", warmup_steps=0,
                 run_file=None, profiler=None):
        super().__init__(dirpath=dirpath, filename=filename)
        if format not in _sw.FORMATS and format != "md":
            raise ValueError(f"unknown report format {format!r}; one of {_sw.FORMATS}")
        self.format = format
        self.profiler = profiler if profiler is not None else _sw.Profiler(
            name="lightning", warmup_steps=warmup_steps, run_file=run_file)
        self.unbalanced = 0          # stops without a start, starts of an open action
        self._entries = {}           # Lightning name -> [action, common action or None, open]
        self._step_open = False
        self._phase = None
        self._fit = self.profiler.phase("fit")
        self._epoch = self.profiler.phase("epoch")
        self._train = self.profiler.phase("train")
        self._valid = self.profiler.phase("valid")
        self._fit_open = False
        self._epoch_open = False
        self._described = False
        self._own_prefix = None      # "[Callback]<our callback>.": its hooks are not timed
        self._ranks = None           # the stepwatch.distributed watch under DDP
        atexit.register(_describe_at_exit, weakref.ref(self))

    # ---- the Profiler contract -----------------------------------------------------------

    def setup(self, stage, local_rank=None, log_dir=None):
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        self._described = False
        trainer = _trainer_of(self)
        if trainer is not None:
            events = next((cb for cb in trainer.callbacks
                           if isinstance(cb, _ProfilerEvents) and cb._profiler() is self), None)
            if events is None:
                events = _ProfilerEvents(self)
                trainer.callbacks.append(events)
            self._own_prefix = f"[Callback]{events.state_key}."
        if not self._fit_open:
            self._fit.begin()
            self._fit_open = True
        if self._ranks is None:
            import stepwatch.distributed as swdist
            self._ranks = swdist.watch_group(self.profiler, quiet=True)

    def start(self, action_name):
        entry = self._entries.get(action_name)
        if entry is None:
            entry = self._entry(action_name)
        if entry is _UNTIMED:
            return
        if entry[2]:
            self.unbalanced += 1
        entry[2] += 1
        if entry[3]:
            self._structure_start(action_name)
        if entry[1] is not None:
            entry[1].begin()
        entry[0].begin()

    def stop(self, action_name):
        entry = self._entries.get(action_name)
        if entry is _UNTIMED:
            return
        if entry is None or not entry[2]:
            self.unbalanced += 1
            return
        entry[2] -= 1
        if action_name == "run_training_epoch":
            self._close_steps()  # the last step and phase nest inside the epoch's span
        entry[0].end()
        if entry[1] is not None:
            entry[1].end()
        if action_name == "run_training_epoch" and self._epoch_open:
            self._epoch.end()
            self._epoch_open = False

    def summary(self):
        self._close_steps()
        text = self.profiler.report(self.format)
        view = self._ranks.view if self._ranks is not None else None
        if view is None:
            return text
        # the view's own formats; the peers' table styles get the plain table
        return text + view.report(self.format if self.format in ("markdown", "json") else "table")

    def describe(self):
        """Write the report (once per stage) to the file or the log."""
        if self._described:
            return
        self._described = True
        self._close_steps()
        if self._fit_open:
            self._fit.end()
            self._fit_open = False
        if self._ranks is not None:  # collective: Lightning describes on every rank
            import stepwatch.distributed as swdist
            swdist.finish(self.profiler)
        super().describe()

    # ---- helpers -------------------------------------------------------------------------

    def _entry(self, name):
        if self._own_prefix is not None and name.startswith(self._own_prefix):
            self._entries[name] = _UNTIMED  # the profiler's own work, not the user's
            return _UNTIMED
        common = None
        for pattern, common_name in _COMMON:
            if pattern.search(name):
                common = self.profiler.action(common_name)
                break
        # [action, common action, open count, marks the training structure]
        entry = [self.profiler.action(name), common, 0,
                 name.endswith("_next") or name == "run_training_epoch"]
        self._entries[name] = entry
        return entry

    def _structure_start(self, name):
        if name == "run_training_epoch":
            self._close_steps()
            self._epoch.begin()
            self._epoch_open = True
            return
        # a *_next: a new step begins with its data wait
        if self._step_open:
            self.profiler.step_end()
        want = self._train if name.endswith(_TRAIN_NEXT) else self._valid
        if want is not self._phase:
            if self._phase is not None:
                self._phase.end()
            want.begin()
            self._phase = want
        self.profiler.step_begin()
        self._step_open = True

    def _close_steps(self):
        if self._step_open:
            self.profiler.step_end()
            self._step_open = False
        if self._phase is not None:
            self._phase.end()
            self._phase = None

    def records(self, phase=None):
        """The report's rows as a list of dicts (pandas.DataFrame(records))."""
        return self.profiler.records(phase)


def _trainer_of(profiler):
    module = getattr(profiler, "_lightning_module", None)
    try:
        return module.trainer if module is not None else None
    except (ReferenceError, RuntimeError, AttributeError):
        return None


def _describe_at_exit(ref):
    prof = ref()
    if prof is not None and not prof._described and prof._fit_open:
        try:
            prof.describe()
        except Exception:
            pass


# ---- thunder's TimeProfiler ----------------------------------------------------------------

_DEFAULT_KEYS = ("train batch", "validation batch", "train epoch", "validation epoch",
                 "avg train downtime", "avg val downtime")
_OPTIONAL_KEYS = ("backward", "optimizer step", "total train downtime", "total val downtime")


class TimeProfiler(Callback):
    """thunder's TimeProfiler: logs step times through ``pl_module.log`` (seconds).

    Logged by default: train batch, validation batch, train epoch, validation epoch,
    avg train downtime, avg val downtime. Opt in with keys: backward, optimizer step,
    total train downtime, total val downtime. Downtime is the time between one batch's end
    and the next one's start (the data loader working, the model idle). Every key is also
    timed as a stepwatch action of the same name (``profiler`` or a new Profiler).
    """

    def __init__(self, *keys, profiler=None):
        unknown = [k for k in keys if k not in _DEFAULT_KEYS + _OPTIONAL_KEYS]
        if unknown:
            raise ValueError(f"unknown TimeProfiler keys {unknown}; known: "
                             f"{list(_DEFAULT_KEYS + _OPTIONAL_KEYS)}")
        self.keys = set(_DEFAULT_KEYS) | set(keys)
        self.profiler = profiler if profiler is not None else _sw.Profiler(name="TimeProfiler")
        self._actions = {k: self.profiler.action(k) for k in _DEFAULT_KEYS + _OPTIONAL_KEYS}
        self._start = {}
        self._batch_end = {"train": None, "val": None}
        self._downtime = {"train": [0.0, 0], "val": [0.0, 0]}

    # timing helpers: a key's span from _begin to _finish, recorded and returned in seconds
    def _begin(self, key):
        self._start[key] = _sw.now_ns()

    def _finish(self, key):
        start = self._start.pop(key, None)
        if start is None:
            return None
        end = _sw.now_ns()
        self._actions[key].record(start, end)
        return (end - start) / 1e9

    def _log(self, pl_module, key, value, **kwargs):
        if value is not None and key in self.keys:
            pl_module.log(key, value, **kwargs)

    def _downtime_start(self, stage):
        end = self._batch_end[stage]
        if end is not None:
            gap = _sw.now_ns() - end
            total = self._downtime[stage]
            total[0] += gap / 1e9
            total[1] += 1

    def _log_downtime(self, pl_module, stage):
        total, count = self._downtime[stage]
        name = "train" if stage == "train" else "val"
        if count:
            self._log(pl_module, f"avg {name} downtime", total / count, on_epoch=True, on_step=False)
            self._log(pl_module, f"total {name} downtime", total, on_epoch=True, on_step=False)
        self._downtime[stage] = [0.0, 0]
        self._batch_end[stage] = None

    # train
    def on_train_epoch_start(self, trainer, pl_module):
        self._begin("train epoch")
        self._val_in_epoch = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._downtime_start("train")
        self._begin("train batch")

    def on_before_backward(self, trainer, pl_module, loss):
        self._begin("backward")

    def on_after_backward(self, trainer, pl_module):
        self._pending_backward = self._finish("backward")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._begin("optimizer step")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        opt = self._finish("optimizer step")
        self._log(pl_module, "optimizer step", opt, on_step=True, on_epoch=False)
        self._log(pl_module, "backward", getattr(self, "_pending_backward", None),
                  on_step=True, on_epoch=False)
        self._pending_backward = None
        self._log(pl_module, "train batch", self._finish("train batch"), on_step=True,
                  on_epoch=False)
        self._batch_end["train"] = _sw.now_ns()

    def on_train_epoch_end(self, trainer, pl_module):
        start = self._start.pop("train epoch", None)
        if start is not None:
            # "without validation": Lightning validates inside the training epoch
            total = (_sw.now_ns() - start) / 1e9 - getattr(self, "_val_in_epoch", 0.0)
            self._actions["train epoch"].record(start, start + int(total * 1e9))
            self._log(pl_module, "train epoch", total, on_epoch=True, on_step=False)
        self._log_downtime(pl_module, "train")

    # validation
    def on_validation_epoch_start(self, trainer, pl_module):
        self._begin("validation epoch")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._downtime_start("val")
        self._begin("validation batch")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx=0):
        # Lightning keeps only epoch-level values of evaluation loops: the epoch's mean
        self._log(pl_module, "validation batch", self._finish("validation batch"),
                  on_step=False, on_epoch=True)
        self._batch_end["val"] = _sw.now_ns()

    def on_validation_epoch_end(self, trainer, pl_module):
        took = self._finish("validation epoch")
        if took is not None:
            self._val_in_epoch = getattr(self, "_val_in_epoch", 0.0) + took
        self._log(pl_module, "validation epoch", took, on_epoch=True, on_step=False)
        self._log_downtime(pl_module, "val")
