/*
 * comm_bandwidth.c — the collectives' bandwidth per op and size class in the reports.
 *
 * The front end that times collectives (python/stepwatch/collectives.py) records one sample
 * per call into the counters "comm:<op>:<class>:algbw" and "comm:<op>:<class>:busbw", in
 * GB/s (bytes per ns), where class is the power of 2 the call's bytes fall in ("4KiB": 4 KiB
 * up to 8 KiB) and busbw is algbw times nccl-tests' factor for the op and the group's size.
 * Counters travel through the run file, merge and the Chrome trace as they are; this file
 * pairs them back into rows: calls, mean algbw and busbw, the best busbw of the run.
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "comm:"

/* Which of the pair name is (0 algbw, 1 busbw; -1: not a bandwidth counter), with the
 * length of its "comm:<op>:<class>" part. */
static int kind_of(const char *name, size_t *stem) {
    if (name == NULL || strncmp(name, PREFIX, strlen(PREFIX)) != 0)
        return -1;
    size_t n = strlen(name);
    if (n < strlen(PREFIX) + 10 || name[n - 6] != ':')
        return -1;
    *stem = n - 6;
    if (strcmp(name + n - 5, "algbw") == 0)
        return 0;
    if (strcmp(name + n - 5, "busbw") == 0)
        return 1;
    return -1;
}

int sw__comm_bw_counter(const char *name) {
    size_t stem;
    return kind_of(name, &stem) >= 0;
}

/* The bytes a size class's name stands for ("4KiB" -> 4096), for sorting. */
static double class_bytes(const char *label) {
    char *end = NULL;
    double v = strtod(label, &end);
    if (end == NULL)
        return 0;
    if (strcmp(end, "KiB") == 0)
        return v * 1024.0;
    if (strcmp(end, "MiB") == 0)
        return v * 1048576.0;
    if (strcmp(end, "GiB") == 0)
        return v * 1073741824.0;
    return v;
}

static int row_order(const void *a, const void *b) {
    const sw__comm_bw *x = a, *y = b;
    int c = strcmp(x->op, y->op);
    if (c != 0)
        return c;
    double bx = class_bytes(x->size_class), by = class_bytes(y->size_class);
    return bx < by ? -1 : bx > by;
}

/* The row of "comm:<op>:<class>" (stem bytes of name) in rows[0..*n), added when new. */
static sw__comm_bw *row_for(sw__comm_bw *rows, size_t *n, size_t max, const char *name,
                            size_t stem) {
    const char *op = name + strlen(PREFIX);
    const char *colon = memchr(op, ':', stem - strlen(PREFIX));
    if (colon == NULL)
        return NULL;
    /* the class is the last ':'-separated part of the stem (an op name has none) */
    const char *cls = name + stem;
    while (cls > colon + 1 && cls[-1] != ':')
        cls--;
    size_t oplen = (size_t)(cls - 1 - op), clslen = (size_t)(name + stem - cls);
    if (oplen == 0 || oplen >= sizeof rows->op || clslen == 0 || clslen >= sizeof rows->size_class)
        return NULL;
    for (size_t i = 0; i < *n; i++)
        if (strncmp(rows[i].op, op, oplen) == 0 && rows[i].op[oplen] == '\0' &&
            strncmp(rows[i].size_class, cls, clslen) == 0 && rows[i].size_class[clslen] == '\0')
            return &rows[i];
    if (*n >= max)
        return NULL;
    sw__comm_bw *r = &rows[(*n)++];
    memset(r, 0, sizeof *r);
    memcpy(r->op, op, oplen);
    memcpy(r->size_class, cls, clslen);
    return r;
}

size_t sw__comm_bw_rows(const sw_snapshot *s, sw__comm_bw *rows, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        size_t stem;
        int kind = kind_of(c->name, &stem);
        if (kind < 0 || c->count == 0)
            continue;
        sw__comm_bw *r = row_for(rows, &n, max, c->name, stem);
        if (r == NULL)
            continue;
        if (kind == 0) {
            r->calls = c->count;
            r->algbw = c->mean;
        } else {
            r->busbw = c->mean;
            r->best_busbw = c->max;
        }
    }
    qsort(rows, n, sizeof *rows, row_order);
    return n;
}

void sw__put_comm_bw(const sw_snapshot *s, FILE *out, int markdown) {
    sw__comm_bw rows[SW__COMM_BW_ROWS];
    size_t n = sw__comm_bw_rows(s, rows, SW__COMM_BW_ROWS);
    if (n == 0)
        return;
    if (markdown) {
        fputs("\n**Collectives** (bandwidth per op and size class, GB/s; busbw as "
              "nccl-tests)\n\n| op | size | calls | algbw | busbw | best busbw |\n"
              "|---|---|---:|---:|---:|---:|\n",
              out);
    } else {
        fputs("\nCollectives (bandwidth per op and size class, GB/s; busbw as nccl-tests):\n", out);
        fprintf(out, "  %-24s %8s %8s %9s %9s %11s\n", "op", "size", "calls", "algbw", "busbw",
                "best busbw");
    }
    for (size_t i = 0; i < n; i++) {
        char op[SW__LABEL_MAX];
        sw__text_clean(rows[i].op, op, sizeof op);
        const char *fmt = markdown ? "| %s | %s | %" PRIu64 " | %.3g | %.3g | %.3g |\n"
                                   : "  %-24s %8s %8" PRIu64 " %9.3g %9.3g %11.3g\n";
        fprintf(out, fmt, op, rows[i].size_class, rows[i].calls, rows[i].algbw, rows[i].busbw,
                rows[i].best_busbw);
    }
}

void sw__json_put_comm_bw(sw__jw *w, const sw_snapshot *s) {
    sw__comm_bw rows[SW__COMM_BW_ROWS];
    size_t n = sw__comm_bw_rows(s, rows, SW__COMM_BW_ROWS);
    if (n == 0)
        return; /* only when there are any: older readers never see an empty one */
    sw__jw_key(w, "collectives");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < n; i++) {
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "op", rows[i].op);
        sw__jw_kv_string(w, "size_class", rows[i].size_class);
        sw__jw_kv_uint(w, "calls", rows[i].calls);
        sw__jw_kv_double(w, "algbw_gbps", rows[i].algbw);
        sw__jw_kv_double(w, "busbw_gbps", rows[i].busbw);
        sw__jw_kv_double(w, "best_busbw_gbps", rows[i].best_busbw);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
}
