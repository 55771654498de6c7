/*
 * live_format.c — sw_live_format: the status line's text. When the line is wider than the
 * terminal, whole parts are left out, least important first (samples/s, then the slowest
 * category, the data share, the quantiles); an undefined figure leaves its part out.
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
    enum { NPARTS = 6 };
    char part[NPARTS][80], a[32], b[32];
    static const int rank[NPARTS] = {5, 4, 0, 3, 2, 1};
    int n[NPARTS] = {0};
    snprintf(part[0], sizeof part[0], "stepwatch");
    part[1][0] = part[2][0] = part[3][0] = part[4][0] = part[5][0] = '\0';
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
