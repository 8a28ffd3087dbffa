/*
 * zs_device.h (zerotrain's CUDA simulator, tests/cudasim): CUDA C++'s
 * device-side language as host C++: the function and memory-space keywords,
 * the built-in index variables, vector types, the correctly rounded
 * intrinsics, block and warp synchronisation (__syncthreads, __syncwarp,
 * shuffles, votes) and atomics. Included by cuda_runtime.h, cuda_fp16.h and
 * cuda_bf16.h.
 *
 * How a kernel runs (tests/cudasim/sim/fiber.cc): one block at a time on the
 * simulator's device thread, each CUDA thread a fiber with its own stack.
 * __syncthreads and the warp operations switch fibers; a thread that reaches
 * none of them runs from start to end without a switch. So:
 *  - __shared__ is `static`: one instance, used by one block at a time (its
 *    contents are not cleared between blocks, as on a GPU they are undefined);
 *    the launch's dynamic shared memory (`extern __shared__` under nvcc) is
 *    zs_dynamic_shared(), one buffer likewise, filled with 0xff bytes at
 *    each launch, and an access past the launch's bytes is an illegal
 *    address;
 *  - the built-in variables are plain globals the fiber scheduler sets before
 *    it resumes a thread (one device thread runs every kernel);
 *  - atomics are plain read-modify-writes: no two threads run at once.
 * Misuse a GPU would hang or corrupt on is reported: a thread that calls a
 * warp operation whose mask includes an exited lane, or a barrier some
 * threads can never reach.
 *
 * Memory: none of its own (the fiber stacks are the simulator's). Thread
 * safety: only kernels, on the device thread, call the synchronisation
 * functions.
 */
#ifndef ZS_DEVICE_H
#define ZS_DEVICE_H

#ifndef __cplusplus
#error "zs_device.h is CUDA C++ (the simulator compiles .cu files as C++17)"
#endif

#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz)
    {
    }
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

/* The running launch's dynamic shared memory, 128-byte aligned (see the
 * top of the file; fiber.cc). */
void *zs_dynamic_shared();

/* Set by the fiber scheduler (plain globals: see the top of the file). */
extern uint3 threadIdx;
extern uint3 blockIdx;
extern uint3 blockDim;
extern uint3 gridDim;
constexpr int warpSize = 32;

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) ushort4 {
    unsigned short x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned int x, y;
};
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
struct alignas(16) int4 {
    int x, y, z, w;
};

__host__ __device__ inline float2 make_float2(float x, float y) { return float2{x, y}; }
__host__ __device__ inline float4 make_float4(float x, float y, float z, float w)
{
    return float4{x, y, z, w};
}
__host__ __device__ inline ushort4 make_ushort4(unsigned short x, unsigned short y,
                                                unsigned short z, unsigned short w)
{
    return ushort4{x, y, z, w};
}
__host__ __device__ inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z,
                                            unsigned int w)
{
    return uint4{x, y, z, w};
}

/* ---- correctly rounded arithmetic: the host's IEEE operations (the
 * simulator's build turns FP contraction off, so none becomes an FMA) ---- */

__device__ inline float __fadd_rn(float a, float b) { return a + b; }
__device__ inline float __fsub_rn(float a, float b) { return a - b; }
__device__ inline float __fmul_rn(float a, float b) { return a * b; }
__device__ inline float __fdiv_rn(float a, float b) { return a / b; }
__device__ inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
__device__ inline double __dadd_rn(double a, double b) { return a + b; }
__device__ inline double __dsub_rn(double a, double b) { return a - b; }
__device__ inline double __dmul_rn(double a, double b) { return a * b; }
__device__ inline double __ddiv_rn(double a, double b) { return a / b; }

/* The high 32 bits of the 64-bit product. */
__device__ inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}

