"""stepwatch.fastai: the callback and Learner.profile() on a real fastai Learner."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastai.learner", reason="fastai not installed (see scripts/venv.sh)")
from fastai.data.core import DataLoaders  # noqa: E402
from fastai.data.load import DataLoader as FastaiLoader  # noqa: E402
from fastai.learner import Learner  # noqa: E402
from fastai.optimizer import SGD  # noqa: E402

from stepwatch.fastai import StepwatchCallback  # noqa: E402

from conftest import within  # noqa: E402


class SleepyItems:
    def __init__(self, sleepy, n):
        self.inner = sleepy(n, sleep_s=0.005, batch=1)

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x[0], y[0]


def learner(sleepy):
    train, valid = SleepyItems(sleepy, 16), SleepyItems(sleepy, 8)
    dls = DataLoaders(FastaiLoader(train, bs=4, shuffle=False),
                      FastaiLoader(valid, bs=4, shuffle=False))
    model = torch.nn.Linear(8, 1)
    learn = Learner(dls, model, loss_func=torch.nn.MSELoss(), opt_func=SGD, lr=0.01)
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    return learn, train, valid


def test_profile_times_every_part_and_the_draw(sleepy, capsys):
    learn, train, valid = learner(sleepy)
    assert learn.profile(drop_first_batch=False) is learn
    learn.fit(2)
    cb = [c for c in learn.cbs if isinstance(c, StepwatchCallback)][0]
    rows = {(r["action"], r["phase"]): r for r in cb.records()}
    assert rows[("step", "train")]["count"] == 8 and rows[("step", "valid")]["count"] == 4
    for name in ("data", "forward", "loss", "backward", "optimizer", "zero_grad"):
        assert rows[(name, "train")]["count"] == 8, name
    assert ("backward", "valid") not in rows
    slept = train.inner.slept_ns + valid.inner.slept_ns
    draw = rows[("data", "train")]["total_ns"] + rows[("data", "valid")]["total_ns"]
    assert within(draw, slept, 0.10), (draw, slept)
    assert rows[("step", "train")]["samples"] == 32
    assert "Samples/Second" in capsys.readouterr().out  # fastxtend's report after fit
    misuse = cb.profiler.snapshot().info()["misuse"]
    assert sum(misuse.values()) == 0, misuse


def test_throughput_mode_and_first_batch_dropped(sleepy):
    learn, _train, _valid = learner(sleepy)
    learn.profile(mode="throughput", show_report=False)
    learn.fit(1)
    cb = [c for c in learn.cbs if isinstance(c, StepwatchCallback)][0]
    rows = {(r["action"], r["phase"]): r for r in cb.records()}
    assert rows[("step", "train")]["count"] == 3 and rows[("step", "train")]["warmup_count"] == 1
    assert ("forward", "train") not in rows
    with pytest.raises(ValueError):
        StepwatchCallback(mode="nope")
