"""The goodput table: the JSON report's "goodput" object and the HTML page's stacked bar and
table, from a run with data waits, warm-up, evaluation and a checkpoint; the page drawn by
real headless Chromium. The parts add up to the run's wall time exactly."""
import json
import re
import time

import pytest

import stepwatch
from stepwatch import goodput
from test_html_layout import chromium, layout  # noqa: F401  (the page's layout rules)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("goodput")
    path = d / "run.db"
    p = stepwatch.Profiler(name="goodput", run_file=str(path), warmup_steps=2, live=False)
    data, fwd = p.action("data"), p.action("forward")
    ckpt = p.action("save_checkpoint")
    with p.phase("fit"):
        with p.phase("startup"):
            time.sleep(0.02)
        for epoch in range(2):
            with p.phase("train"):
                for _ in range(10):
                    with p.step(8):
                        with data:
                            time.sleep(0.002)
                        with fwd:
                            time.sleep(0.004)
                with ckpt:
                    time.sleep(0.01)
            with p.phase("valid"):
                for _ in range(4):
                    with p.step(8):
                        with fwd:
                            time.sleep(0.003)
    parts = goodput.note(p)
    p.close()
    html = d / "report.html"
    stepwatch.html(path, html)
    return path, html, parts


def test_json_goodput_object_adds_up(run):
    path, _, parts = run
    doc = json.loads(stepwatch.load(str(path)).report("json"))
    g = doc["goodput"]
    assert g["wall_ns"] == parts["wall_ns"] and g["steady_ns"] == parts["steady_ns"]
    causes = [x["cause"] for x in g["lost"]]
    assert causes == list(goodput.CAUSES)  # every cause, in one order
    assert g["steady_ns"] + sum(x["ns"] for x in g["lost"]) == g["wall_ns"]
    lost = {x["cause"]: x for x in g["lost"]}
    for cause in ("start-up", "data wait", "warm-up", "evaluation", "checkpoints"):
        assert lost[cause]["ns"] == parts[cause] and lost[cause]["ns"] > 0, cause
    assert lost["data wait"]["ns"] >= 20 * 2_000_000  # 20 waits of at least 2 ms
    assert g["percent"] == pytest.approx(100 * g["steady_ns"] / g["wall_ns"], rel=1e-9)
    assert lost["evaluation"]["percent"] == pytest.approx(
        100 * lost["evaluation"]["ns"] / g["wall_ns"], rel=1e-9)


def test_no_goodput_object_without_the_note(tmp_path):
    p = stepwatch.Profiler(live=False)
    with p.phase("train"):
        with p.step(1):
            pass
    assert "goodput" not in json.loads(p.report("json"))
    p.note("goodput_ns", "wall:abc")  # not the note's form: no table, no error
    assert "goodput" not in json.loads(p.report("json"))
    p.close()


@pytest.mark.parametrize("width", [800, 1400])
def test_html_goodput_bar_and_table_in_chromium(run, tmp_path, width):
    path, html, parts = run
    page = tmp_path / "page.html"
    # the measuring script of test_html_layout, and the goodput's cells and segments beside
    extra = r"""<script>
window.addEventListener("load", function () {
  var out = {};
  out.rows = [].map.call(document.querySelectorAll("table[data-table=goodput] tbody tr"),
    function (tr) { return [].map.call(tr.querySelectorAll("td"), function (td) { return td.textContent; }); });
  out.segments = [].map.call(document.querySelectorAll("svg[data-chart=goodput] g[data-cause]"),
    function (g) { return [g.getAttribute("data-cause"), g.querySelector("rect").getBBox().width]; });
  out.bar = +document.querySelector("svg[data-chart=goodput]").getAttribute("width");
  out.head = (document.querySelector(".goodput .glance-head") || {}).textContent;
  var pre = document.createElement("pre"); pre.id = "sw-goodput"; pre.style.display = "none";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""
    page.write_text(html.read_text().replace("</body>", extra + "</body>"))
    check = layout(page, tmp_path, width)  # no sideways scroll, nothing cut or overlapping
    import subprocess
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          f"--window-size={width},3000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="sw-goodput"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    g = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert g["head"].startswith(f"goodput {parts['goodput']:.1f} %"), g["head"]
    shown = [c for c in ("steady",) + goodput.CAUSES if (parts["steady_ns"] if c == "steady"
                                                          else parts[c]) > 0]
    assert [s[0] for s in g["segments"]] == shown
    widths = {c: w for c, w in g["segments"]}
    bar = g["bar"]
    assert 0 < bar <= min(width, 1000)
    # each segment's length is its share of the bar (1 px apart)
    assert widths["steady"] == pytest.approx(max(0.5, parts["steady_ns"] / parts["wall_ns"]
                                                 * bar - 1), abs=0.01)
    assert widths["evaluation"] == pytest.approx(parts["evaluation"] / parts["wall_ns"] * bar - 1,
                                                 abs=0.01)
    rows = {r[0]: r for r in g["rows"]}
    assert list(rows)[0] == "steady training steps" and "evaluation" in rows
    assert rows["evaluation"][2] == f"{100 * parts['evaluation'] / parts['wall_ns']:.1f} %"
    assert check["charts"] >= 3
