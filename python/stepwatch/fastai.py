"""stepwatch.fastai — fastxtend's Throughput and Simple profilers for fastai, on stepwatch's C core.

    from stepwatch.fastai import *                       # in place of fastxtend.callback.profiler
    learn = Learner(dls, model, loss_func=...).profile() # ProfileMode.Throughput (fastxtend's default)
    learn.fit(3)                                         # the report is printed after the fit
    learn.profile_results                                # pandas DataFrame, fastxtend's columns
    learn.profile(ProfileMode.Simple, extras=True)       # + stepwatch's own table (p50/p99, self)

fastxtend's API under its names: ``Learner.profile(mode, show_report, plain, markdown,
save_csv, csv_name, rolling_average, drop_first_batch)``, ``ProfileMode``, the callback pairs
``ThroughputCallback``/``ThroughputPostCallback`` and ``SimpleProfilerCallback``/
``SimpleProfilerPostCallback`` (same orders: the first at TrainEvalCallback.order + 1, the
second at Recorder.order - 1), ``learn.profile_report`` and ``learn.profile_results``, the CSV
(``save_csv``), the markdown report, ``Learner.show_training_loop`` with ``before_draw``.

Importing this module adds fastai's missing ``before_draw`` event, as fastxtend does: the
Learner's batch loop calls it just before each batch is drawn, on every callback that has a
``before_draw`` (honouring run_train/run_valid like any event of the batch loop). It also
wraps ``Learner.fit`` so that a fit that raises leaves no profile half open.

What is measured (fastxtend's definitions; see docs/python.md "fastai"):
  draw      before_draw -> before_batch             batch     before_batch -> after_batch
  step      draw + batch                            forward   before_batch -> after_pred
  loss      after_pred -> after_loss                backward  before_backward -> before_step
  opt_step  before_step -> after_step               zero_grad after_step -> after_batch
  (valid: predict in place of forward; fit/epoch/train/valid: each phase's duration)
Samples/s as fastxtend defines it: the mean over batches of batch size / duration (for draw,
bs/(draw+batch) - bs/batch: the rate the draw costs, negative), the batch size being
``find_bs(learn.xb)``; stepwatch's own samples/s (extras) is samples / total step time.

Every ``rolling_average`` training batches fastxtend's rolling samples/s
(``throughput/<action>``) go to the fastai logger callbacks present: WandbCallback
(``wandb.log``), TensorBoardCallback (its writer) and CSVLogger (a file beside its own,
``<fname>_throughput.csv``, since its file has one row per epoch); after the fit, a summary
(W&B summary and tables, TensorBoard scalars and text, ``<fname>_profile.csv``).

The profiler lives for one fit: after it, its callbacks remove themselves (fastxtend's
``remove_on_fetch`` too), so ``learn.export()`` works and inference prints nothing. A fit
under lr_find, ``get_preds`` and ``validate`` is not profiled and leaves the callbacks in
place. A cancelled fit (CancelFitException: EarlyStopping...) reports once; an epoch, phase
or batch cancelled, or a fit that raised, leaves nothing open; the next fit starts anew.

stepwatch's extras are opt-in: ``profiler=stepwatch.Profiler(run_file=...)`` records every
step (data, forward, loss, backward, optimizer, zero_grad) into a stepwatch Profiler you keep
(reports, p50/p99, self time, the run file); ``extras=True`` prints its table too. Under DDP
(a torch.distributed process group of more than one rank up at before_fit) that Profiler
joins stepwatch.distributed's cross-rank view: every rank's fit ends with the end-of-run
aggregation (a fit that raised too), and rank 0 prints the view after fastxtend's report
(``learn.profile_ranks``, the RankView; None elsewhere). Without a stepwatch Profiler
(neither ``profiler=`` nor ``extras``) there is nothing to aggregate.

Only fastai's core is needed (the Learner and callbacks), not fastai.vision: PyPI's
torchvision is a CUDA build that does not import next to the CPU torch.
"""
import enum
import functools
import math
import weakref
from pathlib import Path

import fastai.callback.core as _fastai_callbacks
from fastai.callback.core import Callback, TrainEvalCallback, event
from fastai.learner import Learner, Recorder

