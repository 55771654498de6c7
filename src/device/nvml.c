/*
 * nvml.c — GPU utilization, memory, power and temperature through NVML, loaded with dlopen.
 *
 * NVML ships with the NVIDIA driver (libnvidia-ml.so.1), so a machine with a GPU has it and
 * one without has nothing to report: it is never a build dependency. The few functions used
 * are declared here with NVML's documented signatures (nvml.h, stable since CUDA 8).
 *
 * Which GPUs: NVML numbers every GPU of the machine; a process sees those that
 * CUDA_VISIBLE_DEVICES lists (indices or GPU-UUID prefixes), in that order, so gpu0 here is
 * what torch calls cuda:0. Indices are taken as NVML's (they agree with CUDA's when
 * CUDA_DEVICE_ORDER=PCI_BUS_ID, the usual cluster setting). As CUDA does, the list stops at
 * its first entry that names no GPU.
 */
#include "device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_return; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device;
typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used; /* bytes; used counts the driver's reservation */
} nvml_memory;
typedef struct {
    unsigned int version;                           /* NVML_MEMORY_V2 */
    unsigned long long total, reserved, free, used; /* bytes; used as nvidia-smi shows it */
} nvml_memory_v2;
/* NVML_STRUCT_VERSION(Memory, 2): the struct's size and its version in the top byte. */
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvml_memory_v2) | (2u << 24)))

#define NVML_TEMPERATURE_GPU 0
#define NVML_UUID_SIZE 96

struct sw__nvml {
    void *lib;
    nvml_return (*shutdown)(void);
    const char *(*error_string)(nvml_return);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*memory_v2)(nvml_device, nvml_memory_v2 *);         /* NULL before driver 510 */
    nvml_return (*power)(nvml_device, unsigned int *);               /* milliwatts */
    nvml_return (*temperature)(nvml_device, int, unsigned int *);    /* degrees C */
    nvml_return (*clock_reasons)(nvml_device, unsigned long long *); /* NULL: not read */
    int count;
    nvml_device devices[SW_MAX_GPUS];
};

/* The GPUs CUDA_VISIBLE_DEVICES names, in its order (all of them when it is unset). */
static void pick_devices(sw__nvml *n, unsigned total,
                         nvml_return (*by_index)(unsigned, nvml_device *),
                         nvml_return (*uuid)(nvml_device, char *, unsigned)) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible == NULL) {
        for (unsigned i = 0; i < total && n->count < SW_MAX_GPUS; i++)
            if (by_index(i, &n->devices[n->count]) == 0)
                n->count++;
        return;
    }
    const char *at = visible;
    while (*at != '\0' && n->count < SW_MAX_GPUS) {
        size_t len = strcspn(at, ",");
        char entry[NVML_UUID_SIZE];
        snprintf(entry, sizeof entry, "%.*s", (int)len, at);
        nvml_device found = NULL;
        char *end;
        unsigned long index = strtoul(entry, &end, 10);
        if (end != entry && *end == '\0') {
            if (index >= total || by_index((unsigned)index, &found) != 0)
                found = NULL;
        } else if (strncmp(entry, "GPU-", 4) == 0) {
            for (unsigned i = 0; i < total && found == NULL; i++) {
                nvml_device d;
                char id[NVML_UUID_SIZE];
                if (by_index(i, &d) == 0 && uuid(d, id, sizeof id) == 0 &&
                    strncmp(id, entry, strlen(entry)) == 0)
                    found = d;
            }
        }
        if (found == NULL)
            return; /* CUDA ignores the rest of the list */
        n->devices[n->count++] = found;
        at += len;
        if (*at == ',')
            at++;
    }
}

static void close_lib(sw__nvml *n) {
    if (n->lib)
        dlclose(n->lib);
    free(n);
}

