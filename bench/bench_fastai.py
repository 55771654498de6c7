"""Per-batch overhead of stepwatch.fastai's profilers against fastxtend's, in one process.

    build/venv/bin/python bench/bench_fastai.py [--out build/bench/fastai.json] [--quick]

A real Learner.fit (fastai's core: a linear model, in-memory batches through torch's
DataLoader, the default callbacks) run bare, with fastxtend 0.1.7's Throughput and Simple
profilers and with stepwatch's. The variants alternate fit by fit so machine load hits them
alike; overhead = (median fit time - the bare fit's) / batches. Both profilers add fastai's
before_draw event (each imports its own batch loop; stepwatch's is imported last, so every
variant, the bare one included, runs the same loop). Budget: stepwatch at most 1/5 of
fastxtend's overhead. Without fastxtend installed, the anchor is skipped with a message.
Prints a table; writes the figures as JSON.
"""
import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time


def bench(batches, repeat):
    import torch
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.optimizer import SGD
    from torch.utils.data import DataLoader
    try:
        import fastxtend.callback.profiler as fx
    except Exception as e:  # noqa: BLE001 — the anchor is optional
        print(f"bench_fastai: fastxtend not importable ({type(e).__name__}: {e}); "
              "its anchor is skipped", file=sys.stderr)
        fx = None
    import stepwatch.fastai as sw

    torch.set_num_threads(1)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    train, valid = [(x, y)] * batches, [(x, y)] * max(batches // 10, 1)

    variants = {"bare": lambda learn: None,
                "stepwatch_throughput": lambda learn: learn.profile(show_report=False),
                "stepwatch_simple": lambda learn: learn.profile(sw.ProfileMode.Simple,
                                                                show_report=False)}
    if fx is not None:
        variants["fastxtend_throughput"] = lambda learn: learn.add_cbs(
            [fx.ThroughputCallback(show_report=False), fx.ThroughputPostCallback()])
        variants["fastxtend_simple"] = lambda learn: learn.add_cbs(
            [fx.SimpleProfilerCallback(show_report=False), fx.SimpleProfilerPostCallback()])

    def fit(attach):
        dls = DataLoaders(DataLoader(train, batch_size=None), DataLoader(valid, batch_size=None))
        learn = Learner(dls, torch.nn.Linear(16, 1), loss_func=torch.nn.MSELoss(),
                        opt_func=SGD, lr=1e-3)
        attach(learn)
        with contextlib.redirect_stdout(io.StringIO()):
            t0 = time.perf_counter_ns()
            learn.fit(1)
            return (time.perf_counter_ns() - t0) / (len(train) + len(valid))

    times = {k: [] for k in variants}
    for _ in range(repeat):
        for name, attach in variants.items():
            times[name].append(fit(attach))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"batches_per_fit": len(train) + len(valid), "repeat": repeat,
           "batch_ns": med["bare"], "fastxtend": fx is not None}
    for name in variants:
        if name != "bare":
            out[f"{name}_overhead_ns"] = med[name] - med["bare"]
    if fx is not None:
        for mode in ("throughput", "simple"):
            out[f"{mode}_ratio"] = (out[f"stepwatch_{mode}_overhead_ns"]
                                    / out[f"fastxtend_{mode}_overhead_ns"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  "fastai.json"))
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = ap.parse_args()
    fig = bench(batches=100 if args.quick else 400, repeat=3 if args.quick else 9)
    if fig["fastxtend"]:
        fig["budgets_met"] = {f"{m}_le_fifth_of_fastxtend": fig[f"{m}_ratio"] <= 0.2
                              for m in ("throughput", "simple")}
    print(f"{'stepwatch.fastai benchmark (per batch)':46} {'measured':>12} {'budget':>11}  ok")
    print(f"{'Learner.fit batch, bare':46} {fig['batch_ns'] / 1e3:>9.1f} us")
    for mode in ("throughput", "simple"):
        if fig["fastxtend"]:
            print(f"{'fastxtend ' + mode + ' overhead':46} "
                  f"{fig[f'fastxtend_{mode}_overhead_ns'] / 1e3:>9.1f} us")
        ok = "yes" if fig.get("budgets_met", {}).get(f"{mode}_le_fifth_of_fastxtend") else (
            "NO" if fig["fastxtend"] else "")
        print(f"{'stepwatch ' + mode + ' overhead':46} "
              f"{fig[f'stepwatch_{mode}_overhead_ns'] / 1e3:>9.1f} us {'<= 1/5':>11}  {ok}")
        if fig["fastxtend"]:
            print(f"{'  ratio stepwatch/fastxtend':46} {fig[f'{mode}_ratio']:>12.2f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fig, f, indent=2)
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
