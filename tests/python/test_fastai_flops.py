"""fastai: Learner.profile(flops=True) logs stepwatch/tflops (and tokens/s, MFU where known)
with fastxtend's rolling throughput/* values to the fastai loggers; the FLOPs are the hand
count of the model; training is the same with and without counting."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastai")

from test_fastai import BS, make_learner  # noqa: E402  (a Learner of Linear(8, 1), batches of 4)

import stepwatch  # noqa: E402
from stepwatch.fastai import ProfileMode  # noqa: E402,F401  (adds Learner.profile)


def run(tmp_path, flops, profiler=None):
    from fastai.callback.progress import CSVLogger
    import pandas as pd
    torch.manual_seed(0)
    learn, _ = make_learner(n_train=40, cbs=[CSVLogger()])
    learn.path = tmp_path
    learn.profile(rolling_average=2, show_report=False, flops=flops, profiler=profiler)
    learn.fit(1)
    weights = [p.detach().clone() for p in learn.model.parameters()]
    return pd.read_csv(tmp_path / "history_throughput.csv"), weights


def test_rolling_logs_tflops_from_the_hand_count(tmp_path):
    prof = stepwatch.Profiler(live=False)
    rolling, counted = run(tmp_path, True, profiler=prof)
    assert len(rolling) == 4 and "throughput/step" in rolling.columns
    assert (rolling["stepwatch/tflops"] > 0).all(), rolling
    assert "stepwatch/mfu" not in rolling.columns  # a CPU: no peak, not guessed
    notes = prof.snapshot().info()["notes"]
    # Linear(8, 1) on a batch of 4: 2*4*8 forward, the weight's gradient as much backward
    assert float(notes["flops_forward"]) == 2 * BS * 8
    assert float(notes["flops_backward"]) == 2 * BS * 8
    prof.close()
    (tmp_path / "plain").mkdir()
    plain_rolling, plain = run(tmp_path / "plain", False)
    assert "stepwatch/tflops" not in plain_rolling.columns
    assert all(torch.equal(a, b) for a, b in zip(counted, plain))  # training unchanged


def test_flops_option_is_checked():
    with pytest.raises(ValueError, match="flops must be"):
        make_learner()[0].profile(flops="yes")
