/*
 * test_html.c — the HTML report: bounded size for long runs (the downsampled series),
 * escaping of the embedded JSON, and a real headless Chromium (Debian's chromium) that
 * must draw the charts without a console error. The screenshot is left in the build
 * directory (html_report.png) for a person to look at.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "analysis/analysis_internal.h"
#include "analysis/series.h"
#include "analysis_test_util.h"

#include <unistd.h>

#define MS 1000000ull
#define NSTEPS 100000

static const char *const COUNTER_NAMES[] = {"gpu_util_pct", "host_rss_mb"};

static int foreach_counter(void *src, sw_counter_fn fn, void *ctx) {
    (void)src;
    for (uint64_t i = 0; i < 20000; i++) {
        sw_counter_record c = {.counter = (sw_id)(i % 2),
                               .time_ns = i * 50 * MS,
                               .value = i % 2 ? 900.0 + (double)(i % 700) : (double)(i % 100)};
        int rc = fn(ctx, 0, &c);
        if (rc)
            return rc;
    }
    return 0;
}

static const char *counter_name(void *src, int rank, sw_id counter) {
    (void)src;
    (void)rank;
    return counter < 2 ? COUNTER_NAMES[counter] : NULL;
}

/* A long run: NSTEPS steps with warm-up, stalls every 997 steps, and hostile names. */
static char *long_report(size_t *size) {
    static at_run r;
    static sw_row rows[5];
    static sw_counter_summary counters[2];
    static sw_snapshot snap;
    at_run_free(&r);
    uint64_t t = 0, seed = 7;
    for (uint64_t i = 0; i < NSTEPS; i++) {
        uint64_t cat[SW_CAT_COUNT] = {0};
        cat[SW_CAT_DATA] = (uint64_t)((0.5 + 0.2 * at_rand(&seed)) * MS) + (i % 997 ? 0 : 30 * MS);
        cat[SW_CAT_FORWARD] = 3 * MS + (i < 5 ? 100 * MS : 0);
        cat[SW_CAT_LOSS] = MS / 5;
        cat[SW_CAT_BACKWARD] = 6 * MS;
        cat[SW_CAT_OPTIMIZER] = MS;
        cat[SW_CAT_CALLBACK] = MS / 10;
        cat[SW_CAT_OTHER] = MS / 20;
        at_run_add(&r, 0, i, t, cat, i < 5);
        t += r.steps[i].duration_ns + MS / 10;
    }
    rows[0] = at_row("forward", "all", 1000, 3 * MS, 0.1, 1);
    rows[1] = at_row("backward", "all", 1000, 6 * MS, 0.1, 2);
    rows[2] = at_row("</script><script>alert(1)</script>", "all", 1000, 0.1 * MS, 0.1, 3);
    rows[3] = at_row("forward", "train", 1000, 3 * MS, 0.1, 1);
    rows[4] = at_row("backward", "train", 1000, 6 * MS, 0.1, 2);
    counters[0] = (sw_counter_summary){"gpu_util_pct", 10000, 99, 0, 99, 49.5};
    counters[1] = (sw_counter_summary){"host_rss_mb", 10000, 1599, 900, 1599, 1249};
    snap = at_snapshot("long <run> & \"friends\"", rows, 5, NSTEPS, t);
    snap.counters = counters;
    snap.ncounters = 2;
    snap.command = "train.py --lr 0.1 </script>";
    snap.warmup_steps = 5;
    sw__input in = at_input(&r, &snap, 1);
    in.foreach_counter = foreach_counter;
    in.counter_name = counter_name;
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw__html_write_input(&in, c.f), 0);
    char *html = at_capture_end(&c);
    *size = strlen(html);
    return html;
}

