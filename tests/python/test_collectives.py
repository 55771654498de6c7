"""Every torch.distributed collective, timed zero-code (stepwatch.collectives): real torchrun
processes with gloo on the CPU under `stepwatch run`, and nothing of stepwatch in the
scripts. Each call is collective:<op> in the phase and action it ran in, with its bytes and
its bandwidth per size class; a rank whose data is slow makes the other wait in its next
collective by about its delay (held to the delay the script itself measured); FSDP2's
all-gathers and reduce-scatters land in forward and backward; Lightning's DDP syncs show."""
import json
import subprocess

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch without torch.distributed", allow_module_level=True)

import stepwatch  # noqa: E402
from stepwatch import collectives  # noqa: E402
from test_distributed import _env, stepwatch_exe  # noqa: E402,F401 (a fixture)

STEPS = 8

# Explicit collectives around a DDP step; rank 1's data is slow by DELAY (measured here).
SCRIPT = """
import datetime, json, os, time, torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
DELAY, STEPS = float(os.environ["DELAY"]), int(os.environ["STEPS"])
slept = [0.0]

class Batches(Dataset):
    def __len__(self):
        return STEPS
    def __getitem__(self, i):
        if rank == 1:
            t0 = time.perf_counter()
            time.sleep(DELAY)
            slept[0] += time.perf_counter() - t0
        return torch.randn(8, 16), torch.randn(8, 1)

class Net(torch.nn.Module):  # a tensor-parallel-like all-gather inside its forward
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 1)
        self.shard = torch.ones(4096)  # 16 KiB, gathered to 32 KiB
    def forward(self, x):
        full = funcol.all_gather_single(self.shard, 0, dist.group.WORLD)
        return self.body(x) + full.sum() * 0

model = torch.nn.parallel.DistributedDataParallel(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
metric = torch.zeros(1024)        # 4 KiB
big = torch.zeros(1 << 18)        # 1 MiB
shard = torch.ones(1 << 14)       # 64 KiB in, world x 64 KiB out
out = torch.empty(world << 14)
for x, y in DataLoader(Batches(), batch_size=None):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    dist.all_reduce(metric)
    dist.broadcast(big, src=0, async_op=True).wait()
    dist.all_gather_single(out, shard)
    dist.reduce_scatter_single(shard, out)
    peer = 1 - rank
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, metric, peer),
                                    dist.P2POp(dist.irecv, torch.empty(1024), peer)])
    for w in works:
        w.wait()
    dist.gather(metric, [torch.empty(1024) for _ in range(world)] if rank == 0 else None)
    dist.scatter(metric, [torch.zeros(1024) for _ in range(world)] if rank == 0 else None)
dist.barrier()
with open(f"slept-{rank}.json", "w") as f:
    json.dump(slept[0], f)
dist.destroy_process_group()
"""

# FSDP2 on the CPU: fully_shard works with gloo in torch 2.13 (all_gather_single and
# reduce_scatter_single through torch.distributed).
FSDP_SCRIPT = """
import datetime, os, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
STEPS = int(os.environ["STEPS"])
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(STEPS):
    opt.zero_grad()
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()
dist.destroy_process_group()
"""

# DDP with small buckets: several all-reduces per backward, each one counted. DDP's own
# figures are the truth: one bucket at the first step, rebuilt after it into the sizes of
# bucket_cap_mb (1 MiB: four 1 MiB weights, one bucket each).
BUCKETS_SCRIPT = """
import datetime, json, os, time, torch, torch.distributed as dist
import stepwatch.distributed as swdist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
STEPS = int(os.environ["STEPS"])
if os.environ.get("LATE"):
    # the last backward's buckets reach stepwatch after the loop's end, as on a loaded
    # machine: a future wakes its waiters (DDP) before it runs its callbacks (ours)
    done = swdist._HookState.done
    def late(state, *args):
        if state.backward == STEPS:
            time.sleep(0.3)
        done(state, *args)
    swdist._HookState.done = late
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512, bias=False) for _ in range(4)])
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for _ in range(STEPS):
    opt.zero_grad()
    ddp(torch.randn(8, 512)).pow(2).mean().backward()
    opt.step()
ddp_data = ddp._get_ddp_logging_data()
first = [int(b) for b in ddp_data["bucket_sizes"].split(",")]
rebuilt = [int(b) for b in ddp_data["rebuilt_bucket_sizes"].split(",")]
grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
with open(f"buckets-{dist.get_rank()}.json", "w") as f:
    json.dump({"first": first, "rebuilt": rebuilt, "grad_bytes": grad_bytes}, f)
dist.destroy_process_group()
"""

