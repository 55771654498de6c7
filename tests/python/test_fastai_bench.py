"""bench/bench_fastai.py and bench/bench_ignite.py still run (--quick) and write their figures
(smoke runs: a loaded test machine's figures prove nothing about the budgets, which are
`make bench`'s job)."""
import json
import os
import subprocess
import sys

import pytest

KEYS = {"fastai": ["batch_ns", "stepwatch_throughput_overhead_ns", "stepwatch_simple_overhead_ns"],
        "ignite": ["ignite_basic_overhead_ns", "stepwatch_basic_overhead_ns",
                   "ignite_handlers_overhead_ns", "stepwatch_handlers_overhead_ns",
                   "fire_event_floor_overhead_ns", "stepwatch_basic_above_floor_ns",
                   "stepwatch_handlers_above_floor_ns", "basic_ratio", "handlers_ratio",
                   "basic_above_floor_ratio", "handlers_above_floor_ratio"]}


@pytest.mark.parametrize("framework", ["fastai", "ignite"])
def test_bench_quick_writes_its_figures(framework, tmp_path):
    pytest.importorskip("fastai.learner" if framework == "fastai" else "ignite")
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / f"{framework}.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", f"bench_{framework}.py"),
                          "--quick", "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    fig = json.loads(out.read_text())
    for key in KEYS[framework]:
        assert key in fig, key
    if framework == "fastai" and fig["fastxtend"]:
        assert "throughput_ratio" in fig and "simple_ratio" in fig
    for key in [k for k in fig if k.endswith("_ratio_range")]:
        lo, hi = fig[key]
        assert lo <= hi, (key, fig[key])