__host__ __device__ inline unsigned int __float_as_uint(float x)
{
    unsigned int u;
    memcpy(&u, &x, sizeof u);
    return u;
}
__host__ __device__ inline float __uint_as_float(unsigned int u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
__host__ __device__ inline int __float_as_int(float x) { return (int)__float_as_uint(x); }
__host__ __device__ inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
__host__ __device__ inline long long __double_as_longlong(double x)
{
    long long u;
    memcpy(&u, &x, sizeof u);
    return u;
}
__host__ __device__ inline double __longlong_as_double(long long u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- synchronisation (tests/cudasim/sim/fiber.cc) ---- */

void __syncthreads(void);
void __syncwarp(unsigned int mask = 0xffffffffu);

enum zs_shfl_mode { ZS_SHFL_IDX, ZS_SHFL_UP, ZS_SHFL_DOWN, ZS_SHFL_XOR };
enum zs_vote_mode { ZS_VOTE_ALL, ZS_VOTE_ANY, ZS_VOTE_BALLOT };

/* The warp exchange behind every shuffle: waits for the lanes of `mask`,
 * returns the 8 bytes the source lane handed in (its own when the source is
 * outside its width segment). */
uint64_t zs_shfl(unsigned int mask, uint64_t bits, zs_shfl_mode mode, int arg, int width,
                 const char *what);
unsigned int zs_vote(unsigned int mask, int pred, zs_vote_mode mode, const char *what);

template <class T> inline T zs_shfl_as(unsigned int mask, T v, zs_shfl_mode mode, int arg,
                                       int width, const char *what)
{
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = zs_shfl(mask, bits, mode, arg, width, what);
    memcpy(&v, &bits, sizeof v);
    return v;
}

template <class T> inline T __shfl_sync(unsigned int mask, T v, int src, int width = warpSize)
{
    return zs_shfl_as(mask, v, ZS_SHFL_IDX, src, width, "__shfl_sync");
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = warpSize)
{
    return zs_shfl_as(mask, v, ZS_SHFL_UP, (int)delta, width, "__shfl_up_sync");
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = warpSize)
{
    return zs_shfl_as(mask, v, ZS_SHFL_DOWN, (int)delta, width, "__shfl_down_sync");
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = warpSize)
{
    return zs_shfl_as(mask, v, ZS_SHFL_XOR, lane_mask, width, "__shfl_xor_sync");
}

inline int __all_sync(unsigned int mask, int pred)
{
    return (int)zs_vote(mask, pred, ZS_VOTE_ALL, "__all_sync");
}
inline int __any_sync(unsigned int mask, int pred)
{
    return (int)zs_vote(mask, pred, ZS_VOTE_ANY, "__any_sync");
}
inline unsigned int __ballot_sync(unsigned int mask, int pred)
{
    return zs_vote(mask, pred, ZS_VOTE_BALLOT, "__ballot_sync");
}

/* ---- warp-level matrix and asynchronous-copy instructions ----
 * What engine/cuda/mma.cuh's wrappers call under the simulator (the inline
 * PTX they stand for is there); tests/cudasim/sim/warpmma.cc runs them as the
 * warp collectives they are, with the PTX ISA's fragment layouts. */

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16|f16}.{bf16|f16}.f32 by the
 * whole warp: this lane's fragments of A (4 registers of two 16-bit values),
 * B (2) and C (4 floats) in, its 4 floats of D = A B + C out. */
void zs_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                     bool bf16);
/* ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16 by the whole warp: row
 * is this lane's row address (lanes 8 j .. 8 j + 7 give matrix j's 8 rows of
 * 16 bytes); r[j] receives this lane's two elements of matrix j. */
void zs_ldmatrix(uint32_t *r, int num, bool trans, const void *row);
/* cp.async.{ca|cg}.shared.global of bytes (4, 8 or 16) from device memory
 * to shared memory; commit_group; wait_group n (the thread's copies of all
 * but its n newest committed groups are complete). The copy lands at the
 * wait: an access to its bytes before then is reported. */
void zs_cp_async(void *smem, const void *gmem, int bytes);
void zs_cp_async_commit();
void zs_cp_async_wait(int n);

/* ---- atomics: the old value, as CUDA's (see the top of the file) ----
 *
 * An atomic is one instruction on a GPU, a read-modify-write: so it reaches
 * the race and bounds checks and the performance counters once, through
 * zs_atomic_access (racecheck.cc), whose caller's address (these functions
 * are always inlined into the kernel) names the site. The memory itself is
 * read and written through __atomic builtins, which the instrumentation
 * passes to the simulator's host-memory atomics uncounted. */

void zs_atomic_access(void *p, size_t n);

