"""bench/bench_h2d_hook.py — what stepwatch.torch's Tensor.to hook (h2d_copy) adds to a .to()
call: one that is not a batch copy (a cast inside the model, no batch held: the common case),
and one while a fetched batch waits for its forward (timed as the batch's copy).

    build/venv/bin/python bench/bench_h2d_hook.py              # wall clock, ns per call
    build/venv/bin/python bench/bench_h2d_hook.py --callgrind  # instructions per call

Wall clock: plain and instrumented blocks interleaved in one process, medians of ns per call
with the range over the rounds (on a loaded machine they wander more than the hook costs).
--callgrind: the same loops once under valgrind's callgrind, counting only inside each loop
(bench/callgrind_marks.c, built by CMake as build/release/bench/libsw_callgrind_marks.so):
instructions per call, which hardly depend on the load.
"""
import ctypes
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader

import stepwatch
import stepwatch.torch as swtorch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKS = os.path.join(ROOT, "build", "release", "bench", "libsw_callgrind_marks.so")
x = torch.ones(4)


def calls(n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.to(torch.float32)  # same dtype: returns x, no copy; the call's own cost
    return (time.perf_counter_ns() - t0) / n


def variants(prof, run):
    """run(label) in each state: plain, instrumented with no batch held, with one held."""
    run("plain")
    swtorch.instrument(prof)
    run("no batch held")
    it = iter(DataLoader([x] * 2, batch_size=None))
    next(it)  # held until a forward consumes it: every .to now is its copy
    run("batch held")
    swtorch.uninstrument()


def wall(n=20000, rounds=9):
    prof = stepwatch.Profiler(name="h2d-hook")
    ns = {}
    for _ in range(rounds):
        variants(prof, lambda label: ns.setdefault(label, []).append(calls(n)))
    base = statistics.median(ns["plain"])
    for label, v in ns.items():
        m = statistics.median(v)
        print(f"{label:>14}: {m:8.1f} ns per .to ({min(v):.1f}..{max(v):.1f}), "
              f"{m - base:+.1f} ns")


def counted(n=2000):
    """Under callgrind: one dump per state, counting only its loop."""
    marks = ctypes.CDLL(MARKS)
    prof = stepwatch.Profiler(name="h2d-hook")
    calls(n)  # warm

    def run(label):
        marks.sw_cg_start()
        calls(n)
        marks.sw_cg_stop(label.encode())
    variants(prof, run)


def callgrind(n=2000):
    out = tempfile.mkdtemp(prefix="h2d-hook-cg-")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
                    f"--callgrind-out-file={out}/cg.%p", sys.executable,
                    os.path.abspath(__file__), "--child"], check=True,
                   env=dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1"))
    ir = {}
    for path in glob.glob(f"{out}/cg.*"):
        label = total = None
        for line in open(path):
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.split(": ", 3)[3].strip()
            elif line.startswith("totals:"):
                total = int(line.split()[1])
        if label and total:
            ir[label] = total / n
    base = ir["plain"]
    for label in ("plain", "no batch held", "batch held"):
        print(f"{label:>14}: {ir[label]:8.0f} instructions per .to, {ir[label] - base:+.0f}")


if __name__ == "__main__":
    if "--child" in sys.argv:
        counted()
    elif "--callgrind" in sys.argv:
        callgrind()
    else:
        wall()
