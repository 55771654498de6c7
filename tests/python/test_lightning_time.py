"""stepwatch.lightning.TimeProfiler behaves as thunder's TimeProfiler in a real Trainer: its
keys, its definitions (means per epoch, downtime per sample), its logging (once per training
epoch, "TimeProfiler/<key>"), TimeProfiler(True), the error without a logger, a checkpoint
that loads with weights_only=True; stepwatch's own additions only when asked for."""
import csv
import time

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from lightning.pytorch.utilities.exceptions import MisconfigurationException  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch.lightning import TimeProfiler  # noqa: E402

import test_lightning  # noqa: E402
from conftest import within  # noqa: E402

DEFAULT = ["avg train downtime", "avg val downtime", "train batch", "train epoch",
           "validation batch", "validation epoch"]
OPTIONAL = ["backward", "optimizer step", "total train downtime", "total val downtime"]


class Model(test_lightning.Model):
    """test_lightning's model, its training_step sleeping step_s (the time kept)."""

    def __init__(self, step_s=0.0):
        super().__init__()
        self.step_s = step_s
        self.step_ns = []

    def training_step(self, batch, i):
        if self.step_s:
            test_lightning.slept(self.step_s, self.step_ns)
        return super().training_step(batch, i)


def small(n=16, batch_size=4):
    return DataLoader(TensorDataset(torch.randn(n, 8), torch.randn(n, 1)), batch_size=batch_size)


def trainer(tmp_path, **kw):
    args = dict(max_epochs=2, default_root_dir=str(tmp_path), logger=CSVLogger(str(tmp_path)),
                enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1)
    args.update(kw)
    return L.Trainer(**args)


