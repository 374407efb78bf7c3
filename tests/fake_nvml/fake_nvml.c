/*
 * A fake libnvidia-ml.so.1 for gpusched's tests: exports the NVML functions
 * the NVML backend calls, with NVML's signatures and struct layouts, and
 * answers from a state file that the test rewrites while the scheduler runs.
 *
 * Build: cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 * State file: the path in $FAKE_NVML_STATE, re-read on every call:
 *
 *   init ok | driver_not_loaded | no_permission   (default ok)
 *   host ok | driver_not_loaded | version_mismatch
 *                                         every call fails so (a driver
 *                                         unloaded or updated under us)
 *   count <n>                             nvmlDeviceGetCount says n
 *                                         (a GPU gone from the bus)
 *   count unknown                         nvmlDeviceGetCount fails with
 *                                         NVML_ERROR_UNKNOWN
 *   gpu <uuid> <total MiB> <external used MiB> <util %> [fail|reset|unknown]
 *   proc <gpu index> <pid> <MiB>          a process with known memory
 *   proc <gpu index> <pid> na <MiB>       memory NVML cannot report
 *   topo <a> <b> <level>                  PCIe distance of GPUs a and b:
 *                                         internal, single, multiple,
 *                                         hostbridge (the default), node,
 *                                         system (nvmlGpuTopologyLevel_t)
 *   nvlink <a> <b> <n>                    n active NVLinks between a and b
 *   xid <gpu index> <code>                a critical XID error event
 *                                         (nvmlEventTypeXidCriticalError),
 *                                         delivered once, in file order
 *   attr <gpu index> <key> <on|off>       persistence (default on), ecc,
 *                                         pages_pending, mig (default: not
 *                                         supported, as on consumer boards)
 *   mig <gpu index> <uuid> <profile> <total MiB> [<gi> <ci>]
 *                                         a MIG instance of a GPU in MIG
 *                                         mode (MIG device indices in file
 *                                         order; GPU/compute instance ids
 *                                         default to index + 1 and 0)
 *   proc <gpu>:<mig> <pid> <MiB>          a process on MIG device <mig>
 *   putil <gpu index> <pid> <sm %>        a process's own SM utilisation
 *                                         (nvmlDeviceGetProcessUtilization:
 *                                         one sample per call, stamped with
 *                                         the call's time, so it holds
 *                                         steady); a GPU with no putil line
 *                                         answers NVML_ERROR_NOT_SUPPORTED
 *   putil <gpu index> none                the GPU reports per process, and
 *                                         no process computes: NVML's
 *                                         NVML_ERROR_NOT_FOUND
 *   driver <version>                      the driver version (default
 *                                         999.0-fake)
 *
 * The state is per thread (__thread), as a program may call NVML from
 * several threads (gpusched waits for events on one of its own).
 *
 * GPU i sits on PCI bus 0x10 * (i + 1). A GPU without NVLinks answers
 * NVML_ERROR_NOT_SUPPORTED for its links, as PCIe-only boards do; one with
 * links has NVML_NVLINK_MAX_LINKS (18) of them, the unused ones inactive.
 *
 * A MIG device handle is 0x1000 + 16 * GPU + MIG device index; as with a
 * real driver, it answers name, UUID, memory, processes and the MIG
 * queries, NVML_ERROR_NOT_SUPPORTED for utilization, and
 * NVML_ERROR_INVALID_ARGUMENT elsewhere. A GPU in MIG mode answers
 * nvmlDeviceGetMaxMigDeviceCount with 7 and NVML_ERROR_NOT_FOUND for a MIG
 * device index without an instance; its own process list holds its
 * instances' processes, with their GPU and compute instance ids.
 *
 * GPUs are numbered by their order in the file. A device's used memory is
 * its external MiB plus its processes' MiB. "fail" makes every query of
 * that device, its handle lookup included, return NVML_ERROR_GPU_IS_LOST
 * as a GPU that fell off the bus does; "reset" NVML_ERROR_RESET_REQUIRED;
 * "unknown" NVML_ERROR_UNKNOWN (nvml.h, nvmlReturn_t).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_RESET_REQUIRED 16
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_UNKNOWN 999
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define MIB (1024ULL * 1024ULL)
#define MAX_GPUS 16
#define MAX_PROCS 256
#define MAX_LINKS 18
#define MAX_TOPO 128
#define MAX_MIG 7
#define MIG_HANDLE 0x1000
#define NVML_ERROR_NOT_FOUND 6

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

struct mig {
    char uuid[96];
    char profile[32];
    unsigned long long total_mib;
    unsigned int gi, ci;
};
struct gpu {
    char uuid[96];
    struct mig migs[MAX_MIG];
    unsigned int mig_count;
    unsigned long long total_mib, external_mib;
    unsigned int util;
    nvmlReturn_t fail;
    int links; /* NVLinks in use, each to remote[k] */
    int persistence, ecc, pages_pending, mig; /* 1 on, 0 off, -1 not supported */
    unsigned int remote[MAX_LINKS];
    unsigned long long affinity; /* CPUs 0-63 nearest it; 0: not supported */
    int putil; /* reports per-process utilisation (a putil line names it) */
};
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

