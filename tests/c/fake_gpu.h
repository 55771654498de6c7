/*
 * fake_gpu.h — the device tests' hold on the fake CUDA runtime (tests/device/fake_cudart.c,
 * SW_FAKE_CUDART): stepwatch is pointed at it (STEPWATCH_CUDART) and the test gets its
 * controls: queue a kernel, when the GPU will be idle, what the runtime was asked. Include
 * after cmocka.h and test_helpers.h.
 */
#ifndef SW_TEST_FAKE_GPU_H
#define SW_TEST_FAKE_GPU_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static struct {
    void *lib;
    void (*launch)(uint64_t ns);
    uint64_t (*idle_at)(void);
    void (*set_capturing)(int on);
    void (*set_fail_records)(int on);
    void (*set_error)(int error);
    void (*counts)(uint64_t counts[6]);
    int (*peek_error)(void);
    /* streams and the simulated clock */
    void (*launch_on)(void *stream, uint64_t ns);
    void (*wait_for)(void *stream, void *other);
    void (*simulate)(int on);
    void (*advance)(uint64_t ns);
    uint64_t (*now)(void);
} gpu;

/* fake_gpu_counts' order */
enum { SYNCS, RECORDS, QUERIES, CREATED, DESTROYED, INVALIDATED };

/* cmocka's group setup: stepwatch loads the fake runtime; gpu holds its controls. */
static int fake_gpu_setup(void **state) {
    (void)state;
    setenv("STEPWATCH_CUDART", SW_FAKE_CUDART, 1);
    gpu.lib = dlopen(SW_FAKE_CUDART, RTLD_NOW);
    assert_non_null(gpu.lib);
    *(void **)&gpu.launch = dlsym(gpu.lib, "fake_gpu_launch");
    *(void **)&gpu.idle_at = dlsym(gpu.lib, "fake_gpu_idle_at");
    *(void **)&gpu.set_capturing = dlsym(gpu.lib, "fake_gpu_set_capturing");
    *(void **)&gpu.set_fail_records = dlsym(gpu.lib, "fake_gpu_set_fail_records");
    *(void **)&gpu.set_error = dlsym(gpu.lib, "fake_gpu_set_error");
    *(void **)&gpu.counts = dlsym(gpu.lib, "fake_gpu_counts");
    *(void **)&gpu.peek_error = dlsym(gpu.lib, "cudaPeekAtLastError");
    *(void **)&gpu.launch_on = dlsym(gpu.lib, "fake_gpu_launch_on");
    *(void **)&gpu.wait_for = dlsym(gpu.lib, "fake_gpu_wait_for");
    *(void **)&gpu.simulate = dlsym(gpu.lib, "fake_gpu_simulate");
    *(void **)&gpu.advance = dlsym(gpu.lib, "fake_gpu_advance");
    *(void **)&gpu.now = dlsym(gpu.lib, "fake_gpu_now");
    return 0;
}

/* One of the runtime's counts (SYNCS, RECORDS, ...). */
static uint64_t count(int which) {
    uint64_t c[6];
    gpu.counts(c);
    return c[which];
}

static void sleep_until(uint64_t monotonic_ns) {
    struct timespec ts = {.tv_sec = (time_t)(monotonic_ns / 1000000000u),
                          .tv_nsec = (long)(monotonic_ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

#endif /* SW_TEST_FAKE_GPU_H */
