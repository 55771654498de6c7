/*
 * compare.c — what changed between two runs, per action, and whether it is beyond noise.
 *
 * Rows are matched by (action name, phase name). For each pair the significance test is a
 * two-sided Mann-Whitney U test computed from the two duration histograms: every bucket is
 * a group of tied values, so U and its tie-corrected variance come straight from the bucket
 * counts in one pass (docs/compare.md explains the choice and its limits). A change is
 * reported as slower or faster only when it is both significant (p < SW__ALPHA) and large
 * enough to matter (|change of the mean| >= SW__MIN_CHANGE_PCT).
 *
 * The tails are judged on their own, since a few new stalls move p99 without moving the bulk
 * that U looks at: for p90 and p99, the calls above the pooled quantile (both runs' calls
 * together, at or above its bucket) are counted on each side and Fisher's exact test on that
 * 2x2 table says whether
 * one run has more of them (Mood's median test, at another quantile). A tail is slower or
 * faster when that test gives p < SW__TAIL_ALPHA and the quantile itself moved by at least
 * SW__TAIL_MIN_RATIO. A slower tail makes the row slower even when the bulk is unchanged.
 */
#include "analysis_internal.h"
#include "report/writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW__ALPHA 0.01
#define SW__MIN_CHANGE_PCT 5.0
#define SW__MIN_CALLS 5         /* below this the normal approximation of U is not trusted */
#define SW__TAIL_ALPHA 0.005    /* per tail: two tails share the 0.01 (Bonferroni) */
#define SW__TAIL_MIN_RATIO 1.10 /* tails are noisier than means: at least 10 % */
#define SW__NTAILS 2
static const double tail_q[SW__NTAILS] = {0.90, 0.99};
static const char *const tail_names[SW__NTAILS] = {"p90", "p99"};

/* Verdicts, in the order rows are listed: what a person acts on first. */
typedef enum verdict { V_SLOWER = 0, V_FASTER, V_NEW, V_GONE, V_UNCLEAR, V_SAME } verdict;

static const char *const verdict_names[] = {"slower", "faster", "new", "gone", "unclear", "same"};

typedef struct tail_test {
    double base_ns, new_ns; /* the quantile of each run (NaN when a side is missing) */
    double ratio;           /* new / base */
    double p;               /* Fisher's exact test on the calls above the pooled quantile */
    int dir;                /* +1 significantly and materially slower, -1 faster, else 0 */
} tail_test;

typedef struct cmp_row {
    const char *action;
    const char *phase;
    int rollup;          /* the all-phases row of an action */
    const sw_row *a, *b; /* baseline and new; one may be NULL */
    double delta_pct;    /* change of the mean, % of the baseline mean (NaN if undefined) */
    double impact_ns;    /* (new mean - base mean) x new calls: time the change cost */
    double z, p;         /* Mann-Whitney U: z score (> 0: new is slower) and p-value */
    tail_test tails[SW__NTAILS];
    verdict v;
    const char *by; /* what decided slower/faster: "mean", "p50", "p90" or "p99"; else
                             NULL */
} cmp_row;

/* ---- the test ---- */

/* Two-sided Mann-Whitney U from two histograms with the same buckets. Sets z (positive when
 * b tends to be larger) and p; p = 1 when there is nothing to compare. */
