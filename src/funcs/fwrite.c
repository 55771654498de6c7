/*
 * fwrite.c — function profiles as text: the table cProfile users read (pstats' print_stats
 * after strip_dirs and sort_stats) and collapsed stacks for flame graphs.
 */
#include "funcs.h"

#include <stdlib.h>
#include <string.h>

void sw_func_label(const sw_func *f, int full_path, char *buf, size_t size) {
    if (size == 0)
        return;
    size_t len = strlen(f->name);
    if (strcmp(f->file, "~") == 0 && f->line == 0) {
        /* pstats' func_std_string: built-ins print as {name} without the angle brackets */
        if (len >= 2 && f->name[0] == '<' && f->name[len - 1] == '>')
            snprintf(buf, size, "{%.*s}", (int)(len - 2), f->name + 1);
        else
            snprintf(buf, size, "%s", f->name);
        return;
    }
    const char *file = f->file;
    if (!full_path) {
        const char *slash = strrchr(file, '/');
        file = slash ? slash + 1 : file;
    }
    snprintf(buf, size, "%s:%u(%s)", file, (unsigned)f->line, f->name);
}

/* ---- the table ---------------------------------------------------------------------------- */

#define LABEL_MAX 512

typedef struct row {
    char label[LABEL_MAX];
    sw_fstat stat;
} row;

static int by_label(const void *a, const void *b) {
    return strcmp(((const row *)a)->label, ((const row *)b)->label);
}

/* Sort keys, each falling back on the function's first appearance (a stable order, as
 * pstats keeps). */
static int first_seen(const row *x, const row *y) {
    return x->stat.func < y->stat.func ? -1 : x->stat.func > y->stat.func;
}

static int by_cumulative(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->stat.cumtime_ns != y->stat.cumtime_ns)
        return x->stat.cumtime_ns < y->stat.cumtime_ns ? 1 : -1;
    return first_seen(x, y);
}

static int by_tottime(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->stat.tottime_ns != y->stat.tottime_ns)
        return x->stat.tottime_ns < y->stat.tottime_ns ? 1 : -1;
    return first_seen(x, y);
}

static int by_ncalls(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->stat.calls != y->stat.calls)
        return x->stat.calls < y->stat.calls ? 1 : -1;
    return first_seen(x, y);
}

typedef int (*row_cmp)(const void *, const void *);

/* pstats' sort names and the title it prints for them; NULL for an unknown name. */
static const char *sort_title(const char *sort, row_cmp *cmp) {
    if (sort == NULL || strcmp(sort, "cumulative") == 0 || strcmp(sort, "cumtime") == 0) {
        *cmp = by_cumulative;
        return "cumulative time";
    }
    if (strcmp(sort, "tottime") == 0 || strcmp(sort, "time") == 0) {
        *cmp = by_tottime;
        return "internal time";
    }
    if (strcmp(sort, "ncalls") == 0 || strcmp(sort, "calls") == 0) {
        *cmp = by_ncalls;
        return "call count";
    }
    return NULL;
}

static void write_f8(FILE *out, double seconds) {
    fprintf(out, "%8.3f ", seconds);
}

/* One action's block, the way pstats prints it. */
static int write_action(const sw_fprofile *fp, const char *action, const sw_ftable_options *o,
                        FILE *out) {
    row_cmp order;
    const char *title = sort_title(o->sort, &order);
    if (title == NULL)
        return SW_EINVAL;
    sw_fstats *s = NULL;
    int rc = sw_fprofile_stats(fp, action, &s);
    if (rc < 0)
        return rc;
    row *rows = calloc(s->nfuncs + 1, sizeof *rows);
    if (rows == NULL) {
        sw_fstats_free(s);
        return SW_ENOMEM;
    }
    for (size_t i = 0; i < s->nfuncs; i++) {
        sw_func_label(sw_fprofile_func(fp, s->funcs[i].func), o->full_paths, rows[i].label,
                      LABEL_MAX);
        rows[i].stat = s->funcs[i];
    }
    /* strip_dirs merges functions whose names became equal */
    size_t n = s->nfuncs;
    if (n > 0) {
        qsort(rows, n, sizeof *rows, by_label);
        size_t k = 0;
        for (size_t i = 1; i < n; i++) {
            if (strcmp(rows[i].label, rows[k].label) == 0) {
                sw_fstat *a = &rows[k].stat, *b = &rows[i].stat;
                a->calls += b->calls;
                a->primitive_calls += b->primitive_calls;
                a->tottime_ns += b->tottime_ns;
                a->cumtime_ns += b->cumtime_ns;
                if (b->func < a->func)
                    a->func = b->func;
            } else {
                rows[++k] = rows[i];
            }
        }
        n = k + 1;
    }
    qsort(rows, n, sizeof *rows, order);

    uint64_t calls = 0, prim = 0, tt = 0;
    for (size_t i = 0; i < n; i++) {
        calls += rows[i].stat.calls;
        prim += rows[i].stat.primitive_calls;
        tt += rows[i].stat.tottime_ns;
    }
    fprintf(out, "Profile stats for: %s%s\n", action, o->suffix ? o->suffix : "");
    fprintf(out, "         %llu function calls ", (unsigned long long)calls);
    if (prim != calls)
        fprintf(out, "(%llu primitive calls) ", (unsigned long long)prim);
    fprintf(out, "in %.3f seconds\n\n", (double)tt / 1e9);
    size_t shown = n;
    int reduced = 0;
    if (o->max_lines > 0 && o->max_lines < n) {
        shown = o->max_lines;
        reduced = 1;
    } else if (o->fraction > 0.0 && o->fraction < 1.0) {
        shown = (size_t)((double)n * o->fraction + 0.5);
        reduced = 1;
    }
    if (shown > 0) {
        fprintf(out, "   Ordered by: %s\n", title);
        if (reduced) {
            fprintf(out, "   List reduced from %zu to %zu due to restriction <", n, shown);
            if (o->max_lines > 0)
                fprintf(out, "%u>\n", (unsigned)o->max_lines);
            else
                fprintf(out, "%g>\n", o->fraction);
        }
        fprintf(out, "\n   ncalls  tottime  percall  cumtime  percall filename:lineno(function)\n");
        for (size_t i = 0; i < shown; i++) {
            const sw_fstat *f = &rows[i].stat;
            char calls_text[48];
            if (f->calls != f->primitive_calls)
                snprintf(calls_text, sizeof calls_text, "%llu/%llu", (unsigned long long)f->calls,
                         (unsigned long long)f->primitive_calls);
            else
                snprintf(calls_text, sizeof calls_text, "%llu", (unsigned long long)f->calls);
            fprintf(out, "%9s ", calls_text);
            write_f8(out, (double)f->tottime_ns / 1e9);
            if (f->calls)
                write_f8(out, (double)f->tottime_ns / 1e9 / (double)f->calls);
            else
                fputs("         ", out);
            write_f8(out, (double)f->cumtime_ns / 1e9);
            if (f->primitive_calls)
                write_f8(out, (double)f->cumtime_ns / 1e9 / (double)f->primitive_calls);
            else
                fputs("         ", out);
            fprintf(out, "%s\n", rows[i].label);
        }
        fputs("\n\n", out);
    }
    if (s->folded_calls)
        fprintf(out,
                "   (%llu calls on call paths past the limit of %u per action were counted "
                "in their callers)\n\n",
                (unsigned long long)s->folded_calls, SW_FTREE_MAX_NODES);
    free(rows);
    sw_fstats_free(s);
    return ferror(out) ? SW_EIO : 0;
}

