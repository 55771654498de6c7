"""stepwatch.torch.instrument() on torch training loops: its per-step cost against the floor
of interception and against torch.profiler, side by side in one pass.

    build/venv/bin/python bench/bench_torch.py [--out build/bench/torch.json] [--quick]

The loop is a standard one over a real DataLoader: zero_grad, forward, CrossEntropyLoss,
backward, SGD step. Three sizes: a trivial step (Linear(1, 1)), a real CPU step (an MLP
classifier, ~0.6-0.7 ms here) and the same with twice the hidden width (~1.1 ms).

Every 25 steps the loop moves on to the next of five states, so all of them see the same
machine state (a noisy neighbour, frequency changes), which whole-pass comparisons do not:
  off         nothing installed;
  stepwatch   instrument() into a live profiler;
  hooks_only  instrument() on a profiler closed at once: every hook calls straight through;
  floor       do-nothing Python wrappers at the same interception points (DataLoader next,
              module call, backward, zero_grads, functional losses) and do-nothing global
              optimizer step hooks: what any profiler hooking these points pays before it
              records anything;
  profiler    torch.profiler.profile(activities=[CPU]), a session per 25-step block.
The medians of the per-step times are compared; the slowdowns come with a 95 % interval from
a block bootstrap (on a shared VM the step time wanders, and the interval says how far one
run's figure can be trusted).

Budget (docs/overhead.md, issue 16), on the real step: stepwatch's slowdown <= the floor's + 0.5
percentage points, and its overhead >= 20x below torch.profiler's.
"""
import contextlib
import os
import random
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader

import stepwatch
import stepwatch.torch as swtorch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench_util as bu  # noqa: E402

STATES = ("off", "stepwatch", "hooks_only", "floor", "profiler")


def make_loop(kind):
    """(model, optimizer, loss function, batches) of one size."""
    torch.manual_seed(0)
    if kind == "trivial":
        model, batch, feats, classes = torch.nn.Linear(1, 2), 1, 1, 2
    else:  # an MLP classifier
        hidden = 256 if kind == "real" else 512
        model = torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
        batch, feats, classes = 64, 256, 10
    batches = [(torch.randn(batch, feats), torch.randint(0, classes, (batch,)))
               for _ in range(1000)]
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(), \
        batches


def bench_loop(kind, steps, block=25):
    """Per-step times of the five states over one pass of `steps` steps (see the module)."""
    torch.set_num_threads(1)  # a steadier step on a shared machine
    model, opt, loss_fn, batches = make_loop(kind)
    prof = stepwatch.Profiler(name="bench")
    points = patched_points()
    undo = []  # what leaves the current state

    def enter(state):
        swtorch.uninstrument()
        while undo:
            undo.pop()()
        if state == "stepwatch":
            swtorch.instrument(prof)
        elif state == "hooks_only":
            closed = stepwatch.Profiler(name="closed")
            swtorch.instrument(closed, phases=False)
            closed.close()
        elif state == "floor":
            undo.extend(passthrough(points))
        elif state == "profiler":
            session = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            with quiet_stderr():
                session.__enter__()
            undo.append(lambda: quiet(session.__exit__, None, None, None))

    def run(total):
        times = {s: [[]] for s in STATES}  # per state, its blocks of per-step times
        state, n = 0, 0
        while n < total:
            t0 = time.perf_counter_ns()
            for x, y in DataLoader(batches, batch_size=None):  # collation off
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                t1 = time.perf_counter_ns()
                times[STATES[state]][-1].append(t1 - t0)
                n += 1
                if n % block == 0:
                    state = (state + 1) % len(STATES)
                    times[STATES[state]].append([])
                    enter(STATES[state])
                if n == total:
                    break
                t0 = time.perf_counter_ns()
        enter("off")
        return times

    untouched = [owner.__dict__.get(name) for owner, name in points]
    run(min(steps, 600))  # warm up
    before = {r["action"]: r["count"] for r in prof.records("all")}
    times = run(steps)
    counts = {r["action"]: r["count"] - before.get(r["action"], 0) for r in prof.records("all")}
    blocks = {s: [b for b in times[s] if b] for s in STATES}
    timed = sum(len(b) for b in blocks["stepwatch"])
    assert [owner.__dict__.get(name) for owner, name in points] == untouched
    for action in ("step", "forward", "loss", "backward", "optimizer", "zero_grad", "data"):
        assert counts.get(action) == timed, (action, counts, timed)
    return blocks


def figures_of(blocks):
    med = {s: pooled_median(blocks[s]) for s in STATES}
    base = med["off"]
    fig = {"step_ns": base, "steps_each": sum(len(b) for b in blocks["stepwatch"])}
    for state in STATES[1:]:
        prefix = "" if state == "stepwatch" else state + "_"
        fig[prefix + "overhead_ns"] = med[state] - base
        fig[prefix + "slowdown_pct"] = 100.0 * (med[state] - base) / base
        fig[prefix + "slowdown_ci95_pct"] = slowdown_ci95(blocks["off"], blocks[state])
    fig["above_floor_pct"] = fig["slowdown_pct"] - fig["floor_slowdown_pct"]
    fig["profiler_over_stepwatch"] = (fig["profiler_overhead_ns"] / fig["overhead_ns"]
                                      if fig["overhead_ns"] > 0 else float("inf"))
    return fig


