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

void sw__jw_double(sw__jw *w, double v) {
    if (!isfinite(v)) {
        raw_value(w, "null");
        return;
    }
    /* 15 significant digits read back exactly for most values and look tidy; the rest
     * need 17. */
    char buf[32];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, sizeof buf, "%.17g", v);
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
