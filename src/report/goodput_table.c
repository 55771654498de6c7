/*
 * goodput_table.c — the run's goodput as a table: the wall time, the steady training steps'
 * share and every cause of the rest (start-up, compilation, data wait, warm-up, evaluation,
 * checkpoints, idle, the end), for the JSON report's "goodput" object and the HTML page's
 * stacked bar.
 *
 * The parts are measured in Python (python/stepwatch/goodput.py), which notes them as
 * "goodput_ns": "wall:N,steady:N,start-up:N,...". This file only reads that note; a note
 * that is not in that form gives no table (the notes themselves still carry it).
 */
#include "writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One "name:ns" pair of the note at *p: its name copied to out, its ns; advances *p past
 * it and its comma. 0: not a pair. */
static int next_pair(const char **p, char *name, size_t size, uint64_t *ns) {
    const char *colon = strchr(*p, ':');
    size_t n = colon ? (size_t)(colon - *p) : 0;
    if (colon == NULL || n == 0 || n >= size || colon[1] < '0' || colon[1] > '9')
        return 0;
    memcpy(name, *p, n);
    name[n] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(colon + 1, &end, 10);
    if (errno != 0 || (*end != ',' && *end != '\0'))
        return 0;
    *ns = (uint64_t)v;
    *p = *end == ',' ? end + 1 : end;
    return 1;
}

int sw__goodput_read(const sw_snapshot *s, sw__goodput *g) {
    memset(g, 0, sizeof *g);
    const char *p = s ? sw_snapshot_note(s, "goodput_ns") : NULL;
    if (p == NULL)
        return 0;
    int wall = 0, steady = 0;
    while (*p != '\0') {
        char name[SW__GOODPUT_NAME];
        uint64_t ns;
        if (!next_pair(&p, name, sizeof name, &ns))
            return 0;
        if (strcmp(name, "wall") == 0) {
            g->wall_ns = ns;
            wall = 1;
        } else if (strcmp(name, "steady") == 0) {
            g->steady_ns = ns;
            steady = 1;
        } else if (g->nlost < SW__GOODPUT_CAUSES) {
            memcpy(g->lost[g->nlost].cause, name, sizeof name);
            g->lost[g->nlost++].ns = ns;
        }
    }
    return wall && steady && g->wall_ns > 0;
}

void sw__json_put_goodput(sw__jw *w, const sw_snapshot *s) {
    sw__goodput g;
    if (!sw__goodput_read(s, &g))
        return; /* no training steps measured, or no front end that measures them */
    double wall = (double)g.wall_ns;
    sw__jw_key(w, "goodput");
    sw__jw_object_begin(w);
    sw__jw_kv_double(w, "percent", 100.0 * (double)g.steady_ns / wall);
    sw__jw_kv_uint(w, "wall_ns", g.wall_ns);
    sw__jw_kv_uint(w, "steady_ns", g.steady_ns);
    sw__jw_key(w, "lost");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < g.nlost; i++) {
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "cause", g.lost[i].cause);
        sw__jw_kv_uint(w, "ns", g.lost[i].ns);
        sw__jw_kv_double(w, "percent", 100.0 * (double)g.lost[i].ns / wall);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}
