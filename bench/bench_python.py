"""The cost of a Python `with` on a stepwatch action, against Lightning's, in one run.

    build/venv/bin/python bench/bench_python.py [--out build/bench/python.json] [--quick]

ns per `with` on an action: stepwatch's pre-made Action vs Lightning SimpleProfiler's
`with profile(name)`, and the floor: the same C object with nothing recorded (an action of a
closed profiler: same calls, no sw_begin/sw_end). Budget: <= 100 ns, >= 8x cheaper.

The frameworks have benchmarks of their own: bench/bench_torch.py (stepwatch.torch against
its floor and torch.profiler), bench/bench_ignite.py, bench/bench_fastai.py.

Timings are medians over repeats; the variants of one measurement alternate so that machine
load hits them alike. Prints a table; writes the figures as JSON.
"""
import os
import statistics
import sys
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


def main():
    args = bu.parse_args("python")
    q = args.quick
    figures = {"python": sys.version.split()[0], "stepwatch": stepwatch.__version__}
    figures["with"] = bench_with(number=20_000 if q else 200_000, repeat=3 if q else 9)

    w = figures["with"]
    budgets = {
        "with_le_100ns": w["stepwatch_with_ns"] <= 100,
        "with_ge_8x_cheaper_than_simple": w["speedup_vs_simple"] >= 8,
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
    ]
    bu.print_table("stepwatch Python benchmark", rows)
    bu.write_json(args.out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
