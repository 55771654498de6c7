/*
 * report.js — draws the stepwatch HTML report: reads the run's data from the JSON in
 * <script id="sw-data"> and draws charts (inline SVG) and tables into <main id="sw-main">.
 * Embedded into the page by the library (cmake/embed.cmake); the page's CSP forbids every
 * network request, so everything is drawn from that JSON. ES5, linted by
 * tests/python/test_html_assets.py (eslint, .eslintrc.json beside this file).
 */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = { data: "#e4572e", forward: "#4c78a8", loss: "#72b7b2", backward: "#54a24b",
    optimizer: "#b279a2", zero_grad: "#9d755d", callback: "#eeca3b", other: "#bab0ac" };

  function fmtDur(ns) {
    if (ns === null || ns === undefined || isNaN(ns)) return "-";
    var units = [[1, "ns"], [1e3, "\u00b5s"], [1e6, "ms"], [1e9, "s"]];
    var v = Math.abs(ns), u = 0;
    while (u + 1 < units.length && v / units[u][0] >= 999.5) u++;
    var x = v / units[u][0];
    var d = x < 9.995 ? 2 : x < 99.95 ? 1 : 0;
    if (u === 0 && x === Math.floor(x)) d = 0;
    return (ns < 0 ? "-" : "") + x.toFixed(d) + " " + units[u][1];
  }
  /* Three significant digits, never an exponent: "0.123", "4.56", "78.9", "123". */
  function sig3(x) {
    var a = Math.abs(x);
    return x.toFixed(a === 0 || a >= 99.95 ? 0 : a >= 9.995 ? 1 : a >= 0.9995 ? 2 : 3);
  }
  /* A number with a k / M / G suffix past a thousand: "950", "13.7 k", "2.40 M". */
  function fmtNum(v) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    var a = Math.abs(v), units = [[1e9, " G"], [1e6, " M"], [1e3, " k"]];
    for (var i = 0; i < units.length; i++)
      if (a >= units[i][0] * 0.9995) return sig3(v / units[i][0]) + units[i][1];
    return sig3(v);
  }
  /* A whole count: "7", "950", "13.7 k". */
  function fmtCount(v) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    return Math.abs(v) >= 999.5 ? fmtNum(v) : Math.round(v) + "";
  }
  function fmtPct(v) { return v === null || v === undefined || isNaN(v) ? "-" : v.toFixed(1) + " %"; }
  function fmtRate(v) { return v === null || v === undefined || isNaN(v) ? "-" : fmtNum(v) + "/s"; }

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* Round tick values covering [lo, hi]; whole numbers only for an axis of counts. */
  function ticks(lo, hi, n, whole) {
    if (!(hi > lo)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (whole) step = Math.max(1, Math.round(step));
    var out = [];
    for (var k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) out.push(k * step);
    return out;
  }

  /* Text widths are estimated (the page may draw before fonts settle): 0.62 em per character
   * of the 11 px axis font is on the wide side for the sans-serif fonts in use. */
  function textWidth(text, size) { return text.length * (size || 11) * 0.62; }
  /* text cut with an ellipsis to fit width px. */
  function fitText(text, width, size) {
    var n = Math.floor(width / ((size || 11) * 0.62));
    return text.length <= n ? text : text.slice(0, Math.max(1, n - 1)) + "\u2026";
  }
  /* The width charts are drawn at: the page's, within bounds, so text is never scaled. */
  function pageWidth() {
    var main = document.getElementById("sw-main");
    return Math.max(320, Math.min(1200, main.clientWidth || 960));
  }

  /* An SVG frame with linear (or log-x) scales. opts.header: a second header row (legend of
   * markers) above the plot; labels go in the margins, never over the data. */
  function frame(opts) {
    var W = opts.width || pageWidth(), H = opts.height || 260, L = 64, R = 20;
    var T = opts.header ? 44 : 28, B = 36;
    var s = sv("svg", { "class": "chart", "data-chart": opts.id, viewBox: "0 0 " + W + " " + H,
      width: W, height: H, role: "img" });
    s.appendChild(sv("title", {}, opts.title));
    s.appendChild(sv("text", { x: 4, y: 16, "class": "title" }, fitText(opts.title, W - 8, 13)));
    var x0 = opts.x[0], x1 = opts.x[1], y0 = opts.y[0], y1 = opts.y[1];
    if (!(x1 > x0)) x1 = x0 + 1;
    if (!(y1 > y0)) y1 = y0 + 1;
    var lx = opts.xlog ? Math.log : function (v) { return v; };
    var fx = function (v) { return L + (lx(v) - lx(x0)) / (lx(x1) - lx(x0)) * (W - L - R); };
    var fy = function (v) { return H - B - (Math.min(v, y1) - y0) / (y1 - y0) * (H - T - B); };
    ticks(y0, y1, 4, opts.ywhole).forEach(function (t) {
      s.appendChild(sv("line", { x1: L, x2: W - R, y1: fy(t), y2: fy(t), "class": "grid" }));
      s.appendChild(sv("text", { x: L - 6, y: fy(t) + 4, "text-anchor": "end" },
        fitText(opts.yfmt(t), L - 8)));
    });
    /* x labels: centred on their tick, moved inside the frame at its ends, and left out when
     * they would touch the one before; low enough to pass under the y axis's lowest label. */
    var xt = opts.xlog ? logTicks(x0, x1) : ticks(x0, x1, Math.max(2, Math.floor(W / 120)), opts.xwhole);
    var right = -Infinity;
    xt.forEach(function (t) {
      var x = fx(t), text = opts.xfmt(t), w = textWidth(text), left = x - w / 2;
      left = Math.max(2, Math.min(left, W - 2 - w));
      s.appendChild(sv("line", { x1: x, x2: x, y1: H - B, y2: H - B + 4, "class": "axis" }));
      if (left < right + 8) return;
      s.appendChild(sv("text", { x: left, y: H - B + 18, "text-anchor": "start", "class": "tick" }, text));
      right = left + w;
    });
    s.appendChild(sv("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, "class": "axis" }));
    s.appendChild(sv("line", { x1: L, x2: L, y1: T, y2: H - B, "class": "axis" }));
    if (opts.xlabel)
      s.appendChild(sv("text", { x: W - 2, y: H - 3, "text-anchor": "end" }, opts.xlabel));
    return { svg: s, x: fx, y: fy, W: W, H: H, L: L, R: R, T: T, B: B, x0: x0, x1: x1, y0: y0, y1: y1 };
  }
  function logTicks(lo, hi) {
    var out = [];
    for (var e = Math.floor(Math.log10(Math.max(lo, 1))); Math.pow(10, e) <= hi; e++)
      [1, 2, 5].forEach(function (m) { var v = m * Math.pow(10, e); if (v >= lo && v <= hi) out.push(v); });
    return out.length ? out : [lo, hi];
  }
  function quantile(values, q) {
    var v = values.slice().sort(function (a, b) { return a - b; });
    return v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : 0;
  }
  function legend(names, colors) {
    var d = el("div", { "class": "legend" });
    names.forEach(function (n) {
      var s = el("span");
      var i = el("i");
      i.style.background = (colors || COLORS)[n] || "#888";
      s.appendChild(i);
      s.appendChild(document.createTextNode(n));
      d.appendChild(s);
    });
    return d;
  }
  /* Points of a downsampled series, split where steps of another phase come between. */
  function runs(P, w) {
    var out = [], cur = [];
    P.forEach(function (p) {
      if (cur.length && p[0] > cur[cur.length - 1][0] + w) { out.push(cur); cur = []; }
      cur.push(p);
    });
    if (cur.length) out.push(cur);
    return out;
  }

  var PHASE_COLORS = { train: "#4c78a8", valid: "#f58518" };

  /* Step time per phase: a band from the fastest to the slowest step of each point and a line
   * through their means, train and valid in their own colours (valid on a shaded ground). The
   * scale is robust: it ends at 1.5 x the 95th percentile of the points' slowest steps, so one
   * stall does not flatten every normal step; points above it are marked at the top edge. */
  function stepTimeChart(D) {
    var S = D.step_phases.filter(function (s) { return s.points.length; });
    var all = [], first = Infinity, last = 0;
    S.forEach(function (s) {
      s.points.forEach(function (p) { all.push(p[4]); });
      first = Math.min(first, s.points[0][0]);
      last = Math.max(last, s.points[s.points.length - 1][0] + s.width);
    });
    var ymax = Math.max.apply(null, all), cap = 1.5 * quantile(all, 0.95), clipped = ymax > cap && cap > 0;
    if (clipped) ymax = cap;
    var widths = S.map(function (s) { return s.width; }), w = Math.max.apply(null, widths);
    var f = frame({ id: "step-time", title: "Step time (band: fastest to slowest step, line: mean" +
      (w > 1 ? "; up to " + w + " steps per point" : "") + ")", x: [first, last], y: [0, ymax],
      yfmt: fmtDur, xfmt: fmtCount, xwhole: true, xlabel: "step" });
    var above = [];
    S.forEach(function (s) {
      var color = PHASE_COLORS[s.phase] || "#888", g = sv("g", { "data-phase": s.phase });
      runs(s.points, s.width).forEach(function (R) {
        var cx = function (p) { return f.x(p[0] + s.width / 2); };
        if (s.phase === "valid")
          g.appendChild(sv("rect", { x: f.x(R[0][0]), y: f.T, height: f.H - f.B - f.T, "class": "shade",
            width: Math.max(1, f.x(R[R.length - 1][0] + s.width) - f.x(R[0][0])) }));
        var top = R.map(function (p) { return cx(p) + "," + f.y(p[4]); });
        var bottom = R.slice().reverse().map(function (p) { return cx(p) + "," + f.y(p[2]); });
        g.appendChild(sv("polygon", { points: top.concat(bottom).join(" "), fill: color,
          "fill-opacity": "0.2", stroke: R.length === 1 ? color : "none" }));
        g.appendChild(sv("polyline", { points: R.map(function (p) { return cx(p) + "," + f.y(p[3]); }).join(" "),
          fill: "none", stroke: color, "stroke-width": "1.5" }));
        R.forEach(function (p) { if (p[4] > ymax) above.push([cx(p), p]); });
      });
      f.svg.appendChild(g);
    });
    above.forEach(function (a) { f.svg.appendChild(outlierMark(f, a[0], a[1], a[1][4])); });
    var box = el("div");
    box.appendChild(f.svg);
    var lg = legend(S.map(function (s) { return s.phase; }), PHASE_COLORS);
    if (clipped) lg.appendChild(outlierNote(above.length, Math.max.apply(null, all)));
    box.appendChild(lg);
    return box;
  }

  /* A point above the scale: a red triangle at the top edge, its figure in a tooltip. */
  function outlierMark(f, x, p, value) {
    var m = sv("path", { d: "M" + (x - 4) + "," + (f.T + 7) + "h8l-4,-7z", "class": "outlier" });
    m.appendChild(sv("title", {}, (p[1] > 1 ? "steps " + p[0] + "\u2013" + (p[0] + p[1] - 1) : "step " + p[0]) +
      ": " + fmtDur(value)));
    return m;
  }
  function outlierNote(n, top) {
    return el("span", { "class": "outlier-note" }, "\u25b2 " + n + " point" + (n > 1 ? "s" : "") +
      " above the scale (up to " + fmtDur(top) + ")");
  }

  function breakdownChart(D) {
    var P = D.steps.points, w = D.steps.width, cats = D.categories;
    var used = cats.filter(function (c, k) { return P.some(function (p) { return p[5 + k] > 0; }); });
    var totals = P.map(function (p) { var t = 0; for (var k = 0; k < cats.length; k++) t += p[5 + k]; return t; });
    /* The same robust scale as the step time: stacks above it are marked at the top edge. */
    var ymax = Math.max.apply(null, totals), cap = 1.5 * quantile(totals, 0.95), clipped = ymax > cap && cap > 0;
    if (clipped) ymax = cap;
    var last = P[P.length - 1][0] + w;
    var f = frame({ id: "breakdown", title: "Where each step's time goes (mean per point, stacked)",
      x: [P[0][0], last], y: [0, ymax], yfmt: fmtDur, xfmt: fmtCount, xwhole: true, xlabel: "step" });
    var base = P.map(function () { return 0; });
    var g = sv("g", { "class": "stack" });
    cats.forEach(function (c, k) {
      if (used.indexOf(c) < 0) return;
      var upper = P.map(function (p, i) { return base[i] + p[5 + k]; });
      var pts = [];
      P.forEach(function (p, i) { pts.push(f.x(p[0]) + "," + f.y(upper[i]), f.x(p[0] + w) + "," + f.y(upper[i])); });
      for (var i = P.length - 1; i >= 0; i--)
        pts.push(f.x(P[i][0] + w) + "," + f.y(base[i]), f.x(P[i][0]) + "," + f.y(base[i]));
      var poly = sv("polygon", { points: pts.join(" "), fill: COLORS[c] || "#888", "data-category": c });
      poly.appendChild(sv("title", {}, c));
      g.appendChild(poly);
      base = upper;
    });
    f.svg.appendChild(g);
    var above = P.filter(function (p, i) { return totals[i] > ymax; });
    above.forEach(function (p) { f.svg.appendChild(outlierMark(f, f.x(p[0] + w / 2), p, totals[P.indexOf(p)])); });
    var box = el("div");
    box.appendChild(f.svg);
    var lg = legend(used);
    if (clipped) lg.appendChild(outlierNote(above.length, Math.max.apply(null, totals)));
    box.appendChild(lg);
    return box;
  }

  /* Histogram on a log duration axis; p50 and p99 are dashed lines, named in the header row
   * above the plot (so their labels never cover a bar). */
  function histChart(h, title, id) {
    var B = h.buckets;
    var lo = Math.max(1, B[0][0]), hi = Math.max(lo * 1.5, B[B.length - 1][1] + 1);
    var cmax = Math.max.apply(null, B.map(function (b) { return b[2]; }));
    var f = frame({ id: id, title: title, width: 340, height: 230, x: [lo, hi],
      y: [0, cmax], xlog: true, yfmt: fmtCount, ywhole: true, xfmt: fmtDur, header: true });
    B.forEach(function (b) {
      var x0 = f.x(Math.max(lo, b[0])), x1 = f.x(b[1] + 1);
      f.svg.appendChild(sv("rect", { x: x0, width: Math.max(1, x1 - x0 - 0.5), y: f.y(b[2]),
        height: f.y(0) - f.y(b[2]), fill: "#4c78a8", "class": "bar" }));
    });
    var at = 4;
    [["p50", h.p50, "#1a7f37"], ["p99", h.p99, "#cf222e"]].forEach(function (m) {
      if (!(m[1] > 0)) return;
      var x = f.x(Math.min(Math.max(m[1], lo), hi));
      f.svg.appendChild(sv("line", { x1: x, x2: x, y1: f.T, y2: f.H - f.B, stroke: m[2],
        "stroke-width": "1.5", "stroke-dasharray": "4 3", "class": "marker", "data-marker": m[0] }));
      f.svg.appendChild(sv("line", { x1: at, x2: at + 14, y1: 30, y2: 30, stroke: m[2],
        "stroke-width": "1.5", "stroke-dasharray": "4 3" }));
      var text = m[0] + " " + fmtDur(m[1]);
      f.svg.appendChild(sv("text", { x: at + 18, y: 34, style: "fill:" + m[2] }, text));
      at += 18 + textWidth(text) + 14;
    });
    return f.svg;
  }

  function counterChart(c) {
    var P = c.points;
    var lo = Math.min.apply(null, P.map(function (p) { return p[1]; }));
    var hi = Math.max.apply(null, P.map(function (p) { return p[3]; }));
    if (lo > 0) lo = 0;
    var f = frame({ id: "counter", title: c.name, width: 340, height: 200,
      x: [P[0][0], P[P.length - 1][0] + 1],
      y: [lo, hi], yfmt: c.name.indexOf("device:") === 0 ? fmtDur : fmtNum, xfmt: function (t) { return fmtDur(t); } });
    f.svg.appendChild(sv("polyline", { points: P.map(function (p) { return f.x(p[0]) + "," + f.y(p[2]); }).join(" "),
      fill: "none", stroke: "#b279a2", "stroke-width": "1.5" }));
    return f.svg;
  }

  /* A table whose columns sort on click, in a box that keeps it within the page.
   * cols: [label, key, format, isText, optional]; optional columns give way on narrow pages. */
  function cls(c) { return (c[3] ? "text" : "") + (c[4] ? " opt" : ""); }
  function table(rows, cols, id) {
    var t = el("table", { "data-table": id }), head = el("tr"), body = el("tbody");
    cols.forEach(function (c, i) {
      var th = el("th", { "class": cls(c) }, c[0]);
      th.addEventListener("click", function () {
        var dir = th.getAttribute("data-dir") === "desc" ? 1 : -1;
        th.setAttribute("data-dir", dir > 0 ? "asc" : "desc");
        rows.sort(function (a, b) {
          var x = a[c[1]], y = b[c[1]];
          return (x < y ? -1 : x > y ? 1 : 0) * dir;
        });
        fill();
      });
      head.appendChild(th);
    });
    function fill() {
      body.textContent = "";
      rows.forEach(function (r) {
        var tr = el("tr");
        cols.forEach(function (c) {
          tr.appendChild(el("td", c[3] ? { "class": cls(c) + " name", title: r[c[1]] } : { "class": cls(c) },
            c[2](r[c[1]])));
        });
        body.appendChild(tr);
      });
    }
    var thead = el("thead");
    thead.appendChild(head);
    t.appendChild(thead);
    t.appendChild(body);
    fill();
    var wrap = el("div", { "class": "table-wrap" });
    wrap.appendChild(t);
    return wrap;
  }
  var id = function (v) { return v === null || v === undefined ? "" : v + ""; };

  function section(title) {
    var s = el("section");
    s.appendChild(el("h2", {}, title));
    document.getElementById("sw-main").appendChild(s);
    return s;
  }

  function render(D) {
    var R = D.run, main = document.getElementById("sw-main");
    main.appendChild(el("h1", {}, "stepwatch \u2014 " + R.name));
    var meta = el("div", { "class": "meta" });
    [["host", R.host], ["ranks", R.ranks], ["steps", fmtCount(R.steps)], ["run time", fmtDur(R.wall_ns)],
     ["warm-up steps", R.warmup_steps], ["started", R.start_unix_ns ? new Date(R.start_unix_ns / 1e6).toISOString() : ""]]
      .forEach(function (m) { if (m[1] !== "" && m[1] !== null) meta.appendChild(el("span", {}, m[0] + ": " + m[1])); });
    main.appendChild(meta);
    if (R.command) main.appendChild(el("div", { "class": "meta" }, R.command));

    var s = section("Diagnosis");
    var problems = D.findings.filter(function (f) { return f.severity !== "info"; });
    var unseen = D.findings.some(function (f) { return f.id === "not-separated"; });
    if (!problems.length) s.appendChild(el("p", { "class": "ok", id: "sw-no-problems" }, unseen ? "Nothing slow found in what could be measured, but not all of it could be:" : "No problems found."));
    D.findings.forEach(function (f) {
      var d = el("div", { "class": "finding " + f.severity, "data-finding": f.id });
      d.appendChild(el("span", { "class": "sev" }, f.severity));
      d.appendChild(el("span", { "class": "title" }, f.title));
      d.appendChild(el("div", {}, f.sentence));
      var n = el("div", { "class": "nums" });
      f.numbers.forEach(function (x) { n.appendChild(el("span", {}, x[0] + ": " + x[1])); });
      d.appendChild(n);
      s.appendChild(d);
    });

    s = section("Steps");
    if (D.steps.points.length && D.step_phases.length) {
      s.appendChild(stepTimeChart(D));
      s.appendChild(breakdownChart(D));
    } else {
      s.appendChild(el("p", { "class": "note" }, "No step records in this run."));
    }
    /* Device statistics and device time (docs/device.md), beside the step time. */
    var isDevice = function (c) { return /^(device:|cpu_|process_|gpu[0-9]+\.|(allocated|reserved)_bytes\.)/.test(c.name); };
    var dev = D.counters.filter(function (c) { return isDevice(c) && c.points.length; });
    if (dev.length) {
      s = section("Device");
      var dg = el("div", { "class": "hists", id: "sw-device" });
      dev.forEach(function (c) { dg.appendChild(counterChart(c)); });
      s.appendChild(dg);
    }

    s = section("Histograms");
    var grid = el("div", { "class": "hists" });
    if (D.step_hist.buckets.length) grid.appendChild(histChart(D.step_hist, "step (steady state)", "hist-step"));
    D.actions.filter(function (a) { return a.hist && a.hist.buckets.length; })
      .sort(function (a, b) { return b.total_ns - a.total_ns; })
      .forEach(function (a) { grid.appendChild(histChart(a.hist, a.action, "hist")); });
    s.appendChild(grid);
    s.appendChild(el("p", { "class": "note" }, "Log-scale duration axis; bucket width is 1/16 of a power of two, so quantiles are within 3.1 % (and never outside the fastest and slowest call)."));

    var cols = [["Action", "action", id, true], ["Category", "category", id, true, true],
      ["Calls", "calls", fmtCount], ["Mean", "mean_ns", fmtDur], ["Std", "std_ns", fmtDur, false, true],
      ["Min", "min_ns", fmtDur, false, true], ["p50", "p50_ns", fmtDur], ["p99", "p99_ns", fmtDur],
      ["Max", "max_ns", fmtDur], ["Total", "total_ns", fmtDur], ["Self", "self_ns", fmtDur, false, true],
      ["%", "pct", fmtPct], ["Samples/s", "samples_per_s", fmtRate]];
    if (D.actions.some(function (a) { return a.device_mean_ns !== undefined; }))
      cols.splice(4, 0, ["Device", "device_mean_ns", fmtDur]);
    s = section("Actions (all phases)");
    var roll = D.actions.filter(function (a) { return a.rollup; }).sort(function (a, b) { return b.total_ns - a.total_ns; });
    s.appendChild(table(roll, cols, "actions"));
    s = section("Actions per phase");
    var per = D.actions.filter(function (a) { return !a.rollup; }).sort(function (a, b) {
      return a.phase < b.phase ? -1 : a.phase > b.phase ? 1 : b.total_ns - a.total_ns; });
    s.appendChild(table(per, [["Phase", "phase", id, true]].concat(cols), "phases"));

    if (window.swFlames) window.swFlames(D, section, { el: el, sv: sv, fmtDur: fmtDur });

    s = section("Counters");
    if (D.counters.length) {
      s.appendChild(table(D.counters, [["Counter", "name", id, true], ["Samples", "count", fmtCount],
        ["Last", "last", fmtNum], ["Min", "min", fmtNum], ["Mean", "mean", fmtNum], ["Max", "max", fmtNum]], "counters"));
      var cg = el("div", { "class": "hists" });
      D.counters.forEach(function (c) { if (c.points.length && !isDevice(c)) cg.appendChild(counterChart(c)); });
      s.appendChild(cg);
    } else {
      s.appendChild(el("p", { "class": "note" }, "No counters recorded."));
    }

    s = section("Recording");
    var m = D.misuse, rec = [];
    for (var k in m) rec.push({ what: k.replace(/_/g, " "), n: m[k] });
    rec.push({ what: "dropped events", n: R.dropped_events });
    rec.push({ what: "threads", n: R.threads });
    s.appendChild(table(rec, [["What", "what", id, true], ["Count", "n", fmtCount]], "recording"));
    document.body.setAttribute("data-rendered", "1");
  }

  function fail(e) {
    var box = document.getElementById("sw-error");
    box.textContent = "The report could not be drawn: " + (e && e.stack ? e.stack : e);
    console.error(e);
  }
  try {
    render(JSON.parse(document.getElementById("sw-data").textContent));
  } catch (e) {
    fail(e);
  }
})();
