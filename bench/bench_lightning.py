"""Per-step overhead of stepwatch's Lightning front ends in a real Trainer.fit, side by side.

    build/venv/bin/python bench/bench_lightning.py [--out build/bench/lightning.json] [--quick]

One process fits the same small model again and again, each fit with one of:
  none            no profiler (Lightning's PassThroughProfiler)
  simple          Lightning's SimpleProfiler
  stepwatch       stepwatch.lightning.Profiler
  stepwatch_time  stepwatch.lightning.TimeProfiler (thunder's default keys)
  thunder_time    thunder.callbacks.TimeProfiler, when thunder is installed
in rotating order, so machine load hits them alike. The step is a real CPU training step:
an MLP classifier (256-256-256-10, batches of 64, CrossEntropyLoss, SGD), about 0.6 ms here;
the Trainer is bare (no progress bar, checkpointing, summary or validation) with a CSVLogger
(thunder's TimeProfiler needs a logger; every variant gets one).

A step's time is read where no profiler can see or change it: the DataLoader's sampler notes
the time each time Lightning asks for the next batch, and one step is the time between two
of those. The time is the training thread's CPU time (CLOCK_THREAD_CPUTIME_ID; torch runs on
that one thread here): on a machine shared with other work, wall-clock steps mostly measure
the waits for a core, which no profiler causes. Wall-clock figures are kept too. Each fit
gives its steps after the first WARMUP; a variant's step time is the median of all of them,
and its overhead the difference to "none". The 95 % interval comes from resampling whole
fits (a block bootstrap). Budgets (docs/overhead.md): stepwatch.lightning.Profiler <= 1/3 of
SimpleProfiler's overhead, TimeProfiler <= SimpleProfiler's; the fits give a verdict only
when they resolve SimpleProfiler's overhead (its interval above zero and narrower than it).

On a machine busy with other work the step's own time varies by far more than a profiler
adds, so a second measurement takes the training out: the work each variant adds to one
real training step, replayed (thread CPU time, the best of many rounds, variants
alternating: on a shared machine contention only ever adds time).
A recording profiler notes every start/stop Lightning made in a steady-state step of a real
fit; for the profilers these calls are replayed, with fresh name strings as Lightning's
f-strings are (plus, for stepwatch, its two taps: the batch size through batch_to_device and
the loss module's forward); for the TimeProfilers, the callback hooks of one training step go
through Lightning's own dispatch (lightning.pytorch.trainer.call._call_callback_hooks) of a
real trainer. Each is measured against the same with PassThroughProfiler / no callback.
"""
import argparse
import logging
import os
import random
import sys
import tempfile
import time
import timeit
import warnings

import stepwatch
import _bench_util as bu  # noqa: E402  (bench/, beside this file)
from bench_torch import pooled_median  # noqa: E402

WARMUP = 20


class StampingSampler:
    """Yields the batch indices, noting the thread's CPU time and the wall clock at each: one
    step per interval."""

    def __init__(self, n, stamps):
        self.n, self.stamps = n, stamps

    def __iter__(self):
        for i in range(self.n):
            self.stamps.append((time.thread_time_ns(), time.perf_counter_ns()))
            yield i

    def __len__(self):
        return self.n


def make_variants():
    from lightning.pytorch.profilers import SimpleProfiler

    import stepwatch.lightning as swl
    variants = {
        "none": lambda: {},
        "simple": lambda: {"profiler": SimpleProfiler()},
        "stepwatch": lambda: {"profiler": swl.Profiler()},
        "stepwatch_time": lambda: {"callbacks": [swl.TimeProfiler()]},
    }
    try:
        from thunder.callbacks import TimeProfiler as ThunderTimeProfiler
        variants["thunder_time"] = lambda: {"callbacks": [ThunderTimeProfiler()]}
    except Exception as e:  # thunder is optional (pip install --ignore-requires-python thunder)
        print(f"(thunder's TimeProfiler not measured: {type(e).__name__}: {e})")
    return variants


def fit_once(make_kwargs, batches, steps, logdir):
    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, 10))
            self.loss = torch.nn.CrossEntropyLoss()

        def training_step(self, batch, i):
            x, y = batch
            return self.loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    stamps = []
    loader = DataLoader(batches, batch_size=None, sampler=StampingSampler(steps, stamps))
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=CSVLogger(logdir),
                        log_every_n_steps=50, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        limit_val_batches=0, num_sanity_val_steps=0, **make_kwargs())
    trainer.fit(Classifier(), loader)
    assert trainer.global_step == steps, trainer.global_step
    kept = stamps[WARMUP:]
    return ([b[0] - a[0] for a, b in zip(kept, kept[1:])],
            [b[1] - a[1] for a, b in zip(kept, kept[1:])], trainer)


