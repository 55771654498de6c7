"""The `stepwatch html`, `compare` and `diagnose` commands on run files written from Python
with real sleeps in the data wait; the HTML is drawn by a real headless Chromium."""
import json
import os
import shutil
import subprocess
import time

import pytest

import stepwatch


def cli():
    build = os.environ.get("SW_BUILD_DIR")
    if not build or not os.path.exists(os.path.join(build, "stepwatch")):
        pytest.fail("SW_BUILD_DIR must point at a build with the stepwatch command")
    return os.path.join(build, "stepwatch")


def run(*args, check_rc=None):
    proc = subprocess.run([cli(), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert proc.returncode == check_rc, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def busy(seconds):
    """Spin (not sleep) so compute time is real CPU time."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def write_run(path, steps, data_s, forward_s, name):
    p = stepwatch.Profiler(name=name, run_file=str(path))
    data, fwd, bwd = p.action("data"), p.action("forward"), p.action("backward")
    with p.phase("fit"):
        with p.phase("train"):
            for _ in range(steps):
                with p.step(16):
                    with data:
                        if data_s:  # even sleep(0) yields the CPU on a loaded machine
                            time.sleep(data_s)
                    with fwd:
                        busy(forward_s)
                    with bwd:
                        busy(0.0005)
    p.close()
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    return {
        "fast": write_run(d / "fast.sqlite", 30, 0.0, 0.001, "fast"),
        "slow": write_run(d / "slow.sqlite", 30, 0.006, 0.001, "slow-loader"),
        "dir": d,
    }


def test_diagnose_finds_input_bound_only_where_it_is(runs):
    slow = json.loads(run("diagnose", runs["slow"], "--format", "json", check_rc=0).stdout)
    assert slow["schema"] == "stepwatch.diagnose"
    ids = [f["id"] for f in slow["findings"]]
    assert "input-bound" in ids
    finding = slow["findings"][ids.index("input-bound")]
    share = dict((n["name"], n["value"]) for n in finding["numbers"])["data share"]
    assert 60 < share < 95  # 6 ms of sleep against ~1.5 ms of compute
    fast = json.loads(run("diagnose", runs["fast"], "--format", "json", check_rc=0).stdout)
    assert "input-bound" not in [f["id"] for f in fast["findings"]]
    text = run("diagnose", runs["slow"], check_rc=0).stdout
    assert "Input-bound" in text and "waits for data" in text
    # --check turns findings into exit status 1.
    run("diagnose", runs["slow"], "--check", check_rc=1)


def test_compare_flags_the_regression(runs):
    out = json.loads(run("compare", runs["fast"], runs["slow"], "--format", "json",
                         check_rc=0).stdout)
    rows = {(r["phase"], r["action"]): r for r in out["rows"]}
    assert rows[("all", "data")]["verdict"] == "slower"
    assert rows[("all", "step")]["verdict"] == "slower"
    assert rows[("all", "data")]["p_value"] < 0.01
    assert out["slower"] >= 2
    assert out["rows"][0]["verdict"] == "slower"  # what matters first
    run("compare", runs["fast"], runs["slow"], "--fail-on-regression", check_rc=1)
    run("compare", runs["slow"], runs["slow"], "--fail-on-regression", check_rc=0)
    csv = run("compare", runs["fast"], runs["slow"], "--format", "csv", check_rc=0).stdout
    assert csv.splitlines()[0].startswith("phase,action,calls_base,calls_new,")
    md = run("compare", runs["fast"], runs["slow"], "--format", "md", check_rc=0).stdout
    assert "| Phase | Action |" in md


def test_errors_and_help(runs, tmp_path):
    for cmd in ("html", "compare", "diagnose"):
        proc = run(cmd, "--help", check_rc=0)
        assert proc.stdout.startswith("usage: stepwatch " + cmd)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a run file\n" * 200)
    assert "not a stepwatch run file" in run("diagnose", junk, check_rc=3).stderr
    run("compare", runs["fast"], tmp_path / "absent.sqlite", check_rc=3)
    run("html", tmp_path / "absent.sqlite", "-o", tmp_path / "x.html", check_rc=3)
    run("compare", runs["fast"], check_rc=2)
    run("compare", runs["fast"], runs["slow"], "--format", "lightning", check_rc=2)
    run("diagnose", runs["fast"], "--format", "csv", check_rc=2)
    run("html", runs["fast"], check_rc=2)  # no -o
    run("html", runs["fast"], "-o", tmp_path / "no" / "such" / "dir.html", check_rc=4)


def test_html_renders_in_chromium(runs, tmp_path):
    out = tmp_path / "report.html"
    proc = run("html", runs["slow"], "-o", out, check_rc=0)
    assert "wrote" in proc.stderr
    html = out.read_text()
    data = html.split('<script type="application/json" id="sw-data">', 1)[1].split("</script>", 1)[0]
    doc = json.loads(data)
    assert doc["run"]["name"] == "slow-loader"
    assert doc["run"]["step_records"] == 30
    assert len(doc["steps"]["points"]) == 30
    assert [h["phase"] for h in doc["step_hists"]] == ["train"]
    assert doc["step_hists"][0]["hist"]["p50"] > 0
    assert "input-bound" in [f["id"] for f in doc["findings"]]
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0", "--dump-dom", out.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = proc.stdout
    assert 'data-rendered="1"' in dom
    assert '<div id="sw-error"></div>' in dom
    for chart in ("step-time", "breakdown", "hist-step"):
        assert f'data-chart="{chart}"' in dom
    assert 'data-marker="p99"' in dom
    assert 'data-finding="input-bound"' in dom


def on_terminal(args, env, stdout=None, columns=200):
    """Run args with stderr (and stdout, unless given) on a real pseudo-terminal `columns`
    wide; returns (exit code, what the terminal showed)."""
    import fcntl
    import pty
    import struct
    import termios

    try:
        master, slave = pty.openpty()
    except OSError as exc:  # a machine without pseudo-terminals (no devpts)
        pytest.skip(f"no pseudo-terminal: {exc}")
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(args, stdout=slave if stdout is None else stdout, stderr=slave,
                            env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode()


def test_report_fits_the_terminal_it_is_shown_on(tmp_path):
    """Without COLUMNS (shells seldom export it) the table asks the terminal for its width:
    a real pseudo-terminal 200 columns wide gets every column and whole names; a file or a
    pipe keeps 80 columns, so saved reports do not depend on who ran them."""

    long_name = "forward/a_rather_long_action_name_that_does_not_fit_in_80_columns"
    p = stepwatch.Profiler(name="wide", run_file=str(tmp_path / "wide.sqlite"))
    with p.phase("train"):
        with p.step(1):
            with p.action(long_name):
                pass
    p.close()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    args = [cli(), "report", str(tmp_path / "wide.sqlite")]

    # stdout to a file, stderr still on the terminal: the saved report keeps 80 columns
    with open(tmp_path / "saved.txt", "w") as saved:
        assert on_terminal(args, env, stdout=saved)[0] == 0
    text = (tmp_path / "saved.txt").read_text()
    assert long_name not in text and max(len(line) for line in text.splitlines()[2:]) <= 80
    rc, shown = on_terminal(args, env)
    assert rc == 0
    assert long_name in shown and "p50" in shown, shown

    piped = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0
    assert long_name not in piped.stdout and "\u2026" in piped.stdout
    assert max(len(line) for line in piped.stdout.splitlines()[2:]) <= 80


def test_export_shows_progress_on_a_terminal_only(tmp_path):
    """A Chrome export of a long timeline takes seconds: on a terminal, stderr shows a line
    redrawn in place (reading, sorting, writing the spans) and erased at the end; piped, stderr
    stays empty. The trace is the same either way."""
    # A ring far smaller than the timeline, blocking when full: nothing may be dropped.
    p = stepwatch.Profiler(name="long", run_file=str(tmp_path / "long.sqlite"), timeline=True,
                           ring_capacity=1024, on_full="block")
    data, forward = p.action("data"), p.action("forward")
    with p.phase("train"):
        for _ in range(25_000):  # 75,001 spans with the steps and the phase
            with p.step(1):
                with data:
                    pass
                with forward:
                    pass
    assert p.snapshot().info()["dropped_events"] == 0
    p.close()
    run_file = str(tmp_path / "long.sqlite")

    rc, shown = on_terminal([cli(), "export", run_file, "--chrome", str(tmp_path / "t.json")],
                            os.environ)
    assert rc == 0, shown
    assert "stepwatch export: reading spans" in shown and "of 75001)" in shown, shown
    assert "writing spans 100% (75001 of 75001)" in shown, shown
    assert shown.endswith("\r\x1b[K"), repr(shown[-80:])

    piped = run("export", run_file, "--chrome", tmp_path / "p.json", check_rc=0)
    assert piped.stderr == ""
    assert (tmp_path / "t.json").read_bytes() == (tmp_path / "p.json").read_bytes()
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    assert sum(e.get("ph") == "X" for e in events) == 75_001


def test_ring_options_are_checked():
    with pytest.raises(ValueError, match="on_full must be 'drop' or 'block'"):
        stepwatch.Profiler(on_full="wait")
    with pytest.raises(ValueError, match="ring_capacity .* over the limit"):
        stepwatch.Profiler(ring_capacity=stepwatch.MAX_RING_CAPACITY + 1)
    bad = run("run", "--on-full", "wait", "--", "true", check_rc=2)
    assert "--on-full takes drop or block" in bad.stderr
    bad = run("run", "--ring-capacity", "0", "--", "true", check_rc=2)
    assert "--ring-capacity takes a number of events from 1 to" in bad.stderr
