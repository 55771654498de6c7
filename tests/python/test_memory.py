"""Memory per step on real torch loops: the RSS of every step in the run file, the memory line
of the reports, and `stepwatch diagnose` finding memory drift in a loop that keeps a tensor
every step (a leak) and not in the same loop that lets it go."""
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

import stepwatch  # noqa: E402

# A real training loop under `stepwatch run` (zero code changes): a small MLP, SGD, a
# DataLoader; with "leak", each step keeps a 1 MiB tensor in a list, the classic leak of a
# history kept with the step. One thread and 100 steps keep it quick on a loaded machine.
LOOP = r"""
import sys, torch
torch.set_num_threads(1)
leak = sys.argv[1] == "leak"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(100 * 64, 256), torch.randint(0, 10, (100 * 64,)))
kept = []
for x, y in torch.utils.data.DataLoader(data, batch_size=64):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    extra = torch.randn(256 * 1024)  # 1 MiB, written: resident
    if leak:
        kept.append(extra)
"""


def run_loop(tmp_path, kind):
    db = tmp_path / f"{kind}.db"
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--run-file", str(db),
                           "--no-live", "-c", LOOP, kind], capture_output=True, text=True,
                          timeout=600, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    return str(db)


def diagnose(db):
    done = subprocess.run([sys.executable, "-m", "stepwatch", "diagnose", "-f", "json", db],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr  # 1: problems found
    return {f["id"]: f for f in json.loads(done.stdout)["findings"]}


def test_a_leaking_loop_is_found_as_drift(tmp_path):
    db = run_loop(tmp_path, "leak")
    steps = stepwatch.load_steps(db)
    assert len(steps) == 100
    rss = [s["rss_bytes"] for s in steps]
    assert all(r is not None and r > 0 for r in rss)
    assert all(s["allocated_bytes"] is None for s in steps)  # no CUDA here
    # 100 x 1 MiB kept: the RSS rose by at least most of it over the run
    assert rss[-1] - rss[0] > 80 * 2**20
    info = stepwatch.load(db).info()["memory"]
    assert info["rss_steps"] == 100 and info["rss_max"] >= rss[-1]

    found = diagnose(db)
    assert "memory-drift" in found, list(found)
    drift = found["memory-drift"]
    numbers = {n["name"]: n["value"] for n in drift["numbers"]}
    # 1 MiB a step: 1,000 MiB per 1,000 steps kept (the RSS also holds what torch and
    # malloc add around it, so at least that)
    per_1000 = numbers["slope per 1,000 steps"] / 2**20
    assert 900 < per_1000 < 3000, per_1000
    assert numbers["rise began at step"] < 20
    assert "RSS" in drift["title"]

    # The text report has the memory line.
    text = subprocess.run([sys.executable, "-m", "stepwatch", "report", db], capture_output=True,
                          text=True, timeout=300).stdout
    assert "Memory per step: RSS max" in text


def test_a_flat_loop_is_not_drift(tmp_path):
    db = run_loop(tmp_path, "flat")
    steps = stepwatch.load_steps(db)
    assert len(steps) == 100 and all(s["rss_bytes"] for s in steps)
    assert "memory-drift" not in diagnose(db)


def test_memory_off(tmp_path):
    db = tmp_path / "off.db"
    p = stepwatch.Profiler(run_file=str(db), memory=False)
    for _ in range(3):
        with p.step(1):
            pass
    assert p.snapshot().info()["memory"]["rss_steps"] == 0
    p.close()
    assert all(s["rss_bytes"] is None for s in stepwatch.load_steps(str(db)))


def test_memory_chart_in_chromium(tmp_path):
    """The HTML report's memory-per-step chart, drawn by real headless Chromium: its line of
    the RSS across the steps, its summary line, and the layout rules of the other charts (no
    label cut or overlapping: test_html_layout's checker)."""
    from test_html_layout import chromium, layout

    db, page = tmp_path / "grow.db", tmp_path / "grow.html"
    # In a fresh process: the suite's own RSS (torch, Lightning...) would flatten the line,
    # whose axis starts at 0.
    grow = ("import sys, time, stepwatch\n"
            "p = stepwatch.Profiler(name='grow', run_file=sys.argv[1], live=False)\n"
            "kept = []\n"
            "for _ in range(60):\n"
            "    with p.step(1):\n"
            "        kept.append(bytearray(b'x' * (1 << 20)))  # 1 MiB, touched\n"
            "        time.sleep(0.011)  # past the 10 ms between two RSS reads\n"
            "p.close()\n")
    subprocess.run([sys.executable, "-c", grow, str(db)], check=True, timeout=120)
    stepwatch.html(str(db), str(page))
    check = layout(page, tmp_path, 1000)
    assert check["charts"] >= 3
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1000,3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert 'data-chart="memory"' in dom
    line = re.search(r'<polyline points="([^"]*)"[^>]*class="memory"[^>]*data-series="RSS"', dom)
    assert line, dom[-3000:]
    ys = [float(xy.split(",")[1]) for xy in line.group(1).split()]
    assert len(ys) >= 30
    assert ys[-1] < ys[0] - 20  # SVG y grows downwards: the line climbs with the RSS
    assert "Memory per step: RSS max" in dom
