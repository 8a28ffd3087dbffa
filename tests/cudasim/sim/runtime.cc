/*
 * runtime: the simulator's settings (ZT_SIM_* environment variables), its
 * messages, CUDA's two kinds of error (the per-thread last error and the
 * per-device sticky error of a failed device operation), and the simulated
 * devices: count, current device, properties, memory info, function
 * attributes. The devices describe an H100: compute capability 9.0, 132 SMs,
 * 48 KiB of shared memory per block (227 KiB with opt-in).
 *
 * Memory: the settings and attribute table live for the process.
 * Thread safety: any host thread; the last error and the current device are
 * per thread, as in CUDA.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>

namespace {

/* The H100's launch limits (cudaDeviceProp of an H100 SXM). */
const size_t kSharedPerBlock = 48 * 1024;

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;
std::atomic<int> g_sticky[ZS_MAX_DEVICES];

[[noreturn]] void bad_setting(const char *name, const char *value, const char *want)
{
    fprintf(stderr, "zt-sim: error: %s=%s: %s\n", name, value, want);
    exit(2);
}

/* A whole number in [lo, hi] from the environment, or def when unset. */
uint64_t env_uint(const char *name, uint64_t def, uint64_t lo, uint64_t hi, const char *want)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == '-' || *end != '\0' || x < lo || x > hi)
        bad_setting(name, v, want);
    return x;
}

zs_config load_config()
{
    zs_config c;
    c.devices = (int)env_uint("ZT_SIM_DEVICES", 1, 0, ZS_MAX_DEVICES,
                              "the number of simulated GPUs per process, 0 to 16");
    c.device_bytes = (size_t)env_uint("ZT_SIM_DEVICE_MEMORY_MB", 81920, 1, 1 << 20,
                                      "each simulated GPU's memory in MiB, 1 to 1048576") << 20;
    c.seed = env_uint("ZT_SIM_SEED", 1, 0, UINT64_MAX, "a whole number");
    c.racecheck = env_uint("ZT_SIM_RACECHECK", 1, 0, 1, "1 (check streams) or 0") != 0;
    c.nccl_timeout_s = (double)env_uint("ZT_SIM_NCCL_TIMEOUT", 120, 1, 86400,
                                        "seconds a collective waits for its peers, 1 to 86400");
    c.abort_on_error = env_uint("ZT_SIM_ABORT", 0, 0, 1, "1 (abort at the first error) or 0");
    for (int i = 0; i < ZS_MAX_DEVICES; i++)
        c.physical[i] = i;
    /* ZT_SIM_VISIBLE_DEVICES is the simulated node's CUDA_VISIBLE_DEVICES
     * (the real variable is left to the real GPUs of the machine running the
     * tests), with CUDA's rule: the listed ordinals in order, up to the first
     * entry that is not one (UUIDs and MIG names are not simulated); unset:
     * all. */
    const char *vis = getenv("ZT_SIM_VISIBLE_DEVICES");
    if (vis) {
        int n = 0;
        const char *p = vis;
        while (*p && n < c.devices) {
            char *end = NULL;
            long k = strtol(p, &end, 10);
            if (end == p || k < 0 || k >= c.devices || (*end && *end != ','))
                break;
            bool dup = false;
            for (int i = 0; i < n; i++)
                dup = dup || c.physical[i] == (int)k;
            if (dup)
                break;
            c.physical[n++] = (int)k;
            p = *end ? end + 1 : end;
        }
        c.devices = n;
    }
    c.kernel_delay_us = env_uint("ZT_SIM_KERNEL_DELAY_US", 0, 0, 10000000,
                                 "microseconds each kernel sleeps first, 0 to 10000000");
    c.stats = env_uint("ZT_SIM_STATS", 0, 0, 1, "1 (print stats at exit) or 0") != 0;
    const char *log = getenv("ZT_SIM_LAUNCH_LOG");
    c.launch_log = log && *log ? log : NULL;
    c.perf = env_uint("ZT_SIM_PERF", 0, 0, 1, "1 (count requests, sectors and wavefronts) or 0") != 0;
    c.shared_optin = (size_t)env_uint("ZT_SIM_SHARED_OPTIN_KB", zs_dyn_cap / 1024,
                                      kSharedPerBlock / 1024, zs_dyn_cap / 1024,
                                      "the dynamic shared memory opt-in's limit in KiB, 48 to "
                                      "227") << 10;
    c.stall_rank = -1;
    c.stall_n = 0;
    if (const char *st = getenv("ZT_SIM_NCCL_STALL"); st && *st) {
        int r = -1;
        unsigned long long n = 0;
        char extra = 0;
        if (sscanf(st, "%d:%llu%c", &r, &n, &extra) != 2 || r < 0 || n < 1)
            bad_setting("ZT_SIM_NCCL_STALL", st,
                        "RANK:N, the world rank whose N-th collective (from 1) stalls");
        c.stall_rank = r;
        c.stall_n = n;
    }
    return c;
}

