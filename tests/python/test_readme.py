"""The README's snippets run as a new user would (issue 38): the shell start under
`stepwatch run` on a real torch script, the Lightning start after a bare `import stepwatch`,
and the C start compiled against this build's library and run. Each block is read from the
README itself, so a snippet that stops working fails here."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
BIN = os.path.dirname(sys.executable)


def blocks(lang):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


def one_block(lang, containing):
    found = [b for b in blocks(lang) if containing in b]
    assert len(found) == 1, f"README: want one {lang} block with {containing!r}, found {found}"
    return found[0]


TRAIN = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
"""


def test_zero_code_start(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("STEPWATCH_RUN_FILE", None)
    commands = [line.split("#")[0].strip() for line in
                one_block("sh", "stepwatch run --").splitlines()]
    assert commands and commands[0].startswith("stepwatch run -- python train.py")
    for cmd in filter(None, commands):
        run = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, (cmd, run.stdout[-2000:], run.stderr[-2000:])
        if cmd.startswith("stepwatch run"):
            assert "stepwatch-0.db" in run.stderr + run.stdout, run.stderr[-2000:]
            assert "forward" in run.stdout + run.stderr
    page = (tmp_path / "report.html").read_text()
    assert "<html" in page.lower() and len(page) > 10_000


def test_lightning_start_after_a_bare_import(tmp_path):
    pytest.importorskip("lightning")
    code = one_block("python", "lightning.Trainer(")
    check = code + "\nassert isinstance(trainer.profiler, stepwatch.lightning.Profiler)\n"
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_c_start_compiles_and_runs(tmp_path):
    build = os.environ.get("SW_BUILD_DIR")
    cc = shutil.which("cc")
    if not build or not os.path.exists(os.path.join(build, "libstepwatch.so")) or cc is None:
        pytest.skip("needs SW_BUILD_DIR with libstepwatch.so and a C compiler")
    src = tmp_path / "train.c"
    src.write_text(one_block("c", "sw_profiler_new"))
    exe = tmp_path / "train"
    compiled = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", str(src),
                               "-I", os.path.join(ROOT, "include"), "-L", build,
                               f"-Wl,-rpath,{build}", "-lstepwatch", "-o", str(exe)],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    run = subprocess.run([str(exe)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "STEPWATCH_RUN_FILE"})
    assert run.returncode == 0, run.stderr
    assert re.search(r"^train/forward .* 99 ", run.stdout, re.M), run.stdout  # 1 warm-up step
