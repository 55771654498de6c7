"""The HTML page's efficiency: the at-a-glance table of each phase's FLOPs, FLOP/s and MFU (the
JSON report's "efficiency" object), the FLOP/s and MFU columns on the training phases' rows of
"Actions per phase", and on the compare page both runs' goodput with the change per cause.
Real runs (a Linear stack trained under Profiler(flops=...)), drawn by real headless
Chromium; every figure shown is checked against the run's own notes."""
import json
import re
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import stepwatch  # noqa: E402
from test_html_layout import chromium, layout  # noqa: E402,F401  (the page's layout rules)


def train(path, name, data_wait_s):
    """8 steps of a Linear stack, phases marked by hand; data_wait_s of data wait a step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    prof = stepwatch.Profiler(name=name, run_file=str(path), warmup_steps=1, live=False,
                              flops={"peak_flops": 1e12})
    data, fwd, bwd, step = (prof.action(a) for a in ("data", "forward", "backward", "optimizer"))
    with prof.phase("train"):
        for _ in range(8):
            with prof.step(16):
                with data:
                    time.sleep(data_wait_s)
                    x, y = torch.randn(16, 32), torch.randn(16, 8)
                with fwd:
                    loss = F.mse_loss(model(x), y)
                with bwd:
                    loss.backward()
                with step:
                    opt.step()
                    opt.zero_grad()
    prof.close()
    return dict(stepwatch.load(str(path)).info()["notes"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("efficiency_html")
    a, b = d / "a.db", d / "b.db"
    notes = train(a, "baseline", 0.001), train(b, "new", 0.02)  # the new one waits for data
    torch.set_num_threads(old)
    return d, a, b, notes


# what the page's script writes (report.js: sig3, fmtSi, fmtPct)
def sig3(x):
    a = abs(x)
    digits = 0 if a == 0 or a >= 99.95 else 1 if a >= 9.995 else 2 if a >= 0.9995 else 3
    return f"{x:.{digits}f}"


def si(v, unit):
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale * 0.9995:
            return f"{sig3(v / scale)} {prefix}{unit}"
    return f"{sig3(v)} {unit}"


def pct(v):
    return f"{v:.1f} %"


TABLES = r"""<script>
window.addEventListener("load", function () {
  var out = {};
  ["efficiency", "phases", "goodput-compare"].forEach(function (t) {
    var table = document.querySelector("table[data-table=" + t + "]");
    if (!table) return;
    out[t] = { head: [].map.call(table.querySelectorAll("th"), function (th) { return th.textContent; }),
      rows: [].map.call(table.querySelectorAll("tbody tr"), function (tr) {
        return [].map.call(tr.querySelectorAll("td"), function (td) { return td.textContent; }); }) };
  });
  var h = document.querySelector(".goodput-compare .glance-head");
  out.head = h ? h.textContent : null;
  var pre = document.createElement("pre"); pre.id = "sw-tables"; pre.style.display = "none";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def tables(html, tmp_path, width=1400, layouts=(1200,)):
    page = tmp_path / f"tables_{html.stem}.html"
    page.write_text(html.read_text().replace("</body>", TABLES + "</body>"))
    for w in layouts:  # no sideways scroll, nothing cut or overlapping, no errors
        layout(html, tmp_path, w)
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          f"--window-size={width},3000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="sw-tables"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_efficiency_table_and_phase_columns(runs, tmp_path):
    d, a, _, (notes, _) = runs
    html = d / "a.html"
    stepwatch.html(a, html)
    doc = json.loads(stepwatch.load(str(a)).report("json"))
    phases = {e["phase"]: e for e in doc["efficiency"]["phases"]}
    assert phases["forward"]["flops_per_s"] == float(notes["tflops_forward"]) * 1e12
    assert "flops_per_s_device" not in phases["forward"]  # no device time in this run
    t = tables(html, tmp_path, layouts=(800, 1200, 1400))
    eff = t["efficiency"]
    assert eff["head"] == ["Phase", "FLOP/step", "FLOP/s host", "MFU host"]
    rows = {r[0]: r for r in eff["rows"]}
    assert list(rows) == ["forward", "backward", "optimizer"]
    for phase in ("forward", "backward"):
        assert rows[phase][1] == si(float(notes[f"flops_{phase}"]), "FLOP")
        assert rows[phase][2] == si(float(notes[f"tflops_{phase}"]) * 1e12, "FLOP/s")
        assert rows[phase][3] == pct(100 * float(notes[f"mfu_{phase}"]))  # the given peak
    assert rows["optimizer"][3] == "-"  # elementwise FLOPs: no MFU
    # Actions per phase: the training phases' rows carry the same rates
    per = t["phases"]
    assert per["head"][-2:] == ["FLOP/s", "MFU"]
    by = {(r[0], r[1]): r for r in per["rows"]}
    assert by[("train", "forward")][-2:] == [si(float(notes["tflops_forward"]) * 1e12, ""),
                                             pct(100 * float(notes["mfu_forward"]))]
    assert by[("train", "data")][-2:] == ["-", "-"]


def test_compare_page_goodput_per_cause(runs, tmp_path):
    d, a, b, (na, nb) = runs
    html = d / "cmp.html"
    stepwatch.html([a, b], html)
    t = tables(html, tmp_path)
    ga, gb = (json.loads(stepwatch.load(str(p)).report("json"))["goodput"] for p in (a, b))
    assert t["head"] == f"goodput: baseline {pct(ga['percent'])}, new {pct(gb['percent'])}"
    rows = {r[0]: r for r in t["goodput-compare"]["rows"]}
    assert rows["steady training steps"][1:3] == [pct(ga["percent"]), pct(gb["percent"])]
    la = {x["cause"]: x["percent"] for x in ga["lost"]}
    lb = {x["cause"]: x["percent"] for x in gb["lost"]}
    assert set(rows) == {"steady training steps"} | set(la) | set(lb)
    for cause in la:
        change = lb.get(cause, 0) - la[cause]
        assert rows[cause][3] == ("+" if change > 0 else "") + f"{change:.1f}", cause
    assert rows["data wait"][3].startswith("+")  # 20 ms of data wait a step against 1 ms



def test_device_time_columns(monkeypatch, fake_cudart, tmp_path):
    """With device time (the fake CUDA runtime of tests/device/fake_cudart.c: kernels of 2 ms
    in each forward, 3 ms in each backward), the efficiency table gets each phase's FLOP/s and
    MFU on device time: its FLOPs per step over its GPU time per timed step, exactly."""
    from stepwatch import devicestats
    monkeypatch.setattr(devicestats, "_torch_clock", lambda: (
        lambda: None, lambda: True, lambda: 0))  # torch's stream answers, as test_device's
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path, html = tmp_path / "dev.db", tmp_path / "dev.html"
    prof = stepwatch.Profiler(run_file=str(path), device_time=True, warmup_steps=1, live=False,
                              flops={"peak_flops": 1e12})
    fwd, bwd = prof.action("forward"), prof.action("backward")
    with prof.phase("train"):
        for _ in range(6):
            with prof.step(16):
                x, y = torch.randn(16, 32), torch.randn(16, 8)
                with fwd:
                    loss = F.mse_loss(model(x), y)
                    fake_cudart.fake_gpu_launch(2_000_000)
                with bwd:
                    loss.backward()
                    fake_cudart.fake_gpu_launch(3_000_000)
                opt.step()
                opt.zero_grad()
        time.sleep(max(0, fake_cudart.fake_gpu_idle_at() - time.monotonic_ns()) / 1e9 + 0.005)
        with prof.step(0):  # the last timed step resolves
            pass
    prof.close()
    run = stepwatch.load(str(path))
    notes = dict(run.info()["notes"])
    doc = json.loads(run.report("json"))
    counters = {c["name"]: c for c in doc["counters"]}
    steps = counters["device:train/step"]["count"]
    phases = {e["phase"]: e for e in doc["efficiency"]["phases"]}
    stepwatch.html(path, html)
    t = tables(html, tmp_path, layouts=(800, 1200))  # the widest table: device columns too
    assert t["efficiency"]["head"][-2:] == ["FLOP/s dev", "MFU dev"]
    rows = {r[0]: r for r in t["efficiency"]["rows"]}
    for phase, kernels in (("forward", 2e6), ("backward", 3e6)):
        c = counters[f"device:train/{phase}"]
        ns = c["mean"] * c["count"] / steps
        rate = float(notes[f"flops_{phase}"]) / ns * 1e9
        assert phases[phase]["flops_per_s_device"] == rate  # exactly
        assert c["min"] >= 0.95 * kernels  # each call its kernels' time at least
        assert rows[phase][4] == si(rate, "FLOP/s")
        assert rows[phase][5] == pct(100 * rate / 1e12)
        per = {(r[0], r[1]): r for r in t["phases"]["rows"]}  # Actions per phase: device's
        assert per[("train", phase)][-2:] == [si(rate, ""), pct(100 * rate / 1e12)]
