"""stepwatch.lightning: Trainer(profiler=Profiler()) and the TimeProfiler callback."""
import glob
import os
import signal

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
