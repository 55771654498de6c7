"""The HTML report's interactions, driven in real headless Chromium: a script added to a copy
of the page moves the mouse over the charts, drags across the step chart, presses Reset and
the axis switch (real DOM events into the page's own code), and writes what it saw into the
page, which --dump-dom returns. Also the comparison page of two runs (CLI and Python)."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

import stepwatch

DRIVE = r"""
<script>
window.addEventListener("load", function () {
  var out = { steps: [] };
  function chart(id) { return document.querySelector('svg[data-chart="' + id + '"]'); }
  function fire(target, type, x, y) {
    target.dispatchEvent(new MouseEvent(type, { bubbles: true, cancelable: true, clientX: x, clientY: y }));
  }
  function at(id, frac) {
    var hit = chart(id).querySelector("rect.hit"), r = hit.getBoundingClientRect();
    return [hit, r.left + frac * r.width, r.top + r.height / 2];
  }
  function hover(id, frac) {
    var h = at(id, frac);
    fire(h[0], "mousemove", h[1], h[2]);
    var tip = document.getElementById("sw-tip");
    return { text: tip.textContent, shown: tip.style.display === "block" };
  }
  function labels(id) {
    return [].map.call(chart(id).querySelectorAll("text.tick"), function (t) { return t.textContent; });
  }
  var box = document.querySelector("div.steps");
  out.hoverStep = hover("step-time", 0.5);
  out.hoverBreakdown = hover("breakdown", 0.2);
  out.ticksBefore = labels("step-time");
  var a = at("step-time", 0.25), b = at("step-time", 0.5);
  fire(a[0], "mousedown", a[1], a[2]);
  fire(a[0], "mousemove", b[1], b[2]);
  fire(a[0], "mouseup", b[1], b[2]);
  out.zoom = box.getAttribute("data-zoom");
  out.ticksZoomed = labels("step-time");
  out.resetEnabled = !document.querySelector('button[data-action="reset-zoom"]').disabled;
  out.hoverZoomed = hover("step-time", 0.5);
  document.querySelector('button[data-action="reset-zoom"]').click();
  out.zoomAfterReset = box.getAttribute("data-zoom");
  out.ticksAfterReset = labels("step-time");
  document.querySelector('button[data-axis="time"]').click();
  out.axis = box.getAttribute("data-axis");
  out.xlabelTime = [].map.call(chart("step-time").querySelectorAll("text"), function (t) { return t.textContent; });
  out.hoverTime = hover("step-time", 0.5);
  out.ticksTime = labels("step-time");
""" + r"""
  out.error = document.getElementById("sw-error").textContent;
  var pre = document.createElement("pre");
  pre.id = "sw-drive";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium():
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


def dump(page, width=1400):
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},3000", "--enable-logging=stderr", "--v=0", "--dump-dom",
            page.as_uri()]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    return proc.stdout


def unescape(text):
    return (text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
            .replace("&amp;", "&"))