LIGHTNING_SCRIPT = """
import os, torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 1)
    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.body(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)

trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, use_distributed_sampler=False)
trainer.fit(Net())
"""


def _run(exe, tmp_path, text, **env):
    """`stepwatch run -- torchrun` of a script on two ranks."""
    script = tmp_path / "train.py"
    script.write_text(text)
    cmd = [exe, "run", "--run-file", str(tmp_path / "run-{rank}.db"), "--", "torchrun",
           "--standalone", "--nproc_per_node=2", str(script)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=_env(STEPS=STEPS, STEPWATCH_WARMUP=0, **env))
    assert run.returncode == 0, run.stderr[-6000:]
    return run


def _report(path):
    """The rank's run file as the JSON report: its rows by (action, phase), its counters."""
    data = json.loads(stepwatch.load(str(path)).report("json"))
    rows = {(r["action"], r["phase"]): r for r in data["rows"]}
    counters = {c["name"]: c for c in data["counters"]}
    return data, rows, counters


def test_size_classes_and_bus_factors():
    assert collectives.size_class(1) == "1B"
    assert collectives.size_class(1000) == "512B"
    assert collectives.size_class(4096) == "4KiB"
    assert collectives.size_class((1 << 20) + 5) == "1MiB"
    assert collectives.size_class(3 << 30) == "2GiB"
    assert collectives.bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert collectives.bus_factor("gather", 4) == 3 / 4
    assert collectives.bus_factor("one", 4) == 1.0
    assert collectives.bus_factor("all_reduce", 1) == 1.0


