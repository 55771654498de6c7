"""Device statistics through the frameworks' own loggers (docs/device.md): a real Lightning
Trainer logging stepwatch.lightning.DeviceStatsMonitor and Lightning's DeviceStatsMonitor
into one CSVLogger in the same run, fastai's DeviceStatsCallback into CSVLogger's files, and
Ignite's DeviceStatsMonitor into engine.state.metrics. No GPU here: the values are the CPU
figures Lightning logs on CPU (psutil's definitions), plus stepwatch's extras on request."""
import csv

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("psutil", reason="Lightning's CPU figures need psutil (scripts/venv.sh)")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from stepwatch.devicestats import CPU_KEYS  # noqa: E402

HOOKS = ("on_train_batch_start", "on_train_batch_end", "on_validation_batch_start",
         "on_validation_batch_end")


def loader(n=16):
    return DataLoader(TensorDataset(torch.randn(n, 8), torch.randn(n, 1)), batch_size=4)


# ---- Lightning --------------------------------------------------------------------------

L = pytest.importorskip("lightning")
from lightning.pytorch.callbacks import DeviceStatsMonitor as LightningMonitor  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from lightning.pytorch.utilities.exceptions import MisconfigurationException  # noqa: E402

from stepwatch.lightning import DeviceStatsMonitor  # noqa: E402


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def test_step(self, batch, i):
        return self.validation_step(batch, i)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Lightnings(LightningMonitor):
    """Lightning's own monitor under another name, so both log into one file: its keys begin
    with its class's qualified name, Lightnings.<hook>/<stat>."""


def trainer(tmp_path, callbacks, **kw):
    args = dict(max_epochs=2, accelerator="cpu", enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                log_every_n_steps=1, logger=CSVLogger(str(tmp_path), name="run"),
                callbacks=callbacks)
    args.update(kw)
    return L.Trainer(**args)


def metrics_csv(tmp_path):
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def logged(rows, prefix):
    """{(step, key without the prefix): value} of the cells filled under prefix."""
    return {(row["step"], k[len(prefix):]): float(v) for row in rows
            for k, v in row.items() if k.startswith(prefix) and v != ""}


def test_lightning_same_keys_steps_and_values_as_lightnings_in_the_same_run(tmp_path):
    trainer(tmp_path, [DeviceStatsMonitor(), Lightnings()]).fit(Model(), loader(), loader(8))
    rows = metrics_csv(tmp_path)
    ours, theirs = logged(rows, "DeviceStatsMonitor."), logged(rows, "Lightnings.")
    assert set(ours) == set(theirs)  # every (step, hook/stat), no more, no fewer
    keys = {k for _, k in ours}
    assert keys == {f"{h}/{s}" for h in HOOKS for s in CPU_KEYS}
    assert len({step for step, _ in ours}) == 8  # 4 batches x 2 epochs: the training steps
    for at, v in ours.items():  # read within milliseconds of each other, on a busy machine
        key = at[1]
        if key.endswith("cpu_percent"):  # over different intervals (since each's last read)
            assert 0 <= v <= 100, at
        else:  # memory and swap in use, in percent
            assert v == pytest.approx(theirs[at], abs=2.0), at


def test_lightning_cpu_stats_switch_and_extras(tmp_path):
    trainer(tmp_path, [DeviceStatsMonitor(cpu_stats=False)], max_epochs=1).fit(Model(), loader())
    # CPU statistics off on the CPU: nothing logged, so CSVLogger writes no metrics file
    assert not (tmp_path / "run" / "version_0" / "metrics.csv").exists()
    path = tmp_path / "extra"
    t = trainer(path, [DeviceStatsMonitor(extra_stats=True)], max_epochs=1,
                limit_val_batches=0)
    t.fit(Model(), loader())
    keys = {k for row in metrics_csv(path) for k, v in row.items() if v != ""}
    assert {"DeviceStatsMonitor.on_train_batch_end/process_rss_bytes",
            "DeviceStatsMonitor.on_train_batch_end/cpu_percent"} <= keys
    rss = [float(r["DeviceStatsMonitor.on_train_batch_end/process_rss_bytes"])
           for r in metrics_csv(path)
           if r.get("DeviceStatsMonitor.on_train_batch_end/process_rss_bytes")]
    assert len(rss) == 4 and min(rss) > 10 * 2**20  # a torch process: tens of MiB at least


