/*
 * slow.js — the report's slow steps (docs/slow-steps.md), from the page data's "slow"
 * (html_slow.c). Defines window.swSlow, which report.js calls with its helpers (h.el, h.sv,
 * h.fmtDur, h.fmtCount, h.tip, h.table, h.COLORS, h.width: the charts' width):
 *   marks(D, f, view, h)  a mark per slow step on the step-time chart f (its cause and
 *                         evidence on hover; a click shows its spans); returns a legend item
 *   section(D, section, h) the slow steps' table and the panel of a step's kept spans (its
 *                         window: the slow step's and the step before it's)
 */
window.swSlow = (function () {
  "use strict";
  var CAUSE_COLORS = { unknown: "#8c959f", gc: "#cf222e", compile: "#8250df", checkpoint: "#0969da",
    eval: "#bf8700", data: "#e4572e", page_faults: "#9a6700", preempted: "#1a7f37", blocked: "#57606a",
    allocator: "#bc4c00", steal: "#0a3069", sync: "#6639ba", throttled: "#a40e26" };
  function causeColor(c) { return CAUSE_COLORS[c] || "#cf222e"; }
  function keyOf(s) { return s.rank + ":" + s.step; }
  function advice(S, cause) {
    var a = S.causes.filter(function (c) { return c[0] === cause; })[0];
    return a ? a[2] : "";
  }
  /* The spans of each embedded window by rank:step (one window's spans may come in parts). */
  function windowsOf(S) {
    if (!S.byKey) {
      S.byKey = {};
      S.windows.forEach(function (w) {
        var k = keyOf(w);
        S.byKey[k] = (S.byKey[k] || []).concat(w.spans);
      });
    }
    return S.byKey;
  }

  function marks(D, f, view, h) {
    var S = D.slow;
    if (!S || !S.steps.length) return null;
    var g = h.sv("g", { "class": "slow-marks" }), n = 0;
    S.steps.forEach(function (s) {
      var x = view.axis === "time" ? s.start_ns + s.duration_ns / 2 : s.step + 0.5;
      if (x < f.x0 || x > f.x1) return;
      var cx = f.x(x), cy = Math.max(f.T + 13, f.y(s.duration_ns)); /* under the outlier marks */
      var m = h.sv("path", { d: "M" + cx + "," + (cy - 5) + "l5,5l-5,5l-5,-5z", "class": "slow-mark",
        fill: causeColor(s.cause), "data-step": s.step, "data-rank": s.rank, "data-cause": s.cause });
      var lines = [s.evidence, "cause: " + s.cause + (s.rank > 0 ? " (rank " + s.rank + ")" : "")];
      var todo = advice(S, s.cause);
      if (todo) lines.push("what to do: " + todo);
      lines.push(s.window ? "click for its spans" : "its spans were not kept");
      m.addEventListener("mousemove", function (e) { h.tip(lines, e); });
      m.addEventListener("mouseleave", function () { h.tip(null); });
      m.addEventListener("click", function () { if (S.show) S.show(s, true); });
      g.appendChild(m);
      n++;
    });
    f.svg.appendChild(g);
    var item = h.el("span", { "class": "slow-note" }, "\u25c6 " + n + " slow step" + (n === 1 ? "" : "s") +
      " (hover for the cause, click for the spans)");
    return n ? item : null;
  }

  /* A window's spans as a Gantt chart: a row per depth, the slow step shaded. */
  function gantt(s, spans, h) {
    var W = h.width(), ROW = 18, L = 4, T = 22, depth = 0, lo = Infinity, hi = -Infinity;
    spans.forEach(function (p) {
      depth = Math.max(depth, p[2]);
      lo = Math.min(lo, p[3]);
      hi = Math.max(hi, p[3] + p[4]);
    });
    lo = Math.min(lo, s.start_ns);
    hi = Math.max(hi, s.start_ns + s.duration_ns, lo + 1);
    var H = T + (depth + 1) * ROW + 20;
    var x = function (t) { return L + (t - lo) / (hi - lo) * (W - 2 * L); };
    var svg = h.sv("svg", { "class": "chart slow-window", "data-chart": "slow-window", width: W, height: H,
      viewBox: "0 0 " + W + " " + H, role: "img" });
    svg.appendChild(h.sv("title", {}, "The spans of step " + s.step + " and of the step before it"));
    svg.appendChild(h.sv("rect", { x: x(s.start_ns), y: T - 4, width: Math.max(1, x(s.start_ns + s.duration_ns) - x(s.start_ns)),
      height: H - T - 16, "class": "slow-step-band" }));
    svg.appendChild(h.sv("text", { x: x(s.start_ns) + 2, y: 14 }, "step " + s.step + " (slow): " + h.fmtDur(s.duration_ns)));
    if (s.start_ns > lo + (hi - lo) * 0.2)
      svg.appendChild(h.sv("text", { x: L, y: 14 }, "step " + (s.step - 1)));
    spans.forEach(function (p) {
      var x0 = x(p[3]), w = Math.max(1, x(p[3] + p[4]) - x0), y = T + p[2] * ROW;
      var gr = h.sv("g", { "data-span": p[0], "data-span-step": p[1] });
      gr.appendChild(h.sv("rect", { x: x0, y: y, width: w, height: ROW - 2, rx: 2,
        fill: h.COLORS[p[0]] || (p[0] === "checkpoint" || p[0] === "compile" ? causeColor(p[0]) : "#a8b3bd") }));
      gr.appendChild(h.sv("title", {}, p[0] + ": " + h.fmtDur(p[4]) + " (step " + p[1] + ", at +" + h.fmtDur(p[3] - lo) + ")"));
      if (w > p[0].length * 6.6 + 6)
        gr.appendChild(h.sv("text", { x: x0 + 3, y: y + ROW - 6, "class": "span-label" }, p[0]));
      svg.appendChild(gr);
    });
    svg.appendChild(h.sv("text", { x: W - 4, y: H - 4, "text-anchor": "end" }, h.fmtDur(hi - lo) + " in all"));
    return svg;
  }

  /* Per action, its time in the slow step against the step before it. */
  function perAction(s, spans, h) {
    var rows = {}, list = [];
    spans.forEach(function (p) {
      var r = rows[p[0]];
      if (!r) { r = rows[p[0]] = { action: p[0], calls: 0, slow_ns: 0, before_ns: 0 }; list.push(r); }
      if (p[1] === s.step) { r.calls++; r.slow_ns += p[4]; } else r.before_ns += p[4];
    });
    list.forEach(function (r) { r.change_ns = r.slow_ns - r.before_ns; });
    list.sort(function (a, b) { return b.change_ns - a.change_ns; });
    return h.table(list, [["Action", "action", function (v) { return v; }, true],
      ["Calls in the slow step", "calls", h.fmtCount], ["In the slow step", "slow_ns", h.fmtDur],
      ["In the step before", "before_ns", h.fmtDur], ["Difference", "change_ns", h.fmtDur]], "slow-window-actions");
  }

  function section(D, newSection, h) {
    var S = D.slow;
    if (!S || !S.judged) return;
    var s = newSection("Slow steps");
    var pct = function (a, b) { return b ? (100 * a / b).toFixed(1) + " %" : "-"; };
    s.appendChild(h.el("p", { "class": "note" }, "A step is slow when it took at least " + S.factor +
      "x the running median of its thread's steps and " + h.fmtDur(S.floor_ns) + " more; its cause is the signal " +
      "that explains the most of its time over the median (at least half), else \u201cunknown\u201d (docs/slow-steps.md)."));
    if (!S.slow) {
      s.appendChild(h.el("p", { "class": "ok", "data-slow": "none" }, "No slow step among " + h.fmtCount(S.judged) + " judged."));
      return;
    }
    s.appendChild(h.el("p", { "data-slow": "summary" }, h.fmtCount(S.slow) + " of " + h.fmtCount(S.judged) +
      " judged steps were slow (" + pct(S.slow, S.judged) + "), " + h.fmtDur(S.excess_ns) + " over their medians; causes: " +
      S.causes.slice().sort(function (a, b) { return b[1] - a[1]; }).map(function (c) { return c[0] + " " + c[1]; }).join(", ") +
      (S.shown < S.slow ? ". The " + h.fmtCount(S.shown) + " costliest are listed." : ".")));
    var ul = h.el("ul", { "class": "slow-advice" });
    S.causes.forEach(function (c) { if (c[0] !== "unknown" || c[2]) ul.appendChild(h.el("li", {}, "For " + c[0] + ": " + c[2] + ".")); });
    s.appendChild(ul);
    var panel = h.el("div", { "class": "slow-panel" });
    var rows = S.steps.map(function (x) {
      return { s: x, step: x.step, rank: x.rank, phase: x.phase, duration: x.duration_ns, median: x.median_ns,
        excess: x.duration_ns - x.median_ns, cause: x.cause, evidence: x.evidence, spans: x.window ? "in this page" : x.window_kept ? "kept (not in this page)" : "not kept" };
    }).sort(function (a, b) { return b.excess - a.excess; });
    var cols = [["Step", "step", h.fmtCount], ["Phase", "phase", String, true, true], ["Duration", "duration", h.fmtDur],
      ["Median", "median", h.fmtDur], ["Over the median", "excess", h.fmtDur], ["Cause", "cause", String, true],
      ["Evidence", "evidence", String, true], ["Spans", "spans", String, true, true]];
    if (D.run.ranks > 1) cols.splice(1, 0, ["Rank", "rank", h.fmtCount]);
    s.appendChild(h.table(rows, cols, "slow-steps", function (r) { S.show(r.s, true); }));
    s.appendChild(panel);
    S.show = function (x, scroll) {
      panel.textContent = "";
      panel.setAttribute("data-window", keyOf(x));
      panel.appendChild(h.el("h3", {}, x.evidence + (D.run.ranks > 1 ? " (rank " + x.rank + ")" : "")));
      var spans = windowsOf(S)[keyOf(x)];
      if (!spans || !spans.length) {
        panel.appendChild(h.el("p", { "class": "note", "data-slow": "no-window" }, x.window_kept
          ? "Its spans are in the run file but not in this page (it carries the spans of the 64 costliest windows): stepwatch export --chrome shows them."
          : "Its spans were not kept: the run file keeps those of the costliest slow steps only (" + S.windows_kept + " kept, " + S.windows_not_kept + " not)."));
      } else {
        panel.appendChild(h.el("p", { "class": "note" }, "The spans of step " + x.step + " (shaded) and of the step before it, " +
          "as the recorder kept them with the timeline off; hover a span for its time."));
        var wrap = h.el("div", { "class": "table-wrap" });
        wrap.appendChild(gantt(x, spans, h));
        panel.appendChild(wrap);
        panel.appendChild(perAction(x, spans, h));
      }
      if (scroll && panel.scrollIntoView) panel.scrollIntoView({ block: "nearest" });
    };
    /* The costliest slow step whose spans the page has, else the costliest. */
    var first = rows.filter(function (r) { return r.s.window; })[0] || rows[0];
    S.show(first.s, false);
  }

  return { marks: marks, section: section };
})();
