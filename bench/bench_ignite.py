"""Per-iteration overhead of stepwatch.ignite's profilers against Ignite's own, in one run.

    build/venv/bin/python bench/bench_ignite.py [--out build/bench/ignite.json] [--quick]

A real Engine.run over a list of batches with a trivial process function and one user
handler on ITERATION_COMPLETED (what a logging handler costs Ignite to call), run bare, with
Ignite's BasicTimeProfiler, stepwatch's, Ignite's HandlersTimeProfiler and stepwatch's. The
variants alternate run by run, so machine load hits them alike; overhead = median run time
per iteration minus the bare engine's; the ratio's range is over the rounds. Times are the
loop thread's CPU time (on a shared machine wall time adds the waits for a core; the wall
figures are in the JSON file and the last rows).

During a run stepwatch's profilers fire the engine's events with FireEvent, a C copy of
Ignite's Engine._fire_event, which is cheaper than Ignite's Python one: their overhead is
below zero. So the benchmark also runs the floor, the engine with that FireEvent and no
profiler (Ignite's loop in C, recording nothing), and reports what stepwatch's timing costs
above it. Budget: each stepwatch profiler's overhead, and its cost above the floor, at most
1/3 of Ignite's own profiler's overhead. Prints a table; writes the figures as JSON.
"""
import logging
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench_util as bu  # noqa: E402

KINDS = ("basic", "handlers")


def summary(times):
    """The figures of one clock's times ({variant: [ns per iteration, one per round]})."""
    out = {"engine_iteration_ns": statistics.median(times["bare"])}
    for name in times:
        if name != "bare":
            out[f"{name}_overhead_ns"] = bu.overhead(times, name)
    for kind in KINDS:
        ours, theirs = f"stepwatch_{kind}", f"ignite_{kind}"
        out[f"{ours}_above_floor_ns"] = bu.overhead(times, ours, base="fire_event_floor")
        out[f"{kind}_ratio"] = out[f"{ours}_overhead_ns"] / out[f"{theirs}_overhead_ns"]
        out[f"{kind}_ratio_range"] = bu.ratio_range(times, ours, theirs)
        out[f"{kind}_above_floor_ratio"] = (out[f"{ours}_above_floor_ns"]
                                            / out[f"{theirs}_overhead_ns"])
        out[f"{kind}_above_floor_ratio_range"] = bu.ratio_range(times, ours, theirs,
                                                                ours_base="fire_event_floor")
    return out


def bench(iters, repeat):
    from ignite.engine import Engine, Events
    from ignite.handlers import BasicTimeProfiler, HandlersTimeProfiler

    import stepwatch
    import stepwatch.ignite as swignite
    logging.getLogger("ignite").setLevel(logging.ERROR)
    data = list(range(iters))

    def floor(eng):  # what stepwatch's profilers put in place of Ignite's loop, recording nothing
        eng._fire_event = stepwatch._stepwatch.FireEvent(eng, None, swignite._ITER_EVENTS)

    variants = {"bare": None, "fire_event_floor": floor,
                "ignite_basic": lambda eng: BasicTimeProfiler().attach(eng),
                "stepwatch_basic": lambda eng: swignite.BasicTimeProfiler().attach(eng),
                "ignite_handlers": lambda eng: HandlersTimeProfiler().attach(eng),
                "stepwatch_handlers": lambda eng: swignite.HandlersTimeProfiler().attach(eng)}

    def run(attach):
        eng = Engine(lambda e, b: None)
        seen = []
        eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(None))
        if attach is not None:
            attach(eng)
        return bu.timed(lambda: eng.run(data, max_epochs=1), per=iters)

    times = bu.in_turns(variants, run, repeat)
    out = {"iterations": iters, "repeat": repeat, "clock": "thread CPU time"}
    out.update(summary(times["cpu"]))
    out["wall"] = summary(times["wall"])
    return out


def main():
    args = bu.parse_args("ignite")
    fig = bench(iters=2_000 if args.quick else 20_000, repeat=3 if args.quick else 9)
    fig["budgets_met"] = {f"{k}_le_third_of_ignite": max(fig[f"{k}_ratio"],
                                                         fig[f"{k}_above_floor_ratio"]) <= 1 / 3
                          for k in KINDS}
    rows = [("Engine iteration, bare", f"{fig['engine_iteration_ns']:.0f} ns", "", None),
            ("Ignite's loop in C (FireEvent), no profiler",
             f"{fig['fire_event_floor_overhead_ns']:.0f} ns", "", None)]
    for kind, label in zip(KINDS, ("BasicTimeProfiler", "HandlersTimeProfiler")):
        lo, hi = fig[f"{kind}_ratio_range"] or (float("nan"), float("nan"))
        flo, fhi = fig[f"{kind}_above_floor_ratio_range"] or (float("nan"), float("nan"))
        rows += [(f"Ignite {label} overhead", f"{fig[f'ignite_{kind}_overhead_ns']:.0f} ns", "",
                  None),
                 (f"stepwatch {label} overhead", f"{fig[f'stepwatch_{kind}_overhead_ns']:.0f} ns",
                  "", None),
                 ("  ratio stepwatch/Ignite", f"{fig[f'{kind}_ratio']:.2f}", "", None),
                 ("  ratio, range over the rounds", f"{lo:.2f} to {hi:.2f}", "", None),
                 ("  stepwatch above the C loop",
                  f"{fig[f'stepwatch_{kind}_above_floor_ns']:.0f} ns", "", None),
                 ("  that, over Ignite's overhead", f"{fig[f'{kind}_above_floor_ratio']:.2f}",
                  "both <= 1/3", fig["budgets_met"][f"{kind}_le_third_of_ignite"]),
                 ("  that, range over the rounds", f"{flo:.2f} to {fhi:.2f}", "", None)]
    wall = fig["wall"]
    for kind in KINDS:
        rows.append((f"wall time: {kind} ratio (above the C loop)",
                     f"{wall[f'{kind}_ratio']:.2f} ({wall[f'{kind}_above_floor_ratio']:.2f})",
                     "", None))
    bu.print_table("stepwatch.ignite benchmark (per iteration, CPU)", rows)
    bu.write_json(args.out, fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