struct topo {
    unsigned int a, b, level;
};
struct proc {
    unsigned int gpu, pid;
    int mig; /* MIG device index, -1 for the GPU itself */
    int known;
    unsigned long long mib;
};

static __thread char init_mode[96];
static __thread char host_mode[96];
static __thread char driver_version[96];
static __thread struct gpu gpus[MAX_GPUS];
static __thread unsigned int gpu_count;
static __thread int counted; /* -1: the number of gpu lines; -2: the count fails */
static __thread struct proc procs[MAX_PROCS];
static __thread unsigned int proc_count;
static __thread struct topo topos[MAX_TOPO];
static __thread unsigned int topo_count;
struct putil {
    unsigned int gpu, pid, sm;
};
static __thread struct putil putils[MAX_PROCS];
static __thread unsigned int putil_count;

static unsigned int topo_level(const char *word) {
    if (strcmp(word, "internal") == 0) return 0;
    if (strcmp(word, "single") == 0) return 10;
    if (strcmp(word, "multiple") == 0) return 20;
    if (strcmp(word, "node") == 0) return 40;
    if (strcmp(word, "system") == 0) return 50;
    return 30;
}

static void add_links(unsigned int a, unsigned int b, int n) {
    for (int k = 0; k < n && gpus[a].links < MAX_LINKS; k++) gpus[a].remote[gpus[a].links++] = b;
}