import stepwatch as _sw
from stepwatch import _oom
from stepwatch.devicestats import DeviceStats

# fastxtend's scale_time: the C fastxtend report's own (sw_format_scale_time), one of it.
from ._stepwatch import scale_time as _scale_time

__all__ = ["ThroughputCallback", "ThroughputPostCallback", "SimpleProfilerCallback",
           "SimpleProfilerPostCallback", "ProfileMode", "DeviceStatsCallback"]

_COLUMNS = ["Phase", "Action", "Mean Duration", "Duration Std Dev", "Number of Calls",
            "Samples/Second", "Total Time", "Percent of Total"]
_THROUGHPUT_ACTIONS = ["step", "draw", "batch"]
_SIMPLE_ACTIONS = {"train": _THROUGHPUT_ACTIONS + ["forward", "loss", "backward", "opt_step",
                                                   "zero_grad"],
                   "valid": _THROUGHPUT_ACTIONS + ["predict", "loss"]}
# logger_callback names -> the fastai logger callbacks' classes
_LOGGERS = {"wandb": "WandbCallback", "tensorboard": "TensorBoardCallback",
            "csv_logger": "CSVLogger"}


class ProfileMode(str, enum.Enum):
    "Profile enum for `Learner.profile`"
    Throughput = "throughput"
    Simple = "simple"


# ---- fastai's batch loop with a before_draw event -------------------------------------------

def _all_batches(self):
    """Learner.all_batches with fastxtend's before_draw just before each batch is drawn."""
    self.n_iter = len(self.dl)
    drawers = [cb for cb in self.cbs.sorted("order") if hasattr(cb, "before_draw")]
    batches = iter(self.dl)
    for i in range(self.n_iter):
        for cb in drawers:
            cb("before_draw")
        try:
            b = next(batches)
        except StopIteration:
            break
        self.one_batch(i, b)


_LOOP = ["Start Fit", "before_fit", "Start Epoch Loop", "before_epoch", "Start Train",
         "before_train", "Start Batch Loop", "before_draw", "before_batch", "after_pred",
         "after_loss", "before_backward", "after_cancel_backward", "after_backward",
         "before_step", "after_cancel_step", "after_step", "after_cancel_batch", "after_batch",
         "End Batch Loop", "End Train", "after_cancel_train", "after_train", "Start Valid",
         "before_validate", "Start Batch Loop", "**CBs same as train batch**", "End Batch Loop",
         "End Valid", "after_cancel_validate", "after_validate", "End Epoch Loop",
         "after_cancel_epoch", "after_epoch", "End Fit", "after_cancel_fit", "after_fit"]


def _show_training_loop(self):
    """fastai's show_training_loop, with before_draw."""
    indent = 0
    for s in _LOOP:
        if s.startswith("Start"):
            print(f'{" " * indent}{s}')
            indent += 2
        elif s.startswith("End"):
            indent -= 2
            print(f'{" " * indent}{s}')
        else:
            print(f'{" " * indent} - {s:15}:', self.ordered_cbs(s))


_FITTING = weakref.WeakKeyDictionary()  # Learner -> fits running (validate() is no fit)


def _wrap_fit(fit):
    @functools.wraps(fit)
    def fit_closing_the_profile(self, *args, **kwargs):
        _FITTING[self] = _FITTING.get(self, 0) + 1
        try:
            return fit(self, *args, **kwargs)
        except BaseException as exc:  # fastai has no event for it: an out-of-memory error?
            _name_oom(self, exc)
            raise
        finally:  # a fit that raised: fastai calls no after_fit, so close the profile here
            _FITTING[self] -= 1
            for cb in self.cbs:
                if isinstance(cb, _MarkedCallback):
                    cb._sw_fit_ended()
    fit_closing_the_profile._stepwatch_fit = fit
    return fit_closing_the_profile


def _name_oom(learn, exc):
    """A profiled fit raised exc: an out-of-memory error is named (stepwatch/_oom.py), its
    module by its path in learn.model, in the run of the fit's stepwatch Profiler if any."""
    marked = [cb for cb in learn.cbs if isinstance(cb, _MarkedCallback)]
    if not marked:
        return
    fits = [cb._sw_session() for cb in marked]
    core = next((f.core for f in fits if f is not None and f.core is not None), None)
    _oom.seen(core, exc, root=getattr(learn, "model", None))


