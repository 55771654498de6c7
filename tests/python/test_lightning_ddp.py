"""stepwatch.lightning.Profiler under real multi-process DDP (2 CPU processes, gloo): Lightning's
own launchers (ddp_spawn, ddp_fork, ddp) and torchrun. Each rank writes its own report and run
file, named with the rank it has once Lightning set it up, and the C command merges them."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")

import stepwatch  # noqa: E402

MODEL = """
import os, sys, torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y), sync_dist=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
"""

SCRIPT = MODEL + """
from stepwatch.lightning import Profiler

if __name__ == "__main__":
    out, strategy = sys.argv[1], sys.argv[2]
    # made before the launcher gives this process its rank
    prof = Profiler(dirpath=out, filename="perf",
                    run_file=os.path.join(out, "run-{stage}-{rank}.db"))
    data = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=4)
    kw = {} if strategy == "torchrun" else {"strategy": strategy}
    trainer = L.Trainer(accelerator="cpu", devices=2, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, profiler=prof, **kw)
    trainer.fit(Model(), data, data)
    trainer.validate(Model(), data)
"""


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp", "ddp_fork", "torchrun"])
def test_each_rank_writes_its_own_files(strategy, tmp_path, build_dir):
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, str(script), str(out), strategy]
    if strategy == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2"] + cmd[1:]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    # ddp_spawn and ddp_fork run each stage in new processes, each with its own run file;
    # with ddp and torchrun, the processes that fit also validate, into the same file
    new_processes = strategy in ("ddp_spawn", "ddp_fork")
    stages = ("fit", "validate") if new_processes else ("fit",)
    files = sorted(os.listdir(out))
    assert files == sorted([f"{stage}-perf-{rank}.txt" for stage in ("fit", "validate")
                            for rank in (0, 1)] +
                           [f"run-{stage}-{rank}.db" for stage in stages for rank in (0, 1)])
    for rank in (0, 1):
        text = (out / f"fit-perf-{rank}.txt").read_text()
        assert text.startswith("FIT Profiler Report") and "DDPStrategy.training_step" in text
        assert (out / f"validate-perf-{rank}.txt").read_text().startswith(
            "VALIDATE Profiler Report")
        # 32 samples, 2 ranks, batches of 4 (DistributedSampler): 4 steps each to train, 4 to
        # validate in fit, 4 in validate()
        want = {"fit": {"train": 4, "valid": 4}, "validate": {"valid": 4}}
        if not new_processes:
            want = {"fit": {"train": 4, "valid": 8}}
        for stage in stages:
            snap = stepwatch.load(str(out / f"run-{stage}-{rank}.db"))
            info = snap.info()
            assert (info["rank"], info["world_size"]) == (rank, 2), (stage, info)
            steps = {r["phase"]: r["count"] for r in snap.records()
                     if r["action"] == "step" and r["phase"] != "all"}
            assert steps == want[stage], (stage, steps)
    exe = os.path.join(build_dir or "", "stepwatch")
    if build_dir and os.access(exe, os.X_OK):
        merged = str(out / "all.db")
        m = subprocess.run([exe, "merge", "-o", merged, str(out / "run-fit-0.db"),
                            str(out / "run-fit-1.db")], capture_output=True, text=True)
        assert m.returncode == 0, m.stderr
        r = subprocess.run([exe, "report", merged], capture_output=True, text=True)
        assert r.returncode == 0 and "2 ranks" in r.stdout, r.stdout


ZERO_CODE = MODEL + """
if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(48, 8), torch.randn(48, 1)), batch_size=4)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Model(), data)
"""


@pytest.mark.parametrize("run_file", ["run-{rank}.db", "run.db"])
def test_zero_code_follows_lightnings_own_start_of_rank_1(run_file, tmp_path, build_dir):
    """`stepwatch run -- python train.py` of a plain Lightning script with devices=2: Lightning
    starts rank 1 itself by running the script again. That rank runs under stepwatch too:
    with {rank} in the path it writes its own run file, under its rank; with one path for
    all, the file stays rank 0's and rank 1 still answers the end-of-run round."""
    exe = os.path.join(build_dir or "", "stepwatch")
    if not (build_dir and os.access(exe, os.X_OK)):
        pytest.skip("the C command is not built (SW_BUILD_DIR)")
    (tmp_path / "train.py").write_text(ZERO_CODE)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "STEPWATCH_RUN_FILE"):
        env.pop(var, None)
    run = subprocess.run([exe, "run", "--run-file", run_file, "--", "python", "train.py"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "ranks run stepwatch" not in run.stderr, run.stderr[-4000:]
    assert "Did not answer" not in run.stderr, run.stderr[-4000:]
    files = sorted(p.name for p in tmp_path.glob("run*.db"))
    ranks = (0, 1) if "{rank}" in run_file else (0,)
    assert files == sorted(run_file.format(rank=r) for r in ranks), files
    for rank in ranks:
        info = stepwatch.load(str(tmp_path / run_file.format(rank=rank))).info()
        # 48 samples over 2 ranks in batches of 4 (DistributedSampler): 6 steps each
        assert (info["rank"], info["world_size"], info["steps"]) == (rank, 2, 6), info
    view = json.loads(stepwatch.run_ranks(str(tmp_path / run_file.format(rank=0)), "json"))
    assert (view["answered"], view["missing"]) == (2, []), view
