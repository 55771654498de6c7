"""bench/bench_lightning.py still runs and writes every figure `make bench` reports.

A smoke run only (one fit per variant): on a loaded test machine its figures prove nothing
about the budgets, which are `make bench`'s; this catches a benchmark broken by a change."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")


def test_bench_lightning_runs_every_variant(tmp_path):
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "lightning.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_lightning.py"),
                          "--rounds", "1", "--steps", "40", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stepwatch.lightning.Profiler" in run.stdout
    fig = json.loads(out.read_text())
    assert fig["step_ns"] > 0 and fig["wall_step_ns"] > 0
    assert {"none", "simple", "stepwatch", "stepwatch_time"} <= set(fig["variants"])
    for name, v in fig["variants"].items():
        assert v["steps"] == 40 - 20 - 1 and v["step_ns"] > 0, (name, v)
        lo, hi = v["overhead_ci95_ns"]
        assert lo <= hi, (name, v)
    assert set(fig["budgets_met"]) == {
        "profiler_le_third_of_simple", "time_profiler_le_simple",
        "replayed_profiler_le_third_of_simple", "replayed_time_profiler_le_simple"}
    assert fig["fits_resolve_simple"] in (True, False)
    replayed = fig["replayed"]
    assert replayed["pairs_per_step"] >= 10
    for key in ("simple_ns", "stepwatch_ns", "stepwatch_time_ns"):
        assert key in replayed, (key, replayed)
