/*
 * html_flame.c — the HTML report's flame graphs: each profiled action's call tree (the run's
 * function profiles, stepwatch/functions.h) as JSON beside the report's other data, which
 * html/flame.js draws as an inline SVG flame graph: a box per call path, its width the
 * path's time, callers below callees, the name and numbers on hover.
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

static int write_flame(sw__jw *w, const sw_fprofile *fp, const sw_ftree *t) {
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
    sw__jw_object_begin(w);
    sw__jw_key(w, "action");
    sw__jw_display_string(w, sw_ftree_action(t));
    sw__jw_kv_uint(w, "spans", nodes[0].calls);
    sw__jw_kv_uint(w, "total_ns", nodes[0].total_ns);
    sw__jw_key(w, "nodes");
    sw__jw_array_begin(w);
    /* [parent, name, calls, total_ns, self_ns]; a left-out child's time stays in its parent's
     * self time, so the boxes still add up */
    char label[512];
    for (uint32_t i = 0; i < n; i++) {
        if (keep[i] < 0)
            continue;
        uint64_t self = nodes[i].self_ns + left_out[i];
        if (i == 0)
            snprintf(label, sizeof label, "%s", sw_ftree_action(t));
        else
            sw_func_label(sw_fprofile_func(fp, nodes[i].func), 0, label, sizeof label);
        sw__jw_array_begin(w);
        sw__jw_int(w, i == 0 ? -1 : keep[nodes[i].parent]);
        sw__jw_display_string(w, label);
        sw__jw_uint(w, nodes[i].calls);
        sw__jw_uint(w, nodes[i].total_ns);
        sw__jw_uint(w, self);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
    free(keep);
    free(left_out);
    return w->rc;
}

int sw__html_json_flames(sw__jw *w, const sw_fprofile *fp) {
    sw__jw_key(w, "flames");
    sw__jw_array_begin(w);
    sw_fprofile *merged = NULL;
    int rc = fp ? sw_fprofile_merge(fp, &merged) : 0;
    for (uint32_t i = 0; rc == 0 && merged && i < sw_fprofile_tree_count(merged); i++)
        rc = write_flame(w, merged, sw_fprofile_tree(merged, i));
    sw_fprofile_free(merged);
    sw__jw_array_end(w);
    return rc;
}