def metrics(tmp_path):
    (path,) = tmp_path.glob("lightning_logs/version_*/metrics.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_keys_as_thunder_takes_them():
    assert TimeProfiler().keys == DEFAULT
    assert TimeProfiler("backward").keys == sorted(DEFAULT + ["backward"])
    assert TimeProfiler(True).keys == sorted(DEFAULT + OPTIONAL)
    for bad in (("wrong key",), ("backward", "wrong key"), ("train batch",)):
        with pytest.raises(ValueError, match="unknown"):
            TimeProfiler(*bad)


def test_its_own_module_and_its_first_home_are_one_class():
    """stepwatch.thunder holds it; stepwatch.lightning.TimeProfiler stays the same object, so
    code and pickles naming either keep working."""
    import pickle

    import stepwatch.thunder
    assert stepwatch.thunder.TimeProfiler is TimeProfiler
    assert stepwatch.lightning.TimeProfiler is TimeProfiler
    assert TimeProfiler.__module__ == "stepwatch.thunder"
    assert "TimeProfiler" in stepwatch.lightning.__all__
    assert stepwatch.thunder.__all__ == ["TimeProfiler"]
    twin = pickle.loads(pickle.dumps(TimeProfiler("backward")))
    assert type(twin) is TimeProfiler and twin.keys == sorted(DEFAULT + ["backward"])


def test_a_logger_is_needed(tmp_path):
    t = trainer(tmp_path, logger=False, callbacks=[TimeProfiler()])
    with pytest.raises(MisconfigurationException, match="Cannot use TimeProfiler"):
        t.fit(Model(), small())


def test_logged_once_per_epoch_with_thunders_names(tmp_path):
    t = trainer(tmp_path, callbacks=[TimeProfiler(True)], limit_val_batches=2)
    t.fit(Model(), small(), small())
    rows = metrics(tmp_path)
    logged = [r for r in rows if r.get("TimeProfiler/train batch")]
    assert len(logged) == 2  # one row per epoch, not per step
    for key in DEFAULT + OPTIONAL:
        assert all(float(r[f"TimeProfiler/{key}"]) == float(r[f"TimeProfiler/{key}"])
                   for r in logged), key  # present, a number
    assert [int(r["epoch"]) for r in logged] == [0, 1]
    assert "train batch" not in rows[0]  # no key without thunder's prefix


def test_no_validation_logs_no_validation_keys(tmp_path):
    t = trainer(tmp_path, callbacks=[TimeProfiler(True)], limit_val_batches=0)
    t.fit(Model(), small())
    columns = set(metrics(tmp_path)[0])
    assert {f"TimeProfiler/{k}" for k in DEFAULT + OPTIONAL if "val" not in k} <= columns
    assert not {c for c in columns if c.startswith("TimeProfiler/") and "val" in c}


class BatchClock(L.Callback):
    """The loop's own timer: each training batch from on_train_batch_start to its end."""

    def __init__(self):
        self.batch_ns = []

    def on_train_batch_start(self, *args):
        self.t0 = time.perf_counter_ns()

    def on_train_batch_end(self, *args):
        self.batch_ns.append(time.perf_counter_ns() - self.t0)


def test_definitions_match_known_delays(sleepy, tmp_path):
    """thunder's definitions: train batch is the mean from on_train_batch_start to its end;
    train epoch the epoch less the mean validation epoch; total train downtime the epoch less
    its batches; avg train downtime that per sample. Data that sleeps a known time per batch
    is the downtime, a training_step that sleeps is the batch (the batch as the loop's own
    clock times it: the step's real work, milliseconds on a loaded machine, is in it too)."""
    ds = sleepy(6, sleep_s=0.08, batch=4)
    model = Model(step_s=0.08)
    tp, clock = TimeProfiler(True), BatchClock()
    deltas = []
    original = tp.compute_time_delta
    tp.compute_time_delta = lambda: deltas.append(dict(original())) or deltas[-1]
    t = trainer(tmp_path, max_epochs=1, callbacks=[clock, tp], limit_val_batches=2)
    t.fit(model, DataLoader(ds, batch_size=None), small(8))
    (d,) = deltas
    batches = len(model.step_ns)
    assert batches == 6 and len(clock.batch_ns) == 6
    assert d["train batch"] >= sum(model.step_ns) / batches / 1e9
    assert within(d["train batch"], sum(clock.batch_ns) / batches / 1e9, 0.10)
    assert within(d["total train downtime"], ds.slept_ns / 1e9, 0.15)
    assert within(d["avg train downtime"], ds.slept_ns / 1e9 / (4 * batches), 0.15)
    assert d["train epoch"] >= batches * d["train batch"]
    assert d["validation epoch"] > 0 and d["validation batch"] > 0
    assert within(d["avg val downtime"] * 8, d["total val downtime"], 1e-9)  # 2 batches of 4
    row = next(r for r in metrics(tmp_path) if r.get("TimeProfiler/train batch"))
    assert float(row["TimeProfiler/train batch"]) == pytest.approx(d["train batch"], rel=1e-6)


def test_backward_and_optimizer_step_only_when_asked_for(tmp_path):
    plain = TimeProfiler()
    assert plain.on_before_backward is None and plain.on_before_optimizer_step is None
    asked = TimeProfiler("backward", "optimizer step")
    assert callable(asked.on_before_backward) and callable(asked.on_before_optimizer_step)
    t = trainer(tmp_path, max_epochs=1, callbacks=[asked], limit_val_batches=0)
    t.fit(Model(), small())
    row = next(r for r in metrics(tmp_path) if r.get("TimeProfiler/backward"))
    assert float(row["TimeProfiler/backward"]) > 0
    assert float(row["TimeProfiler/optimizer step"]) > 0


def test_state_loads_with_weights_only(tmp_path):
    tp = TimeProfiler(True)
    t = trainer(tmp_path, max_epochs=1, callbacks=[tp], limit_val_batches=0)
    t.fit(Model(), small())
    tp.on_train_batch_start(t, t.lightning_module, next(iter(small())), 0)  # a mark left open
    tp.on_train_batch_end(t, t.lightning_module, None, None, 0)
    tp.on_train_batch_start(t, t.lightning_module, next(iter(small())), 0)
    path = tmp_path / "state.pt"
    torch.save(tp.state_dict(), path)
    restored = TimeProfiler(True)
    restored.load_state_dict(torch.load(path, weights_only=True))
    saved, back = tp._intervals.state()[0], restored._intervals.state()[0]
    assert restored.keys == tp.keys
    assert saved[0] is not None and back[0] is None  # an open mark is not resumed
    assert back[1:] == saved[1:] and back[2:] == (1, 2, 8)  # 1 interval, 2 batches of 4


def test_pickled_and_copied_with_their_marks(tmp_path):
    import copy
    import pickle
    tp = TimeProfiler("backward")
    trainer(tmp_path, max_epochs=1, callbacks=[tp], limit_val_batches=0).fit(Model(), small())
    tp.on_train_batch_start(None, None, next(iter(small())), 0)
    tp.on_train_batch_end(None, None, None, None, 0)
    for twin in (pickle.loads(pickle.dumps(tp)), copy.deepcopy(tp)):
        assert twin.keys == tp.keys and twin.on_before_optimizer_step is None
        assert twin._intervals.state()[0][1:] == tp._intervals.state()[0][1:]
        twin.on_train_batch_start(None, None, next(iter(small())), 0)  # its own C marks
        assert twin._intervals.state()[0][0] is not None
        assert tp._intervals.state()[0][0] is None


def test_a_subclass_keeps_its_own_hooks(tmp_path):
    seen = []

    class Mine(TimeProfiler):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(batch_idx)
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)

        def on_fit_start(self, trainer, pl_module):
            seen.append("fit")

    mine = Mine()
    t = trainer(tmp_path, max_epochs=1, callbacks=[mine], limit_val_batches=0)
    t.fit(Model(), small())
    assert seen == ["fit", 0, 1, 2, 3]
    row = next(r for r in metrics(tmp_path) if r.get("Mine/train batch"))
    assert float(row["Mine/avg train downtime"]) > 0