static void mann_whitney(const sw_hist *a, const sw_hist *b, double *z_out, double *p_out) {
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

static double row_mean(const sw_row *r) {
    return r ? r->stats.mean_ns : NAN;
}

static double q(const sw_row *r, double quantile) {
    return r ? (double)sw_stats_quantile(&r->stats, &r->hist, quantile) : NAN;
}

/* log of the hypergeometric probability: k of the K marked calls among the nb drawn of N. */
static double log_hyper(double k, double nb, double K, double N) {
    return lgamma(K + 1) - lgamma(k + 1) - lgamma(K - k + 1) + lgamma(N - K + 1) -
           lgamma(nb - k + 1) - lgamma(N - K - nb + k + 1) - lgamma(N + 1) + lgamma(nb + 1) +
           lgamma(N - nb + 1);
}

/* Two-sided Fisher's exact test of x marked calls among the nb calls of one run, K marked
 * among N in all: the probability of a table at most as likely as the one seen. Terms beyond
 * 40 standard deviations of the mean are below 1e-300 and are not summed. */
static double fisher_exact(double x, double nb, double K, double N) {
    double lo = fmax(0, nb - (N - K)), hi = fmin(K, nb);
    double mean = nb * K / N;
    double sd = N > 1 ? sqrt(mean * (1 - K / N) * (N - nb) / (N - 1)) : 0;
    double from = fmax(lo, floor(mean - 40 * sd - 50)), to = fmin(hi, ceil(mean + 40 * sd + 50));
    double lx = log_hyper(x, nb, K, N), p = 0;
    if (x < from || x > to)
        return fmin(1, exp(lx) * (hi - lo + 1)); /* far out: a bound, far below any alpha */
    for (double k = from; k <= to; k++) {
        double lk = log_hyper(k, nb, K, N);
        if (lk <= lx + 1e-7)
            p += exp(lk);
    }
    return fmin(1, p);
}

/* The tail at quantile qq: Fisher's exact test on the calls above the pooled quantile.
 * a and b have at least SW__MIN_CALLS calls each. */
static void judge_tail(const sw_row *a, const sw_row *b, double qq, tail_test *t) {
    t->base_ns = q(a, qq);
    t->new_ns = q(b, qq);
    t->ratio = t->base_ns > 0 ? t->new_ns / t->base_ns : NAN;
    double na = (double)a->hist.count, nb = (double)b->hist.count, n = na + nb;
    /* The calls at or above the bucket of the pooled quantile (all tied within it): a run
     * whose stalls fill that bucket is seen. When every call is at or above it (the bucket
     * is the lowest), the calls strictly above. */
    double rank = fmax(1, ceil(qq * n)), seen = 0, a_above = na, b_above = nb;
    uint32_t i = 0;
    for (; i < SW_HIST_BUCKETS; i++) {
        seen += a->hist.buckets[i] + b->hist.buckets[i];
        if (seen >= rank)
            break;
        a_above -= a->hist.buckets[i];
        b_above -= b->hist.buckets[i];
    }
    if (i < SW_HIST_BUCKETS && a_above + b_above >= n) {
        a_above -= a->hist.buckets[i];
        b_above -= b->hist.buckets[i];
    }
    t->p = fisher_exact(b_above, nb, a_above + b_above, n);
    int more_above = b_above / nb > a_above / na; /* the new run has more of its calls above */
    int significant = t->p < SW__TAIL_ALPHA;
    if (significant && more_above && t->ratio >= SW__TAIL_MIN_RATIO)
        t->dir = 1;
    else if (significant && !more_above && t->ratio <= 1 / SW__TAIL_MIN_RATIO)
        t->dir = -1;
}

/* The tail that moved in direction dir by the most, or -1. */
static int tail_moved(const cmp_row *c, int dir) {
    int best = -1;
    for (int k = 0; k < SW__NTAILS; k++)
        if (c->tails[k].dir == dir &&
            (best < 0 || fabs(log(c->tails[k].ratio)) > fabs(log(c->tails[best].ratio))))
            best = k;
    return best;
}

static void judge(cmp_row *c) {
    c->z = NAN; /* the tests' figures stay NaN unless they run */
    c->p = NAN;
    c->delta_pct = NAN;
    c->impact_ns = 0;
    c->by = NULL;
    for (int k = 0; k < SW__NTAILS; k++)
        c->tails[k] = (tail_test){
            .base_ns = q(c->a, tail_q[k]), .new_ns = q(c->b, tail_q[k]), .ratio = NAN, .p = NAN};
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
    for (int k = 0; k < SW__NTAILS; k++)
        judge_tail(c->a, c->b, tail_q[k], &c->tails[k]);
    /* The bulk moved when U says so and the mean, or else the median, moved the same way by
     * at least SW__MIN_CHANGE_PCT: a mean moved only by a few outliers, against the bulk of
     * the calls, is no change of the bulk (the tail tests judge those outliers), and a bulk
     * that moved while a stall dragged the mean the other way is one (decided by the p50).
     * A slower tail outranks a faster bulk: a regression is what a person acts on first. */
    double min_ratio = 1 + SW__MIN_CHANGE_PCT / 100, p50_ratio = q(c->b, 0.5) / q(c->a, 0.5);
    int mean_up = isfinite(c->delta_pct) && c->delta_pct >= SW__MIN_CHANGE_PCT;
    int mean_down = isfinite(c->delta_pct) && c->delta_pct <= -SW__MIN_CHANGE_PCT;
    int bulk_up = c->p < SW__ALPHA && c->z > 0 && (mean_up || p50_ratio >= min_ratio);
    int bulk_down = c->p < SW__ALPHA && c->z < 0 && (mean_down || p50_ratio <= 1 / min_ratio);
    int slower_tail = tail_moved(c, 1), faster_tail = tail_moved(c, -1);
    c->v = V_SAME;
    if (bulk_up) {
        c->v = V_SLOWER;
        c->by = mean_up ? "mean" : "p50";
    } else if (slower_tail >= 0) {
        c->v = V_SLOWER;
        c->by = tail_names[slower_tail];
    } else if (bulk_down) {
        c->v = V_FASTER;
        c->by = mean_down ? "mean" : "p50";
    } else if (faster_tail >= 0) {
        c->v = V_FASTER;
        c->by = tail_names[faster_tail];
    }
}

/* ---- matching and ordering ---- */

static int is_rollup(const sw_row *r) {
    return r->phase == SW_PHASE_ALL;
}

static int cmp_order(const void *px, const void *py) {
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

/* A snapshot's named rows sorted by (action, phase), then by their place in the snapshot, so
 * a row finds its match by binary search: pairing n rows takes n log n, not n^2 (4,000
 * actions x 5 phases took 6.9 s). */
typedef struct keyed {
    const sw_row *row;
    size_t index;
} keyed;

static int cmp_key(const sw_row *x, const sw_row *y) {
    int c = strcmp(x->action_name, y->action_name);
    return c ? c : strcmp(x->phase_name, y->phase_name);
}

static int cmp_keyed(const void *px, const void *py) {
    const keyed *x = px, *y = py;
    int c = cmp_key(x->row, y->row);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static keyed *sorted_rows(const sw_snapshot *s, size_t *n) {
    keyed *k = malloc((s->nrows ? s->nrows : 1) * sizeof *k);
    *n = 0;
    if (!k)
        return NULL;
    for (size_t i = 0; i < s->nrows; i++)
        if (s->rows[i].action_name && s->rows[i].phase_name)
            k[(*n)++] = (keyed){&s->rows[i], i};
    qsort(k, *n, sizeof *k, cmp_keyed);
    return k;
}

/* The first row (in snapshot order) with r's key, or NULL. */
static const sw_row *find_row(const keyed *k, size_t n, const sw_row *r) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(k[mid].row, r) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && cmp_key(k[lo].row, r) == 0 ? k[lo].row : NULL;
}

/* Pairs every row of a and b; *out is malloc'd. */
static int build_rows(const sw_snapshot *a, const sw_snapshot *b, cmp_row **out, size_t *n) {
    size_t cap = a->nrows + b->nrows, na = 0, nb = 0;
    cmp_row *rows = calloc(cap ? cap : 1, sizeof *rows);
    keyed *ka = sorted_rows(a, &na), *kb = sorted_rows(b, &nb);
    if (!rows || !ka || !kb) {
        free(rows);
        free(ka);
        free(kb);
        return SW_ENOMEM;
    }
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
        c->b = find_row(kb, nb, ra);
    }
    for (size_t j = 0; j < b->nrows; j++) {
        const sw_row *rb = &b->rows[j];
        if (!rb->action_name || !rb->phase_name || find_row(ka, na, rb))
            continue;
        cmp_row *c = &rows[k++];
        c->action = rb->action_name;
        c->phase = rb->phase_name;
        c->rollup = is_rollup(rb);
        c->b = rb;
    }
    free(ka);
    free(kb);
    for (size_t i = 0; i < k; i++)
        judge(&rows[i]);
    qsort(rows, k, sizeof *rows, cmp_order);
    *out = rows;
    *n = k;
    return 0;
}

/* ---- writers ---- */

/* A duration into buf, "-" when the side is missing or the figure undefined. */
static const char *dur(const sw_row *r, double ns, char *buf, size_t size) {
    if (!r || !isfinite(ns))
        snprintf(buf, size, "-");
    else
        sw_format_duration(ns, buf, size);
    return buf;
}

static double total(const sw_row *r) {
    return r ? (double)r->stats.total_ns : NAN;
}

static void pct_text(double pct, char *buf, size_t size) {
    if (!isfinite(pct))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, fabs(pct) >= 999.95 ? "%+.0f %%" : "%+.1f %%", pct);
}

