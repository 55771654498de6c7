/* util.c — small helpers the library's files share (strings, host, command line). */
#include "core.h"

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

char *sw__expand_path(const char *pattern, int rank, long pid) {
    char values[2][24];
    const char *tokens[2] = {"{rank}", "{pid}"};
    snprintf(values[0], sizeof values[0], "%d", rank);
    snprintf(values[1], sizeof values[1], "%ld", pid);
    /* Room: the pattern plus every value (the tokens' own bytes make it an upper bound). */
    size_t len = strlen(pattern) + 1;
    for (int k = 0; k < 2; k++)
        for (const char *s = strstr(pattern, tokens[k]); s; s = strstr(s + 1, tokens[k]))
            len += strlen(values[k]);
    char *out = malloc(len);
    if (out == NULL)
        return NULL;
    char *w = out;
    for (const char *s = pattern; *s;) {
        int k = strncmp(s, tokens[0], 6) == 0 ? 0 : strncmp(s, tokens[1], 5) == 0 ? 1 : -1;
        if (k < 0) {
            *w++ = *s++;
            continue;
        }
        size_t n = strlen(values[k]);
        memcpy(w, values[k], n);
        w += n;
        s += strlen(tokens[k]);
    }
    *w = '\0';
    return out;
}
