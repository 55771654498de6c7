"""stepwatch.load / load_steps: reading run files written by the C core."""
import os

import pytest

import stepwatch


def test_run_file_round_trip(tmp_path):
    path = str(tmp_path / "run.sqlite")
    p = stepwatch.Profiler(name="saved", run_file=path)
    fwd = p.action("forward")
    with p.phase("train"):
        for _ in range(5):
            with p.step(16):
                with fwd:
                    pass
    live = {(r["action"], r["phase"]): r["count"] for r in p.records()}
    p.close()
    snap = stepwatch.load(path)
    loaded = {(r["action"], r["phase"]): r["count"] for r in snap.records()}
    assert loaded[("forward", "train")] == live[("forward", "train")] == 5
    assert snap.info()["name"] == "saved"
    assert "forward" in snap.report("table")
    steps = stepwatch.load_steps(path)
    assert len(steps) == 5
    assert [s["step"] for s in steps] == list(range(5))
    assert all(s["batch_size"] == 16 and s["phase"] == "train" for s in steps)
    assert all(s["forward_ns"] <= s["duration_ns"] for s in steps)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        stepwatch.load(tmp_path / "absent.sqlite")


def test_load_foreign_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a run file\n" * 100)
    with pytest.raises(stepwatch.Error) as info:
        stepwatch.load(str(path))
    assert info.value.name in ("FOREIGN", "CORRUPT")


def test_load_refuses_crafted_schema(tmp_path):
    """A recursive view in place of steps (docs/reliability.md, "Hostile run files"): load and
    load_steps refuse the file at once, naming it and the view, instead of looping."""
    import sqlite3

    path = str(tmp_path / "crafted.sqlite")
    p = stepwatch.Profiler(name="crafted", run_file=path)
    with p.step(1):
        pass
    p.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE steps; CREATE VIEW steps AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL"
        " SELECT x + 1 FROM r) SELECT 0 AS rank, x AS step, 0 AS phase, 1 AS batch_size,"
        " 0 AS warmup, 0 AS thread, x AS start_ns, 1 AS duration_ns, 0 AS data_ns,"
        " 0 AS forward_ns, 0 AS loss_ns, 0 AS backward_ns, 0 AS optimizer_ns,"
        " 0 AS zero_grad_ns, 0 AS callback_ns, 0 AS collective_ns, 0 AS other_ns FROM r")
    db.close()
    for reader in (stepwatch.load, stepwatch.load_steps):
        with pytest.raises(stepwatch.Error) as info:
            reader(path)
        assert info.value.name == "CORRUPT"
        assert path in str(info.value) and "view steps" in str(info.value)