int sw_fprofile_write_table(const sw_fprofile *fp, const char *action,
                            const sw_ftable_options *opts, FILE *out) {
    if (fp == NULL || out == NULL)
        return SW_EINVAL;
    sw_ftable_options o;
    int rc = sw__sized_in(&o, sizeof o, opts, SW__END_OF(sw_ftable_options, suffix),
                          "sw_ftable_options");
    if (rc != 0)
        return rc;
    if (action != NULL)
        return write_action(fp, action, &o, out);
    for (uint32_t i = 0; rc == 0 && i < sw_fprofile_action_count(fp); i++)
        rc = write_action(fp, sw_fprofile_action(fp, i), &o, out);
    return rc;
}

/* ---- collapsed stacks --------------------------------------------------------------------- */

/* Append sep (0: none) and frame name s to the path at len, ';' -> ':' and control characters
 * -> '?' in s. Returns the new length, or SIZE_MAX when out of memory. */
static size_t path_put(char **path, size_t *cap, size_t len, char sep, const char *s) {
    size_t n = strlen(s);
    if (sw__grow(path, 1, cap, len + n + 2, 256) != 0)
        return SIZE_MAX;
    if (sep)
        (*path)[len++] = sep;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        (*path)[len++] = ch == ';' ? ':' : ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    (*path)[len] = '\0';
    return len;
}

static int write_tree_collapsed(const sw_fprofile *fp, const sw_ftree *t, FILE *out) {
    uint32_t n = sw_ftree_size(t);
    const sw_fnode *nodes = sw_ftree_nodes(t);
    uint32_t *chain = malloc((size_t)n * sizeof *chain); /* a node's ancestors */
    char *path = NULL;
    size_t cap = 0;
    int rc = chain ? 0 : SW_ENOMEM;
    char label[LABEL_MAX];
    /* One line per node with self time; its path is rebuilt from the root (costs depth). */
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (nodes[i].self_ns == 0)
            continue;
        uint32_t depth = 0;
        for (uint32_t k = i; k != 0; k = nodes[k].parent)
            chain[depth++] = k;
        size_t len = path_put(&path, &cap, 0, 0, sw_ftree_action(t));
        while (len != SIZE_MAX && depth > 0) {
            const sw_func *f = sw_fprofile_func(fp, nodes[chain[--depth]].func);
            sw_func_label(f, 0, label, sizeof label);
            len = path_put(&path, &cap, len, ';', label);
        }
        if (len == SIZE_MAX) {
            rc = SW_ENOMEM;
            break;
        }
        fprintf(out, "%s %llu\n", path, (unsigned long long)nodes[i].self_ns);
    }
    free(chain);
    free(path);
    if (rc == 0 && ferror(out))
        rc = SW_EIO;
    return rc;
}

int sw_fprofile_write_collapsed(const sw_fprofile *fp, const char *action, FILE *out) {
    if (fp == NULL || out == NULL)
        return SW_EINVAL;
    if (action != NULL && sw__fprofile_first_tree(fp, action) == SW_FNODE_NONE)
        return SW_ENOTFOUND;
    sw_fprofile *merged = NULL;
    int rc = sw_fprofile_merge(fp, &merged);
    for (uint32_t i = 0; rc == 0 && i < sw_fprofile_tree_count(merged); i++) {
        const sw_ftree *t = sw_fprofile_tree(merged, i);
        if (action == NULL || strcmp(sw_ftree_action(t), action) == 0)
            rc = write_tree_collapsed(merged, t, out);
    }
    sw_fprofile_free(merged);
    return rc;
}
