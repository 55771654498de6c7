/*
 * test_report_json_out.c — the streaming JSON writer (src/report/json_out.c): escaping,
 * invalid UTF-8, numbers, layout, misuse and write errors. Documents are checked byte for
 * byte; that Python's json module reads a full report is checked by tests/report_json.cmake.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "report/json_out.h"
#include "stepwatch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct doc {
    char *buf;
    size_t len;
    FILE *mem;
    sw__jw w;
} doc;

static void open_doc(doc *d, int pretty_depth) {
    d->buf = NULL;
    d->mem = open_memstream(&d->buf, &d->len);
    assert_non_null(d->mem);
    sw__jw_init(&d->w, d->mem, pretty_depth);
}

/* Finish, check the return code, and compare the text (without the final newline). */
static void close_doc(doc *d, int want_rc, const char *want) {
    assert_int_equal(sw__jw_finish(&d->w), want_rc);
    fclose(d->mem);
    if (want != NULL) {
        assert_true(d->len > 0 && d->buf[d->len - 1] == '\n');
        d->buf[d->len - 1] = '\0';
        assert_string_equal(d->buf, want);
    }
    free(d->buf);
}

static void string_is(const char *in, size_t len, const char *want) {
    doc d;
    open_doc(&d, 0);
    sw__jw_string_n(&d.w, in, len);
    close_doc(&d, 0, want);
}