template <class T> __forceinline__ T zs_atomic_get(T *p)
{
    T v;
    __atomic_load(p, &v, __ATOMIC_RELAXED);
    return v;
}
template <class T> __forceinline__ void zs_atomic_put(T *p, T v)
{
    __atomic_store(p, &v, __ATOMIC_RELAXED);
}

template <class T> __forceinline__ T zs_atomic_add(T *p, T v)
{
    zs_atomic_access(p, sizeof(T));
    T old = zs_atomic_get(p);
    zs_atomic_put(p, (T)(old + v));
    return old;
}
__forceinline__ int atomicAdd(int *p, int v) { return zs_atomic_add(p, v); }
__forceinline__ unsigned int atomicAdd(unsigned int *p, unsigned int v)
{
    return zs_atomic_add(p, v);
}
__forceinline__ unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return zs_atomic_add(p, v);
}
__forceinline__ float atomicAdd(float *p, float v) { return zs_atomic_add(p, v); }
__forceinline__ double atomicAdd(double *p, double v) { return zs_atomic_add(p, v); }
/* The vector forms of sm_90 (one instruction of 8 or 16 bytes; their
 * elements are atomic one by one, as CUDA documents). */
__forceinline__ float2 atomicAdd(float2 *p, float2 v)
{
    zs_atomic_access(p, sizeof v);
    float *f = &p->x;
    float2 old = {zs_atomic_get(f), zs_atomic_get(f + 1)};
    zs_atomic_put(f, old.x + v.x);
    zs_atomic_put(f + 1, old.y + v.y);
    return old;
}
__forceinline__ float4 atomicAdd(float4 *p, float4 v)
{
    zs_atomic_access(p, sizeof v);
    float *f = &p->x;
    float4 old = {zs_atomic_get(f), zs_atomic_get(f + 1), zs_atomic_get(f + 2),
                  zs_atomic_get(f + 3)};
    zs_atomic_put(f, old.x + v.x);
    zs_atomic_put(f + 1, old.y + v.y);
    zs_atomic_put(f + 2, old.z + v.z);
    zs_atomic_put(f + 3, old.w + v.w);
    return old;
}

template <class T> __forceinline__ T zs_atomic_max(T *p, T v)
{
    zs_atomic_access(p, sizeof(T));
    T old = zs_atomic_get(p);
    zs_atomic_put(p, old < v ? v : old);
    return old;
}
__forceinline__ int atomicMax(int *p, int v) { return zs_atomic_max(p, v); }
__forceinline__ unsigned int atomicMax(unsigned int *p, unsigned int v)
{
    return zs_atomic_max(p, v);
}

template <class T> __forceinline__ T zs_atomic_min(T *p, T v)
{
    zs_atomic_access(p, sizeof(T));
    T old = zs_atomic_get(p);
    zs_atomic_put(p, v < old ? v : old);
    return old;
}
__forceinline__ int atomicMin(int *p, int v) { return zs_atomic_min(p, v); }
__forceinline__ unsigned int atomicMin(unsigned int *p, unsigned int v)
{
    return zs_atomic_min(p, v);
}

template <class T> __forceinline__ T zs_atomic_cas(T *p, T compare, T v)
{
    zs_atomic_access(p, sizeof(T));
    T old = zs_atomic_get(p);
    if (old == compare)
        zs_atomic_put(p, v);
    return old;
}
__forceinline__ int atomicCAS(int *p, int c, int v) { return zs_atomic_cas(p, c, v); }
__forceinline__ unsigned int atomicCAS(unsigned int *p, unsigned int c, unsigned int v)
{
    return zs_atomic_cas(p, c, v);
}
__forceinline__ unsigned long long atomicCAS(unsigned long long *p, unsigned long long c,
                                             unsigned long long v)
{
    return zs_atomic_cas(p, c, v);
}

template <class T> __forceinline__ T zs_atomic_exch(T *p, T v)
{
    zs_atomic_access(p, sizeof(T));
    T old = zs_atomic_get(p);
    zs_atomic_put(p, v);
    return old;
}
__forceinline__ int atomicExch(int *p, int v) { return zs_atomic_exch(p, v); }
__forceinline__ unsigned int atomicExch(unsigned int *p, unsigned int v)
{
    return zs_atomic_exch(p, v);
}
__forceinline__ float atomicExch(float *p, float v) { return zs_atomic_exch(p, v); }

#endif
