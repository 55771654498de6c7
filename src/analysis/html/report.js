/*
 * report.js — draws the stepwatch HTML report: reads the run's data from the JSON element
 * #sw-data and draws charts (inline SVG) and tables into main#sw-main.
 * Embedded into the page by the library (cmake/embed.cmake); the page's CSP forbids every
 * network request, so everything is drawn from that JSON. ES5, linted by
 * tests/python/test_html_assets.py (eslint, .eslintrc.json beside this file).
 */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = { data: "#e4572e", forward: "#4c78a8", loss: "#72b7b2", backward: "#54a24b",
    optimizer: "#b279a2", zero_grad: "#9d755d", callback: "#eeca3b", collective: "#ff9da6",
    other: "#bab0ac" };

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
  /* Read once, before anything is drawn: reading a width makes the browser lay out the page
   * drawn so far, which costs more the more there is. */
  var PAGE_WIDTH = null;
  function pageWidth() {
    if (PAGE_WIDTH === null)
      PAGE_WIDTH = Math.max(320, Math.min(1200, document.getElementById("sw-main").clientWidth || 960));
    return PAGE_WIDTH;
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
    var fx = function (v) {
      var x = L + (lx(v) - lx(x0)) / (lx(x1) - lx(x0)) * (W - L - R);
      return opts.clamp ? Math.max(L, Math.min(W - R, x)) : x;
    };
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
  /* A point of a series: [first step, steps, min, mean, max, median, first start ns, last
   * end ns, per-category means...]. Where a point lies on the x axis of view. */
  var CAT0 = 8;
  function pointX0(p, view) { return view.axis === "time" ? p[6] : p[0]; }
  function pointX1(p, view, w) { return view.axis === "time" ? p[7] : p[0] + w; }
  function stepsText(p) {
    return p[1] > 1 ? "steps " + p[0] + "\u2013" + (p[0] + p[1] - 1) + " (" + fmtCount(p[1]) + ")" : "step " + p[0];
  }
  function timeText(p) {
    return "at " + fmtDur(p[6]) + (p[1] > 1 ? "\u2013" + fmtDur(p[7]) : "") + " since the start";
  }
  /* The points of P within the view's zoom range (all without one). */
  function visible(P, view, w) {
    if (!view.range) return P;
    return P.filter(function (p) { return pointX1(p, view, w) > view.range[0] && pointX0(p, view) < view.range[1]; });
  }
  /* The x domain of the step charts: the zoom range, or every point of every series. */
  function domain(series, view) {
    if (view.range) return view.range;
    var lo = Infinity, hi = -Infinity;
    series.forEach(function (s) {
      s.points.forEach(function (p) {
        lo = Math.min(lo, pointX0(p, view));
        hi = Math.max(hi, pointX1(p, view, s.width));
      });
    });
    return [lo, hi];
  }
  function axisOpts(view) {
    return view.axis === "time" ? { xfmt: fmtDur, xwhole: false, xlabel: "wall time since the start" }
      : { xfmt: fmtCount, xwhole: true, xlabel: "step" };
  }

  /* The tooltip shared by every chart: fixed near the pointer, lines of text. */
  function tip(lines, e) {
    var t = document.getElementById("sw-tip");
    if (!lines) { t.style.display = "none"; return; }
    t.textContent = lines.join("\n");
    t.style.display = "block";
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + t.offsetWidth > window.innerWidth - 4) x = Math.max(4, e.clientX - 14 - t.offsetWidth);
    if (y + t.offsetHeight > window.innerHeight - 4) y = Math.max(4, e.clientY - 14 - t.offsetHeight);
    t.style.left = x + "px";
    t.style.top = y + "px";
  }

  /* Hover and brush on a chart's plot area: a transparent rect over it. lines(x) gives the
   * tooltip of domain position x; a drag wider than 4 px calls zoom([lo, hi]). */
  function interact(f, lines, zoom) {
    var guide = sv("line", { x1: 0, x2: 0, y1: f.T, y2: f.H - f.B, "class": "guide", visibility: "hidden" });
    var brush = sv("rect", { x: 0, y: f.T, width: 0, height: f.H - f.B - f.T, "class": "brush", visibility: "hidden" });
    var hit = sv("rect", { x: f.L, y: f.T, width: f.W - f.L - f.R, height: f.H - f.B - f.T, "class": "hit" });
    f.svg.appendChild(guide);
    f.svg.appendChild(brush);
    f.svg.appendChild(hit);
    var start = null;
    function px(e) {
      var r = f.svg.getBoundingClientRect();
      return Math.max(f.L, Math.min(f.W - f.R, (e.clientX - r.left) * f.W / r.width));
    }
    function at(x) { return f.x0 + (x - f.L) / (f.W - f.L - f.R) * (f.x1 - f.x0); }
    hit.addEventListener("mousemove", function (e) {
      var x = px(e);
      guide.setAttribute("x1", x);
      guide.setAttribute("x2", x);
      guide.setAttribute("visibility", "visible");
      if (start !== null) {
        brush.setAttribute("x", Math.min(start, x));
        brush.setAttribute("width", Math.abs(x - start));
        brush.setAttribute("visibility", "visible");
      }
      tip(lines(at(x)), e);
    });
    hit.addEventListener("mouseleave", function () {
      guide.setAttribute("visibility", "hidden");
      tip(null);
    });
    hit.addEventListener("mousedown", function (e) { start = px(e); e.preventDefault(); });
    hit.addEventListener("mouseup", function (e) {
      var x = px(e), from = start;
      start = null;
      brush.setAttribute("visibility", "hidden");
      if (from !== null && Math.abs(x - from) > 4) {
        tip(null);
        zoom([at(Math.min(from, x)), at(Math.max(from, x))]);
      }
    });
  }
  /* The point of P under domain position x (the nearest one in a gap). */
  function pointAt(P, view, w, x) {
    var best = null, dist = Infinity;
    P.forEach(function (p) {
      var a = pointX0(p, view), b = pointX1(p, view, w);
      var d = x < a ? a - x : x > b ? x - b : 0;
      if (d < dist) { dist = d; best = p; }
    });
    return best;
  }

  /* Step time per phase: a band from the fastest to the slowest step of each point (a pixel
   * column or less: the points were computed when the page was written) and a line through
   * their medians, train and valid in their own colours (valid on a shaded ground). The
   * scale is robust: it ends at 1.5 x the 95th percentile of the points' slowest steps, so
   * one stall does not flatten every normal step; points above it are marked at the top. */
  function stepTimeChart(D, view, zoom) {
    var S = D.step_phases.filter(function (s) { return s.points.length; });
    var dom = domain(S, view), all = [];
    var V = S.map(function (s) {
      var P = visible(s.points, view, s.width);
      P.forEach(function (p) { all.push(p[4]); });
      return P;
    });
    var ymax = Math.max.apply(null, all.concat([0])), cap = 1.5 * quantile(all, 0.95), clipped = ymax > cap && cap > 0;
    if (clipped) ymax = cap;
    var w = Math.max.apply(null, S.map(function (s) { return s.width; }));
    var ax = axisOpts(view);
    var f = frame({ id: "step-time", title: "Step time (band: fastest to slowest step, line: median" +
      (w > 1 ? "; up to " + w + " steps per point" : "") + ")", x: dom, y: [0, ymax], clamp: true,
      yfmt: fmtDur, xfmt: ax.xfmt, xwhole: ax.xwhole, xlabel: ax.xlabel });
    var above = [];
    S.forEach(function (s, k) {
      var color = PHASE_COLORS[s.phase] || "#888", g = sv("g", { "data-phase": s.phase });
      runs(V[k], s.width).forEach(function (R) {
        var cx = function (p) { return f.x((pointX0(p, view) + pointX1(p, view, s.width)) / 2); };
        if (s.phase === "valid")
          g.appendChild(sv("rect", { x: f.x(pointX0(R[0], view)), y: f.T, height: f.H - f.B - f.T, "class": "shade",
            width: Math.max(1, f.x(pointX1(R[R.length - 1], view, s.width)) - f.x(pointX0(R[0], view))) }));
        var top = R.map(function (p) { return cx(p) + "," + f.y(p[4]); });
        var bottom = R.slice().reverse().map(function (p) { return cx(p) + "," + f.y(p[2]); });
        g.appendChild(sv("polygon", { points: top.concat(bottom).join(" "), fill: color,
          "fill-opacity": "0.2", stroke: R.length === 1 ? color : "none" }));
        g.appendChild(sv("polyline", { points: R.map(function (p) { return cx(p) + "," + f.y(p[5]); }).join(" "),
          fill: "none", stroke: color, "stroke-width": "1.5" }));
        R.forEach(function (p) { if (p[4] > ymax) above.push([cx(p), p]); });
      });
      f.svg.appendChild(g);
    });
    above.forEach(function (a) { f.svg.appendChild(outlierMark(f, a[0], a[1], a[1][4])); });
    interact(f, function (x) {
      var lines = [];
      S.forEach(function (s, k) {
        var p = pointAt(V[k], view, s.width, x);
        if (!p || pointX0(p, view) > x + (f.x1 - f.x0) / 100 || pointX1(p, view, s.width) < x - (f.x1 - f.x0) / 100) return;
        if (!lines.length) lines.push(stepsText(p), timeText(p));
        lines.push(s.phase + ": median " + fmtDur(p[5]) + ", mean " + fmtDur(p[3]),
          "  fastest " + fmtDur(p[2]) + ", slowest " + fmtDur(p[4]));
      });
      return lines.length ? lines : null;
    }, zoom);
    var slowNote = window.swSlow ? window.swSlow.marks(D, f, view, helpers()) : null; /* slow.js */
    var box = el("div");
    box.appendChild(f.svg);
    var lg = legend(S.map(function (s) { return s.phase; }), PHASE_COLORS);
    if (clipped) lg.appendChild(outlierNote(above.length, Math.max.apply(null, all)));
    if (slowNote) lg.appendChild(slowNote);
    box.appendChild(lg);
    return box;
  }

  /* A point above the scale: a red triangle at the top edge, its figure in a tooltip. */
  function outlierMark(f, x, p, value) {
    var m = sv("path", { d: "M" + (x - 4) + "," + (f.T + 7) + "h8l-4,-7z", "class": "outlier" });
    m.appendChild(sv("title", {}, stepsText(p) + ": " + fmtDur(value)));
    return m;
  }
  function outlierNote(n, top) {
    return el("span", { "class": "outlier-note" }, "\u25b2 " + n + " point" + (n > 1 ? "s" : "") +
      " above the scale (up to " + fmtDur(top) + ")");
  }

  function breakdownChart(D, view, zoom) {
    var w = D.steps.width, cats = D.categories, P = visible(D.steps.points, view, w);
    var used = cats.filter(function (c, k) { return P.some(function (p) { return p[CAT0 + k] > 0; }); });
    var totals = P.map(function (p) { var t = 0; for (var k = 0; k < cats.length; k++) t += p[CAT0 + k]; return t; });
    /* The same robust scale as the step time: stacks above it are marked at the top edge. */
    var ymax = Math.max.apply(null, totals.concat([0])), cap = 1.5 * quantile(totals, 0.95), clipped = ymax > cap && cap > 0;
    if (clipped) ymax = cap;
    var ax = axisOpts(view);
    var f = frame({ id: "breakdown", title: "Where each step's time goes (mean per point, stacked)",
      x: domain([D.steps], view), y: [0, ymax], clamp: true, yfmt: fmtDur, xfmt: ax.xfmt, xwhole: ax.xwhole,
      xlabel: ax.xlabel });
    var base = P.map(function () { return 0; });
    var g = sv("g", { "class": "stack" });
    cats.forEach(function (c, k) {
      if (used.indexOf(c) < 0) return;
      var upper = P.map(function (p, i) { return base[i] + p[CAT0 + k]; });
      var pts = [];
      P.forEach(function (p, i) {
        pts.push(f.x(pointX0(p, view)) + "," + f.y(upper[i]), f.x(pointX1(p, view, w)) + "," + f.y(upper[i]));
      });
      for (var i = P.length - 1; i >= 0; i--)
        pts.push(f.x(pointX1(P[i], view, w)) + "," + f.y(base[i]), f.x(pointX0(P[i], view)) + "," + f.y(base[i]));
      var poly = sv("polygon", { points: pts.join(" "), fill: COLORS[c] || "#888", "data-category": c });
      poly.appendChild(sv("title", {}, c));
      g.appendChild(poly);
      base = upper;
    });
    f.svg.appendChild(g);
    P.forEach(function (p, i) {
      if (totals[i] > ymax) f.svg.appendChild(outlierMark(f, f.x((pointX0(p, view) + pointX1(p, view, w)) / 2), p, totals[i]));
    });
    interact(f, function (x) {
      var p = pointAt(P, view, w, x);
      if (!p) return null;
      var lines = [stepsText(p), timeText(p), "step (mean) " + fmtDur(p[3])];
      cats.forEach(function (c, k) { if (p[CAT0 + k] > 0) lines.push(c + " " + fmtDur(p[CAT0 + k])); });
      return lines;
    }, zoom);
    var box = el("div");
    box.appendChild(f.svg);
    var lg = legend(used);
    if (clipped) lg.appendChild(outlierNote(P.filter(function (p, i) { return totals[i] > ymax; }).length,
      Math.max.apply(null, totals)));
    box.appendChild(lg);
    return box;
  }

  /* The step charts' views (x axis, zoom) in their order on the page, kept across the live
   * page's redraws (live.js through window.swReport), so that new data keeps the zoom. */
  var VIEWS = [], viewsDrawn = 0;
  /* The step charts with their controls: the x axis (step or wall time), zoom and reset. */
  function stepCharts(D) {
    var k = viewsDrawn++;
    var view = VIEWS[k] || (VIEWS[k] = { axis: "step", range: null }), box = el("div", { "class": "steps" });
    var bar = el("div", { "class": "controls" }), holder = el("div");
    var axes = [["step", "x: step"], ["time", "x: wall time"]].map(function (a) {
      var b = el("button", { type: "button", "data-axis": a[0] }, a[1]);
      b.addEventListener("click", function () { view.axis = a[0]; view.range = null; draw(); });
      bar.appendChild(b);
      return b;
    });
    var reset = el("button", { type: "button", "data-action": "reset-zoom" }, "Reset zoom");
    reset.addEventListener("click", function () { view.range = null; draw(); });
    bar.appendChild(reset);
    bar.appendChild(el("span", { "class": "note" }, "Hover for the figures; drag across a chart to zoom."));
    box.appendChild(bar);
    box.appendChild(holder);
    function zoom(r) { view.range = r; draw(); }
    function draw() {
      holder.textContent = "";
      holder.appendChild(stepTimeChart(D, view, zoom));
      holder.appendChild(breakdownChart(D, view, zoom));
      axes.forEach(function (b) { b.className = b.getAttribute("data-axis") === view.axis ? "on" : ""; });
      reset.disabled = !view.range;
      box.setAttribute("data-axis", view.axis);
      box.setAttribute("data-zoom", view.range ? view.range.map(function (v) { return Math.round(v); }).join(",") : "");
    }
    draw();
    return box;
  }

  /* Histograms on a log duration axis, one or several overlaid (hs: [{hist, name, color}]);
   * p50 and p99 are dashed lines, named in the header row above the plot (so their labels
   * never cover a bar). Hovering a bar gives its range and count. */
  function histChart(hs, title, id, width) {
    var lo = Infinity, hi = 0, cmax = 0;
    hs.forEach(function (s) {
      var B = s.hist.buckets;
      lo = Math.min(lo, Math.max(1, B[0][0]));
      hi = Math.max(hi, B[B.length - 1][1] + 1);
      B.forEach(function (b) { cmax = Math.max(cmax, b[2]); });
    });
    hi = Math.max(lo * 1.5, hi);
    var f = frame({ id: id, title: title, width: width || 340, height: 230, x: [lo, hi],
      y: [0, cmax], xlog: true, yfmt: fmtCount, ywhole: true, xfmt: fmtDur, header: true });
    var at = 4, overlay = hs.length > 1;
    hs.forEach(function (s) {
      s.hist.buckets.forEach(function (b) {
        var x0 = f.x(Math.max(lo, b[0])), x1 = f.x(b[1] + 1);
        var r = sv("rect", { x: x0, width: Math.max(1, x1 - x0 - 0.5), y: f.y(b[2]),
          height: f.y(0) - f.y(b[2]), fill: s.color || "#4c78a8", "class": "bar", "data-series": s.name || "" });
        if (overlay) r.setAttribute("fill-opacity", "0.55");
        r.appendChild(sv("title", {}, (s.name ? s.name + ": " : "") + fmtDur(b[0]) + "\u2013" + fmtDur(b[1]) +
          ": " + fmtCount(b[2]) + (b[2] === 1 ? " call" : " calls")));
        f.svg.appendChild(r);
      });
      [["p50", s.hist.p50, overlay ? s.color : "#1a7f37", "4 3"], ["p99", s.hist.p99, overlay ? s.color : "#cf222e", "1 2"]].forEach(function (m) {
        if (!(m[1] > 0)) return;
        var x = f.x(Math.min(Math.max(m[1], lo), hi));
        f.svg.appendChild(sv("line", { x1: x, x2: x, y1: f.T, y2: f.H - f.B, stroke: m[2],
          "stroke-width": "1.5", "stroke-dasharray": m[3], "class": "marker", "data-marker": m[0] }));
        var text = (overlay ? s.name + " " : "") + m[0] + " " + fmtDur(m[1]);
        if (at + 18 + textWidth(text) > f.W - 2) return;
        f.svg.appendChild(sv("line", { x1: at, x2: at + 14, y1: 30, y2: 30, stroke: m[2],
          "stroke-width": "1.5", "stroke-dasharray": m[3] }));
        f.svg.appendChild(sv("text", { x: at + 18, y: 34, style: "fill:" + m[2] }, text));
        at += 18 + textWidth(text) + 14;
      });
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

  /* Bytes: "812 B", "3.40 KiB", "512 MiB", "1.25 GiB". */
  function fmtBytes(v) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(v) >= 1023.5 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? Math.round(v) + "" : sig3(v)) + " " + units[i];
  }

  /* Memory per step (docs/core.md): one line per figure (RSS; torch's CUDA allocator's
   * allocated, peak and reserved), the mean of each point's steps; hover for the figures. */
  var MEMORY_COLORS = { RSS: "#4c78a8", allocated: "#e4572e", "peak allocated": "#eeca3b",
    reserved: "#54a24b" };
  function memoryChart(M) {
    var S = M.series, x0 = Infinity, x1 = -Infinity, hi = 0;
    S.forEach(function (s) {
      s.points.forEach(function (p) { x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0] + s.width); hi = Math.max(hi, p[3]); });
    });
    var f = frame({ id: "memory", title: "Memory per step (mean of the steps of each point)", height: 240,
      x: [x0, x1], y: [0, hi * 1.05], yfmt: fmtBytes, xfmt: fmtCount, xwhole: true, xlabel: "step" });
    var mid = function (s, p) { return f.x(p[0] + s.width / 2); };
    S.forEach(function (s) {
      f.svg.appendChild(sv("polyline", { points: s.points.map(function (p) { return mid(s, p) + "," + f.y(p[2]); }).join(" "),
        fill: "none", stroke: MEMORY_COLORS[s.name] || "#888", "stroke-width": "1.5", "class": "memory",
        "data-series": s.name }));
    });
    interact(f, function (x) {
      var lines = [];
      S.forEach(function (s) {
        var best = null;
        s.points.forEach(function (p) { if (!best || Math.abs(p[0] + s.width / 2 - x) < Math.abs(best[0] + s.width / 2 - x)) best = p; });
        if (!best) return;
        if (!lines.length) lines.push(s.width > 1 ? "steps " + fmtCount(best[0]) + "\u2013" + fmtCount(best[0] + s.width - 1) : "step " + fmtCount(best[0]));
        lines.push(s.name + ": " + fmtBytes(best[2]) + (best[1] !== best[3] ? " (" + fmtBytes(best[1]) + "\u2013" + fmtBytes(best[3]) + ")" : ""));
      });
      return lines.length ? lines : null;
    }, function () {});
    var box = el("div", { id: "sw-memory" });
    box.appendChild(f.svg);
    box.appendChild(legend(S.map(function (s) { return s.name; }), MEMORY_COLORS));
    return box;
  }

  /* A table whose columns sort on click, in a box that keeps it within the page.
   * cols: [label, key, format, isText, optional]; optional columns give way on narrow pages. */
  /* c[4]: true, the column gives way under 1100 px; "wide", under 1300 px (report.css) */
  function cls(c) { return (c[3] ? "text" : "") + (c[4] === "wide" ? " opt-wide" : c[4] ? " opt" : ""); }
  /* onRow(row): a click on a row (its rows are marked "pick"). */
  function table(rows, cols, id, onRow) {
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
        var tr = el("tr", onRow ? { "class": "pick" } : {});
        if (onRow) tr.addEventListener("click", function () { onRow(r); });
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

  /* A section of the page: a heading and what follows, appended to parent (main). */
  function section(title, parent) {
    var s = el("section");
    s.appendChild(el("h2", {}, title));
    (parent || document.getElementById("sw-main")).appendChild(s);
    return s;
  }
  function sum(a) { return a.reduce(function (x, y) { return x + y; }, 0); }
  /* What the other scripts (slow.js) draw with. */
  function helpers() {
    return { el: el, sv: sv, fmtDur: fmtDur, fmtCount: fmtCount, tip: tip, table: table, COLORS: COLORS,
      width: pageWidth };
  }

  /* The phase's communication on the device and its exposed part (the counters
   * "device:<phase>/comm" and ".../comm_exposed", docs/device.md), or null without any. */
  function commLine(D, phase) {
    var find = function (n) { return (D.counters || []).filter(function (c) { return c.name === n && c.count > 0; })[0]; };
    var comm = find("device:" + phase + "/comm"), exposed = find("device:" + phase + "/comm_exposed");
    if (!comm) return null;
    var ex = exposed ? exposed.mean : 0;
    return el("p", { "class": "note glance-comm", "data-comm": phase }, "Communication: " + fmtDur(comm.mean) +
      " per step on the device, " + fmtDur(ex) + " exposed (" + fmtPct(comm.mean > 0 ? 100 * ex / comm.mean : 0) + ")");
  }

  /* At a glance: per phase, one bar of the steady step's mean time split by category, the
   * times written on the segments that have room (all of them in the legend below and on
   * hover), the mean step and samples/s above it. scale: ns per px, shared by the bars of a
   * comparison so their lengths compare. */
  function glanceBars(D, width, scale) {
    var box = el("div", { "class": "glance" });
    D.breakdown.forEach(function (b) {
      var total = sum(b.category_ns) || b.step_ns || 1, H = 30;
      var head = el("div", { "class": "glance-head" });
      head.appendChild(el("b", {}, b.phase + " step " + fmtDur(b.step_ns)));
      head.appendChild(el("span", {}, (b.samples_per_s !== null ? fmtRate(b.samples_per_s).replace("/s", " samples/s") + " \u00b7 " : "") +
        fmtCount(b.steps) + " steady steps" + (D.run.warmup_steps ? " (warm-up excluded)" : "")));
      box.appendChild(head);
      var W = width, len = scale ? Math.min(W, total / scale) : W;
      var svg = sv("svg", { "class": "chart glance-bar", "data-chart": "glance-" + b.phase, width: W, height: H,
        viewBox: "0 0 " + W + " " + H, role: "img" });
      svg.appendChild(sv("title", {}, b.phase + " step: where its time goes"));
      var x = 0, lg = el("div", { "class": "legend glance-legend" });
      D.categories.forEach(function (c, k) {
        var v = b.category_ns[k];
        if (!(v > 0)) return;
        var w = v / total * len, pct = 100 * v / total;
        var g = sv("g", { "data-category": c });
        g.appendChild(sv("rect", { x: x, y: 0, width: Math.max(0.5, w - 1), height: H, fill: COLORS[c] || "#888", "class": "segment" }));
        g.appendChild(sv("title", {}, c + ": " + fmtDur(v) + " (" + fmtPct(pct) + ")"));
        var label = c + " " + fmtDur(v);
        if (textWidth(label, 12) + 8 > w) label = fmtDur(v);
        if (textWidth(label, 12) + 8 <= w)
          g.appendChild(sv("text", { x: x + 4, y: H / 2 + 4, "class": "seg-label" }, label));
        svg.appendChild(g);
        var item = el("span");
        var sw = el("i");
        sw.style.background = COLORS[c] || "#888";
        item.appendChild(sw);
        item.appendChild(document.createTextNode(c + " " + fmtDur(v) + " (" + fmtPct(pct) + ")"));
        lg.appendChild(item);
        x += w;
      });
      box.appendChild(svg);
      box.appendChild(lg);
      var comm = commLine(D, b.phase);
      if (comm) box.appendChild(comm);
    });
    if (!D.breakdown.length) box.appendChild(el("p", { "class": "note" }, "No steady steps in this run."));
    return box;
  }

  /* Goodput: one stacked bar of the run's wall time, the steady training steps first, then
   * every cause of the rest (D.goodput, from the "goodput_ns" note: python/stepwatch/
   * goodput.py), and the same as a table. */
  var GOODPUT_COLORS = { steady: "#54a24b", "start-up": "#9d755d", compilation: "#b279a2",
    "data wait": "#e4572e", "warm-up": "#bab0ac", evaluation: "#f58518", checkpoints: "#72b7b2",
    idle: "#eeca3b", "the end": "#79706e" };
  function goodputBar(G, width) {
    var box = el("div", { "class": "goodput" }), H = 24, W = width;
    var head = el("div", { "class": "glance-head" });
    head.appendChild(el("b", {}, "goodput " + fmtPct(G.percent)));
    head.appendChild(el("span", {}, "of " + fmtDur(G.wall_ns) + " wall time in steady training steps"));
    box.appendChild(head);
    var parts = [{ cause: "steady", ns: G.steady_ns, percent: G.percent }].concat(G.lost);
    var svg = sv("svg", { "class": "chart goodput-bar", "data-chart": "goodput", width: W, height: H,
      viewBox: "0 0 " + W + " " + H, role: "img" });
    svg.appendChild(sv("title", {}, "the run's wall time: steady training and what was lost"));
    var x = 0;
    parts.forEach(function (p) {
      if (!(p.ns > 0)) return;
      var w = p.ns / G.wall_ns * W, g = sv("g", { "data-cause": p.cause });
      g.appendChild(sv("rect", { x: x, y: 0, width: Math.max(0.5, w - 1), height: H,
        fill: GOODPUT_COLORS[p.cause] || "#888", "class": "segment" }));
      g.appendChild(sv("title", {}, p.cause + ": " + fmtDur(p.ns) + " (" + fmtPct(p.percent) + ")"));
      var label = p.cause + " " + fmtPct(p.percent);
      if (textWidth(label, 12) + 8 <= w)
        g.appendChild(sv("text", { x: x + 4, y: H / 2 + 4, "class": "seg-label" }, label));
      svg.appendChild(g);
      x += w;
    });
    box.appendChild(svg);
    var rows = parts.filter(function (p) { return p.ns > 0; }).map(function (p) {
      return { cause: p.cause === "steady" ? "steady training steps" : p.cause, ns: p.ns, percent: p.percent };
    });
    box.appendChild(table(rows, [["Where the wall time went", "cause", id, true], ["Time", "ns", fmtDur],
      ["Share", "percent", fmtPct]], "goodput"));
    return box;
  }

  /* Efficiency per phase (D.efficiency, src/report/efficiency_phases.c): each phase's FLOPs
   * per step, FLOP/s and MFU on host time and, where the run has device time, on device
   * time. MFU null: unknown (no peak) or not model FLOPs (the optimizer). */
  function fmtSi(v, unit) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    var units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++)
      if (Math.abs(v) >= units[i][0] * 0.9995) return sig3(v / units[i][0]) + " " + units[i][1] + unit;
    return sig3(v) + " " + unit;
  }
  function fmtFlops(v) { return fmtSi(v, "FLOP/s"); }
  function fmtMfu(v) { return v === null || v === undefined ? "-" : fmtPct(100 * v); }
  function efficiencyOf(D) {
    if (!D.efficiency || !D.efficiency.phases.length) return null;
    var by = {};
    D.efficiency.phases.forEach(function (e) { by[e.phase] = e; });
    return by;
  }
  function efficiencyTable(D) {
    if (!efficiencyOf(D)) return null;
    var device = D.efficiency.phases.some(function (e) { return e.flops_per_s_device !== undefined; });
    var cols = [["Phase", "phase", id, true], ["FLOP/step", "flops_per_step", function (v) { return fmtSi(v, "FLOP"); }],
      ["FLOP/s host", "flops_per_s", fmtFlops], ["MFU host", "mfu", fmtMfu]];
    if (device) cols = cols.concat([["FLOP/s dev", "flops_per_s_device", fmtFlops], ["MFU dev", "mfu_device", fmtMfu]]);
    var box = el("div", { "class": "efficiency" });
    var head = el("div", { "class": "glance-head" });
    head.appendChild(el("b", {}, "efficiency per phase"));
    box.appendChild(head);
    box.appendChild(table(D.efficiency.phases.slice(), cols, "efficiency"));
    return box;
  }

  /* Host time beside device time per category (the actions' roll-ups; device time is the
   * GPU time of the same calls, docs/device.md), when the run measured any. */
  function deviceTable(D) {
    var rows = D.categories.map(function (c) {
      var host = 0, dev = 0, any = false;
      D.actions.forEach(function (a) {
        if (!a.rollup || a.category !== c) return;
        host += a.total_ns;
        if (a.device_mean_ns !== undefined && a.device_mean_ns !== null) { dev += a.device_mean_ns * a.calls; any = true; }
      });
      return { category: c, host: host, device: any ? dev : null, ratio: any && host ? 100 * dev / host : null };
    }).filter(function (r) { return r.host > 0 || r.device; });
    if (!rows.some(function (r) { return r.device !== null; })) return null;
    return table(rows, [["Category", "category", id, true], ["Host time", "host", fmtDur],
      ["Device time", "device", fmtDur], ["Device / host", "ratio", fmtPct]], "device-time");
  }

  /* Ranks x categories: each rank's mean time per steady step, coloured by how far it is
   * above the median rank of its column; the stragglers with their blame below. */
  /* The heatmap's columns: the categories, then each collective op of the cross-rank view
   * ("in allreduce") and TFLOP/s, whose cells redden the further *below* the median. */
  function rankColumns(D) {
    var R = D.ranks.per_rank, cats = ["step"].concat(D.categories), cols = [];
    cats.forEach(function (c, k) {
      if (R.some(function (r) { return r[2 + k] > 0; }))
        cols.push({ name: c, fmt: fmtDur, unit: " per step", get: function (r) { return r[2 + k]; } });
    });
    var byRank = {};
    (D.ranks.view_rows || []).forEach(function (v) { byRank[v[0]] = v; });
    (D.ranks.ops || []).forEach(function (op, j) {
      cols.push({ name: "in " + op.name, op: op.name, fmt: fmtDur, unit: " per step",
        get: function (r) { var v = byRank[r[0]]; return v ? v[2 + j] : null; } });
    });
    if ((D.ranks.view_rows || []).some(function (v) { return v[1] !== null; }))
      cols.push({ name: "TFLOP/s", low: true, unit: "", fmt: function (x) { return x === null ? "-" : x.toPrecision(3); },
        get: function (r) { var v = byRank[r[0]]; return v ? v[1] : null; } });
    var peak = D.ranks.mfu_peak; /* one peak for every rank: each rank's MFU, lower redder */
    if (peak && (D.ranks.view_rows || []).some(function (v) { return v[1] !== null; }))
      cols.push({ name: "MFU", low: true, unit: "", fmt: function (x) { return x === null ? "-" : fmtPct(100 * x); },
        get: function (r) { var v = byRank[r[0]]; return v && v[1] !== null ? v[1] * 1e12 / peak : null; } });
    return cols;
  }

  function rankHeatmap(D) {
    var R = D.ranks.per_rank, used = rankColumns(D);
    var cw = 88, rh = 20, L = 70, T = 34, W = L + used.length * cw + 4, H = T + R.length * rh + 4;
    var svg = sv("svg", { "class": "chart heatmap", "data-chart": "rank-heatmap", width: W, height: H,
      viewBox: "0 0 " + W + " " + H, role: "img" });
    svg.appendChild(sv("title", {}, "Mean time per steady step, per rank and category"));
    used.forEach(function (c, j) {
      var col = R.map(c.get).filter(function (v) { return v !== null; });
      var med = quantile(col, 0.5) || 1;
      svg.appendChild(sv("text", { x: L + j * cw + cw / 2, y: T - 8, "text-anchor": "middle" }, fitText(c.name, cw - 4)));
      R.forEach(function (r, i) {
        var v = c.get(r), off = v === null ? 0 : c.low ? 1 - v / med : v / med - 1;
        var excess = Math.max(0, Math.min(1, off / 0.5));
        var g = sv("g", { "data-rank": r[0], "data-category": c.name });
        if (c.op) g.setAttribute("data-op", c.op);
        g.appendChild(sv("rect", { x: L + j * cw, y: T + i * rh, width: cw - 2, height: rh - 2, "class": "cell",
          fill: "rgb(" + Math.round(255 - 48 * excess) + "," + Math.round(245 - 211 * excess) + "," + Math.round(240 - 194 * excess) + ")" }));
        g.appendChild(sv("title", {}, "rank " + r[0] + ", " + c.name + ": " + c.fmt(v) + c.unit + " (median rank " + c.fmt(med) + ")"));
        g.appendChild(sv("text", { x: L + j * cw + cw / 2, y: T + i * rh + 14, "text-anchor": "middle", "class": "cell-label" }, c.fmt(v)));
        svg.appendChild(g);
      });
    });
    R.forEach(function (r, i) { svg.appendChild(sv("text", { x: 4, y: T + i * rh + 14 }, "rank " + r[0])); });
    return svg;
  }

  /* The sections of one run. Returns nothing; appends to parent. */
  function runSections(D, parent, prefix) {
    var P = prefix || "", R = D.run;
    var s = section(P + "Diagnosis", parent);
    var problems = D.findings.filter(function (f) { return f.severity !== "info"; });
    var unseen = D.findings.some(function (f) { return f.id === "not-separated"; });
    if (!problems.length) s.appendChild(el("p", { "class": "ok", id: "sw-no-problems" }, unseen ? "Nothing slow found in what could be measured, but not all of it could be:" : "No problems found."));
    D.findings.forEach(function (f) {
      var d = el("div", { "class": "finding " + f.severity, "data-finding": f.id });
      d.appendChild(el("span", { "class": "sev" }, f.severity));
      d.appendChild(el("span", { "class": "title" }, f.title));
      (f.lines || [f.sentence]).forEach(function (line) { d.appendChild(el("div", {}, line)); });
      var n = el("div", { "class": "nums" });
      f.numbers.forEach(function (x) { n.appendChild(el("span", {}, x[0] + ": " + x[1])); });
      d.appendChild(n);
      s.appendChild(d);
    });

    s = section(P + "Steps", parent);
    if (D.steps.points.length && D.step_phases.length) {
      s.appendChild(stepCharts(D));
    } else {
      s.appendChild(el("p", { "class": "note" }, "No step records in this run."));
    }
    /* Memory per step (docs/core.md, "Memory per step"), beside the step time. */
    if (D.memory && D.memory.series.length) {
      s = section(P + "Memory", parent);
      s.appendChild(el("p", { "class": "note", "data-memory": "summary" }, "Memory per step: " + D.memory.summary));
      s.appendChild(memoryChart(D.memory));
    }
    if (window.swSlow) window.swSlow.section(D, function (t) { return section(P + t, parent); }, helpers());
    /* Device statistics and device time (docs/device.md), beside the step time. */
    var isDevice = function (c) { return /^(device:|cpu_|process_|gpu[0-9]+\.|(allocated|reserved)_bytes\.)/.test(c.name); };
    var dev = D.counters.filter(function (c) { return isDevice(c) && c.points.length; });
    var devTable = deviceTable(D);
    if (dev.length || devTable) {
      s = section(P + "Device", parent);
      if (devTable) {
        s.appendChild(el("p", { "class": "note" }, "Host time beside device (GPU) time per category, over the whole run."));
        s.appendChild(devTable);
      }
      var dg = el("div", { "class": "hists", id: "sw-device" });
      dev.forEach(function (c) { dg.appendChild(counterChart(c)); });
      s.appendChild(dg);
    }

    if (D.ranks && D.ranks.per_rank.length > 1) {
      s = section(P + "Ranks", parent);
      s.appendChild(el("p", { "class": "note" }, "Mean time per steady step on each rank (with the time inside each collective op, and TFLOP/s where FLOPs were counted); the redder a cell, the further above the median rank of its column (full red at +50 %; TFLOP/s: below)."));
      if (D.ranks.wait) s.appendChild(el("p", { "class": "finding warning", "data-ranks": "wait" }, "Waiting: " + D.ranks.wait + "."));
      var hw = el("div", { "class": "table-wrap" });
      hw.appendChild(rankHeatmap(D));
      s.appendChild(hw);
      if (D.ranks.stragglers.length) {
        s.appendChild(el("h3", {}, "Stragglers (slower than the other ranks by at least " + fmtDur(D.ranks.threshold_ns) + " per step)"));
        s.appendChild(table(D.ranks.stragglers, [["Rank", "rank", fmtCount], ["Host", "host", id, true],
          ["Excess per step", "excess_ns", fmtDur], ["Blame", "blame", id, true], ["Blamed excess", "blame_ns", fmtDur],
          ["Part", "part", id, true], ["Part excess", "part_ns", fmtDur], ["Step", "step_ns", fmtDur]], "stragglers"));
      } else {
        s.appendChild(el("p", { "class": "ok" }, "No straggler: no rank is slower than the others by the threshold."));
      }
    }

    s = section(P + "Histograms", parent);
    var grid = el("div", { "class": "hists" });
    D.step_hists.forEach(function (h) {
      if (h.hist.buckets.length)
        grid.appendChild(histChart([{ hist: h.hist }], h.phase + " steps, steady state (" + fmtCount(h.steps) + ")", "hist-step"));
    });
    /* (the step action is the step histograms above) */
    D.actions.filter(function (a) { return a.hist && a.hist.buckets.length && a.action !== "step"; })
      .sort(function (a, b) { return b.total_ns - a.total_ns; })
      .forEach(function (a) { grid.appendChild(histChart([{ hist: a.hist }], a.action + " \u00b7 " + a.phase, "hist")); });
    s.appendChild(grid);
    s.appendChild(el("p", { "class": "note" }, "Each histogram is one population: the calls of one phase (train or valid never mixed), steady state only" +
      (R.warmup_steps ? " (the first " + R.warmup_steps + " steps of each phase are warm-up, left out)" : "") +
      ". Log-scale duration axis; bucket width is 1/16 of a power of two, so quantiles are within 3.1 % (and never outside the fastest and slowest call)."));

    var cols = [["Action", "action", id, true], ["Category", "category", id, true, true],
      ["Calls", "calls", fmtCount], ["Mean", "mean_ns", fmtDur], ["Std", "std_ns", fmtDur, false, true],
      ["Min", "min_ns", fmtDur, false, true], ["p50", "p50_ns", fmtDur], ["p99", "p99_ns", fmtDur],
      ["Max", "max_ns", fmtDur], ["Total", "total_ns", fmtDur], ["Self", "self_ns", fmtDur, false, true],
      ["%", "pct", fmtPct], ["Samples/s", "samples_per_s", fmtRate]];
    if (D.actions.some(function (a) { return a.device_mean_ns !== undefined; }))
      cols.splice(4, 0, ["Device", "device_mean_ns", fmtDur]);
    s = section(P + "Actions (all phases, steady state)", parent);
    var roll = D.actions.filter(function (a) { return a.rollup; }).sort(function (a, b) { return b.total_ns - a.total_ns; });
    s.appendChild(table(roll, cols, "actions"));
    /* Calls outside any phase are in the roll-up above; per phase shows the named phases. */
    var per = D.actions.filter(function (a) { return !a.rollup && a.phase !== "none"; }).sort(function (a, b) {
      return a.phase < b.phase ? -1 : a.phase > b.phase ? 1 : b.total_ns - a.total_ns; });
    if (per.length) {
      s = section(P + "Actions per phase", parent);
      var perCols = [["Phase", "phase", id, true]].concat(cols), eff = efficiencyOf(D);
      if (eff) { /* the training phases' FLOP/s and MFU (D.efficiency) on their rows */
        per.forEach(function (a) {
          var e = a.phase === "train" ? eff[a.action] : null;
          a.flops_per_s = e ? (e.flops_per_s_device !== undefined ? e.flops_per_s_device : e.flops_per_s) : null;
          a.mfu = e ? (e.mfu_device !== undefined ? e.mfu_device : e.mfu) : null;
        });
        var on = D.efficiency.phases.some(function (e) { return e.flops_per_s_device !== undefined; });
        /* compact cells (the unit in the head); p50, max and samples/s (in the roll-up above)
         * give way under 1300 px, so the table fits */
        perCols = perCols.map(function (c) {
          return ["p50_ns", "max_ns", "samples_per_s"].indexOf(c[1]) >= 0 ? c.slice(0, 3).concat([false, "wide"]) : c; })
          .concat([["FLOP/s", "flops_per_s", function (v) { return fmtSi(v, ""); }], ["MFU", "mfu", fmtMfu]]);
      }
      s.appendChild(table(per, perCols, "phases"));
      if (eff) s.appendChild(el("p", { "class": "note" }, "FLOP/s and MFU: the training phases' model FLOPs per step over their " +
        (on ? "device" : "host") + " time per step (at a glance: every figure per phase)."));
    }

    if (window.swFlames) window.swFlames(D, function (t) { return section(P + t, parent); }, { el: el, sv: sv, fmtDur: fmtDur });

    s = section(P + "Counters", parent);
    if (D.counters.length) {
      s.appendChild(table(D.counters, [["Counter", "name", id, true], ["Samples", "count", fmtCount],
        ["Last", "last", fmtNum], ["Min", "min", fmtNum], ["Mean", "mean", fmtNum], ["Max", "max", fmtNum]], "counters"));
      var cg = el("div", { "class": "hists" });
      D.counters.forEach(function (c) { if (c.points.length && !isDevice(c)) cg.appendChild(counterChart(c)); });
      s.appendChild(cg);
    } else {
      s.appendChild(el("p", { "class": "note" }, "No counters recorded."));
    }

    /* Per-module time and memory (Profiler(modules=...)): every module, most self time first;
       with GPU times (device time on), the GPU's columns beside the host's, sorted by them. */
    if (D.modules && D.modules.length) {
      s = section(P + "Modules", parent);
      var every = (D.notes.filter(function (n) { return n[0] === "modules_every"; })[0] || [])[1];
      var sampled = (D.notes.filter(function (n) { return n[0] === "modules_sampled_steps"; })[0] || [])[1];
      var warm = (D.notes.filter(function (n) { return n[0] === "modules_warmup_steps"; })[0] || [])[1];
      var gpu = D.modules[0].device_self !== undefined;
      s.appendChild(el("p", { "class": "note" }, (gpu ? "Host time and GPU device time (Dev: GPU events" +
        " on the step's stream)" : "Host time") + " summed over the sampled steps (every " +
        (every || "?") + " step(s): " + (sampled || "?") + " sampled" +
        (warm ? "; warm-up, the first " + warm + " step(s), left out" : "") +
        "); total includes submodules, self does not."));
      var bytes = function (v) {
        if (v === null || v === undefined || isNaN(v)) return "-";
        var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
        while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
        return (i ? v.toFixed(v < 10 ? 2 : 1) : v) + " " + u[i];
      };
      var moduleCols = [["Module", "path", id, true], ["Class", "class", id, true, true],
        ["Self", "self", fmtDur], ["Fwd self", "forward_self", fmtDur], ["Fwd total", "forward_total", fmtDur],
        ["Bwd self", "backward_self", fmtDur], ["Bwd total", "backward_total", fmtDur],
        ["Forwards", "forward_calls", fmtCount, false, true], ["Backwards", "backward_calls", fmtCount, false, true]];
      if (gpu) moduleCols = moduleCols.slice(0, 2).concat([["Dev self", "device_self", fmtDur],
        ["Dev fwd self", "device_forward_self", fmtDur], ["Dev fwd total", "device_forward_total", fmtDur],
        ["Dev bwd self", "device_backward_self", fmtDur], ["Dev bwd total", "device_backward_total", fmtDur],
        ["Dev forwards", "device_forward_calls", fmtCount, false, true]], moduleCols.slice(2));
      s.appendChild(table(D.modules.slice().sort(function (a, b) {
        return gpu ? b.device_self - a.device_self : 0; }), moduleCols.concat([
        ["Params", "params", bytes, false, true], ["Grads", "grads", bytes, false, true],
        ["Optim state", "optimizer", bytes, false, true], ["Activations", "activations", bytes, false, true]]),
        "modules"));
    }

    if (D.notes.length) {
      s = section(P + "Notes", parent);
      var dl = el("dl", { "class": "notes" });
      D.notes.forEach(function (n) {
        dl.appendChild(el("dt", {}, n[0].replace(/_/g, " ")));
        dl.appendChild(el("dd", {}, n[1]));
      });
      s.appendChild(dl);
    }

    /* Misuse and lost events only when there are some. */
    var m = D.misuse, rec = [];
    for (var k in m) if (m[k]) rec.push({ what: k.replace(/_/g, " "), n: m[k] });
    if (R.dropped_events) rec.push({ what: "dropped events", n: R.dropped_events });
    if (rec.length) {
      s = section(P + "Recording problems", parent);
      s.appendChild(table(rec, [["What", "what", id, true], ["Count", "n", fmtCount]], "recording"));
    }
  }

  function header(D, main) {
    var R = D.run;
    var meta = el("div", { "class": "meta" });
    /* The run time is the profiler's start to the end (a merged run: its longest rank's), as
     * the live page counts it; wall_ns, the percentages' base, is the fit span once it has
     * ended (the live page's run time shrank at the end) and a merged run's sum. */
    [["host", R.host], ["ranks", R.ranks], ["steps", fmtCount(R.steps)], ["run time", fmtDur(R.elapsed_ns)],
     ["warm-up steps", R.warmup_steps], ["threads", R.threads],
     ["started", R.start_unix_ns ? new Date(R.start_unix_ns / 1e6).toISOString() : ""]]
      .forEach(function (m) { if (m[1] !== "" && m[1] !== null) meta.appendChild(el("span", {}, m[0] + ": " + m[1])); });
    main.appendChild(meta);
    if (R.command) main.appendChild(el("div", { "class": "meta" }, R.command));
  }

  function render(D) {
    var main = document.getElementById("sw-main");
    viewsDrawn = 0;
    pageWidth();
    if (!D.other) {
      main.appendChild(el("h1", {}, "stepwatch \u2014 " + D.run.name));
      header(D, main);
      var g = section("At a glance: the steady step");
      g.appendChild(glanceBars(D, Math.min(pageWidth(), 1000)));
      if (D.goodput) g.appendChild(goodputBar(D.goodput, Math.min(pageWidth(), 1000)));
      var eff = efficiencyTable(D);
      if (eff) g.appendChild(eff);
      runSections(D, main);
    } else {
      renderCompare(D, main);
    }
    document.body.setAttribute("data-rendered", "1");
  }

  var SIDE_COLORS = { baseline: "#4c78a8", "new": "#e4572e" };

  /* Two runs: both breakdowns side by side on one scale, the step-time distributions
   * overlaid, compare's verdicts; then each run's own sections. */
  function renderCompare(D, main) {
    var A = D, B = D.other, C = D.compare;
    main.appendChild(el("h1", {}, "stepwatch \u2014 " + A.run.name + " vs " + B.run.name));
    var s = section("At a glance: the steady step, baseline and new");
    var both = el("div", { "class": "side-by-side" }), half = Math.max(300, Math.floor((Math.min(pageWidth(), 1200) - 24) / 2));
    var longest = 0;
    [A, B].forEach(function (X) { X.breakdown.forEach(function (b) { longest = Math.max(longest, sum(b.category_ns)); }); });
    [["baseline", A], ["new", B]].forEach(function (x) {
      var col = el("div", { "class": "side", "data-side": x[0] });
      col.appendChild(el("h3", {}, x[0] + ": " + x[1].run.name));
      header(x[1], col);
      col.appendChild(glanceBars(x[1], half - 8, longest / (half - 8)));
      both.appendChild(col);
    });
    s.appendChild(both);
    if (A.goodput || B.goodput) s.appendChild(goodputCompare(A.goodput, B.goodput));

    s = section("Step-time distributions (steady state)");
    var grid = el("div", { "class": "hists wide" });
    ["train", "valid"].forEach(function (ph) {
      var hs = [];
      [["baseline", A], ["new", B]].forEach(function (x) {
        x[1].step_hists.forEach(function (h) {
          if (h.phase === ph && h.hist.buckets.length) hs.push({ hist: h.hist, name: x[0], color: SIDE_COLORS[x[0]] });
        });
      });
      if (hs.length) grid.appendChild(histChart(hs, ph + " steps: baseline vs new", "hist-compare", Math.min(pageWidth(), 560)));
    });
    s.appendChild(grid);

    s = section("Verdicts (compare: means and tails, per action)");
    s.appendChild(el("p", { "class": "note" }, C.slower + " slower, " + C.faster + " faster, " + C.new_actions + " new, " +
      C.gone_actions + " gone. Slower/faster: Mann-Whitney U p < " + C.alpha + " and the mean moved by at least " +
      C.min_change_pct + " %, or a tail test (docs/compare.md)."));
    var order = { slower: 0, faster: 1, "new": 2, gone: 3, unclear: 4, same: 5 };
    var rows = C.rows.filter(function (r) { return r.phase !== "none"; }).map(function (r) {
      return { phase: r.phase, action: r.action, verdict: r.verdict, by: r.decided_by,
        a_mean: r.baseline ? r.baseline.mean_ns : null, b_mean: r["new"] ? r["new"].mean_ns : null,
        a_p99: r.baseline ? r.baseline.p99_ns : null, b_p99: r["new"] ? r["new"].p99_ns : null,
        change: r.change_pct, p: r.p_value, rank: order[r.verdict] };
    }).sort(function (x, y) { return x.rank - y.rank || (Math.abs(y.change || 0) - Math.abs(x.change || 0)); });
    s.appendChild(table(rows, [["Action", "action", id, true], ["Phase", "phase", id, true], ["Verdict", "verdict", id, true],
      ["Baseline mean", "a_mean", fmtDur], ["New mean", "b_mean", fmtDur], ["Change", "change", fmtPct],
      ["Baseline p99", "a_p99", fmtDur, false, true], ["New p99", "b_p99", fmtDur, false, true],
      ["p", "p", function (v) { return v === null || v === undefined ? "-" : v < 0.001 ? "< 0.001" : v.toFixed(3); }, false, true],
      ["Decided by", "by", id, true, true]], "verdicts"));

    [["Baseline", A], ["New", B]].forEach(function (x) {
      var part = el("div", { "class": "run-part", "data-side": x[0].toLowerCase() });
      main.appendChild(part);
      runSections(x[1], part, x[0] + " \u2014 ");
    });
  }

  /* Both runs' goodput and, per cause, the change of its share of the wall time (points;
   * a cause one run lacks counts as 0 there); a run without goodput shows "-". */
  function goodputCompare(GA, GB) {
    var box = el("div", { "class": "goodput-compare" });
    var head = el("div", { "class": "glance-head" });
    head.appendChild(el("b", {}, "goodput: baseline " + (GA ? fmtPct(GA.percent) : "-") + ", new " +
      (GB ? fmtPct(GB.percent) : "-")));
    box.appendChild(head);
    var causes = ["steady"], share = function (G, c) {
      if (!G) return null;
      if (c === "steady") return G.percent;
      var l = G.lost.filter(function (x) { return x.cause === c; })[0];
      return l ? l.percent : 0;
    };
    [GA, GB].forEach(function (G) {
      (G ? G.lost : []).forEach(function (l) { if (causes.indexOf(l.cause) < 0) causes.push(l.cause); });
    });
    var rows = causes.map(function (c) {
      var a = share(GA, c), b = share(GB, c);
      return { cause: c === "steady" ? "steady training steps" : c, a: a, b: b,
        change: a === null || b === null ? null : b - a };
    });
    box.appendChild(table(rows, [["Where the wall time went", "cause", id, true], ["Baseline", "a", fmtPct],
      ["New", "b", fmtPct], ["Change (points)", "change", function (v) {
        return v === null ? "-" : (v > 0 ? "+" : "") + v.toFixed(1); }]], "goodput-compare"));
    return box;
  }

  function fail(e) {
    var box = document.getElementById("sw-error");
    box.textContent = "The report could not be drawn: " + (e && e.stack ? e.stack : e);
    console.error(e);
  }
  /* The live page (live.js) draws the report again from new data, in place. */
  window.swReport = {
    redraw: function (D) {
      try {
        document.getElementById("sw-main").textContent = "";
        document.getElementById("sw-error").textContent = "";
        render(D);
      } catch (e) {
        fail(e);
      }
    }
  };
  try {
    var started = performance.now();
    var data = JSON.parse(document.getElementById("sw-data").textContent);
    if (data !== null) render(data); /* null: a live page before its run file exists */
    /* how long reading the data and drawing took, for bench/bench_html.py */
    document.body.setAttribute("data-draw-ms", Math.round(performance.now() - started));
  } catch (e) {
    fail(e);
  }
})();