def test_stepwatch_additions_are_opt_in(tmp_path):
    plain = TimeProfiler()
    assert plain.profiler is None
    prof = stepwatch.Profiler(name="time")
    tp = TimeProfiler(profiler=prof)
    trainer(tmp_path, max_epochs=2, callbacks=[tp], limit_val_batches=2).fit(
        Model(), small(), small())
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["train batch"]["count"] == 8 and rows["train epoch"]["count"] == 2
    assert rows["train batch"]["p99_ns"] >= rows["train batch"]["p50_ns"] > 0


def test_the_same_figures_as_thunders_own_in_the_same_run(sleepy, tmp_path):
    """thunder's TimeProfiler and stepwatch's in one Trainer (thunder's renamed, so the logged
    names differ): every key, every epoch, the same value within 5 % (both mark the same
    hooks, microseconds apart, on parts that sleep milliseconds). Ours ends its epoch first
    and then logs, so thunder's train epoch also holds our logging: it is taken out."""
    thunder = pytest.importorskip("thunder.callbacks")

    class ThunderTimeProfiler(thunder.TimeProfiler):
        pass

    ours = TimeProfiler(True)
    logging_s = []
    log_to_logger = ours.log_to_logger

    def timed_log(pl_module):
        t0 = time.perf_counter()
        log_to_logger(pl_module)
        logging_s.append(time.perf_counter() - t0)

    ours.log_to_logger = timed_log
    ds = sleepy(5, sleep_s=0.02, batch=4)
    t = trainer(tmp_path, max_epochs=2, limit_val_batches=2,
                callbacks=[ours, ThunderTimeProfiler(True)])
    t.fit(Model(step_s=0.02), DataLoader(ds, batch_size=None), small(8))
    rows = [r for r in metrics(tmp_path) if r.get("TimeProfiler/train batch")]
    assert len(rows) == 2
    for row, logged in zip(rows, logging_s):
        theirs = {k: float(row[f"ThunderTimeProfiler/{k}"]) for k in DEFAULT + OPTIONAL}
        theirs["train epoch"] -= logged
        theirs["total train downtime"] -= logged
        theirs["avg train downtime"] -= logged / (5 * 4)
        # the epoch-level marks of the two are a hook apart: a preemption between them (a
        # loaded machine) moves the epoch's figures, so those get 5 % of the epoch
        epoch = theirs["train epoch"]
        slack = {"train epoch": epoch, "total train downtime": epoch,
                 "avg train downtime": epoch / (5 * 4)}
        for key in DEFAULT + OPTIONAL:
            mine = float(row[f"TimeProfiler/{key}"])
            tolerance = 0.05 * slack.get(key, abs(theirs[key])) + 2e-4
            assert abs(mine - theirs[key]) <= tolerance, (key, mine, theirs)
