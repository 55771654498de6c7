"""The live status line on a real pseudo-terminal, read back through a VT100 emulator (pyte):
it shows at the bottom row while steps run, the program's own lines (stdout and stderr, a
progress bar's carriage returns) stay whole above it, and at exit it is erased and the
terminal scrolls whole again. Piped, nothing is written; --no-live / live=False silence it;
live=True to a pipe writes plain lines. And the same figures to TensorBoard."""
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap

import pytest

import stepwatch

pyte = pytest.importorskip("pyte")

ROWS, COLS = 40, 120

# A training loop of known shape: ~25 ms steps (data 10 ms, forward 15 ms), 80 steps,
# a line on stdout and one on stderr every 10 steps, and a progress bar redrawn with "\r".
PROGRAM = textwrap.dedent("""
    import sys, time, stepwatch
    live, close = {live}, {close}
    kwargs = {{}} if live == "default" else {{"live": live}}
    p = stepwatch.Profiler(name="live", **kwargs)
    data, forward = p.action("data"), p.action("forward")
    with p.phase("train"):
        for i in range(80):
            with p.step(32):
                with data:
                    time.sleep(0.010)
                with forward:
                    time.sleep(0.015)
            if i % 10 == 9:
                sys.stderr.write("\\r\\x1b[K")  # clear the progress bar, as tqdm.write does
                sys.stderr.flush()
                print(f"program line {{i // 10}} on stdout", flush=True)
                print(f"program line {{i // 10}} on stderr", file=sys.stderr, flush=True)
            else:
                sys.stderr.write(f"\\rprogress {{i:3d}}/80")
                sys.stderr.flush()
    sys.stderr.write("\\n")
    if close:
        p.close()
    print("done", flush=True)  # without close: the profiler is freed at exit, or left to exit
""")


def program(live='"default"', close=True):
    return PROGRAM.format(live=live, close=close)


