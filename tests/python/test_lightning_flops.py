"""stepwatch.lightning.Profiler(flops=True) in a real Lightning Trainer: every
log_every_n_steps optimizer steps the trainer's logger gets stepwatch/tflops over the training
steps' own time since the last log: the counted FLOPs (the hand count of a Linear) times the
steps, over those steps' time."""
import math

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from test_lightning_throughput import Model, Recorded  # noqa: E402  (a Linear(16, 16) module)

import stepwatch.lightning as swl  # noqa: E402


def test_profiler_logs_tflops_per_log_interval():
    torch.set_num_threads(1)
    logger = Recorded()
    profiler = swl.Profiler(flops={"peak_flops": 1e12})
    model = Model(n=16, batch=4, batches=12)
    pl.Trainer(max_steps=8, log_every_n_steps=2, limit_val_batches=0, num_sanity_val_steps=0,
               enable_checkpointing=False, enable_model_summary=False,
               enable_progress_bar=False, accelerator="cpu", devices=1, logger=logger,
               profiler=profiler).fit(model)
    rows = [(m, s) for m, s in logger.rows if "stepwatch/tflops" in m]
    assert [s for _, s in rows] == [2, 4, 6, 8]
    per_step = 2 * 4 * 16 * 16 * 2  # forward and the weight's gradient (the input needs none)
    recorder = profiler.profiler
    step = next(r for r in recorder.records("train") if r["action"] == "step")
    assert step["count"] + step["warmup_count"] == 8
    for m, _ in rows:
        assert m["stepwatch/tflops"] > 0
        assert math.isclose(m["stepwatch/mfu"], m["stepwatch/tflops"] * 1e12 / 1e12, rel_tol=1e-9)
    assert recorder.flops.running()[0] == 8 * per_step  # every step's FLOPs, counted once


def test_profiler_flops_option_is_checked():
    with pytest.raises(ValueError, match="flops must be"):
        swl.Profiler(flops="yes")
