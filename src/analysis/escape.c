/*
 * escape.c — JSON and HTML escaping for the analysis outputs.
 *
 * The JSON strings are also embedded in the HTML report's <script> element, where a
 * literal "</script>" or "<!--" would end or confuse the script; escaping <, > and & as
 * \u003c, \u003e, \u0026 keeps the JSON identical in meaning and inert as HTML.
 */
#include "analysis_internal.h"

#include <math.h>
#include <string.h>

void sw__json_string(FILE *out, const char *s)
{
    fputc('"', out);
    if (!s) s = "";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        case '<': fputs("\\u003c", out); break;
        case '>': fputs("\\u003e", out); break;
        case '&': fputs("\\u0026", out); break;
        default:
            if (*c < 0x20 || *c == 0x7f) {
                fprintf(out, "\\u%04x", *c);
            } else if (*c == 0xe2 && c[1] == 0x80 && (c[2] == 0xa8 || c[2] == 0xa9)) {
                /* U+2028/U+2029: valid in JSON, line terminators in older JavaScript. */
                fprintf(out, "\\u%04x", c[2] == 0xa8 ? 0x2028 : 0x2029);
                c += 2;
            } else {
                fputc(*c, out);
            }
        }
    }
    fputc('"', out);
}

void sw__json_number(FILE *out, double v)
{
    if (!isfinite(v)) {
        fputs("null", out);
    } else if (v == floor(v) && fabs(v) < 9.007199254740992e15) {
        fprintf(out, "%.0f", v);
    } else {
        fprintf(out, "%.15g", v);
    }
}

void sw__html_text(FILE *out, const char *s)
{
    if (!s) return;
    for (const char *c = s; *c; c++) {
        switch (*c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default: fputc(*c, out);
        }
    }
}
