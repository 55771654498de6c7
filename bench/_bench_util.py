"""What the Python benchmarks share: the command line, variants run in turns, the medians and
spread of their overheads, the table and the JSON file of figures."""
import argparse
import gc
import json
import os
import statistics
import time


def parse_args(name):
    """The benchmarks' command line: --out (default $SW_BENCH_DIR/<name>.json, else
    build/bench/<name>.json) and --quick (a smoke run)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  f"{name}.json"))
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    return ap.parse_args()


def timed(fn, per=1):
    """fn() timed, divided by per: {"cpu": this thread's CPU time, "wall": wall time}, in ns.
    A full garbage collection comes first, so that no earlier run's garbage is collected on
    this run's time. CPU time leaves out the waits for a core on a shared machine, which
    wall time adds (a single-threaded loop on a machine of its own has both alike)."""
    gc.collect()
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    fn()
    return {"cpu": (time.thread_time_ns() - cpu) / per,
            "wall": (time.perf_counter_ns() - wall) / per}


def in_turns(variants, run, repeat):
    """run(variant) for each of variants (a dict name -> variant), round after round, so
    that machine load hits them alike; run returns {clock: value} (as timed()). Returns
    {clock: {name: [one value per round]}}."""
    times = {}
    for _ in range(repeat):
        for name, variant in variants.items():
            for clock, value in run(variant).items():
                times.setdefault(clock, {}).setdefault(name, []).append(value)
    return times


def overhead(times, name, base="bare"):
    """The median over the rounds of times[name] - times[base]: each round's difference is
    taken within the round, where both saw about the same machine."""
    return statistics.median(t - b for t, b in zip(times[name], times[base]))


def lowest_overhead(times, name, base="bare"):
    """The lowest round of times[name] minus the lowest of times[base]: on a shared machine
    contention only ever adds time, so the lowest rounds come nearest the unloaded cost."""
    return min(times[name]) - min(times[base])


def ratio_range(times, ours, theirs, base="bare", ours_base=None):
    """[min, max] over the rounds of (ours - ours_base) / (theirs - base) (ours_base: base
    unless given): how far the ratio of one round's overheads strays (a round where theirs
    costs nothing is left out; None when all are)."""
    ratios = [(o - ob) / (t - b) for o, ob, t, b in zip(times[ours], times[ours_base or base],
                                                        times[theirs], times[base]) if t != b]
    return [min(ratios), max(ratios)] if ratios else None


def print_table(title, rows, width=46, value_width=12):
    """rows: (label, measured text, budget text, ok: True/False/None for no budget)."""
    print(f"{title:{width}} {'measured':>{value_width}} {'budget':>11}  ok")
    for label, value, budget, ok in rows:
        mark = "" if ok is None else ("yes" if ok else "NO")
        print(f"{label:{width}} {value:>{value_width}} {budget:>11}  {mark}")


def write_json(path, figures):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(figures, f, indent=2)
    print(f"figures: {path}")