def run_on_terminal(live="default", args=None, env=None, close=True):
    """Run the program with stdout and stderr on a pseudo-terminal; returns (exit code, the
    screens after each read, the final screen)."""
    try:
        master, slave = pty.openpty()
    except OSError as exc:
        pytest.skip(f"no pseudo-terminal: {exc}")
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(os.environ if env is None else env, TERM="xterm")
    env.pop("STEPWATCH_LIVE", None)
    args = args or [sys.executable, "-c", program(repr(live) if live != "default" else '"default"',
                                                  close)]
    proc = subprocess.Popen(args, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    screens = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the program exited
            break
        if not chunk:
            break
        stream.feed(chunk)
        screens.append(list(screen.display))
    os.close(master)
    return proc.wait(timeout=120), screens, screen


def program_lines(display):
    return [line.rstrip() for line in display if line.startswith("program line")]


@pytest.mark.parametrize("close", [True, False], ids=["closed", "left-to-exit"])
def test_status_line_on_a_terminal(close):
    rc, screens, screen = run_on_terminal(close=close)
    assert rc == 0
    bottoms = [s[-1] for s in screens if "steps/s" in s[-1]]
    assert bottoms, "the status line never showed"
    line = bottoms[-1]
    # 25 ms steps: about 40 steps/s and 1280 samples/s; data 10 of 25 ms; forward slowest.
    assert "stepwatch" in line and "steps/s" in line and "samples/s" in line, line
    assert "step p50" in line and "slowest forward" in line, line
    share = re.search(r"data (\d+) %", line)  # 10 of ~25 ms; wide: sleeps run long under load
    assert share and 30 <= int(share.group(1)) <= 50, line
    # Never anywhere but the last row, and never over the program's lines.
    for s in screens:
        assert not any("steps/s" in row for row in s[:-1]), s
        for row in s[:-1]:
            if row.startswith("program line"):
                assert row.rstrip().endswith(("on stdout", "on stderr")), row
    # At the end: erased, the whole screen scrolls again, every program line is whole.
    assert not any("steps/s" in row for row in screen.display)
    assert screen.margins is None or (screen.margins.top, screen.margins.bottom) == (0, ROWS - 1)
    lines = program_lines(screen.display)
    assert lines == [f"program line {k} on {s}" for k in range(8) for s in ("stdout", "stderr")]
    assert "done" in [row.rstrip() for row in screen.display]


@pytest.mark.parametrize("live", [False])
def test_live_false_draws_nothing_on_a_terminal(live):
    rc, screens, screen = run_on_terminal(live=live)
    assert rc == 0
    assert not any("steps/s" in row for s in screens for row in s)


def test_nothing_on_a_pipe_unless_forced():
    env = {k: v for k, v in os.environ.items() if k != "STEPWATCH_LIVE"}
    quiet = subprocess.run([sys.executable, "-c", program()],
                           capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0
    assert "stepwatch" not in quiet.stderr
    # Forced onto a pipe: plain lines (here every 0.5 s), no escape codes.
    env["STEPWATCH_LIVE_INTERVAL_MS"] = "500"
    forced = subprocess.run([sys.executable, "-c", program("True")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert forced.returncode == 0
    plain = [line for line in forced.stderr.splitlines() if "stepwatch  " in line]
    assert plain and "steps/s" in plain[0]
    assert "\x1b[" not in forced.stderr.replace("\x1b[K", "")  # only the program's own


def cli():
    build = os.environ.get("SW_BUILD_DIR")
    if not build or not os.path.exists(os.path.join(build, "stepwatch")):
        pytest.fail("SW_BUILD_DIR must point at a build with the stepwatch command")
    return os.path.join(build, "stepwatch")


def test_stepwatch_run_live_flags(tmp_path):
    """stepwatch run --no-live silences the line on a terminal; --live forces it on a pipe
    (the C command passes STEPWATCH_LIVE to the program)."""
    script = tmp_path / "train.py"
    script.write_text(program())
    rc, screens, _ = run_on_terminal(args=[cli(), "run", "--run-file", str(tmp_path / "a.db"),
                                           "--no-live", "--", sys.executable, str(script)])
    assert rc == 0
    assert not any("steps/s" in row for s in screens for row in s[:-1] + s[-1:])
    env = dict(os.environ, STEPWATCH_LIVE_INTERVAL_MS="500")
    forced = subprocess.run([cli(), "run", "--run-file", str(tmp_path / "b.db"), "--live", "--",
                             sys.executable, str(script)], capture_output=True, text=True,
                            env=env, timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert any("stepwatch  " in line and "steps/s" in line
               for line in forced.stderr.splitlines()), forced.stderr


def test_live_figures_and_tensorboard(tmp_path):
    import time

    p = stepwatch.Profiler(name="tb", live=False)
    data, forward = p.action("data"), p.action("forward")
    live = stepwatch.Live(p, window_s=5.0)
    first = live.update()
    assert first["steps"] == 0 and first["steps_per_s"] == 0.0 and first["step_p50_ns"] is None
    with p.phase("train"):
        for _ in range(20):
            with p.step(16):
                with data:
                    time.sleep(0.003)
                with forward:
                    time.sleep(0.009)
    v = live.update()
    assert v["steps"] == 20 and v["total_steps"] == 20
    # >= 12 ms steps, measured over the window (5 s would give 4/s); sleeps run long under load.
    assert 15 < v["steps_per_s"] < 84
    assert v["samples_per_s"] == pytest.approx(16 * v["steps_per_s"], rel=1e-6)
    assert 0.1 < v["data_share"] < 0.4 and v["slowest"] == "forward"
    assert 11e6 < v["step_p50_ns"] <= v["step_p99_ns"] < 1e9
    assert live.format().startswith("stepwatch  ")
    assert len(live.format(width=40)) <= 40

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = stepwatch.live.TensorBoard(p, log_dir=str(tmp_path / "tb"), every_s=0.2)
    with p.phase("train"):
        for _ in range(30):
            with p.step(16):
                with forward:
                    time.sleep(0.01)
    board.close()
    p.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("stepwatch/steps_per_s", "stepwatch/samples_per_s", "stepwatch/step_p50_ms",
                "stepwatch/step_p99_ms", "stepwatch/data_share"):
        assert tag in tags, tags
    last = acc.Scalars("stepwatch/steps_per_s")[-1]  # close's write: the window up to now
    assert last.step == 50 and 5 < last.value < 101


SLOW_PROGRAM = textwrap.dedent("""
    import time, stepwatch
    p = stepwatch.Profiler(name="live", live=True)
    with p.phase("train"):
        for i in range(100):
            with p.step(8):
                time.sleep(0.3 if i in (60, 70, 80) else 0.01)
    time.sleep(1.2)  # a line after the last slow step
    p.close()
""")


def test_status_line_counts_slow_steps():
    """The line counts the slow steps found so far (docs/slow-steps.md): fewer before the
    first injected one than at the end, then at least the injected ones (the machine may add
    its own)."""
    env = dict(os.environ, STEPWATCH_LIVE_INTERVAL_MS="500")
    forced = subprocess.run([sys.executable, "-c", SLOW_PROGRAM], capture_output=True,
                            text=True, env=env, timeout=120)
    assert forced.returncode == 0, forced.stderr
    lines = [line for line in forced.stderr.splitlines() if "steps/s" in line]
    counts = [int(m.group(1)) if m else 0
              for m in (re.search(r"  (\d+) slow steps?$", line) for line in lines)]
    # the first line comes before step 60 (0.6 s in, at least): before the injected ones
    assert counts and counts[-1] >= 3 and counts[0] < counts[-1], lines
    assert counts == sorted(counts), lines
