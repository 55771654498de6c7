/*
 * module_rows.c — the modules table (time and memory per nn.Module, sw_set_modules) in the
 * reports: the text formats' "Modules" section, and what CSV and JSON add.
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TOP_MODULES 20 /* rows the text formats show; CSV and JSON have every one */

int sw__modules_have_device(const sw_snapshot *s) {
    for (size_t i = 0; i < s->nmodules; i++)
        if (s->modules[i].device_forward_calls + s->modules[i].device_backward_calls > 0)
            return 1;
    return 0;
}

static uint64_t self_ns(const sw_module_row *m) {
    return m->forward_self_ns + m->backward_self_ns;
}

static uint64_t device_self_ns(const sw_module_row *m) {
    return m->device_forward_self_ns + m->device_backward_self_ns;
}

static int by_path(const sw_module_row *x, const sw_module_row *y) {
    return strcmp(x->path, y->path);
}

static int by_self_time(const void *a, const void *b) {
    const sw_module_row *x = *(const sw_module_row *const *)a;
    const sw_module_row *y = *(const sw_module_row *const *)b;
    uint64_t sx = self_ns(x), sy = self_ns(y);
    return sx != sy ? (sx < sy ? 1 : -1) : by_path(x, y);
}

/* With GPU times the GPU's self time ranks (the host's is then mostly launching). */
static int by_device_self_time(const void *a, const void *b) {
    const sw_module_row *x = *(const sw_module_row *const *)a;
    const sw_module_row *y = *(const sw_module_row *const *)b;
    uint64_t sx = device_self_ns(x), sy = device_self_ns(y);
    return sx != sy ? (sx < sy ? 1 : -1) : by_self_time(a, b);
}

long sw__modules_sorted(const sw_snapshot *s, const sw_module_row ***out) {
    *out = NULL;
    if (s->nmodules == 0)
        return 0;
    const sw_module_row **rows = malloc(s->nmodules * sizeof *rows);
    if (rows == NULL)
        return -1;
    for (size_t i = 0; i < s->nmodules; i++)
        rows[i] = &s->modules[i];
    qsort(rows, s->nmodules, sizeof *rows,
          sw__modules_have_device(s) ? by_device_self_time : by_self_time);
    *out = rows;
    return (long)s->nmodules;
}

/* "host time, every 10 step(s) sampled: 12 sampled, ..., warm-up (first 1 step(s)) left
 * out" from the notes the front end sets; with GPU times, which columns are which clock's.
 * (A run file written before the warm-up was left out has no modules_warmup_steps.) */
static void sampling_text(const sw_snapshot *s, int device, char *out, size_t size) {
    const char *every = sw_snapshot_note(s, "modules_every");
    const char *steps = sw_snapshot_note(s, "modules_sampled_steps");
    const char *clock = sw_snapshot_note(s, "modules_clock");
    const char *warmup = sw_snapshot_note(s, "modules_warmup_steps");
    char clean_every[32], clean_steps[32], clean_clock[32], clean_warmup[32] = "";
    sw__text_clean(every ? every : "?", clean_every, sizeof clean_every);
    sw__text_clean(steps ? steps : "?", clean_steps, sizeof clean_steps);
    sw__text_clean(clock ? clock : "host", clean_clock, sizeof clean_clock);
    if (warmup)
        sw__text_clean(warmup, clean_warmup, sizeof clean_warmup);
    snprintf(out, size,
             "%s time, every %s step(s) sampled: %s sampled, times summed over them%s%s%s",
             device ? "host and GPU device" : clean_clock, clean_every, clean_steps,
             warmup ? ", warm-up (first " : "", clean_warmup, warmup ? " step(s)) left out" : "");
}

/* The columns: the host's times, the GPU's (only when there are any), the memory. */
enum { NCOLS = 15, FIRST_DEVICE = 5, NDEVICE = 5 };
static const char *const header[NCOLS] = {
    "Fwd self",     "Fwd total",     "Bwd self",     "Bwd total",     "Calls",
    "Dev fwd self", "Dev fwd total", "Dev bwd self", "Dev bwd total", "Dev calls",
    "Params",       "Grads",         "Optim state",  "Activations",   "Class"};