def overhead_ci95(base_blocks, blocks, resamples=400):
    rng = random.Random(0)
    found = sorted(pooled_median(rng.choices(blocks, k=len(blocks))) -
                   pooled_median(rng.choices(base_blocks, k=len(base_blocks)))
                   for _ in range(resamples))
    return [found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1]]


def recorded_step(batches, logdir):
    """The start/stop calls of one steady-state training step of a real fit, and its
    trainer: [(True for start, name)]."""
    from lightning.pytorch.profilers import Profiler as LightningProfiler

    class Recorder(LightningProfiler):
        def __init__(self):
            super().__init__()
            self.calls = []

        def start(self, name):
            self.calls.append((True, name))

        def stop(self, name):
            self.calls.append((False, name))

    recorder = Recorder()
    _, _, trainer = fit_once(lambda: {"profiler": recorder}, batches, 40, logdir)
    starts = [i for i, (start, name) in enumerate(recorder.calls)
              if start and name.endswith("train_dataloader_next")]
    return recorder.calls[starts[-3]:starts[-2]], trainer


def best_ns(step, number, repeat=5):
    """Thread CPU ns of one call of step, the best of repeat runs of number calls."""
    return min(timeit.Timer(step, timer=time.thread_time).repeat(number=number, repeat=repeat)
               ) / number * 1e9


