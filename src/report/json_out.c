/*
 * json_out.c — the streaming JSON writer (see json_out.h).
 */
#include "json_out.h"

#include "stepwatch.h"
#include "utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void put(sw__jw *w, const char *s, size_t n) {
    if (w->rc == 0 && n > 0 && fwrite(s, 1, n, w->out) != n)
        w->rc = SW_EIO;
}

static void puts_(sw__jw *w, const char *s) {
    put(w, s, strlen(s));
}

static void newline_indent(sw__jw *w, int level) {
    static const char spaces[] = "                                                                ";
    put(w, "\n", 1);
    size_t n = (size_t)level * 2;
    while (n > 0) {
        size_t k = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
        put(w, spaces, k);
        n -= k;
    }
}

/* Everything a value or a key needs written before it: the comma, the line break. Returns
 * nonzero if the call may go ahead. */
static int before_item(sw__jw *w, int is_key) {
    if (w->rc != 0)
        return 0;
    int d = w->depth;
    if (w->after_key) {
        if (is_key) {
            w->rc = SW_EINVAL; /* two keys in a row */
            return 0;
        }
        w->after_key = 0;
        return 1;
    }
    if (d == 0) {
        if (is_key) {
            w->rc = SW_EINVAL;
            return 0;
        }
        return 1;
    }
    if (w->object[d] != is_key) {
        w->rc = SW_EINVAL; /* a value in an object without a key, or a key in an array */
        return 0;
    }
    if (w->nonempty[d])
        put(w, ",", 1);
    w->nonempty[d] = 1;
    if (d <= w->pretty_depth)
        newline_indent(w, d);
    return 1;
}

void sw__jw_init(sw__jw *w, FILE *out, int pretty_depth) {
    memset(w, 0, sizeof *w);
    w->out = out;
    w->pretty_depth = pretty_depth;
    if (out == NULL)
        w->rc = SW_EINVAL;
}

static void open_container(sw__jw *w, int object) {
    if (!before_item(w, 0))
        return;
    if (w->depth >= SW__JW_MAX_DEPTH) {
        w->rc = SW_EINVAL;
        return;
    }
    put(w, object ? "{" : "[", 1);
    w->depth++;
    w->nonempty[w->depth] = 0;
    w->object[w->depth] = (unsigned char)object;
}

static void close_container(sw__jw *w, int object) {
    if (w->rc != 0)
        return;
    if (w->depth == 0 || w->object[w->depth] != object || w->after_key) {
        w->rc = SW_EINVAL;
        return;
    }
    if (w->nonempty[w->depth] && w->depth <= w->pretty_depth)
        newline_indent(w, w->depth - 1);
    put(w, object ? "}" : "]", 1);
    w->depth--;
}

void sw__jw_object_begin(sw__jw *w) {
    open_container(w, 1);
}
void sw__jw_object_end(sw__jw *w) {
    close_container(w, 1);
}
void sw__jw_array_begin(sw__jw *w) {
    open_container(w, 0);
}
void sw__jw_array_end(sw__jw *w) {
    close_container(w, 0);
}

/* Does byte c (ASCII) need an escape? */
static int needs_escape(const sw__jw *w, unsigned char c) {
    if (c < 0x20 || c == '"' || c == '\\' || c == 0x7F)
        return 1;
    return w->html_safe && (c == '<' || c == '>' || c == '&');
}

static void escaped(sw__jw *w, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0; /* bytes [run, i) are plain and not yet written */
    char buf[16];
    while (i < len && w->rc == 0) {
        unsigned char c = p[i];
        if (c < 0x80 && !needs_escape(w, c)) {
            i++;
            continue;
        }
        uint32_t cp = c;
        size_t n = 1;
        if (c >= 0x80) {
            n = sw__utf8_decode(p + i, len - i, &cp);
            /* C1 controls (U+0080..U+009F) are escaped too: U+009B starts a terminal escape
             * sequence in a file someone cats; so are the bidirectional controls, which
             * would reorder the text around them there (the string's meaning is the same). */
            if (n > 1 && cp != 0x2028 && cp != 0x2029 && !(cp >= 0x80 && cp <= 0x9F) &&
                !sw__utf8_is_bidi(cp)) {
                i += n; /* valid multi-byte character: copied as is */
                continue;
            }
        }
        put(w, s + run, i - run);
        switch (cp) {
        case '"':
            puts_(w, "\\\"");
            break;
        case '\\':
            puts_(w, "\\\\");
            break;
        case '\n':
            puts_(w, "\\n");
            break;
        case '\r':
            puts_(w, "\\r");
            break;
        case '\t':
            puts_(w, "\\t");
            break;
        case '\b':
            puts_(w, "\\b");
            break;
        case '\f':
            puts_(w, "\\f");
            break;
        default:
            /* Other control characters (C1 too), <>& when html_safe, U+2028/9 and U+FFFD
             * for a byte that is not UTF-8: all as \uXXXX, which needs no further
             * checking. */
            snprintf(buf, sizeof buf, "\\u%04" PRIx32, cp);
            puts_(w, buf);
        }
        i += n;
        run = i;
    }
    put(w, s + run, i - run);
}

void sw__jw_key(sw__jw *w, const char *key) {
    if (key == NULL) {
        if (w->rc == 0)
            w->rc = SW_EINVAL;
        return;
    }
    if (!before_item(w, 1))
        return;
    put(w, "\"", 1);
    escaped(w, key, strlen(key));
    put(w, w->depth <= w->pretty_depth ? "\": " : "\":", w->depth <= w->pretty_depth ? 3 : 2);
    w->after_key = 1;
}