def _install():
    if "before_draw" not in _fastai_callbacks._inner_loop:  # run_train/run_valid apply
        _fastai_callbacks._inner_loop.append("before_draw")
    if "before_draw" not in _fastai_callbacks._events:
        _fastai_callbacks._events.append("before_draw")
    if not hasattr(event, "before_draw"):
        event.before_draw = "before_draw"
    Learner.all_batches = _all_batches
    Learner.show_training_loop = _show_training_loop
    Learner.profile = _profile
    if not hasattr(Learner.fit, "_stepwatch_fit"):
        Learner.fit = _wrap_fit(Learner.fit)


def _dispatcher(learn):
    """learn._call_one for the length of a profiled fit: fastai's Learner._call_one (the
    event checked, then every callback in `order`, each called with it), with the sorted
    order kept while learn.cbs and their orders stay the same instead of sorted again at
    every event. fastcore's L.sorted (a key function per callback, a new L) made most of what
    an event cost, and the profiler's two callbacks made every sort longer: they cost about
    +34k instructions per batch (bench_instructions' fastai group). Same callbacks, same order,
    same calls; the checks are of the list and the orders themselves, so a callback added,
    removed or reordered during the fit is seen at the next event as fastai would see it. A
    stepwatch callback is called only for the events it has a handler for (its __call__ does
    nothing for the others)."""
    cache = [None, None, ()]  # learn.cbs' items and their orders when sorted, the sorted list

    def _call_one(event_name):
        if not hasattr(event, event_name):
            raise Exception(f'missing {event_name}')
        items = learn.cbs.items
        orders = [getattr(cb, "order", 0) for cb in items]
        if items != cache[0] or orders != cache[1]:
            cache[0], cache[1] = list(items), orders
            ordered = sorted(items, key=lambda cb: getattr(cb, "order", 0))  # stable, as fastai's
            cache[2] = [(cb, isinstance(cb, _MarkedCallback)) for cb in ordered]
        for cb, marked in cache[2]:
            if not marked or event_name in cb._sw_on or event_name == "after_fit":
                cb(event_name)
    _call_one._stepwatch_dispatch = True
    return _call_one


# ---- one profiled fit ---------------------------------------------------------------------

def _rate(value):
    return "-" if value is None else f"{int(round(value)):,d}"


