/*
 * test_device.c — device statistics (stepwatch/device.h): the /proc reader against known
 * load (a busy thread, 200 MB of memory) measured independently in the same run, the
 * sampler's counters, and GPU statistics without a GPU: NVML missing, failing, incomplete,
 * or a fake one with known values (STEPWATCH_NVML), GPUs picked by CUDA_VISIBLE_DEVICES.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_helpers.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

/* ---- helpers ---- */

static uint64_t rusage_cpu_ns(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct spinner {
    uint64_t cpu_goal_ns;
    uint64_t cpu_ns; /* the thread's own CPU time, measured by itself */
} spinner;

/* Busy until the thread itself has run cpu_goal_ns (or 10 s went by): on an idle machine
 * 100 % of a core; on a loaded one less, and then all the readings agree on less. */
static void *spin(void *arg) {
    spinner *s = arg;
    uint64_t cpu0 = thread_cpu_ns(), give_up = sw_now_ns() + 10000000000u;
    while (thread_cpu_ns() - cpu0 < s->cpu_goal_ns && sw_now_ns() < give_up) {
    }
    s->cpu_ns = thread_cpu_ns() - cpu0;
    return NULL;
}

/* The summary of counter name in p, or NULL (the snapshot is freed by the caller). */
static const sw_counter_summary *find_counter(const sw_snapshot *s, const char *name) {
    for (size_t i = 0; i < s->ncounters; i++)
        if (strcmp(s->counters[i].name, name) == 0)
            return &s->counters[i];
    return NULL;
}

/* A snapshot of p once it holds at least n samples of counter name (the sampler's thread
 * may start late on a loaded machine), or NULL after 10 s. */
static sw_snapshot *snapshot_with_samples(sw_profiler *p, const char *name, uint64_t n) {
    for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
        sw_snapshot *s = NULL;
        if (sw_snapshot_take(p, &s) != 0)
            return NULL;
        const sw_counter_summary *c = find_counter(s, name);
        if (c != NULL && c->count >= n)
            return s;
        sw_snapshot_free(s);
        usleep(10 * 1000);
    }
    return NULL;
}

static size_t occurrences(const char *text, const char *what) {
    size_t n = 0;
    for (const char *at = strstr(text, what); at; at = strstr(at + 1, what))
        n++;
    return n;
}

/* ---- without NVML: said once, the rest goes on (these run first: the message is once per
 * process, and each runs in a child of its own) ---- */

static void two_samplers_without_nvml(void) {
    setenv("STEPWATCH_NVML", "/nonexistent/libnvidia-ml.so.1", 1);
    for (int i = 0; i < 2; i++) {
        sw_profiler *p = NULL;
        sw_options o = {.size = sizeof(sw_options), .device_stats = 1, .device_stats_ms = 20};
        if (sw_profiler_new(&o, &p) != 0)
            _exit(3);
        sw_snapshot *s = snapshot_with_samples(p, "process_rss_bytes", 2);
        if (s == NULL || find_counter(s, "process_rss_bytes")->last <= 0)
            _exit(5); /* CPU and memory are still sampled */
        if (find_counter(s, "gpu0.utilization_percent") != NULL)
            _exit(6);
        sw_snapshot_free(s);
        sw_profiler_free(p);
    }
}

static void test_without_nvml_said_once(void **state) {
    (void)state;
    char err[4096];
    assert_int_equal(sw_test_in_child(two_samplers_without_nvml, err, sizeof err), 0);
    assert_int_equal(occurrences(err, "stepwatch: no GPU statistics"), 1);
    assert_non_null(strstr(err, "/nonexistent/libnvidia-ml.so.1"));
}

static void reader_without_nvml(void) {
    setenv("STEPWATCH_NVML", "/nonexistent/libnvidia-ml.so.1", 1);
    sw_device_reader *r = NULL;
    if (sw_device_reader_new(1, &r) != 0)
        _exit(3);
    sw_device_stats st;
    if (sw_device_read(r, &st) != 0 || st.ngpus != -1 || st.rss_bytes <= 0)
        _exit(4);
    if (sw_device_gpu_error(r) == NULL || strstr(sw_device_gpu_error(r), "nonexistent") == NULL)
        _exit(5);
    sw_device_reader_free(r);
    /* Without asking for GPUs there is nothing to explain. */
    if (sw_device_reader_new(0, &r) != 0 || sw_device_gpu_error(r) != NULL)
        _exit(6);
    sw_device_reader_free(r);
}

