"""Slowdown of Python-heavy code under stepwatch's function profiler vs cProfile at the same
detail, and Lightning's AdvancedProfiler, all in one run.

    build/venv/bin/python bench/bench_functions.py [--out build/bench/functions.json] [--quick]
        [--instructions] [--no-lightning]

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
(docs/overhead.md) is stepwatch's overhead <= half of cProfile's at the same detail.

The floor of each detail: the interpreter's hook installed and doing nothing (the frame
evaluation hook passing every frame through; a profile function returning at once), what
any profiler on that hook pays before it records anything. On 3.11 the profile function's
floor is most of cProfile's cost: with it set, the interpreter runs every instruction
through its tracing path with specialization off. The variants
of one workload alternate in every round, so machine load hits them alike; per-workload
figures are medians over rounds. Every run times the thread's CPU (time.thread_time), so a
run preempted by another process does not count that process's time.

--instructions (where valgrind and the marks library are, see bench_instructions.py) also
counts the instructions each plain workload adds under each variant: the same runs in one
Python process under `valgrind --tool=callgrind --instr-atstart=no`, each run between two
client requests; added Ir = the median over rounds of the run's Ir minus the bare run's.
Time and instructions can disagree (cProfile reads a clock through a system call path, a
no-op callback is all instructions): both are printed.
"""
import argparse
import cProfile
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import stepwatch
from stepwatch._stepwatch import _function_hook_floor as hook_floor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_instructions as bi  # noqa: E402 -- its callgrind marks and dump reader

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

class CpuTime:
    """What run_plain measures by default: this thread's CPU seconds."""

    def begin(self):
        self.t0 = time.thread_time()

    def end(self):
        return time.thread_time() - self.t0


def run_plain(fn, mode, sw, meter=None):
    """One fn() call under mode, measured by meter (default: CPU seconds)."""
    meter = meter or CpuTime()
    if mode == "none":
        meter.begin()
        fn()
        return meter.end()
    if mode.startswith("floor"):
        hook_floor(mode.split("_")[1])
        meter.begin()
        fn()
        t = meter.end()
        hook_floor(None)
        return t
    if mode.startswith("cprofile"):
        prof = cProfile.Profile(builtins=mode.endswith("builtins"))
        prof.enable()
        meter.begin()
        fn()
        t = meter.end()
        prof.disable()
        return t
    action = sw[mode]
    with action:
        meter.begin()
        fn()
        t = meter.end()
    return t


PLAIN_MODES = ["none", "floor_python", "stepwatch_python", "cprofile_python", "floor_builtins",
               "stepwatch_builtins", "cprofile_builtins"]


def stepwatch_actions():
    return {"stepwatch_python": stepwatch.Profiler(functions=["w"], builtins=False).action("w"),
            "stepwatch_builtins": stepwatch.Profiler(functions=["w"], builtins=True).action("w")}


def bench_plain(fn, rounds):
    sw = stepwatch_actions()
    for mode in PLAIN_MODES:  # warm up: first-seen functions, allocations
        run_plain(fn, mode, sw)
    times = {m: [] for m in PLAIN_MODES}
    for _ in range(rounds):
        for mode in PLAIN_MODES:
            times[mode].append(run_plain(fn, mode, sw))
    base = statistics.median(times["none"])
    return base, {m: statistics.median(v) / base for m, v in times.items()}


# ---- instructions (callgrind) ----------------------------------------------------------------

WORK = [("recursive", recursive), ("pipeline", pipeline)]


class Counted:
    """run_plain's meter under callgrind: counting between the two client requests."""

    def __init__(self, marks):
        self.marks, self.label = marks, "warm"

    def begin(self):
        self.marks.start()

    def end(self):
        self.marks.stop(self.label)
        return 0.0


def count_child(marks_path, rounds):
    """Under valgrind: every plain workload under every mode, rounds times in turns."""
    meter = Counted(bi.Marks(marks_path))
    sw = stepwatch_actions()
    for name, fn in WORK:
        meter.label = "warm"
        for mode in PLAIN_MODES:
            run_plain(fn, mode, sw, meter)
        for r in range(rounds):
            for mode in PLAIN_MODES:
                meter.label = f"{name}/{mode}#{r}"
                run_plain(fn, mode, sw, meter)


def bench_instructions(rounds):
    """{workload: {mode: added Ir (median over rounds of the difference to none)}}, or None
    without valgrind or the marks library."""
    marks = bi.marks_or_none("bench_functions")
    if marks is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
               f"--callgrind-out-file={folder}/cg.%p", sys.executable,
               os.path.abspath(__file__), "--count-child", marks, "--rounds", str(rounds)]
        subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONHASHSEED="0"))
        counts = bi.read_dumps(folder)
    added = {}
    for name, _ in WORK:
        base = [counts[f"{name}/none#{r}"] for r in range(rounds)]
        added[name] = {m: statistics.median(counts[f"{name}/{m}#{r}"] - b
                                            for r, b in enumerate(base))
                       for m in PLAIN_MODES}
        added[name]["none_ir"] = statistics.median(base)
    return added


def print_instructions(added):
    print("Function profiling, instructions added per run (callgrind, median over rounds)")
    print(f"{'workload':<11}{'bare':>9}  {'detail':<9}{'floor':>9}{'stepwatch':>11}"
          f"{'cProfile':>10}{'ratio':>8}{'floor/cProfile':>16}")
    for name, a in added.items():
        for detail in ("python", "builtins"):
            floor, ours, theirs = (a[f"floor_{detail}"], a[f"stepwatch_{detail}"],
                                   a[f"cprofile_{detail}"])
            print(f"{name:<11}{a['none_ir'] / 1e6:>8.2f}M  {detail:<9}{floor / 1e6:>8.2f}M"
                  f"{ours / 1e6:>10.2f}M{theirs / 1e6:>9.2f}M{ours / theirs:>8.2f}"
                  f"{floor / theirs:>16.2f}")
    print("ratio = stepwatch's added instructions / cProfile's at the same detail "
          "(budget <= 0.50); floor = the hook's own, with callbacks that do nothing")


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
    ap.add_argument("--instructions", action="store_true",
                    help="also count the added instructions (valgrind's callgrind)")
    ap.add_argument("--count-child", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count_child:
        return count_child(args.count_child, args.rounds)
    rounds = 5 if args.quick else 21
    figures = {"python": sys.version.split()[0], "rounds": rounds, "workloads": {}}

    results = {}
    for name, fn in WORK:
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
    if args.instructions:
        added = bench_instructions(1 if args.quick else 3)
        if added is not None:
            print()
            print_instructions(added)
            figures["instructions_added"] = added
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
