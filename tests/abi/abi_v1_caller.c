/*
 * abi_v1_caller.c — a program compiled against the first release's stepwatch.h
 * (stepwatch_v1.h: its sized structs, frozen) calling today's shared library, as a
 * program built once and never rebuilt would (stepwatch.h, "Structs that grow"). It sees no
 * header of today's: it declares the calls it makes as that release declared them.
 * Also: a struct of a newer header than the library's, with its newer fields zero (works)
 * or set (SW_EUNSUPPORTED, and sw_last_error names the struct), and a size under the first
 * release's (SW_EINVAL).
 */
#include "stepwatch_v1.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- the first release's calls, as it declared them ---- */
typedef struct sw_profiler sw_profiler;
typedef struct sw_engine sw_engine;
typedef struct sw_live sw_live;
typedef struct sw_fprofile sw_fprofile;
typedef struct sw_snapshot sw_snapshot;
enum { SW_EINVAL = -1, SW_EUNSUPPORTED = -12, SW_FORMAT_JSON = 6, SW_LIVE_OFF = 2 };
int sw_profiler_new(const sw_options *opts, sw_profiler **out);
void sw_profiler_free(sw_profiler *p);
const char *sw_last_error(void);
uint32_t sw_action(sw_profiler *p, const char *name);
void sw_begin(sw_profiler *p, uint32_t id);
void sw_end(sw_profiler *p, uint32_t id);
void sw_step_begin(sw_profiler *p, uint32_t batch_size);
void sw_step_end(sw_profiler *p);
uint64_t sw_step_count(const sw_profiler *p);
int sw_snapshot_take(sw_profiler *p, sw_snapshot **out);
void sw_snapshot_free(sw_snapshot *s);
int sw_snapshot_write_ex(const sw_snapshot *s, int fmt, FILE *out, const sw_write_options *opts);
typedef int (*sw_process_fn)(sw_engine *e, void *batch, uint32_t batch_size, void *user);
int sw_engine_new(const sw_engine_options *opts, sw_engine **out);
void sw_engine_free(sw_engine *e);
int sw_engine_set_train(sw_engine *e, const sw_data_source *data, sw_process_fn fn, void *user);
int sw_engine_run(sw_engine *e);
sw_profiler *sw_engine_profiler(sw_engine *e);
int sw_fprofile_new(sw_fprofile **out);
void sw_fprofile_free(sw_fprofile *fp);
int sw_fprofile_write_table(const sw_fprofile *fp, const char *action,
                            const sw_ftable_options *opts, FILE *out);
int sw_live_new(sw_profiler *p, double window_s, sw_live **out);
int sw_live_update(sw_live *w, sw_live_values *out);
void sw_live_free(sw_live *w);
char *sw_live_format(const sw_live_values *v, char *buf, size_t size, int width);
int sw_device_time_clock(sw_profiler *p, const sw_gpu_clock *clock);
int sw_device_time_info_get(sw_profiler *p, sw_device_time_info *out);
int sw_ranks_attach(sw_profiler *p, const sw_ranks_options *o);

/* A struct of a header newer than the library: the first release's and fields after it. */
#define NEWER(type)             \
    struct {                    \
        type v1;                \
        uint64_t newer_field;   \
        const char *newer_name; \
    }

static sw_profiler *profiler(const char *name) {
    sw_options o = {.size = sizeof o,
                    .name = name,
                    .warmup_steps = 1,
                    .live = SW_LIVE_OFF,
                    .no_signal_handlers = 1};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    return p;
}

static void steps(sw_profiler *p, int n) {
    uint32_t forward = sw_action(p, "forward");
    for (int i = 0; i < n; i++) {
        sw_step_begin(p, 4);
        sw_begin(p, forward);
        sw_end(p, forward);
        sw_step_end(p);
    }
}

/* The report as JSON, written with the first release's layout options. */
static char *json_of(sw_profiler *p, const sw_write_options *layout) {
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    int rc = sw_snapshot_write_ex(s, SW_FORMAT_JSON, mem, layout);
    fclose(mem);
    sw_snapshot_free(s);
    assert_int_equal(rc, 0);
    return text;
}

/* The first release's options are read as they were meant: the name, the warm-up steps. */
static void test_v1_options_work(void **state) {
    (void)state;
    sw_profiler *p = profiler("v1-caller");
    steps(p, 3);
    assert_int_equal(sw_step_count(p), 3);
    sw_write_options layout = {.size = sizeof layout, .full_names = 1};
    char *json = json_of(p, &layout);
    assert_non_null(strstr(json, "\"v1-caller\""));
    assert_non_null(strstr(json, "\"warmup_steps\": 1,"));
    free(json);
    sw_profiler_free(p);
}

/* Zeroed by hand (size 0) or cut under the first release's struct: SW_EINVAL, said. */
static void test_size_under_first_release(void **state) {
    (void)state;
    sw_profiler *p = (sw_profiler *)1;
    sw_options zeroed = {0};
    assert_int_equal(sw_profiler_new(&zeroed, &p), SW_EINVAL);
    assert_null(p);
    assert_non_null(strstr(sw_last_error(), "sw_options.size is 0"));
    sw_options cut = {.size = offsetof(sw_options, step_memory)};
    assert_int_equal(sw_profiler_new(&cut, &p), SW_EINVAL);
    assert_non_null(strstr(sw_last_error(), "sw_options"));
}

