"""`stepwatch run` on whole scripts (tests/python/scripts/), each in its own process: the
loop shapes a process of their own decides (no optimizer object at all, DataLoader workers
made by fork and by spawn, torch.compile with its default options), the command's options
(-m, -c, --warmup, --forward), and the message naming the run file. Each script times its
own loop (torchtruth) and writes that down; the run file must agree."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

import stepwatch  # noqa: E402
from torchtruth import Truth, check, retried_on_load  # noqa: E402

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def cli(build_dir):
    exe = os.path.join(build_dir or "", "stepwatch")
    if not build_dir or not os.access(exe, os.X_OK):
        pytest.skip(f"no C command at {exe} (SW_BUILD_DIR)")
    return exe


def run(argv, tmp_path, timeout=600, **env):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               **env)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def script_run(tmp_path, name, *args):
    """python -m stepwatch run --run-file ... -- python scripts/name truth.json args...;
    returns (run file, the script's truth, the finished process)."""
    db, truth = tmp_path / "run.db", tmp_path / "truth.json"
    done = run([sys.executable, "-m", "stepwatch", "run", "--run-file", str(db), "--",
                "python", os.path.join(SCRIPTS, name), str(truth), *args], tmp_path,
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    return str(db), Truth.load(truth), done


@retried_on_load
def test_no_optimizer_object_a_step_ends_with_the_backward(tmp_path):
    path, truth, _ = script_run(tmp_path, "manual_sgd.py")
    check(path, truth, categories=("data", "forward", "loss", "backward"))
    notes = stepwatch.load(path).info()["notes"]
    assert notes["step_rule"] == "backward"
    assert "no optimizer object" in notes["not_separated.optimizer"]


@retried_on_load
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers(tmp_path, method):
    path, truth, _ = script_run(tmp_path, "workers.py", method)
    steps = check(path, truth)
    assert [s["batch_size"] for s in steps] == [4] * 12
    # modules the workers called (the transform) are theirs: one forward a step here
    forward = {r["action"]: r for r in stepwatch.load(path).records("train")}["forward"]
    assert forward["count"] == 12


@retried_on_load
def test_torch_compile_runs_and_is_timed(tmp_path):
    """A compiled module, a compiled function and module.compile() with the default options
    (inductor, a C compiler): the script runs, torch breaks none of its graphs (the patched
    Module.__call__ and functional losses are not in its way), and the compiled calls are
    the forward."""
    path, truth, done = script_run(tmp_path, "compiled.py")
    assert "graph_breaks 0 graphs 3" in done.stdout
    # compiling is the forward's time (seconds); the rest is not napped here: only counted
    check(path, truth, categories=("forward",), other=False, step_time=False)
    train = {r["action"]: r for r in stepwatch.load(path).records("train")}
    assert [train[a]["count"] for a in ("forward", "loss", "backward", "optimizer")] == [6] * 4
    check(path, truth, "valid", categories=("forward",), other=False, step_time=False)
    valid = {r["action"]: r for r in stepwatch.load(path).records("valid")}
    assert valid["forward"]["count"] == 6


MODULE = """
import sys, torch
m = torch.nn.Linear(4, 1)
o = torch.optim.SGD(m.parameters(), 0.1)
for _ in range(5):
    o.zero_grad()
    torch.nn.functional.mse_loss(m(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    o.step()
import stepwatch.torch
print("argv", sys.argv[1:], "forward", stepwatch.torch.instrumented().forward)
"""


@pytest.mark.parametrize("how", ["-m", "-c", "python -c", "python -m"])
def test_stepwatch_run_runs_modules_and_code_like_python(tmp_path, build_dir, how):
    (tmp_path / "trainmod.py").write_text(MODULE)
    exe = cli(build_dir)
    what = "trainmod" if how.endswith("-m") else MODULE
    flag = how.split()[-1]
    command = ["--", sys.executable, flag, what] if how.startswith("python") else [flag, what]
    done = run([exe, "run", "--warmup", "2", "--forward", "hooks", *command, "a", "-b"],
               tmp_path, PYTHONPATH=str(tmp_path))
    assert "argv ['a', '-b'] forward hooks" in done.stdout
    assert "Warm-up (first 2 steps per phase)" in done.stderr
    assert "5 steps (rule: optimizer)" in done.stderr
    db = tmp_path / "stepwatch-0.db"
    assert done.stderr.rstrip().endswith(f"stepwatch: run file: {db}")
    assert stepwatch.load(str(db)).info()["steps"] == 5


def test_a_failing_script_still_reports_and_names_its_file(tmp_path, build_dir):
    exe = cli(build_dir)
    script = tmp_path / "fail.py"
    script.write_text("import torch\ntorch.nn.Linear(2, 1)(torch.randn(1, 2))\n"
                      "raise SystemExit(3)\n")
    done = subprocess.run([exe, "run", "--run-file", str(tmp_path / "out-{rank}.db"), "--",
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, RANK="1", WORLD_SIZE="2"))
    assert done.returncode == 3
    assert "forward" in done.stderr
    assert done.stderr.rstrip().endswith(f"stepwatch: run file: {tmp_path / 'out-1.db'}")
    assert json.loads(stepwatch.load(str(tmp_path / "out-1.db")).report("json"))["run"]["rank"] == 1



def test_diagnose_and_html_say_what_could_not_be_seen(tmp_path, build_dir):
    """A run whose loop no rule could read (batches fetched, nothing done with them) and one
    whose loss lives inside the model: diagnose says so with the reason and what to do, never
    "No problems found"; the HTML report carries the same findings."""
    exe = cli(build_dir)
    nothing = tmp_path / "nothing.py"
    nothing.write_text("import torch\nfrom torch.utils.data import DataLoader\n"
                       "for batch in DataLoader(torch.randn(8, 2), batch_size=4):\n"
                       "    batch.sum()\n")
    inside = tmp_path / "inside.py"
    inside.write_text(MODULE.replace(
        "torch.nn.functional.mse_loss(m(torch.randn(8, 4)), torch.randn(8, 1))",
        "Net()(torch.randn(8, 4), torch.randn(8, 1))").replace(
        "m = torch.nn.Linear(4, 1)", "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 1)\n"
        "    def forward(self, x, y):\n"
        "        return torch.nn.functional.mse_loss(self.lin(x), y)\n"
        "m = Net()"))
    for script, finding in ((nothing, "No step boundary found"),
                            (inside, "loss could not be timed apart")):
        db = tmp_path / (script.stem + ".db")
        run([exe, "run", "--run-file", str(db), "--", sys.executable, str(script)], tmp_path)
        text = run([exe, "diagnose", str(db)], tmp_path).stdout
        assert finding in text and "No problems found" not in text, text
        html = tmp_path / (script.stem + ".html")
        run([exe, "html", str(db), "-o", str(html)], tmp_path)
        assert finding in html.read_text()
    assert "DataLoader batches were fetched, but no model call" in \
        run([exe, "diagnose", str(tmp_path / "nothing.db")], tmp_path).stdout
