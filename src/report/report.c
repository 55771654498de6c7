/*
 * report.c — sw_snapshot_write and the format names: picks the writer for a format (one
 * file per format, see writer.h), handles the empty snapshot, and reports write errors.
 * sw_report is a snapshot of a live profiler written the same way.
 */
#include "core/core.h"
#include "writer.h"

#include <string.h>

static const sw__writer *const writers[] = {
    &sw__writer_table,    &sw__writer_lightning, &sw__writer_fastxtend, &sw__writer_ignite,
    &sw__writer_markdown, &sw__writer_csv,       &sw__writer_json,
};

#define NWRITERS (sizeof writers / sizeof writers[0])

static const sw__writer *writer_of(sw_format fmt) {
    for (size_t i = 0; i < NWRITERS; i++)
        if (writers[i]->format == fmt)
            return writers[i];
    return NULL;
}

int sw_format_parse(const char *name, sw_format *out) {
    if (name == NULL || out == NULL)
        return SW_EINVAL;
    if (strcmp(name, "md") == 0) {
        *out = SW_FORMAT_MARKDOWN;
        return 0;
    }
    for (size_t i = 0; i < NWRITERS; i++) {
        if (strcmp(name, writers[i]->name) == 0) {
            *out = writers[i]->format;
            return 0;
        }
    }
    return SW_EFORMAT;
}

const char *sw_format_name(sw_format fmt) {
    const sw__writer *w = writer_of(fmt);
    return w ? w->name : NULL;
}

int sw_snapshot_write_ex(const sw_snapshot *s, sw_format fmt, FILE *out,
                         const sw_write_options *opts) {
    if (s == NULL || out == NULL || (s->nrows > 0 && s->rows == NULL))
        return SW_EINVAL;
    const sw__writer *w = writer_of(fmt);
    if (w == NULL)
        return SW_EINVAL;
    sw_write_options layout;
    int rc = sw__sized_in(&layout, sizeof layout, opts, SW__END_OF(sw_write_options, brief),
                          "sw_write_options");
    if (rc != 0)
        return rc;
    if (s->nrows == 0 && !w->machine)
        fputs("stepwatch: no actions recorded\n", out);
    else
        rc = w->write(s, out, &layout);
    if (rc == 0 && !w->machine && s->nrows > 0 && sw__device_any(s))
        sw__put_device_section(s, out, fmt == SW_FORMAT_MARKDOWN);
    if (rc == 0 && !w->machine && s->nrows > 0)
        sw__put_modules_section(s, out, fmt == SW_FORMAT_MARKDOWN);
    /* Writers print through stdio; a failed write (full disk, closed pipe) shows in the
     * stream's error flag once the buffer is flushed. */
    if (fflush(out) != 0 || ferror(out))
        return rc != 0 ? rc : SW_EIO;
    return rc;
}

int sw_snapshot_write(const sw_snapshot *s, sw_format fmt, FILE *out) {
    return sw_snapshot_write_ex(s, fmt, out, NULL);
}

int sw_report(sw_profiler *p, sw_format fmt, FILE *out) {
    if (p == NULL || out == NULL)
        return SW_EINVAL;
    sw_snapshot *s = NULL;
    int rc = sw_snapshot_take(p, &s);
    if (rc == 0)
        rc = sw_snapshot_write(s, fmt, out);
    sw_snapshot_free(s);
    return rc;
}
