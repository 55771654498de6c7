"""bench/bench_python.py still runs (--quick) and writes every figure `make bench` reports.

Only a smoke run: the figures of a quick run on a loaded test machine prove nothing about
the budgets (those are `make bench`'s job); this catches a benchmark broken by a change."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")


def test_bench_python_quick_writes_every_figure(tmp_path):
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "python.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_python.py"),
                          "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    fig = json.loads(out.read_text())
    w = fig["with"]
    assert 0 < w["floor_with_ns"] < w["stepwatch_with_ns"] < w["lightning_simple_with_ns"]
    for kind in ("torch_trivial", "torch_real", "torch_real_1ms"):
        assert fig[kind]["steps_each"] > 0 and fig[kind]["step_ns"] > 0, fig[kind]
        for prefix in ("", "floor_"):
            lo, hi = fig[kind][prefix + "slowdown_ci95_pct"]
            assert lo <= hi, fig[kind]
        for key in ("floor_overhead_ns", "floor_slowdown_pct", "hooks_only_overhead_ns",
                    "hooks_only_slowdown_pct"):
            assert key in fig[kind], (key, fig[kind])
    assert set(fig["budgets_met"]) == {
        "with_le_100ns", "with_ge_8x_cheaper_than_simple",
        "torch_trivial_loop_le_2us", "real_step_le_1pct"}


def test_bench_functions_quick_writes_every_figure(tmp_path):
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "functions.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_functions.py"),
                          "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    fig = json.loads(out.read_text())
    assert set(fig["workloads"]) == {"recursive", "pipeline", "lightning"}
    for name, w in fig["workloads"].items():
        for mode in ("none", "floor_python", "stepwatch_python", "cprofile_python",
                     "floor_builtins", "stepwatch_builtins", "cprofile_builtins"):
            assert w["slowdown"][mode] > 0, (name, mode)
        assert "overhead_ratio_python" in w and "above_floor_ratio_builtins" in w
    assert "lightning_advanced" in fig["workloads"]["lightning"]["slowdown"]
