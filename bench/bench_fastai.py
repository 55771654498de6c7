"""Per-batch overhead of stepwatch.fastai's profilers against fastxtend's, in one process.

    build/venv/bin/python bench/bench_fastai.py [--out build/bench/fastai.json] [--quick]

A real Learner.fit (fastai's core: a linear model, in-memory batches through torch's
DataLoader, the default callbacks) run bare, with fastxtend 0.1.7's Throughput and Simple
profilers and with stepwatch's. The variants alternate fit by fit so machine load hits them
alike; short fits, many rounds, so the machine changes little within a round. A batch's
time is from its fetch to the next one's (every callback in), and a fit's figure the median
of its training batches (robust to the few that a preemption or a garbage collection
lengthens); overhead = the median over the rounds of the round's difference from the bare
fit; the ratio's range is over the rounds, beside the ratio of the lowest rounds (contention
only adds time). Times are the loop thread's CPU time (on a shared machine wall time adds
the waits for a core); the JSON file also has the wall times and the whole fit's time per
batch (the end-of-fit report included). Both profilers add fastai's
before_draw event (each imports its own batch loop; stepwatch's is imported last, so every
variant, the bare one included, runs the same loop). Budget: stepwatch at most 1/5 of
fastxtend's overhead. Without fastxtend installed, the anchor is skipped with a message.
Prints a table; writes the figures as JSON.
"""
import contextlib
import io
import os
import statistics
import sys
import time

from torch.utils.data import IterableDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench_util as bu  # noqa: E402


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
    train, valid = Stamped([(x, y)] * batches), [(x, y)] * max(batches // 10, 1)

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
        train.stamps.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            whole = bu.timed(lambda: learn.fit(1), per=len(train) + len(valid))
        return {**train.batch_medians(), "fit_cpu": whole["cpu"], "fit_wall": whole["wall"]}

    times = bu.in_turns(variants, fit, repeat)
    out = {"train_batches": len(train), "valid_batches": len(valid), "repeat": repeat,
           "fastxtend": fx is not None, "clock": "thread CPU time, median train batch"}
    out.update(summary(times["cpu"], fx is not None))
    for clock in ("wall", "fit_cpu", "fit_wall"):
        out[clock] = summary(times[clock], fx is not None)
    return out


class Stamped(IterableDataset):
    """The training batches, stamping the loop thread's CPU time and the wall time as each
    is fetched: one fetch to the next is a whole batch of the loop, every callback in."""

    def __init__(self, batches):
        self.batches, self.stamps = batches, []

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            self.stamps.append((time.thread_time_ns(), time.perf_counter_ns()))
            yield batch

    def batch_medians(self):
        """The median batch, {"cpu": ns, "wall": ns}: robust to the few batches that a
        shared machine's preemption or a garbage collection lengthens."""
        steps = list(zip(self.stamps, self.stamps[1:]))
        return {clock: statistics.median(b[i] - a[i] for a, b in steps)
                for i, clock in enumerate(("cpu", "wall"))}


def summary(times, anchored):
    """The figures of one clock's times ({variant: [ns per batch, one per round]})."""
    out = {"batch_ns": statistics.median(times["bare"])}
    for name in times:
        if name != "bare":
            out[f"{name}_overhead_ns"] = bu.overhead(times, name)
    for mode in ("throughput", "simple") if anchored else ():
        out[f"{mode}_ratio"] = (out[f"stepwatch_{mode}_overhead_ns"]
                                / out[f"fastxtend_{mode}_overhead_ns"])
        out[f"{mode}_ratio_range"] = bu.ratio_range(times, f"stepwatch_{mode}",
                                                    f"fastxtend_{mode}")
        out[f"{mode}_ratio_lowest"] = (bu.lowest_overhead(times, f"stepwatch_{mode}")
                                       / bu.lowest_overhead(times, f"fastxtend_{mode}"))
    return out


def main():
    args = bu.parse_args("fastai")
    fig = bench(batches=20 if args.quick else 30, repeat=3 if args.quick else 101)
    if fig["fastxtend"]:
        fig["budgets_met"] = {f"{m}_le_fifth_of_fastxtend": fig[f"{m}_ratio"] <= 0.2
                              for m in ("throughput", "simple")}
    rows = [("Learner.fit train batch, bare", f"{fig['batch_ns'] / 1e3:.1f} us", "", None)]
    for mode in ("throughput", "simple"):
        ours = (f"stepwatch {mode} overhead",
                f"{fig[f'stepwatch_{mode}_overhead_ns'] / 1e3:.1f} us")
        if not fig["fastxtend"]:
            rows.append((*ours, "", None))
            continue
        lo, hi = fig[f"{mode}_ratio_range"] or (float("nan"), float("nan"))
        rows += [(f"fastxtend {mode} overhead",
                  f"{fig[f'fastxtend_{mode}_overhead_ns'] / 1e3:.1f} us", "", None),
                 (*ours, "", None),
                 ("  ratio stepwatch/fastxtend", f"{fig[f'{mode}_ratio']:.2f}", "<= 1/5",
                  fig["budgets_met"][f"{mode}_le_fifth_of_fastxtend"]),
                 ("  ratio, range over the rounds", f"{lo:.2f} to {hi:.2f}", "", None),
                 ("  ratio of the lowest rounds", f"{fig[f'{mode}_ratio_lowest']:.2f}", "",
                  None),
                 ("  ratio in wall time", f"{fig['wall'][f'{mode}_ratio']:.2f}", "", None),
                 ("  ratio, whole fit / batches (CPU)", f"{fig['fit_cpu'][f'{mode}_ratio']:.2f}",
                  "", None)]
    bu.print_table("stepwatch.fastai benchmark (per batch, CPU)", rows)
    bu.write_json(args.out, fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
