"""bench/bench_python.py, bench_torch.py and bench_functions.py still run (--quick) and write
every figure `make bench` reports.

Only smoke runs: the figures of a quick run on a loaded test machine prove nothing about the
budgets (those are `make bench`'s job); this catches a benchmark broken by a change."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")

ROOT = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")


def quick(tmp_path, name):
    out = tmp_path / f"{name}.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", f"bench_{name}.py"),
                          "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def test_bench_python_quick_writes_every_figure(tmp_path):
    fig = quick(tmp_path, "python")
    w = fig["with"]
    assert 0 < w["floor_with_ns"] < w["stepwatch_with_ns"] < w["lightning_simple_with_ns"]
    assert set(fig["budgets_met"]) == {"with_le_100ns", "with_ge_8x_cheaper_than_simple"}


def test_bench_torch_quick_writes_every_figure(tmp_path):
    fig = quick(tmp_path, "torch")
    for kind in ("torch_trivial", "torch_real", "torch_real_1ms"):
        f = fig[kind]
        assert f["steps_each"] > 0 and f["step_ns"] > 0, f
        for prefix in ("", "floor_", "hooks_only_", "profiler_"):
            lo, hi = f[prefix + "slowdown_ci95_pct"]
            assert lo <= hi, f
            assert prefix + "overhead_ns" in f, (prefix, f)
        assert "above_floor_pct" in f and "profiler_over_stepwatch" in f
    assert set(fig["budgets_met"]) == {"real_step_within_floor_plus_half_pct",
                                       "real_step_20x_below_torch_profiler"}


def test_bench_functions_quick_writes_every_figure(tmp_path):
    fig = quick(tmp_path, "functions")
    assert set(fig["workloads"]) == {"recursive", "pipeline", "lightning"}
    for name, w in fig["workloads"].items():
        for mode in ("none", "floor_python", "stepwatch_python", "cprofile_python",
                     "floor_builtins", "stepwatch_builtins", "cprofile_builtins"):
            assert w["slowdown"][mode] > 0, (name, mode)
        assert "overhead_ratio_python" in w and "above_floor_ratio_builtins" in w
    assert "lightning_advanced" in fig["workloads"]["lightning"]["slowdown"]
