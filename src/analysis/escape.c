/*
 * escape.c — JSON, HTML and terminal-safe text for the analysis outputs: every name comes
 * out as valid UTF-8 with its control characters escaped, whatever bytes a run file held.
 *
 * The JSON strings are also embedded in the HTML report's <script> element, where a
 * literal "</script>" or "<!--" would end or confuse the script; escaping <, > and & as
 * \u003c, \u003e, \u0026 keeps the JSON identical in meaning and inert as HTML.
 */
#include "analysis_internal.h"
#include "report/json_out.h"
#include "report/writer.h"

#include <math.h>
#include <string.h>

void sw__json_string(FILE *out, const char *s) {
    /* The report layer's strict writer: bytes that are not UTF-8 become U+FFFD, control
     * characters, U+2028/9 and (html_safe) <, >, & become \uXXXX. */
    sw__jw w;
    sw__jw_init(&w, out, 0);
    w.html_safe = 1;
    sw__jw_string(&w, s ? s : "");
}

void sw__jw_display_string(sw__jw *w, const char *s) {
    /* The HTML page shows what it holds: names cleaned by the text formats' one rule first
     * (bidirectional controls as \u202E, not live), then JSON-encoded. */
    char clean[SW__LABEL_MAX];
    sw__text_clean(s, clean, sizeof clean);
    sw__jw_string(w, clean);
}

void sw__json_number(FILE *out, double v) {
    if (!isfinite(v)) {
        fputs("null", out);
    } else if (v == floor(v) && fabs(v) < 9.007199254740992e15) {
        fprintf(out, "%.0f", v);
    } else {
        fprintf(out, "%.15g", v);
    }
}

void sw__clean_text(FILE *out, const char *s) {
    char clean[SW__LABEL_MAX];
    sw__text_clean(s, clean, sizeof clean);
    fputs(clean, out);
}

void sw__html_text(FILE *out, const char *s) {
    if (!s)
        return;
    char clean[SW__LABEL_MAX];
    sw__text_clean(s, clean, sizeof clean);
    for (const char *c = clean; *c; c++) {
        switch (*c) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            fputc(*c, out);
        }
    }
}