static size_t count(const char *text, const char *what) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static void test_series_is_bounded(void **state) {
    (void)state;
    sw__series s;
    assert_int_equal(sw__series_init(&s, 0, 1), 0);
    double sums[SW__SERIES_SUMS] = {1};
    for (uint64_t i = 0; i < 1000003; i++) /* step i runs from 100 i to 100 i + 50 ns */
        sw__series_add(&s, 10 + i, i == 500000 ? 1e9 : (double)(i % 10), 100 * i, 100 * i + 50,
                       sums);
    assert_true(s.npoints <= SW__SERIES_MAX);
    assert_true(s.npoints > SW__SERIES_MAX / 2);
    uint64_t n = 0;
    double max = 0, total = 0, sum0 = 0;
    for (size_t i = 0; i < s.npoints; i++) {
        n += s.points[i].count;
        max = s.points[i].max > max ? s.points[i].max : max;
        total += s.points[i].sum;
        sum0 += s.points[i].sums[0];
    }
    assert_int_equal(n, 1000003); /* nothing lost */
    assert_true(max == 1e9);      /* the outlier survives downsampling */
    assert_true(sum0 == 1000003.0);
    assert_true(total > 1e9);
    assert_int_equal(s.origin, 10);
    assert_int_equal(s.width, 512); /* 1000003 / 2000 rounded up to a power of two */
    /* Each point's median (values 0..9 evenly: 4 or 5) and its wall-time span. */
    for (size_t i = 0; i + 1 < s.npoints; i++) {
        double m = sw__series_median(&s, i);
        assert_true(m >= 4 && m <= 5);
        assert_int_equal(s.points[i].t_lo, 100 * i * 512);
        assert_int_equal(s.points[i].t_hi, 100 * (i * 512 + 511) + 50);
    }
    sw__series_free(&s);
}

static void test_bounded_and_escaped(void **state) {
    (void)state;
    size_t size;
    char *html = long_report(&size);
    assert_true(size < 1500000); /* 10^5 steps, 2 x 10^4 counter samples */
    /* Only the data and the drawing script; hostile names stay inside the JSON. */
    assert_int_equal(count(html, "<script"), 2);
    assert_int_equal(count(html, "</script>"), 2);
    assert_non_null(strstr(html, "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"));
    assert_non_null(
        strstr(html, "<title>stepwatch: long &lt;run&gt; &amp; &quot;friends&quot;</title>"));
    /* No network: no URLs to fetch, and a policy that forbids them. */
    assert_int_equal(count(html, "://"), count(html, "\"http://www.w3.org/2000/svg\""));
    assert_null(strstr(html, "src="));
    assert_null(strstr(html, "href="));
    assert_non_null(strstr(html, "default-src 'none'"));
    /* Step points: at most 2000 (one line each, starting with its "["). */
    const char *steps = strstr(html, "\"steps\": {");
    const char *end = strstr(html, "\"step_hists\"");
    assert_non_null(steps);
    assert_non_null(end);
    size_t points = 0;
    for (const char *p = steps; p < end; p++)
        points += *p == '\n' && p[1 + strspn(p + 1, " ")] == '[';
    assert_true(points <= 2000 && points > 1000);
    free(html);
}

/* Run chromium on path; returns its DOM after scripts ran, and the console lines. */
static char *chromium_dom(const char *path, char **console, const char *screenshot) {
    char cmd[4096], err[1100];
    snprintf(err, sizeof err, "%s.stderr", path);
    snprintf(cmd, sizeof cmd,
             "timeout 120 chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr "
             "--v=0 --dump-dom 'file://%s' 2>'%s'",
             path, err);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    at_capture c;
    at_capture_begin(&c);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        fwrite(buf, 1, n, c.f);
    int status = pclose(p);
    char *dom = at_capture_end(&c);
    if (status != 0)
        fail_msg("chromium failed (status %d): %s", status, cmd);
    /* The console lines Chromium logs ("...:CONSOLE(12)] message"). */
    char *log = at_read_file(err);
    at_capture_begin(&c);
    for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (strstr(line, ":CONSOLE"))
            fprintf(c.f, "%s\n", line);
    *console = at_capture_end(&c);
    free(log);
    unlink(err);
    if (screenshot) {
        snprintf(cmd, sizeof cmd,
                 "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                 "--window-size=1280,2400 --screenshot='%s' 'file://%s' >/dev/null 2>&1",
                 screenshot, path);
        assert_int_equal(system(cmd), 0);
    }
    return dom;
}

