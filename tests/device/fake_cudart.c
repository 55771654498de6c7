/*
 * fake_cudart.c — a stand-in for the CUDA runtime's event API, for the device-time tests on
 * machines without a GPU (STEPWATCH_CUDART points stepwatch at it).
 *
 * It models a GPU whose streams run side by side: fake_gpu_launch_on(stream, ns) queues a
 * kernel of ns behind what that stream has queued (fake_gpu_launch: on the default stream,
 * NULL); an event recorded on a stream now completes when that stream reaches it (max(now,
 * end of its queue)), so elapsed times between events on different streams are the
 * difference of their times. The GPU's clock is real time (CLOCK_MONOTONIC), or, after
 * fake_gpu_simulate(1), a simulated clock the test moves (fake_gpu_advance): kernels of
 * known durations then overlap across streams at known times, and every elapsed time is
 * exact whatever the host's load. Queries and elapsed times answer from the clock, with the
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
/* The streams seen, each with when its queued work is done; stream[0] is the default one
 * (NULL). More than MAX_STREAMS distinct streams share the last slot. */
#define MAX_STREAMS 16
static void *stream_handle[MAX_STREAMS];
static uint64_t stream_end_ns[MAX_STREAMS];
static int nstreams = 1;
static int simulated; /* the GPU's clock is sim_now_ns, not CLOCK_MONOTONIC */
static uint64_t sim_now_ns;
static int last_error, capturing, fail_records;
static uint64_t syncs, records, queries, created, destroyed;

static uint64_t now_ns(void) {
    if (simulated)
        return sim_now_ns;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The slot of a stream (lock held). */
static int slot_of(void *stream) {
    for (int i = 0; i < nstreams; i++)
        if (stream_handle[i] == stream)
            return i;
    if (nstreams == MAX_STREAMS)
        return MAX_STREAMS - 1;
    stream_handle[nstreams] = stream;
    stream_end_ns[nstreams] = 0;
    return nstreams++;
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
    fake_event *e = event;
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (fail_records) {
        rc = fail(1);
    } else {
        uint64_t now = now_ns(), end = stream_end_ns[slot_of(stream)];
        e->at_ns = end > now ? end : now;
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

/* Queue a kernel of ns on stream (the stream starts it once its earlier work is done). */
EXPORT void fake_gpu_launch_on(void *stream, uint64_t ns) {
    pthread_mutex_lock(&lock);
    uint64_t now = now_ns(), *end = &stream_end_ns[slot_of(stream)];
    *end = (*end > now ? *end : now) + ns;
    pthread_mutex_unlock(&lock);
}

/* Queue a kernel of ns on the default stream. */
EXPORT void fake_gpu_launch(uint64_t ns) {
    fake_gpu_launch_on(NULL, ns);
}

/* stream waits, before its next work, for what other has queued so far (cudaStreamWaitEvent
 * of an event recorded on other now): a collective's stream waiting for the compute, or
 * the compute stream waiting for a collective. */
EXPORT void fake_gpu_wait_for(void *stream, void *other) {
    pthread_mutex_lock(&lock);
    uint64_t theirs = stream_end_ns[slot_of(other)], *end = &stream_end_ns[slot_of(stream)];
    if (theirs > *end)
        *end = theirs;
    pthread_mutex_unlock(&lock);
}

/* When the GPU will have run everything queued so far on every stream (ns of its clock). */
EXPORT uint64_t fake_gpu_idle_at(void) {
    pthread_mutex_lock(&lock);
    uint64_t at = 0;
    for (int i = 0; i < nstreams; i++)
        at = stream_end_ns[i] > at ? stream_end_ns[i] : at;
    pthread_mutex_unlock(&lock);
    return at;
}

/* on: the GPU's clock becomes a simulated one at 0, every stream idle, moved only by
 * fake_gpu_advance; off: real time again (every stream idle). */
EXPORT void fake_gpu_simulate(int on) {
    pthread_mutex_lock(&lock);
    simulated = on != 0;
    sim_now_ns = 0;
    for (int i = 0; i < nstreams; i++)
        stream_end_ns[i] = 0;
    pthread_mutex_unlock(&lock);
}

/* The simulated clock moves ns forward (the GPU runs what is queued meanwhile). */
EXPORT void fake_gpu_advance(uint64_t ns) {
    pthread_mutex_lock(&lock);
    sim_now_ns += ns;
    pthread_mutex_unlock(&lock);
}

/* The GPU's clock now (simulated, or CLOCK_MONOTONIC ns). */
EXPORT uint64_t fake_gpu_now(void) {
    pthread_mutex_lock(&lock);
    uint64_t now = now_ns();
    pthread_mutex_unlock(&lock);
    return now;
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
