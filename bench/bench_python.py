"""Python-side overhead of stepwatch, against the anchors, all measured in one run.

    build/venv/bin/python bench/bench_python.py [--out build/bench/python.json] [--quick]

1. ns per `with` on an action: stepwatch's pre-made Action vs Lightning SimpleProfiler's
   `with profile(name)`, and the floor: the same C object with nothing recorded (an action of
   a closed profiler: same calls, no sw_begin/sw_end). Budget: <= 100 ns, >= 8x cheaper.
2. (Ignite's profilers: bench/bench_ignite.py; fastai's: bench/bench_fastai.py.)
3. per-step overhead of stepwatch.torch.instrument() (step, data, forward, loss, backward,
   optimizer, zero_grad) on a trivial torch loop, held to the same 2 us.
4. slowdown of a real CPU training step (an MLP classifier, ~0.7 ms here) under instrument()
   vs none. Budget: <= 1 %. The same for a twice larger step (~1.1 ms), for comparison.
   3 and 4 also measure what the interception alone costs: stepwatch's hooks recording
   nothing, and the floor, do-nothing Python wrappers at the same points (what any profiler
   hooking them pays before it records anything). They move between these states every 25
   steps of one pass and compare the medians of the per-step times (see bench_torch). The
   slowdowns come with a 95 % interval from a block bootstrap: on a shared VM the step time
   wanders, and the interval says how far one run's figure can be trusted.

Timings are medians over repeats; the variants of one measurement alternate so that machine
load hits them alike. Prints a table; writes the figures as JSON.
"""
import os
import random
import statistics
import sys
import time
import timeit

import stepwatch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench_util as bu  # noqa: E402


def per_call_ns(stmt, setup_globals, number, repeat):
    """Median ns per execution of stmt (timeit's loop included)."""
    t = timeit.Timer(stmt, globals=setup_globals)
    runs = t.repeat(repeat=repeat, number=number)
    return statistics.median(runs) / number * 1e9