def _spread(values):
    """mean, population std, count, total of a list (NaN mean/std when empty, as np.mean)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0, 0.0
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / n), n, sum(values)


class _Fit:
    """One profiled fit: the C marks, the durations of its phases, the stepwatch phases open,
    the loggers. Made at before_fit, dropped after after_fit (or the failure)."""

    def __init__(self, cb, learn):
        self.cb, self.learn = cb, learn
        from stepwatch import notebook
        live = getattr(cb, "live", None)
        # a notebook's display draws from a stepwatch Profiler: one is made for it too
        self.core = cb._sw_profiler or (_sw.Profiler(name="fastai", warmup_steps=cb._drop,
                                                     modules=cb.modules)
                                        if cb.extras or notebook.wanted(live) else None)
        cb._sw_last_core = self.core
        # a core made here for modules= is closed after its report (its hooks come off)
        self.own_modules = bool(cb.modules) and cb._sw_profiler is None and self.core is not None
        self.marks = _sw._stepwatch.FitMarks(learn, self.core, cb._drop, cb._rolling_average)
        self.times = {"fit": [], "epoch": [], "train": [], "valid": []}
        self.start, self.open = {}, []
        self.trained = False
        self.loggers = _Loggers(learn, cb.logger_callback)
        self.flops = None  # flops=True: the training FLOPs (stepwatch.flops), logged rolling
        if getattr(cb, "flops", False):
            from stepwatch import flops as _flops
            options = {} if cb.flops is True else dict(cb.flops)
            self.flops = _flops.Watch(self.core, **options)
        self.flops_mark = (0.0, 0, 0)  # the Watch's FLOPs, tokens and the time at the last log
        # Under DDP the stepwatch Profiler joins the cross-rank view (quiet: rank 0 prints it
        # after fastxtend's report); without one there is nothing to aggregate.
        self.ranks = None
        if self.core is not None:
            import stepwatch.distributed as swdist  # fastai imports torch anyway
            self.ranks = swdist.watch_group(self.core, quiet=True)
        where = _sw.distributed_rank(None)  # the display on rank 0 only
        self.display = notebook.auto(self.core, live) if where is None or where[0] == 0 else None

    def close_display(self):
        """The fit ended (or failed): the display's final summary stays in the cell."""
        from stepwatch import notebook
        display, self.display = self.display, None
        notebook.finish(display)

    # -- phases
    def begin(self, name):
        if name in ("train", "valid"):
            self.end("train")
            self.end("valid")
            self.marks.set_phase(name == "train")
            self.trained |= name == "train"
            if name == "train" and self.flops is not None:  # the rates leave validation out
                self.flops_mark = self.flops.running() + (_sw.now_ns(),)
        self.open.append(name)
        if name == "fit" and "_call_one" not in vars(self.learn):  # the fit's events: ours
            self.learn._call_one = _dispatcher(self.learn)
        if self.core is not None:
            self.core.phase(name).begin()
        self.start[name] = _sw.now_ns()

    def end(self, name):
        """End phase name and whatever is open inside it (cancelled: no after_* came)."""
        if name not in self.open:
            return
        now = _sw.now_ns()
        while self.open:
            top = self.open.pop()
            if top in ("train", "valid"):
                self.marks.close()
            self.times[top].append((now - self.start[top]) / 1e9)
            if self.core is not None:
                self.core.phase(top).end()
            if top == "fit" and self.flops is not None:
                self.flops.close()  # its figures into the core's notes, where there is one
            if top == "fit" and getattr(vars(self.learn).get("_call_one"), "_stepwatch_dispatch",
                                        False):
                del self.learn._call_one  # fastai's own again (export pickles the Learner)
            if top == name:
                return

    def rolling(self):
        """fastxtend's rolling samples/s (throughput/<action>) and, with flops=True,
        stepwatch/tflops, /mfu (where the peak is known) and /tokens_per_sec over the training
        time since the last log, to the loggers."""
        values = {f"throughput/{k}": v for k, v in self.marks.rolling().items()}
        if self.flops is not None:
            values.update(self.flops_rates())
        self.loggers.log(values, "throughput")

    def flops_rates(self):
        from stepwatch import flops as _flops
        now = _sw.now_ns()
        seconds = (now - self.flops_mark[2]) / 1e9
        out, mark = _flops.log_rates(self.flops, self.flops_mark[:2], seconds)
        self.flops_mark = mark + (now,)
        return out

    def finish_ranks(self):
        """Under DDP, the end-of-run aggregation (every rank's fit ends here, after_fit or
        the failure; rank 0 waits at most the watch's timeout for the others). Once per fit;
        the RankView on rank 0, else None."""
        if self.ranks is None:
            return None
        self.ranks = None
        import stepwatch.distributed as swdist
        return swdist.finish(self.core)

    def finish(self):
        """The fit ended (after_fit): report unless it trained nothing (validate())."""
        self.end("fit")
        view = self.finish_ranks()
        if not self.trained:
            return False
        results = self.results()
        report = _report_view(results)
        self.learn.profile_results, self.learn.profile_report = results, report
        self.learn.profile_ranks = view
        self.loggers.summary(results, report)
        self.close_display()
        self.cb._sw_show(report, results, self.core, view)
        if self.own_modules:  # its report is shown: nn.Module.__call__ goes back to torch's
            self.core.close()
        return True

    # -- fastxtend's DataFrame
    def results(self):
        import pandas as pd
        measured = self.marks.results()
        fit_total = self.times["fit"][0]

        def row(phase, action, values, rate):
            mean, std, n, total = _spread(values)
            return [phase, action, mean, std, n, rate, total, f"{total / fit_total:.0%}"]

        rows = [["fit", "fit", 0, 0, 1, "-", fit_total, f"{fit_total / fit_total:.0%}"],
                row("fit", "epoch", self.times["epoch"], "-")]
        for p in ("train", "valid"):
            rows.append(row("fit", p, self.times[p], _rate(measured[p]["samples_per_s"])))
        for p in ("train", "valid"):
            actions = (_SIMPLE_ACTIONS[p] if self.cb._simple else _THROUGHPUT_ACTIONS)
            for a in actions:
                got = measured[p]["actions"].get("forward" if a == "predict" else a)
                count, mean, std, total, rate = got or (0, math.nan, math.nan, 0.0, None)
                rows.append([p, a, mean, std, count, _rate(rate), total,
                             f"{total / fit_total:.0%}"])
        return pd.DataFrame(rows, columns=_COLUMNS)


