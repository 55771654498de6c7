"""bench/bench_fastai.py still runs (--quick) and writes its figures (a smoke run: a loaded
test machine's figures prove nothing about the budget, which is `make bench`'s job)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("fastai.learner")


def test_bench_fastai_quick_writes_its_figures(tmp_path):
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "fastai.json"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_fastai.py"),
                          "--quick", "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    fig = json.loads(out.read_text())
    assert fig["batch_ns"] > 0
    for mode in ("throughput", "simple"):
        assert f"stepwatch_{mode}_overhead_ns" in fig
        if fig["fastxtend"]:
            assert f"fastxtend_{mode}_overhead_ns" in fig and f"{mode}_ratio" in fig
