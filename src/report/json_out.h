/*
 * json_out.h — a small streaming JSON writer (private; shared by the JSON report and the
 * Chrome trace exporter).
 *
 * Values go straight to the FILE as they are produced: nothing is built in memory, so a
 * trace of millions of spans costs no more memory than a report of ten rows. (A DOM library
 * such as cJSON would hold the whole document before printing it.)
 *
 * Usage: sw__jw_init, then nested begin/end pairs, keys and values, then sw__jw_finish, which
 * returns 0 or the first error. Errors are sticky: after one, every call is a no-op, so a
 * writer can emit a whole document and check once at the end.
 *
 * Strings are always valid JSON and valid UTF-8: ", \ and control characters are escaped,
 * invalid UTF-8 bytes become U+FFFD, U+2028/U+2029 are escaped (JavaScript line
 * terminators). Numbers are never NaN or infinite: such doubles are written as null.
 */
#ifndef SW_REPORT_JSON_OUT_H
#define SW_REPORT_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SW__JW_MAX_DEPTH 32

typedef struct sw__jw {
    FILE *out;
    int rc;           /* first error: SW_EIO (write failed) or SW_EINVAL (misuse) */
    int depth;        /* open containers */
    int pretty_depth; /* elements of containers at depth <= this go on their own lines */
    int html_safe;    /* also escape <, > and & (for JSON inside an HTML <script>) */
    int after_key;    /* a key was written; its value is next */
    unsigned char nonempty[SW__JW_MAX_DEPTH + 1]; /* container at depth d has an element */
    unsigned char object[SW__JW_MAX_DEPTH + 1];   /* container at depth d is an object */
} sw__jw;

/* pretty_depth 0 writes everything on one line; 2 puts each element of the top object and
 * of the containers directly inside it on its own line, deeper ones stay compact. */
void sw__jw_init(sw__jw *w, FILE *out, int pretty_depth);

void sw__jw_object_begin(sw__jw *w);
void sw__jw_object_end(sw__jw *w);
void sw__jw_array_begin(sw__jw *w);
void sw__jw_array_end(sw__jw *w);

/* An object member's name; the next call writes its value. */
void sw__jw_key(sw__jw *w, const char *key);

void sw__jw_string(sw__jw *w, const char *s); /* NULL writes null */
void sw__jw_string_n(sw__jw *w, const char *s, size_t len);
void sw__jw_uint(sw__jw *w, uint64_t v);
void sw__jw_int(sw__jw *w, int64_t v);
void sw__jw_double(sw__jw *w, double v); /* shortest form that reads back exactly */
/* The text sw__jw_double writes for a finite v: "%.15g" when it reads back as v, else "%.17g". */
void sw__jw_format_double(double v, char buf[32]);
void sw__jw_bool(sw__jw *w, int v);
void sw__jw_null(sw__jw *w);

/* A value another writer puts straight into w's stream (a whole JSON document of its own,
 * as compare's verdicts in the HTML page): the comma and line break before it, then
 * write(ctx, out). A nonzero return becomes w's error. */
void sw__jw_value_by(sw__jw *w, int (*write)(void *ctx, FILE *out), void *ctx);

/* Shorthands for a member: key then value. */
void sw__jw_kv_string(sw__jw *w, const char *key, const char *s);
void sw__jw_kv_uint(sw__jw *w, const char *key, uint64_t v);
void sw__jw_kv_int(sw__jw *w, const char *key, int64_t v);
void sw__jw_kv_double(sw__jw *w, const char *key, double v);

/* End the document with a newline. 0, SW_EIO if any write failed, SW_EINVAL if containers
 * are still open or a call did not fit where it was made. */
int sw__jw_finish(sw__jw *w);

#endif /* SW_REPORT_JSON_OUT_H */
