/*
 * compare.c — what changed between two runs, per action, and whether it is beyond noise.
 *
 * Rows are matched by (action name, phase name). For each pair the significance test is a
 * two-sided Mann-Whitney U test computed from the two duration histograms: every bucket is
 * a group of tied values, so U and its tie-corrected variance come straight from the bucket
 * counts in one pass (docs/compare.md explains the choice and its limits). A change is
 * reported as slower or faster only when it is both significant (p < SW__ALPHA) and large
 * enough to matter (|change of the mean| >= SW__MIN_CHANGE_PCT).
 */
#include "analysis_internal.h"
#include "report/writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW__ALPHA 0.01
#define SW__MIN_CHANGE_PCT 5.0
#define SW__MIN_CALLS 5 /* below this the normal approximation of U is not trusted */

/* Verdicts, in the order rows are listed: what a person acts on first. */
typedef enum verdict {
    V_SLOWER = 0,
    V_FASTER,
    V_NEW,
    V_GONE,
    V_UNCLEAR,
    V_SAME
} verdict;

static const char *const verdict_names[] = {"slower", "faster", "new", "gone", "unclear",
                                            "same"};

typedef struct cmp_row {
    const char *action;
    const char *phase;
    int rollup;           /* the all-phases row of an action */
    const sw_row *a, *b;  /* baseline and new; one may be NULL */
    double delta_pct;     /* change of the mean, % of the baseline mean (NaN if undefined) */
    double impact_ns;     /* (new mean - base mean) x new calls: time the change cost */
    double z, p;          /* Mann-Whitney U: z score (> 0: new is slower) and p-value */
    verdict v;
} cmp_row;

/* ---- the test ---- */

/* Two-sided Mann-Whitney U from two histograms with the same buckets. Sets z (positive when
 * b tends to be larger) and p; p = 1 when there is nothing to compare. */
static void mann_whitney(const sw_hist *a, const sw_hist *b, double *z_out, double *p_out)
{
    double n1 = 0, n2 = 0;
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        n1 += a->buckets[i];
        n2 += b->buckets[i];
    }
    *z_out = 0;
    *p_out = 1;
    if (n1 == 0 || n2 == 0)
        return;
    double u = 0, ties = 0, a_below = 0;
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        double ca = a->buckets[i], cb = b->buckets[i];
        if (ca == 0 && cb == 0)
            continue;
        u += cb * (a_below + ca / 2); /* pairs with b above a; ties count one half */
        double t = ca + cb;
        ties += t * t * t - t;
        a_below += ca;
    }
    double n = n1 + n2;
    double var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)));
    if (var <= 0)
        return; /* every value in one bucket: no evidence of a difference */
    double diff = u - n1 * n2 / 2;
    double corrected = fabs(diff) > 0.5 ? fabs(diff) - 0.5 : 0; /* continuity correction */
    double z = corrected / sqrt(var);
    *z_out = diff < 0 ? -z : z;
    *p_out = erfc(z / sqrt(2.0));
}

static double row_mean(const sw_row *r) { return r ? r->stats.mean_ns : NAN; }

static void judge(cmp_row *c)
{
    c->z = NAN; /* both stay NaN unless the test runs */
    c->p = NAN;
    c->delta_pct = NAN;
    c->impact_ns = 0;
    if (!c->a) {
        c->v = V_NEW;
        c->impact_ns = c->b ? (double)c->b->stats.total_ns : 0;
        return;
    }
    if (!c->b) {
        c->v = V_GONE;
        c->impact_ns = -(double)c->a->stats.total_ns;
        return;
    }
    double ma = c->a->stats.mean_ns, mb = c->b->stats.mean_ns;
    if (ma > 0)
        c->delta_pct = (mb - ma) / ma * 100.0;
    c->impact_ns = (mb - ma) * (double)c->b->stats.count;
    if (c->a->hist.count < SW__MIN_CALLS || c->b->hist.count < SW__MIN_CALLS) {
        c->v = V_UNCLEAR;
        return;
    }
    mann_whitney(&c->a->hist, &c->b->hist, &c->z, &c->p);
    int material = isfinite(c->delta_pct) && fabs(c->delta_pct) >= SW__MIN_CHANGE_PCT;
    /* The rank test and the mean must agree on the direction; a mean moved only by a few
     * outliers, against the bulk of the calls, is not called a change. */
    if (c->p < SW__ALPHA && material && c->z > 0 && c->delta_pct > 0)
        c->v = V_SLOWER;
    else if (c->p < SW__ALPHA && material && c->z < 0 && c->delta_pct < 0)
        c->v = V_FASTER;
    else
        c->v = V_SAME;
}

