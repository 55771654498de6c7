"""Check stepwatch's statistics against Python's statistics module on the same samples.

Usage: check_stats.py STATS_DUMP_BINARY WORKDIR
Both ways stats_dump computes them are checked: sw_stats directly, and through a profiler.
Exits non-zero (with the mismatch) when a figure is off: mean to 1e-9, stdev to 1e-7 relative,
percentiles within the histogram's documented 1/32 relative error.
"""
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path


def nearest_rank(sorted_values, q):
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def check(binary, workdir, name, values):
    path = Path(workdir) / f"samples_{name}.txt"
    path.write_text("\n".join(str(v) for v in values) + "\n")
    dumped = json.loads(subprocess.run([binary, str(path)], check=True, capture_output=True,
                                       text=True).stdout)
    failures = []
    for way, got in dumped.items():
        failures += compare(f"{name} ({way})", got, values)
    return failures


def compare(name, got, values):
    expect = {
        "count": len(values),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values),
        "pstdev": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
    }
    failures = []
    for key, want in expect.items():
        # Doubles hold ~16 digits: spreads 1e-7 of the offset keep ~9 of them in the stdev.
        tolerance = 1e-7 if "stdev" in key else 1e-9
        if not math.isclose(got[key], want, rel_tol=tolerance, abs_tol=1e-9):
            failures.append(f"{name}: {key} {got[key]} != {want}")
    if values.index(min(values)) != got["min_index"] or values.index(max(values)) != got["max_index"]:
        failures.append(f"{name}: min/max index {got['min_index']}/{got['max_index']}")
    ordered = sorted(values)
    for q, key in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
        want = nearest_rank(ordered, q)
        if abs(got[key] - want) > want / 32 + 1:
            failures.append(f"{name}: {key} {got[key]} not within 1/32 of {want}")
    return failures


def main():
    binary, workdir = sys.argv[1], sys.argv[2]
    rng = random.Random(1234)
    cases = {
        # Step times around 12 ms with a slow tail.
        "lognormal": [int(rng.lognormvariate(math.log(12e6), 0.4)) for _ in range(20003)],
        # Large offset, tiny spread: where sum-of-squares formulas lose all precision.
        "offset": [10**10 + rng.randrange(1000) for _ in range(5000)],
        # Sub-microsecond spans, exact buckets below 16 ns.
        "tiny": [rng.randrange(1, 2000) for _ in range(3000)],
    }
    failures = []
    for name, values in cases.items():
        failures += check(binary, workdir, name, values)
    for f in failures:
        print("MISMATCH", f)
    print(f"{len(cases)} cases, two ways each: {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