static void p_text(double p, char *buf, size_t size) {
    if (!isfinite(p))
        snprintf(buf, size, "-");
    else if (p < 1e-4)
        snprintf(buf, size, "<1e-4");
    else
        snprintf(buf, size, "%.4f", p);
}

static size_t count_verdict(const cmp_row *rows, size_t n, verdict v) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += rows[i].v == v;
    return k;
}

static void run_line(FILE *out, const char *label, const sw_snapshot *s) {
    char wall[32];
    fprintf(out, "%s \"", label);
    sw__clean_text(out, s->name ? s->name : "stepwatch");
    fprintf(out, "\": %llu steps, %s\n", (unsigned long long)s->steps,
            sw_format_duration((double)s->wall_ns, wall, sizeof wall));
}

/* Display width of a UTF-8 string (code points; good enough for action names). */
static int text_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* Print s left-aligned in a field of width w (UTF-8 aware, cut with "~" if too long). */
static void put_left(FILE *out, const char *s, int w) {
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
static void put_right(FILE *out, const char *s, int w) {
    int len = text_width(s);
    fprintf(out, "%*s%s", len < w ? w - len : 0, "", s);
}

/* "x2.30": how many times the new quantile is the baseline's. */
static void ratio_text(double ratio, char *buf, size_t size) {
    if (!isfinite(ratio))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, ratio >= 99.95 ? "x%.0f" : ratio >= 9.995 ? "x%.1f" : "x%.2f", ratio);
}

