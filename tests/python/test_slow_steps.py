"""Slow steps found and explained in a real torch loop (docs/slow-steps.md).

A plain PyTorch loop, instrumented with zero code changes, injects at known steps: (a) a
large cyclic object graph dropped and collected (a generation-2 collection), (b) three busy
processes pinned to the loop's CPU, (c) a fresh memory-mapped file touched page by page,
(d) a checkpoint (torch.save), (e) a new input shape under torch.compile(backend="eager")
(a recompilation), (f) a sleep in the data. Each injected step must be found with its
cause; a step nothing was injected in may be slow only for the machine's reasons (this
2-core VM is shared: a steady step may really be preempted); the counts per cause must be
those injected. Where the machine took more of an injected step than the injection did, the
test's own measure of the step decides what was expected, never a quiet machine.
"""
import gc
import mmap
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402

STEPS = 130
GC, PREEMPT, FAULTS, CHECKPOINT, RECOMPILE, DATA = 30, 45, 60, 75, 90, 105
INJECTED = {GC: "gc", PREEMPT: "preempted", FAULTS: "page_faults", CHECKPOINT: "checkpoint",
            RECOMPILE: "compile", DATA: "data"}
MACHINE = {"preempted", "blocked", "unknown"}


class Batches(Dataset):
    """Whole batches (DataLoader(batch_size=None)): index i is step i's batch; the batch of
    DATA sleeps, the batch of RECOMPILE has a new shape."""

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        if i == DATA:
            time.sleep(0.12)
        n = 17 if i == RECOMPILE else 64
        g = torch.Generator().manual_seed(i)
        return torch.randn(n, 128, generator=g), torch.randn(n, 10, generator=g)


def busy_pinned(cpu, n):
    """n processes spinning on cpu, started and then stopped (SIGSTOP) until a step needs
    them: their start-up stays out of the step."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass\n"
    busy = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    time.sleep(1.0)
    for b in busy:
        os.kill(b.pid, signal.SIGSTOP)
    return busy


def slow_steps(path):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    rows = {r["step"]: dict(r) for r in db.execute("SELECT * FROM slow_steps")}
    db.close()
    return rows


def off_cpu(r):
    """The OS's off-CPU time of a slow step, as sw_step_off_cpu_ns counts it."""
    if r["os_wall_ns"] == 0 or r["os_wall_ns"] <= r["cpu_ns"]:
        return 0
    return min(r["os_wall_ns"] - r["cpu_ns"], r["duration_ns"])


def named_ns(r, cause):
    """What a program's cause explains of a slow step: its time, less the time the thread
    was preempted (sw_slow_cause's rule)."""
    ns = {"gc": r["gc_ns"], "checkpoint": r["checkpoint_ns"], "compile": r["compile_ns"],
          "data": r["data_ns"], "page_faults": r["sys_ns"]}.get(cause, 0)
    # (page faults' kernel time is CPU time: a preemption does not lengthen it)
    if cause != "page_faults" or r["major_faults"] > 0:
        ns -= runnable_part(r)
    return max(ns, 0)


def runnable_part(r):
    """The runnable (preempted) part of a slow step's off-CPU time, as sw_step_runnable_ns
    counts it: with schedstat's run delay, the off-CPU time less the reading's blocked time;
    without, all of it when involuntary switches outnumber voluntary ones."""
    off = off_cpu(r)
    if r.get("runnable_ns") is None:
        return off if r["involuntary_switches"] > r["voluntary_switches"] else 0
    blocked = max(r["os_wall_ns"] - r["cpu_ns"] - r["runnable_ns"], 0)
    blocked = max(blocked - int(r["os_wall_ns"] * r["steal_permille"] / 1000.0), 0)
    return off - min(blocked, off)


@pytest.fixture
def one_cpu():
    """The loop on one CPU with one torch thread (the busy processes share that CPU)."""
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    yield cpu
    os.sched_setaffinity(0, before)
    torch.set_num_threads(threads)


def run_loop(path, mapped, cpu):
    prof = stepwatch.Profiler(name="slow-steps", run_file=str(path), warmup_steps=3)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Batches(), batch_size=None)
    graph = [[] for _ in range(400000)]
    for k in range(len(graph)):  # a cycle through every list
        graph[k].append(graph[k - 1])
    measured = {}
    busy = busy_pinned(cpu, 3)
    try:
        with swtorch.instrument(prof):
            loop(model, opt, loader, graph, busy, mapped, path, measured)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    report = prof.report()
    prof.close()
    return measured, report


def loop(model, opt, loader, graph, busy, mapped, path, measured):
    """The training loop, with the injections at their steps."""
    big = torch.ones(24 << 20)  # the checkpoint's 96 MB, made (and faulted in) before
    compiled = torch.compile(model, backend="eager")
    for i, (x, y) in enumerate(loader):
        wall, cpu_t = time.perf_counter(), time.thread_time()
        if i == GC:
            graph.clear()  # the lists keep each other alive: only the collector frees them
            gc.collect()
        if i == PREEMPT:
            for b in busy:
                os.kill(b.pid, signal.SIGCONT)
            start = time.thread_time()
            while time.thread_time() - start < 0.03:
                pass
            for b in busy:
                os.kill(b.pid, signal.SIGSTOP)
        if i == FAULTS:
            with open(mapped, "r+b") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                for off in range(0, len(m), mmap.PAGESIZE):
                    m[off] = 1
                m.close()
        if i == CHECKPOINT:
            torch.save({"model": model.state_dict(), "big": big}, path.parent / "ckpt.pt")
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        measured[i] = (time.perf_counter() - wall, time.thread_time() - cpu_t)


