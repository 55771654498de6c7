"""stepwatch.lightning's throughput: drop-ins for Lightning's ThroughputMonitor callback and
Fabric's Throughput, measure_flops and get_available_flops.

    trainer = Trainer(callbacks=[stepwatch.lightning.ThroughputMonitor(batch_size_fn=len)])

Same constructor, same logged keys and values as lightning.pytorch.callbacks.ThroughputMonitor
("train/time", "train/batches", "train/samples", "train/lengths", then, once window_size
batches were seen, "train/device/batches_per_sec", ".../samples_per_sec", ".../items_per_sec",
".../flops_per_sec", ".../mfu" and, on several devices, the job-wide ones without "device/"),
and the same ``flops_per_batch`` convention (an attribute of the LightningModule, the FLOPs of
one batch on one device). What it adds: when the module sets no ``flops_per_batch``, the
FLOPs of a training batch are counted over the real step (stepwatch.flops: forward and
backward, once per input shape) instead of being left out; the peak comes from stepwatch's
datasheet table (stepwatch.peaks).
"""
import collections
import time
import warnings

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import RunningStage, TrainerFn

from stepwatch import flops as _flops
from stepwatch import peaks as _peaks

__all__ = ["Throughput", "ThroughputMonitor", "measure_flops", "get_available_flops"]


class _Totals:
    """The last window_size values of one running total, each larger than the one before."""
    __slots__ = ("values", "name")

    def __init__(self, size, name):
        self.values = collections.deque(maxlen=size)
        self.name = name

    def check(self, value):
        if self.values and value <= self.values[-1]:
            raise ValueError(f"Expected the value to increase, last: {self.values[-1]}, "
                             f"current: {value} ({self.name})")

    def full(self):
        return len(self.values) == self.values.maxlen

    def span(self):
        """Growth from the window's first value to its last."""
        return self.values[-1] - self.values[0]


class Throughput:
    """Rolling throughput over the last window_size updates (Fabric's Throughput's API).

    update() takes running totals per device (time in seconds since the start, batches,
    samples, lengths: items such as tokens) and the FLOPs of the work since the last update;
    compute() gives the totals and, once the window is full, the rates per device, and for
    the whole job when world_size > 1. available_flops (one device's peak) gives the MFU."""

    def __init__(self, available_flops=None, world_size=1, window_size=100, separator="/"):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, not {world_size!r}")
        if not isinstance(window_size, int) or window_size < 2:
            raise ValueError(f"window_size must be an int >= 2, not {window_size!r}")
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._size = window_size
        self.reset()

    def reset(self):
        size = self._size
        self._time = _Totals(size, "time")
        self._batches = _Totals(size, "batches")
        self._samples = _Totals(size, "samples")
        self._lengths = _Totals(size, "lengths")
        self._flops = collections.deque(maxlen=size)  # job-wide FLOPs of each update

    def update(self, *, time, batches, samples, lengths=None, flops=None):
        # Everything is checked before anything is kept: a refused update changes nothing.
        self._time.check(time)
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than "
                             f"batches ({batches})")
        self._batches.check(batches)
        self._samples.check(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Expected lengths ({lengths}) to be greater or equal than "
                                 f"samples ({samples})")
            self._lengths.check(lengths)
            if len(self._lengths.values) != len(self._samples.values):
                raise RuntimeError(f"If lengths are passed ({len(self._lengths.values) + 1}), "
                                   f"there needs to be the same number of samples "
                                   f"({len(self._samples.values) + 1})")
        self._time.values.append(time)
        self._batches.values.append(batches)
        self._samples.values.append(samples)
        if lengths is not None:
            self._lengths.values.append(lengths)
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self):
        sep, world = self.separator, self.world_size
        out = {"time": self._time.values[-1], "batches": self._batches.values[-1],
               "samples": self._samples.values[-1]}
        if self._lengths.values:
            out["lengths"] = self._lengths.values[-1]
        if not self._time.full():
            return out
        elapsed = self._time.span()
        rates = [("batches_per_sec", self._batches.span() / elapsed),
                 ("samples_per_sec", self._samples.span() / elapsed)]
        if self._lengths.full():
            rates.append(("items_per_sec", self._lengths.span() / elapsed))
        for name, per_device in rates:
            out[f"device{sep}{name}"] = per_device
            if world > 1:
                out[name] = per_device * world
        if len(self._flops) == self._flops.maxlen:
            # the window's first update closes the interval before it: its FLOPs are not in
            job = (sum(self._flops) - self._flops[0]) / elapsed
            if world > 1:
                out["flops_per_sec"] = job
            out[f"device{sep}flops_per_sec"] = job / world
            if self.available_flops:
                out[f"device{sep}mfu"] = job / world / self.available_flops
        return out


