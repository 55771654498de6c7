"""stepwatch.thunder — thunder's TimeProfiler callback for Lightning, on stepwatch's C marks.

    Trainer(callbacks=[stepwatch.thunder.TimeProfiler("backward")], logger=CSVLogger("logs"))

``TimeProfiler`` is ``thunder.callbacks.TimeProfiler`` (thunder 0.1.1): the same keys,
definitions and logging; docs/python.md ("TimeProfiler: thunder's callback") lists the
differences, each deliberate. Also importable as ``stepwatch.lightning.TimeProfiler`` (the
same class), its first home.
"""

import functools

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import MisconfigurationException

import stepwatch as _sw
from stepwatch import _oom

from ._stepwatch import Intervals as _Intervals

__all__ = ["TimeProfiler"]

# The keys the hooks mark (the downtimes are computed from them), by index into Intervals.
_MARKED = ("train batch", "validation batch", "train epoch", "validation epoch", "backward",
           "optimizer step")
_TRAIN_BATCH, _VAL_BATCH, _TRAIN_EPOCH, _VAL_EPOCH, _BACKWARD, _OPT_STEP = range(len(_MARKED))


class TimeProfiler(Callback):
    """thunder's TimeProfiler (``thunder.callbacks.TimeProfiler``).

    Logs, at the end of each training epoch through ``pl_module.log_dict`` as
    ``TimeProfiler/<key>`` (seconds, ``on_epoch=True``), the mean time of: train batch,
    validation batch, train epoch (less the mean validation epoch), validation epoch, and
    the downtime per sample (avg train downtime, avg val downtime). Opt in with keys (or
    ``True`` for all): backward, optimizer step, total train downtime, total val downtime.
    Downtime is thunder's: the epoch less its batches (``total ... downtime``), per sample.
    Needs a logger (MisconfigurationException otherwise), as thunder's.

    The per-batch hooks are C (``Intervals``, python/_stepwatch/_thunder.c), set on the
    instance; the hooks it does not need are None there, which Lightning skips.

    ``profiler``: a stepwatch.Profiler to also record every timed interval into (p50/p99,
    the per-step series of a run file). Off by default.
    """

    _default_keys = ("train batch", "validation batch", "train epoch", "validation epoch",
                     "avg train downtime", "avg val downtime")
    _optional_keys = ("backward", "optimizer step", "total train downtime", "total val downtime")

    def __init__(self, *keys, profiler=None):
        if len(keys) != 0 and keys[0] is True:
            keys = sorted(self._optional_keys)
        known = sorted(set(keys).intersection(self._optional_keys))
        if known != sorted(keys):
            raise ValueError(f"TimeProfiler got unknown keys: {set(keys) - set(known)}")
        self.keys = sorted(set(keys).union(self._default_keys))
        self.profiler = profiler
        self.deltas = {}
        self._hooks()

    def _hooks(self):
        """Lightning calls each hook of each callback through its profiler (a context manager,
        about a microsecond) and skips hooks that are not callable: on this instance the hooks
        not needed are None, and those a subclass does not override are C marks. backward
        and optimizer step are timed only when asked for (thunder times them always, and
        logs them only when asked for)."""
        self._intervals = _Intervals(len(_MARKED))
        self._opened = {}  # key -> its open mark's time, for profiler (opt-in)
        unused = set(_UNUSED_HOOKS)
        if "backward" not in self.keys:
            unused |= {"on_before_backward", "on_after_backward"}
        if "optimizer step" not in self.keys:
            unused.add("on_before_optimizer_step")
        mark, batch = self._intervals.mark, self._intervals.mark_batch
        train_end = (_TRAIN_BATCH, _OPT_STEP) if "optimizer step" in self.keys else _TRAIN_BATCH
        fast = {"on_train_batch_start": functools.partial(batch, _TRAIN_BATCH),
                "on_train_batch_end": functools.partial(mark, train_end),
                "on_validation_batch_start": functools.partial(batch, _VAL_BATCH),
                "on_validation_batch_end": functools.partial(mark, _VAL_BATCH),
                "on_validation_epoch_start": functools.partial(mark, _VAL_EPOCH),
                "on_validation_epoch_end": functools.partial(mark, _VAL_EPOCH),
                "on_before_backward": functools.partial(mark, _BACKWARD),
                "on_after_backward": functools.partial(mark, _BACKWARD),
                "on_before_optimizer_step": functools.partial(mark, _OPT_STEP)}
        for hook in dir(Callback):
            if not hook.startswith("on_") or getattr(type(self), hook) is not getattr(
                    TimeProfiler if hook in vars(TimeProfiler) else Callback, hook):
                continue  # a subclass's own hook stays
            if hook in unused:
                setattr(self, hook, None)
            elif hook in fast and self.profiler is None:
                setattr(self, hook, fast[hook])

    # thunder's log_time: the marks of a key pair up, the first opens an interval, the second
    # ends it (the class's hooks below; the instance's C ones do the same without profiler)
    def _mark(self, key, batch=None):
        if batch is None:
            self._intervals.mark(key)
        else:
            self._intervals.mark_batch(key, None, None, batch)
        if self.profiler is not None:
            for k in key if isinstance(key, tuple) else (key,):
                now = _sw.now_ns()
                start = self._opened.pop(k, None)
                if start is None:
                    self._opened[k] = now
                else:
                    self.profiler.action(_MARKED[k]).record(start, now)

    def compute_time_delta(self):
        """thunder's deltas: the mean interval per key, then the downtimes."""
        deltas, samples = {}, {}
        for key, (open_at, total, count, batches, n) in zip(_MARKED, self._intervals.state()):
            # a mark left alone counts as an interval of length 0 (thunder's pairing pads it)
            count += open_at is not None
            if count:
                deltas[key] = total / count
                samples[key] = (batches, n)
        if "train epoch" in deltas and "train batch" in deltas:
            if "validation epoch" in deltas:
                deltas["train epoch"] -= deltas["validation epoch"]
            _downtime(deltas, samples, "train epoch", "train batch", "train")
            if "validation epoch" in deltas and "validation batch" in deltas:
                _downtime(deltas, samples, "validation epoch", "validation batch", "val")
        self.deltas = deltas
        return deltas

    def log_to_logger(self, pl_module):
        self.compute_time_delta()
        pl_module.log_dict({f"{self.__class__.__name__}/{k}": v for k, v in self.deltas.items()
                            if k in self.keys}, prog_bar=False, on_step=False, on_epoch=True)
        self._clear()

    def _clear(self):
        self._intervals.clear()
        self._opened.clear()
        self.deltas = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._mark(_TRAIN_BATCH, batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._mark((_TRAIN_BATCH, _OPT_STEP) if "optimizer step" in self.keys else _TRAIN_BATCH)

    def on_train_epoch_start(self, trainer, pl_module):
        self._mark(_TRAIN_EPOCH)

    def on_train_epoch_end(self, trainer, pl_module):
        self._mark(_TRAIN_EPOCH)
        self.log_to_logger(pl_module)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._mark(_VAL_BATCH, batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx=0):
        self._mark(_VAL_BATCH)

    def on_validation_epoch_start(self, trainer, pl_module):
        self._mark(_VAL_EPOCH)

    def on_validation_epoch_end(self, trainer, pl_module):
        self._mark(_VAL_EPOCH)

    def on_before_backward(self, trainer, pl_module, loss):
        self._mark(_BACKWARD)

    def on_after_backward(self, trainer, pl_module):
        self._mark(_BACKWARD)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._mark(_OPT_STEP)

    def setup(self, trainer, pl_module, stage):
        if not trainer.loggers:
            raise MisconfigurationException(
                f"Cannot use {self.__class__.__name__} callback with no logger")
        if stage == "fit":
            self._clear()

    def teardown(self, trainer, pl_module, stage):
        if stage == "fit":
            self._clear()

    def on_exception(self, trainer, pl_module, exception):
        """Lightning's hook for a run that fails: an out-of-memory error is named, its module
        by its path in pl_module (stepwatch/_oom.py), into this callback's profiler, else the
        Trainer's stepwatch.lightning.Profiler's, else on stderr alone."""
        profiler = self.profiler
        if profiler is None:
            recorder = getattr(trainer.profiler, "_recorder", None)
            profiler = recorder if isinstance(recorder, _sw.Profiler) else None
        _oom.seen(profiler, exception, root=pl_module)

    def state_dict(self):
        # plain types only: the checkpoint loads with torch.load(weights_only=True); a mark
        # left open began on this process's clock and is not kept
        return {"keys": list(self.keys), "deltas": dict(self.deltas),
                "marks": {k: [None] + list(row[1:])
                          for k, row in zip(_MARKED, self._intervals.state())}}

    def load_state_dict(self, state_dict):
        self.keys = list(state_dict.get("keys", self.keys))
        marks = state_dict.get("marks", {})
        self._intervals.set_state([marks.get(k, (None, 0.0, 0, 0, 0)) for k in _MARKED])
        self.deltas = dict(state_dict.get("deltas", {}))

    # pickling (ddp_spawn pickles the trainer and its callbacks): the C marks stay behind
    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_intervals", "_opened") and not k.startswith("on_")}
        state["_marks"] = self._intervals.state()
        state["profiler"] = None  # a live stepwatch.Profiler cannot travel: the copy has none
        return state

    def __setstate__(self, state):
        marks = state.pop("_marks", None)
        self.__dict__.update(state)
        self._hooks()
        if marks is not None:
            self._intervals.set_state([(None,) + tuple(row[1:]) for row in marks])


def _downtime(deltas, samples, epoch, batch, name):
    """thunder's downtime: the epoch less its batches, and that per sample."""
    batches, n = samples[batch]
    total = deltas[epoch] - batches * deltas[batch]
    deltas[f"total {name} downtime"] = total
    if n:
        deltas[f"avg {name} downtime"] = total / n


_UNUSED_HOOKS = [h for h in dir(Callback) if h.startswith("on_") and h not in vars(TimeProfiler)
                 and h not in ("on_save_checkpoint", "on_load_checkpoint", "on_exception")]