def record(path, name, forward_s, steps=40):
    p = stepwatch.Profiler(name=name, run_file=str(path), warmup_steps=2, live=False)
    data, fwd = p.action("data"), p.action("forward")
    for epoch in range(2):
        with p.phase("train"):
            for _ in range(steps):
                with p.step(16):
                    with data:
                        time.sleep(0.0005)
                    with fwd:
                        time.sleep(forward_s)
        with p.phase("valid"):
            for _ in range(steps // 4):
                with p.step(16):
                    with fwd:
                        time.sleep(forward_s / 2)
    p.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("interact")
    a, b = d / "a.db", d / "b.db"
    record(a, "baseline", 0.001)
    record(b, "slower-forward", 0.003)
    return d, a, b


# The end of a driving script: `out` (what it saw) into the page, for drive() to read back.
DRIVE_END = DRIVE[DRIVE.index('  out.error = document.getElementById("sw-error")'):]


def drive(html, tmp_path, script):
    """Load a copy of the page at html with script (ending in DRIVE_END) added in Chromium;
    what the script saw."""
    page = tmp_path / "drive.html"
    page.write_text(html.read_text().replace("</body>", script + "</body>"))
    found = re.search(r'<pre id="sw-drive">(.*?)</pre>', dump(page), re.S)
    assert found
    return json.loads(unescape(found.group(1)))


def test_hover_zoom_reset_and_axis_switch(runs, tmp_path):
    d, a, _ = runs
    html = d / "a.html"
    stepwatch.html(a, html)
    out = drive(html, tmp_path, DRIVE)
    assert out["error"] == ""
    # Hover: the step range, its time, each phase's figures; each category on the breakdown.
    hs = out["hoverStep"]
    assert hs["shown"] and re.search(r"steps? \d+", hs["text"]) and "since the start" in hs["text"]
    assert re.search(r"(train|valid): median \d", hs["text"]), hs
    hb = out["hoverBreakdown"]["text"]
    assert "data " in hb and "forward " in hb and "step (mean)" in hb, hb
    # Brush: a quarter to a half of the chart becomes the whole axis; reset restores it.
    lo, hi = (int(v) for v in out["zoom"].split(","))
    total = 2 * (40 + 10)
    assert 0.15 * total <= lo < hi <= 0.6 * total, out["zoom"]
    assert out["resetEnabled"] and out["ticksZoomed"] != out["ticksBefore"]
    shown = [int(t.replace(",", "")) for t in out["ticksZoomed"] if t.isdigit()]
    assert shown and all(lo - 1 <= t <= hi + 1 for t in shown), (shown, lo, hi)
    assert out["hoverZoomed"]["shown"]
    assert out["zoomAfterReset"] == "" and out["ticksAfterReset"] == out["ticksBefore"]
    # Axis switch: wall time in the labels and the tooltip.
    assert out["axis"] == "time"
    assert "wall time since the start" in out["xlabelTime"]
    assert any(t.endswith(" ms") or t.endswith(" s") for t in out["ticksTime"]), out["ticksTime"]
    assert out["hoverTime"]["shown"] and "since the start" in out["hoverTime"]["text"]


def data_of(text):
    return json.loads(text.split('<script type="application/json" id="sw-data">', 1)[1]
                      .split("</script>", 1)[0])


def test_populations_and_glance(runs):
    d, a, _ = runs
    html = d / "a.html"
    stepwatch.html(a, html)
    doc = data_of(html.read_text())
    hists = {h["phase"]: h for h in doc["step_hists"]}
    assert set(hists) == {"train", "valid"}
    assert hists["train"]["steps"] == 2 * 40 - 2 * 2 or hists["train"]["steps"] == 2 * 40 - 2
    assert sum(b[2] for b in hists["train"]["hist"]["buckets"]) == hists["train"]["steps"]
    assert all(a["phase"] not in ("all", "none") for a in doc["actions"] if "hist" in a)
    train = next(b for b in doc["breakdown"] if b["phase"] == "train")
    k = doc["categories"].index("forward")
    assert 0.8e6 < train["category_ns"][k] < 5e6  # a 1 ms sleep
    assert train["samples_per_s"] > 0
    assert abs(sum(train["category_ns"]) - train["step_ns"]) < 0.05 * train["step_ns"]


@pytest.mark.parametrize("how", ["python", "cli"])
def test_comparison_page(runs, tmp_path, how):
    d, a, b = runs
    out = tmp_path / "cmp.html"
    if how == "python":
        stepwatch.html([a, b], out)
    else:
        exe = os.path.join(os.environ["SW_BUILD_DIR"], "stepwatch")
        subprocess.run([exe, "html", str(a), str(b), "-o", str(out)], check=True, timeout=120)
    text = out.read_text()
    doc = data_of(text)
    assert doc["run"]["name"] == "baseline" and doc["other"]["run"]["name"] == "slower-forward"
    fwd = [r for r in doc["compare"]["rows"] if r["action"] == "forward" and r["phase"] == "train"]
    assert fwd and fwd[0]["verdict"] == "slower"
    dom = unescape(dump(out))
    assert 'data-rendered="1"' in dom and '<div id="sw-error"></div>' in dom
    assert dom.count('data-chart="glance-train"') == 2  # side by side
    assert 'data-chart="hist-compare"' in dom and 'data-series="new"' in dom
    assert 'data-table="verdicts"' in dom and ">slower<" in dom


def test_two_runs_bad_usage(runs, tmp_path):
    d, a, _ = runs
    with pytest.raises(ValueError, match="two run files"):
        stepwatch.html([a, a, a], tmp_path / "x.html")
    exe = os.path.join(os.environ["SW_BUILD_DIR"], "stepwatch")
    proc = subprocess.run([exe, "html", str(a), str(a), str(a), "-o", str(tmp_path / "x.html")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "two to compare" in proc.stderr


def _merged_page(tmp_path, paths, merge_text=False):
    """The rank files merged (stepwatch merge) and the page of the merged file: its path and
    its data (and merge's output, the cross-rank view's text, with merge_text)."""
    exe = os.path.join(os.environ["SW_BUILD_DIR"], "stepwatch")
    merged = tmp_path / "all.db"
    proc = subprocess.run([exe, "merge", "-o", str(merged)] + paths, check=True,
                          capture_output=True, text=True, timeout=120)
    out = tmp_path / "ranks.html"
    stepwatch.html(merged, out)
    if merge_text:
        return out, data_of(out.read_text()), proc.stdout + proc.stderr
    return out, data_of(out.read_text())


def test_ranks_heatmap_shows_the_wait_the_ops_and_tflops(tmp_path):
    """Three lockstep ranks merged, rank 1's data slow and the others waiting for it in an
    all-reduce (its bytes counted), FLOPs noted: the heatmap has a column for the op and one
    for TFLOP/s, and the page says who made the others wait."""
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank{rank}.db"
        p = stepwatch.Profiler(name="ddp", run_file=str(path), rank=rank, world_size=3,
                               warmup_steps=1, live=False)
        data, fwd, ar = p.action("data"), p.action("forward"), p.action("collective:allreduce")
        moved = 0
        with p.phase("train"):
            for _ in range(8):
                with p.step(8):
                    with data:
                        time.sleep(0.03 if rank == 1 else 0.001)
                    with fwd:
                        time.sleep(0.002)
                    with ar:
                        time.sleep(0.001 if rank == 1 else 0.03)
                        moved += 4e6
                        p.counter("comm:allreduce:bytes", moved)  # so far, as collectives.py
        p.note("flops_per_step", "3e9")
        p.close()
        paths.append(str(path))
    out, doc = _merged_page(tmp_path, paths)
    ranks = doc["ranks"]
    assert [op["name"] for op in ranks["ops"]] == ["allreduce"], ranks["ops"]
    assert ranks["ops"][0]["min_bw_rank"] in (0, 2)  # a waiting rank: the longest time inside
    assert ranks["wait"].startswith("rank 1 made the other 2 ranks wait "), ranks["wait"]
    assert ranks["wait"].endswith(" in allreduce (its own blame: data)"), ranks["wait"]
    rows = {v[0]: v for v in ranks["view_rows"]}  # [rank, TFLOP/s, time in each op]
    assert rows[1][2] < rows[0][2] / 5 and rows[1][2] < rows[2][2] / 5, rows
    assert all(v[1] > 0 for v in rows.values()), rows
    dom = unescape(dump(out))
    # the run time is the longest rank's, not the three ranks' sum (the percentages' base;
    # the ranks here ran one after the other, each as long)
    run = doc["run"]
    assert run["elapsed_ns"] < run["wall_ns"] / 2, run
    shown = re.search(r"run time: ([\d.]+) (ms|s)<", dom)
    assert shown, dom[:3000]
    seconds = float(shown.group(1)) * (1e-3 if shown.group(2) == "ms" else 1)
    assert seconds == pytest.approx(run["elapsed_ns"] / 1e9, rel=0.01), (shown.group(0), run)
    assert 'data-ranks="wait"' in dom and "Waiting: rank 1 made the other 2 ranks wait" in dom
    assert dom.count('data-op="allreduce"') == 3  # one cell per rank
    assert 'data-category="TFLOP/s"' in dom


def test_ranks_heatmap(tmp_path):
    """Three ranks' files merged: the page's ranks x categories heatmap, rank 2 the slow one.
    The ranks train one model (the same FLOPs per step, one peak): rank 2, slowed as by a
    throttled GPU, has the lowest MFU in the cross-rank view's text and the lowest, reddest
    cell of the heatmap's MFU column."""
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank{rank}.db"
        p = stepwatch.Profiler(name="ddp", run_file=str(path), rank=rank, world_size=3,
                               warmup_steps=1, live=False)
        fwd = p.action("forward")
        with p.phase("train"):
            for _ in range(12):
                with p.step(8):
                    with fwd:
                        time.sleep(0.02 if rank == 2 else 0.001)
        p.note("flops_per_step", "3e9")
        p.note("peak_flops", "1e14")  # MFU of a few %, as a real job's
        p.close()
        paths.append(str(path))
    out, doc, text = _merged_page(tmp_path, paths, merge_text=True)
    found = re.search(r"MFU ([\d.]+) % \(rank (\d)\) to ([\d.]+) % \(rank (\d)\)", text)
    assert found and found.group(2) == "2", text
    assert float(found.group(1)) < float(found.group(3)) / 2, text
    peak = doc["ranks"]["mfu_peak"]
    assert peak == pytest.approx(1e14, rel=1e-9)  # each rank's TFLOP/s over its MFU
    per = {r[0]: r for r in doc["ranks"]["per_rank"]}
    assert sorted(per) == [0, 1, 2] and all(r[1] == 11 for r in per.values())
    k = 3 + doc["categories"].index("forward")  # [rank, steps, step, categories...]
    assert per[2][k] > 2 * per[0][k] and per[2][k] > 2 * per[1][k]
    dom = unescape(dump(out))
    assert 'data-chart="rank-heatmap"' in dom
    assert dom.count('data-rank="2"') >= 2  # the step and forward cells
    mfu, tflops = {}, {v[0]: v[1] for v in doc["ranks"]["view_rows"]}
    for g in re.finditer(r'<g data-rank="(\d)" data-category="MFU">(.*?)</g>', dom, re.S):
        fill = re.search(r'fill="rgb\((\d+),(\d+),(\d+)\)"', g.group(2))
        label = re.search(r'class="cell-label"[^>]*>([^<]*)<', g.group(2))
        mfu[int(g.group(1))] = (label.group(1), int(fill.group(2)))
    assert sorted(mfu) == [0, 1, 2], dom[-3000:]
    for rank, (shown, _) in mfu.items():
        assert shown == f"{100 * tflops[rank] * 1e12 / peak:.1f} %"
    assert mfu[2][1] < min(mfu[0][1], mfu[1][1])  # less green: the reddest
