"""A run_clm.py-like Hugging Face script (tests/python/scripts/run_clm_tiny.py: a tiny GPT-2
loaded from a local directory, the Trainer's own loop, nothing of stepwatch in it) under
`stepwatch run --flops --peak-flops`: the forward FLOPs equal the hand count exactly, the step's
FLOPs are within 5 % of the 6·N·tokens rule plus attention (12·L·T·d per token), MFU is
reported against the given peak, tokens/s read from the token-id input."""
import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import stepwatch  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "run_clm_tiny.py")


def test_run_clm_under_stepwatch_run_flops(tmp_path):
    db = tmp_path / "run.db"
    run = subprocess.run([sys.executable, "-m", "stepwatch.autorun", "--flops",
                          "--peak-flops", "1e12", "--run-file", str(db), SCRIPT, str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    hf = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    notes = stepwatch.load(str(db)).info()["notes"]
    tokens = hf["batch"] * hf["block"]  # per step: one micro-batch of token blocks
    L, d, T = hf["layers"], hf["embd"], hf["block"]
    # forward, by hand: every Linear's 2·in·out per token (the parameters of the blocks less
    # biases and layer norms), the tied LM head 2·d·V, and attention's QKᵀ and AV, 4·T²·d per
    # layer and sequence
    vocab = (hf["params"] - hf["params_no_embeddings"] - hf["position_params"]) // d
    linear = L * (d * 3 * d + d * d + d * 4 * d + 4 * d * d)
    forward = tokens * 2 * (linear + d * vocab) + hf["batch"] * L * 4 * T * T * d
    assert float(notes["flops_forward"]) == forward
    # the rule: 6·N·tokens (N without the position embeddings, which do no matmul) plus
    # attention, 12·L·T·d per token
    rule = tokens * (6 * (hf["params"] - hf["position_params"]) + 12 * L * T * d)
    per_step = float(notes["flops_per_step"])
    assert abs(per_step / rule - 1) < 0.05, (per_step, rule)
    # the Trainer's own estimate (total_flos: 6 x non-embedding parameters x tokens) leaves
    # out the LM head and attention: below stepwatch's count
    assert hf["total_flos"] / hf["steps"] < per_step
    achieved = float(notes["tflops_achieved"]) * 1e12
    assert math.isclose(float(notes["mfu"]), achieved / 1e12, rel_tol=1e-9)
    assert "% MFU, given fp32" in notes["efficiency"]
    assert notes["items_source"] == f"2-D integer input #0 [{hf['batch']}, {T}]"
    header = [line for line in run.stderr.splitlines() if line.startswith("efficiency: ")]
    assert len(header) == 1 and "tokens/s" in header[0]
