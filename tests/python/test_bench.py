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


# ---- bench/write_overhead_doc.py: docs/overhead.md from the benchmarks' JSON -----------------

CORE = {"pair_ns_1thread": 60.6, "floor_ns_1thread": 43.2, "ratio_1thread": 1.403,
        "pair_ns_2threads": 70.0, "floor_ns_2threads": 43.0, "ratio_2threads": 1.628,
        "rss_kib_before": 2656, "rss_kib_after": 2712, "spans": 10000000,
        "tsc": 0, "tsc_pair_ns": 0, "tsc_floor_ns": 0, "monotonic_floor_ns": 0}
FASTAI_IR = {"steps": 40, "rounds": 1, "skipped": {}, "instructions": True,
             "wall_step_ns": {"none": 1.3e6, "stepwatch_simple": 1.31e6, "fastxtend_simple": 1.5e6},
             "wall_added_ns": {"none": 0, "stepwatch_simple": 1e4, "fastxtend_simple": 2e5},
             "ir_per_step": {"none": 4.94e6, "stepwatch_simple": 4.99e6,
                             "fastxtend_simple": 6.26e6},
             "ir_added": {"none": 0, "stepwatch_simple": 56_700, "fastxtend_simple": 1_320_000},
             "ir_added_range": {"none": [0, 0], "stepwatch_simple": [55_500, 73_600],
                                "fastxtend_simple": [1_310_000, 1_320_000]}}


def write_doc(tmp_path, figures, *extra):
    bench = tmp_path / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    for name, fig in figures.items():
        (bench / f"{name}.json").write_text(json.dumps(fig))
    doc = tmp_path / "overhead.md"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "write_overhead_doc.py"),
                          "--bench", str(bench), "--doc", str(doc), *extra],
                         capture_output=True, text=True, timeout=120)
    return run, doc


def table_rows(doc, heading):
    """The data rows of the table under heading, each a list of its cells."""
    text = doc.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


def test_overhead_doc_turns_json_into_tables(tmp_path):
    instructions = {"groups": {"fastai": FASTAI_IR}, "budgets": [
        {"group": "fastai", "ours": "stepwatch_simple", "theirs": "fastxtend_simple",
         "budget": 0.2, "ratio": 0.043, "met": True}]}
    run, doc = write_doc(tmp_path, {"core": CORE, "instructions": instructions})
    assert run.returncode == 0, run.stderr
    assert table_rows(doc, "C core: the hot path") == [
        ["C `sw_begin`/`sw_end` pair, 1 thread", "60.6 ns", "2 clock reads: 43.2 ns", "1.40x",
         "<= 1.5x — met", ""],
        ["C `sw_begin`/`sw_end` pair, 2 threads at once", "70.0 ns", "2 clock reads: 43.0 ns",
         "1.63x", "<= 1.5x — **not met**", ""],
        ["RSS after 10,000,000 spans over 10 actions", "2712 KiB", "before: 2656 KiB",
         "+56 KiB", "flat (< 1 MiB) — met", ""],
        ["C pair with the TSC clock", "not measured: no invariant TSC", "", "", "", ""]]
    assert table_rows(doc, "Instructions added per step in situ: fastai `Learner.fit` "
                           "(callgrind)") == [
        ["stepwatch Simple", "+56.7k Ir per step (+55.5k to +73.6k)",
         "fastxtend's `SimpleProfilerCallback`: +1.32M", "0.043", "<= 1/5 — met", ""],
        ["fastxtend's `SimpleProfilerCallback`", "+1.32M Ir per step (+1.31M to +1.32M)",
         "bare step: 4.94M Ir", "", "", ""]]
    text = doc.read_text()
    assert "Figures: `core.json` of " in text and "40 steps x 1 rounds" in text
    # a group whose JSON is absent is said to be unmeasured, not left out
    assert "## Python: a `with` on an action\n" in text
    assert text.count("Not measured in any run this page was written from.") == len(
        [line for line in text.splitlines() if line.startswith("## ")]) - 2


def test_overhead_doc_shows_the_previous_figures(tmp_path):
    run, doc = write_doc(tmp_path, {"core": CORE})
    assert run.returncode == 0, run.stderr
    first = doc.read_text()
    run, doc = write_doc(tmp_path, {"core": CORE})  # the same JSON: the page stays as it is
    assert run.returncode == 0, run.stderr
    assert doc.read_text() == first
    faster = dict(CORE, pair_ns_1thread=50.0, ratio_1thread=50.0 / 43.2)
    run, doc = write_doc(tmp_path, {"core": faster}, "--note", "core=a reduced run")
    assert run.returncode == 0, run.stderr
    rows = table_rows(doc, "C core: the hot path")
    assert rows[0][1:3] == ["50.0 ns", "2 clock reads: 43.2 ns"]
    assert rows[0][-1] == "60.6 ns; 1.40x"  # what the page showed before this run
    assert rows[2][-1] == "2712 KiB; +56 KiB"
    text = doc.read_text()
    assert "a reduced run." in text and "Previous: `core.json` of " in text


def test_overhead_doc_names_a_missing_figure(tmp_path):
    broken = {k: v for k, v in CORE.items() if k != "floor_ns_2threads"}
    run, doc = write_doc(tmp_path, {"core": broken})
    assert run.returncode == 1
    assert "core.json: no figure 'floor_ns_2threads'" in run.stderr, run.stderr
    assert not doc.exists()
    nested = {"with": {"stepwatch_with_ns": 99}, "budgets_met": {}}
    run, doc = write_doc(tmp_path / "nested", {"python": nested})
    assert run.returncode == 1
    assert "python.json: no figure 'with.floor_with_ns'" in run.stderr, run.stderr


def test_overhead_doc_keeps_a_group_whose_figures_did_not_change(tmp_path):
    """instructions.json holds several groups: a run of one group alone (or one more group in
    the file) leaves the others' figures and their previous column as they were."""
    heading = "Instructions added per step in situ: fastai `Learner.fit` (callgrind)"
    run, doc = write_doc(tmp_path, {"instructions": {"groups": {"fastai": FASTAI_IR},
                                                     "budgets": []}})
    assert run.returncode == 0, run.stderr
    first = table_rows(doc, heading)
    run, doc = write_doc(tmp_path, {"instructions": {"groups": {"fastai": FASTAI_IR,
                                                                "ignite": FASTAI_IR},
                                                     "budgets": []}})
    assert run.returncode == 0, run.stderr
    assert table_rows(doc, heading) == first and first[0][-1] == ""
    assert table_rows(doc, "Instructions added per step in situ: Ignite `Engine.run` "
                           "(callgrind)")[0][1] == "+56.7k Ir per step (+55.5k to +73.6k)"
