"""Many ranks through torch.distributed: real torchrun processes (gloo, DistributedDataParallel,
CPU), one rank made slow by a known delay in its data loader or in its model's forward, run
unmodified under `stepwatch run -- torchrun ...`. The report names that rank and the right
blame; each rank keeps its run file; rank 0's holds the cross-rank view; diagnose, merge and
the Chrome trace read them. A rank killed mid-run does not hang the others' end-of-run
aggregation: rank 0 waits at most the timeout and names it."""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch without torch.distributed", allow_module_level=True)

import stepwatch  # noqa: E402

DELAY = 0.04  # seconds a slow rank loses per step
STEPS = 10
WARMUP = 2

# What both scripts share: the slow rank's settings and a data set whose loading is slow there.
_SLOW_RANKS = """DATA_RANK = int(os.environ.get("DATA_RANK", "-1"))
COMPUTE_RANK = int(os.environ.get("COMPUTE_RANK", "-1"))
KILL_RANK = int(os.environ.get("KILL_RANK", "-1"))
DELAY, STEPS = float(os.environ["DELAY"]), int(os.environ["STEPS"])

class Batches(Dataset):  # whole batches: one item per step
    def __len__(self):
        return STEPS
    def __getitem__(self, i):
        if rank == DATA_RANK:
            time.sleep(DELAY)
        return torch.randn(8, 16), torch.randn(8, 1)
"""

# The model of the plain torch and fastai scripts: its forward is slow on COMPUTE_RANK.
_NET = """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.Linear(32, 1))
    def forward(self, x):
        if rank == COMPUTE_RANK:
            time.sleep(DELAY)
        return self.body(x)
"""

# An ordinary DDP training script; nothing of stepwatch in it.
SCRIPT = """
import os, signal, time, datetime, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
""" + _SLOW_RANKS + _NET + """
model = torch.nn.parallel.DistributedDataParallel(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i, (x, y) in enumerate(DataLoader(Batches(), batch_size=None)):
    if rank == KILL_RANK and i == STEPS // 2:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
"""


def _env(**extra):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", DELAY=str(DELAY),
               STEPS=str(STEPS), STEPWATCH_WARMUP=str(WARMUP))
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "STEPWATCH_RUN_FILE"):
        env.pop(var, None)
    env.update({k: str(v) for k, v in extra.items()})
    # torchrun and the interpreter of this venv first on PATH
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@pytest.fixture
def stepwatch_exe(build_dir):
    exe = os.path.join(build_dir or "", "stepwatch")
    if not (build_dir and os.access(exe, os.X_OK)):
        pytest.skip("the C command is not built (SW_BUILD_DIR)")
    return exe


def _run_torchrun(exe, tmp_path, nproc, **env):
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    cmd = [exe, "run", "--run-file", str(tmp_path / "run-{rank}.db"), "--",
           "torchrun", "--standalone", f"--nproc_per_node={nproc}", str(script)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=_env(**env))
    assert run.returncode == 0, run.stderr[-6000:]
    return run


def _view(path):
    return json.loads(stepwatch.run_ranks(str(path), "json"))


