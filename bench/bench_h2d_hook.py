"""bench/bench_h2d_hook.py — what stepwatch.torch's Tensor.to hook (h2d_copy) costs a .to()
that is not a batch copy (a cast inside the model, no batch held: the common case), and a
.to() of a held batch (timed). Plain vs instrumented, blocks interleaved in one process,
medians of ns per call with the range over rounds.
    build/venv/bin/python bench/bench_h2d_hook.py"""
import statistics
import time

import torch
from torch.utils.data import DataLoader

import stepwatch
import stepwatch.torch as swtorch

N, ROUNDS = 20000, 9
x = torch.ones(4)


def per_call(n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.to(torch.float32)  # same dtype: returns x, no copy; the call's own cost
    return (time.perf_counter_ns() - t0) / n


plain, hooked, held = [], [], []
prof = stepwatch.Profiler(name="h2d-hook")
for _ in range(ROUNDS):
    plain.append(per_call())
    inst = swtorch.instrument(prof)
    hooked.append(per_call())  # no batch held: checks, then torch's own to
    it = iter(DataLoader([x] * 2, batch_size=None))
    next(it)  # a batch held until a forward consumes it: every .to is its copy
    held.append(per_call())
    swtorch.uninstrument()
m = statistics.median
print(f"Tensor.to, plain:                  {m(plain):6.1f} ns ({min(plain):.1f}..{max(plain):.1f})")
print(f"instrumented, no batch held:       {m(hooked):6.1f} ns ({min(hooked):.1f}..{max(hooked):.1f})"
      f"  +{m(hooked) - m(plain):.1f} ns")
print(f"instrumented, a batch held (timed): {m(held):6.1f} ns ({min(held):.1f}..{max(held):.1f})"
      f"  +{m(held) - m(plain):.1f} ns")
