"""stepwatch.lightning's ThroughputMonitor and Throughput in real Lightning Trainers: the keys
and values Lightning's callback logs, flops_per_batch as Lightning takes it, FLOPs counted when
the module sets none, validation kept out of the training clock."""
import math

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from lightning.pytorch.loggers.logger import Logger  # noqa: E402

import stepwatch.lightning as swl  # noqa: E402


class Recorded(Logger):
    """A real Lightning logger that keeps what it is given."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "recorded"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append((dict(metrics), step))


class Model(pl.LightningModule):
    def __init__(self, n=16, batch=4, batches=12):
        super().__init__()
        self.layer = torch.nn.Linear(n, n)
        self.n, self.batch, self.batches = n, batch, batches

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, _i):
        return self(batch).pow(2).mean()

    def validation_step(self, batch, _i):
        self(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(self.batch * self.batches, self.n),
                                           batch_size=self.batch)

    val_dataloader = train_dataloader


def fit(model, monitor, **kwargs):
    torch.set_num_threads(1)
    logger = Recorded()
    options = dict(max_steps=8, log_every_n_steps=1, limit_val_batches=0,
                   num_sanity_val_steps=0, enable_checkpointing=False,
                   enable_model_summary=False, enable_progress_bar=False, accelerator="cpu",
                   devices=1, logger=logger, callbacks=[monitor])
    options.update(kwargs)
    pl.Trainer(**options).fit(model)
    return [(m, s) for m, s in logger.rows if any(k.startswith("train/") for k in m)]


def test_keys_and_values_with_flops_per_batch():
    model = Model()
    model.flops_per_batch = 1000
    rows = fit(model, swl.ThroughputMonitor(batch_size_fn=len, length_fn=lambda b: 3 * len(b),
                                            window_size=3))
    assert [m["train/batches"] for m, _ in rows] == list(range(1, 9))
    assert [m["train/samples"] for m, _ in rows] == [4 * i for i in range(1, 9)]
    assert [m["train/lengths"] for m, _ in rows] == [12 * i for i in range(1, 9)]
    assert [s for _, s in rows] == list(range(8))
    times = [m["train/time"] for m, _ in rows]
    assert times == sorted(times) and len(set(times)) == 8
    # the rates appear once the window (3 updates) is full, over the window's time
    assert "train/device/batches_per_sec" not in rows[1][0]
    for i, (m, _) in enumerate(rows[2:], start=2):
        elapsed = times[i] - times[i - 2]
        assert math.isclose(m["train/device/batches_per_sec"], 2 / elapsed)
        assert math.isclose(m["train/device/samples_per_sec"], 8 / elapsed)
        assert math.isclose(m["train/device/items_per_sec"], 24 / elapsed)
        assert math.isclose(m["train/device/flops_per_sec"], 2000 / elapsed)
        assert "train/device/mfu" not in m  # a CPU: no peak, no MFU
        assert "train/batches_per_sec" not in m  # one device: no job-wide keys


def test_flops_counted_when_the_module_sets_none():
    model = Model(n=16, batch=4)
    rows = fit(model, swl.ThroughputMonitor(batch_size_fn=len, window_size=2))
    # Linear(16, 16) on 4 rows: 2*4*16*16 forward, the weight's gradient backward (the
    # input needs none)
    per_batch = 2 * 4 * 16 * 16 * 2
    for m, _ in rows[1:]:
        ratio = m["train/device/flops_per_sec"] / m["train/device/batches_per_sec"]
        assert math.isclose(ratio, per_batch, rel_tol=1e-9)


def test_count_flops_off_is_lightnings_behaviour():
    with pytest.warns(RuntimeWarning, match="flops_per_batch"):
        rows = fit(Model(), swl.ThroughputMonitor(batch_size_fn=len, window_size=2,
                                                  count_flops=False))
    assert not any("train/device/flops_per_sec" in m for m, _ in rows)


def test_validation_time_is_not_training_time():
    logger = Recorded()
    model = Model(batches=6)
    model.flops_per_batch = 10
    monitor = swl.ThroughputMonitor(batch_size_fn=len, window_size=2)
    torch.set_num_threads(1)
    pl.Trainer(max_epochs=2, log_every_n_steps=1, limit_val_batches=3, num_sanity_val_steps=1,
               enable_checkpointing=False, enable_model_summary=False,
               enable_progress_bar=False, accelerator="cpu", devices=1, logger=logger,
               callbacks=[monitor]).fit(model)
    train = [m["train/time"] for m, _ in logger.rows if "train/time" in m]
    val = [m["validate/batches"] for m, _ in logger.rows if "validate/batches" in m]
    assert val == [1, 2, 3, 1, 2, 3]  # the sanity check is not counted; each fit-validation anew
    assert train == sorted(train) and len(train) == 12
    # the training clock stood still over validation: the step across it is no longer than
    # the longest step within an epoch plus the gap before validation's first batch
    steps = [b - a for a, b in zip(train, train[1:])]
    assert steps[5] <= 3 * max(steps[:5] + steps[6:])


def test_throughput_rules():
    tp = swl.Throughput(available_flops=100.0, world_size=2, window_size=2, separator="|")
    tp.update(time=1.0, batches=1, samples=3, lengths=9, flops=10)
    tp.update(time=3.0, batches=2, samples=6, lengths=18, flops=10)
    m = tp.compute()
    assert m["device|batches_per_sec"] == 0.5 and m["batches_per_sec"] == 1.0
    assert m["device|samples_per_sec"] == 1.5 and m["samples_per_sec"] == 3.0
    assert m["device|items_per_sec"] == 4.5 and m["items_per_sec"] == 9.0
    # 10 FLOPs per device per update, two devices: the job did 20 in the window's 2 s
    assert m["flops_per_sec"] == 10.0 and m["device|flops_per_sec"] == 5.0
    assert m["device|mfu"] == 0.05
    with pytest.raises(ValueError, match="increase"):
        tp.update(time=3.0, batches=3, samples=9)
    with pytest.raises(ValueError, match="samples"):
        swl.Throughput().update(time=1, batches=3, samples=2)
    with pytest.raises(ValueError, match="lengths"):
        swl.Throughput().update(time=1, batches=1, samples=2, lengths=1)
    mixed = swl.Throughput()
    mixed.update(time=1, batches=1, samples=1)
    with pytest.raises(RuntimeError, match="same number of samples"):
        mixed.update(time=2, batches=2, samples=2, lengths=2)
    assert mixed.compute() == {"time": 1, "batches": 1, "samples": 1}  # the refusal kept nothing
    with pytest.raises(ValueError, match="window_size"):
        swl.Throughput(window_size=1)


def test_measure_flops_on_meta():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Linear(8, 2))
        x = torch.randn(5, 32)
    fwd = swl.measure_flops(model, lambda: model(x))
    both = swl.measure_flops(model, lambda: model(x), lambda y: y.sum())
    assert fwd == 2 * 5 * (32 * 8 + 8 * 2)
    assert both == fwd + 2 * 5 * (32 * 8 + 8 * 2) + 2 * 5 * 8 * 2


def test_get_available_flops(monkeypatch):
    assert swl.get_available_flops(torch.device("cpu"), torch.float32) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    assert swl.get_available_flops(torch.device("cuda"), torch.bfloat16) == int(989.5e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Tesla T4")
    with pytest.warns(RuntimeWarning, match="does not support torch.bfloat16"):
        assert swl.get_available_flops(torch.device("cuda"), torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "CocoNut")
    with pytest.warns(RuntimeWarning, match="not found for 'CocoNut'"):
        assert swl.get_available_flops(torch.device("cuda"), torch.float32) is None