def bench_replay(batches, logdir, rounds, number=300):
    """The work each variant adds to one training step, replayed (see the docstring)."""
    import functools

    import torch
    from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler
    from lightning.pytorch.trainer import call

    import stepwatch.lightning as swl
    calls, trainer = recorded_step(batches, logdir)
    batch = batches[0]
    logits, labels = torch.randn(64, 10), batch[1]
    optimizer = trainer.optimizers[0]

    def nothing(*args):  # the calls the taps wrap, kept empty: only the taps' cost shows
        return None

    def profiler_step(prof, to_device=nothing, loss_forward=nothing):
        def step():
            names = {}
            for start, name in calls:
                if start:
                    names[name] = "".join(("", name))  # a new string, as Lightning's f-strings
                    prof.start(names[name])
                elif name.endswith("_next"):  # started and stopped by separate f-strings
                    prof.stop("".join(("", names.pop(name))))
                else:
                    prof.stop(names.pop(name))
            to_device(batch)
            loss_forward(logits, labels)
        return step

    def callback_step(callbacks):
        def step():
            trainer.callbacks = callbacks
            call._call_callback_hooks(trainer, "on_train_batch_start", batch, 0)
            call._call_callback_hooks(trainer, "on_before_zero_grad", optimizer)
            call._call_callback_hooks(trainer, "on_before_backward", logits)
            call._call_callback_hooks(trainer, "on_after_backward")
            call._call_callback_hooks(trainer, "on_before_optimizer_step", optimizer)
            call._call_callback_hooks(trainer, "on_train_batch_end", None, batch, 0)
        return step

    sw = swl.Profiler()
    sw.profiler
    sw._owners.update(swl._owners_of(trainer))  # as setup() does: empty hooks are not timed
    simple = SimpleProfiler()
    trainer.profiler = PassThroughProfiler()
    steps = {"none": profiler_step(PassThroughProfiler()), "simple": profiler_step(simple),
             "stepwatch": profiler_step(
                 sw, functools.partial(sw._spans.batch, nothing),
                 functools.partial(sw._spans.timed, "[Loss]CrossEntropyLoss", nothing)),
             "no_callback": callback_step([]),
             "stepwatch_time": callback_step([swl.TimeProfiler()])}
    try:
        from thunder.callbacks import TimeProfiler as ThunderTimeProfiler
        steps["thunder_time"] = callback_step([ThunderTimeProfiler()])
    except Exception:
        pass
    found = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            found[name].append(best_ns(step, number))
            simple.recorded_durations.clear()  # SimpleProfiler keeps every duration
    # contention only ever adds time: the least disturbed round is the nearest to the cost
    best = {name: min(v) for name, v in found.items()}
    out = {"pairs_per_step": len(calls) // 2, "rounds": rounds}
    for name in ("simple", "stepwatch"):
        out[name + "_ns"] = best[name] - best["none"]
    for name in ("stepwatch_time", "thunder_time"):
        if name in best:
            out[name + "_ns"] = best[name] - best["no_callback"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  "lightning.json"))
    ap.add_argument("--quick", action="store_true", help="fewer fits (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None, help="steps per fit")
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 24)
    steps = args.steps or (120 if args.quick else 320)

    import lightning  # noqa: F401  (sets its loggers' levels at import: quiet them after)
    import torch
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a steadier step on a shared machine
    batches = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(steps)]
    variants = make_variants()
    names = list(variants)
    blocks = {name: [] for name in names}  # per fit: its steps' CPU times
    walls = {name: [] for name in names}   # and their wall-clock times
    with tempfile.TemporaryDirectory() as logdir:
        for name in names:  # warm up every variant once (imports, first-call costs)
            fit_once(variants[name], batches, min(steps, 60), logdir)
        replayed = bench_replay(batches, logdir, rounds=3 if args.quick else 15)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                cpu, wall, _ = fit_once(variants[name], batches, steps, logdir)
                blocks[name].append(cpu)
                walls[name].append(wall)

    base, base_wall = pooled_median(blocks["none"]), pooled_median(walls["none"])
    figures = {"python": sys.version.split()[0], "stepwatch": stepwatch.__version__,
               "rounds": rounds, "steps_per_fit": steps, "warmup_steps_dropped": WARMUP,
               "clock": "thread CPU time", "step_ns": base, "wall_step_ns": base_wall,
               "variants": {}, "replayed": replayed}
    for name in names:
        med, wall = pooled_median(blocks[name]), pooled_median(walls[name])
        figures["variants"][name] = {
            "step_ns": med, "overhead_ns": med - base,
            "overhead_ci95_ns": overhead_ci95(blocks["none"], blocks[name]),
            "wall_step_ns": wall, "wall_overhead_ns": wall - base_wall,
            "steps": sum(len(b) for b in blocks[name])}
    v = figures["variants"]
    simple = v["simple"]["overhead_ns"]
    # The fits decide a budget only when they resolve SimpleProfiler's overhead: its 95 %
    # interval above zero and narrower than the overhead itself (else None: noise).
    lo, hi = v["simple"]["overhead_ci95_ns"]
    resolved = lo > 0 and hi - lo < simple
    figures["fits_resolve_simple"] = resolved
    budgets = {
        "profiler_le_third_of_simple":
            v["stepwatch"]["overhead_ns"] <= simple / 3 if resolved else None,
        "time_profiler_le_simple":
            v["stepwatch_time"]["overhead_ns"] <= simple if resolved else None,
        "replayed_profiler_le_third_of_simple":
            replayed["stepwatch_ns"] <= replayed["simple_ns"] / 3,
        "replayed_time_profiler_le_simple":
            replayed["stepwatch_time_ns"] <= replayed["simple_ns"],
    }
    figures["budgets_met"] = budgets
    labels = {"none": "no profiler", "simple": "Lightning SimpleProfiler",
              "stepwatch": "stepwatch.lightning.Profiler",
              "stepwatch_time": "stepwatch.lightning.TimeProfiler",
              "thunder_time": "thunder TimeProfiler"}
    print(f"Lightning Trainer.fit, {rounds} fits x {steps} steps per variant, step "
          f"{base / 1e3:.0f} us CPU ({base_wall / 1e3:.0f} us wall) with no profiler")
    print(f"{'variant (per step, CPU time)':36} {'step':>9} {'overhead':>10} {'95 % interval':>20}"
          f" {'wall overhead':>14}")
    for name in names:
        f = v[name]
        lo, hi = f["overhead_ci95_ns"]
        interval = "" if name == "none" else f"{lo / 1e3:.1f} to {hi / 1e3:.1f} us"
        print(f"{labels[name]:36} {f['step_ns'] / 1e3:>7.1f}us {f['overhead_ns'] / 1e3:>7.1f} us"
              f" {interval:>20} {f['wall_overhead_ns'] / 1e3:>11.1f} us")
    print(f"\nthe work added to one training step, replayed ({replayed['pairs_per_step']} "
          f"start/stop pairs; thread CPU time, the best of {replayed['rounds']} rounds of "
          f"5 x 300 steps):")
    for name in names[1:]:
        print(f"{labels[name]:36} {replayed[name + '_ns'] / 1e3:>7.2f} us")
    ratio = replayed["stepwatch_ns"] / replayed["simple_ns"]
    print(f"replayed: Profiler / SimpleProfiler = {ratio:.2f} (budget <= 0.33: "
          f"{'yes' if budgets['replayed_profiler_le_third_of_simple'] else 'NO'}); "
          f"TimeProfiler <= SimpleProfiler: "
          f"{'yes' if budgets['replayed_time_profiler_le_simple'] else 'NO'}")
    if resolved:
        print(f"in the fits: Profiler <= SimpleProfiler / 3 ({simple / 3e3:.1f} us): "
              f"{'yes' if budgets['profiler_le_third_of_simple'] else 'NO'}; "
              f"TimeProfiler <= SimpleProfiler ({simple / 1e3:.1f} us): "
              f"{'yes' if budgets['time_profiler_le_simple'] else 'NO'}")
    else:
        print("in the fits: the step time varies by more than SimpleProfiler adds (a busy "
              "machine): no verdict from them; see the replay")
    bu.write_json(args.out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
