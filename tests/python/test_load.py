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
