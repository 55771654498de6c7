/*
 * status_line.c — the live status line: a sink with its own thread that redraws one line on
 * stderr twice a second (sw_live_* gives the figures).
 *
 * Never mixed into the program's lines. A program writes to the same terminal whenever it
 * likes, and what it writes cannot be seen from here, so the line does not share the program's
 * rows at all: it lives on the terminal's last row, outside a scroll region that covers the
 * rows above (DECSTBM, the way apt draws its progress bar). The program's output scrolls
 * inside the region and never reaches the last row; each redraw saves the cursor, writes the
 * last row and restores the cursor (DECSC/DECRC), in one write(2), which the terminal driver
 * keeps whole against the program's own writes. A half-written line of the program (a
 * progress bar's "\r") goes on where it was. Before the region is set, the cursor is moved
 * off the last row by an index and a reverse index (IND, RI), which keep its column. The
 * terminal's size is read before each redraw; a new height sets the region again.
 *
 * At the end (sw_profiler_free, or exit without it) the thread stops, the region is reset
 * to the whole screen and the last row erased. A process killed outright (SIGKILL, a crash)
 * leaves the region one row short until `reset` or `tput csr`: the one thing this cannot
 * undo; docs/live.md says so.
 *
 * Only when stderr is a terminal (and TERM is not "dumb"), unless forced (SW_LIVE_ON or
 * STEPWATCH_LIVE=1): to a pipe or a file, forced, a plain line every 10 s
 * (STEPWATCH_LIVE_INTERVAL_MS sets another period, 500 ms at least). Rank 0 only, and
 * one line per process: the first profiler with a step draws it. It writes to its own duplicate of
 * stderr, so a program that later points fd 2 at a file gets no escape codes in it; a write
 * error (a terminal gone, a closed pipe: SIGPIPE is blocked on this thread) ends the drawing
 * quietly; a line due that cannot start (no descriptor, no thread) is said once on stderr. The writes block like the program's own: a terminal stopped with Ctrl-S holds
 * the line's thread as it holds the program.
 */
#include "status_line.h"

#include "core/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define TTY_INTERVAL_MS 500 /* at most twice a second */
#define PLAIN_INTERVAL_MS 10000

typedef struct status_line {
    sw__sink sink;
    sw_profiler *p;
    sw_live *window;
    int fd;        /* our duplicate of stderr */
    int tty;       /* draw in place; else plain lines */
    int rows;      /* the height the scroll region was set for; 0: not set */
    int broken;    /* a write failed: draw nothing more */
    int owns_line; /* this profiler draws the process's one line */
    int interval_ms;
    sw__ticker ticker; /* the thread that redraws */
} status_line;

/* One line per process: the terminal has one last row. */
static _Atomic int line_taken;

/* All of buf, or mark the line broken. */
static void put(status_line *s, const char *buf, size_t len) {
    while (len > 0 && !s->broken) {
        ssize_t n = write(s->fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n == 0 || errno != EINTR) {
            s->broken = 1;
        }
    }
}

/* The live figures, then the slow steps found so far (docs/slow-steps.md) where width (0:
 * any) leaves room for them. */
static void line_text(const status_line *s, const sw_live_values *v, char *text, size_t size,
                      int width) {
    sw_live_format(v, text, size, width);
    uint64_t slow = sw__slow_count(s->p);
    if (slow == 0)
        return;
    char part[48];
    int n = snprintf(part, sizeof part, "  %llu slow step%s", (unsigned long long)slow,
                     slow == 1 ? "" : "s");
    size_t used = strlen(text);
    if (width <= 0 || used + (size_t)n <= (size_t)width)
        snprintf(text + used, size - used, "%s", part);
}