def measure_flops(model, forward_fn, loss_fn=None):
    """FLOPs of forward_fn() (and of loss_fn(its output).backward() when loss_fn is given),
    counted with stepwatch.flops.StepCounter; a meta-device model costs no compute."""
    del model  # the count needs only the calls; kept for Fabric's signature
    counter = _flops.StepCounter()
    with counter:
        out = forward_fn()
        if loss_fn is not None:
            loss_fn(out).backward()
    return int(counter.phases["forward"] + counter.phases["backward"])


def get_available_flops(device, dtype):
    """The dense peak FLOP/s of device in dtype (a torch.dtype, or "tfloat32") from
    stepwatch.peaks, or None (with a warning naming why) where the table has none."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if dtype == "tfloat32":
        kind = "tf32"
    elif isinstance(dtype, torch.dtype):
        kind = _flops._dtype_name(dtype)
    else:
        kind = str(dtype)
    label = _peaks.match_device(name)
    if label is None:
        warnings.warn(f"stepwatch: the peak FLOPs were not found for {name!r} (stepwatch.peaks "
                      f"holds the datasheet figures of the GPUs people train on)",
                      RuntimeWarning, stacklevel=2)
        return None
    peak = _peaks.PEAKS[label].get(kind)
    if peak is None:
        warnings.warn(f"stepwatch: {name!r} does not support {dtype} ({label} has no dense "
                      f"{kind} figure)", RuntimeWarning, stacklevel=2)
        return None
    return int(peak)


def _compute_dtype(trainer):
    """The dtype of the trainer's matmuls, from its precision setting."""
    precision = str(getattr(trainer, "precision", "32-true"))
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    if precision.startswith("64"):
        return torch.float64
    return torch.float32


