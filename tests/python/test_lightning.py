"""stepwatch.lightning: Trainer(profiler=Profiler()) and the TimeProfiler callback."""
import csv
import glob
import os
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch.lightning import Profiler, TimeProfiler  # noqa: E402

from conftest import within  # noqa: E402


class Model(L.LightningModule):
    def __init__(self, fail_at=None):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
        self.fail_at = fail_at

    def training_step(self, batch, i):
        if self.fail_at is not None and self.global_step == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class UsersCallback(L.Callback):
    pass


def trainer(**kw):
    args = dict(max_epochs=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    args.update(kw)
    return L.Trainer(**args)


def small():
    return DataLoader(TensorDataset(torch.randn(16, 8), torch.randn(16, 1)), batch_size=4)


def test_data_wait_matches_a_known_sleep(sleepy, tmp_path):
    ds = sleepy(10, sleep_s=0.02)
    prof = Profiler(dirpath=str(tmp_path), filename="perf")
    trainer(profiler=prof, limit_val_batches=0).fit(Model(), DataLoader(ds, batch_size=None))
    r = {x["action"]: x for x in prof.records("train")}
    assert ds.calls == 10
    assert r["data"]["count"] == 10 and r["step"]["count"] == 10
    assert within(r["data"]["total_ns"], ds.slept_ns), (r["data"]["total_ns"], ds.slept_ns)
    assert r["forward"]["count"] == 10 and r["backward"]["count"] == 10
    # Lightning's own names stay visible
    names = {x["action"] for x in prof.records("all")}
    assert "[_TrainingEpochLoop].train_dataloader_next" in names
    assert "run_training_batch" in names


def test_report_file_follows_lightning_naming(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="perf", format="lightning")
    trainer(profiler=prof, limit_val_batches=2,
            callbacks=[UsersCallback()]).fit(Model(), small(), small())
    files = glob.glob(os.path.join(str(tmp_path), "*.txt"))
    assert [os.path.basename(f) for f in files] == ["fit-perf.txt"]
    text = open(files[0]).read()
    assert "Mean duration" in text and "run_training_epoch" in text
    r = {(x["action"], x["phase"]): x for x in prof.records()}
    assert ("step", "valid") in r and ("step", "train") in r
    # each step's batch size is read from its batch: 4 batches of 4 samples, then 2 of 4
    train, valid = r[("step", "train")], r[("step", "valid")]
    assert (train["count"], train["samples"]) == (4, 16)
    assert (valid["count"], valid["samples"]) == (2, 8)
    assert train["samples_per_s"] > 0
    # the profiler's own callback is not timed; the user's callbacks are
    names = {x["action"] for x in prof.records("all")}
    assert not [n for n in names if "_ProfilerEvents" in n], names
    assert "[Callback]UsersCallback.on_train_batch_start" in names, names
    assert prof.unbalanced == 0
    misuse = prof.profiler.snapshot().info()["misuse"]
    assert sum(misuse.values()) == 0, misuse


def test_report_written_when_training_fails(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="crash")
    with pytest.raises(RuntimeError, match="boom"):
        trainer(profiler=prof, limit_val_batches=0).fit(Model(fail_at=2), small())
    (path,) = glob.glob(os.path.join(str(tmp_path), "*crash*.txt"))
    text = open(path).read()
    assert "data" in text and "forward" in text and "Misuse" not in text
    assert "_ProfilerEvents" not in text
    misuse = prof.profiler.snapshot().info()["misuse"]
    assert sum(misuse.values()) == 0, misuse


def test_report_written_on_ctrl_c(tmp_path):
    class Interrupted(Model):
        def training_step(self, batch, i):
            if self.global_step == 1:
                raise KeyboardInterrupt
            return super().training_step(batch, i)

    prof = Profiler(dirpath=str(tmp_path), filename="interrupted")
    sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT after a Ctrl-C
    try:
        with pytest.raises(SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
            trainer(profiler=prof, limit_val_batches=0).fit(Interrupted(), small())
    finally:
        signal.signal(signal.SIGINT, sigint)
    (path,) = glob.glob(os.path.join(str(tmp_path), "*interrupted*.txt"))
    assert "forward" in open(path).read()


def test_unbalanced_start_stop_is_counted_not_raised():
    prof = Profiler()
    prof.stop("never started")
    prof.start("a")
    prof.start("a")
    prof.stop("a")
    prof.stop("a")
    prof.stop("a")
    assert prof.unbalanced == 3
    with prof.profile("ctx"):
        pass
    assert {x["action"]: x["count"] for x in prof.records("all")}["ctx"] == 1
    assert "ctx" in prof.summary()


def test_time_profiler_logs_thunder_keys():
    cb = TimeProfiler("backward", "optimizer step")
    t = trainer(callbacks=[cb], limit_val_batches=2, max_epochs=2)
    t.fit(Model(), small(), small())
    logged = set(t.callback_metrics)
    for key in ("train batch", "validation batch", "train epoch", "validation epoch",
                "avg train downtime", "backward", "optimizer step"):
        assert key in logged, (key, logged)
    assert "total train downtime" not in logged  # opt-in only
    counts = {x["action"]: x["count"] for x in cb.profiler.records("all")}
    assert counts["train batch"] == 8 and counts["backward"] == 8
    assert counts["train epoch"] == 2
    with pytest.raises(ValueError):
        TimeProfiler("no such key")


def test_profiler_usable_by_itself_and_rejects_bad_format():
    with pytest.raises(ValueError):
        Profiler(format="nope")
    shared = stepwatch.Profiler(name="shared")
    prof = Profiler(profiler=shared)
    prof.start("x")
    prof.stop("x")
    assert any(r["action"] == "x" for r in shared.records())


DDP_SCRIPT = """
import os, sys, torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset
from stepwatch.lightning import Profiler

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

out = sys.argv[1]
prof = Profiler(dirpath=out, filename="perf", run_file=os.path.join(out, "run-{rank}.db"))
data = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=4)
L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
          profiler=prof).fit(Model(), data)
"""


def test_ddp_under_torchrun_gives_each_rank_its_files(tmp_path, build_dir):
    """Two real ranks (torchrun, gloo): a report per rank named as Lightning names them, a run
    file per rank that knows its rank, and the C command merges them."""
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node=2", str(script), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted(os.listdir(out))
    assert files == ["fit-perf-0.txt", "fit-perf-1.txt", "run-0.db", "run-1.db"], files
    for rank in (0, 1):
        assert "forward" in (out / f"fit-perf-{rank}.txt").read_text()
        info = stepwatch.load(str(out / f"run-{rank}.db")).info()
        # 32 samples, 2 ranks, batches of 4 (DistributedSampler): 4 steps each
        assert (info["rank"], info["world_size"], info["steps"]) == (rank, 2, 4)
    exe = os.path.join(build_dir or "", "stepwatch")
    if build_dir and os.access(exe, os.X_OK):
        merged = str(out / "all.db")
        m = subprocess.run([exe, "merge", "-o", merged, str(out / "run-0.db"),
                            str(out / "run-1.db")], capture_output=True, text=True)
        assert m.returncode == 0, m.stderr
        r = subprocess.run([exe, "report", merged], capture_output=True, text=True)
        assert r.returncode == 0 and "8 steps" in r.stdout and "2 ranks" in r.stdout, r.stdout


PLAIN_SCRIPT = """
import torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False,
                    num_sanity_val_steps=0)
trainer.fit(Model(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
print("global_step", trainer.global_step)
"""


def test_stepwatch_run_times_an_unmodified_lightning_script(tmp_path):
    """Zero-code instrumentation on Lightning's own loop: every training and validation batch
    is a step in its phase, and the forward and backward Lightning runs in the optimizer's
    closure are counted as themselves (docs/python.md)."""
    script = tmp_path / "train.py"
    script.write_text(PLAIN_SCRIPT)
    report = tmp_path / "report.csv"
    run = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--format", "csv",
                          "--output", str(report), "--", "python", str(script)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "global_step 12" in run.stdout
    assert "stepwatch.torch:" not in run.stderr  # nothing degraded on this torch
    with open(report, newline="") as f:
        rows = {(r["action"], r["phase"]): r for r in csv.DictReader(f)}
    count = {key: int(r["count"]) for key, r in rows.items()}
    # 2 epochs: 48 samples in batches of 8 to train, of 16 to validate
    for action in ("step", "data", "forward", "loss", "backward", "optimizer"):
        assert count[(action, "train")] == 12, (action, count)
    assert count[("step", "valid")] == count[("forward", "valid")] == 6, count
    assert ("backward", "valid") not in count and ("optimizer", "valid") not in count
    assert count[("zero_grad", "train")] >= 12, count
    assert int(rows[("step", "train")]["samples"]) == 96
    # Lightning runs forward and backward in the closure that optimizer.step() calls: they
    # are counted as themselves, the optimizer keeps its own time, and the parts fit the steps
    parts = sum(float(rows[(a, "train")]["total_s"])
                for a in ("data", "forward", "loss", "backward", "optimizer", "zero_grad"))
    assert parts <= float(rows[("step", "train")]["total_s"])
    optimizer = rows[("optimizer", "train")]
    assert float(optimizer["self_s"]) == float(optimizer["total_s"])
