"""stepwatch.fastai — fastai front end with fastxtend's Simple and Throughput reports.

    learn = Learner(dls, model, loss_func=...).profile()          # fastxtend's spelling
    learn.fit(3)                                                  # report printed after fit
    learn.cbs.filter(lambda cb: isinstance(cb, StepwatchCallback))[0].records()

Events map onto the shared vocabulary: draw (the wait for the next batch, fastxtend's
before_draw) -> data, model -> forward, loss_func -> loss, backward, opt step -> optimizer,
opt zero_grad -> zero_grad; phases fit > epoch > train / valid; one step per batch, its
draw included. mode="throughput" keeps only steps and draw (fastxtend's ThroughputCallback);
mode="simple" times every part (fastxtend's SimpleProfilerCallback). drop_first_batch keeps
each phase's first batch out of the statistics (fastxtend's default).

Only fastai's core is needed (the Learner and callbacks), not fastai.vision: PyPI's
torchvision is a CUDA build that does not import next to the CPU torch.
"""
from fastai.callback.core import Callback
from fastai.learner import Learner
from fastai.torch_core import find_bs

import stepwatch as _sw

__all__ = ["StepwatchCallback"]


class StepwatchCallback(Callback):
    """Times fastai's training loop into a stepwatch Profiler."""

    order = -100  # outermost: before every other callback's before_*, after their after_*

    def __init__(self, mode="simple", drop_first_batch=True, show_report=True,
                 format="fastxtend", profiler=None):
        if mode not in ("simple", "throughput"):
            raise ValueError("mode must be 'simple' or 'throughput'")
        self.mode, self.show_report, self.format = mode, show_report, format
        self.profiler = profiler if profiler is not None else _sw.Profiler(
            name="fastai", warmup_steps=1 if drop_first_batch else 0)
        p = self.profiler
        self._a = {n: p.action(n) for n in ("data", "forward", "loss", "backward", "optimizer",
                                             "zero_grad")}
        self._ph = {n: p.phase(n) for n in ("fit", "epoch", "train", "valid")}
        self._open = []      # spans open now, innermost last (closed on any early exit)
        self._phases = []
        self._step_open = False

    # ---- helpers -------------------------------------------------------------------------
    def _begin(self, name):
        if self.mode == "simple" or name == "data":
            self._a[name].begin()
            self._open.append(name)

    def _end(self, name):
        if self._open and self._open[-1] == name:
            self._open.pop()
            self._a[name].end()

    def _close_spans(self):
        while self._open:
            self._a[self._open.pop()].end()

    def _phase(self, name):
        self._ph[name].begin()
        self._phases.append(name)

    def _end_phase(self, name):
        self._close_step()
        while self._phases:
            top = self._phases.pop()
            self._ph[top].end()
            if top == name:
                break

    def _open_step(self):
        self.profiler.step_begin()
        self._step_open = True
        self._begin("data")

    def _close_step(self):
        self._close_spans()
        if self._step_open:
            self.profiler.step_end()
            self._step_open = False

    # ---- fastai events -------------------------------------------------------------------
    def before_fit(self):
        self._phase("fit")

    def before_epoch(self):
        self._phase("epoch")

    def before_train(self):
        self._phase("train")
        self._first_step()

    def before_validate(self):
        self._phase("valid")
        self._first_step()

    def _first_step(self):
        # n_iter is set only once the batches start: ask the DataLoader
        try:
            batches = len(self.learn.dl)
        except TypeError:
            batches = 1
        if batches:
            self._open_step()

    def before_batch(self):
        self._end("data")
        try:
            bs = find_bs(self.learn.yb) if len(self.learn.yb) else find_bs(self.learn.xb)
            self.profiler.set_batch_size(int(bs))
        except Exception:  # batch size unknown: no samples/s, never a failure
            pass
        self._begin("forward")

    def after_pred(self):
        self._end("forward")
        self._begin("loss")

    def after_loss(self):
        self._end("loss")

    def before_backward(self):
        self._begin("backward")

    def after_backward(self):
        self._end("backward")

    def before_step(self):
        self._begin("optimizer")

    def after_step(self):
        self._end("optimizer")
        self._begin("zero_grad")  # fastai zeroes the gradients right after the step

    def after_batch(self):
        self._close_step()
        if self.iter + 1 < self.n_iter:  # the next batch's draw is part of its step
            self._open_step()

    def after_train(self):
        self._end_phase("train")

    def after_validate(self):
        self._end_phase("valid")

    def after_epoch(self):
        self._end_phase("epoch")

    def after_fit(self):
        self._end_phase("fit")
        if self.show_report:
            print(self.report())

    after_cancel_fit = after_fit

    # ---- results -------------------------------------------------------------------------
    def report(self, format=None):
        return self.profiler.report(format or self.format)

    def records(self, phase=None):
        return self.profiler.records(phase)


def _profile(self, mode="simple", **kwargs):
    """Learner.profile(): add (or replace) the stepwatch callback; returns the Learner."""
    for cb in list(self.cbs):
        if isinstance(cb, StepwatchCallback):
            self.remove_cb(cb)
    self.add_cb(StepwatchCallback(mode=mode, **kwargs))
    return self


Learner.profile = _profile
