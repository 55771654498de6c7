/* util.c — small helpers the library's files share (strings, host, command line). */
#include "core.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *sw__strdup(const char *s) {
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

void sw__hostname(char *buf, size_t size) {
    if (size == 0)
        return;
    if (gethostname(buf, size) != 0 || buf[0] == '\0')
        snprintf(buf, size, "unknown");
    buf[size - 1] = '\0';
}

char *sw__command_line(void) {
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f == NULL)
        return sw__strdup("");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    /* Arguments are NUL-separated; join them with spaces. */
    for (size_t i = 0; i + 1 < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    return sw__strdup(buf);
}

char *sw__expand_rank(const char *pattern, int rank) {
    static const char token[] = "{rank}";
    size_t token_len = sizeof token - 1;
    char rank_text[16];
    int rank_len = snprintf(rank_text, sizeof rank_text, "%d", rank);
    size_t count = 0;
    for (const char *s = strstr(pattern, token); s; s = strstr(s + token_len, token))
        count++;
    size_t len = strlen(pattern) + count * (size_t)rank_len + 1;
    char *out = malloc(len);
    if (out == NULL)
        return NULL;
    char *w = out;
    for (const char *s = pattern; *s;) {
        if (strncmp(s, token, token_len) == 0) {
            memcpy(w, rank_text, (size_t)rank_len);
            w += rank_len;
            s += token_len;
        } else {
            *w++ = *s++;
        }
    }
    *w = '\0';
    return out;
}

void sw__warn(const char *fmt, ...) {
    char line[1024] = "stepwatch: ";
    size_t used = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + used, sizeof line - used - 1, fmt, ap);
    va_end(ap);
    used = strlen(line);
    line[used++] = '\n';
    ssize_t n = write(STDERR_FILENO, line, used);
    (void)n; /* nowhere left to say that stderr failed */
}
