/*
 * text.c — what the text writers share: cleaning names for a terminal, widths, shortening,
 * padding, choosing and ordering rows, small number formats.
 *
 * Widths count code points. That is what Python's str.ljust and expandtabs count, so the
 * Lightning layout lines up exactly as Lightning's own; East Asian wide characters are
 * rare in action names and would only shift a column.
 */
#include "writer.h"

#include "utf8.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

size_t sw__text_clean(const char *in, char *out, size_t size) {
    if (size == 0)
        return 0;
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t len = strlen((const char *)p), used = 0, width = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = sw__utf8_decode(p + i, len - i, &cp);
        char piece[8];
        size_t k;
        if (cp == '\n' || cp == '\t' || cp == '\r') {
            piece[0] = '\\';
            piece[1] = cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r';
            k = 2;
        } else if (cp < 0x20 || cp == 0x7F) {
            k = (size_t)snprintf(piece, sizeof piece, "\\x%02X", (unsigned)cp);
        } else if ((cp >= 0x80 && cp <= 0x9F) || sw__utf8_is_bidi(cp)) {
            /* C1 controls (0x9B starts a terminal escape sequence); bidirectional controls,
             * which would reverse the text around them. */
            k = (size_t)snprintf(piece, sizeof piece, "\\u%04X", (unsigned)cp);
        } else {
            k = sw__utf8_encode(cp, piece);
        }
        if (used + k >= size)
            break; /* never cut a character or an escape in two */
        memcpy(out + used, piece, k);
        used += k;
        width += cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || sw__utf8_is_bidi(cp) ? k
                                                                                               : 1;
        i += n;
    }
    out[used] = '\0';
    return width;
}

size_t sw__text_width(const char *s) {
    size_t width = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xC0) != 0x80) /* count lead bytes only */
            width++;
    return width;
}