static void test_reader_without_nvml_says_nothing(void **state) {
    (void)state;
    char err[4096];
    assert_int_equal(sw_test_in_child(reader_without_nvml, err, sizeof err), 0);
    assert_string_equal(err, ""); /* the reader tells through sw_device_gpu_error, not stderr */
}

/* ---- /proc against known load ---- */

static void test_busy_thread_cpu(void **state) {
    (void)state;
    sw_device_reader *r = NULL;
    assert_int_equal(sw_device_reader_new(0, &r), 0);
    sw_device_stats st;
    spinner s = {.cpu_goal_ns = 500000000u};
    pthread_t thread;
    assert_int_equal(sw_device_read(r, &st), 0); /* the interval starts here */
    uint64_t wall0 = sw_now_ns(), rusage0 = rusage_cpu_ns();
    assert_int_equal(pthread_create(&thread, NULL, spin, &s), 0);
    pthread_join(thread, NULL);
    uint64_t rusage1 = rusage_cpu_ns(), wall1 = sw_now_ns();
    assert_int_equal(sw_device_read(r, &st), 0);
    double wall = (double)(wall1 - wall0);
    double by_rusage = 100.0 * (double)(rusage1 - rusage0) / wall;
    double by_thread = 100.0 * (double)s.cpu_ns / wall;
    printf("busy thread: reader %.1f %%, getrusage %.1f %%, the thread itself %.1f %% of a core\n",
           st.process_cpu_percent, by_rusage, by_thread);
    /* The same process CPU time, read two ways (independent of how loaded the machine is). */
    assert_true(fabs(st.process_cpu_percent - by_rusage) <= 10.0);
    /* The process is the busy thread plus threads that wait. */
    assert_true(fabs(st.process_cpu_percent - by_thread) <= 10.0);
    assert_true(by_thread <= 105.0);
    assert_true(st.cpu_percent >= 0 && st.cpu_percent <= 100.0);
    sw_device_reader_free(r);
}

static void test_rss_follows_200_mb(void **state) {
    (void)state;
    sw_device_reader *r = NULL;
    assert_int_equal(sw_device_reader_new(0, &r), 0);
    sw_device_stats before, during, after;
    assert_int_equal(sw_device_read(r, &before), 0);
    /* mmap, not malloc: no allocator (ASan's included) keeps or pads it. */
    size_t size = (size_t)(200 * MIB);
    char *block = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(block != MAP_FAILED);
    memset(block, 1, size); /* resident only once touched */
    assert_int_equal(sw_device_read(r, &during), 0);
    double grew = during.rss_bytes - before.rss_bytes;
    printf("200 MiB touched: RSS %.1f -> %.1f MiB (+%.1f), peak %.1f MiB\n", before.rss_bytes / MIB,
           during.rss_bytes / MIB, grew / MIB, during.peak_rss_bytes / MIB);
    assert_true(fabs(grew - (double)size) <= 0.10 * (double)size);
    assert_true(during.peak_rss_bytes >= during.rss_bytes);
    assert_true(block[size - 1] == 1);
    munmap(block, size);
    assert_int_equal(sw_device_read(r, &after), 0);
    assert_true(during.rss_bytes - after.rss_bytes >= 0.9 * (double)size);
    assert_true(after.peak_rss_bytes >= before.rss_bytes + 0.9 * (double)size); /* a peak */
    sw_device_reader_free(r);
}

static void test_system_values_in_range(void **state) {
    (void)state;
    sw_device_reader *r = NULL;
    assert_int_equal(sw_device_reader_new(0, &r), 0);
    sw_device_stats st;
    usleep(50 * 1000);
    assert_int_equal(sw_device_read(r, &st), 0);
    assert_true(st.cpu_percent >= 0 && st.cpu_percent <= 100);
    assert_true(st.vm_percent > 0 && st.vm_percent < 100);
    assert_true(st.swap_percent >= 0 && st.swap_percent <= 100);
    assert_int_equal(st.ngpus, -1); /* not asked for */
    assert_int_equal(sw_device_read(NULL, &st), SW_EINVAL);
    assert_int_equal(sw_device_reader_new(0, NULL), SW_EINVAL);
    sw_device_reader_free(r);
    sw_device_reader_free(NULL);
}

/* ---- NVML: a fake one with known values ---- */

static void use_fake_nvml(const char *path, const char *visible) {
    setenv("STEPWATCH_NVML", path, 1);
    if (visible)
        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
}

