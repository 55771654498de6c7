/*
 * diagnose_write.c — the diagnosis as text, markdown or JSON.
 */
#include "analysis_internal.h"
#include "report/writer.h"

#include <string.h>

static size_t problems(const sw__diagnosis *d) {
    size_t n = 0;
    for (size_t i = 0; i < d->nfindings; i++)
        n += d->findings[i].severity >= SW__SEV_WARNING;
    return n;
}

/* Findings about what could not be measured (diagnose.c's check_unseen). */
static int unseen(const sw__diagnosis *d) {
    for (size_t i = 0; i < d->nfindings; i++)
        if (strcmp(d->findings[i].id, "not-separated") == 0 ||
            strcmp(d->findings[i].id, "no-steps") == 0)
            return 1;
    return 0;
}

/* The line before the findings when none is a problem. */
static const char *all_clear(const sw__diagnosis *d) {
    return unseen(d) ? "Nothing slow found in what could be measured, but not all of it "
                       "could be:"
                     : "No problems found.";
}

/* md: markdown (the text escaped as markdown), else the terminal's text. */
static void header(FILE *out, const sw_snapshot *s, const sw__diagnosis *d, int md) {
    char t[32];
    void (*put)(FILE *, const char *) = md ? sw__md_put_text : sw__clean_text;
    const char *rule = s ? sw_snapshot_note(s, "step_rule") : NULL;
    fprintf(out, "%sstepwatch diagnose: \"", md ? "## " : "");
    put(out, s && s->name ? s->name : "stepwatch");
    fprintf(out, "\", %d rank%s, %llu steady steps, %s in steps", d->nranks,
            d->nranks == 1 ? "" : "s", (unsigned long long)d->steps,
            sw_format_duration((double)d->step_ns, t, sizeof t));
    if (rule) {
        fputs(", steps by the rule: ", out);
        put(out, rule);
    }
    fputc('\n', out);
    char memory[256] = "";
    if (s)
        sw__memory_text(&s->memory, memory, sizeof memory);
    if (memory[0])
        fprintf(out, "%sMemory per step: %s\n", md ? "\n" : "", memory);
}

static void numbers_line(FILE *out, const sw__finding *f, const char *sep) {
    for (size_t k = 0; k < f->nnumbers; k++) {
        char v[48];
        sw__number_text(&f->numbers[k], v, sizeof v);
        fprintf(out, "%s%s: %s", k ? sep : "", f->numbers[k].name, v);
    }
}

/* A sentence of several lines (slow-steps lists its steps one a line): each line put
 * (cleaned) on its own, joined by sep. */
static void put_lines(FILE *out, const char *text, void (*put)(FILE *, const char *),
                      const char *sep) {
    char line[sizeof((sw__finding *)0)->sentence];
    for (const char *p = text; p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        n = n < sizeof line - 1 ? n : sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        if (p != text)
            fputs(sep, out);
        put(out, line);
        p = nl ? nl + 1 : NULL;
    }
}

static void write_text(FILE *out, const sw_snapshot *s, const sw__diagnosis *d) {
    header(out, s, d, 0);
    fputc('\n', out);
    if (problems(d) == 0)
        fprintf(out, "%s\n", all_clear(d));
    for (size_t i = 0; i < d->nfindings; i++) {
        const sw__finding *f = &d->findings[i];
        if (i || problems(d) == 0)
            fputc('\n', out);
        /* Titles and sentences may quote names from the run file: cleaned. */
        fprintf(out, "[%s] ", sw__severity_name(f->severity));
        sw__clean_text(out, f->title);
        fputs("\n  ", out);
        put_lines(out, f->sentence, sw__clean_text, "\n    ");
        fputc('\n', out);
        if (f->nnumbers > 0) {
            fputs("  ", out);
            numbers_line(out, f, " | ");
            fputc('\n', out);
        }
    }
}

static void write_markdown(FILE *out, const sw_snapshot *s, const sw__diagnosis *d) {
    header(out, s, d, 1);
    fputc('\n', out);
    if (problems(d) == 0)
        fprintf(out, "%s\n\n", all_clear(d));
    for (size_t i = 0; i < d->nfindings; i++) {
        const sw__finding *f = &d->findings[i];
        fprintf(out, "- **%s — ", sw__severity_name(f->severity));
        sw__md_put_text(out, f->title);
        fputs(".** ", out);
        put_lines(out, f->sentence, sw__md_put_text, "  \n  ");
        if (f->nnumbers > 0) {
            fputs("  \n  ", out);
            numbers_line(out, f, " · ");
        }
        fputs("\n", out);
    }
}

static void write_json(FILE *out, const sw_snapshot *s, const sw__diagnosis *d) {
    fputs("{\"schema\": \"stepwatch.diagnose\", \"version\": 1, \"run\": ", out);
    sw__json_string(out, s && s->name ? s->name : "stepwatch");
    fprintf(out, ", \"ranks\": %d, \"steps\": %llu, \"step_ns\": %llu, \"problems\": %zu,\n",
            d->nranks, (unsigned long long)d->steps, (unsigned long long)d->step_ns, problems(d));
    fputs(" \"findings\": [", out);
    for (size_t i = 0; i < d->nfindings; i++) {
        const sw__finding *f = &d->findings[i];
        fprintf(out, "%s\n  {\"id\": \"%s\", \"severity\": \"%s\", \"title\": ", i ? "," : "",
                f->id, sw__severity_name(f->severity));
        sw__json_string(out, f->title);
        fputs(", \"sentence\": ", out);
        sw__json_string(out, f->sentence);
        fputs(", \"numbers\": [", out);
        for (size_t k = 0; k < f->nnumbers; k++) {
            fputs(k ? ", {\"name\": " : "{\"name\": ", out);
            sw__json_string(out, f->numbers[k].name);
            fputs(", \"value\": ", out);
            sw__json_number(out, f->numbers[k].value);
            fputs(", \"unit\": ", out);
            sw__json_string(out, f->numbers[k].unit);
            fputc('}', out);
        }
        fputs("]}", out);
    }
    fputs(d->nfindings ? "\n ]\n}\n" : "]\n}\n", out);
}

int sw__diagnosis_write(const sw_snapshot *s, const sw__diagnosis *d, sw_format fmt, FILE *out) {
    switch (fmt) {
    case SW_FORMAT_TABLE:
        write_text(out, s, d);
        break;
    case SW_FORMAT_MARKDOWN:
        write_markdown(out, s, d);
        break;
    case SW_FORMAT_JSON:
        write_json(out, s, d);
        break;
    default:
        return SW_EFORMAT;
    }
    return ferror(out) ? SW_EIO : 0;
}

size_t sw__diagnosis_problems(const sw__diagnosis *d) {
    return problems(d);
}