/* Byte offset of the code point with index k in clean string s. */
static size_t offset_of(const char *s, size_t k) {
    size_t i = 0;
    for (; s[i] && k > 0; k--) {
        i++;
        while (((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
    }
    return i;
}

size_t sw__name_cols(const sw_write_options *opts, size_t max_cols) {
    return opts->full_names ? SIZE_MAX : max_cols;
}

void sw__text_fit(const char *in, size_t width, char *out, size_t size) {
    if (size == 0)
        return;
    size_t have = sw__text_width(in);
    if (have <= width) {
        snprintf(out, size, "%s", in);
        return;
    }
    if (width == 0) {
        out[0] = '\0';
        return;
    }
    size_t head = width / 2, tail = width - 1 - head; /* one column for the ellipsis */
    size_t head_bytes = offset_of(in, head);
    const char *tail_start = in + offset_of(in, have - tail);
    snprintf(out, size, "%.*s\xE2\x80\xA6%s", (int)head_bytes, in, tail_start);
}

void sw__put_padded(FILE *out, const char *s, size_t width, int right_align) {
    size_t have = sw__text_width(s);
    size_t pad = have < width ? width - have : 0;
    if (right_align)
        fprintf(out, "%*s", (int)pad, "");
    fputs(s, out);
    if (!right_align)
        fprintf(out, "%*s", (int)pad, "");
}

void sw__row_action(const sw_row *r, char *out, size_t size) {
    char id[24];
    if (r->action_name == NULL) {
        snprintf(id, sizeof id, "#%" PRIu32, r->action);
        sw__text_clean(id, out, size);
        return;
    }
    sw__text_clean(r->action_name, out, size);
}

void sw__row_label(const sw_row *r, char *out, size_t size) {
    char action[SW__LABEL_MAX], phase[SW__LABEL_MAX];
    sw__row_action(r, action, sizeof action);
    if (r->phase == SW_PHASE_NONE || r->phase == SW_PHASE_ALL) {
        snprintf(out, size, "%s", action);
        return;
    }
    if (r->phase_name != NULL) {
        sw__text_clean(r->phase_name, phase, sizeof phase);
    } else {
        snprintf(phase, sizeof phase, "phase%" PRIu32, r->phase);
    }
    snprintf(out, size, "%s/%s", phase, action);
}

static int by_total_desc(const void *a, const void *b) {
    const sw_row *x = *(const sw_row *const *)a, *y = *(const sw_row *const *)b;
    if (x->stats.total_ns != y->stats.total_ns)
        return x->stats.total_ns > y->stats.total_ns ? -1 : 1;
    int c = strcmp(x->action_name ? x->action_name : "", y->action_name ? y->action_name : "");
    if (c != 0)
        return c;
    return x->phase < y->phase ? -1 : x->phase > y->phase;
}

long sw__rows_select(const sw_snapshot *s, int rollups, const sw_row ***out) {
    size_t matching = 0;
    for (size_t i = 0; i < s->nrows; i++)
        matching += (s->rows[i].phase == SW_PHASE_ALL) == (rollups != 0);
    if (matching == 0)
        rollups = !rollups; /* a snapshot built by hand may hold only one kind */
    const sw_row **rows = malloc((s->nrows ? s->nrows : 1) * sizeof *rows);
    if (rows == NULL)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < s->nrows; i++)
        if ((s->rows[i].phase == SW_PHASE_ALL) == (rollups != 0))
            rows[n++] = &s->rows[i];
    qsort(rows, n, sizeof *rows, by_total_desc);
    *out = rows;
    return (long)n;
}

double sw__percent(const sw_snapshot *s, uint64_t ns) {
    if (s->wall_ns == 0)
        return 0.0;
    return 100.0 * (double)ns / (double)s->wall_ns;
}

/* The width of the terminal on fd; 0 when fd is not one (or an odd size). */
static size_t terminal_width(int fd) {
    struct winsize ws;
    if (fd >= 0 && isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40 &&
        ws.ws_col <= 1000)
        return ws.ws_col;
    return 0;
}

size_t sw__term_width(FILE *out) {
    const char *env = getenv("COLUMNS");
    if (env != NULL && *env != '\0') {
        char *end;
        long v = strtol(env, &end, 10);
        return *end == '\0' && v >= 40 && v <= 1000 ? (size_t)v : 80;
    }
    /* Most shells do not export COLUMNS: ask the terminal. A stream with a descriptor is
     * shown where it goes: a terminal gets its width, a file or a pipe 80, so saved reports
     * do not depend on who ran them. A stream without one (a string in memory, as Python's
     * report() returns) is most likely shown on the process's terminal. */
    int fd = fileno(out);
    size_t width = terminal_width(fd);
    if (width == 0 && fd < 0) {
        width = terminal_width(STDOUT_FILENO);
        if (width == 0)
            width = terminal_width(STDERR_FILENO);
    }
    return width ? width : 80;
}

void sw__with_commas(uint64_t v, char *out, size_t size) {
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%" PRIu64, v);
    char buf[32];
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    snprintf(out, size, "%s", buf);
}

void sw__seconds_text(uint64_t ns, char *out, size_t size) {
    snprintf(out, size, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
}

void sw__csv_put_text(FILE *out, const char *s) {
    if (s == NULL)
        s = "";
    size_t len = strlen(s);
    /* A field a spreadsheet would run as a formula (OWASP, "CSV Injection"): a leading quote
     * makes it text, and the field is quoted. */
    int formula = len > 0 && strchr("=+-@\t\r", s[0]) != NULL;
    int quote = formula || (len > 0 && (s[0] == ' ' || s[len - 1] == ' '));
    quote = quote || strpbrk(s, ",\"\r\n") != NULL;
    if (quote)
        fputc('"', out);
    if (formula)
        fputc('\'', out);
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = sw__utf8_decode(p + i, len - i, &cp);
        int control = (cp < 0x20 && cp != '\t' && cp != '\n') || cp == 0x7F ||
                      (cp >= 0x80 && cp <= 0x9F) || sw__utf8_is_bidi(cp);
        if (cp == '"')
            fputs("\"\"", out);
        else if (cp == SW__UTF8_REPLACEMENT && n == 1)
            fputs("\xEF\xBF\xBD", out);
        else if (control) /* an escape sequence must not reach a terminal showing the file */
            fprintf(out, cp < 0x80 ? "\\x%02X" : "\\u%04X", (unsigned)cp);
        else
            fwrite(p + i, 1, n, out);
        i += n;
    }
    if (quote)
        fputc('"', out);
}