static int have_chromium(void) {
    return system("command -v chromium >/dev/null 2>&1") == 0;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void out_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("SW_BUILD_DIR");
    char cwd[1024];
    if (!dir)
        dir = getcwd(cwd, sizeof cwd);
    snprintf(buf, size, "%s/%s", dir, name);
}

/* Write html to the build directory as name, draw it in Chromium (and take a screenshot
 * when png is given); the page must render without console messages or script errors.
 * Frees html; returns the DOM after the scripts ran (caller frees). */
static char *render(char *html, const char *name, const char *png) {
    char path[1024], shot[1024];
    out_path(path, sizeof path, name);
    if (png)
        out_path(shot, sizeof shot, png);
    write_file(path, html);
    free(html);
    char *console;
    char *dom = chromium_dom(path, &console, png ? shot : NULL);
    if (console[0])
        fail_msg("console messages:\n%s", console);
    free(console);
    assert_non_null(strstr(dom, "data-rendered=\"1\""));
    assert_non_null(strstr(dom, "<div id=\"sw-error\"></div>"));
    return dom;
}

static void test_chromium_renders(void **state) {
    (void)state;
    if (!have_chromium()) {
        fprintf(stderr, "chromium is not installed (apt-get install chromium): skipped\n");
        skip();
    }
    size_t size;
    char *html = long_report(&size);
    char *dom = render(html, "html_report.html", "html_report.png");
    const char *charts[] = {
        "data-chart=\"step-time\"",     "data-chart=\"breakdown\"", "data-chart=\"hist-step\"",
        "data-chart=\"hist\"",          "data-chart=\"counter\"",   "data-marker=\"p50\"",
        "data-marker=\"p99\"",          "data-category=\"data\"",   "data-category=\"backward\"",
        "data-finding=\"tail-stalls\"", "data-table=\"actions\"",   "data-table=\"phases\"",
        "data-chart=\"glance-train\"",  "data-axis=\"time\"",       "data-action=\"reset-zoom\""};
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++)
        if (!strstr(dom, charts[i]))
            fail_msg("the rendered page has no %s", charts[i]);
    assert_true(count(dom, "<svg") >= 8);
    assert_true(count(dom, "<polygon") >= 7); /* band + one area per used category */
    assert_true(count(dom, "class=\"bar\"") >= 10);
    /* The hostile action name is shown as text, not run. */
    assert_non_null(strstr(dom, "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    free(dom);
}

static void test_chromium_empty_run(void **state) {
    (void)state;
    if (!have_chromium())
        skip();
    at_run r = {0};
    sw_snapshot snap = at_snapshot("empty", NULL, 0, 0, 0);
    sw__input in = at_input(&r, &snap, 1);
    at_capture c;
    at_capture_begin(&c);
    assert_int_equal(sw__html_write_input(&in, c.f), 0);
    char *html = at_capture_end(&c);
    char *dom = render(html, "html_report_empty.html", NULL);
    assert_non_null(strstr(dom, "No step records in this run."));
    /* No steps is said, never "No problems found" (diagnose's no-steps finding). */
    assert_non_null(strstr(dom, "data-finding=\"no-steps\""));
    assert_null(strstr(dom, "id=\"sw-no-problems\""));
    free(dom);
}

static void test_bad_arguments(void **state) {
    (void)state;
    at_run r = {0};
    sw__input in = at_input(&r, NULL, 1);
    assert_int_equal(sw__html_write_input(&in, stdout), SW_EINVAL);
    assert_int_equal(sw__html_write_input(NULL, stdout), SW_EINVAL);
    assert_int_equal(sw_html_write(NULL, stdout), SW_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_series_is_bounded), cmocka_unit_test(test_bounded_and_escaped),
        cmocka_unit_test(test_chromium_renders),  cmocka_unit_test(test_chromium_empty_run),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
