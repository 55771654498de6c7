/*
 * flame.js — the report's flame graphs. Defines window.swFlames(D, section, h), which
 * report.js calls with its section() and helpers (h.el, h.sv, h.fmtDur) once the other
 * sections are drawn. The page carries this script only when the run has function profiles.
 */
window.swFlames = function (D, section, h) {
  "use strict";
  if (!D.flames || !D.flames.length) return;
  var s = section("Function profiles");
  s.appendChild(h.el("p", { "class": "note" }, "Per profiled action, where its time went: a " +
    "box per call path, as wide as its time, callers below callees; hover for the numbers. " +
    "stepwatch export RUN --collapsed gives the same stacks to flamegraph.pl or speedscope."));
  var ROW = 17, W = 1100;
  function color(name) {
    var x = 0;
    for (var i = 0; i < name.length; i++) x = (x * 31 + name.charCodeAt(i)) >>> 0;
    if (name.charAt(0) === "{") return "hsl(" + (190 + x % 30) + ",55%," + (62 + x % 12) + "%)";
    return "hsl(" + (10 + x % 40) + ",78%," + (58 + x % 14) + "%)";
  }
  D.flames.forEach(function (f) {
    var N = f.nodes, kids = N.map(function () { return []; }), depth = [0], maxDepth = 0;
    for (var i = 1; i < N.length; i++) {
      kids[N[i][0]].push(i);
      depth[i] = depth[N[i][0]] + 1;
      if (depth[i] > maxDepth) maxDepth = depth[i];
    }
    var total = N[0][3] || 1, H = (maxDepth + 1) * ROW + 4;
    var svg = h.sv("svg", { "class": "chart flame", width: W, height: H, viewBox: "0 0 " + W + " " + H,
      "data-chart": "flame", "data-flame": f.action });
    var x0 = [0];
    for (var j = 0; j < N.length; j++) {
      var at = x0[j];
      kids[j].sort(function (a, b) { return N[b][3] - N[a][3]; }).forEach(function (c) { x0[c] = at; at += N[c][3]; });
      var w = N[j][3] / total * W;
      if (w < 0.5) continue;
      var g = h.sv("g", { "data-frame": N[j][1] });
      var y = H - (depth[j] + 1) * ROW;
      g.appendChild(h.sv("rect", { x: (x0[j] / total * W).toFixed(2), y: y, width: Math.max(w - 0.5, 0.5).toFixed(2),
        height: ROW - 1, fill: j ? color(N[j][1]) : "#8c959f", rx: 2 }));
      g.appendChild(h.sv("title", {}, N[j][1] + "\n" + h.fmtDur(N[j][3]) + " (" + (100 * N[j][3] / total).toFixed(1) +
        " %), self " + h.fmtDur(N[j][4]) + ", " + N[j][2] + (N[j][2] === 1 ? " call" : " calls")));
      var chars = Math.floor((w - 6) / 6.6);
      if (chars >= 3) {
        var label = N[j][1].length > chars ? N[j][1].slice(0, chars - 1) + "\u2026" : N[j][1];
        g.appendChild(h.sv("text", { x: (x0[j] / total * W + 3).toFixed(2), y: y + ROW - 5, "class": "flame-label" }, label));
      }
      svg.appendChild(g);
    }
    s.appendChild(h.el("h3", {}, f.action + " \u2014 " + h.fmtDur(f.total_ns) + " in " + f.spans +
      (f.spans === 1 ? " span" : " spans")));
    s.appendChild(svg);
  });
};