int sw__nvml_open(sw__nvml **out, char *why, size_t why_size) {
    *out = NULL;
    const char *path = getenv("STEPWATCH_NVML");
    if (path == NULL || path[0] == '\0')
        path = "libnvidia-ml.so.1";
    sw__nvml *n = calloc(1, sizeof *n);
    if (n == NULL) {
        snprintf(why, why_size, "out of memory");
        return SW_ENOMEM;
    }
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (n->lib == NULL) {
        snprintf(why, why_size, "%s", dlerror());
        close_lib(n);
        return SW_EUNSUPPORTED;
    }
    nvml_return (*init)(void) = (nvml_return(*)(void))dlsym(n->lib, "nvmlInit_v2");
    nvml_return (*count)(unsigned *) = (nvml_return(*)(unsigned *))dlsym(n->lib,
                                                                         "nvmlDeviceGetCount_v2");
    nvml_return (*by_index)(unsigned, nvml_device *) = (nvml_return(*)(
        unsigned, nvml_device *))dlsym(n->lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_return (*uuid)(nvml_device, char *, unsigned) = (nvml_return(*)(
        nvml_device, char *, unsigned))dlsym(n->lib, "nvmlDeviceGetUUID");
    n->shutdown = (nvml_return(*)(void))dlsym(n->lib, "nvmlShutdown");
    n->error_string = (const char *(*)(nvml_return))dlsym(n->lib, "nvmlErrorString");
    n->utilization = (nvml_return(*)(nvml_device, nvml_utilization *))dlsym(
        n->lib, "nvmlDeviceGetUtilizationRates");
    n->memory = (nvml_return(*)(nvml_device, nvml_memory *))dlsym(n->lib,
                                                                  "nvmlDeviceGetMemoryInfo");
    n->memory_v2 = (nvml_return(*)(nvml_device, nvml_memory_v2 *))dlsym(
        n->lib, "nvmlDeviceGetMemoryInfo_v2");
    n->power = (nvml_return(*)(nvml_device, unsigned *))dlsym(n->lib, "nvmlDeviceGetPowerUsage");
    n->temperature = (nvml_return(*)(nvml_device, int, unsigned *))dlsym(
        n->lib, "nvmlDeviceGetTemperature");
    /* Why the clocks are low (the slow steps' "throttled"): the name since driver 535, the
     * old one before; optional, as the statistics do not need it. */
    n->clock_reasons = (nvml_return(*)(nvml_device, unsigned long long *))dlsym(
        n->lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (n->clock_reasons == NULL)
        n->clock_reasons = (nvml_return(*)(nvml_device, unsigned long long *))dlsym(
            n->lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!init || !count || !by_index || !uuid || !n->shutdown || !n->error_string ||
        !n->utilization || !n->memory || !n->power || !n->temperature) {
        snprintf(why, why_size, "%s lacks an NVML function this needs", path);
        close_lib(n);
        return SW_EUNSUPPORTED;
    }
    nvml_return rc = init();
    if (rc != 0) {
        snprintf(why, why_size, "NVML did not start: %s", n->error_string(rc));
        close_lib(n);
        return SW_EUNSUPPORTED;
    }
    unsigned total = 0;
    rc = count(&total);
    if (rc == 0)
        pick_devices(n, total, by_index, uuid);
    if (n->count == 0) {
        snprintf(why, why_size, "NVML finds no GPU%s",
                 getenv("CUDA_VISIBLE_DEVICES") ? " that CUDA_VISIBLE_DEVICES names" : "");
        n->shutdown();
        close_lib(n);
        return SW_EUNSUPPORTED;
    }
    *out = n;
    return 0;
}

int sw__nvml_count(const sw__nvml *n) {
    return n ? n->count : 0;
}

/* Memory used and total: the v2 query where the driver has it (used without the memory the
 * driver reserves, as nvidia-smi shows it), else v1 (used includes that reservation). */
static void read_memory(sw__nvml *n, nvml_device d, sw_gpu_stats *g) {
    nvml_memory_v2 m2 = {.version = NVML_MEMORY_V2};
    nvml_memory m;
    if (n->memory_v2 != NULL && n->memory_v2(d, &m2) == 0) {
        g->memory_used_bytes = (double)m2.used;
        g->memory_total_bytes = (double)m2.total;
    } else if (n->memory(d, &m) == 0) {
        g->memory_used_bytes = (double)m.used;
        g->memory_total_bytes = (double)m.total;
    } else {
        g->memory_used_bytes = g->memory_total_bytes = -1;
    }
}

void sw__nvml_read(sw__nvml *n, sw_gpu_stats *gpus, int count) {
    for (int i = 0; i < count && i < n->count; i++) {
        sw_gpu_stats *g = &gpus[i];
        nvml_utilization u;
        unsigned mw, celsius;
        g->utilization_percent = n->utilization(n->devices[i], &u) == 0 ? (double)u.gpu : -1;
        read_memory(n, n->devices[i], g);
        g->power_w = n->power(n->devices[i], &mw) == 0 ? mw / 1000.0 : -1;
        g->temperature_c = n->temperature(n->devices[i], NVML_TEMPERATURE_GPU, &celsius) == 0
                               ? (double)celsius
                               : -1;
    }
}

uint64_t sw__nvml_clock_reasons(sw__nvml *n) {
    uint64_t all = 0;
    for (int i = 0; n->clock_reasons != NULL && i < n->count; i++) {
        unsigned long long reasons = 0;
        if (n->clock_reasons(n->devices[i], &reasons) == 0)
            all |= reasons;
    }
    return all;
}

void sw__nvml_close(sw__nvml *n) {
    if (n == NULL)
        return;
    n->shutdown();
    close_lib(n);
}