/* ---- matching and ordering ---- */

static int same_key(const sw_row *x, const sw_row *y)
{
    return x->action_name && y->action_name && x->phase_name && y->phase_name &&
           strcmp(x->action_name, y->action_name) == 0 &&
           strcmp(x->phase_name, y->phase_name) == 0;
}

static int is_rollup(const sw_row *r) { return r->phase == SW_PHASE_ALL; }

static int cmp_order(const void *px, const void *py)
{
    const cmp_row *x = px, *y = py;
    if (x->rollup != y->rollup)
        return x->rollup ? -1 : 1; /* all-phases rows first, then per phase */
    if (x->v != y->v)
        return (int)x->v - (int)y->v;
    double ix = fabs(x->impact_ns), iy = fabs(y->impact_ns);
    if (x->v == V_SAME || x->v == V_UNCLEAR) {
        /* Unchanged rows: the biggest consumers of time first. */
        ix = x->b ? (double)x->b->stats.total_ns : 0;
        iy = y->b ? (double)y->b->stats.total_ns : 0;
    }
    if (ix != iy)
        return ix > iy ? -1 : 1;
    int c = strcmp(x->phase, y->phase);
    return c ? c : strcmp(x->action, y->action);
}

/* Pairs every row of a and b; *out is malloc'd. */
static int build_rows(const sw_snapshot *a, const sw_snapshot *b, cmp_row **out, size_t *n)
{
    size_t cap = a->nrows + b->nrows;
    cmp_row *rows = calloc(cap ? cap : 1, sizeof *rows);
    if (!rows)
        return SW_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < a->nrows; i++) {
        const sw_row *ra = &a->rows[i];
        if (!ra->action_name || !ra->phase_name)
            continue;
        cmp_row *c = &rows[k++];
        c->action = ra->action_name;
        c->phase = ra->phase_name;
        c->rollup = is_rollup(ra);
        c->a = ra;
        for (size_t j = 0; j < b->nrows; j++)
            if (same_key(ra, &b->rows[j])) {
                c->b = &b->rows[j];
                break;
            }
    }
    for (size_t j = 0; j < b->nrows; j++) {
        const sw_row *rb = &b->rows[j];
        if (!rb->action_name || !rb->phase_name)
            continue;
        int matched = 0;
        for (size_t i = 0; i < a->nrows && !matched; i++)
            matched = same_key(&a->rows[i], rb);
        if (matched)
            continue;
        cmp_row *c = &rows[k++];
        c->action = rb->action_name;
        c->phase = rb->phase_name;
        c->rollup = is_rollup(rb);
        c->b = rb;
    }
    for (size_t i = 0; i < k; i++)
        judge(&rows[i]);
    qsort(rows, k, sizeof *rows, cmp_order);
    *out = rows;
    *n = k;
    return 0;
}

/* ---- writers ---- */

static const char *dur(const sw_row *r, double ns, char *buf, size_t size)
{
    if (!r)
        return "-";
    return sw_format_duration(ns, buf, size);
}

static double q(const sw_row *r, double quantile)
{
    return r ? (double)sw_hist_quantile(&r->hist, quantile) : NAN;
}

static double total(const sw_row *r) { return r ? (double)r->stats.total_ns : NAN; }

static void pct_text(double pct, char *buf, size_t size)
{
    if (!isfinite(pct))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%+.1f %%", pct);
}

static void p_text(double p, char *buf, size_t size)
{
    if (!isfinite(p))
        snprintf(buf, size, "-");
    else if (p < 1e-4)
        snprintf(buf, size, "<1e-4");
    else
        snprintf(buf, size, "%.4f", p);
}

static size_t count_verdict(const cmp_row *rows, size_t n, verdict v)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += rows[i].v == v;
    return k;
}

