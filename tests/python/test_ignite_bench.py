"""bench/bench_ignite.py still runs (--quick) and writes its figures (a smoke run: a loaded
test machine's figures prove nothing about the budget, which is `make bench`'s job)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ignite")


def test_bench_ignite_quick_writes_its_figures(tmp_path):
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "ignite.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_ignite.py"),
                          "--quick", "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    fig = json.loads(out.read_text())
    for key in ("ignite_basic_overhead_ns", "stepwatch_basic_overhead_ns",
                "ignite_handlers_overhead_ns", "stepwatch_handlers_overhead_ns", "basic_ratio",
                "handlers_ratio"):
        assert key in fig, key
    assert set(fig["budgets_met"]) == {"basic_le_third_of_ignite", "handlers_le_third_of_ignite"}
