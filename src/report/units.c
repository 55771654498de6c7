/*
 * units.c — durations and byte counts as text:
 *   sw_format_duration: the unit that gives three significant digits ("812 ns", "3.41 µs",
 *   "12.7 ms", "4.20 s"; "4200 s" past a thousand seconds);
 *   sw_format_scale_time: fastxtend's scale_time ("838.2ms"), the fastxtend layout's and
 *   stepwatch.fastai's;
 *   sw__format_bytes: binary units ("1.50 MiB"), the modules table's and the slow steps'.
 */
#include "writer.h"

#include <inttypes.h>
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

/* fastxtend: exp = log10(|val|) // 3 * 3, val / 10**exp formatted "#0.4G", then the prefix
 * of exp in "yzafpnµm kMGTPEZY" (a space for exp 0). */
char *sw_format_scale_time(double seconds, char *buf, size_t size) {
    static const char *const prefix[] = {"y", "z", "a", "f", "p", "n", "\xC2\xB5", "m", " ",
                                         "k", "M", "G", "T", "P", "E", "Z",        "Y"};
    if (buf == NULL || size == 0)
        return buf;
    if (seconds == 0 || !isfinite(seconds)) {
        snprintf(buf, size, "-");
        return buf;
    }
    int exp3 = (int)floor(log10(fabs(seconds)) / 3.0);
    if (exp3 < -8)
        exp3 = -8;
    if (exp3 > 8)
        exp3 = 8;
    snprintf(buf, size, "%#.4G%ss", seconds / pow(10.0, 3.0 * exp3), prefix[exp3 + 8]);
    return buf;
}

void sw__format_bytes(int64_t bytes, char *out, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (bytes < 0) {
        snprintf(out, size, "-");
        return;
    }
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, size, "%" PRId64 " B", bytes);
    else
        snprintf(out, size, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}