def test_every_collective_timed_with_bytes_bandwidth_and_wait(tmp_path, stepwatch_exe):
    run = _run(stepwatch_exe, tmp_path, SCRIPT)
    assert "Collectives (bandwidth per op" in run.stderr, run.stderr[-6000:]
    world = 2
    in_steps = []  # per rank, its training steps' collective time
    for rank in range(world):
        data, rows, counters = _report(tmp_path / f"run-{rank}.db")
        # each explicit call once per step, in the training phase; DDP's own all-reduce of
        # the gradients (its comm hook calls all_reduce per bucket) is not counted again
        for op, calls in (("all_reduce", 1), ("broadcast", 1), ("reduce_scatter_single", 1),
                          ("batch_isend_irecv", 1), ("all_gather_single", 2),
                          ("gather", 1), ("scatter", 1)):
            row = rows[(f"collective:{op}", "train")]
            assert row["count"] == calls * STEPS, \
                (rank, op, {k: r["count"] for k, r in rows.items() if k[0].startswith("coll")})
        assert rows[("collective:allreduce", "train")]["count"] == STEPS  # DDP's, as before
        # stepwatch's own round (the clock offsets' ping-pongs at the first DDP forward, by
        # send and recv) ran, quiet: its own action, never the program's collectives
        assert ("collective:stepwatch", "train") in rows, sorted(rows)
        assert not [a for a, _phase in rows if a in ("collective:send", "collective:recv")]
        assert rows[("collective:barrier", "all")]["count"] >= 1
        # the bytes: the tensors' sizes times the steps (nccl-tests' sizes)
        expect = {"all_reduce": 4096, "broadcast": 1 << 20,
                  "all_gather_single": world * (64 << 10) + world * (16 << 10),
                  "reduce_scatter_single": world * (64 << 10), "batch_isend_irecv": 2 * 4096,
                  "gather": world * 4096, "scatter": world * 4096}
        for op, nbytes in expect.items():
            assert counters[f"comm:{op}:bytes"]["last"] == nbytes * STEPS, op
        # bandwidth per size class: one sample a call; busbw = algbw x nccl-tests' factor
        ar = counters["comm:all_reduce:4KiB:algbw"]
        assert ar["count"] == STEPS
        # the fastest call's algbw is the bytes over the shortest call's time, exactly
        fastest = rows[("collective:all_reduce", "all")]["min_ns"]
        assert abs(ar["max"] - 4096 / fastest) <= 1e-9 * ar["max"], (ar, fastest)
        assert counters["comm:all_reduce:4KiB:busbw"]["mean"] == pytest.approx(ar["mean"])
        ag = counters["comm:all_gather_single:128KiB:algbw"]
        assert ag["count"] == STEPS
        assert counters["comm:all_gather_single:128KiB:busbw"]["mean"] == \
            pytest.approx(ag["mean"] * (world - 1) / world)
        assert "comm:broadcast:1MiB:busbw" in counters
        gather = counters["comm:gather:8KiB:algbw"]
        assert gather["count"] == STEPS
        assert counters["comm:gather:8KiB:busbw"]["mean"] == \
            pytest.approx(gather["mean"] * (world - 1) / world)
        # async work: the issue, then the host time blocked in wait()
        assert rows[("collective:broadcast:wait", "train")]["count"] == STEPS
        assert counters["comm:broadcast:1MiB:algbw"]["count"] == STEPS
        # the functional all-gather (32 KiB) ran inside the forward: the forward's self
        # time leaves it out (its time is the forward's child time)
        fwd = rows[("forward", "train")]
        # its bandwidth is timed from its issue to the end of its wait (the sum's)
        assert counters["comm:all_gather_single:32KiB:algbw"]["count"] == STEPS
        assert rows[("collective:all_gather_single:wait", "train")]["count"] == STEPS
        assert fwd["total_ns"] > fwd["self_ns"], fwd
        # the process group, noted with its ranks
        notes = data.get("notes", {})
        assert notes.get("collectives.groups") == "2 ranks [0,1]", notes
        # every collective is in the category collective, and each training step gives it
        # its own time (the forward's all-gather, its wait): out of the forward's
        assert {r["category"] for (a, _phase), r in rows.items()
                if a.startswith("collective:")} == {"collective"}
        steps = [s for s in stepwatch.load_steps(str(tmp_path / f"run-{rank}.db"))
                 if s["phase"] == "train"]
        assert len(steps) == STEPS
        assert all(s["collective_ns"] > 0 for s in steps), [s["collective_ns"] for s in steps]
        for s in steps:
            parts = sum(s[f"{c}_ns"] for c in stepwatch.CATEGORIES)
            assert parts == s["duration_ns"], s
        in_steps.append(sum(s["collective_ns"] for s in steps))
    # rank 1's data is slow: rank 0 waits for it in the first collective of its next step
    # (the forward's all-gather), by about what rank 1 slept (the script's own clock)
    slept = json.loads((tmp_path / "slept-1.json").read_text()) * 1e9

    def in_collectives(rank):
        rows = _report(tmp_path / f"run-{rank}.db")[1]
        return sum(r["total_ns"] for (a, phase), r in rows.items()
                   if a.startswith("collective:") and phase == "train")
    waits = [in_collectives(r) for r in range(world)]
    # (at least half: rank 1 waits too whenever the loaded machine preempts rank 0, which
    # once took 189 ms of 327 ms slept off the difference)
    assert 0.5 * slept < waits[0] - waits[1] < 1.6 * slept, (waits, slept)
    # that wait lies inside rank 0's steps (its forward): the steps' collective category
    # holds it
    assert 0.5 * slept < in_steps[0] - in_steps[1] < 1.6 * slept, (in_steps, slept)


def test_fsdp2_all_gathers_and_reduce_scatters_in_forward_and_backward(tmp_path, stepwatch_exe):
    _run(stepwatch_exe, tmp_path, FSDP_SCRIPT)
    _data, rows, counters = _report(tmp_path / "run-0.db")
    gathers = rows[("collective:all_gather_single", "train")]
    scatters = rows[("collective:reduce_scatter_single", "train")]
    # two sharded layers: gathered in the forward and again in the backward, each step
    assert gathers["count"] >= 2 * STEPS and scatters["count"] >= STEPS, (gathers, scatters)
    # every parameter byte is gathered: 16x64 + 64 + 64 + 1 float32 per forward at least
    params = (16 * 64 + 64 + 64 * 1 + 1) * 4
    assert counters["comm:all_gather_single:bytes"]["last"] >= params * STEPS
    bwd = rows[("backward", "train")]
    assert bwd["total_ns"] - bwd["self_ns"] > 0, bwd


