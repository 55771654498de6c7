/*
 * abi_layout.c — the rules of stepwatch.h's "Structs that grow", checked where the compiler
 * can: every field of the first release's structs (stepwatch_v1.h) sits at the same offset
 * in today's, today's structs are no smaller and end without padding; and, run, the copy
 * rules themselves (core/sized.c) on a struct that really grew.
 */
/* The first release's structs under names of their own, beside today's. */
#define sw_options v1_options
#define sw_write_options v1_write_options
#define sw_data_source v1_data_source
#define sw_engine_options v1_engine_options
#define sw_ftable_options v1_ftable_options
#define sw_ranks_options v1_ranks_options
#define sw_live_values v1_live_values
#define sw_gpu_clock v1_gpu_clock
#define sw_device_time_info v1_device_time_info
#include "stepwatch_v1.h"
#undef sw_options
#undef sw_write_options
#undef sw_data_source
#undef sw_engine_options
#undef sw_ftable_options
#undef sw_ranks_options
#undef sw_live_values
#undef sw_gpu_clock
#undef sw_device_time_info

#include "core/core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A field of the first release is where it was. */
#define SAME(type, field)                                                    \
    _Static_assert(offsetof(v1_##type, field) == offsetof(sw_##type, field), \
                   "sw_" #type "." #field " moved: fields are only ever added at the end")
/* Today's struct holds the first release's and ends with its last field: no tail padding
 * an older library would take for its own. Adding a field? Name the new last one here. */
#define GROWN(type, last)                                                \
    _Static_assert(sizeof(sw_##type) >= sizeof(v1_##type) &&             \
                       sizeof(sw_##type) == SW__END_OF(sw_##type, last), \
                   "sw_" #type " must end with " #last ", without padding after it")

SAME(options, warmup_steps);
SAME(options, max_depth);
SAME(options, run_file);
SAME(options, timeline);
SAME(options, ring_capacity);
SAME(options, on_full);
SAME(options, flush_interval_ms);
SAME(options, no_signal_handlers);
SAME(options, rank);
SAME(options, world_size);
SAME(options, local_rank);
SAME(options, name);
SAME(options, command);
SAME(options, device_stats);
SAME(options, device_stats_ms);
SAME(options, device_time);
SAME(options, live);
SAME(options, clock);
SAME(options, step_memory);
GROWN(options, step_memory);

SAME(write_options, width);
SAME(write_options, full_names);
SAME(write_options, brief);
GROWN(write_options, brief);

SAME(data_source, next);
SAME(data_source, reset);
SAME(data_source, ctx);
SAME(data_source, length);
GROWN(data_source, length);

SAME(engine_options, profiler);
SAME(engine_options, profiler_options);
SAME(engine_options, max_epochs);
SAME(engine_options, epoch_length);
SAME(engine_options, validate_every);
SAME(engine_options, handler_rows);
SAME(engine_options, csv_path);
GROWN(engine_options, csv_path);

SAME(ftable_options, max_lines);
SAME(ftable_options, full_paths);
SAME(ftable_options, fraction);
SAME(ftable_options, sort);
SAME(ftable_options, suffix);
GROWN(ftable_options, suffix);

SAME(ranks_options, rank);
SAME(ranks_options, world_size);
SAME(ranks_options, gather);
SAME(ranks_options, ctx);
SAME(ranks_options, timeout_s);
SAME(ranks_options, top);
SAME(ranks_options, format);
SAME(ranks_options, out);
SAME(ranks_options, quiet);
SAME(ranks_options, release);
GROWN(ranks_options, release);

SAME(live_values, window_s);
SAME(live_values, steps);
SAME(live_values, total_steps);
SAME(live_values, steps_per_s);
SAME(live_values, samples_per_s);
SAME(live_values, step_p50_ns);
SAME(live_values, step_p99_ns);
SAME(live_values, data_share);
SAME(live_values, slowest);
SAME(live_values, slowest_share);
GROWN(live_values, mfu);

SAME(gpu_clock, ctx);
SAME(gpu_clock, ready);
SAME(gpu_clock, event_new);
SAME(gpu_clock, record);
SAME(gpu_clock, query);
SAME(gpu_clock, elapsed_ns);
SAME(gpu_clock, event_free);
SAME(gpu_clock, release);
GROWN(gpu_clock, record_on);

SAME(device_time_info, steps_timed);
SAME(device_time_info, steps_dropped);
SAME(device_time_info, spans_dropped);
SAME(device_time_info, warmup_steps);
SAME(device_time_info, failed);
SAME(device_time_info, steps_sampled_out);
SAME(device_time_info, sample_every);
SAME(device_time_info, steps_captured);
SAME(device_time_info, boundaries_captured);
SAME(device_time_info, most_behind);
SAME(device_time_info, events);
SAME(device_time_info, intervals);
SAME(device_time_info, intervals_timed);
GROWN(device_time_info, comm_intervals);

/* ---- the copy rules on a struct that grew: release 1 had a, release 2 added b ---- */

typedef struct {
    size_t size;
    uint64_t a;
} release1;
typedef struct {
    size_t size;
    uint64_t a;
    uint64_t b; /* defaults to 7 when zero */
} release2;
#define FIRST SW__END_OF(release1, a)

/* A library of release 2 reads a release-1 caller's struct: b is zero, its default. */
static void test_older_caller(void **state) {
    (void)state;
    struct {
        release1 r;
        uint64_t beyond; /* what lies past the caller's struct: never read */
    } theirs = {{.size = sizeof(release1), .a = 5}, 0xDEADBEEF};
    release2 mine;
    memset(&mine, 0xAB, sizeof mine);
    assert_int_equal(sw__sized_in(&mine, sizeof mine, &theirs.r, FIRST, "release"), 0);
    assert_int_equal(mine.a, 5);
    assert_int_equal(mine.b, 0);
    assert_int_equal(mine.size, sizeof(release2));
}

/* A library of release 1 reads a release-2 caller's struct: b zero works, b set does not. */
static void test_newer_caller(void **state) {
    (void)state;
    release2 theirs = {.size = sizeof theirs, .a = 5};
    release1 mine;
    assert_int_equal(sw__sized_in(&mine, sizeof mine, &theirs, FIRST, "release"), 0);
    assert_int_equal(mine.a, 5);
    theirs.b = 7;
    assert_int_equal(sw__sized_in(&mine, sizeof mine, &theirs, FIRST, "release"), SW_EUNSUPPORTED);
    assert_string_equal(sw_last_error(),
                        "release: byte 16 of its 24 is set, and this library's release has "
                        "16: an option of a newer stepwatch.h (" SW_VERSION_STRING
                        " here) that it does not know");
}

static void test_sizes_refused(void **state) {
    (void)state;
    release1 theirs = {.size = 0, .a = 5}, mine;
    assert_int_equal(sw__sized_in(&mine, sizeof mine, &theirs, FIRST, "release"), SW_EINVAL);
    assert_non_null(strstr(sw_last_error(), "release.size is 0"));
    theirs.size = sizeof(size_t) + 4;
    assert_int_equal(sw__sized_in(&mine, sizeof mine, &theirs, FIRST, "release"), SW_EINVAL);
    /* NULL is the defaults. */
    memset(&mine, 0xAB, sizeof mine);
    assert_int_equal(sw__sized_in(&mine, sizeof mine, NULL, FIRST, "release"), 0);
    assert_int_equal(mine.a, 0);
    assert_int_equal(mine.size, sizeof mine);
}

/* Output: an older caller gets its part only; a newer one gets zeros past the library's. */
static void test_output(void **state) {
    (void)state;
    release2 mine = {.size = sizeof mine, .a = 1, .b = 2};
    struct {
        release1 r;
        uint64_t beyond;
    } older = {{.size = sizeof(release1)}, 0xDEADBEEF};
    assert_int_equal(sw__sized_out(&older.r, &mine, sizeof mine, FIRST, "release"), 0);
    assert_int_equal(older.r.a, 1);
    assert_int_equal(older.beyond, 0xDEADBEEF);
    assert_int_equal(older.r.size, sizeof(release1));
    release1 lib = {.size = sizeof lib, .a = 3};
    release2 newer = {.size = sizeof newer, .a = 9, .b = 9};
    assert_int_equal(sw__sized_out(&newer, &lib, sizeof lib, FIRST, "release"), 0);
    assert_int_equal(newer.a, 3);
    assert_int_equal(newer.b, 0);
    assert_int_equal(newer.size, sizeof(release2));
    release1 zeroed = {0};
    assert_int_equal(sw__sized_out(&zeroed, &lib, sizeof lib, FIRST, "release"), SW_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_older_caller),
        cmocka_unit_test(test_newer_caller),
        cmocka_unit_test(test_sizes_refused),
        cmocka_unit_test(test_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
