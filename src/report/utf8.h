/*
 * utf8.h — one strict UTF-8 decoder for the report writers (private).
 *
 * Names come from users and frameworks and may hold any bytes. Every writer that prints a
 * name walks it with this decoder so invalid input is replaced the same way everywhere.
 */
#ifndef SW_REPORT_UTF8_H
#define SW_REPORT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define SW__UTF8_REPLACEMENT 0xFFFDu

/* Decode one code point at s (n bytes available, n >= 1). Returns the bytes it used; an
 * invalid sequence (bad lead or continuation byte, overlong form, surrogate, above
 * U+10FFFF, cut short) uses 1 byte and gives SW__UTF8_REPLACEMENT. */
static inline size_t sw__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0Fu, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07u, min = 0x10000;
    } else {
        *cp = SW__UTF8_REPLACEMENT;
        return 1;
    }
    if (len > n) {
        *cp = SW__UTF8_REPLACEMENT;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = SW__UTF8_REPLACEMENT;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = SW__UTF8_REPLACEMENT;
        return 1;
    }
    *cp = v;
    return len;
}

/* Encode cp (a valid scalar value) into out (4 bytes of room); returns the bytes written. */
/* Bidirectional controls: U+202A-202E (embeddings, overrides), U+2066-2069 (isolates),
 * U+200E/F (marks). In a name they reverse or reorder the text around them ("Trojan
 * Source"), so every output shows them as escapes instead. */
static inline int sw__utf8_is_bidi(uint32_t cp) {
    return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
           cp == 0x200F;
}

static inline size_t sw__utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif /* SW_REPORT_UTF8_H */