def test_lightning_test_hooks_and_log_every_n_steps(tmp_path):
    t = trainer(tmp_path, [DeviceStatsMonitor()], max_epochs=1, log_every_n_steps=2,
                limit_val_batches=0)
    t.fit(Model(), loader())
    steps = {s for s, k in logged(metrics_csv(tmp_path), "DeviceStatsMonitor.")
             if k.startswith("on_train")}
    assert len(steps) == 2  # batches 2 and 4 of 4 (Lightning's cadence)
    t.test(Model(), loader(8))
    keys = {k for _, k in logged(metrics_csv(tmp_path), "DeviceStatsMonitor.")}
    assert "on_test_batch_end/cpu_vm_percent" in keys


def test_lightning_errors_as_lightnings(tmp_path):
    with pytest.raises(MisconfigurationException, match="logger=False"):
        trainer(tmp_path, [DeviceStatsMonitor()], logger=False).fit(Model(), loader())
    with pytest.raises(ValueError, match="cpu_stats"):
        DeviceStatsMonitor(cpu_stats="no")


# ---- fastai -----------------------------------------------------------------------------

def test_fastai_callback_logs_into_csvlogger_files(tmp_path):
    pytest.importorskip("fastai.learner", reason="fastai not installed (see scripts/venv.sh)")
    from fastai.callback.progress import CSVLogger as FastaiCSV
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from stepwatch.fastai import DeviceStatsCallback

    learn = Learner(DataLoaders(loader(), loader(8)), torch.nn.Linear(8, 1),
                    loss_func=torch.nn.MSELoss(), lr=0.01,
                    cbs=[FastaiCSV(), DeviceStatsCallback(every=2, extra_stats=True)])
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    learn.path = tmp_path
    learn.fit(2)
    with open(tmp_path / "history_device.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["train_iter"]) for r in rows] == \
        [("0", "2"), ("0", "4"), ("1", "6"), ("1", "8")]  # every 2nd training batch
    prefix = "DeviceStatsMonitor.after_batch/"
    assert {prefix + k for k in CPU_KEYS} | {prefix + "process_rss_bytes"} <= set(rows[0])
    assert all(0 < float(r[prefix + "cpu_vm_percent"]) < 100 for r in rows)
    with open(tmp_path / "history.csv") as f:
        assert len(list(csv.DictReader(f))) == 2  # CSVLogger's own file: one row per epoch
    with pytest.raises(ValueError, match="every"):
        DeviceStatsCallback(every=0)


# ---- Ignite -----------------------------------------------------------------------------

def test_ignite_monitor_fills_engine_metrics():
    pytest.importorskip("ignite")
    from ignite.engine import Engine, Events
    from stepwatch.ignite import DeviceStatsMonitor as IgniteMonitor

    eng = Engine(lambda e, batch: None)
    seen = []
    IgniteMonitor(extra_stats=True).attach(eng)

    @eng.on(Events.ITERATION_COMPLETED)
    def read(e):  # a logger's handler, after ours
        seen.append(dict(e.state.metrics))

    eng.run(range(3), max_epochs=1)
    assert len(seen) == 3
    prefix = "DeviceStatsMonitor.iteration_completed/"
    for m in seen:
        assert {prefix + k for k in CPU_KEYS} <= set(m)
        assert m[prefix + "process_rss_bytes"] > 10 * 2**20
    assert IgniteMonitor(cpu_stats=False).stats.read() == {}