@contextlib.contextmanager
def quiet_stderr():
    """Kineto writes a line to the process's stderr at every profiler start and stop."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet(fn, *args):
    with quiet_stderr():
        return fn(*args)


def passthrough(points):
    """The floor of interception: at every point instrument() patches, a Python wrapper that
    does nothing but call through, and do-nothing global optimizer step hooks. Returns the
    undo callables, in the order of installing (undo from the last)."""
    from torch.optim import optimizer as optim

    def through(original):
        def wrapper(*args, **kwargs):
            return original(*args, **kwargs)
        return wrapper

    def nothing(*args):
        return None

    def restore(owner, name, own):
        # An inherited callable (Tensor.to lives on TensorBase) is put back by deleting the
        # wrapper; one of the owner's own by setting it again.
        if own is None:
            delattr(owner, name)
        else:
            setattr(owner, name, own)

    undo = []
    for owner, name in points:
        own = owner.__dict__.get(name)
        setattr(owner, name, through(own if own is not None else getattr(owner, name)))
        undo.append(lambda owner=owner, name=name, own=own: restore(owner, name, own))
    undo.append(optim.register_optimizer_step_pre_hook(nothing).remove)
    undo.append(optim.register_optimizer_step_post_hook(nothing).remove)
    return undo


def patched_points():
    """The callables instrument() patches (torch has no hook for them), read from an
    Instrumentation installed for a moment, so the floor wraps the same places. Left out:
    what is no callable run per step (torch.compile, Optimizer.__init_subclass__)."""
    scratch = stepwatch.Profiler(name="points")
    inst = swtorch.Instrumentation(scratch, phases=False).install()
    points = [(owner, name) for owner, name, *_ in inst._patches
              if name not in ("compile", "__init_subclass__")]
    inst.remove()
    scratch.close()
    return points


def pooled_median(blocks):
    """The median of every step time of these blocks."""
    return statistics.median(t for blk in blocks for t in blk)


def slowdown_ci95(off_blocks, on_blocks, resamples=400):
    """A 95 % interval for the slowdown: the blocks of each set are drawn again with
    replacement (a block bootstrap: steps next to each other share machine state, blocks
    far apart much less) and the slowdown of the medians taken each time."""
    rng = random.Random(0)
    found = []
    for _ in range(resamples):
        med = [pooled_median(rng.choices(blocks, k=len(blocks)))
               for blocks in (off_blocks, on_blocks)]
        found.append(100.0 * (med[1] - med[0]) / med[0])
    found.sort()
    return [found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1]]


def ci(fig, prefix=""):
    lo, hi = fig[prefix + "slowdown_ci95_pct"]
    return f"{lo:.2f} to {hi:.2f} %"


def main():
    args = bu.parse_args("torch")
    q = args.quick
    figures = {"python": sys.version.split()[0], "torch": torch.__version__,
               "stepwatch": stepwatch.__version__}
    for kind, steps in (("trivial", 60_000), ("real", 40_000), ("real_1ms", 25_000)):
        figures["torch_" + kind] = figures_of(bench_loop(kind, 2_500 if q else steps))
    tt, tr, tr1 = figures["torch_trivial"], figures["torch_real"], figures["torch_real_1ms"]
    budgets = {
        "real_step_within_floor_plus_half_pct": tr["above_floor_pct"] <= 0.5,
        "real_step_20x_below_torch_profiler": tr["profiler_over_stepwatch"] >= 20,
    }
    figures["budgets_met"] = budgets
    rows = [("torch trivial loop: step", f"{tt['step_ns'] / 1e3:.1f} us", "", None)]
    for label, fig in (("trivial loop", tt), ("real step", tr), ("2x larger step", tr1)):
        if fig is not tt:
            rows.append((f"torch {label}", f"{fig['step_ns'] / 1e3:.0f} us", "", None))
        real = fig is tr
        rows += [
            (f"{label}: instrument()",
             f"{fig['overhead_ns']:.0f} ns {fig['slowdown_pct']:.2f} %", "", None),
            (f"{label}: instrument(), 95 % interval", ci(fig), "", None),
            (f"{label}: hooks, recording nothing",
             f"{fig['hooks_only_overhead_ns']:.0f} ns {fig['hooks_only_slowdown_pct']:.2f} %",
             "", None),
            (f"{label}: floor (do-nothing wrappers)",
             f"{fig['floor_overhead_ns']:.0f} ns {fig['floor_slowdown_pct']:.2f} %", "", None),
            (f"{label}: floor, 95 % interval", ci(fig, "floor_"), "", None),
            (f"{label}: instrument() above the floor", f"{fig['above_floor_pct']:.2f} pp",
             "<= 0.5 pp" if real else "",
             budgets["real_step_within_floor_plus_half_pct"] if real else None),
            (f"{label}: torch.profiler (CPU)",
             f"{fig['profiler_overhead_ns'] / 1e3:.1f} us {fig['profiler_slowdown_pct']:.1f} %",
             "", None),
            (f"{label}: torch.profiler / instrument()",
             f"{fig['profiler_over_stepwatch']:.0f}x", ">= 20x" if real else "",
             budgets["real_step_20x_below_torch_profiler"] if real else None),
        ]
    bu.print_table("stepwatch.torch benchmark", rows, 44, 20)
    bu.write_json(args.out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
