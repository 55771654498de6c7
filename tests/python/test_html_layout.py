"""The HTML report read the way a person reads it: a run with train and validation epochs, a
warm-up, one stall and a long action name, drawn by real headless Chromium at 800 and 1400 px.
A small script added to a copy of the page measures the layout after it is drawn: the page
does not scroll sideways, no table needs its own scroll bar, no action name is cut (long ones
wrap), no chart label is cut at a chart's edge, overlaps another label or covers a histogram
bar. The tables show human units and "-" where a figure is undefined. The screenshots stay in
the build directory (html_800.png, html_1400.png) for a person to look at."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

import stepwatch

CHECK = r"""
<script>
window.addEventListener("load", function () {
  function overlap(a, b) {
    return a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 &&
      b.top < a.bottom - 0.5;
  }
  var out = { problems: [], charts: 0 };
  out.scrollWidth = document.documentElement.scrollWidth;
  out.innerWidth = window.innerWidth;
  out.rendered = document.body.getAttribute("data-rendered");
  out.error = document.getElementById("sw-error").textContent;
  [].forEach.call(document.querySelectorAll(".table-wrap"), function (w) {
    if (w.scrollWidth > w.clientWidth) out.problems.push("table scrolls: " + w.scrollWidth + " > " + w.clientWidth);
  });
  [].forEach.call(document.querySelectorAll("td.name"), function (td) {
    if (td.scrollWidth > td.clientWidth) out.problems.push("name cut: " + td.textContent);
  });
  [].forEach.call(document.querySelectorAll("svg.chart"), function (svg) {
    out.charts++;
    var name = svg.getAttribute("data-chart"), box = svg.getBoundingClientRect();
    if (box.right > window.innerWidth) out.problems.push("chart wider than the page: " + name);
    var texts = [].slice.call(svg.querySelectorAll("text")).map(function (t) { return [t.textContent, t.getBoundingClientRect()]; });
    var bars = [].map.call(svg.querySelectorAll("rect.bar"), function (r) { return r.getBoundingClientRect(); });
    texts.forEach(function (a, i) {
      var r = a[1];
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
        out.problems.push("cut in " + name + ": " + a[0]);
      texts.slice(i + 1).forEach(function (b) {
        if (overlap(r, b[1])) out.problems.push("overlap in " + name + ": '" + a[0] + "' / '" + b[0] + "'");
      });
      bars.forEach(function (b) { if (overlap(r, b)) out.problems.push("label over a bar in " + name + ": " + a[0]); });
    });
  });
  out.cells = [].map.call(document.querySelectorAll("td"), function (td) { return td.textContent; });
  out.visibleHeaders = [].filter.call(document.querySelectorAll("table[data-table=actions] th"),
    function (th) { return th.offsetWidth > 0; }).map(function (th) { return th.textContent; });
  var pre = document.createElement("pre");
  pre.id = "sw-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""

LONG = "callback:a_checkpoint_callback_with_a_rather_long_descriptive_name_that_goes_on"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("layout")
    path = d / "run.db"
    p = stepwatch.Profiler(name="layout", run_file=str(path), warmup_steps=2, live=False)
    data, fwd, bwd, ckpt = (p.action(n) for n in ("data", "forward", "backward", LONG))
    once = p.action("save_model")
    with p.phase("fit"):
        for epoch in range(2):
            with p.phase("train"):
                for i in range(60):
                    with p.step(32):
                        with data:
                            time.sleep(0.060 if (epoch, i) == (1, 17) else 0.001)  # one stall
                        with fwd:
                            time.sleep(0.002)
                        with bwd:
                            time.sleep(0.003)
            with p.phase("valid"):
                for i in range(20):
                    with p.step(32):
                        with data:
                            time.sleep(0.001)
                        with fwd:
                            time.sleep(0.0015)
            with ckpt:
                time.sleep(0.002)
        with once:
            time.sleep(0.001)
    p.close()
    html = d / "report.html"
    stepwatch.html(path, html)
    return html


def chromium():
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


def layout(report, tmp_path, width):
    """The measuring script's findings about report at width px (asserts it drew cleanly)."""
    page = tmp_path / f"check_{width}.html"
    page.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},3000", "--enable-logging=stderr", "--v=0"]
    proc = subprocess.run(args + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    found = re.search(r'<pre id="sw-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:]
    check = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<")
                       .replace("&gt;", ">").replace("&amp;", "&"))
    assert check["rendered"] == "1" and check["error"] == ""
    assert check["scrollWidth"] <= check["innerWidth"], check
    assert check["problems"] == [], check["problems"]
    return check


def screenshot(report, tmp_path, width, name):
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},3000"]
    shot = os.path.join(os.environ.get("SW_BUILD_DIR", str(tmp_path)), name)
    subprocess.run(args + [f"--screenshot={shot}", report.as_uri()], capture_output=True,
                   timeout=120, check=True)
    assert os.path.getsize(shot) > 10000


@pytest.mark.parametrize("width", [800, 1400])
def test_layout_in_chromium(report, tmp_path, width):
    check = layout(report, tmp_path, width)
    # glance bars (train, valid), step time, breakdown, 2 step histograms, action histograms
    assert check["charts"] >= 8
    cells = check["cells"]
    assert not any(re.search(r"\d[eE][+-]?\d", c) for c in cells), cells
    assert "-" in cells  # std of save_model's single call, min/quantiles of what has none
    if width == 800:  # optional columns give way; the essential ones stay
        assert check["visibleHeaders"] == ["Action", "Calls", "Mean", "p50", "p99", "Max",
                                           "Total", "%", "Samples/s"]
    else:
        assert "Std" in check["visibleHeaders"] and "Self" in check["visibleHeaders"]
    assert "none" not in cells  # no phase "none" rows
    assert "end without begin" not in cells  # misuse only when there is some
    screenshot(report, tmp_path, width, f"html_{width}.png")


@pytest.mark.parametrize("width", [800, 1400])
def test_comparison_layout_in_chromium(report, tmp_path, width):
    """The comparison page (the run against itself): the same rules at both widths."""
    page = tmp_path / "compare.html"
    stepwatch.html([report.parent / "run.db", report.parent / "run.db"], page)
    check = layout(page, tmp_path, width)
    assert check["charts"] >= 12
    screenshot(page, tmp_path, width, f"html_compare_{width}.png")


def test_data_marks_phases_and_clamps_quantiles(report):
    text = report.read_text()
    doc = json.loads(text.split('<script type="application/json" id="sw-data">', 1)[1]
                     .split("</script>", 1)[0])
    phases = {s["phase"]: s for s in doc["step_phases"]}
    assert set(phases) == {"train", "valid"}
    assert sum(p[1] for p in phases["train"]["points"]) == 120
    assert sum(p[1] for p in phases["valid"]["points"]) == 40
    for a in doc["actions"]:
        if a["calls"]:
            for q in ("p50_ns", "p90_ns", "p99_ns"):
                assert a["min_ns"] <= a[q] <= a["max_ns"], (a["action"], q)
        if a["calls"] < 2:
            assert a["std_ns"] is None, a
    for h in doc["step_hists"]:
        assert h["hist"]["p50"] <= h["hist"]["p99"]