def test_ddp_every_bucket_timed_and_counted(tmp_path, stepwatch_exe):
    _run(stepwatch_exe, tmp_path, BUCKETS_SCRIPT)
    for rank in range(2):
        truth = json.loads((tmp_path / f"buckets-{rank}.json").read_text())
        assert len(truth["rebuilt"]) == 4, truth  # the script's layout: several buckets
        _data, rows, counters = _report(tmp_path / f"run-{rank}.db")
        calls = len(truth["first"]) + len(truth["rebuilt"]) * (STEPS - 1)
        allreduce = rows[("collective:allreduce", "all")]
        assert allreduce["count"] == calls, (allreduce, truth)
        assert counters["comm:allreduce:bytes"]["last"] == truth["grad_bytes"] * STEPS
        assert sum(truth["first"]) == sum(truth["rebuilt"]) == truth["grad_bytes"]
        # one bandwidth sample a bucket, in its size class
        assert counters["comm:allreduce:1MiB:algbw"]["count"] == 4 * (STEPS - 1)
        assert counters["comm:allreduce:4MiB:algbw"]["count"] == 1
        assert counters["comm:allreduce:1MiB:busbw"]["mean"] == \
            pytest.approx(counters["comm:allreduce:1MiB:algbw"]["mean"])  # 2(n-1)/n = 1
        # the time is the wait after the backward, never the buckets' overlapping spans
        # summed: within the steps' own time
        step = rows[("step", "all")]
        assert 0 < allreduce["total_ns"] < step["total_ns"], (allreduce, step)
        # the waits are recorded inside the backward, on the training thread: its own time
        # leaves them out, and the steps' split gives them to the collective category (at
        # least half: on a loaded machine a bucket later than the backward's end records
        # itself on gloo's thread, outside the steps)
        bwd = rows[("backward", "all")]
        assert bwd["total_ns"] - bwd["self_ns"] >= 0.5 * allreduce["total_ns"], (bwd, allreduce)
        steps = stepwatch.load_steps(str(tmp_path / f"run-{rank}.db"))
        in_steps = sum(s["collective_ns"] for s in steps)
        assert in_steps >= 0.5 * allreduce["total_ns"], (in_steps, allreduce)
        # the explicit all_reduce calls of DDP's hook are not counted again
        assert ("collective:all_reduce", "all") not in rows


def test_ddp_buckets_counted_when_the_last_come_after_the_loop(tmp_path, stepwatch_exe):
    """The run's end waits (boundedly) for the buckets the backend has not handed over yet:
    none is lost, and the process exits cleanly (a callback cut off at exit aborted it)."""
    _run(stepwatch_exe, tmp_path, BUCKETS_SCRIPT, LATE=1)
    for rank in range(2):
        truth = json.loads((tmp_path / f"buckets-{rank}.json").read_text())
        _data, rows, counters = _report(tmp_path / f"run-{rank}.db")
        calls = len(truth["first"]) + len(truth["rebuilt"]) * (STEPS - 1)
        assert rows[("collective:allreduce", "all")]["count"] == calls
        assert counters["comm:allreduce:bytes"]["last"] == truth["grad_bytes"] * STEPS


def test_lightning_ddp_syncs_under_stepwatch_run(tmp_path, stepwatch_exe):
    pytest.importorskip("lightning")
    # under torchrun (Lightning finds the ranks in the environment), as test_lightning_ddp.py
    _run(stepwatch_exe, tmp_path, LIGHTNING_SCRIPT)
    for rank in range(2):
        _data, rows, counters = _report(tmp_path / f"run-{rank}.db")
        names = {a for a, _phase in rows if a.startswith("collective:")}
        # self.log(sync_dist=True): one all-reduce of the loss per step (8 steps)
        assert rows[("collective:all_reduce", "all")]["count"] >= 8, names
        assert counters["comm:all_reduce:bytes"]["last"] >= 8 * 4
        assert "collective:allreduce" in names  # DDP's gradients, as before


