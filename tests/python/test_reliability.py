"""stepwatch never hurts the job it watches (docs/reliability.md), from Python, with real torch:
spawn and fork DataLoader workers, subprocesses inheriting `stepwatch run`'s environment, run
files that cannot be written, name limits, all-or-nothing outputs."""
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap

import pytest

import stepwatch

# A module the training script imports, as a spawn worker imports it too: making a profiler
# at import is what code does (a library's default profiler, a logging helper).
DATA_MODULE = """
import os, torch, stepwatch
prof = stepwatch.Profiler(name="imported")
with open(os.path.join(os.environ["SW_TEST_OUT"], f"import-{os.getpid()}.txt"), "w") as f:
    f.write(repr(prof.run_file))

class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.randn(4, 3), torch.randn(4, 1)
"""

TRAIN_SCRIPT = """
import torch
from data_mod import Batches
m = torch.nn.Linear(3, 1)
o = torch.optim.SGD(m.parameters(), 0.1)
if __name__ == "__main__":
    loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn",
                                         persistent_workers=True)
    for epoch in range(2):
        for x, y in loader:
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    print("trained")
"""


def completed(path):
    """Did the run complete its file (ranks.complete, read with plain SQLite)?"""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT min(complete) FROM ranks").fetchone()[0] == 1
    finally:
        db.close()