static void run_line(FILE *out, const char *label, const sw_snapshot *s)
{
    char wall[32];
    fprintf(out, "%s \"", label);
    sw__clean_text(out, s->name ? s->name : "stepwatch");
    fprintf(out, "\": %llu steps, %s\n", (unsigned long long)s->steps,
            sw_format_duration((double)s->wall_ns, wall, sizeof wall));
}

/* Display width of a UTF-8 string (code points; good enough for action names). */
static int text_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* Print s left-aligned in a field of width w (UTF-8 aware, cut with "~" if too long). */
static void put_left(FILE *out, const char *s, int w)
{
    int len = text_width(s);
    if (len <= w) {
        fprintf(out, "%s%*s", s, w - len, "");
        return;
    }
    int shown = 0;
    for (const char *c = s; *c; c++) {
        if (((unsigned char)*c & 0xC0) != 0x80 && ++shown > w - 1)
            break;
        fputc(*c, out);
    }
    fputc('~', out);
}

/* Print s right-aligned in a field of width w (UTF-8 aware: "µs" is one column). */
static void put_right(FILE *out, const char *s, int w)
{
    int len = text_width(s);
    fprintf(out, "%*s%s", len < w ? w - len : 0, "", s);
}

static void write_table(FILE *out, const sw_snapshot *a, const sw_snapshot *b,
                        const cmp_row *rows, size_t n)
{
    run_line(out, "baseline", a);
    run_line(out, "new     ", b);
    fprintf(out, "%zu slower, %zu faster, %zu new, %zu gone (Mann-Whitney U on the histograms, "
                 "p < %.2g and |change| >= %.0f %%)\n",
            count_verdict(rows, n, V_SLOWER), count_verdict(rows, n, V_FASTER),
            count_verdict(rows, n, V_NEW), count_verdict(rows, n, V_GONE), SW__ALPHA,
            SW__MIN_CHANGE_PCT);
    int wa = 6, wp = 5;
    char phase[SW__LABEL_MAX], action[SW__LABEL_MAX]; /* names as a terminal may show them */
    for (size_t i = 0; i < n; i++) {
        int la = (int)sw__text_clean(rows[i].action, action, sizeof action);
        int lp = (int)sw__text_clean(rows[i].phase, phase, sizeof phase);
        wa = la > wa ? la : wa;
        wp = lp > wp ? lp : wp;
    }
    wa = wa > 28 ? 28 : wa;
    wp = wp > 10 ? 10 : wp;
    fputc('\n', out);
    put_left(out, "Phase", wp);
    fputs("  ", out);
    put_left(out, "Action", wa);
    const char *head[] = {"Base mean", "New mean", "Change", "Base p99", "New p99", "New total"};
    for (int k = 0; k < 6; k++)
        put_right(out, head[k], k ? 11 : 12);
    fputs("  Verdict\n", out);
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
        sw__text_clean(c->phase, phase, sizeof phase);
        sw__text_clean(c->action, action, sizeof action);
        put_left(out, phase, wp);
        fputs("  ", out);
        put_left(out, action, wa);
        pct_text(c->delta_pct, b3, sizeof b3);
        const char *cell[] = {dur(c->a, row_mean(c->a), b1, sizeof b1),
                              dur(c->b, row_mean(c->b), b2, sizeof b2), b3,
                              dur(c->a, q(c->a, 0.99), b4, sizeof b4),
                              dur(c->b, q(c->b, 0.99), b5, sizeof b5),
                              dur(c->b, total(c->b), b6, sizeof b6)};
        for (int k = 0; k < 6; k++)
            put_right(out, cell[k], k ? 11 : 12);
        fprintf(out, "  %s\n", verdict_names[c->v]);
    }
}

