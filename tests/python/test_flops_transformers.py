"""stepwatch.transformers.Callback(flops=True) on a real HF Trainer (a tiny BERT from its
config, nothing downloaded): stepwatch/tflops and stepwatch/tokens_per_sec in every log, each
the counted FLOPs and the batch's tokens over the same steps' time."""
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import stepwatch  # noqa: E402
from hftruth import SEQ, make_trainer  # noqa: E402


def test_callback_logs_tflops_and_tokens(tmp_path):
    from stepwatch.transformers import Callback
    cb = Callback(run_file=str(tmp_path / "cb.db"), output=str(tmp_path / "r.txt"), flops=True)
    trainer, _clock = make_trainer(tmp_path, train=32, valid=8, epochs=1, batch=8,
                                   logging_steps=1, callbacks=[cb])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "stepwatch/step_ms" in h]
    assert len(logs) == 4
    notes = stepwatch.load(str(tmp_path / "cb.db")).info()["notes"]
    per_step = float(notes["flops_per_step"])
    assert per_step > 0 and notes["items_source"].startswith("2-D integer input")
    for h in logs[1:]:  # the first log's step is the counted one: its count ends in it
        seconds = h["stepwatch/step_ms"] / 1e3
        assert math.isclose(h["stepwatch/tflops"] * 1e12 * seconds, per_step, rel_tol=1e-5)
        assert math.isclose(h["stepwatch/tokens_per_sec"] * seconds, 8 * SEQ, rel_tol=1e-9)
        assert "stepwatch/mfu" not in h  # a CPU: no peak
    assert "efficiency: " in (tmp_path / "r.txt").read_text()