static void test_fake_nvml_values(void **state) {
    (void)state;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    sw_device_reader *r = NULL;
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    assert_null(sw_device_gpu_error(r));
    sw_device_stats st;
    assert_int_equal(sw_device_read(r, &st), 0);
    assert_int_equal(st.ngpus, 2);
    for (int i = 0; i < 2; i++) {
        assert_true(st.gpus[i].utilization_percent == 40 + 10 * i);
        assert_true(st.gpus[i].memory_used_bytes == (i + 1) * GIB);
        assert_true(st.gpus[i].memory_total_bytes == 80 * GIB);
        assert_true(st.gpus[i].temperature_c == 60 + i);
    }
    assert_true(st.gpus[0].power_w == 250.0);
    assert_true(st.gpus[1].power_w == -1); /* not reported by that device */
    sw_device_reader_free(r);
    /* A driver without nvmlDeviceGetMemoryInfo_v2: v1's figure, the reservation included. */
    setenv("FAKE_NVML_NO_V2", "1", 1);
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    assert_int_equal(sw_device_read(r, &st), 0);
    unsetenv("FAKE_NVML_NO_V2");
    assert_true(st.gpus[1].memory_used_bytes == 2 * GIB + 512.0 * 1024 * 1024);
    assert_true(st.gpus[1].memory_total_bytes == 80 * GIB);
    sw_device_reader_free(r);
}

/* The GPUs of CUDA_VISIBLE_DEVICES, in its order; utilization tells which is which. */
static int visible_gpus(const char *visible, double util[SW_MAX_GPUS], char *why, size_t size) {
    use_fake_nvml(SW_FAKE_NVML, visible);
    sw_device_reader *r = NULL;
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    sw_device_stats st;
    assert_int_equal(sw_device_read(r, &st), 0);
    for (int i = 0; i < st.ngpus; i++)
        util[i] = st.gpus[i].utilization_percent;
    snprintf(why, size, "%s", sw_device_gpu_error(r) ? sw_device_gpu_error(r) : "");
    sw_device_reader_free(r);
    return st.ngpus;
}

static void test_cuda_visible_devices(void **state) {
    (void)state;
    double util[SW_MAX_GPUS];
    char why[256];
    assert_int_equal(visible_gpus("1", util, why, sizeof why), 1);
    assert_true(util[0] == 50);
    assert_int_equal(visible_gpus("1,0", util, why, sizeof why), 2);
    assert_true(util[0] == 50 && util[1] == 40);
    assert_int_equal(visible_gpus("GPU-fake-0001", util, why, sizeof why), 1);
    assert_true(util[0] == 50);
    assert_int_equal(visible_gpus("GPU-fake", util, why, sizeof why), 1);  /* a prefix */
    assert_int_equal(visible_gpus("0,bogus,1", util, why, sizeof why), 1); /* CUDA stops */
    assert_true(util[0] == 40);
    assert_int_equal(visible_gpus("7", util, why, sizeof why), -1);
    assert_non_null(strstr(why, "CUDA_VISIBLE_DEVICES"));
    assert_int_equal(visible_gpus("", util, why, sizeof why), -1); /* hides every GPU */
    unsetenv("CUDA_VISIBLE_DEVICES");
}

static void test_nvml_that_fails(void **state) {
    (void)state;
    sw_device_reader *r = NULL;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    assert_non_null(strstr(sw_device_gpu_error(r), "NVML did not start: Driver Not Loaded"));
    sw_device_reader_free(r);
    unsetenv("FAKE_NVML_INIT_FAIL");

    use_fake_nvml(SW_FAKE_NVML_INCOMPLETE, NULL);
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    assert_non_null(strstr(sw_device_gpu_error(r), "lacks an NVML function"));
    sw_device_stats st;
    assert_int_equal(sw_device_read(r, &st), 0);
    assert_int_equal(st.ngpus, -1);
    assert_true(st.rss_bytes > 0);
    sw_device_reader_free(r);

    use_fake_nvml("/etc/passwd", NULL); /* not a library at all */
    assert_int_equal(sw_device_reader_new(1, &r), 0);
    assert_non_null(sw_device_gpu_error(r));
    sw_device_reader_free(r);
}

/* ---- the sampler ---- */