/* The launcher's world rank, for messages of multi-rank runs. */
const char *rank_env()
{
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (const char *n : names) {
        const char *v = getenv(n);
        if (v && *v)
            return v;
    }
    return NULL;
}

uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Same on every rank of a (simulated) node for one ordinal: the host name,
 * or with ZT_RANKS_PER_NODE the node index the world code derives from it. */
void device_uuid(int ordinal, cudaUUID_t *uuid)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char node[64] = "";
    const char *rpn = getenv("ZT_RANKS_PER_NODE"), *rank = rank_env();
    if (rpn && *rpn && rank && atoi(rpn) > 0)
        snprintf(node, sizeof node, "%d", atoi(rank) / atoi(rpn));
    std::string key = zs_format("zt-sim|%s|%s|%d", host, node, ordinal);
    uint64_t a = fnv1a(key.c_str(), 0xcbf29ce484222325ull);
    uint64_t b = fnv1a(key.c_str(), a ^ 0x9e3779b97f4a7c15ull);
    memcpy(uuid->bytes, &a, 8);
    memcpy(uuid->bytes + 8, &b, 8);
    uuid->bytes[6] = (char)((uuid->bytes[6] & 0x0f) | 0x40); /* version 4, variant 1 */
    uuid->bytes[8] = (char)((uuid->bytes[8] & 0x3f) | 0x80);
}

std::mutex g_attr_lock;
std::map<const void *, int> *g_max_dynamic_shared; /* cudaFuncSetAttribute's opt-ins */

struct error_text {
    cudaError_t rc;
    const char *name, *text;
};

const error_text kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer",
     "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction",
     "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
     "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const error_text *find_error(cudaError_t rc)
{
    for (const error_text &e : kErrors)
        if (e.rc == rc)
            return &e;
    return NULL;
}

} // namespace

/* ---- settings and messages ---- */

const zs_config &zs_cfg()
{
    static const zs_config c = load_config();
    return c;
}

void zs_vreport(const char *fmt, va_list ap)
{
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const char *rank = rank_env();
    if (rank)
        fprintf(stderr, "zt-sim[rank %s]: error: %s\n", rank, msg);
    else
        fprintf(stderr, "zt-sim: error: %s\n", msg);
    fflush(stderr);
    if (zs_cfg().abort_on_error)
        abort();
}

void zs_report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zs_vreport(fmt, ap);
    va_end(ap);
}