static void draw(status_line *s, const sw_live_values *v) {
    char text[512], out[1024];
    if (!s->tty) {
        line_text(s, v, text, sizeof text, 0);
        int n = snprintf(out, sizeof out, "%s\n", text);
        put(s, out, (size_t)n);
        return;
    }
    struct winsize ws;
    if (ioctl(s->fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 3 || ws.ws_col < 20)
        return;
    size_t n = 0;
    if (ws.ws_row != s->rows) {
        /* Off the last row (keeping the column), then the region above it. */
        n += (size_t)snprintf(out + n, sizeof out - n, "\033D\033M\0337\033[1;%dr\0338",
                              ws.ws_row - 1);
        s->rows = ws.ws_row;
    }
    line_text(s, v, text, sizeof text, ws.ws_col - 1);
    n += (size_t)snprintf(out + n, sizeof out - n, "\0337\033[%d;1H\033[2K\033[7m%s\033[0m\0338",
                          s->rows, text);
    put(s, out, n < sizeof out ? n : sizeof out - 1);
}

/* Give the terminal back: the whole screen scrolls again, the last row is empty. */
static void erase(status_line *s) {
    if (!s->tty || s->rows == 0)
        return;
    char out[64];
    int n = snprintf(out, sizeof out, "\0337\033[r\0338\0337\033[%d;1H\033[2K\0338", s->rows);
    put(s, out, (size_t)n);
    s->rows = 0;
}

/* One redraw (the ticker's tick); a broken line ends the thread. */
static int redraw(void *arg) {
    status_line *s = arg;
    sw_live_values v = SW_LIVE_VALUES_INIT;
    /* Nothing to show before the first step ends. The line goes to the first profiler
     * of the process with a step (`stepwatch run -- python` has a profiler of its own
     * besides the script's); the others keep looking. */
    if (sw_live_update(s->window, &v) == 0 && v.total_steps > 0) {
        int expected = 0;
        if (!s->owns_line)
            s->owns_line = atomic_compare_exchange_strong(&line_taken, &expected, 1);
        if (s->owns_line)
            draw(s, &v);
    }
    return s->broken;
}

static void stop_and_erase(status_line *s) {
    if (!s->ticker.running)
        return;
    sw__ticker_stop(&s->ticker);
    erase(s);
    if (s->owns_line) {
        s->owns_line = 0;
        line_taken = 0;
    }
}

static void free_line(status_line *s) {
    sw_live_free(s->window);
    sw__ticker_close(&s->ticker);
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

static void on_exit_hook(sw__sink *sink) {
    stop_and_erase((status_line *)sink);
}

static void on_close(sw__sink *sink) {
    status_line *s = (status_line *)sink;
    stop_and_erase(s);
    free_line(s);
}

/* A fork child: the thread is the parent's, and so is the line (line_taken stays as it was:
 * a child whose parent drew never draws). */
static void on_fork_child(sw__sink *sink) {
    free_line((status_line *)sink);
}

static const sw__sink_ops status_line_ops = {
    .on_exit = on_exit_hook,
    .on_close = on_close,
    .on_fork_child = on_fork_child,
};

/* SW_LIVE_ON/OFF from the environment `stepwatch run --live/--no-live` sets, else AUTO. */
static sw_live_mode mode_from_env(void) {
    const char *live = getenv("STEPWATCH_LIVE");
    if (live == NULL || live[0] == '\0')
        return SW_LIVE_AUTO;
    return strcmp(live, "0") == 0 ? SW_LIVE_OFF : SW_LIVE_ON;
}

/* STEPWATCH_LIVE_INTERVAL_MS: another refresh period, never below 500 ms. */
static int interval_from_env(int fallback) {
    const char *text = getenv("STEPWATCH_LIVE_INTERVAL_MS");
    long ms = text ? strtol(text, NULL, 10) : 0;
    if (ms <= 0)
        return fallback;
    return ms < TTY_INTERVAL_MS ? TTY_INTERVAL_MS : ms > 3600000 ? 3600000 : (int)ms;
}

static int stderr_is_terminal(void) {
    const char *term = getenv("TERM");
    return isatty(STDERR_FILENO) && term != NULL && term[0] != '\0' && strcmp(term, "dumb") != 0;
}

/* Why a line that was due could not start, said once per process on stderr: the line is
 * only a view, the run goes on without it. */
static void say_off(const char *why) {
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        sw__warn("no live status line: %s", why);
}

/* The line, when due; on failure, said and not drawn (never the profiler's error). */
static void open_line(sw_profiler *p, int tty) {
    status_line *s = calloc(1, sizeof *s);
    if (s == NULL) {
        say_off("out of memory");
        return;
    }
    s->fd = -1;
    char why[256] = "";
    if (sw__ticker_open(&s->ticker) != 0 || sw_live_new(p, 0, &s->window) != 0)
        snprintf(why, sizeof why, "%s", sw_last_error());
    else if ((s->fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) < 0)
        snprintf(why, sizeof why, "cannot duplicate stderr: %s", strerror(errno));
    if (why[0] == '\0') {
        s->sink.ops = &status_line_ops;
        s->p = p;
        s->tty = tty;
        s->interval_ms = interval_from_env(tty ? TTY_INTERVAL_MS : PLAIN_INTERVAL_MS);
        if (sw__ticker_start(&s->ticker, s->interval_ms, redraw, s) == 0) {
            sw__sink_attach(p, &s->sink);
            return;
        }
        snprintf(why, sizeof why, "%s", sw_last_error());
    }
    free_line(s);
    say_off(why[0] ? why : "it could not start");
}

void sw__status_line_open(sw_profiler *p) {
    const sw_options *o = sw__options(p);
    sw_live_mode mode = o->live != SW_LIVE_AUTO ? o->live : mode_from_env();
    int tty = stderr_is_terminal();
    if (mode == SW_LIVE_OFF || (mode == SW_LIVE_AUTO && !tty) || o->rank != 0)
        return;
    /* sw_last_error stays the caller's (a run file's sentence, say): what the failed parts
     * leave there is said on stderr instead (attach_device in profiler_new.c does the same). */
    char kept[640];
    snprintf(kept, sizeof kept, "%s", sw_last_error());
    sw__error_clear();
    open_line(p, tty);
    sw__error(0, "%s", kept);
}
