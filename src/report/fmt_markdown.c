/*
 * fmt_markdown.c — SW_FORMAT_MARKDOWN: the stepwatch table as a GitHub-flavoured markdown
 * table (all columns; a renderer wraps it, so no terminal width applies), the warm-up
 * table, and misuse/dropped counts as a list.
 *
 * Cell text is escaped so no name can break the table: | and \ get a backslash, < > & *
 * ` _ [ ] are escaped so a name shows as itself, control characters show as \n, \t, ....
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void put_cell(FILE *out, const char *clean) {
    for (const char *c = clean; *c; c++) {
        switch (*c) {
        case '|':
        case '\\':
        case '*':
        case '`':
        case '_':
        case '[':
        case ']':
            fputc('\\', out);
            fputc(*c, out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '&':
            fputs("&amp;", out);
            break;
        default:
            fputc(*c, out);
        }
    }
}

/* One table row; bold marks the Total row. */
static void put_row(FILE *out, const char *label, const sw__cells *c, int bold) {
    fputs(bold ? "| **" : "| ", out);
    put_cell(out, label);
    if (bold)
        fputs("**", out);
    for (int k = 0; k < SW__NCOLS; k++) {
        fputs(" | ", out);
        put_cell(out, c->v[k]);
    }
    fputs(" |\n", out);
}

static void put_header(FILE *out) {
    fputs("| Action", out);
    for (int k = 0; k < SW__NCOLS; k++)
        fprintf(out, " | %s", sw__col_header[k]);
    fputs(" |\n|:---", out);
    for (int k = 0; k < SW__NCOLS; k++)
        fputs("|---:", out);
    fputs("|\n", out);
}

static int write_markdown(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    (void)opts;
    const sw_row **rows = NULL;
    long n = sw__rows_select(s, 0, &rows);
    if (n < 0)
        return SW_ENOMEM;
    char name[SW__LABEL_MAX], summary[256], label[SW__LABEL_MAX];
    sw__text_clean(s->name ? s->name : "stepwatch", name, sizeof name);
    sw__run_summary(s, summary, sizeof summary);
    fputs("### stepwatch report: ", out);
    put_cell(out, name);
    fprintf(out, "\n\n%s\n\n", summary);
    if (sw__put_efficiency(s, out, ""))
        fputc('\n', out);

    uint64_t calls = 0;
    for (long i = 0; i < n; i++)
        calls += rows[i]->stats.count;
    sw__cells c;
    put_header(out);
    sw__cells_total(s, calls, &c);
    put_row(out, "Total", &c, 1);
    for (long i = 0; i < n; i++) {
        sw__row_label(rows[i], label, sizeof label);
        sw__cells_of(s, &rows[i]->stats, &rows[i]->hist, &c);
        put_row(out, label, &c, 0);
    }

    if (sw__has_warmup(s)) {
        fprintf(out, "\n#### Warm-up (first %" PRIu32 " step%s per phase)\n\n", s->warmup_steps,
                s->warmup_steps == 1 ? "" : "s");
        put_header(out);
        for (long i = 0; i < n; i++) {
            if (rows[i]->warmup.count == 0)
                continue;
            sw__row_label(rows[i], label, sizeof label);
            sw__cells_of(s, &rows[i]->warmup, NULL, &c);
            put_row(out, label, &c, 0);
        }
    }

    sw__put_problems(s, out, "- ");
    sw__put_memory(s, out, "- ");
    sw__put_slow(s, out, "- ");
    sw__put_comm_bw(s, out, 1);
    free(rows);
    return 0;
}

const sw__writer sw__writer_markdown = {SW_FORMAT_MARKDOWN, "markdown", 0, write_markdown};

/* A cell escaped as the table's own (writer.h): other sections in markdown use it. */
void sw__md_put_cell(FILE *out, const char *clean) {
    put_cell(out, clean);
}

void sw__md_put_text(FILE *out, const char *raw) {
    char clean[SW__LABEL_MAX];
    sw__text_clean(raw, clean, sizeof clean);
    put_cell(out, clean);
}