static void cells_of(const sw_module_row *m, char cell[NCOLS][48]) {
    sw_format_duration((double)m->forward_self_ns, cell[0], 48);
    sw_format_duration((double)m->forward_ns, cell[1], 48);
    sw_format_duration((double)m->backward_self_ns, cell[2], 48);
    sw_format_duration((double)m->backward_ns, cell[3], 48);
    snprintf(cell[4], 48, "%" PRIu64, m->forward_calls);
    sw_format_duration((double)m->device_forward_self_ns, cell[5], 48);
    sw_format_duration((double)m->device_forward_ns, cell[6], 48);
    sw_format_duration((double)m->device_backward_self_ns, cell[7], 48);
    sw_format_duration((double)m->device_backward_ns, cell[8], 48);
    snprintf(cell[9], 48, "%" PRIu64, m->device_forward_calls);
    sw__format_bytes(m->param_bytes, cell[10], 48);
    sw__format_bytes(m->grad_bytes, cell[11], 48);
    sw__format_bytes(m->optimizer_bytes, cell[12], 48);
    sw__format_bytes(m->activation_bytes, cell[13], 48);
    sw__text_clean(m->kind, cell[14], 48);
}

/* Is column k shown? The GPU's only when some row has GPU times. */
static int shown_column(int k, int device) {
    return device || k < FIRST_DEVICE || k >= FIRST_DEVICE + NDEVICE;
}

static void module_label(const sw_module_row *m, char *out, size_t size) {
    sw__text_clean(m->path[0] ? m->path : "(model)", out, size);
}

void sw__put_modules_section(const sw_snapshot *s, FILE *out, int markdown) {
    const sw_module_row **rows = NULL;
    long n = sw__modules_sorted(s, &rows);
    if (n <= 0)
        return;
    long shown = n < TOP_MODULES ? n : TOP_MODULES;
    int device = sw__modules_have_device(s);
    char sampling[256], label[SW__LABEL_MAX], cell[NCOLS][48];
    sampling_text(s, device, sampling, sizeof sampling);
    size_t width[NCOLS], label_width = strlen("Module");
    for (int k = 0; k < NCOLS; k++)
        width[k] = strlen(header[k]);
    for (long i = 0; i < shown; i++) {
        module_label(rows[i], label, sizeof label);
        size_t w = sw__text_width(label);
        label_width = w > label_width ? w : label_width;
        cells_of(rows[i], cell);
        for (int k = 0; k < NCOLS; k++) {
            w = sw__text_width(cell[k]);
            width[k] = w > width[k] ? w : width[k];
        }
    }
    const char *order = device ? "device self time" : "self time";
    if (markdown) {
        fprintf(out, "\n#### Modules (top %ld of %ld by %s; %s)\n\n| Module |", shown, n, order,
                sampling);
        for (int k = 0; k < NCOLS; k++)
            if (shown_column(k, device))
                fprintf(out, " %s |", header[k]);
        fputs("\n|:---|", out);
        for (int k = 0; k < NCOLS; k++)
            if (shown_column(k, device))
                fputs(k == NCOLS - 1 ? ":---|" : "---:|", out);
        fputc('\n', out);
    } else {
        fprintf(out, "\nModules (top %ld of %ld by %s; %s):\n", shown, n, order, sampling);
        sw__put_padded(out, "Module", label_width, 0);
        for (int k = 0; k < NCOLS; k++) {
            if (!shown_column(k, device))
                continue;
            fputs("  ", out);
            sw__put_padded(out, header[k], width[k], k != NCOLS - 1);
        }
        fputc('\n', out);
    }
    for (long i = 0; i < shown; i++) {
        module_label(rows[i], label, sizeof label);
        cells_of(rows[i], cell);
        if (markdown) {
            fputs("| ", out);
            sw__md_put_cell(out, label);
            fputs(" |", out);
        } else {
            sw__put_padded(out, label, label_width, 0);
        }
        for (int k = 0; k < NCOLS; k++) {
            if (!shown_column(k, device))
                continue;
            if (markdown) {
                fputc(' ', out);
                sw__md_put_cell(out, cell[k]);
                fputs(" |", out);
            } else {
                fputs("  ", out);
                sw__put_padded(out, cell[k], width[k], k != NCOLS - 1);
            }
        }
        fputc('\n', out);
    }
    free(rows);
}
