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
        fprintf(out, "%s[%lld, ", first ? "" : ", ",
                i == 0 ? -1LL : (long long)keep[nodes[i].parent]);
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
