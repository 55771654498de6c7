"""The HTML report's slow steps (docs/slow-steps.md), driven in real headless Chromium: a run
with a checkpoint and a long data wait injected at known steps; the page marks them on the
step-time chart with their causes (hover: the cause and its evidence), lists them in a
table, and a click on a row or a mark shows that step's kept spans and the step before it's.
A script added to a copy of the page fires real DOM events into the page's own code and
writes what it saw into the page, which --dump-dom returns."""
import re
import time

import stepwatch
from test_html_interact import DRIVE_END, data_of, drive

CHECKPOINT, DATA, STEPS = 30, 40, 50

DRIVE = r"""
<script>
window.addEventListener("load", function () {
  var out = {};
  function fire(target, type) {
    var r = target.getBoundingClientRect();
    target.dispatchEvent(new MouseEvent(type, { bubbles: true, cancelable: true,
      clientX: r.left + r.width / 2, clientY: r.top + r.height / 2 }));
  }
  function panel() {
    var p = document.querySelector("div.slow-panel");
    return { window: p.getAttribute("data-window"),
      spans: [].map.call(p.querySelectorAll("g[data-span]"), function (g) {
        return [g.getAttribute("data-span"), +g.getAttribute("data-span-step")]; }),
      heading: (p.querySelector("h3") || {}).textContent,
      noWindow: !!p.querySelector('[data-slow="no-window"]') };
  }
  var marks = document.querySelectorAll('svg[data-chart="step-time"] path.slow-mark');
  out.marks = [].map.call(marks, function (m) {
    return [+m.getAttribute("data-step"), m.getAttribute("data-cause")]; });
  out.initial = panel();
  var mark = document.querySelector('svg[data-chart="step-time"] path.slow-mark[data-step="DATA"]');
  fire(mark, "mousemove");
  var tip = document.getElementById("sw-tip");
  out.tip = { text: tip.textContent, shown: tip.style.display === "block" };
  fire(mark, "mouseleave");
  out.tipAfter = tip.style.display;
  fire(mark, "click");
  out.afterMark = panel();
  var rows = document.querySelectorAll('table[data-table="slow-steps"] tbody tr');
  out.rows = [].map.call(rows, function (tr) {
    return [].map.call(tr.children, function (td) { return td.textContent; }); });
  var row = [].filter.call(rows, function (tr) { return tr.children[0].textContent === "CHECKPOINT"; })[0];
  row.click();
  out.afterRow = panel();
  out.actions = [].map.call(document.querySelectorAll('table[data-table="slow-window-actions"] tbody tr'),
    function (tr) { return [].map.call(tr.children, function (td) { return td.textContent; }); });
  out.summary = document.querySelector('[data-slow="summary"]').textContent;
  document.querySelector('button[data-axis="time"]').click();
  out.marksTime = document.querySelectorAll('svg[data-chart="step-time"] path.slow-mark').length;
""".replace("CHECKPOINT", str(CHECKPOINT)).replace("DATA", str(DATA)) + DRIVE_END


def record(path):
    p = stepwatch.Profiler(name="slow-html", run_file=str(path), warmup_steps=2, live=False)
    data, fwd, ckpt = p.action("data"), p.action("forward"), p.action("checkpoint")
    with p.phase("train"):
        for i in range(STEPS):
            with p.step(8):
                with data:
                    time.sleep(0.15 if i == DATA else 0.001)
                with fwd:
                    time.sleep(0.002)
                if i == CHECKPOINT:
                    with ckpt:
                        time.sleep(0.15)
    p.close()


def test_slow_steps_marked_listed_and_their_spans_shown(tmp_path):
    run = tmp_path / "run.db"
    record(run)
    html = tmp_path / "slow.html"
    stepwatch.html(run, html)
    out = drive(html, tmp_path, DRIVE)
    assert out["error"] == ""
    slow = data_of(html.read_text())["slow"]
    by_step = {s["step"]: s for s in slow["steps"]}
    # The injected steps are found with their causes (others may be slow for the machine's
    # reasons on this shared VM, never for a checkpoint or the data).
    assert by_step[CHECKPOINT]["cause"] == "checkpoint", by_step[CHECKPOINT]
    assert by_step[DATA]["cause"] == "data", by_step[DATA]
    assert {s["cause"] for s in slow["steps"] if s["step"] not in (CHECKPOINT, DATA)} <= {
        "preempted", "blocked", "unknown"}
    assert slow["slow"] == len(slow["steps"]) and slow["shown"] == slow["slow"]
    # Marks on the step chart, one per slow step, with its cause.
    marks = dict((s, c) for s, c in out["marks"])
    assert marks[CHECKPOINT] == "checkpoint" and marks[DATA] == "data"
    assert len(out["marks"]) == slow["slow"]
    assert out["marksTime"] == slow["slow"]  # also on the wall-time axis
    # Hover: the cause, its evidence and what to do; gone on leaving.
    tip = out["tip"]
    assert tip["shown"] and f"step {DATA}: " in tip["text"] and "data wait" in tip["text"]
    assert "cause: data" in tip["text"] and "DataLoader workers" in tip["text"], tip
    assert out["tipAfter"] == "none"
    # The table: a row per slow step, costliest first, with its evidence.
    steps = [int(r[0]) for r in out["rows"]]
    assert sorted(steps) == sorted(by_step) and CHECKPOINT in steps and DATA in steps
    ckpt_row = out["rows"][steps.index(CHECKPOINT)]
    assert "checkpoint" in ckpt_row and any(re.search(r"checkpoint, \d", c) for c in ckpt_row), ckpt_row
    assert "checkpoint" in out["summary"] and "data" in out["summary"]
    # A click on the mark shows that step's window: its spans and the step before it's.
    for shown, step, action in ((out["afterMark"], DATA, "data"),
                                (out["afterRow"], CHECKPOINT, "checkpoint")):
        assert shown["window"] == f"0:{step}" and not shown["noWindow"], shown
        assert shown["heading"].startswith(f"step {step}: ")
        spans = shown["spans"]
        assert [action, step] in spans, spans
        assert ["forward", step] in spans and ["forward", step - 1] in spans, spans
        assert all(s in (step, step - 1) for _, s in spans), spans
    # Per action in that window: the checkpoint's time is in the slow step only.
    ckpt = [r for r in out["actions"] if r[0] == "checkpoint"]
    assert ckpt and ckpt[0][1] == "1" and ckpt[0][3] == "0 ns", out["actions"]
    # The page opens on the costliest slow step whose spans it has.
    costliest = max((s for s in slow["steps"] if s["window"]),
                    key=lambda s: s["duration_ns"] - s["median_ns"])
    assert out["initial"]["window"] == f"0:{costliest['step']}"


def test_no_slow_steps_says_so(tmp_path):
    run = tmp_path / "run.db"
    p = stepwatch.Profiler(name="steady", run_file=str(run), warmup_steps=0, live=False)
    for _ in range(3):  # too few to judge: no step is judged slow
        with p.step():
            pass
    p.close()
    html = tmp_path / "steady.html"
    stepwatch.html(run, html)
    slow = data_of(html.read_text())["slow"]
    assert slow["slow"] == 0 and slow["steps"] == [] and slow["windows"] == []
    assert "swSlow = " in html.read_text()  # the script is there, and draws nothing