static void test_sampler_counters(void **state) {
    (void)state;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    SW_TEST_PROFILER(p, .device_stats = 1, .device_stats_ms = 25);
    assert_int_equal(sw_device_stats_start(p, 25), SW_ESTATE); /* already sampling */
    usleep(100 * 1000);
    sw_snapshot *s = snapshot_with_samples(p, "process_peak_rss_bytes", 4);
    assert_non_null(s);
    const char *always[] = {"cpu_percent",         "cpu_vm_percent",    "cpu_swap_percent",
                            "process_cpu_percent", "process_rss_bytes", "process_peak_rss_bytes"};
    for (size_t i = 0; i < sizeof always / sizeof *always; i++) {
        const sw_counter_summary *c = find_counter(s, always[i]);
        assert_non_null(c);
        assert_true(c->count >= 4); /* each sample records them all */
    }
    assert_true(find_counter(s, "gpu0.utilization_percent")->last == 40);
    assert_true(find_counter(s, "gpu1.utilization_percent")->last == 50);
    assert_true(find_counter(s, "gpu0.power_w")->last == 250);
    assert_true(find_counter(s, "gpu1.power_w")->count == 0); /* never reported */
    assert_true(find_counter(s, "gpu1.memory_total_bytes")->max == 80 * GIB);
    assert_true(find_counter(s, "gpu1.temperature_c")->mean == 61);
    assert_true(find_counter(s, "process_rss_bytes")->last > 1 * MIB);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_sampler_into_run_file(void **state) {
    (void)state;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    char dir[] = "/tmp/sw_device_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.db", dir);
    SW_TEST_PROFILER(p, .run_file = path, .device_stats = 1, .device_stats_ms = 20);
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 10; i++) {
        sw_step_begin(p, 8);
        usleep(10 * 1000);
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    sw_profiler_free(p); /* the last sample lands before the file completes */
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    const sw_counter_summary *util = find_counter(s, "gpu0.utilization_percent");
    assert_non_null(util);
    assert_true(util->count >= 2 && util->mean == 40);
    assert_non_null(find_counter(s, "process_cpu_percent"));
    sw_snapshot_free(s);
    sw_run_close(run);
    unlink(path);
    rmdir(dir);
}

typedef struct source_calls {
    int calls;
    sw_id id;
} source_calls;

static void count_source(void *ctx, sw_profiler *p) {
    source_calls *c = ctx;
    c->calls++;
    sw_counter(p, c->id, (double)c->calls);
}

static void test_sampler_source(void **state) {
    (void)state;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    SW_TEST_PROFILER(p);
    source_calls c = {.id = sw_counter_id(p, "allocated_bytes.all.current")};
    assert_int_equal(sw_device_stats_source(p, count_source, &c), SW_ENOTFOUND);
    assert_int_equal(sw_device_stats_start(p, 20), 0);
    assert_int_equal(sw_device_stats_source(p, count_source, &c), 0);
    sw_snapshot_free(snapshot_with_samples(p, "allocated_bytes.all.current", 3));
    assert_int_equal(sw_device_stats_source(p, NULL, NULL), 0); /* waits for a call running */
    int calls = c.calls;
    assert_true(calls >= 3);
    usleep(80 * 1000);
    assert_int_equal(c.calls, calls); /* removed: no more calls */
    sw_profiler_free(p);
    assert_int_equal(sw_device_stats_start(NULL, 0), SW_EINVAL);
    assert_int_equal(sw_device_stats_source(NULL, NULL, NULL), SW_EINVAL);
}

static void test_sampler_not_in_fork_child(void **state) {
    (void)state;
    use_fake_nvml(SW_FAKE_NVML, NULL);
    SW_TEST_PROFILER(p, .device_stats = 1, .device_stats_ms = 10);
    usleep(30 * 1000);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* No sampler here: the counters stay empty, and freeing joins no thread. */
        usleep(50 * 1000);
        sw_snapshot *s = NULL;
        int bad = sw_snapshot_take(p, &s) != 0 || find_counter(s, "cpu_percent")->count != 0;
        sw_snapshot_free(s);
        sw_profiler_free(p);
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_nvml_said_once),
        cmocka_unit_test(test_reader_without_nvml_says_nothing),
        cmocka_unit_test(test_busy_thread_cpu),
        cmocka_unit_test(test_rss_follows_200_mb),
        cmocka_unit_test(test_system_values_in_range),
        cmocka_unit_test(test_fake_nvml_values),
        cmocka_unit_test(test_cuda_visible_devices),
        cmocka_unit_test(test_nvml_that_fails),
        cmocka_unit_test(test_sampler_counters),
        cmocka_unit_test(test_sampler_into_run_file),
        cmocka_unit_test(test_sampler_source),
        cmocka_unit_test(test_sampler_not_in_fork_child),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