def test_instrument_restores_the_collectives():
    import torch.distributed as dist
    import stepwatch.torch as swtorch
    original = dist.all_reduce, dist.distributed_c10d.all_reduce, dist.Work.wait
    prof = stepwatch.Profiler()
    swtorch.instrument(prof)
    try:
        assert dist.all_reduce is not original[0]
        assert dist.all_reduce is dist.distributed_c10d.all_reduce
    finally:
        swtorch.uninstrument()
        prof.close()
    assert (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.Work.wait) == original


@pytest.fixture
def one_rank(tmp_path):
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0,
                            world_size=1)
    yield dist
    if dist.is_initialized():
        dist.destroy_process_group()


def _counts(prof):
    rows = {r["action"]: r["count"] for r in prof.records("all")}
    samples = {c["name"]: c["count"] for c in prof.snapshot().info()["counters"]}
    return rows, samples


def test_async_work_timed_at_its_first_wait_only(one_rank):
    """Work.wait is the C side's own callable (Collectives.waiter): an async call's wait is
    timed once, with one bandwidth sample from the issue to the wait's end; its arguments
    pass through; works never waited for do not pile up; a wait under quiet() is not timed."""
    import datetime

    import stepwatch.torch as swtorch
    dist = one_rank
    original = dist.Work.__dict__["wait"]
    prof = stepwatch.Profiler()
    swtorch.instrument(prof)
    try:
        calls = collectives._recorder.calls
        wait = dist.Work.__dict__["wait"]  # an instancemethod, as pybind11 has its methods
        assert type(wait.__func__).__name__ == "CollectiveWait"
        assert wait.__wrapped__ is original
        t = torch.zeros(1024)  # 4 KiB
        work = dist.all_reduce(t, async_op=True)
        assert calls.pending == 1
        assert work.wait() is True and calls.pending == 0
        assert work.wait() is True  # waited again: not timed again
        dist.all_reduce(t, async_op=True).wait(datetime.timedelta(seconds=30))
        dist.all_reduce(t, async_op=True).wait(timeout=datetime.timedelta(seconds=30))
        with collectives.quiet():
            dist.all_reduce(t, async_op=True).wait()  # not recorded at all
        work = dist.all_reduce(t, async_op=True)
        with collectives.quiet():
            work.wait()  # not the program's wait: the work stays pending ...
        assert calls.pending == 1
        work.wait()  # ... for the program's, timed
        assert calls.pending == 0
        kept = [dist.all_reduce(t, async_op=True) for _ in range(5000)]  # not waited for yet
        left = calls.pending  # the table was emptied when full: the newest ones are left
        assert 0 < left < 4096, left
        for w in kept:
            w.wait()
        assert calls.pending == 0
        rows, samples = _counts(prof)
        assert rows["collective:all_reduce"] == 4 + 5000, rows
        assert rows["collective:all_reduce:wait"] == 4 + left, rows
        # one bandwidth sample a timed wait (the calls themselves were async: none)
        assert samples["comm:all_reduce:4KiB:algbw"] == 4 + left, samples
    finally:
        swtorch.uninstrument()
        prof.close()
    assert dist.Work.__dict__["wait"] is original


def test_compiled_code_calls_through_the_wrappers(one_rank):
    """torch.compile traces the c10d wrappers (dynamo maps torch.distributed's functions as the
    module has them, the wrappers, to functional ones and reads their defaults from the
    signature the wrapper carries) and calls Work.wait's C replacement: compiled code runs
    with the collectives wrapped, and the eager call after it is timed as ever."""
    import inspect

    import stepwatch.torch as swtorch
    dist = one_rank
    prof = stepwatch.Profiler()
    swtorch.instrument(prof)
    try:
        assert "op" in inspect.signature(dist.all_reduce).parameters

        def step(x):
            dist.all_reduce(x, async_op=True).wait()
            return x + 1
        compiled = torch.compile(step, backend="eager")
        assert torch.equal(compiled(torch.ones(4)), torch.full((4,), 2.0))
        before = _counts(prof)[0].get("collective:all_reduce:wait", 0)
        step(torch.ones(4))
        assert _counts(prof)[0]["collective:all_reduce:wait"] == before + 1
    finally:
        swtorch.uninstrument()
        prof.close()