def _report_view(results):
    """fastxtend's profile_report: times scaled, repeated Phase names blanked."""
    report = results.copy()
    for c in ("Mean Duration", "Duration Std Dev", "Total Time"):
        report[c] = report[c].apply(_scale_time)
    same_as_phase = report["Phase"] == report["Action"]
    report["Phase"] = report["Phase"].where(~report["Phase"].duplicated(), "")
    report["Action"] = report["Action"].where(~same_as_phase, "")
    return report


class _Loggers:
    """The fastai logger callbacks present when the fit began (W&B, TensorBoard, CSVLogger),
    and how fastxtend's values reach each."""

    def __init__(self, learn, only):
        names = _LOGGERS if only is None else [only] if isinstance(only, str) else list(only)
        self.learn = learn
        self.cbs = {}
        for cb in learn.cbs:
            kinds = {k.__name__ for k in type(cb).__mro__}
            self.cbs.update({n: cb for n in names if _LOGGERS[n] in kinds and n not in self.cbs})
        self.names = list(self.cbs)
        self.csv = {}  # file suffix -> (file, its columns)

    def log(self, values, csv_suffix):
        """values to every logger; CSVLogger's go to <fname>_<csv_suffix>.csv."""
        for n in self.names:
            getattr(self, f"_log_{n}")(values, csv_suffix)

    def close(self):
        for f, _ in self.csv.values():
            f.close()
        self.csv = {}

    def _log_wandb(self, values, csv_suffix):
        import wandb
        step = getattr(self.cbs["wandb"], "_wandb_step", None)
        # WandbCallback (Recorder.order + 1) logs this batch at _wandb_step + 1 after us
        wandb.log(values, step=None if step is None else step + 1)

    def _tensorboard_writer(self):
        cb = self.cbs["tensorboard"]
        return getattr(cb, "writer", None) if cb.run else None

    def _log_tensorboard(self, values, csv_suffix):
        writer = self._tensorboard_writer()
        for k, v in values.items() if writer is not None else ():
            writer.add_scalar(k, v, self.learn.train_iter)

    def _csv_path(self, suffix):
        p = self.learn.path / self.cbs["csv_logger"].fname
        return p.with_name(f"{p.stem}_{suffix}.csv")

    def _log_csv_logger(self, values, csv_suffix):
        if csv_suffix not in self.csv:
            path = self._csv_path(csv_suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.csv[csv_suffix] = (path.open("w"), list(values))
            self.csv[csv_suffix][0].write(",".join(["epoch", "train_iter", *values]) + "\n")
        f, columns = self.csv[csv_suffix]
        f.write(",".join(str(v) for v in [self.learn.epoch, self.learn.train_iter,
                                          *(values.get(k, "") for k in columns)]) + "\n")
        f.flush()

    def summary(self, results, report):
        """After the fit: mean samples/s and durations per (phase, action), and the tables."""
        self.close()
        scalars = {}
        for t in results.itertuples(index=False):
            phase, action, mean, rate = t[0], t[1], t[2], t[5]
            if rate != "-":
                scalars[f"{phase}/{action}_throughput"] = int(rate.replace(",", ""))
            key = f"{phase}/duration" if phase == action == "fit" else f"{phase}/{action}_duration"
            scalars[key] = t[6] if action == "fit" else mean
        if "wandb" in self.names:
            import wandb
            for k, v in scalars.items():
                wandb.summary[k] = v
            wandb.log({"profile_report": wandb.Table(dataframe=report),
                       "profile_results": wandb.Table(dataframe=results)})
        if "tensorboard" in self.names:
            writer = self._tensorboard_writer()
            if writer is not None:
                for k, v in scalars.items():
                    writer.add_scalar(k, v, self.learn.train_iter)
                writer.add_text("profile_report",
                                "    " + report.to_string(index=False).replace("\n", "\n    "),
                                self.learn.train_iter)
        if "csv_logger" in self.names:
            results.to_csv(self._csv_path("profile"), index=False)


# ---- the callbacks ------------------------------------------------------------------------

class _MarkedCallback(Callback):
    """A callback whose events go straight to a dict of handlers (C marks for the per-batch
    events), bypassing fastai's slower Callback.__call__: this is the profiler's own cost."""
    _stateattrs = ("_sw_on", "_sw_fit", "_sw_profiler", "_sw_rolling")  # not pickled (export)

    def _init_state(self):  # also after unpickling (fastcore's Stateful)
        self._sw_fit = self._sw_profiler = None
        self._sw_fit_ended()

    def _sw_fit_ended(self):
        """The fit is over, or failed: back to waiting for the next one."""
        self._sw_on = {"before_fit": self.before_fit, "after_fit": self.after_fit}

    def __call__(self, event_name):
        handler = self._sw_on.get(event_name)
        if handler is not None and self.run and handler() is not None:
            self._sw_rolling_due()
        if event_name == "after_fit" and not self.run:
            self.run = True

    def _sw_rolling_due(self):
        pass


def _forward(marks_method):
    def event_method(self):
        fit = self._sw_session()
        if fit is not None:
            return getattr(fit.marks, marks_method)()
    event_method.__name__ = marks_method
    return event_method


class ThroughputCallback(_MarkedCallback):
    """
    Adds a throughput profiler to the fastai `Learner`. Optionally showing formatted report or
    saving unformatted results as csv.

    Pair with ThroughputPostCallback to profile training performance.

    Post fit, access report & results via `Learner.profile_report` & `Learner.profile_results`.
    """
    order, remove_on_fetch = TrainEvalCallback.order + 1, True
    _simple, _csv_name = False, "throughput.csv"
    # event -> FitMarks method, per mode
    _marks_events = {"before_draw": "before_draw", "before_batch": "before_batch"}

    def __init__(self, show_report=True, plain=False, markdown=False, save_csv=False,
                 csv_name=None, rolling_average=10, drop_first_batch=True,
                 logger_callback=None, profiler=None, extras=False, modules=False, live=None,
                 flops=False):
        if int(rolling_average) < 1:
            raise ValueError("rolling_average must be >= 1")
        if profiler is not None and not isinstance(profiler, _sw.Profiler):
            raise TypeError("profiler must be a stepwatch.Profiler")
        bad = [n for n in ([logger_callback] if isinstance(logger_callback, str)
                           else logger_callback or ()) if n not in _LOGGERS]
        if bad:
            raise ValueError(f"logger_callback: unknown {bad}; one of {list(_LOGGERS)}")
        self.show_report, self.plain, self.markdown = show_report, plain, markdown
        self.save_csv, self.csv_name = save_csv, Path(csv_name or self._csv_name)
        self.rolling_average, self.drop_first_batch = rolling_average, drop_first_batch
        # modules: each nn.Module's time and memory in stepwatch's table, so extras on
        self.logger_callback, self.extras = logger_callback, extras or bool(modules)
        self.modules = modules
        if flops is not False and flops is not None and flops is not True \
                and not isinstance(flops, dict):
            raise ValueError("flops must be True, False or a dict of stepwatch.flops.watch's "
                             "options (flops_per_batch, length_fn, peak_flops)")
        self.flops = flops
        self._rolling_average, self._drop = int(rolling_average), int(drop_first_batch)
        self._init_state()
        self._sw_profiler = profiler
        self.live = live  # the notebook display: None in a Jupyter kernel, or on/off
        self._sw_last_core = None  # the stepwatch Profiler of the last fit, for _repr_html_

    def _repr_html_(self):
        from stepwatch import notebook
        return notebook.repr_html(self._sw_profiler or getattr(self, "_sw_last_core", None))

    def _sw_session(self):
        return self._sw_fit

    def before_fit(self):
        self._sw_fit_ended()  # what a failed fit left
        learn = self.learn
        if learn not in _FITTING or hasattr(learn, "lr_finder") or hasattr(learn, "gather_preds"):
            return  # validate(), get_preds() and lr_find are not profiled
        fit = self._sw_fit = _Fit(self, learn)
        fit.begin("fit")
        on = {e: getattr(fit.marks, m) for e, m in self._marks_events.items()}
        on.update(before_fit=self.before_fit,
                  before_epoch=functools.partial(fit.begin, "epoch"),
                  before_train=functools.partial(fit.begin, "train"),
                  before_validate=functools.partial(fit.begin, "valid"))
        self._sw_on = on

    def before_epoch(self):
        if self._sw_fit is not None:
            self._sw_fit.begin("epoch")

    def before_train(self):
        if self._sw_fit is not None:
            self._sw_fit.begin("train")

    def before_validate(self):
        if self._sw_fit is not None:
            self._sw_fit.begin("valid")

    before_draw = _forward("before_draw")
    before_batch = _forward("before_batch")

    def _sw_fit_ended(self):
        """The fit is over, or failed: close what is open, go back to waiting for a fit."""
        if self._sw_fit is not None:
            self._sw_fit.end("fit")
            self._sw_fit.finish_ranks()  # a failed fit: the other ranks' views need ours
            self._sw_fit.close_display()
            self._sw_fit = None
        self._sw_on = {"before_fit": self.before_fit}

    def _sw_show(self, report, results, core, view=None):
        if self.show_report:
            if self.markdown:
                print(report.to_markdown(index=False))
            elif _in_notebook() and not self.plain:
                from IPython.display import display
                import pandas as pd
                with pd.option_context("display.max_rows", len(report.index)):
                    display(report.style.set_caption("Profiling Results").hide(axis="index"))
            else:
                print("\nProfiling Results:")
                print(report.to_string(index=False))
            if self._drop > 0:
                print(f"Batch dropped. train and valid phases show {self._drop} less batch "
                      "than fit.")
            if self.extras and core is not None:
                print(core.report("table"))
            if view is not None:  # rank 0 under DDP: the cross-rank view
                print(view.report("markdown" if self.markdown else "table"))
        if self.save_csv:
            path = self.learn.path / self.csv_name
            path.parent.mkdir(parents=True, exist_ok=True)
            results.to_csv(path, index=False)


def _in_notebook():
    from fastcore.imports import in_notebook
    return in_notebook()


def _step_end(watch, after_batch):
    watch.step_end()
    return after_batch()


class ThroughputPostCallback(_MarkedCallback):
    "Required pair with `ThroughputCallback` to profile training performance. Removes itself after training is over."
    order, remove_on_fetch = Recorder.order - 1, True
    _pair = ThroughputCallback
    _marks_events = {"after_batch": "after_batch"}

    def __init__(self):
        self._init_state()

    def _sw_main(self):
        return next((cb for cb in self.learn.cbs if type(cb) is self._pair), None)

    def _sw_session(self):
        main = self._sw_main()
        return main._sw_fit if main is not None else None

    def before_fit(self):
        fit = self._sw_session()
        self._sw_fit_ended()
        on = dict(self._sw_on)
        if fit is not None:
            on.update({e: getattr(fit.marks, m) for e, m in self._marks_events.items()})
            on.update(after_train=functools.partial(fit.end, "train"),
                      after_validate=functools.partial(fit.end, "valid"),
                      after_epoch=functools.partial(fit.end, "epoch"))
            self._sw_rolling = fit.rolling
            if fit.flops is not None:  # fastai's optimizer has no torch.optim hooks
                on["after_batch"] = functools.partial(_step_end, fit.flops, on["after_batch"])
        self._sw_on = on

    def _sw_rolling_due(self):
        self._sw_rolling()

    def after_train(self):
        fit = self._sw_session()
        if fit is not None:
            fit.end("train")

    def after_validate(self):
        fit = self._sw_session()
        if fit is not None:
            fit.end("valid")

    def after_epoch(self):
        fit = self._sw_session()
        if fit is not None:
            fit.end("epoch")

    after_batch = _forward("after_batch")

    def after_fit(self):
        main = self._sw_main()
        fit = main._sw_fit if main is not None else None
        self._sw_fit_ended()
        if fit is None:
            return
        main._sw_fit = None
        main._sw_fit_ended()
        if fit.finish():  # one report per fit; then the pair leaves the Learner
            self.learn.remove_cbs([main, self])


class SimpleProfilerCallback(ThroughputCallback):
    """fastxtend's simple profiler: ThroughputCallback's rows and every part of the batch
    (forward, loss, backward, opt_step, zero_grad; valid: predict, loss). Pair with
    SimpleProfilerPostCallback."""
    order, remove_on_fetch = TrainEvalCallback.order + 1, True
    _simple, _csv_name = True, "simpleprofiler.csv"
    _marks_events = {"before_draw": "before_draw", "before_batch": "before_batch",
                     "before_backward": "before_backward", "before_step": "before_step",
                     "after_batch": "zero_grad_end"}

    before_backward = _forward("before_backward")
    before_step = _forward("before_step")
    after_batch = _forward("zero_grad_end")


class SimpleProfilerPostCallback(ThroughputPostCallback):
    "Required pair with `SimpleProfilerCallback` to profile training performance. Removes itself after training is over."
    order, remove_on_fetch = Recorder.order - 1, True
    _pair = SimpleProfilerCallback
    _marks_events = {"after_pred": "after_pred", "after_loss": "after_loss",
                     "after_step": "after_step", "after_batch": "after_batch"}

    after_pred = _forward("after_pred")
    after_loss = _forward("after_loss")
    after_step = _forward("after_step")


class DeviceStatsCallback(Callback):
    """Lightning DeviceStatsMonitor's values (stepwatch.devicestats: torch's CUDA allocator
    while torch uses CUDA, the CPU figures on CPU; ``cpu_stats`` None, True, False as
    Lightning's; stepwatch's process and GPU figures with ``extra_stats``) logged every
    ``every`` training batches through the fastai logger callbacks present (pick with
    ``logger_callback``), as ``DeviceStatsMonitor.after_batch/<name>``; CSVLogger's go to
    ``<fname>_device.csv``."""
    order = Recorder.order - 1  # before the loggers log the batch (as the throughput values)

    def __init__(self, cpu_stats=None, extra_stats=False, every=1, logger_callback=None):
        if every < 1:
            raise ValueError(f"every must be >= 1, not {every}")
        self.stats = DeviceStats(cpu_stats, extra_stats)
        self.every, self.logger_callback = every, logger_callback

    def before_fit(self):
        self._loggers = _Loggers(self.learn, self.logger_callback)

    def after_batch(self):
        if self.training and self.learn.train_iter % self.every == 0:
            self._loggers.log({f"DeviceStatsMonitor.after_batch/{k}": v
                               for k, v in self.stats.read().items()}, "device")

    def after_fit(self):
        self._loggers.close()


def _profile(self, mode=ProfileMode.Throughput, show_report=True, plain=False, markdown=False,
             save_csv=False, csv_name="profiler.csv", rolling_average=10, drop_first_batch=True,
             logger_callback=None, profiler=None, extras=False, modules=False, live=None,
             flops=False):
    """Run a fastxtend profiler which removes itself when finished training.

    stepwatch's extras: profiler= a stepwatch.Profiler to record every step into (reports,
    p50/p99, self time, run file); extras=True prints its table after fastxtend's report;
    modules=True (or a step interval) adds each nn.Module's time and memory to it; live: the
    display in a Jupyter notebook's cell during the fit (None: in a Jupyter kernel; False:
    never); flops=True (or a dict of stepwatch.flops.watch's options) counts the training
    FLOPs and logs stepwatch/tflops, stepwatch/mfu and stepwatch/tokens_per_sec with the
    rolling throughput/* values."""
    mode = ProfileMode(mode)
    self.remove_cbs([cb for cb in self.cbs if isinstance(cb, (ThroughputCallback,
                                                              ThroughputPostCallback))])
    main, post = ((SimpleProfilerCallback, SimpleProfilerPostCallback)
                  if mode == ProfileMode.Simple else (ThroughputCallback, ThroughputPostCallback))
    self.add_cbs([main(show_report=show_report, plain=plain, markdown=markdown,
                       save_csv=save_csv, csv_name=csv_name, rolling_average=rolling_average,
                       drop_first_batch=drop_first_batch, logger_callback=logger_callback,
                       profiler=profiler, extras=extras, modules=modules, live=live,
                       flops=flops),
                  post()])
    return self


_install()
