"""stepwatch.html / export_chrome / diagnose / compare from Python: the same C code as the
stepwatch command (the outputs are compared byte for byte with the command's), and
`python -m stepwatch` as the command."""
import json
import os
import subprocess
import sys
import time

import pytest

import stepwatch


def cli():
    build = os.environ.get("SW_BUILD_DIR")
    if not build or not os.path.exists(os.path.join(build, "stepwatch")):
        pytest.fail("SW_BUILD_DIR must point at a build with the stepwatch command")
    return os.path.join(build, "stepwatch")


def write_run(path, data_s, stall_every=0):
    p = stepwatch.Profiler(name=path.stem, run_file=str(path), timeline=True, live=False)
    data, fwd = p.action("data"), p.action("forward")
    with p.phase("train"):
        for i in range(40):
            with p.step(8):
                with data:
                    time.sleep(data_s * (6 if stall_every and i % stall_every == 0 else 1))
                with fwd:
                    time.sleep(0.001)
    p.close()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    return write_run(d / "base.db", 0.001), write_run(d / "slow.db", 0.004, stall_every=4)


def test_same_output_as_the_command(runs, tmp_path):
    base, slow = runs
    for fmt in ("table", "markdown", "json"):
        ours = stepwatch.diagnose(slow, format=fmt)
        theirs = subprocess.run([cli(), "diagnose", str(slow), "--format", fmt],
                                capture_output=True, text=True).stdout
        assert ours == theirs
    for fmt in ("table", "markdown", "csv", "json"):
        ours = stepwatch.compare(base, slow, format=fmt)
        theirs = subprocess.run([cli(), "compare", str(base), str(slow), "--format", fmt],
                                capture_output=True, text=True).stdout
        assert ours == theirs
    rows = {(r["phase"], r["action"]): r for r in json.loads(stepwatch.compare(base, slow,
                                                                               "json"))["rows"]}
    assert rows[("all", "data")]["verdict"] == "slower"
    # Snapshots compare too: a live profiler's against a run file's.
    assert "data" in stepwatch.compare(stepwatch.load(base), slow)

    stepwatch.html(slow, tmp_path / "py.html")
    subprocess.run([cli(), "html", str(slow), "-o", str(tmp_path / "c.html")], check=True,
                   capture_output=True)
    assert (tmp_path / "py.html").read_bytes() == (tmp_path / "c.html").read_bytes()
    stepwatch.export_chrome(slow, str(tmp_path / "py.json"))
    subprocess.run([cli(), "export", str(slow), "--chrome", str(tmp_path / "c.json")],
                   check=True, capture_output=True)
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "c.json").read_bytes()
    events = json.loads((tmp_path / "py.json").read_text())["traceEvents"]
    assert sum(e.get("ph") == "X" and e.get("name") == "data" for e in events) == 40


def test_errors(runs, tmp_path):
    base, _ = runs
    with pytest.raises(FileNotFoundError):
        stepwatch.diagnose(tmp_path / "absent.db")
    with pytest.raises(FileNotFoundError):
        stepwatch.html(tmp_path / "absent.db", tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(stepwatch.Error, match="x.html"):  # sw_output names the path
        stepwatch.html(base, tmp_path / "no" / "dir" / "x.html")
    # All or nothing: a report that exists survives a failed write over it.
    old = tmp_path / "old.html"
    old.write_text("kept")
    with pytest.raises(FileNotFoundError):
        stepwatch.html(tmp_path / "absent.db", old)
    assert old.read_text() == "kept"
    with pytest.raises(ValueError, match="report format"):
        stepwatch.compare(base, base, format="lightning")
    with pytest.raises(ValueError, match="csv"):
        stepwatch.diagnose(base, format="csv")
    junk = tmp_path / "junk.db"
    junk.write_text("not a run file\n" * 100)
    with pytest.raises(stepwatch.Error, match="not a stepwatch run file"):
        stepwatch.diagnose(junk)


def test_python_m_stepwatch_is_the_command(runs):
    base, slow = runs
    env = dict(os.environ, PATH=os.path.dirname(cli()) + os.pathsep + os.environ["PATH"])
    for args in (["compare", str(base), str(slow)], ["diagnose", str(slow)],
                 ["report", str(slow), "--format", "csv"], ["--help"], ["--version"]):
        ours = subprocess.run([sys.executable, "-m", "stepwatch", *args], capture_output=True,
                              text=True, env=env)
        theirs = subprocess.run([cli(), *args], capture_output=True, text=True)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout), args
    bad = subprocess.run([sys.executable, "-m", "stepwatch", "compare", str(base)],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "two run files" in bad.stderr


def test_python_m_stepwatch_finds_the_command_of_a_target_install(tmp_path, runs):
    """`pip install --target DIR` (how a machine without a venv takes a carried wheel) puts the
    package in DIR/stepwatch and the command in DIR/bin, on no PATH: `python -m stepwatch`
    with DIR on PYTHONPATH runs that command, not another installation's."""
    import shutil
    target = tmp_path / "target"
    shutil.copytree(os.path.dirname(stepwatch.__file__), target / "stepwatch",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (target / "bin").mkdir()
    shutil.copy2(cli(), target / "bin" / "stepwatch")
    env = dict(os.environ, PYTHONPATH=str(target))
    found = subprocess.run([sys.executable, "-c", "import stepwatch, stepwatch.__main__ as m; "
                            "print(stepwatch.__file__); print(m.find_command())"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert found.stdout.split("\n")[:2] == [str(target / "stepwatch" / "__init__.py"),
                                            str(target / "bin" / "stepwatch")], found
    ours = subprocess.run([sys.executable, "-m", "stepwatch", "diagnose", str(runs[1])],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    theirs = subprocess.run([cli(), "diagnose", str(runs[1])], capture_output=True, text=True)
    assert (ours.returncode, ours.stdout) == (0, theirs.stdout), ours.stderr