class ThroughputMonitor(Callback):
    """Lightning's ThroughputMonitor (same arguments, keys and values), with FLOPs counted
    for a module that sets no ``flops_per_batch``.

    batch_size_fn(batch) -> samples in the batch; length_fn(batch) -> items (tokens) in it;
    kwargs: Throughput's (window_size, separator). count_flops=False leaves a module without
    flops_per_batch without FLOP figures, as Lightning does."""

    def __init__(self, batch_size_fn, length_fn=None, count_flops=True, **kwargs):
        super().__init__()
        if not callable(batch_size_fn):
            raise ValueError("batch_size_fn must be a callable of the batch")
        if length_fn is not None and not callable(length_fn):
            raise ValueError("length_fn must be a callable of the batch")
        self.kwargs = kwargs
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.count_flops = count_flops
        self.available_flops = None
        self._throughputs = {}   # RunningStage -> Throughput
        self._t0s = {}           # RunningStage -> perf_counter at its start (shifted: below)
        self._totals = {}        # RunningStage -> [batches, samples, lengths]
        self._watch = None       # stepwatch.flops.Watch when FLOPs are counted here
        self._warned = False

    def setup(self, trainer, pl_module, stage):
        self.available_flops = get_available_flops(trainer.strategy.root_device,
                                                   _compute_dtype(trainer))
        make = lambda: Throughput(available_flops=self.available_flops,  # noqa: E731
                                  world_size=trainer.world_size, **self.kwargs)
        if stage == TrainerFn.FITTING and trainer.enable_validation:
            self._throughputs[RunningStage.VALIDATING] = make()
        self._throughputs[trainer.state.stage] = make()
        if stage == TrainerFn.FITTING and self.count_flops and self._watch is None and \
                not hasattr(pl_module, "flops_per_batch"):
            self._watch = _flops.Watch(None)

    def teardown(self, trainer, pl_module, stage):
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def _start(self, trainer):
        stage = trainer.state.stage
        # a fit starts afresh; validate/test/predict called again go on counting
        if trainer.state.fn == TrainerFn.FITTING or stage not in self._totals:
            self._throughputs[stage].reset()
            self._totals[stage] = [0, 0, 0]
        self._t0s[stage] = time.perf_counter()

    def _batch_flops(self, pl_module, stage):
        if hasattr(pl_module, "flops_per_batch"):
            return pl_module.flops_per_batch
        if self._watch is not None and stage == RunningStage.TRAINING:
            return self._watch.batch_flops()
        if not self._warned and not self.count_flops:
            self._warned = True
            warnings.warn(f"stepwatch ThroughputMonitor: {type(pl_module).__name__} sets no "
                          f"`flops_per_batch` and count_flops is off: no FLOP figures",
                          RuntimeWarning, stacklevel=3)
        return None

    @torch.inference_mode()  # a batch_size_fn or length_fn that computes makes no graph
    def _update(self, trainer, pl_module, batch):
        stage = trainer.state.stage
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # else the time is when the work was queued
        elapsed = time.perf_counter() - self._t0s[stage]
        totals = self._totals[stage]
        if self.length_fn is not None:
            totals[2] += self.length_fn(batch)
        totals[1] += self.batch_size_fn(batch)
        totals[0] += 1
        self._throughputs[stage].update(
            time=elapsed, batches=totals[0], samples=totals[1],
            lengths=None if self.length_fn is None else totals[2],
            flops=self._batch_flops(pl_module, stage))

    def _log(self, trainer, step=None):
        if not trainer._logger_connector.should_update_logs:
            return
        stage = trainer.state.stage
        tp = self._throughputs[stage]
        metrics = {f"{stage.value}{tp.separator}{k}": v for k, v in tp.compute().items()}
        trainer._logger_connector.log_metrics(metrics, step=step)

    def _eval_batch(self, trainer, pl_module, batch, progress):
        step = progress.batch_progress.total.ready
        self._update(trainer, pl_module, batch)
        self._log(trainer, step)

    def on_train_start(self, trainer, *_):
        if trainer.is_global_zero:
            self._start(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, *_):
        if not trainer.is_global_zero:
            return
        self._update(trainer, pl_module, batch)
        if not trainer.fit_loop._should_accumulate():  # one log per optimizer step
            self._log(trainer)

    def on_validation_start(self, trainer, *_):
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._start(trainer)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, *_, **__):
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._eval_batch(trainer, pl_module, batch, trainer._evaluation_loop)

    def on_validation_end(self, trainer, *_):
        """Training's clock skips the validation: from training's last update to
        validation's last, the training time stands still."""
        if not trainer.is_global_zero or trainer.sanity_checking or \
                trainer.state.fn != TrainerFn.FITTING:
            return
        train, val = RunningStage.TRAINING, RunningStage.VALIDATING
        t_train = self._throughputs[train]._time.values
        t_val = self._throughputs[val]._time.values
        paused_at = self._t0s[train] + (t_train[-1] if t_train else 0.0)
        resumed_at = self._t0s[val] + (t_val[-1] if t_val else 0.0)
        self._t0s[train] += resumed_at - paused_at

    def on_test_start(self, trainer, *_):
        if trainer.is_global_zero:
            self._start(trainer)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, *_, **__):
        if trainer.is_global_zero:
            self._eval_batch(trainer, pl_module, batch, trainer._evaluation_loop)

    def on_predict_start(self, trainer, *_):
        if trainer.is_global_zero:
            self._start(trainer)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, *_, **__):
        if trainer.is_global_zero:
            self._eval_batch(trainer, pl_module, batch, trainer.predict_loop)
