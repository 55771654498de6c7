/*
 * fake_nvml.c — a stand-in for NVML (libnvidia-ml.so.1) for the device-statistics tests on
 * machines without a GPU (STEPWATCH_NVML points stepwatch at it). Two GPUs with known
 * values: GPU i has utilization 40 + 10 i %, uses (i + 1) GiB of 80 GiB (nvmlDeviceGetMemoryInfo_v2,
 * as nvidia-smi; the v1 query adds the driver's 512 MiB reservation), draws 250 W (GPU 1
 * does not report power), runs at 60 + i degrees; UUIDs GPU-fake-000i.
 * FAKE_NVML_INIT_FAIL=1 makes nvmlInit_v2 fail as without a driver; built with
 * -DFAKE_NVML_INCOMPLETE it lacks nvmlDeviceGetTemperature, as a too old library would.
 * nvmlShutdown calls are counted (fake_nvml_shutdowns). The clock event reasons of every GPU
 * are 0 until fake_nvml_set_clock_reasons sets them (a test's throttled GPU); built with
 * -DFAKE_NVML_INCOMPLETE it has only the old name of that query (...ThrottleReasons).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define NGPUS 2
#define NOT_SUPPORTED 3
#define DRIVER_NOT_LOADED 9
#define GIB (1024ull * 1024 * 1024)

typedef struct {
    unsigned gpu, memory;
} utilization;
typedef struct {
    unsigned long long total, free, used;
} memory;

static int devices[NGPUS] = {0, 1}; /* handles point here */
static int shutdowns;
static unsigned long long clock_reasons;

EXPORT int nvmlInit_v2(void) {
    const char *fail = getenv("FAKE_NVML_INIT_FAIL");
    return fail && fail[0] == '1' ? DRIVER_NOT_LOADED : 0;
}
EXPORT int nvmlShutdown(void) {
    shutdowns++;
    return 0;
}
EXPORT int fake_nvml_shutdowns(void) {
    return shutdowns;
}
EXPORT const char *nvmlErrorString(int rc) {
    return rc == DRIVER_NOT_LOADED ? "Driver Not Loaded" : "Unknown Error";
}
EXPORT int nvmlDeviceGetCount_v2(unsigned *count) {
    *count = NGPUS;
    return 0;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **device) {
    if (i >= NGPUS)
        return 2;
    *device = &devices[i];
    return 0;
}
static int index_of(void *device) {
    return *(int *)device;
}
EXPORT int nvmlDeviceGetUUID(void *device, char *uuid, unsigned length) {
    snprintf(uuid, length, "GPU-fake-%04d", index_of(device));
    return 0;
}
EXPORT int nvmlDeviceGetUtilizationRates(void *device, utilization *u) {
    u->gpu = 40 + 10 * (unsigned)index_of(device);
    u->memory = 5;
    return 0;
}
/* v1 counts the 512 MiB the driver reserves as used; v2 (and nvidia-smi) do not. */
#define RESERVED (512ull * 1024 * 1024)
EXPORT int nvmlDeviceGetMemoryInfo(void *device, memory *m) {
    m->total = 80 * GIB;
    m->used = (unsigned long long)(index_of(device) + 1) * GIB + RESERVED;
    m->free = m->total - m->used;
    return 0;
}
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} memory_v2;
/* FAKE_NVML_NO_V2=1: answers as a driver without the v2 query does. */
EXPORT int nvmlDeviceGetMemoryInfo_v2(void *device, memory_v2 *m) {
    const char *no = getenv("FAKE_NVML_NO_V2");
    if (no && no[0] == '1')
        return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */
    if (m->version != (sizeof(memory_v2) | (2u << 24)))
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m->total = 80 * GIB;
    m->reserved = RESERVED;
    m->used = (unsigned long long)(index_of(device) + 1) * GIB;
    m->free = m->total - m->used - m->reserved;
    return 0;
}
EXPORT int nvmlDeviceGetPowerUsage(void *device, unsigned *milliwatts) {
    if (index_of(device) == 1)
        return NOT_SUPPORTED;
    *milliwatts = 250000;
    return 0;
}
#ifndef FAKE_NVML_INCOMPLETE
EXPORT int nvmlDeviceGetTemperature(void *device, int sensor, unsigned *celsius) {
    (void)sensor;
    *celsius = 60 + (unsigned)index_of(device);
    return 0;
}
#endif

EXPORT void fake_nvml_set_clock_reasons(unsigned long long reasons) {
    clock_reasons = reasons;
}
#ifndef FAKE_NVML_INCOMPLETE
EXPORT int nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *reasons) {
    (void)device;
    *reasons = clock_reasons;
    return 0;
}
#else
EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(void *device, unsigned long long *reasons) {
    (void)device;
    *reasons = clock_reasons;
    return 0;
}
#endif