static void load_state(void) {
    strcpy(init_mode, "ok");
    strcpy(host_mode, "ok");
    strcpy(driver_version, "999.0-fake");
    counted = -1;
    gpu_count = 0;
    proc_count = 0;
    topo_count = 0;
    putil_count = 0;
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char word[32] = "", a[96] = "", b[96] = "", c[32] = "", d[32] = "", e[32] = "", f6[32] = "";
        int n = sscanf(line, "%31s %95s %95s %31s %31s %31s %31s", word, a, b, c, d, e, f6);
        if (n >= 2 && strcmp(word, "init") == 0) {
            snprintf(init_mode, sizeof init_mode, "%s", a);
        } else if (n >= 2 && strcmp(word, "driver") == 0) {
            snprintf(driver_version, sizeof driver_version, "%s", a);
        } else if (n >= 5 && strcmp(word, "mig") == 0) {
            unsigned int x = (unsigned int)strtoul(a, NULL, 10);
            if (x < gpu_count && gpus[x].mig_count < MAX_MIG) {
                unsigned int m = gpus[x].mig_count++;
                struct mig *instance = &gpus[x].migs[m];
                snprintf(instance->uuid, sizeof instance->uuid, "%s", b);
                snprintf(instance->profile, sizeof instance->profile, "%s", c);
                instance->total_mib = strtoull(d, NULL, 10);
                instance->gi = n >= 6 ? (unsigned int)strtoul(e, NULL, 10) : m + 1;
                instance->ci = n >= 7 ? (unsigned int)strtoul(f6, NULL, 10) : 0;
            }
        } else if (n >= 2 && strcmp(word, "host") == 0) {
            snprintf(host_mode, sizeof host_mode, "%s", a);
        } else if (n >= 2 && strcmp(word, "count") == 0) {
            counted = strcmp(a, "unknown") == 0 ? -2 : atoi(a);
        } else if (n >= 5 && strcmp(word, "gpu") == 0 && gpu_count < MAX_GPUS) {
            struct gpu *g = &gpus[gpu_count++];
            g->links = 0;
            g->affinity = 0;
            g->putil = 0;
            g->mig_count = 0;
            g->persistence = 1;
            g->ecc = g->pages_pending = g->mig = -1;
            snprintf(g->uuid, sizeof g->uuid, "%s", a);
            g->total_mib = strtoull(b, NULL, 10);
            g->external_mib = strtoull(c, NULL, 10);
            g->util = (unsigned int)strtoul(d, NULL, 10);
            g->fail = NVML_SUCCESS;
            if (n >= 6 && strcmp(e, "fail") == 0) g->fail = NVML_ERROR_GPU_IS_LOST;
            if (n >= 6 && strcmp(e, "reset") == 0) g->fail = NVML_ERROR_RESET_REQUIRED;
            if (n >= 6 && strcmp(e, "unknown") == 0) g->fail = NVML_ERROR_UNKNOWN;
        } else if (n >= 4 && strcmp(word, "topo") == 0 && topo_count < MAX_TOPO) {
            struct topo *t = &topos[topo_count++];
            t->a = (unsigned int)strtoul(a, NULL, 10);
            t->b = (unsigned int)strtoul(b, NULL, 10);
            t->level = topo_level(c);
        } else if (n >= 4 && strcmp(word, "attr") == 0) {
            unsigned int x = (unsigned int)strtoul(a, NULL, 10);
            int on = strcmp(c, "on") == 0;
            if (x < gpu_count) {
                if (strcmp(b, "persistence") == 0) gpus[x].persistence = on;
                if (strcmp(b, "ecc") == 0) gpus[x].ecc = on;
                if (strcmp(b, "pages_pending") == 0) gpus[x].pages_pending = on;
                if (strcmp(b, "mig") == 0) gpus[x].mig = on;
            }
        } else if (n >= 3 && strcmp(word, "affinity") == 0) {
            /* affinity GPU CPU: CPU (below 64) is near GPU */
            unsigned int x = (unsigned int)strtoul(a, NULL, 10), cpu = (unsigned int)strtoul(b, NULL, 10);
            if (x < gpu_count && cpu < 64) gpus[x].affinity |= 1ULL << cpu;
        } else if (n >= 4 && strcmp(word, "nvlink") == 0) {
            unsigned int x = (unsigned int)strtoul(a, NULL, 10), y = (unsigned int)strtoul(b, NULL, 10);
            if (x < gpu_count && y < gpu_count && x != y) {
                add_links(x, y, atoi(c));
                add_links(y, x, atoi(c));
            }
        } else if (n >= 3 && strcmp(word, "putil") == 0) {
            unsigned int x = (unsigned int)strtoul(a, NULL, 10);
            if (x < gpu_count) {
                gpus[x].putil = 1;
                if (n >= 4 && strcmp(b, "none") != 0 && putil_count < MAX_PROCS) {
                    struct putil *u = &putils[putil_count++];
                    u->gpu = x;
                    u->pid = (unsigned int)strtoul(b, NULL, 10);
                    u->sm = (unsigned int)strtoul(c, NULL, 10);
                }
            }
        } else if (n >= 4 && strcmp(word, "proc") == 0 && proc_count < MAX_PROCS) {
            struct proc *p = &procs[proc_count++];
            char *colon = strchr(a, ':');
            p->gpu = (unsigned int)strtoul(a, NULL, 10);
            p->mig = colon ? atoi(colon + 1) : -1;
            p->pid = (unsigned int)strtoul(b, NULL, 10);
            p->known = strcmp(c, "na") != 0;
            p->mib = strtoull(p->known ? c : d, NULL, 10);
        }
    }
    fclose(f);
}