/* A newer header's options: accepted while the newer fields are zero, refused when set. */
static void test_newer_options(void **state) {
    (void)state;
    NEWER(sw_options)
    o = {.v1 = {.size = sizeof o, .name = "newer", .no_signal_handlers = 1, .live = SW_LIVE_OFF}};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o.v1, &p), 0);
    steps(p, 1);
    sw_write_options layout = {.size = sizeof layout};
    char *json = json_of(p, &layout);
    assert_non_null(strstr(json, "\"newer\""));
    free(json);
    sw_profiler_free(p);

    o.newer_name = "an option this library does not know";
    assert_int_equal(sw_profiler_new(&o.v1, &p), SW_EUNSUPPORTED);
    assert_null(p);
    char byte[64];
    snprintf(byte, sizeof byte, "byte %zu of its %zu", offsetof(__typeof__(o), newer_name),
             sizeof o);
    assert_non_null(strstr(sw_last_error(), "sw_options"));
    assert_non_null(strstr(sw_last_error(), byte));
}

static void test_write_options(void **state) {
    (void)state;
    sw_profiler *p = profiler("layout");
    steps(p, 2);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    NEWER(sw_write_options) newer = {.v1 = {.size = sizeof newer}, .newer_field = 1};
    FILE *null = fopen("/dev/null", "w");
    assert_int_equal(sw_snapshot_write_ex(s, SW_FORMAT_JSON, null, &newer.v1), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_last_error(), "sw_write_options"));
    newer.newer_field = 0;
    assert_int_equal(sw_snapshot_write_ex(s, SW_FORMAT_JSON, null, &newer.v1), 0);
    sw_write_options zeroed = {0};
    assert_int_equal(sw_snapshot_write_ex(s, SW_FORMAT_JSON, null, &zeroed), SW_EINVAL);
    fclose(null);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

/* ---- the engine: its options, the profiler options they carry, a data source ---- */

static int next_batch(void *ctx, void **batch, uint32_t *batch_size) {
    int *left = ctx;
    if (*left == 0)
        return 0;
    (*left)--;
    *batch = left;
    *batch_size = 2;
    return 1;
}

static int refill(void *ctx) {
    *(int *)ctx = 3;
    return 0;
}

static int process(sw_engine *e, void *batch, uint32_t batch_size, void *user) {
    (void)e, (void)batch, (void)batch_size, (void)user;
    return 0;
}

static void test_engine(void **state) {
    (void)state;
    sw_options po = {.size = sizeof po, .no_signal_handlers = 1, .live = SW_LIVE_OFF};
    sw_engine_options eo = {.size = sizeof eo, .profiler_options = &po, .max_epochs = 2};
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&eo, &e), 0);
    int left = 3;
    sw_data_source source = {
        .size = sizeof source, .next = next_batch, .reset = refill, .ctx = &left, .length = 3};
    NEWER(sw_data_source) newer = {.v1 = source, .newer_field = 7};
    newer.v1.size = sizeof newer;
    assert_int_equal(sw_engine_set_train(e, &newer.v1, process, NULL), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_last_error(), "sw_data_source"));
    assert_int_equal(sw_engine_set_train(e, &source, process, NULL), 0);
    assert_int_equal(sw_engine_run(e), 0);
    assert_int_equal(sw_step_count(sw_engine_profiler(e)), 6); /* 2 epochs of 3 */
    sw_engine_free(e);

    NEWER(sw_engine_options) newer_eo = {.v1 = eo, .newer_name = "x"};
    newer_eo.v1.size = sizeof newer_eo;
    e = (sw_engine *)1;
    assert_int_equal(sw_engine_new(&newer_eo.v1, &e), SW_EUNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(sw_last_error(), "sw_engine_options"));
}

static void test_ftable_options(void **state) {
    (void)state;
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_fprofile_new(&fp), 0);
    FILE *null = fopen("/dev/null", "w");
    sw_ftable_options o = {.size = sizeof o, .sort = "tottime"};
    assert_int_equal(sw_fprofile_write_table(fp, NULL, &o, null), 0);
    NEWER(sw_ftable_options) newer = {.v1 = o, .newer_field = 1};
    newer.v1.size = sizeof newer;
    assert_int_equal(sw_fprofile_write_table(fp, NULL, &newer.v1, null), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_last_error(), "sw_ftable_options"));
    fclose(null);
    sw_fprofile_free(fp);
}

/* ---- output structs: the library fills only what the caller's struct holds ---- */