def stepwatch_run(args, tmp_path, build_dir, timeout=600):
    """`stepwatch run ARGS` with the C command when it is built, else `python -m stepwatch`."""
    exe = os.path.join(build_dir or "", "stepwatch")
    cmd = [exe] if build_dir and os.access(exe, os.X_OK) else [sys.executable, "-m", "stepwatch"]
    env = dict(os.environ, SW_TEST_OUT=str(tmp_path),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    env.pop("STEPWATCH_RUN_FILE_OWNER", None)
    return subprocess.run(cmd + ["run"] + args, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def test_spawn_workers_under_stepwatch_run(tmp_path, build_dir):
    """Spawn workers import the training code, which makes a profiler: they leave the run file
    alone, and every training completes (3 of 6 crashed when workers took the file over;
    each training here takes ~25 s, spawn workers import torch)."""
    (tmp_path / "data_mod.py").write_text(DATA_MODULE)
    (tmp_path / "train.py").write_text(TRAIN_SCRIPT)
    for attempt in range(2):
        run_file = tmp_path / f"run{attempt}.db"
        out = stepwatch_run(["--run-file", str(run_file), "--", "python", "train.py"], tmp_path,
                            build_dir)
        assert out.returncode == 0, out.stderr
        assert "trained" in out.stdout
        assert "exited unexpectedly" not in out.stderr
        assert "run file not written" not in out.stderr  # the workers say nothing
        assert completed(run_file)
        assert stepwatch.load(str(run_file)).info()["steps"] == 16
    # The profiler the import made in the training process is the program's own: it takes
    # the run over from autorun's (docs/python.md), the instrumentation's steps with it; in
    # every worker (a child) it has no file: 2 trainings x (1 + 2 workers).
    seen = sorted(p.read_text() for p in tmp_path.glob("import-*.txt"))
    assert len(seen) == 2 * 3 and seen.count("None") == 4, seen
    assert sorted(s for s in seen if s != "None") == [repr(str(tmp_path / "run0.db")),
                                                      repr(str(tmp_path / "run1.db"))], seen


EVAL_SCRIPT = """
import stepwatch, sys
p = stepwatch.Profiler(name="eval")
for i in range(3):
    with p.step(1):
        pass
print("eval run_file", p.run_file)
p.close()
"""

PARENT_SCRIPT = """
import os, subprocess, sys, stepwatch
p = stepwatch.Profiler(name="parent")
for i in range(10):
    with p.step(1):
        pass
# A subprocess started with the process's environment, and one with a copy of os.environ.
subprocess.run([sys.executable, "eval.py"], check=True)
subprocess.run([sys.executable, "eval.py"], check=True, env=dict(os.environ))
for i in range(5):
    with p.step(1):
        pass
p.close()
"""


def test_subprocesses_leave_the_parents_run_file_alone(tmp_path, build_dir):
    (tmp_path / "eval.py").write_text(EVAL_SCRIPT)
    (tmp_path / "parent.py").write_text(PARENT_SCRIPT)
    run_file = tmp_path / "run.db"
    # Through a shell, so that the script's own profiler is the first (not autorun's).
    out = stepwatch_run(["--run-file", str(run_file), "--", "sh", "-c", "python parent.py"],
                        tmp_path, build_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("eval run_file None") == 2
    info = stepwatch.load(str(run_file)).info()
    assert completed(run_file) and info["steps"] == 15 and info["name"] == "parent"
    # With {pid} every process writes a file of its own.
    out = stepwatch_run(["--run-file", str(tmp_path / "own-{pid}.db"), "--", "sh", "-c",
                         "python parent.py"], tmp_path, build_dir)
    assert out.returncode == 0, out.stderr
    files = sorted(tmp_path.glob("own-*.db"))
    steps = sorted(stepwatch.load(str(f)).info()["steps"] for f in files)
    assert steps == [3, 3, 15]


FORK_SQLITE_SCRIPT = """
import sqlite3, torch, stepwatch, sys
class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        db = sqlite3.connect(":memory:")  # the worker's own SQLite, right after fork
        db.execute("CREATE TABLE t(x)")
        db.execute("INSERT INTO t VALUES (?)", (i,))
        x = db.execute("SELECT x FROM t").fetchone()[0]
        db.close()
        return torch.full((2,), float(x))
prof = stepwatch.Profiler(run_file=sys.argv[1], timeline=True)
fwd = prof.action("forward")
for epoch in range(6):
    loader = torch.utils.data.DataLoader(Rows(), batch_size=4, num_workers=3,
                                         multiprocessing_context="fork")
    for x in loader:
        with prof.step(4):
            for k in range(50):  # keep the flusher busy in SQLite while workers fork
                with fwd:
                    pass
prof.close()
print("done", epoch)
"""


def test_fork_workers_use_sqlite_while_the_run_file_flushes(tmp_path):
    """Workers forked while the flusher writes can use SQLite (4 of 300 worker epochs hung
    when the flusher held SQLite's mutex across fork)."""
    script = tmp_path / "fork_sqlite.py"
    script.write_text(FORK_SQLITE_SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "run.db")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "done 5" in out.stdout
    assert stepwatch.load(str(tmp_path / "run.db")).info()["steps"] == 6 * 16


def test_a_run_file_that_cannot_be_written_never_raises(tmp_path, capfd):
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    notes = tmp_path / "notes.db"
    notes.write_text("my notes\n")
    for path, why in ((fifo, "is a FIFO"), (notes, "not a stepwatch run file"),
                      (tmp_path / "no" / "dir.db", "No such file or directory")):
        prof = stepwatch.Profiler(run_file=str(path))
        with prof.step(1):
            pass
        assert prof.run_file == str(path)
        assert prof.run_file_error is not None
        prof.close()
        assert why in capfd.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert notes.read_text() == "my notes\n"
    ok = stepwatch.Profiler(run_file=str(tmp_path / "ok.db"))
    assert ok.run_file_error is None
    ok.close()
    assert stepwatch.Profiler().run_file is None


LIMITS_SCRIPT = r"""
import os, resource, signal, sys
import stepwatch
from stepwatch import _stepwatch

tmp = sys.argv[1]
made = stepwatch.Profiler(run_file=os.path.join(tmp, "whole.db"))
for _ in range(5):
    with made.step(1):
        pass
made.close()

# Out of descriptors a few above what is open now: the run file's WAL, its writer's pipes.
low = os.dup(0)
os.close(low)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
for extra in range(0, 10):
    resource.setrlimit(resource.RLIMIT_NOFILE, (low + extra, hard))
    prof = stepwatch.Profiler(run_file=os.path.join(tmp, f"nofile-{extra}.db"))
    for _ in range(5):
        with prof.step(1):
            pass
    print("ERROR", extra, prof.run_file_error, flush=True)
    assert prof.snapshot().info()["steps"] == 5  # training went on
    prof.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

# A file-size limit while html() writes its page: the error names the page and the cause.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
page = os.path.join(tmp, "page.html")
try:
    _stepwatch.html(os.path.join(tmp, "whole.db"), page)
except stepwatch.Error as e:
    print("HTML", e.name, e, flush=True)
"""


def test_resource_limits_are_said_with_the_file_and_cause(tmp_path):
    """Out of descriptors: run_file_error names the file and the cause at each place the run
    file needs one (never a bare "input/output error"), and training goes on; html() past a
    file-size limit names the page and the cause."""
    script = tmp_path / "limits.py"
    script.write_text(LIMITS_SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    errors = [line.split(" ", 2)[2] for line in out.stdout.splitlines()
              if line.startswith("ERROR") and not line.endswith(" None")]
    assert len(errors) >= 3, out.stdout  # the limits reached the file, its WAL, its pipes
    for why in errors:
        assert "nofile-" in why and "Too many open files" in why, why
        assert "input/output error" not in why, why
    assert any("pipe" in why for why in errors), errors
    html = [line for line in out.stdout.splitlines() if line.startswith("HTML")]
    assert html and "IO" in html[0] and "page.html" in html[0], out.stdout
    assert "File too large" in html[0], html
    assert not (tmp_path / "page.html").exists()


def test_a_name_per_step_never_stops_training(tmp_path, capfd):
    """Issue 43 item 4: 100,000 distinct action names (an f-string per step) in a real torch
    loop raised stepwatch.Error (LIMIT) at the 4,091st. Now the names past the table's 4,096
    are recorded as one "(other actions)" row, counted exactly; said once on stderr, in a
    note and by diagnose; the run file keeps it. Phases and counters likewise."""
    import torch
    import stepwatch.torch as swtorch
    run = tmp_path / "names.db"
    prof = stepwatch.Profiler(run_file=str(run))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x, y = torch.randn(2, 4), torch.randn(2, 1)
    steps = 100_000
    swtorch.instrument(prof)
    try:
        for i in range(steps):
            opt.zero_grad()
            with prof.action(f"batch {i} loss"):  # the common mistake
                loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if i < 300:
                prof.counter(f"loss of batch {i}", 1.0)
    finally:
        swtorch.uninstrument()
    rows = {r["action"]: r for r in prof.records("all")}  # before the phases below: their
    for i in range(40):                                    # actions are folded too
        with prof.phase(f"stage {i}"):
            pass
    err = capfd.readouterr().err
    assert err.count("the action table is full") == 1, err[-2000:]
    own = sorted(int(r["action"].split()[1]) for r in prof.records("all")
                 if r["action"].startswith("batch "))
    assert own == list(range(len(own)))  # the first names kept their rows, in order
    assert f"'batch {len(own)} loss' and every later new action name" in err, err[-2000:]
    assert "'(other actions)'" in err
    assert err.count("the counter table is full") == 1 and err.count("the phase table is full") == 1
    own = [n for n in rows if n.startswith("batch ")]
    past = steps - len(own)  # the names past the cap
    assert len(own) > 4000 and past > 95_000
    other = rows["(other actions)"]
    assert other["count"] + other.get("warmup_count", 0) == past, other
    assert all(rows[n]["count"] + rows[n].get("warmup_count", 0) == 1 for n in own)
    assert rows["step"]["count"] + rows["step"].get("warmup_count", 0) == steps
    assert prof.action("batch 99999 loss").name == "(other actions)"
    notes = prof.snapshot().info()["notes"]
    # every lookup past the cap: the names, the one above, and the 40 phases' actions (26
    # phases of their own, then the one "(other phases)": 27 more)
    assert f"{past + 1 + 27} lookups of new action names" in notes["limit.actions"], notes
    assert "limit.counters" in notes and "limit.phases" in notes
    prof.close()
    run_rows = {r["action"]: r for r in stepwatch.load(str(run)).records("all")}
    assert run_rows["(other actions)"]["count"] == other["count"] + 40  # and the 40 phases'
    out = subprocess.run([os.path.join(os.environ["SW_BUILD_DIR"], "stepwatch"), "diagnose",
                          str(run)], capture_output=True, text=True)
    assert "The actions table is full: new names share one row" in out.stdout, out.stdout


def test_write_output_is_all_or_nothing(tmp_path):
    path = tmp_path / "report.txt"
    stepwatch.write_output(str(path), "first\n")
    stepwatch.write_output(str(path), b"second\n")
    assert path.read_text() == "second\n"
    with pytest.raises(stepwatch.Error, match="is a directory"):
        stepwatch.write_output(str(tmp_path), "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


def test_arguments_are_checked_never_wrapped():
    """Issue 29 item 9: Python ints are refused, not wrapped to 32 bits, and a name with a NUL
    is refused instead of sharing an id with every name that has the same start."""
    for bad, exc in ((-1, ValueError), (2**32 + 3, OverflowError), (2**64, OverflowError)):
        with pytest.raises(exc, match="warmup_steps"):
            stepwatch.Profiler(warmup_steps=bad)
        with pytest.raises(exc, match="max_depth"):
            stepwatch.Profiler(max_depth=bad)
    with pytest.raises(OverflowError, match="ring_capacity"):
        stepwatch.Profiler(ring_capacity=2**33)
    with pytest.raises(ValueError, match="ring_capacity"):
        stepwatch.Profiler(ring_capacity=-5)
    with pytest.raises(TypeError, match="warmup_steps"):
        stepwatch.Profiler(warmup_steps="3")
    p = stepwatch.Profiler(warmup_steps=3, max_depth=8)
    with pytest.raises(ValueError, match="embedded null"):
        p.action("a\0b")
    with pytest.raises(ValueError, match="embedded null"):
        p.phase("train\0x")
    with pytest.raises(ValueError, match="embedded null"):
        p.counter("loss\0", 1.0)
    with pytest.raises(ValueError, match="embedded null"):
        p.note("k\0", "v")
    a, b = p.action("a"), p.action("ab")
    assert a is not b
    for _ in range(5):
        with p.step(1):
            with a:
                pass
    info = p.snapshot().info()
    assert info["warmup_steps"] == 3 and info["steps"] == 5
    p.close()
