"""The slow steps' allocator and machine signals (docs/slow-steps.md).

The CUDA caching allocator's retries and out-of-memory errors are read, per step, from the
same statistics as the memory per step (torch._C._cuda_memoryStats, python/_stepwatch/
_memory.c). Without a GPU that path is driven by a provider in a child process: torch.cuda
marked initialized and torch._C's three allocator functions replaced by functions serving
statistics whose num_alloc_retries and num_ooms grow at known steps. What is tested is
stepwatch's side (read, per-step delta, cause, evidence, run file), not torch's allocator.

The machine's steal and load come from the device sampler's reads of /proc/stat and
/proc/loadavg: a run with the sampler on carries the machine's CPUs and load in its slow
steps' rows.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from test_slow_steps import slow_steps

pytest.importorskip("torch")

RETRY, OOM = 25, 32

CHILD = textwrap.dedent("""
    import json, sys, time
    import torch
    import stepwatch
    RETRY, OOM = {retry}, {oom}
    counts = {{"num_alloc_retries": 0, "num_ooms": 0}}

    def memory_stats(device):
        return {{"allocated_bytes": {{"all": {{"current": 1 << 20, "peak": 2 << 20}}}},
                "reserved_bytes": {{"all": {{"current": 4 << 20}}}}, **counts}}

    torch.cuda._initialized = True  # a provider, not a GPU: only the statistics are asked
    torch._C._cuda_getDevice = lambda: 0
    torch._C._cuda_memoryStats = memory_stats
    torch._C._cuda_resetPeakMemoryStats = lambda device: None
    p = stepwatch.Profiler(name="allocator", run_file=sys.argv[1], live=False)
    with p.phase("train"):
        for i in range(40):
            with p.step(8):
                time.sleep(0.002)
                if i == RETRY:
                    counts["num_alloc_retries"] += 3  # the cache freed and a retry, 3 times
                    time.sleep(0.06)  # the device synchronized for it
                if i == OOM:
                    counts["num_ooms"] += 1
                    time.sleep(0.06)
    p.close()
""").format(retry=RETRY, oom=OOM)


def test_allocator_retries_and_ooms_explain_their_steps(tmp_path):
    path = tmp_path / "alloc.db"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    slow = slow_steps(path)
    assert slow[RETRY]["cause"] == "allocator", slow[RETRY]
    assert (slow[RETRY]["alloc_retries"], slow[RETRY]["ooms"]) == (3, 0)
    assert slow[OOM]["cause"] == "allocator", slow[OOM]
    assert (slow[OOM]["alloc_retries"], slow[OOM]["ooms"]) == (0, 1)
    # Only those steps saw the counts grow; the others are the machine's.
    for step, r in slow.items():
        if step not in (RETRY, OOM):
            assert r["alloc_retries"] == 0 and r["ooms"] == 0, r
            assert r["cause"] in ("preempted", "blocked", "unknown"), r
    import stepwatch
    diag = stepwatch.diagnose(path)
    assert f"step {RETRY}: " in diag and "CUDA allocator: 3 retries" in diag, diag
    assert "expandable_segments" in diag, diag


def test_machine_load_and_cpus_from_the_sampler(tmp_path):
    import time

    import stepwatch
    path = tmp_path / "machine.db"
    p = stepwatch.Profiler(name="machine", run_file=str(path), live=False, device_stats=0.05)
    time.sleep(0.2)  # the sampler's first reads
    with p.phase("train"):
        for i in range(40):
            with p.step():
                time.sleep(0.15 if i == 30 else 0.002)
    p.close()
    r = slow_steps(path)[30]
    assert r["cpus"] == os.cpu_count(), r
    assert 0 <= r["steal_permille"] <= 1000
    load = os.getloadavg()[0]
    assert r["load_x100"] > 0 and abs(r["load_x100"] / 100 - load) < max(2.0, load), (r, load)