def bench_with(number, repeat):
    from lightning.pytorch.profilers import SimpleProfiler

    prof = stepwatch.Profiler(name="bench")
    action = prof.action("forward")
    closed = stepwatch.Profiler(name="floor")
    floor_action = closed.action("forward")
    closed.close()
    simple = SimpleProfiler()
    g = {"a": action, "f": floor_action, "simple": simple}
    results = {"stepwatch": [], "floor": [], "simple": [], "loop": []}
    for _ in range(repeat):  # alternate the variants
        results["loop"].append(per_call_ns("pass", g, number, 1))
        results["floor"].append(per_call_ns("with f: pass", g, number, 1))
        results["stepwatch"].append(per_call_ns("with a: pass", g, number, 1))
        results["simple"].append(per_call_ns("with simple.profile('forward'): pass", g,
                                             max(number // 10, 1000), 1))
        simple.recorded_durations.clear()  # SimpleProfiler keeps every duration
    med = {k: statistics.median(v) for k, v in results.items()}
    out = {
        "stepwatch_with_ns": med["stepwatch"] - med["loop"],
        "floor_with_ns": med["floor"] - med["loop"],
        "lightning_simple_with_ns": med["simple"] - med["loop"],
        "loop_ns": med["loop"],
    }
    out["stepwatch_record_ns"] = out["stepwatch_with_ns"] - out["floor_with_ns"]
    out["speedup_vs_simple"] = out["lightning_simple_with_ns"] / out["stepwatch_with_ns"]
    return out


def bench_torch(kind, steps, block=25):
    """Per-step overhead of instrument() in one pass over a standard loop. Every `block` steps
    the loop moves on to the next of four states: uninstrumented; instrument(); stepwatch's
    hooks recording nothing (instrument() on a profiler closed at once: every hook calls
    straight through); and the floor (do-nothing Python wrappers at the same interception
    points, see passthrough()). The medians of the per-step times of the states are compared.
    Alternating small blocks puts all four under the same machine state (a noisy neighbour,
    frequency changes), which whole-pass comparisons do not."""
    import torch
    from torch.utils.data import DataLoader

    import stepwatch.torch as swtorch
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a steadier step on a shared machine
    if kind == "trivial":
        model = torch.nn.Linear(1, 1)
        batch, feats, classes = 1, 1, None
    else:  # a real CPU step: an MLP classifier, ~0.7 ms ("real") or ~1.1 ms ("real_1ms") here
        hidden = 256 if kind == "real" else 512
        model = torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
        batch, feats, classes = 64, 256, 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    epoch = 1000
    if classes:
        loss_fn = torch.nn.CrossEntropyLoss()
        batches = [(torch.randn(batch, feats), torch.randint(0, classes, (batch,)))
                   for _ in range(epoch)]
    else:
        loss_fn = torch.nn.MSELoss()
        batches = [(torch.randn(batch, feats), torch.randn(batch, 1)) for _ in range(epoch)]
    prof = stepwatch.Profiler(name="bench")
    points = patched_points()
    states = ("off", "stepwatch", "hooks_only", "floor")
    floor = []  # the floor's undo callables while it is installed

    def enter(state):
        swtorch.uninstrument()
        while floor:
            floor.pop()()
        if state == "stepwatch":
            swtorch.instrument(prof)
        elif state == "hooks_only":
            closed = stepwatch.Profiler(name="closed")
            swtorch.instrument(closed, phases=False)
            closed.close()
        elif state == "floor":
            floor.extend(passthrough(points))

    def run(total):
        times = {s: [[]] for s in states}  # per state, its blocks of per-step times
        state, n = 0, 0
        while n < total:
            t0 = time.perf_counter_ns()
            # a real DataLoader over the pre-made batches (collation off)
            for x, y in DataLoader(batches, batch_size=None):
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                t1 = time.perf_counter_ns()
                times[states[state]][-1].append(t1 - t0)
                n += 1
                if n % block == 0:
                    state = (state + 1) % len(states)
                    times[states[state]].append([])
                    enter(states[state])
                if n == total:
                    break
                t0 = time.perf_counter_ns()
        enter("off")
        return times

    untouched = [owner.__dict__[name] for owner, name in points]
    run(min(steps, 600))  # warm up
    before = {r["action"]: r["count"] for r in prof.records("all")}
    times = run(steps)
    counts = {r["action"]: r["count"] - before.get(r["action"], 0) for r in prof.records("all")}
    blocks = {s: [b for b in times[s] if b] for s in states}
    timed = sum(len(b) for b in blocks["stepwatch"])
    assert [owner.__dict__[name] for owner, name in points] == untouched
    assert counts.get("forward") == timed and counts.get("optimizer") == timed, (counts, timed)
    b, i, h, f = (pooled_median(blocks[s]) for s in states)
    return {"step_ns": b, "instrumented_step_ns": i, "overhead_ns": i - b,
            "slowdown_pct": 100.0 * (i - b) / b,
            "slowdown_ci95_pct": slowdown_ci95(blocks["off"], blocks["stepwatch"]),
            "hooks_only_overhead_ns": h - b, "hooks_only_slowdown_pct": 100.0 * (h - b) / b,
            "floor_overhead_ns": f - b, "floor_slowdown_pct": 100.0 * (f - b) / b,
            "floor_slowdown_ci95_pct": slowdown_ci95(blocks["off"], blocks["floor"]),
            "steps_each": timed, "block": block}


def passthrough(points):
    """The floor of interception: at every point instrument() hooks (DataLoader next, module
    call, autograd backward, both zero_grads, the global optimizer step hooks), a Python
    wrapper or hook that does nothing but call through. What it costs, any profiler hooking
    these points pays before it records anything. Returns the undo callables, in the order
    of installing (undo from the last)."""
    from torch.optim import optimizer as optim

    def through(original):
        def wrapper(*args, **kwargs):
            return original(*args, **kwargs)
        return wrapper

    def nothing(*args):
        return None

    undo = []
    for owner, name in points:
        original = owner.__dict__[name]
        setattr(owner, name, through(original))
        undo.append(lambda owner=owner, name=name, original=original:
                    setattr(owner, name, original))
    undo.append(optim.register_optimizer_step_pre_hook(nothing).remove)
    undo.append(optim.register_optimizer_step_post_hook(nothing).remove)
    return undo


def patched_points():
    """The (owner, attribute) pairs instrument() patches (torch has no hook for them), read
    from an Instrumentation installed for a moment, so the floor wraps the same places."""
    import stepwatch.torch as swtorch
    scratch = stepwatch.Profiler(name="points")
    inst = swtorch.Instrumentation(scratch, phases=False).install()
    points = [(owner, name) for owner, name, _original in inst._patches]
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
    args = bu.parse_args("python")
    q = args.quick
    figures = {"python": sys.version.split()[0], "stepwatch": stepwatch.__version__}
    figures["with"] = bench_with(number=20_000 if q else 200_000, repeat=3 if q else 9)
    figures["torch_trivial"] = bench_torch("trivial", steps=4_000 if q else 80_000)
    figures["torch_real"] = bench_torch("real", steps=2_000 if q else 48_000)
    figures["torch_real_1ms"] = bench_torch("real_1ms", steps=2_000 if q else 32_000)

    w = figures["with"]
    tt, tr, tr1 = figures["torch_trivial"], figures["torch_real"], figures["torch_real_1ms"]
    budgets = {
        "with_le_100ns": w["stepwatch_with_ns"] <= 100,
        "with_ge_8x_cheaper_than_simple": w["speedup_vs_simple"] >= 8,
        "torch_trivial_loop_le_2us": tt["overhead_ns"] <= 2000,
        "real_step_le_1pct": tr["slowdown_pct"] <= 1.0,
    }
    figures["budgets_met"] = budgets
    rows = [
        ("with: stepwatch Action", f"{w['stepwatch_with_ns']:.0f} ns", "<= 100 ns",
         budgets["with_le_100ns"]),
        ("with: floor (same object, nothing recorded)", f"{w['floor_with_ns']:.0f} ns", "", None),
        ("with: stepwatch above the floor", f"{w['stepwatch_record_ns']:.0f} ns", "", None),
        ("with: Lightning SimpleProfiler.profile", f"{w['lightning_simple_with_ns']:.0f} ns", "",
         None),
        ("with: stepwatch cheaper than SimpleProfiler", f"{w['speedup_vs_simple']:.1f}x", ">= 8x",
         budgets["with_ge_8x_cheaper_than_simple"]),
        ("torch trivial loop: step", f"{tt['step_ns'] / 1e3:.1f} us", "", None),
        ("torch trivial loop: instrument() overhead", f"{tt['overhead_ns']:.0f} ns", "<= 2000 ns",
         budgets["torch_trivial_loop_le_2us"]),
        ("torch trivial loop: hooks, recording nothing",
         f"{tt['hooks_only_overhead_ns']:.0f} ns", "", None),
        ("torch trivial loop: floor (do-nothing wrappers)", f"{tt['floor_overhead_ns']:.0f} ns",
         "", None),
        ("torch real step", f"{tr['step_ns'] / 1e3:.0f} us", "", None),
        ("torch real step: instrument() slowdown", f"{tr['slowdown_pct']:.2f} %", "<= 1 %",
         budgets["real_step_le_1pct"]),
        ("torch real step: slowdown, 95 % interval", ci(tr), "", None),
        ("torch real step: hooks, recording nothing",
         f"{tr['hooks_only_slowdown_pct']:.2f} %", "", None),
        ("torch real step: floor (do-nothing wrappers)", f"{tr['floor_slowdown_pct']:.2f} %",
         "", None),
        ("torch real step: floor, 95 % interval", ci(tr, "floor_"), "", None),
        ("torch 2x larger step", f"{tr1['step_ns'] / 1e3:.0f} us", "", None),
        ("torch 2x larger step: instrument() slowdown", f"{tr1['slowdown_pct']:.2f} %", "",
         None),
        ("torch 2x larger step: slowdown, 95 % interval", ci(tr1), "", None),
        ("torch 2x larger step: floor (do-nothing wrappers)",
         f"{tr1['floor_slowdown_pct']:.2f} %", "", None),
    ]
    bu.print_table("stepwatch Python benchmark", rows)
    bu.write_json(args.out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
