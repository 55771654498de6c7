"""The per-call floor of the module table (issue 43): the forward self time stepwatch gives a
module that does nothing, against the loop's own clock in the same run.

    build/venv/bin/python bench/bench_module_floor.py [--calls 2000] [--steps 21]

A model calls a do-nothing module (forward returns its input) `calls` times per step under
Profiler(modules=2): after the warm-up step, odd steps are sampled, even ones only call
through. Printed, in ns per call: the table's self time (the floor: torch's Module.__call__
around the forward and stepwatch's two clock reads), the loop's own clock around the same
calls in the sampled steps (the floor plus the hooks' own work around each call, which no
module is charged for) and in the steps not sampled (a module call with the hook calling
through), and a bare forward() call. Medians over the steps; wall time, so a loaded machine
inflates every figure alike.
"""
import argparse
import json
import statistics
import time

import torch

import stepwatch


class Nothing(torch.nn.Module):
    def forward(self, x):
        return x


class Caller(torch.nn.Module):
    def __init__(self, calls):
        super().__init__()
        self.calls, self.nothing, self.own = calls, Nothing(), []

    def forward(self, x):
        t0 = time.perf_counter_ns()
        for _ in range(self.calls):
            x = self.nothing(x)
        self.own.append((time.perf_counter_ns() - t0) / self.calls)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(4, 16)
    model = Caller(args.calls)
    t0 = time.perf_counter_ns()
    for _ in range(args.calls):
        model.nothing.forward(x)
    bare = (time.perf_counter_ns() - t0) / args.calls
    prof = stepwatch.Profiler(modules=2)
    try:
        for _ in range(args.steps):
            with prof.step():
                model(x)
        rows = {r["path"]: r for r in json.loads(prof.report("json"))["modules"]["rows"]}
    finally:
        prof.close()
    row = rows["nothing"]
    sampled, through = model.own[1::2], model.own[2::2]  # step 0: warm-up
    out = {"table_self_ns_per_call": row["forward_self_ns"] / row["forward_calls"],
           "own_clock_sampled_ns_per_call": statistics.median(sampled),
           "own_clock_not_sampled_ns_per_call": statistics.median(through),
           "bare_forward_ns": bare, "calls": row["forward_calls"]}
    for k, v in out.items():
        print(f"{k:36} {v:10.0f}")


if __name__ == "__main__":
    main()
