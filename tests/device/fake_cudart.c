/*
 * fake_cudart.c — a stand-in for the CUDA runtime's event API, for the device-time tests on
 * machines without a GPU (STEPWATCH_CUDART points stepwatch at it).
 *
 * It models one stream on a GPU that runs in real time: fake_gpu_launch(ns) queues a kernel
 * of ns behind what is queued; an event recorded now completes when the GPU reaches it
 * (max(now, end of the queue)). Queries and elapsed times answer from the clock, with the
 * runtime's rules: cudaErrorNotReady (600) for an event not reached, kept as the last error
 * until cudaGetLastError reads it. The synchronizing calls exist and count their calls, so a
 * test proves stepwatch never makes one; so are queries made during a capture outside
 * relaxed capture mode (what would invalidate the program's CUDA graph). Signatures as cuda_runtime_api.h declares them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define NOT_READY 600

typedef struct fake_event {
    int recorded;
    uint64_t at_ns; /* when the GPU reaches it */
} fake_event;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* This thread's capture mode (cudaStreamCaptureModeGlobal 0, ThreadLocal 1, Relaxed 2). A
 * query while a capture is under way and the thread's mode is not relaxed is what the real
 * runtime refuses and invalidates the capture for: counted, so a test proves it never
 * happens. */
static _Thread_local int capture_mode;
static uint64_t invalidated;
static uint64_t queue_end_ns; /* when the queued work is done */
static int last_error, capturing, fail_records;
static uint64_t syncs, records, queries, created, destroyed;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(int error) {
    last_error = error;
    return error;
}

/* ---- the runtime's calls ---- */

EXPORT int cudaEventCreateWithFlags(void **event, unsigned flags) {
    (void)flags;
    *event = calloc(1, sizeof(fake_event));
    pthread_mutex_lock(&lock);
    created++;
    pthread_mutex_unlock(&lock);
    return *event ? 0 : 2;
}

EXPORT int cudaEventRecord(void *event, void *stream) {
    (void)stream;
    fake_event *e = event;
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (fail_records) {
        rc = fail(1);
    } else {
        uint64_t now = now_ns();
        e->at_ns = queue_end_ns > now ? queue_end_ns : now;
        e->recorded = 1;
        records++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A query during a capture outside relaxed mode: the capture is invalidated (lock held). */
static void check_capture_rules(void) {
    if (capturing && capture_mode != 2)
        invalidated++;
}

EXPORT int cudaThreadExchangeStreamCaptureMode(int *mode) {
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return 0;
}

EXPORT int cudaEventQuery(void *event) {
    fake_event *e = event;
    pthread_mutex_lock(&lock);
    check_capture_rules();
    queries++;
    int rc = e->recorded && now_ns() >= e->at_ns ? 0 : fail(NOT_READY);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT int cudaEventElapsedTime(float *ms, void *start, void *end) {
    fake_event *a = start, *b = end;
    pthread_mutex_lock(&lock);
    check_capture_rules();
    uint64_t now = now_ns();
    int rc = 0;
    if (!a->recorded || !b->recorded || now < a->at_ns || now < b->at_ns)
        rc = fail(NOT_READY);
    else
        *ms = (float)((double)((int64_t)(b->at_ns - a->at_ns)) / 1e6);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT int cudaEventDestroy(void *event) {
    free(event);
    pthread_mutex_lock(&lock);
    destroyed++;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cudaStreamIsCapturing(void *stream, int *status) {
    (void)stream;
    *status = capturing;
    return 0;
}

EXPORT int cudaGetLastError(void) {
    pthread_mutex_lock(&lock);
    int rc = last_error;
    last_error = 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT int cudaPeekAtLastError(void) {
    return last_error;
}

static int count_sync(void) {
    pthread_mutex_lock(&lock);
    syncs++;
    pthread_mutex_unlock(&lock);
    return 0;
}
EXPORT int cudaEventSynchronize(void *event) {
    (void)event;
    return count_sync();
}
EXPORT int cudaStreamSynchronize(void *stream) {
    (void)stream;
    return count_sync();
}
EXPORT int cudaDeviceSynchronize(void) {
    return count_sync();
}

/* ---- the test's controls ---- */

/* Queue a kernel of ns on the stream (the GPU starts it when it is free). */
EXPORT void fake_gpu_launch(uint64_t ns) {
    pthread_mutex_lock(&lock);
    uint64_t now = now_ns();
    queue_end_ns = (queue_end_ns > now ? queue_end_ns : now) + ns;
    pthread_mutex_unlock(&lock);
}

/* When the GPU will have run everything queued so far (CLOCK_MONOTONIC ns). */
EXPORT uint64_t fake_gpu_idle_at(void) {
    return queue_end_ns;
}

EXPORT void fake_gpu_set_capturing(int on) {
    capturing = on ? 1 : 0;
}
EXPORT void fake_gpu_set_fail_records(int on) {
    fail_records = on;
}
EXPORT void fake_gpu_set_error(int error) {
    last_error = error;
}

/* counts[0..5]: synchronizing calls, records, queries, events created, events destroyed,
 * captures a query would have invalidated. */
EXPORT void fake_gpu_counts(uint64_t counts[6]) {
    pthread_mutex_lock(&lock);
    counts[5] = invalidated;
    counts[0] = syncs;
    counts[1] = records;
    counts[2] = queries;
    counts[3] = created;
    counts[4] = destroyed;
    pthread_mutex_unlock(&lock);
}