/* What every call returns while the host's driver is broken. */
static nvmlReturn_t host_status(void) {
    if (strcmp(host_mode, "driver_not_loaded") == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (strcmp(host_mode, "version_mismatch") == 0) return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    return NVML_SUCCESS;
}

static unsigned int device_count(void) {
    return counted >= 0 && (unsigned int)counted < gpu_count ? (unsigned int)counted : gpu_count;
}

/* Device handles are 1-based indices disguised as pointers. */
static nvmlReturn_t lookup(nvmlDevice_t device, unsigned int *index) {
    uintptr_t i = (uintptr_t)device;
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    if (i == 0 || i > device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)(i - 1);
    return gpus[i - 1].fail;
}

/* A MIG device handle's GPU and MIG device index; the GPU's own status. */
static nvmlReturn_t lookup_mig(nvmlDevice_t device, unsigned int *gpu, unsigned int *mig) {
    uintptr_t h = (uintptr_t)device;
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    if (h < MIG_HANDLE) return NVML_ERROR_INVALID_ARGUMENT;
    *gpu = (unsigned int)((h - MIG_HANDLE) / 16);
    *mig = (unsigned int)((h - MIG_HANDLE) % 16);
    if (*gpu >= device_count() || gpus[*gpu].mig != 1 || *mig >= gpus[*gpu].mig_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return gpus[*gpu].fail;
}

static int is_mig_handle(nvmlDevice_t device) { return (uintptr_t)device >= MIG_HANDLE; }

/* MiB the processes on GPU i (mig -1) or on its MIG device mig use. */
static unsigned long long procs_mib(unsigned int i, int mig) {
    unsigned long long used = 0;
    for (unsigned int p = 0; p < proc_count; p++)
        if (procs[p].gpu == i && (mig < 0 || procs[p].mig == mig))
            used += procs[p].mib;
    return used;
}

#define LOOKUP_MIG(device)                                   \
    unsigned int mg, mm;                                     \
    nvmlReturn_t mstatus = lookup_mig((device), &mg, &mm);   \
    if (mstatus != NVML_SUCCESS) return mstatus;             \
    struct mig *instance = &gpus[mg].migs[mm];

#define LOOKUP(device)                           \
    unsigned int i;                              \
    nvmlReturn_t status = lookup((device), &i);  \
    if (status != NVML_SUCCESS) return status;   \
    struct gpu *g = &gpus[i];                    \
    (void)g;

nvmlReturn_t nvmlInit_v2(void) {
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    if (strcmp(init_mode, "driver_not_loaded") == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (strcmp(init_mode, "no_permission") == 0) return NVML_ERROR_NO_PERMISSION;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    snprintf(version, length, "%s", driver_version);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    if (counted == -2) return NVML_ERROR_UNKNOWN;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    if (index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpus[index].fail != NVML_SUCCESS) return gpus[index].fail;
    *device = (nvmlDevice_t)(uintptr_t)(index + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (is_mig_handle(device)) {
        LOOKUP_MIG(device);
        snprintf(name, length, "Fake NVIDIA GPU MIG %s", instance->profile);
        return NVML_SUCCESS;
    }
    LOOKUP(device);
    snprintf(name, length, "%s", "Fake NVIDIA GPU");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (is_mig_handle(device)) {
        LOOKUP_MIG(device);
        snprintf(uuid, length, "%s", instance->uuid);
        return NVML_SUCCESS;
    }
    LOOKUP(device);
    snprintf(uuid, length, "%s", g->uuid);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    unsigned int expected = (unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24));
    if (memory->version != expected) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig_handle(device)) {
        LOOKUP_MIG(device);
        unsigned long long used = procs_mib(mg, (int)mm);
        memory->total = instance->total_mib * MIB;
        memory->used = used * MIB;
        memory->reserved = 0;
        memory->free = used < instance->total_mib ? (instance->total_mib - used) * MIB : 0;
        return NVML_SUCCESS;
    }
    LOOKUP(device);
    unsigned long long used = g->external_mib;
    for (unsigned int p = 0; p < proc_count; p++)
        if (procs[p].gpu == i) used += procs[p].mib;
    memory->total = g->total_mib * MIB;
    memory->used = used * MIB;
    memory->reserved = 0;
    memory->free = used < g->total_mib ? (g->total_mib - used) * MIB : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    if (is_mig_handle(device)) {
        LOOKUP_MIG(device);
        (void)instance;
        return NVML_ERROR_NOT_SUPPORTED;
    }
    LOOKUP(device);
    utilization->gpu = g->util;
    utilization->memory = g->util / 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    unsigned int i;
    int mig = -1; /* the processes of this MIG device only, or all the GPU's */
    if (is_mig_handle(device)) {
        unsigned int mm;
        nvmlReturn_t status = lookup_mig(device, &i, &mm);
        if (status != NVML_SUCCESS) return status;
        mig = (int)mm;
    } else {
        nvmlReturn_t status = lookup(device, &i);
        if (status != NVML_SUCCESS) return status;
    }
    unsigned int n = 0;
    for (unsigned int p = 0; p < proc_count; p++)
        if (procs[p].gpu == i && (mig < 0 || procs[p].mig == mig)) n++;
    if (infos == NULL || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (unsigned int p = 0; p < proc_count; p++) {
        if (procs[p].gpu != i || (mig >= 0 && procs[p].mig != mig)) continue;
        infos[k].pid = procs[p].pid;
        infos[k].usedGpuMemory = procs[p].known ? procs[p].mib * MIB : NOT_AVAILABLE;
        int on = procs[p].mig;
        int valid = on >= 0 && (unsigned int)on < gpus[i].mig_count;
        infos[k].gpuInstanceId = valid ? gpus[i].migs[on].gi : 0xFFFFFFFF;
        infos[k].computeInstanceId = valid ? gpus[i].migs[on].ci : 0xFFFFFFFF;
        k++;
    }
    *count = k;
    return NVML_SUCCESS;
}

/* Each process's own utilisation since lastSeenTimeStamp (µs of the CPU's
 * clock): every putil sample is stamped with this call's time, so each
 * call sees it; none (or none newer) is NVML_ERROR_NOT_FOUND, as a real
 * driver answers when no process computed in the period. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long lastSeenTimeStamp) {
    if (is_mig_handle(device)) {
        LOOKUP_MIG(device);
        (void)instance;
        return NVML_ERROR_NOT_SUPPORTED;
    }
    LOOKUP(device);
    if (!g->putil) return NVML_ERROR_NOT_SUPPORTED;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long stamp = (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL;
    unsigned int n = 0;
    for (unsigned int p = 0; p < putil_count; p++)
        if (putils[p].gpu == i) n++;
    if (n == 0 || stamp <= lastSeenTimeStamp) return NVML_ERROR_NOT_FOUND;
    if (samples == NULL || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (unsigned int p = 0; p < putil_count; p++) {
        if (putils[p].gpu != i) continue;
        samples[k].pid = putils[p].pid;
        samples[k].timeStamp = stamp;
        samples[k].smUtil = putils[p].sm;
        samples[k].memUtil = putils[p].sm / 2;
        samples[k].encUtil = 0;
        samples[k].decUtil = 0;
        k++;
    }
    *count = k;
    return NVML_SUCCESS;
}

/* MIG (nvml.h "MIG Management"). */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    LOOKUP(device);
    if (g->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = MAX_MIG;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    LOOKUP(device);
    if (g->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (g->mig != 1 || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= g->mig_count) return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)(uintptr_t)(MIG_HANDLE + 16 * i + index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    *isMigDevice = is_mig_handle(device) ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device) {
    LOOKUP_MIG(migDevice);
    (void)instance;
    *device = (nvmlDevice_t)(uintptr_t)(mg + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    LOOKUP_MIG(device);
    *id = instance->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    LOOKUP_MIG(device);
    *id = instance->ci;
    return NVML_SUCCESS;
}

static void fill_pci(unsigned int i, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10 * (i + 1);
    pci->pciDeviceId = 0x233010DE;
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    LOOKUP(device);
    fill_pci(i, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 unsigned int *level) {
    unsigned int a, b;
    nvmlReturn_t status = lookup(device1, &a);
    if (status != NVML_SUCCESS) return status;
    status = lookup(device2, &b);
    if (status != NVML_SUCCESS) return status;
    *level = a == b ? 0 : 30;
    for (unsigned int t = 0; t < topo_count; t++)
        if ((topos[t].a == a && topos[t].b == b) || (topos[t].a == b && topos[t].b == a))
            *level = topos[t].level;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    LOOKUP(device);
    if (g->affinity == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int w = 0; w < cpuSetSize; w++) cpuSet[w] = 0;
    cpuSet[0] = (unsigned long)g->affinity;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
    LOOKUP(device);
    if (g->links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = (int)link < g->links;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    LOOKUP(device);
    if (g->links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)link >= g->links) return NVML_ERROR_NOT_SUPPORTED;
    fill_pci(g->remote[link], pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    load_state();
    if (host_status() != NVML_SUCCESS) return host_status();
    snprintf(version, length, "%s", "12.999.0-fake");
    return NVML_SUCCESS;
}

static nvmlReturn_t answer(int value, int *out) {
    if (value < 0) return NVML_ERROR_NOT_SUPPORTED;
    *out = value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    LOOKUP(device);
    return answer(g->persistence, mode);
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
    LOOKUP(device);
    nvmlReturn_t r = answer(g->ecc, current);
    if (r == NVML_SUCCESS) *pending = *current;
    return r;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending) {
    LOOKUP(device);
    return answer(g->pages_pending, pending);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    LOOKUP(device);
    int mode;
    nvmlReturn_t r = answer(g->mig, &mode);
    if (r == NVML_SUCCESS) *current = *pending = (unsigned int)mode;
    return r;
}

/* Events (nvml.h nvmlEventSet_t, nvmlEventData_t). The set is a dummy
 * handle; waiting reads the xid lines of the state file itself. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

#define NVML_ERROR_TIMEOUT 10
#define XID_CRITICAL_ERROR 0x8ULL
static __thread unsigned int xid_delivered;

nvmlReturn_t nvmlEventSetCreate(void **set) {
    *set = (void *)(uintptr_t)0xE7E7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(void *set) {
    (void)set;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, void *set) {
    (void)set;
    LOOKUP(device);
    return (types & XID_CRITICAL_ERROR) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    LOOKUP(device);
    *index = i;
    return NVML_SUCCESS;
}

/* The n-th xid line of the state file, if there is one. */
static int nth_xid(unsigned int n, unsigned int *gpu, unsigned long long *code) {
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[512];
    unsigned int seen = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char word[32] = "";
        unsigned int g;
        unsigned long long c;
        if (sscanf(line, "%31s %u %llu", word, &g, &c) == 3 && strcmp(word, "xid") == 0) {
            if (seen++ == n) {
                *gpu = g;
                *code = c;
                found = 1;
            }
        }
    }
    fclose(f);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeoutms) {
    (void)set;
    unsigned int waited = 0;
    for (;;) {
        unsigned int gpu;
        unsigned long long code;
        if (nth_xid(xid_delivered, &gpu, &code)) {
            xid_delivered++;
            memset(data, 0, sizeof *data);
            data->device = (nvmlDevice_t)(uintptr_t)(gpu + 1);
            data->eventType = XID_CRITICAL_ERROR;
            data->eventData = code;
            return NVML_SUCCESS;
        }
        if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
        waited += 20;
    }
}