std::string zs_format(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

double zs_now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- errors ---- */

cudaError_t zs_fail(cudaError_t rc)
{
    if (rc != cudaSuccess)
        t_last_error = rc;
    return rc;
}

cudaError_t zs_sticky(int device)
{
    if (device < 0 || device >= ZS_MAX_DEVICES)
        return cudaSuccess;
    return (cudaError_t)g_sticky[device].load();
}

void zs_fault(int device, cudaError_t rc)
{
    int none = cudaSuccess;
    if (device >= 0 && device < ZS_MAX_DEVICES)
        g_sticky[device].compare_exchange_strong(none, (int)rc);
}

int zs_current_device() { return t_device; }

cudaError_t zs_check_current()
{
    if (zs_cfg().devices == 0)
        return cudaErrorNoDevice;
    return t_device < zs_cfg().devices ? cudaSuccess : cudaErrorInvalidDevice;
}

extern "C" cudaError_t cudaGetLastError(void)
{
    cudaError_t rc = t_last_error;
    t_last_error = cudaSuccess;
    return rc != cudaSuccess ? rc : zs_sticky(t_device);
}

extern "C" cudaError_t cudaPeekAtLastError(void)
{
    return t_last_error != cudaSuccess ? t_last_error : zs_sticky(t_device);
}

extern "C" const char *cudaGetErrorString(cudaError_t error)
{
    const error_text *e = find_error(error);
    return e ? e->text : "unrecognized error code";
}

extern "C" const char *cudaGetErrorName(cudaError_t error)
{
    const error_text *e = find_error(error);
    return e ? e->name : "cudaErrorUnknown";
}

/* ---- devices ---- */

extern "C" cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return zs_fail(cudaErrorInvalidValue);
    *count = zs_cfg().devices;
    return *count > 0 ? cudaSuccess : zs_fail(cudaErrorNoDevice);
}

extern "C" cudaError_t cudaSetDevice(int device)
{
    if (zs_cfg().devices == 0)
        return zs_fail(cudaErrorNoDevice);
    if (device < 0 || device >= zs_cfg().devices)
        return zs_fail(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return zs_fail(cudaErrorInvalidValue);
    *device = t_device;
    return zs_fail(zs_check_current());
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return zs_fail(cudaErrorInvalidValue);
    if (device < 0 || device >= zs_cfg().devices)
        return zs_fail(zs_cfg().devices ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3 (zerotrain simulator)");
    device_uuid(zs_cfg().physical[device], &prop->uuid);
    prop->totalGlobalMem = zs_cfg().device_bytes;
    prop->sharedMemPerBlock = kSharedPerBlock;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->totalConstMem = 65536;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->l2CacheSize = 50 << 20;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->sharedMemPerBlockOptin = zs_cfg().shared_optin;
    prop->pciBusID = 0x18 + zs_cfg().physical[device];
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = 5120;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if (!free_bytes || !total_bytes)
        return zs_fail(cudaErrorInvalidValue);
    if ((rc = zs_sticky(t_device)) != cudaSuccess)
        return zs_fail(rc);
    *total_bytes = zs_cfg().device_bytes;
    *free_bytes = *total_bytes - zs_device_used(t_device);
    return cudaSuccess;
}

extern "C" cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return zs_fail(cudaErrorInvalidValue);
    if (!func)
        return zs_fail(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = (int)kSharedPerBlock;
    std::lock_guard<std::mutex> l(g_attr_lock);
    if (g_max_dynamic_shared && g_max_dynamic_shared->count(func))
        attr->maxDynamicSharedSizeBytes = (*g_max_dynamic_shared)[func];
    return cudaSuccess;
}

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                            int value)
{
    if (!func)
        return zs_fail(cudaErrorInvalidDeviceFunction);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (size_t)value > zs_cfg().shared_optin)
        return zs_fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> l(g_attr_lock);
    if (!g_max_dynamic_shared)
        g_max_dynamic_shared = new std::map<const void *, int>();
    (*g_max_dynamic_shared)[func] = value;
    return cudaSuccess;
}

size_t zs_max_dynamic_shared(const void *func)
{
    std::lock_guard<std::mutex> l(g_attr_lock);
    if (g_max_dynamic_shared && g_max_dynamic_shared->count(func))
        return (size_t)(*g_max_dynamic_shared)[func];
    return kSharedPerBlock;
}