static void test_live_values(void **state) {
    (void)state;
    sw_profiler *p = profiler("live");
    sw_live *w = NULL;
    assert_int_equal(sw_live_new(p, 10, &w), 0);
    steps(p, 2);
    assert_int_equal(sw_live_update(w, &(sw_live_values){.size = sizeof(sw_live_values)}), 0);
    steps(p, 3);
    /* The first release's struct, in a buffer that shows any byte written past it. */
    unsigned char buf[sizeof(sw_live_values) + 16];
    memset(buf, 0xAB, sizeof buf);
    sw_live_values *v = (sw_live_values *)buf;
    v->size = sizeof *v;
    assert_int_equal(sw_live_update(w, v), 0);
    assert_int_equal(v->size, sizeof *v);
    assert_int_equal(v->total_steps, 5);
    for (size_t i = sizeof *v; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xAB);
    char line[200];
    assert_non_null(strstr(sw_live_format(v, line, sizeof line, 0), "steps/s"));
    /* A newer caller's struct: the figures this library does not have read as zero. The
     * library has grown past the first release (flops_per_s, mfu): its newer fields lie
     * past room for those, which it fills. */
    struct {
        sw_live_values v1;
        unsigned char grown_since_v1[64];
        uint64_t newer_field;
        const char *newer_name;
    } newer;
    memset(&newer, 0xAB, sizeof newer);
    newer.v1.size = sizeof newer;
    assert_int_equal(sw_live_update(w, &newer.v1), 0);
    assert_int_equal(newer.v1.total_steps, 5);
    assert_int_equal(newer.newer_field, 0);
    assert_null(newer.newer_name);
    assert_int_equal(newer.v1.size, sizeof newer);
    sw_live_values zeroed = {0};
    assert_int_equal(sw_live_update(w, &zeroed), SW_EINVAL);
    assert_non_null(strstr(sw_last_error(), "sw_live_values"));
    sw_live_free(w);
    sw_profiler_free(p);
}

/* A GPU clock whose events cost nothing (device time needs no GPU to be exercised). */
static uintptr_t g_events;
static int g_released;
static int instant_new(void *ctx, void **event) {
    (void)ctx;
    *event = (void *)++g_events;
    return 0;
}
static int instant_record(void *ctx, void *event) {
    (void)ctx, (void)event;
    return 0;
}
static int instant_query(void *ctx, void *event) {
    (void)ctx, (void)event;
    return 1;
}
static int instant_elapsed(void *ctx, void *start, void *end, uint64_t *ns) {
    (void)ctx;
    *ns = (uint64_t)((uintptr_t)end - (uintptr_t)start);
    return 0;
}
static void instant_free(void *ctx, void *event) {
    (void)ctx, (void)event;
}
static void instant_release(void *ctx) {
    (void)ctx;
    g_released++;
}

static void test_device_time(void **state) {
    (void)state;
    sw_gpu_clock clock = {.size = sizeof clock,
                          .event_new = instant_new,
                          .record = instant_record,
                          .query = instant_query,
                          .elapsed_ns = instant_elapsed,
                          .event_free = instant_free,
                          .release = instant_release};
    sw_profiler *p = profiler("device");
    NEWER(sw_gpu_clock) newer = {.v1 = clock, .newer_name = "a call this library lacks"};
    newer.v1.size = sizeof newer;
    assert_int_equal(sw_device_time_clock(p, &newer.v1), SW_EUNSUPPORTED);
    assert_int_equal(g_released, 1); /* released, as on every failure */
    assert_int_equal(sw_device_time_clock(p, &clock), 0);
    steps(p, 4);
    unsigned char buf[sizeof(sw_device_time_info) + 8];
    memset(buf, 0xAB, sizeof buf);
    sw_device_time_info *info = (sw_device_time_info *)buf;
    info->size = sizeof *info;
    assert_int_equal(sw_device_time_info_get(p, info), 0);
    assert_true(info->steps_timed + info->warmup_steps >= 1); /* the last may be unresolved */
    assert_true(info->steps_timed + info->warmup_steps <= 4);
    assert_int_equal(info->size, sizeof *info);
    for (size_t i = sizeof *info; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xAB);
    sw_profiler_free(p);
    assert_int_equal(g_released, 2);
}

static int gather_self(void *ctx, const void *mine, void *all, size_t size, int final,
                       double timeout_s) {
    (void)ctx, (void) final, (void)timeout_s;
    memcpy(all, mine, size);
    return 0;
}

static void test_ranks_options(void **state) {
    (void)state;
    sw_profiler *p = profiler("ranks");
    sw_ranks_options o = {
        .size = sizeof o, .rank = 0, .world_size = 1, .gather = gather_self, .quiet = 1};
    NEWER(sw_ranks_options) newer = {.v1 = o, .newer_field = 3};
    newer.v1.size = sizeof newer;
    assert_int_equal(sw_ranks_attach(p, &newer.v1), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_last_error(), "sw_ranks_options"));
    assert_int_equal(sw_ranks_attach(p, &o), 0);
    steps(p, 2);
    sw_profiler_free(p); /* the final round, over the one rank */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_options_work), cmocka_unit_test(test_size_under_first_release),
        cmocka_unit_test(test_newer_options),   cmocka_unit_test(test_write_options),
        cmocka_unit_test(test_engine),          cmocka_unit_test(test_ftable_options),
        cmocka_unit_test(test_live_values),     cmocka_unit_test(test_device_time),
        cmocka_unit_test(test_ranks_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