/* "slower", or "slower p99" when a tail decided it. */
static void verdict_text(const cmp_row *c, char *buf, size_t size) {
    if (c->by && strcmp(c->by, "mean") != 0)
        snprintf(buf, size, "%s %s", verdict_names[c->v], c->by);
    else
        snprintf(buf, size, "%s", verdict_names[c->v]);
}

static void summary_lines(FILE *out, const cmp_row *rows, size_t n) {
    fprintf(out, "%zu slower, %zu faster, %zu new, %zu gone\n", count_verdict(rows, n, V_SLOWER),
            count_verdict(rows, n, V_FASTER), count_verdict(rows, n, V_NEW),
            count_verdict(rows, n, V_GONE));
    fprintf(out, "mean:  Mann-Whitney U on the histograms, p < %.2g and |change| >= %.0f %%\n",
            SW__ALPHA, SW__MIN_CHANGE_PCT);
    fprintf(out,
            "tails: calls above the pooled p90/p99, Fisher's exact test, p < %.2g and "
            "change >= %.0f %%\n",
            SW__TAIL_ALPHA, (SW__TAIL_MIN_RATIO - 1) * 100);
}

/* The terminal table: at most 100 columns (names are cut to fit). Markdown, CSV and JSON
 * carry every figure. */
static void write_table(FILE *out, const sw_snapshot *a, const sw_snapshot *b, const cmp_row *rows,
                        size_t n) {
    run_line(out, "baseline", a);
    run_line(out, "new     ", b);
    summary_lines(out, rows, n);
    int wa = 6, wp = 5;
    char phase[SW__LABEL_MAX], action[SW__LABEL_MAX]; /* names as a terminal may show them */
    for (size_t i = 0; i < n; i++) {
        int la = (int)sw__text_clean(rows[i].action, action, sizeof action);
        int lp = (int)sw__text_clean(rows[i].phase, phase, sizeof phase);
        wa = la > wa ? la : wa;
        wp = lp > wp ? lp : wp;
    }
    wa = wa > 22 ? 22 : wa;
    wp = wp > 8 ? 8 : wp;
    enum { NCOLS = 6 };
    static const char *const head[NCOLS] = {"Base mean", "New mean", "Change",
                                            "Base p99",  "New p99",  "p99"};
    static const int width[NCOLS] = {10, 10, 9, 10, 10, 7};
    fputc('\n', out);
    put_left(out, "Phase", wp);
    fputs("  ", out);
    put_left(out, "Action", wa);
    for (int k = 0; k < NCOLS; k++)
        put_right(out, head[k], width[k]);
    fputs("  Verdict\n", out);
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        const tail_test *p99 = &c->tails[SW__NTAILS - 1];
        char t[NCOLS][32], vtext[32];
        sw__text_clean(c->phase, phase, sizeof phase);
        sw__text_clean(c->action, action, sizeof action);
        put_left(out, phase, wp);
        fputs("  ", out);
        put_left(out, action, wa);
        dur(c->a, row_mean(c->a), t[0], sizeof t[0]);
        dur(c->b, row_mean(c->b), t[1], sizeof t[1]);
        pct_text(c->delta_pct, t[2], sizeof t[2]);
        dur(c->a, p99->base_ns, t[3], sizeof t[3]);
        dur(c->b, p99->new_ns, t[4], sizeof t[4]);
        ratio_text(c->a && c->b ? p99->new_ns / p99->base_ns : NAN, t[5], sizeof t[5]);
        for (int k = 0; k < NCOLS; k++)
            put_right(out, t[k], width[k]);
        verdict_text(c, vtext, sizeof vtext);
        fprintf(out, "  %s\n", vtext);
    }
}

