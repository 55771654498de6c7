/*
 * duration.c — sw_format_duration: a duration in the unit that gives it three significant
 * digits ("812 ns", "3.41 µs", "12.7 ms", "4.20 s"; "4200 s" past a thousand seconds).
 */
#include "stepwatch.h"

#include <math.h>
#include <stdio.h>

char *sw_format_duration(double ns, char *buf, size_t size) {
    static const struct {
        double scale;
        const char *unit;
    } units[] = {{1.0, "ns"}, {1e3, "\xC2\xB5s"}, {1e6, "ms"}, {1e9, "s"}};
    if (buf == NULL || size == 0)
        return buf;
    if (isnan(ns)) {
        snprintf(buf, size, "-");
        return buf;
    }
    const char *sign = ns < 0 ? "-" : "";
    double v = fabs(ns);
    if (isinf(v)) {
        snprintf(buf, size, "%sinf s", sign);
        return buf;
    }
    size_t u = 0;
    /* Move up a unit when the value would round to 1000 or more in this one, so
     * 999.7 ns prints as "1.00 µs", not "1000 ns". */
    while (u + 1 < sizeof units / sizeof units[0] && v / units[u].scale >= 999.5)
        u++;
    double x = v / units[u].scale;
    int decimals = x < 9.995 ? 2 : x < 99.95 ? 1 : 0;
    if (u == 0 && x == floor(x))
        decimals = 0; /* whole nanoseconds need no decimals: "5 ns" */
    snprintf(buf, size, "%s%.*f %s", sign, decimals, x, units[u].unit);
    return buf;
}
