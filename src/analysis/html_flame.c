/*
 * html_flame.c — the HTML report's flame graphs: each profiled action's call tree (the run's
 * function profiles, stepwatch/functions.h) as JSON beside the report's other data, and the
 * script that draws each one as an inline SVG flame graph: a box per call path, its width
 * the path's time, callers below callees, the name and numbers on hover.
 *
 * Bounded for any profile: paths under 1/2000 of their action's time are left out (their
 * time shows in their caller's box), and at most SW__FLAME_NODES paths per action.
 */
#include "analysis_internal.h"

#include <stdlib.h>

#define SW__FLAME_NODES 20000

/* The nodes of t kept in the graph: keep[i] is the node's index among those kept, or -1.
 * Returns how many are kept. Parents come before children, so one pass decides. */
static uint32_t keep_nodes(const sw_ftree *t, int64_t *keep) {
    uint32_t n = sw_ftree_size(t);
    const sw_fnode *nodes = sw_ftree_nodes(t);
    uint64_t threshold = nodes[0].total_ns / 2000;
    for (;;) {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < n; i++) {
            int in = i == 0 || (nodes[i].total_ns >= threshold && nodes[i].total_ns > 0 &&
                                keep[nodes[i].parent] >= 0);
            keep[i] = in ? (int64_t)kept++ : -1;
        }
        if (kept <= SW__FLAME_NODES)
            return kept;
        threshold = threshold ? threshold * 2 : 1;
    }
}

static int write_flame(FILE *out, const sw_fprofile *fp, const sw_ftree *t) {
    uint32_t n = sw_ftree_size(t);
    const sw_fnode *nodes = sw_ftree_nodes(t);
    int64_t *keep = malloc((size_t)n * sizeof *keep);
    uint64_t *left_out = calloc(n, sizeof *left_out); /* time of a kept node's left-out children */
    if (keep == NULL || left_out == NULL) {
        free(keep);
        free(left_out);
        return SW_ENOMEM;
    }
    keep_nodes(t, keep);
    for (uint32_t c = 1; c < n; c++)
        if (keep[c] < 0 && keep[nodes[c].parent] >= 0)
            left_out[nodes[c].parent] += nodes[c].total_ns;
    fputs("{\"action\": ", out);
    sw__json_display_string(out, sw_ftree_action(t));
    fprintf(out, ", \"spans\": %llu, \"total_ns\": %llu, \"nodes\": [",
            (unsigned long long)nodes[0].calls, (unsigned long long)nodes[0].total_ns);
    /* [parent, name, calls, total_ns, self_ns]; a left-out child's time stays in its parent's
     * self time, so the boxes still add up */
    char label[512];
    int first = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (keep[i] < 0)
            continue;
        uint64_t self = nodes[i].self_ns + left_out[i];
        if (i == 0)
            snprintf(label, sizeof label, "%s", sw_ftree_action(t));
        else
            sw_func_label(sw_fprofile_func(fp, nodes[i].func), 0, label, sizeof label);
        fprintf(out, "%s[%lld, ", first ? "" : ", ", i == 0 ? -1LL : (long long)keep[nodes[i].parent]);
        sw__json_display_string(out, label);
        fprintf(out, ", %llu, %llu, %llu]", (unsigned long long)nodes[i].calls,
                (unsigned long long)nodes[i].total_ns, (unsigned long long)self);
        first = 0;
    }
    fputs("]}", out);
    free(keep);
    free(left_out);
    return ferror(out) ? SW_EIO : 0;
}

int sw__html_json_flames(FILE *out, const sw_fprofile *fp) {
    fputs("\"flames\": [", out);
    sw_fprofile *merged = NULL;
    int rc = fp ? sw_fprofile_merge(fp, &merged) : 0;
    for (uint32_t i = 0; rc == 0 && merged && i < sw_fprofile_tree_count(merged); i++) {
        if (i)
            fputs(",\n", out);
        rc = write_flame(out, merged, sw_fprofile_tree(merged, i));
    }
    sw_fprofile_free(merged);
    fputs("]", out);
    return rc;
}

/* Defines window.swFlames(D, section, h), which the report's script calls with its section()
 * and helpers (h.el, h.sv, h.fmtDur) once the other sections are drawn. */