void sw__jw_string_n(sw__jw *w, const char *s, size_t len) {
    if (s == NULL) {
        sw__jw_null(w);
        return;
    }
    if (!before_item(w, 0))
        return;
    put(w, "\"", 1);
    escaped(w, s, len);
    put(w, "\"", 1);
}

void sw__jw_string(sw__jw *w, const char *s) {
    sw__jw_string_n(w, s, s ? strlen(s) : 0);
}

static void raw_value(sw__jw *w, const char *text) {
    if (before_item(w, 0))
        puts_(w, text);
}

void sw__jw_uint(sw__jw *w, uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    raw_value(w, buf);
}

void sw__jw_int(sw__jw *w, int64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    raw_value(w, buf);
}

/* 10^k for k 0..18: each exact in a double (5^18 < 2^53). */
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8, 1e9,
                               1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18};

/* "%.15g" of v when that reads back as v and is in fixed notation (exponent -4..14), without
 * printf (a view of 100,000 ranks writes thousands of numbers); 0 when not.
 * The 15 digits are m, an integer below 2^53, with m / 10^k = |v| for k = 14 - exponent:
 * that division of two exact doubles is rounded once, as reading the decimal is, so it
 * tells whether the decimal reads back as v. Such a decimal is the one %.15g writes: two
 * decimals of 15 digits are further apart than the numbers that round to one double. m is
 * |v| * 10^k rounded, off by at most one (the product is rounded), so m - 1 and m + 1 are
 * tried too; when none reads back, %.15g's would not either. */
static int fixed_15g(double v, char *buf) {
    double a = fabs(v);
    if (a == 0) {
        strcpy(buf, signbit(v) ? "-0" : "0");
        return 1;
    }
    if (!(a >= 1e-5 && a < 1e15))
        return 0;
    int e = 0; /* the exponent of a: 10^e <= a < 10^(e+1), near enough, corrected below */
    while (e < 14 && a >= POW10[e + 1])
        e++;
    while (e <= 0 && e > -5 && a * POW10[-e] < 1)
        e--;
    int64_t m = 0;
    for (int tries = 0; tries < 2; tries++) { /* the rounded a may reach the next power */
        if (e < -4 || e > 14)
            return 0;
        m = llround(a * POW10[14 - e]);
        if (m >= 1000000000000000)
            e++;
        else if (m < 100000000000000)
            e--;
        else
            break;
    }
    if (m < 100000000000000 || m >= 1000000000000000 || e < -4 || e > 14)
        return 0;
    static const int64_t near[] = {0, -1, 1};
    int found = 0;
    for (int t = 0; t < 3 && !found; t++) {
        int64_t c = m + near[t];
        found = c >= 100000000000000 && c < 1000000000000000 && (double)c / POW10[14 - e] == a;
        if (found)
            m = c;
    }
    if (!found)
        return 0;
    char digits[16];
    for (int i = 14; i >= 0; i--, m /= 10)
        digits[i] = (char)('0' + m % 10);
    int last = 14; /* the last digit written: trailing zeros go */
    while (last > 0 && last > e && digits[last] == '0')
        last--;
    char *p = buf;
    if (v < 0)
        *p++ = '-';
    if (e >= 0) {
        memcpy(p, digits, (size_t)e + 1);
        p += e + 1;
        if (last > e) {
            *p++ = '.';
            memcpy(p, digits + e + 1, (size_t)(last - e));
            p += last - e;
        }
    } else {
        *p++ = '0';
        *p++ = '.';
        for (int z = 0; z < -e - 1; z++)
            *p++ = '0';
        memcpy(p, digits, (size_t)last + 1);
        p += last + 1;
    }
    *p = '\0';
    return 1;
}

void sw__jw_format_double(double v, char buf[32]) {
    /* 15 significant digits read back exactly for most values and look tidy; the rest
     * need 17. */
    if (fixed_15g(v, buf))
        return;
    snprintf(buf, 32, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, 32, "%.17g", v);
}

void sw__jw_double(sw__jw *w, double v) {
    if (!isfinite(v)) {
        raw_value(w, "null");
        return;
    }
    char buf[32];
    sw__jw_format_double(v, buf);
    raw_value(w, buf);
}

void sw__jw_value_by(sw__jw *w, int (*write)(void *ctx, FILE *out), void *ctx) {
    if (!before_item(w, 0))
        return;
    int rc = write(ctx, w->out);
    if (rc != 0)
        w->rc = rc;
}

void sw__jw_bool(sw__jw *w, int v) {
    raw_value(w, v ? "true" : "false");
}
void sw__jw_null(sw__jw *w) {
    raw_value(w, "null");
}

void sw__jw_kv_string(sw__jw *w, const char *key, const char *s) {
    sw__jw_key(w, key);
    sw__jw_string(w, s);
}

void sw__jw_kv_uint(sw__jw *w, const char *key, uint64_t v) {
    sw__jw_key(w, key);
    sw__jw_uint(w, v);
}

void sw__jw_kv_int(sw__jw *w, const char *key, int64_t v) {
    sw__jw_key(w, key);
    sw__jw_int(w, v);
}

void sw__jw_kv_double(sw__jw *w, const char *key, double v) {
    sw__jw_key(w, key);
    sw__jw_double(w, v);
}

int sw__jw_finish(sw__jw *w) {
    if (w->rc == 0 && (w->depth != 0 || w->after_key))
        w->rc = SW_EINVAL;
    put(w, "\n", 1);
    if (w->rc == 0 && ferror(w->out))
        w->rc = SW_EIO;
    return w->rc;
}