static void write_markdown(FILE *out, const sw_snapshot *a, const sw_snapshot *b,
                           const cmp_row *rows, size_t n) {
    char wa[32], wb[32];
    fprintf(out, "## stepwatch compare\n\nBaseline **");
    sw__md_put_text(out, a->name ? a->name : "stepwatch");
    fprintf(out, "** (%llu steps, %s) vs new **", (unsigned long long)a->steps,
            sw_format_duration((double)a->wall_ns, wa, sizeof wa));
    sw__md_put_text(out, b->name ? b->name : "stepwatch");
    fprintf(out,
            "** (%llu steps, %s): "
            "%zu slower, %zu faster, %zu new, %zu gone. A change of the mean counts when "
            "a two-sided Mann-Whitney U test on the histograms gives p < %.2g and the mean "
            "moved by at least %.0f %%; a change of a tail when Fisher's exact test on the "
            "calls above the pooled p90 or p99 gives p < %.2g and that quantile moved by at "
            "least %.0f %%.\n\n",
            (unsigned long long)b->steps, sw_format_duration((double)b->wall_ns, wb, sizeof wb),
            count_verdict(rows, n, V_SLOWER), count_verdict(rows, n, V_FASTER),
            count_verdict(rows, n, V_NEW), count_verdict(rows, n, V_GONE), SW__ALPHA,
            SW__MIN_CHANGE_PCT, SW__TAIL_ALPHA, (SW__TAIL_MIN_RATIO - 1) * 100);
    fprintf(out,
            "| Phase | Action | Calls (base) | Calls (new) | Mean (base) | Mean (new) | Change "
            "| p50 (base) | p50 (new) | p90 (base) | p90 (new) | p99 (base) | p99 (new) "
            "| Total (base) | Total (new) | p-value | p-value (p90) | p-value (p99) "
            "| Verdict |\n");
    fprintf(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        char t[15][32];
        pct_text(c->delta_pct, t[0], sizeof t[0]);
        p_text(c->p, t[1], sizeof t[1]);
        p_text(c->tails[0].p, t[10], sizeof t[10]);
        p_text(c->tails[1].p, t[11], sizeof t[11]);
        verdict_text(c, t[12], sizeof t[12]);
        fputs("| ", out);
        for (int k = 0; k < 2; k++) {
            sw__md_put_text(out, k ? c->action : c->phase);
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
        fprintf(out, "%s | %s | %s | %s | %s | ", dur(c->a, row_mean(c->a), t[2], 32),
                dur(c->b, row_mean(c->b), t[3], 32), t[0], dur(c->a, q(c->a, 0.5), t[4], 32),
                dur(c->b, q(c->b, 0.5), t[5], 32));
        fprintf(out, "%s | %s | %s | %s | ", dur(c->a, c->tails[0].base_ns, t[6], 32),
                dur(c->b, c->tails[0].new_ns, t[7], 32), dur(c->a, c->tails[1].base_ns, t[8], 32),
                dur(c->b, c->tails[1].new_ns, t[9], 32));
        fprintf(out, "%s | %s | %s | %s | %s | %s |\n", dur(c->a, total(c->a), t[13], 32),
                dur(c->b, total(c->b), t[14], 32), t[1], t[10], t[11], t[12]);
    }
}

static void csv_number(FILE *out, double v) {
    if (isfinite(v))
        fprintf(out, ",%.17g", v);
    else
        fputc(',', out);
}

static void write_csv(FILE *out, const cmp_row *rows, size_t n) {
    fprintf(out, "phase,action,calls_base,calls_new,mean_base_ns,mean_new_ns,change_pct,"
                 "p50_base_ns,p50_new_ns,p99_base_ns,p99_new_ns,total_base_ns,total_new_ns,"
                 "impact_ns,z,p_value,verdict,p90_base_ns,p90_new_ns,p90_p_value,p99_p_value,"
                 "decided_by\n");
    for (size_t i = 0; i < n; i++) {
        const cmp_row *c = &rows[i];
        sw__csv_put_text(out, c->phase);
        fputc(',', out);
        sw__csv_put_text(out, c->action);
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
        fprintf(out, ",%s", verdict_names[c->v]);
        csv_number(out, c->tails[0].base_ns);
        csv_number(out, c->tails[0].new_ns);
        csv_number(out, c->tails[0].p);
        csv_number(out, c->tails[1].p);
        fprintf(out, ",%s\n", c->by ? c->by : "");
    }
}

static void json_run(FILE *out, const sw_snapshot *s) {
    fputs("{\"name\": ", out);
    sw__json_string(out, s->name ? s->name : "stepwatch");
    fprintf(out, ", \"steps\": %llu, \"wall_ns\": %llu}", (unsigned long long)s->steps,
            (unsigned long long)s->wall_ns);
}

static void json_side(FILE *out, const char *key, const sw_row *r) {
    fprintf(out, "\"%s\": ", key);
    if (!r) {
        fputs("null", out);
        return;
    }
    fprintf(out, "{\"calls\": %llu, \"mean_ns\": ", (unsigned long long)r->stats.count);
    sw__json_number(out, r->stats.mean_ns);
    fprintf(out, ", \"p50_ns\": %llu, \"p90_ns\": %llu, \"p99_ns\": %llu, \"total_ns\": %llu}",
            (unsigned long long)sw_stats_quantile(&r->stats, &r->hist, 0.5),
            (unsigned long long)sw_stats_quantile(&r->stats, &r->hist, 0.9),
            (unsigned long long)sw_stats_quantile(&r->stats, &r->hist, 0.99),
            (unsigned long long)r->stats.total_ns);
}

static void write_json(FILE *out, const sw_snapshot *a, const sw_snapshot *b, const cmp_row *rows,
                       size_t n) {
    fputs("{\"schema\": \"stepwatch.compare\", \"version\": 1,\n \"baseline\": ", out);
    json_run(out, a);
    fputs(",\n \"new\": ", out);
    json_run(out, b);
    fprintf(out, ",\n \"test\": \"mann-whitney-u\", \"alpha\": %.17g, \"min_change_pct\": %.17g,\n",
            SW__ALPHA, SW__MIN_CHANGE_PCT);
    fprintf(out,
            " \"tail_test\": \"fisher-exact-above-pooled-quantile\", \"tail_alpha\": %.17g, "
            "\"tail_min_ratio\": %.17g,\n",
            SW__TAIL_ALPHA, SW__TAIL_MIN_RATIO);
    fprintf(out,
            " \"slower\": %zu, \"faster\": %zu, \"new_actions\": %zu, \"gone_actions\": %zu,\n",
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
        fputs(", \"tails\": {", out);
        for (int k = 0; k < SW__NTAILS; k++) {
            fprintf(out, "%s\"%s\": {\"ratio\": ", k ? ", " : "", tail_names[k]);
            sw__json_number(out, c->tails[k].ratio);
            fputs(", \"p_value\": ", out);
            sw__json_number(out, c->tails[k].p);
            fputc('}', out);
        }
        fprintf(out, "}, \"verdict\": \"%s\", \"decided_by\": ", verdict_names[c->v]);
        if (c->by)
            fprintf(out, "\"%s\"}", c->by);
        else
            fputs("null}", out);
    }
    fputs(n ? "\n ]\n}\n" : "]\n}\n", out);
}

/* ---- public ---- */

SW_API int sw_compare_regressions(const sw_snapshot *a, const sw_snapshot *b, size_t *count) {
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

SW_API int sw_compare_write(const sw_snapshot *a, const sw_snapshot *b, sw_format fmt, FILE *out) {
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
    case SW_FORMAT_MARKDOWN:
        write_markdown(out, a, b, rows, n);
        break;
    case SW_FORMAT_CSV:
        write_csv(out, rows, n);
        break;
    case SW_FORMAT_JSON:
        write_json(out, a, b, rows, n);
        break;
    default:
        write_table(out, a, b, rows, n);
        break;
    }
    free(rows);
    return ferror(out) ? SW_EIO : 0;
}