def test_injected_steps_are_found_with_their_causes(tmp_path, one_cpu):
    mapped = tmp_path / "mapped.bin"
    with open(mapped, "wb") as f:  # written now: in the page cache, faulted in by the touch
        f.write(b"\0" * (128 << 20))
    path = tmp_path / "run.db"
    measured, report = run_loop(path, mapped, one_cpu)
    slow = slow_steps(path)
    lines = {s: r["cause"] for s, r in sorted(slow.items())}
    print("slow steps:", lines)
    for step, cause in INJECTED.items():
        assert step in slow, f"step {step} ({cause}) not found slow: {lines}"
        r = slow[step]
        excess = r["duration_ns"] - r["median_ns"]
        if cause == "preempted":
            # The test's own clock: the step was mostly off the CPU (3 processes on its CPU).
            wall, cpu_t = measured[step]
            assert wall - cpu_t >= 0.5 * wall, measured[step]
            assert r["cause"] == "preempted", r
            assert r["involuntary_switches"] > r["voluntary_switches"], r
            continue
        if 2 * named_ns(r, cause) >= excess:
            assert r["cause"] == cause, r
        elif 2 * off_cpu(r) >= excess:
            # The machine took more of the step than the injection: the OS must say so.
            assert r["cause"] in MACHINE, r
        else:
            # Split between the injection (less its preempted time) and the machine, neither
            # half of the excess: unknown by the rule (the fresh-clone run beside a helper's
            # build: a recompile of 271 ms over the median, 125 ms of it off the CPU).
            assert r["cause"] == "unknown", r
    gc_step = slow[GC]
    assert gc_step["gc_generation"] == 2 and gc_step["gc_collected"] >= 400000, gc_step
    assert slow[FAULTS]["minor_faults"] >= (128 << 20) // mmap.PAGESIZE // 2, slow[FAULTS]
    # Steps nothing was injected in: the machine's causes only (page faults count as the
    # machine's when the kernel says so: torch touching fresh memory in its first steps).
    for step, r in slow.items():
        if step not in INJECTED:
            faulted = r["cause"] == "page_faults" and r["minor_faults"] + r["major_faults"] >= 64
            assert r["cause"] in MACHINE or faulted, (step, r)
    # The counts per cause: what was injected (and explained) and nothing more.
    counts = {}
    for r in slow.values():
        counts[r["cause"]] = counts.get(r["cause"], 0) + 1
    for cause in ("gc", "checkpoint", "compile", "data", "page_faults"):
        expected = sum(1 for s, c in INJECTED.items() if c == cause and slow[s]["cause"] == c)
        if cause == "page_faults":
            assert counts.get(cause, 0) >= expected, counts
        else:
            assert counts.get(cause, 0) == expected, counts
    # The collection and the compilation are CPU work: where the test's own clock says the
    # thread was on the CPU for most of the step, nothing but them may be named.
    for step in (GC, RECOMPILE):
        wall, cpu_t = measured[step]
        if wall - cpu_t < 0.3 * wall:
            assert slow[step]["cause"] == INJECTED[step], (measured[step], slow[step])
    # Where it shows: the report's line, diagnose's finding, the kept windows.
    assert "Slow steps: " in report
    diag = stepwatch.diagnose(str(path))
    assert "Slow steps: " in diag and any(f"step {s}: " in diag for s in INJECTED), diag
    if slow[GC]["cause"] == "gc":
        assert "gc generation 2" in diag, diag
    db = sqlite3.connect(path)
    kept = {w for (w,) in db.execute("SELECT DISTINCT window FROM slow_spans")}
    names = {n for (n,) in db.execute(
        "SELECT a.name FROM slow_spans s JOIN actions a ON a.id = s.action AND a.rank = s.rank"
        " WHERE s.window = ?", (CHECKPOINT,))}
    db.close()
    assert CHECKPOINT in kept and "checkpoint" in names, (kept, names)


def test_gc_callback_comes_and_goes_with_the_profiler(tmp_path):
    before = list(gc.callbacks)
    p = stepwatch.Profiler(name="gc", run_file=str(tmp_path / "gc.db"))
    assert len(gc.callbacks) == len(before) + 1
    p.close()
    assert gc.callbacks == before
    os.environ["STEPWATCH_GC"] = "0"
    try:
        p = stepwatch.Profiler(name="gc-off")
        assert gc.callbacks == before
        p.close()
    finally:
        del os.environ["STEPWATCH_GC"]
    # A profiler dropped without close(): its callable stays harmless.
    p = stepwatch.Profiler(name="gc-dropped")
    del p
    gc.collect()
    gc.collect()