const char sw__html_flame_script[] =
    "<style>\n"
    ".flame .flame-label { font: 10.5px ui-monospace, SFMono-Regular, Menlo, monospace; fill: #1f2328; pointer-events: none; }\n"
    "h3 { font-size: 14px; margin: 14px 0 4px; }\n"
    "</style>\n"
    "<script>\n"
    "window.swFlames = function (D, section, h) {\n"
    "  \"use strict\";\n"
    "  if (!D.flames || !D.flames.length) return;\n"
    "  var s = section(\"Function profiles\");\n"
    "  s.appendChild(h.el(\"p\", { \"class\": \"note\" }, \"Per profiled action, where its time went: a \" +\n"
    "    \"box per call path, as wide as its time, callers below callees; hover for the numbers. \" +\n"
    "    \"stepwatch export RUN --collapsed gives the same stacks to flamegraph.pl or speedscope.\"));\n"
    "  var ROW = 17, W = 1100;\n"
    "  function color(name) {\n"
    "    var x = 0;\n"
    "    for (var i = 0; i < name.length; i++) x = (x * 31 + name.charCodeAt(i)) >>> 0;\n"
    "    if (name.charAt(0) === \"{\") return \"hsl(\" + (190 + x % 30) + \",55%,\" + (62 + x % 12) + \"%)\";\n"
    "    return \"hsl(\" + (10 + x % 40) + \",78%,\" + (58 + x % 14) + \"%)\";\n"
    "  }\n"
    "  D.flames.forEach(function (f) {\n"
    "    var N = f.nodes, kids = N.map(function () { return []; }), depth = [0], maxDepth = 0;\n"
    "    for (var i = 1; i < N.length; i++) {\n"
    "      kids[N[i][0]].push(i);\n"
    "      depth[i] = depth[N[i][0]] + 1;\n"
    "      if (depth[i] > maxDepth) maxDepth = depth[i];\n"
    "    }\n"
    "    var total = N[0][3] || 1, H = (maxDepth + 1) * ROW + 4;\n"
    "    var svg = h.sv(\"svg\", { \"class\": \"chart flame\", width: W, height: H, viewBox: \"0 0 \" + W + \" \" + H,\n"
    "      \"data-chart\": \"flame\", \"data-flame\": f.action });\n"
    "    var x0 = [0];\n"
    "    for (var j = 0; j < N.length; j++) {\n"
    "      var at = x0[j];\n"
    "      kids[j].sort(function (a, b) { return N[b][3] - N[a][3]; }).forEach(function (c) { x0[c] = at; at += N[c][3]; });\n"
    "      var w = N[j][3] / total * W;\n"
    "      if (w < 0.5) continue;\n"
    "      var g = h.sv(\"g\", { \"data-frame\": N[j][1] });\n"
    "      var y = H - (depth[j] + 1) * ROW;\n"
    "      g.appendChild(h.sv(\"rect\", { x: (x0[j] / total * W).toFixed(2), y: y, width: Math.max(w - 0.5, 0.5).toFixed(2),\n"
    "        height: ROW - 1, fill: j ? color(N[j][1]) : \"#8c959f\", rx: 2 }));\n"
    "      g.appendChild(h.sv(\"title\", {}, N[j][1] + \"\\n\" + h.fmtDur(N[j][3]) + \" (\" + (100 * N[j][3] / total).toFixed(1) +\n"
    "        \" %), self \" + h.fmtDur(N[j][4]) + \", \" + N[j][2] + (N[j][2] === 1 ? \" call\" : \" calls\")));\n"
    "      var chars = Math.floor((w - 6) / 6.6);\n"
    "      if (chars >= 3) {\n"
    "        var label = N[j][1].length > chars ? N[j][1].slice(0, chars - 1) + \"\\u2026\" : N[j][1];\n"
    "        g.appendChild(h.sv(\"text\", { x: (x0[j] / total * W + 3).toFixed(2), y: y + ROW - 5, \"class\": \"flame-label\" }, label));\n"
    "      }\n"
    "      svg.appendChild(g);\n"
    "    }\n"
    "    s.appendChild(h.el(\"h3\", {}, f.action + \" \\u2014 \" + h.fmtDur(f.total_ns) + \" in \" + f.spans +\n"
    "      (f.spans === 1 ? \" span\" : \" spans\")));\n"
    "    s.appendChild(svg);\n"
    "  });\n"
    "};\n"
    "</script>\n";
