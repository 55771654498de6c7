"""Per-iteration overhead of stepwatch.ignite's profilers against Ignite's own, in one run.

    build/venv/bin/python bench/bench_ignite.py [--out build/bench/ignite.json] [--quick]

A real Engine.run over a list of batches with a trivial process function and one user
handler on ITERATION_COMPLETED (what a logging handler costs Ignite to call), run bare, with
Ignite's BasicTimeProfiler, stepwatch's, Ignite's HandlersTimeProfiler and stepwatch's. The
variants alternate run by run, so machine load hits them alike; overhead = median run time
per iteration minus the bare engine's. Budget: each stepwatch profiler at most 1/3 of
Ignite's own overhead. Prints a table; writes the figures as JSON.
"""
import argparse
import json
import logging
import os
import statistics
import sys
import time


def bench(iters, repeat):
    from ignite.engine import Engine, Events
    from ignite.handlers import BasicTimeProfiler, HandlersTimeProfiler

    import stepwatch.ignite as swignite
    logging.getLogger("ignite").setLevel(logging.ERROR)
    data = list(range(iters))
    variants = {"bare": None, "ignite_basic": BasicTimeProfiler,
                "stepwatch_basic": swignite.BasicTimeProfiler,
                "ignite_handlers": HandlersTimeProfiler,
                "stepwatch_handlers": swignite.HandlersTimeProfiler}

    def run(make):
        eng = Engine(lambda e, b: None)
        seen = []
        eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(None))
        if make is not None:
            make().attach(eng)
        t0 = time.perf_counter_ns()
        eng.run(data, max_epochs=1)
        return (time.perf_counter_ns() - t0) / iters

    times = {k: [] for k in variants}
    for _ in range(repeat):
        for name, make in variants.items():
            times[name].append(run(make))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"iterations": iters, "repeat": repeat, "engine_iteration_ns": med["bare"]}
    for name in variants:
        if name != "bare":
            out[f"{name}_overhead_ns"] = med[name] - med["bare"]
    for kind in ("basic", "handlers"):
        out[f"{kind}_ratio"] = out[f"stepwatch_{kind}_overhead_ns"] / out[f"ignite_{kind}_overhead_ns"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  "ignite.json"))
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = ap.parse_args()
    fig = bench(iters=2_000 if args.quick else 20_000, repeat=3 if args.quick else 9)
    fig["budgets_met"] = {f"{k}_le_third_of_ignite": fig[f"{k}_ratio"] <= 1 / 3
                          for k in ("basic", "handlers")}
    print(f"{'stepwatch.ignite benchmark (per iteration)':46} {'measured':>12} {'budget':>11}  ok")
    print(f"{'Engine iteration, bare':46} {fig['engine_iteration_ns']:>9.0f} ns")
    for kind, label in (("basic", "BasicTimeProfiler"), ("handlers", "HandlersTimeProfiler")):
        ok = "yes" if fig["budgets_met"][f"{kind}_le_third_of_ignite"] else "NO"
        print(f"{'Ignite ' + label + ' overhead':46} {fig[f'ignite_{kind}_overhead_ns']:>9.0f} ns")
        print(f"{'stepwatch ' + label + ' overhead':46} "
              f"{fig[f'stepwatch_{kind}_overhead_ns']:>9.0f} ns {'<= 1/3':>11}  {ok}")
        print(f"{'  ratio stepwatch/Ignite':46} {fig[f'{kind}_ratio']:>12.2f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fig, f, indent=2)
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
