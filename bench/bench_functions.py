"""Slowdown of Python-heavy code under stepwatch's function profiler vs cProfile at the same
detail, and Lightning's AdvancedProfiler, all in one run.

    build/venv/bin/python bench/bench_functions.py [--out build/bench/functions.json] [--quick]

Workloads:
  recursive  fib(20): 21,891 Python calls, nothing else
  pipeline   a small data pipeline in pure Python: records parsed from text by generators,
             normalized, tokenized, batched (Python functions and builtins)
  lightning  a real Trainer.fit of a small MLP on CPU, the whole training step profiled (the
             action run_training_batch: forward, backward, optimizer); per-step CPU times

Detail levels, each against cProfile at the same detail:
  python     stepwatch builtins=False (frame evaluation hook) vs cProfile(builtins=False)
  builtins   stepwatch builtins=True (profile hook, C builtins too) vs cProfile() (default)
and for Lightning, also the two AdvancedProfilers as users run them (every Lightning action
profiled): Lightning's (cProfile per action) and stepwatch.lightning.AdvancedProfiler.

Slowdown = time with the profiler / time without; overhead = slowdown - 1. The budget
(DESIGN.md) is stepwatch's overhead <= half of cProfile's at the same detail.

The floor of each detail: the interpreter's hook installed and doing nothing (the frame
evaluation hook passing every frame through; a profile function returning at once), what
any profiler on that hook pays before it records anything. On 3.11 the profile function's
floor is most of cProfile's cost: with it set, the interpreter runs every instruction
through its tracing path with specialization off. The variants
of one workload alternate in every round, so machine load hits them alike; per-workload
figures are medians over rounds. Every run times the thread's CPU (time.thread_time), so a
run preempted by another process does not count that process's time.
"""
import argparse
import cProfile
import json
import os
import statistics
import sys
import time

import stepwatch
from stepwatch._stepwatch import _function_hook_floor as hook_floor

# ---- the workloads ----------------------------------------------------------------------------


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursive():
    fib(20)


TEXT = [f"{i},user{i % 97},{(i * 7919) % 1000 / 10.0},tag{i % 13} tag{i % 7}" for i in range(3000)]


def parse(line):
    ident, user, score, tags = line.split(",")
    return {"id": int(ident), "user": user, "score": float(score), "tags": tags.split()}


def normalize(rec):
    rec["score"] = min(max(rec["score"] / 100.0, 0.0), 1.0)
    rec["user"] = rec["user"].upper()
    return rec


def tokenize(rec):
    return [hash(t) % 1000 for t in rec["tags"]] + [len(rec["user"])]


def records(lines):
    for line in lines:
        yield normalize(parse(line))


def batches(items, size):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def collate(batch):
    return {"ids": [r["id"] for r in batch], "scores": [r["score"] for r in batch],
            "tokens": [tokenize(r) for r in batch]}


def pipeline():
    total = 0
    for batch in batches(records(TEXT), 32):
        out = collate(batch)
        total += sum(out["ids"]) + len(out["tokens"])
    return total


# ---- profiling a plain function ---------------------------------------------------------------

def run_plain(fn, mode, sw):
    """CPU seconds of one fn() call under mode."""
    if mode == "none":
        t = time.thread_time()
        fn()
        return time.thread_time() - t
    if mode.startswith("floor"):
        hook_floor(mode.split("_")[1])
        t = time.thread_time()
        fn()
        t = time.thread_time() - t
        hook_floor(None)
        return t
    if mode.startswith("cprofile"):
        prof = cProfile.Profile(builtins=mode.endswith("builtins"))
        prof.enable()
        t = time.thread_time()
        fn()
        t = time.thread_time() - t
        prof.disable()
        return t
    action = sw[mode]
    with action:
        t = time.thread_time()
        fn()
        t = time.thread_time() - t
    return t


PLAIN_MODES = ["none", "floor_python", "stepwatch_python", "cprofile_python", "floor_builtins",
               "stepwatch_builtins", "cprofile_builtins"]


def bench_plain(fn, rounds):
    sw = {"stepwatch_python": stepwatch.Profiler(functions=["w"], builtins=False).action("w"),
          "stepwatch_builtins": stepwatch.Profiler(functions=["w"], builtins=True).action("w")}
    for mode in PLAIN_MODES:  # warm up: first-seen functions, allocations
        run_plain(fn, mode, sw)
    times = {m: [] for m in PLAIN_MODES}
    for _ in range(rounds):
        for mode in PLAIN_MODES:
            times[mode].append(run_plain(fn, mode, sw))
    base = statistics.median(times["none"])
    return base, {m: statistics.median(v) / base for m, v in times.items()}


# ---- Lightning --------------------------------------------------------------------------------

