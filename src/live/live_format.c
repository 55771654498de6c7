/*
 * live_format.c — sw_live_format: the status line's text. When the line is wider than the
 * terminal, whole parts are left out, least important first (samples/s, then the slowest
 * category, the FLOP/s, the data share, the quantiles); an undefined figure leaves its part
 * out.
 */
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A rate with three significant digits: "0.87", "12.3", "394", "5.85k", "12.3k". */
static void rate_text(double v, char *buf, size_t size) {
    if (v >= 999.5)
        snprintf(buf, size, v >= 99950 ? "%.0fk" : v >= 9999.5 ? "%.1fk" : "%.2fk", v / 1e3);
    else
        snprintf(buf, size, v < 9.995 ? "%.2f" : v < 99.95 ? "%.1f" : "%.0f", v);
}

/* The FLOP/s part: "412 TFLOP/s 41.6 % MFU", "6.87 GFLOP/s" (MFU unknown: left out). An
 * older caller's struct has no FLOP figures: they read as 0, unknown like NaN. */
static void flops_text(const sw_live_values *v, char *buf, size_t size) {
    static const struct {
        double scale;
        const char *prefix;
    } units[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}};
    buf[0] = '\0';
    if (!(isfinite(v->flops_per_s) && v->flops_per_s > 0))
        return;
    size_t u = 0;
    while (u + 1 < sizeof units / sizeof units[0] && v->flops_per_s < units[u].scale)
        u++;
    int n = snprintf(buf, size, "%.3g %sFLOP/s", v->flops_per_s / units[u].scale, units[u].prefix);
    if (isfinite(v->mfu) && v->mfu > 0 && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " %.1f %% MFU", v->mfu * 100);
}

/* Display columns of UTF-8 text ("µs" is one column). */
static int columns(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

char *sw_live_format(const sw_live_values *v, char *buf, size_t size, int width) {
    if (buf == NULL || size == 0)
        return buf;
    buf[0] = '\0';
    sw_live_values given; /* a caller's values, of whatever stepwatch/live.h it was built with */
    if (v == NULL || sw__sized_in(&given, sizeof given, v,
                                  SW__END_OF(sw_live_values, slowest_share), "sw_live_values"))
        return buf;
    v = &given;
    /* In display order; rank says what goes first when the line is too wide (highest first). */
    enum { NPARTS = 7 };
    char part[NPARTS][80], a[32], b[32];
    static const int rank[NPARTS] = {6, 5, 0, 4, 3, 1, 2};
    int n[NPARTS] = {0};
    snprintf(part[0], sizeof part[0], "stepwatch");
    part[1][0] = part[2][0] = part[3][0] = part[4][0] = part[5][0] = '\0';
    flops_text(v, part[6], sizeof part[6]);
    if (isfinite(v->steps_per_s)) {
        rate_text(v->steps_per_s, a, sizeof a);
        snprintf(part[1], sizeof part[1], "%s steps/s", a);
    }
    if (isfinite(v->samples_per_s)) {
        rate_text(v->samples_per_s, a, sizeof a);
        snprintf(part[2], sizeof part[2], "%s samples/s", a);
    }
    if (isfinite(v->step_p50_ns))
        snprintf(part[3], sizeof part[3], "step p50 %s p99 %s",
                 sw_format_duration(v->step_p50_ns, a, sizeof a),
                 sw_format_duration(v->step_p99_ns, b, sizeof b));
    if (isfinite(v->data_share))
        snprintf(part[4], sizeof part[4], "data %.0f %%", v->data_share * 100);
    if (v->slowest != SW_CAT_COUNT && isfinite(v->slowest_share))
        snprintf(part[5], sizeof part[5], "slowest %s %.0f %%", sw_category_name(v->slowest),
                 v->slowest_share * 100);
    int total = 0;
    for (int k = 0; k < NPARTS; k++) {
        n[k] = part[k][0] ? columns(part[k]) + (k ? 2 : 0) : 0;
        total += n[k];
    }
    /* Too wide: leave parts out, least important first. */
    for (int r = 0; width > 0 && total > width && r < NPARTS; r++)
        for (int k = 0; k < NPARTS; k++)
            if (rank[k] == r && n[k] > 0) {
                total -= n[k];
                n[k] = 0;
            }
    size_t used = 0;
    for (int k = 0; k < NPARTS; k++)
        if (n[k] > 0 && used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? "  " : "", part[k]);
    return buf;
}