static void write_markdown(FILE *out, const sw_snapshot *a, const sw_snapshot *b,
                           const cmp_row *rows, size_t n)
{
    char wa[32], wb[32];
    char na[SW__LABEL_MAX], nb[SW__LABEL_MAX];
    sw__text_clean(a->name ? a->name : "stepwatch", na, sizeof na);
    sw__text_clean(b->name ? b->name : "stepwatch", nb, sizeof nb);
    fprintf(out, "## stepwatch compare\n\n");
    fprintf(out, "Baseline **%s** (%llu steps, %s) vs new **%s** (%llu steps, %s): "
                 "%zu slower, %zu faster, %zu new, %zu gone. A change counts when a two-sided "
                 "Mann-Whitney U test on the histograms gives p < %.2g and the mean moved by at "
                 "least %.0f %%.\n\n",
            na, (unsigned long long)a->steps,
            sw_format_duration((double)a->wall_ns, wa, sizeof wa), nb,
            (unsigned long long)b->steps, sw_format_duration((double)b->wall_ns, wb, sizeof wb),
            count_verdict(rows, n, V_SLOWER), count_verdict(rows, n, V_FASTER),
            count_verdict(rows, n, V_NEW), count_verdict(rows, n, V_GONE), SW__ALPHA,
            SW__MIN_CHANGE_PCT);
    fprintf(out, "| Phase | Action | Calls (base) | Calls (new) | Mean (base) | Mean (new) | Change "
                 "| p50 (base) | p50 (new) | p99 (base) | p99 (new) | Total (base) | Total (new) "
                 "| p-value | Verdict |\n");
    fprintf(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        char t[10][32];
        pct_text(c->delta_pct, t[0], sizeof t[0]);
        p_text(c->p, t[1], sizeof t[1]);
        fputs("| ", out);
        /* Escape the table separator inside names. */
        for (int k = 0; k < 2; k++) {
            sw__text_clean(k ? c->action : c->phase, na, sizeof na);
            for (const char *s = na; *s; s++) {
                if (*s == '|')
                    fputc('\\', out);
                fputc(*s, out);
            }
            fputs(" | ", out);
        }
        if (c->a)
            fprintf(out, "%llu | ", (unsigned long long)c->a->stats.count);
        else
            fputs("- | ", out);
        if (c->b)
            fprintf(out, "%llu | ", (unsigned long long)c->b->stats.count);
        else
            fputs("- | ", out);
        fprintf(out, "%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                dur(c->a, row_mean(c->a), t[2], 32), dur(c->b, row_mean(c->b), t[3], 32), t[0],
                dur(c->a, q(c->a, 0.5), t[4], 32), dur(c->b, q(c->b, 0.5), t[5], 32),
                dur(c->a, q(c->a, 0.99), t[6], 32), dur(c->b, q(c->b, 0.99), t[7], 32),
                dur(c->a, total(c->a), t[8], 32), dur(c->b, total(c->b), t[9], 32), t[1],
                verdict_names[c->v]);
    }
}

static void csv_field(FILE *out, const char *name)
{
    char s_clean[SW__LABEL_MAX];
    sw__text_clean(name, s_clean, sizeof s_clean);
    fputc('"', out);
    for (const char *s = s_clean; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static void csv_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, ",%.17g", v);
    else
        fputc(',', out);
}

static void write_csv(FILE *out, const cmp_row *rows, size_t n)
{
    fprintf(out, "phase,action,calls_base,calls_new,mean_base_ns,mean_new_ns,change_pct,"
                 "p50_base_ns,p50_new_ns,p99_base_ns,p99_new_ns,total_base_ns,total_new_ns,"
                 "impact_ns,z,p_value,verdict\n");
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        csv_field(out, c->phase);
        fputc(',', out);
        csv_field(out, c->action);
        csv_number(out, c->a ? (double)c->a->stats.count : NAN);
        csv_number(out, c->b ? (double)c->b->stats.count : NAN);
        csv_number(out, row_mean(c->a));
        csv_number(out, row_mean(c->b));
        csv_number(out, c->delta_pct);
        csv_number(out, q(c->a, 0.5));
        csv_number(out, q(c->b, 0.5));
        csv_number(out, q(c->a, 0.99));
        csv_number(out, q(c->b, 0.99));
        csv_number(out, total(c->a));
        csv_number(out, total(c->b));
        csv_number(out, c->impact_ns);
        csv_number(out, c->z);
        csv_number(out, c->p);
        fprintf(out, ",%s\n", verdict_names[c->v]);
    }
}

