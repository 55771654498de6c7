"""`stepwatch run` around a program as a new user writes it (issue 28): `python -m stepwatch
run` is the command itself; a program that makes its own stepwatch.Profiler has that profiler
recorded and reported, and every run file it writes named at exit; a Ctrl-C traceback starts
at the program's frames. Real processes, the installed command, real run files."""
import os
import re
import signal
import subprocess
import sys
import textwrap

import stepwatch

OWN_PROFILER = """
import sys, stepwatch
kwargs = {"run_file": sys.argv[1]} if len(sys.argv) > 1 else {}
prof = stepwatch.Profiler(name="mine", **kwargs)
work = prof.action("forward")
for i in range(30):
    with prof.step(4):
        with work:
            sum(range(2000))
print(prof.report())
prof.close()
"""


def run(args, cwd, timeout=300):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for name in ("STEPWATCH_RUN_FILE", "STEPWATCH_RUN_FILE_OWNER", "STEPWATCH_RUN_FILE_LIST"):
        env.pop(name, None)
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env)


def named_files(stderr):
    """The paths of the `stepwatch: run file: ...` line."""
    line = re.search(r"^stepwatch: run file: (.*?)(?: \(\d+ files: .*\))?$", stderr, re.M)
    assert line, stderr[-2000:]
    return line.group(1).split(", ")


def test_python_m_stepwatch_run_is_stepwatch_run(tmp_path):
    """The same run file, in the same place, and the same closing line as the C command."""
    (tmp_path / "train.py").write_text(OWN_PROFILER)
    done = run([sys.executable, "-m", "stepwatch", "run", "--no-live", "--", "python",
                "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert named_files(done.stderr) == [str(tmp_path / "stepwatch-0.db")]
    assert stepwatch.load(str(tmp_path / "stepwatch-0.db")).info()["steps"] == 30


def test_the_programs_own_profiler_is_the_runs(tmp_path):
    """autorun's profiler is made first; the program's takes the run over: the run file and
    the report at exit hold its 30 steps, and diagnose counts the rank the HTML shows."""
    (tmp_path / "train.py").write_text(OWN_PROFILER)
    done = run([sys.executable, "-m", "stepwatch", "run", "--no-live", "--format", "json",
                "--", "python", "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    db = tmp_path / "stepwatch-0.db"
    assert named_files(done.stderr) == [str(db)]
    info = stepwatch.load(str(db)).info()
    assert info["name"] == "mine" and info["steps"] == 30
    report = done.stderr[done.stderr.index("{"):done.stderr.rindex("}") + 1]
    assert '"steps": 30' in report and '"name": "mine"' in report
    assert "1 rank," in stepwatch.diagnose(str(db))
    html = tmp_path / "report.html"
    stepwatch.html(str(db), str(html))
    assert '"ranks": 1' in html.read_text()


def test_a_run_file_the_program_names_itself_is_named_at_exit(tmp_path):
    (tmp_path / "train.py").write_text(OWN_PROFILER)
    done = run([sys.executable, "-m", "stepwatch", "run", "--no-live", "--", "python",
                "train.py", "own.db"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert named_files(done.stderr) == [str(tmp_path / "own.db")]
    assert not (tmp_path / "stepwatch-0.db").exists()
    assert stepwatch.load(str(tmp_path / "own.db")).info()["steps"] == 30


def test_a_profiler_made_after_autoruns_steps_leaves_the_run_alone(tmp_path):
    """autorun found steps first (torch's optimizer): the run stays its own, and the file the
    program's later profiler writes is named beside it."""
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch, stepwatch
        m = torch.nn.Linear(2, 1)
        o = torch.optim.SGD(m.parameters(), 0.1)
        for i in range(6):
            o.zero_grad()
            m(torch.randn(4, 2)).sum().backward()
            o.step()
        late = stepwatch.Profiler(name="late", run_file="late.db")
        with late.step(1):
            pass
        late.close()
    """))
    done = run([sys.executable, "-m", "stepwatch", "run", "--no-live", "--", "python",
                "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert named_files(done.stderr) == [str(tmp_path / "stepwatch-0.db"),
                                        str(tmp_path / "late.db")]
    assert stepwatch.load(str(tmp_path / "stepwatch-0.db")).info()["steps"] == 6
    assert stepwatch.load(str(tmp_path / "late.db")).info()["steps"] == 1


def test_ctrl_c_traceback_starts_at_the_programs_frames(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import os, signal
        def train():
            os.kill(os.getpid(), signal.SIGINT)
        train()
    """))
    done = run([sys.executable, "-m", "stepwatch", "run", "--no-live", "--", "python",
                "train.py"], tmp_path)
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    tb = done.stderr[done.stderr.index("Traceback (most recent call last):"):]
    frames = re.findall(r'^  File "([^"]+)", line \d+, in (\S+)', tb, re.M)
    assert frames[0] == (str(tmp_path / "train.py"), "<module>"), tb  # absolute, as python
    assert [f for f, _ in frames if f != str(tmp_path / "train.py")] == [], tb
    assert tb.rstrip().endswith("KeyboardInterrupt")
    assert "stepwatch: run file:" in done.stderr  # the run file is still named