def _ranks_row(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        db.row_factory = sqlite3.Row
        return dict(db.execute("SELECT * FROM ranks").fetchone())
    finally:
        db.close()


def _assert_blamed(straggler, rank, blame):
    assert straggler["rank"] == rank and straggler["blame"] == blame, straggler
    # the blamed part is the known delay, give or take a loaded machine's noise
    assert 0.6 * DELAY * 1e9 < straggler["blame_ns"] < 1.6 * DELAY * 1e9, straggler


@pytest.mark.parametrize("nproc,slow", [(2, {"data": 1}), (3, {"compute": 2}),
                                        (4, {"data": 1, "compute": 3})],
                         ids=["2-data", "3-compute", "4-data-and-compute"])
def test_torchrun_names_the_slow_rank_and_its_blame(nproc, slow, tmp_path, stepwatch_exe):
    env = {"DATA_RANK": slow.get("data", -1), "COMPUTE_RANK": slow.get("compute", -1)}
    if nproc == 4:
        env["STEPWATCH_AGGREGATE_EVERY"] = 3
    if nproc == 2:  # FLOPs counted on every rank: TFLOP/s per rank in the view
        env.update(STEPWATCH_FLOPS=1, STEPWATCH_PEAK_FLOPS=1e12)
    run = _run_torchrun(stepwatch_exe, tmp_path, nproc, **env)
    # one report, on rank 0, with the cross-rank view after it
    assert run.stderr.count("stepwatch report:") == 1, run.stderr[-6000:]
    assert f"rank 0 of {nproc}" in run.stderr
    assert f"Across ranks: {nproc} of {nproc} answered" in run.stderr, run.stderr[-6000:]
    # each rank's own run file, with its place in the job
    paths = [tmp_path / f"run-{r}.db" for r in range(nproc)]
    for r, path in enumerate(paths):
        meta = _ranks_row(path)
        assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (r, nproc, r)
        assert meta["host"] == socket.gethostname()
        # one host, one clock: the offset estimated through the process group is small
        assert abs(meta["clock_offset_ns"]) < 20e6, meta["clock_offset_ns"]
    # rank 0's file holds the view: the slow ranks, worst first, with the right blame
    view = _view(paths[0])
    assert view["answered"] == nproc and view["missing"] == []
    assert view["min_steps"] == view["max_steps"] == STEPS - WARMUP
    assert view["collective_ranks"] == nproc
    blamed = {s["rank"]: s for s in view["stragglers"]}
    for kind, rank in slow.items():
        _assert_blamed(blamed[rank], rank, kind)
        if kind == "compute":
            assert blamed[rank]["part"] == "forward", blamed[rank]
    assert view["stragglers"][0]["rank"] in slow.values()
    others = [s for s in view["stragglers"] if s["rank"] not in slow.values()]
    assert all(s["excess_ns"] < 0.5 * DELAY * 1e9 for s in others), others
    # the fast ranks waited for the slow one in the gradient all-reduce
    coll = next(a for a in view["actions"] if a["name"] == "collective")
    assert coll["max_ns"] > 0.6 * DELAY * 1e9 and coll["min_rank"] in slow.values(), coll
    # ... and the view says so in one line, by op: the worst straggler made the others wait
    # about its own excess (the run's clock: what the same view measured on that rank)
    ops = {op["name"]: op for op in view["ops"]}
    assert ops["allreduce"]["min_rank"] in slow.values() and ops["allreduce"]["ranks"] == nproc
    wait, worst = view["wait"], view["stragglers"][0]
    assert wait["rank"] == worst["rank"] and wait["op"] == "allreduce", wait
    assert wait["blame"] == worst["blame"] and wait["waiting_ranks"] >= 1, wait
    if len(slow) == 1:  # (two slow ranks share the wait: each waits part of the time)
        assert 0.7 * worst["blame_ns"] < wait["wait_ns"] < 1.3 * worst["blame_ns"], (wait, worst)
        assert wait["waiting_ranks"] == nproc - 1, wait
    assert f"Waiting: {wait['sentence']}." in run.stderr, run.stderr[-6000:]
    if nproc == 2:
        assert wait["sentence"].startswith(
            "rank 1 made the other rank wait "), wait["sentence"]
        assert wait["sentence"].endswith(" per step in allreduce (its own blame: data)")
        # TFLOP/s per rank: each rank's counted FLOPs over its own mean step, the job's the sum
        flops = view["tflops"]
        assert flops["ranks"] == 2, flops
        for r, path in enumerate(paths):
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            per_step = float(db.execute(
                "SELECT value FROM notes WHERE key='flops_per_step'").fetchone()[0])
            db.close()
            step = next(a for a in view["actions"] if a["name"] == "step")
            assert per_step > 0
            assert flops["min"] * 0.999 <= per_step / step["max_ns"] / 1e3
            assert per_step / step["min_ns"] / 1e3 <= flops["max"] * 1.001
        assert abs(flops["total"] - 2 * flops["median"]) < 1e-9 * flops["total"] + \
            (flops["max"] - flops["min"]), flops
        assert view["mfu"]["ranks"] == 2 and abs(view["mfu"]["median"] -
                                                  flops["median"] / 1.0) < 1e-6, view["mfu"]
        assert "FLOP/s per rank: " in run.stderr
    if nproc == 4:  # every 3 steps, then at the end
        db = sqlite3.connect(f"file:{paths[0]}?mode=ro", uri=True)
        rounds = db.execute("SELECT final FROM rank_rounds ORDER BY round").fetchall()
        db.close()
        assert rounds == [(0,), (0,), (0,), (1,)], rounds
    # diagnose on rank 0's file alone names the worst straggler and its cause
    worst = view["stragglers"][0]
    cause = {"data": "waiting for data", "compute": "its compute"}[worst["blame"]]
    diag = subprocess.run([stepwatch_exe, "diagnose", str(paths[0])], capture_output=True,
                          text=True)
    assert f"Straggler: rank {worst['rank']}, {cause}" in diag.stdout, diag.stdout
    # ... and the wait it causes, the view's one line (its figure from the same payloads)
    assert f"Rank {wait['rank']} makes {wait['waiting_ranks']} other rank" in diag.stdout, \
        diag.stdout
    assert wait["sentence"].split(" wait ")[0] + " wait " in diag.stdout, diag.stdout
    # offline: the rank files merged give the same view, and one trace on one clock
    merged = tmp_path / "all.db"
    m = subprocess.run([stepwatch_exe, "merge", "-o", str(merged), "-f", "json"] +
                       [str(p) for p in paths], capture_output=True, text=True)
    assert m.returncode == 0, m.stderr
    offline = json.loads(m.stdout)
    # (as sets: two ranks slowed by the same delay may swap places between the views)
    assert {(s["rank"], s["blame"]) for s in offline["stragglers"]} == \
        {(s["rank"], s["blame"]) for s in view["stragglers"]}
    trace = tmp_path / "trace.json"
    e = subprocess.run([stepwatch_exe, "export", str(merged), "--chrome", str(trace)],
                       capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert sorted(processes) == list(range(nproc))
    threads = {(ev["pid"], ev["args"]["name"].split(" (")[0]) for ev in events
               if ev["name"] == "thread_name"}
    assert {(r, "MainThread") for r in range(nproc)} <= threads, threads
    # the same steps ran at the same time on every rank: their starts line up within a step
    starts = {}
    for ev in events:
        if ev.get("ph") == "X" and ev["name"] == "step":
            starts.setdefault(ev["pid"], []).append(ev["ts"])
    last = [sorted(starts[r])[-1] for r in range(nproc)]
    assert max(last) - min(last) < 2 * DELAY * 1e6, last


def test_a_killed_rank_does_not_hang_the_end_of_run_aggregation(tmp_path):
    """Three ranks started the way a cluster scheduler starts them (no torchrun agent, which
    would stop the others itself); rank 2 is SIGKILLed mid-run. The others' all-reduce fails,
    their scripts fail, and rank 0's end-of-run aggregation waits at most its timeout, then
    reports over ranks 0 and 1, naming rank 2."""
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(3):
        env = _env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=3, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, KILL_RANK=2, STEPWATCH_AGGREGATE_TIMEOUT=5,
                   STEPWATCH_RUN_FILE=tmp_path / "run-{rank}.db")
        procs.append(subprocess.Popen([sys.executable, "-m", "stepwatch.autorun", str(script)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=tmp_path))
    start = time.monotonic()
    outs = [p.communicate(timeout=240) for p in procs]
    took = time.monotonic() - start
    codes = [p.returncode for p in procs]
    assert codes[2] == -signal.SIGKILL, codes
    assert codes[0] != 0 and codes[1] != 0, codes  # the peer's death fails their all-reduce
    err0 = outs[0][1]
    assert "Across ranks: 2 of 3 answered" in err0, err0[-6000:]
    assert "Did not answer: rank 2" in err0, err0[-6000:]
    assert "stepwatch report:" not in outs[1][1]  # rank 0 speaks for every rank
    assert took < 200, took
    view = _view(tmp_path / "run-0.db")
    assert (view["answered"], view["missing"]) == (2, [2])
    # the killed rank's own file still opens (SIGKILL: at most the last flush is missing)
    assert stepwatch.load(str(tmp_path / "run-2.db")).info()["rank"] == 2


def test_a_rank_without_stepwatch_is_never_waited_for_in_a_collective(tmp_path):
    """Three DDP ranks, rank 1 started without stepwatch (as a launcher that re-runs the
    script by itself does). stepwatch's own collectives (the clock offsets at the first
    forward, the periodic rounds) would wait forever for rank 1, or pair with its DDP
    all-reduce; instead the ranks ask the store who watches, rank 0 and 2 warn and keep
    theirs off, every rank trains to the end, and the end-of-run round names rank 1."""
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(3):
        env = _env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=3, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, STEPWATCH_AGGREGATE_TIMEOUT=5,
                   STEPWATCH_AGGREGATE_EVERY=3, STEPWATCH_RUN_FILE=tmp_path / "run-{rank}.db")
        watched = [] if rank == 1 else ["-m", "stepwatch.autorun"]
        procs.append(subprocess.Popen([sys.executable, *watched, str(script)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=tmp_path))
    outs = [p.communicate(timeout=240) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [0, 0, 0], (codes, outs[0][1][-4000:], outs[2][1][-4000:])
    err0 = outs[0][1]
    assert "2 of 3 ranks run stepwatch" in err0, err0[-6000:]
    assert "Did not answer: rank 1" in err0, err0[-6000:]
    view = _view(tmp_path / "run-0.db")
    assert (view["answered"], view["missing"]) == (2, [1])
    steps = stepwatch.load(str(tmp_path / "run-0.db")).info()["steps"]
    assert steps == STEPS, steps


# A Lightning script with strategy="ddp" and stepwatch's Lightning profiler: nothing else of
# stepwatch in it. torchrun starts the ranks; Lightning finds them in the environment.
LIGHTNING_SCRIPT = """
import os, time, torch
import lightning as L
import stepwatch.lightning
from torch.utils.data import DataLoader, Dataset

rank = int(os.environ["RANK"])
""" + _SLOW_RANKS + """
class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.Linear(32, 1))
    def training_step(self, batch, i):
        if rank == COMPUTE_RANK:
            time.sleep(DELAY)
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def train_dataloader(self):
        return DataLoader(Batches(), batch_size=None)

prof = stepwatch.lightning.Profiler(dirpath=os.getcwd(), filename="prof",
                                    warmup_steps=int(os.environ["WARMUP"]),
                                    run_file="run-{rank}.db")
trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=int(os.environ["NPROC"]),
                    max_epochs=1, profiler=prof, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False,
                    use_distributed_sampler=False)
trainer.fit(Net())
"""


def _run_adapter_script(script_text, tmp_path, nproc, slow, **extra):
    """torchrun (as `python -m torch.distributed.run`) nproc ranks of a script, one slow."""
    script = tmp_path / "train.py"
    script.write_text(script_text)
    env = _env(NPROC=nproc, WARMUP=WARMUP, DATA_RANK=slow.get("data", -1),
               COMPUTE_RANK=slow.get("compute", -1), **extra)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc_per_node={nproc}", str(script)], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-6000:]
    return run


def _assert_run_files_name_the_slow_rank(tmp_path, nproc, slow):
    """Each rank's run file knows its place; rank 0's view names the slow rank, its blame
    and (slow compute) the forward."""
    for r in range(nproc):
        meta = _ranks_row(tmp_path / f"run-{r}.db")
        assert (meta["rank"], meta["world_size"]) == (r, nproc), meta
    view = _view(tmp_path / "run-0.db")
    assert view["answered"] == nproc and view["collective_ranks"] == nproc, view
    (kind, rank), = slow.items()
    assert view["stragglers"], view
    _assert_blamed(view["stragglers"][0], rank, kind)
    if kind == "compute":
        assert view["stragglers"][0]["part"] == "forward", view["stragglers"][0]


@pytest.mark.parametrize("slow", [{"data": 1}, {"compute": 1}], ids=["data", "compute"])
def test_lightning_ddp_names_the_slow_rank_and_its_blame(slow, tmp_path):
    pytest.importorskip("lightning")
    nproc = 2
    _run_adapter_script(LIGHTNING_SCRIPT, tmp_path, nproc, slow)
    # Lightning's report files, one per rank: rank 0's ends with the cross-rank view
    report0 = (tmp_path / "fit-prof-0.txt").read_text()
    assert f"Across ranks: {nproc} of {nproc} answered" in report0, report0
    assert "Across ranks" not in (tmp_path / "fit-prof-1.txt").read_text()
    _assert_run_files_name_the_slow_rank(tmp_path, nproc, slow)


# An Ignite DDP script with stepwatch's Ignite profiler (given a run file through its
# profiler= argument); torchrun starts the ranks.
IGNITE_SCRIPT = """
import os, time, datetime, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from ignite.engine import Engine
import stepwatch, stepwatch.ignite

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
""" + _SLOW_RANKS + """
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step(engine, batch):
    if rank == COMPUTE_RANK:
        time.sleep(DELAY)
    x, y = batch
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()

trainer = Engine(train_step)
prof = stepwatch.ignite.BasicTimeProfiler(profiler=stepwatch.Profiler(
    name="ignite", run_file="run-{rank}.db", warmup_steps=int(os.environ["WARMUP"])))
prof.attach(trainer)
trainer.run(DataLoader(Batches(), batch_size=None), max_epochs=1)
with open(f"report-{rank}.txt", "w") as f:
    f.write(prof.report("table"))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("slow", [{"data": 1}, {"compute": 1}], ids=["data", "compute"])
def test_ignite_ddp_names_the_slow_rank_and_its_blame(slow, tmp_path):
    pytest.importorskip("ignite")
    nproc = 2
    run = _run_adapter_script(IGNITE_SCRIPT, tmp_path, nproc, slow)
    # printed once, by rank 0, when the run ended; and in rank 0's report()
    assert run.stderr.count(f"Across ranks: {nproc} of {nproc} answered") == 1, run.stderr
    assert "Across ranks" in (tmp_path / "report-0.txt").read_text()
    assert "Across ranks" not in (tmp_path / "report-1.txt").read_text()
    view = _view(tmp_path / "run-0.db")
    assert view["answered"] == nproc and view["collective_ranks"] == nproc, view
    (kind, rank), = slow.items()
    assert view["stragglers"], view
    _assert_blamed(view["stragglers"][0], rank, kind)


# A fastai Learner around a plain torch DDP model (the process group made by the script), with
# stepwatch's fastai profiler given a stepwatch Profiler; torchrun starts the ranks.
FASTAI_SCRIPT = """
import os, time, datetime, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from fastai.callback.core import Callback
from fastai.data.core import DataLoaders
from fastai.learner import Learner
import stepwatch
from stepwatch.fastai import ProfileMode

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
""" + _SLOW_RANKS + _NET + """
class Valid(Dataset):  # no delay: the view is about training steps
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return torch.randn(8, 16), torch.randn(8, 1)

dls = DataLoaders(DataLoader(Batches(), batch_size=None), DataLoader(Valid(), batch_size=None))
learn = Learner(dls, torch.nn.parallel.DistributedDataParallel(Net()),
                loss_func=torch.nn.MSELoss(), lr=0.01)
learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
learn.profile(ProfileMode.Simple, profiler=stepwatch.Profiler(
    name="fastai", run_file="run-{rank}.db", warmup_steps=int(os.environ["WARMUP"])))
class Fail(Callback):
    def after_train(self):
        raise RuntimeError("the fit fails")

try:
    learn.fit(1, cbs=[Fail()] if os.environ.get("FAIL") else [])
except RuntimeError:
    if rank == 1:  # past rank 0's timeout: only the failed fit's own end answers in time
        time.sleep(2 * float(os.environ["STEPWATCH_AGGREGATE_TIMEOUT"]))
with open(f"ranks-{rank}.txt", "w") as f:
    f.write(repr(getattr(learn, "profile_ranks", "unset")))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("slow", [{"data": 1}, {"compute": 1}], ids=["data", "compute"])
def test_fastai_ddp_names_the_slow_rank_and_its_blame(slow, tmp_path):
    pytest.importorskip("fastai")
    nproc = 2
    run = _run_adapter_script(FASTAI_SCRIPT, tmp_path, nproc, slow)
    # printed once, by rank 0, after fastxtend's report; learn.profile_ranks there only
    out = run.stdout
    assert out.count(f"Across ranks: {nproc} of {nproc} answered") == 1, out[-6000:]
    assert out.count("Profiling Results:") == nproc, out[-6000:]
    assert out.index("Across ranks") > out.index("Profiling Results:"), out[-6000:]
    assert (tmp_path / "ranks-0.txt").read_text().startswith(f"<RankView {nproc}/{nproc} ranks")
    assert (tmp_path / "ranks-1.txt").read_text() == "None"
    _assert_run_files_name_the_slow_rank(tmp_path, nproc, slow)


def test_fastai_ddp_fit_that_raised_still_joins_the_view(tmp_path):
    """Both ranks' fits raise; rank 1 then lingers past rank 0's timeout before it leaves the
    process group. Its answer must come from the failed fit's end: rank 0's view has both."""
    pytest.importorskip("fastai")
    run = _run_adapter_script(FASTAI_SCRIPT, tmp_path, 2, {"data": 1}, FAIL=1,
                              STEPWATCH_AGGREGATE_TIMEOUT=4)
    assert "Across ranks" not in run.stdout + run.stderr  # a fit that raised prints nothing
    assert (tmp_path / "ranks-0.txt").read_text() == "'unset'"
    view = _view(tmp_path / "run-0.db")
    assert (view["answered"], view["missing"]) == (2, []), view


# A Hugging Face Trainer script with stepwatch.transformers.Callback (nothing else of
# stepwatch): the Trainer finds the torchrun ranks in the environment and makes the gloo group
# itself (use_cpu); a tiny BERT built from a config, nothing downloaded.
TRANSFORMERS_SCRIPT = """
import json, os, time, torch
from torch.utils.data import Dataset
os.environ["HF_HUB_OFFLINE"] = "1"
import transformers
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from stepwatch.transformers import Callback

transformers.logging.set_verbosity_error()
rank = int(os.environ["RANK"])
DATA_RANK = int(os.environ.get("DATA_RANK", "-1"))
COMPUTE_RANK = int(os.environ.get("COMPUTE_RANK", "-1"))
DELAY, STEPS, BATCH = float(os.environ["DELAY"]), int(os.environ["STEPS"]), 4

class Samples(Dataset):  # STEPS batches per rank: the Trainer's sampler splits them
    def __len__(self):
        return STEPS * BATCH * int(os.environ["WORLD_SIZE"])
    def __getitem__(self, i):
        if rank == DATA_RANK:
            time.sleep(DELAY / BATCH)
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (8,), generator=g),
                "labels": torch.randint(0, 2, (), generator=g)}

class Bert(BertForSequenceClassification):
    def forward(self, input_ids=None, labels=None, **kwargs):
        if rank == COMPUTE_RANK and self.training:
            time.sleep(DELAY)
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)

torch.manual_seed(0)
model = Bert(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=16, num_labels=2))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=BATCH,
                         num_train_epochs=1, save_strategy="no", report_to="none",
                         disable_tqdm=True, use_cpu=True, ddp_backend="gloo",
                         logging_strategy="steps", logging_steps=STEPS // 2, seed=0)
cb = Callback(run_file="run-{rank}.db", warmup_steps=int(os.environ["WARMUP"]),
              output=f"report-{rank}.txt")
trainer = Trainer(model=model, args=args, train_dataset=Samples(), callbacks=[cb])
trainer.train()
with open(f"result-{rank}.json", "w") as f:
    json.dump({"global_step": trainer.state.global_step, "world": args.world_size,
               "ranks": repr(cb.ranks),
               "logged": [h for h in trainer.state.log_history if "loss" in h]}, f)
"""


@pytest.mark.parametrize("slow", [{"compute": 1}], ids=["compute"])
def test_transformers_callback_ddp_counts_each_rank_and_joins_the_view(slow, tmp_path):
    """Two ranks of a Trainer with the Callback: each rank's steps equal its global_step and
    its samples the batches it trained; rank 0's report ends with the cross-rank view, which
    names both ranks and the slow one (its forward)."""
    pytest.importorskip("transformers")
    nproc = 2
    _run_adapter_script(TRANSFORMERS_SCRIPT, tmp_path, nproc, slow)
    for r in range(nproc):
        result = json.loads((tmp_path / f"result-{r}.json").read_text())
        assert result["world"] == nproc, result
        steps = [s for s in stepwatch.load_steps(str(tmp_path / f"run-{r}.db"))
                 if s["phase"] == "train"]
        assert len(steps) == result["global_step"] == STEPS, (r, len(steps), result)
        assert [s["batch_size"] for s in steps] == [4] * STEPS, (r, steps)
        # the figures went into the Trainer's logs on every rank
        assert len(result["logged"]) == 2, result
        assert all(h["stepwatch/samples_per_s"] > 0 for h in result["logged"]), result
    report0 = (tmp_path / "report-0.txt").read_text()
    assert f"Across ranks: {nproc} of {nproc} answered" in report0, report0
    assert not (tmp_path / "report-1.txt").exists()  # the report is the main process's
    assert json.loads((tmp_path / "result-0.json").read_text())["ranks"].startswith(
        f"<RankView {nproc}/{nproc} ranks")
    assert json.loads((tmp_path / "result-1.json").read_text())["ranks"] == "None"
    view_text = report0[report0.index("Across ranks"):]
    assert "(rank 0)" in view_text and "(rank 1)" in view_text, view_text  # both named
    for r in range(nproc):
        meta = _ranks_row(tmp_path / f"run-{r}.db")
        assert (meta["rank"], meta["world_size"]) == (r, nproc), meta
    view = _view(tmp_path / "run-0.db")
    assert view["answered"] == nproc and view["collective_ranks"] == nproc, view
    # the slow rank, its blame and the part that grew; at least the delay (a Trainer step
    # on this shared machine adds more noise around it than the plain loops above)
    straggler = view["stragglers"][0]
    assert (straggler["rank"], straggler["blame"], straggler["part"]) == (1, "compute",
                                                                           "forward"), straggler
    assert straggler["blame_ns"] > 0.6 * DELAY * 1e9, straggler