static void test_escapes(void **state) {
    (void)state;
    string_is("plain", 5, "\"plain\"");
    string_is("q\"b\\s/", 6, "\"q\\\"b\\\\s/\"");
    string_is("\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"");
    string_is("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
    string_is("a\0b", 3, "\"a\\u0000b\""); /* an explicit length may hold NUL */
    string_is("", 0, "\"\"");
    /* Valid UTF-8 passes through; U+2028/U+2029 are escaped for JavaScript. */
    string_is("\xc2\xb5 \xe6\x97\xa5 \xf0\x9f\x98\x80", 11,
              "\"\xc2\xb5 \xe6\x97\xa5 \xf0\x9f\x98\x80\"");
    string_is("\xe2\x80\xa8\xe2\x80\xa9", 6, "\"\\u2028\\u2029\"");
}

static void test_invalid_utf8(void **state) {
    (void)state;
    string_is("\xff", 1, "\"\\ufffd\"");
    string_is("a\x80z", 3, "\"a\\ufffdz\"");
    string_is("\xc0\xaf", 2, "\"\\ufffd\\ufffd\"");                       /* overlong '/' */
    string_is("\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"");            /* a surrogate */
    string_is("\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* > U+10FFFF */
    string_is("\xe6\x97", 2, "\"\\ufffd\\ufffd\"");                       /* cut short */
}

static void test_html_safe(void **state) {
    (void)state;
    doc d;
    open_doc(&d, 0);
    d.w.html_safe = 1;
    sw__jw_string(&d.w, "</script><!-- & -->");
    close_doc(&d, 0, "\"\\u003c/script\\u003e\\u003c!-- \\u0026 --\\u003e\"");
}

static void test_numbers(void **state) {
    (void)state;
    doc d;
    open_doc(&d, 0);
    sw__jw_array_begin(&d.w);
    sw__jw_uint(&d.w, UINT64_MAX);
    sw__jw_int(&d.w, INT64_MIN);
    sw__jw_double(&d.w, 0.1);
    sw__jw_double(&d.w, 1.0 / 3.0);
    sw__jw_double(&d.w, 1e300);
    sw__jw_double(&d.w, NAN);
    sw__jw_double(&d.w, INFINITY);
    sw__jw_double(&d.w, -INFINITY);
    sw__jw_bool(&d.w, 1);
    sw__jw_bool(&d.w, 0);
    sw__jw_null(&d.w);
    sw__jw_string(&d.w, NULL);
    sw__jw_array_end(&d.w);
    close_doc(&d, 0,
              "[18446744073709551615,-9223372036854775808,0.1,0.33333333333333331,1e+300,"
              "null,null,null,true,false,null,null]");
}

/* What sw__jw_double wrote before its fast path: printf's "%.15g", or "%.17g" when that
 * does not read back. */
static void printf_double(double v, char *buf) {
    snprintf(buf, 32, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, 32, "%.17g", v);
}

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void assert_as_printf(double v) {
    char got[32], want[32];
    sw__jw_format_double(v, got);
    printf_double(v, want);
    if (strcmp(got, want) != 0)
        fail_msg("%.17g: wrote %s, printf %s", v, got, want);
}

/* The numbers' text is printf's, byte for byte: random bits, quotients of nanoseconds by
 * steps (the views' figures), short decimals, and the neighbours of every power of ten in
 * and around the fixed-notation range (where the digit count turns). */
static void test_doubles_as_printf(void **state) {
    (void)state;
    uint64_t s = 88172645463325252u;
    for (int i = 0; i < 300000; i++) {
        uint64_t r = next_random(&s);
        double bits;
        memcpy(&bits, &r, sizeof bits);
        if (isfinite(bits))
            assert_as_printf(bits);
        assert_as_printf((double)(r % 100000000000u) / (double)(1 + next_random(&s) % 1000));
        assert_as_printf((double)(r % 1000000) / 100.0 -
                         (double)(next_random(&s) % 1000000) / 100.0);
        assert_as_printf((double)(r >> 11) * 0x1p-53 * pow(10, (int)(next_random(&s) % 24) - 6));
    }
    for (int e = -7; e <= 17; e++)
        for (double f = 0.5; f <= 10; f += 0.5) {
            double v = pow(10, e) * f;
            for (double up = v, down = v, k = 0; k < 100; k++) {
                assert_as_printf(up = nextafter(up, INFINITY));
                assert_as_printf(-(down = nextafter(down, 0)));
            }
        }
    static const double special[] = {0.0,
                                     -0.0,
                                     5e-324,
                                     999999999999999.5,
                                     99999999999999.95,
                                     0.0001,
                                     0.000099999999999999995,
                                     1e15,
                                     123456789012345.6};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        assert_as_printf(special[i]);
}

static void test_layout(void **state) {
    (void)state;
    doc d;
    open_doc(&d, 1);
    sw__jw_object_begin(&d.w);
    sw__jw_kv_string(&d.w, "a", "x");
    sw__jw_key(&d.w, "b");
    sw__jw_array_begin(&d.w);
    sw__jw_uint(&d.w, 1);
    sw__jw_object_begin(&d.w);
    sw__jw_object_end(&d.w);
    sw__jw_array_end(&d.w);
    sw__jw_kv_double(&d.w, "c", 2.5);
    sw__jw_kv_int(&d.w, "d", -1);
    sw__jw_kv_uint(&d.w, "e", 7);
    sw__jw_object_end(&d.w);
    close_doc(&d, 0,
              "{\n  \"a\": \"x\",\n  \"b\": [1,{}],\n  \"c\": 2.5,\n  \"d\": -1,\n  \"e\": 7\n}");

    open_doc(&d, 0);
    sw__jw_array_begin(&d.w);
    sw__jw_array_end(&d.w);
    close_doc(&d, 0, "[]");
}

static void test_misuse_is_einval(void **state) {
    (void)state;
    doc d;
    open_doc(&d, 0); /* a value in an object without a key */
    sw__jw_object_begin(&d.w);
    sw__jw_uint(&d.w, 1);
    sw__jw_object_end(&d.w);
    close_doc(&d, SW_EINVAL, NULL);

    open_doc(&d, 0); /* a key in an array */
    sw__jw_array_begin(&d.w);
    sw__jw_key(&d.w, "k");
    close_doc(&d, SW_EINVAL, NULL);

    open_doc(&d, 0); /* left open */
    sw__jw_object_begin(&d.w);
    close_doc(&d, SW_EINVAL, NULL);

    open_doc(&d, 0); /* closed with the wrong bracket */
    sw__jw_array_begin(&d.w);
    sw__jw_object_end(&d.w);
    close_doc(&d, SW_EINVAL, NULL);

    open_doc(&d, 0); /* a key with no value */
    sw__jw_object_begin(&d.w);
    sw__jw_key(&d.w, "k");
    sw__jw_object_end(&d.w);
    close_doc(&d, SW_EINVAL, NULL);

    open_doc(&d, 0); /* deeper than SW__JW_MAX_DEPTH */
    for (int i = 0; i <= SW__JW_MAX_DEPTH; i++)
        sw__jw_array_begin(&d.w);
    close_doc(&d, SW_EINVAL, NULL);

    sw__jw w;
    sw__jw_init(&w, NULL, 0);
    sw__jw_null(&w); /* no stream: every call is a no-op */
    assert_int_equal(w.rc, SW_EINVAL);
}

static void test_write_error_is_eio(void **state) {
    (void)state;
    FILE *full = fopen("/dev/full", "w");
    if (full == NULL)
        skip();
    setvbuf(full, NULL, _IONBF, 0); /* unbuffered: the first write fails */
    sw__jw w;
    sw__jw_init(&w, full, 0);
    sw__jw_array_begin(&w);
    sw__jw_string(&w, "lost");
    sw__jw_array_end(&w);
    assert_int_equal(sw__jw_finish(&w), SW_EIO);
    fclose(full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),           cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_html_safe),         cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_doubles_as_printf), cmocka_unit_test(test_layout),
        cmocka_unit_test(test_misuse_is_einval),  cmocka_unit_test(test_write_error_is_eio),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