def bench_lightning(rounds, steps):
    import logging
    import warnings

    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer
    from lightning.pytorch.profilers import AdvancedProfiler as LightningAdvanced
    from lightning.pytorch.profilers import Profiler as LightningProfiler

    from stepwatch.lightning import AdvancedProfiler as StepwatchAdvanced

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    class MLP(LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x = torch.randn(steps * 16, 32)
    y = torch.randint(0, 4, (steps * 16,))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)

    class StepTimes(Callback):
        def __init__(self):
            self.starts = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.starts.append(time.thread_time())  # CPU time: a preempted step is not slower

    class TrainingStep(LightningProfiler):
        """Profiles one action, the whole training step, with cProfile or stepwatch."""

        def __init__(self, kind, builtins):
            super().__init__()
            self.kind, self.detail = kind, "builtins" if builtins else "python"
            if kind == "cprofile":
                self.cprofile = cProfile.Profile(builtins=builtins)
            elif kind == "stepwatch":
                self.sw = stepwatch.Profiler(builtins=builtins)
                self.action = self.sw.functions("run_training_batch")

        def start(self, action_name):
            if action_name == "run_training_batch":
                if self.kind == "cprofile":
                    self.cprofile.enable()
                elif self.kind == "stepwatch":
                    self.sw.begin(self.action)
                else:
                    hook_floor(self.detail)

        def stop(self, action_name):
            if action_name == "run_training_batch":
                if self.kind == "cprofile":
                    self.cprofile.disable()
                elif self.kind == "stepwatch":
                    self.sw.end(self.action)
                else:
                    hook_floor(None)

    class Nothing(LightningProfiler):
        """The same profiler calls, recording nothing: the baseline."""

        def start(self, action_name):
            pass

        def stop(self, action_name):
            pass

    modes = {
        "none": lambda: Nothing(),
        "floor_python": lambda: TrainingStep("floor", False),
        "floor_builtins": lambda: TrainingStep("floor", True),
        "stepwatch_python": lambda: TrainingStep("stepwatch", False),
        "cprofile_python": lambda: TrainingStep("cprofile", False),
        "stepwatch_builtins": lambda: TrainingStep("stepwatch", True),
        "cprofile_builtins": lambda: TrainingStep("cprofile", True),
        "lightning_advanced": lambda: LightningAdvanced(),
        "stepwatch_advanced": lambda: StepwatchAdvanced(),
        "stepwatch_advanced_python": lambda: StepwatchAdvanced(builtins=False),
    }

    def fit(make):
        times = StepTimes()
        trainer = Trainer(max_epochs=1, limit_val_batches=0, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, callbacks=[times], profiler=make(),
                          accelerator="cpu", devices=1, num_sanity_val_steps=0)
        trainer.fit(MLP(), data)
        deltas = [b - a for a, b in zip(times.starts, times.starts[1:])]
        return statistics.median(deltas[5:])  # the first steps warm up

    per_step = {m: [] for m in modes}
    for _ in range(rounds):
        for name, make in modes.items():
            per_step[name].append(fit(make))
    # each round's slowdown against that round's baseline, then the median over rounds
    ratios = {m: statistics.median(v / b for v, b in zip(per_step[m], per_step["none"]))
              for m in modes}
    return statistics.median(per_step["none"]), ratios


# ---- the table ---------------------------------------------------------------------------------

def overhead_ratio(slow, ours, theirs):
    return (slow[ours] - 1.0) / (slow[theirs] - 1.0) if slow[theirs] > 1.0 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--no-lightning", action="store_true")
    args = ap.parse_args()
    rounds = 5 if args.quick else 21
    figures = {"python": sys.version.split()[0], "rounds": rounds, "workloads": {}}

    work = [("recursive", recursive), ("pipeline", pipeline)]
    results = {}
    for name, fn in work:
        base, slow = bench_plain(fn, rounds)
        results[name] = (base, slow, "ms per run")
    if not args.no_lightning:
        base, slow = bench_lightning(3 if args.quick else 7, 80 if args.quick else 160)
        results["lightning"] = (base, slow, "ms per step")

    print(f"Function profiling slowdown (time with / time without), Python {figures['python']}")
    print(f"{'workload':<11}{'base':>10}  {'detail':<9}{'floor':>8}{'stepwatch':>11}"
          f"{'cProfile':>10}{'overhead ratio':>16}{'above floor':>13}")
    for name, (base, slow, unit) in results.items():
        entry = {"base_ms": base * 1e3, "unit": unit, "slowdown": slow}
        for detail in ("python", "builtins"):
            ours, theirs, floor = (slow[f"stepwatch_{detail}"], slow[f"cprofile_{detail}"],
                                   slow[f"floor_{detail}"])
            ratio = overhead_ratio(slow, f"stepwatch_{detail}", f"cprofile_{detail}")
            above = (ours - floor) / (theirs - floor) if theirs > floor else float("nan")
            entry[f"overhead_ratio_{detail}"] = ratio
            entry[f"above_floor_ratio_{detail}"] = above
            print(f"{name:<11}{base * 1e3:>8.2f}ms  {detail:<9}{floor:>7.2f}x{ours:>10.2f}x"
                  f"{theirs:>9.2f}x{ratio:>15.2f}{above:>13.2f}")
        if "lightning_advanced" in slow:
            entry["overhead_ratio_advanced"] = overhead_ratio(slow, "stepwatch_advanced",
                                                              "lightning_advanced")
            print(f"{'':<11}{'':>10}  AdvancedProfiler (every action): Lightning's "
                  f"{slow['lightning_advanced']:.2f}x, stepwatch's "
                  f"{slow['stepwatch_advanced']:.2f}x (builtins=False "
                  f"{slow['stepwatch_advanced_python']:.2f}x), overhead ratio "
                  f"{entry['overhead_ratio_advanced']:.2f}")
        figures["workloads"][name] = entry
    print("overhead ratio = stepwatch's overhead / cProfile's at the same detail "
          "(budget <= 0.50); above floor = the same for what each adds to the hook's floor")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