static void json_run(FILE *out, const sw_snapshot *s)
{
    fputs("{\"name\": ", out);
    sw__json_string(out, s->name ? s->name : "stepwatch");
    fprintf(out, ", \"steps\": %llu, \"wall_ns\": %llu}", (unsigned long long)s->steps,
            (unsigned long long)s->wall_ns);
}

static void json_side(FILE *out, const char *key, const sw_row *r)
{
    fprintf(out, "\"%s\": ", key);
    if (!r) {
        fputs("null", out);
        return;
    }
    fprintf(out, "{\"calls\": %llu, \"mean_ns\": ", (unsigned long long)r->stats.count);
    sw__json_number(out, r->stats.mean_ns);
    fprintf(out, ", \"p50_ns\": %llu, \"p99_ns\": %llu, \"total_ns\": %llu}",
            (unsigned long long)sw_hist_quantile(&r->hist, 0.5),
            (unsigned long long)sw_hist_quantile(&r->hist, 0.99),
            (unsigned long long)r->stats.total_ns);
}

static void write_json(FILE *out, const sw_snapshot *a, const sw_snapshot *b, const cmp_row *rows,
                       size_t n)
{
    fputs("{\"schema\": \"stepwatch.compare\", \"version\": 1,\n \"baseline\": ", out);
    json_run(out, a);
    fputs(",\n \"new\": ", out);
    json_run(out, b);
    fprintf(out, ",\n \"test\": \"mann-whitney-u\", \"alpha\": %.17g, \"min_change_pct\": %.17g,\n",
            SW__ALPHA, SW__MIN_CHANGE_PCT);
    fprintf(out, " \"slower\": %zu, \"faster\": %zu, \"new_actions\": %zu, \"gone_actions\": %zu,\n",
            count_verdict(rows, n, V_SLOWER), count_verdict(rows, n, V_FASTER),
            count_verdict(rows, n, V_NEW), count_verdict(rows, n, V_GONE));
    fputs(" \"rows\": [", out);
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        fputs(i ? ",\n  {\"phase\": " : "\n  {\"phase\": ", out);
        sw__json_string(out, c->phase);
        fputs(", \"action\": ", out);
        sw__json_string(out, c->action);
        fputs(", ", out);
        json_side(out, "baseline", c->a);
        fputs(", ", out);
        json_side(out, "new", c->b);
        fputs(", \"change_pct\": ", out);
        sw__json_number(out, c->delta_pct);
        fputs(", \"impact_ns\": ", out);
        sw__json_number(out, c->impact_ns);
        fputs(", \"z\": ", out);
        sw__json_number(out, c->z);
        fputs(", \"p_value\": ", out);
        sw__json_number(out, c->p);
        fprintf(out, ", \"verdict\": \"%s\"}", verdict_names[c->v]);
    }
    fputs(n ? "\n ]\n}\n" : "]\n}\n", out);
}

/* ---- public ---- */

SW_API int sw_compare_regressions(const sw_snapshot *a, const sw_snapshot *b, size_t *count)
{
    if (!a || !b || !count)
        return SW_EINVAL;
    cmp_row *rows = NULL;
    size_t n = 0;
    int rc = build_rows(a, b, &rows, &n);
    if (rc != 0)
        return rc;
    *count = count_verdict(rows, n, V_SLOWER);
    free(rows);
    return 0;
}

SW_API int sw_compare_write(const sw_snapshot *a, const sw_snapshot *b, sw_format fmt, FILE *out)
{
    if (!a || !b || !out)
        return SW_EINVAL;
    if (fmt != SW_FORMAT_TABLE && fmt != SW_FORMAT_MARKDOWN && fmt != SW_FORMAT_CSV &&
        fmt != SW_FORMAT_JSON)
        return SW_EFORMAT;
    cmp_row *rows = NULL;
    size_t n = 0;
    int rc = build_rows(a, b, &rows, &n);
    if (rc != 0)
        return rc;
    switch (fmt) {
    case SW_FORMAT_MARKDOWN: write_markdown(out, a, b, rows, n); break;
    case SW_FORMAT_CSV: write_csv(out, rows, n); break;
    case SW_FORMAT_JSON: write_json(out, a, b, rows, n); break;
    default: write_table(out, a, b, rows, n); break;
    }
    free(rows);
    return ferror(out) ? SW_EIO : 0;
}
