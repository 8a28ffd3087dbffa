/*
 * dtype: conversions between fp32, fp16 and bf16 with integer bit operations
 * (no _Float16, so any C11 compiler builds it), and the host reductions that
 * read any of the three.
 *
 * The per-element helpers are branch-free so that the compiler vectorises the
 * loops: every case is computed and the answer picked with a bit mask (see
 * pick). SSE4 has no per-lane variable shift, which is why fp16 subnormals go
 * through exact float operations instead of a shift by the exponent. Nothing
 * here depends on the floating-point rounding mode.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#include "engine/dtype.h"

#include <string.h>

/* Fixed reduction geometry (the CPU backend's, which calls these): partial
 * sums over ZT_DTYPE_CHUNK elements, combined in index order ZT_DTYPE_ROUND
 * chunks at a time through a stack buffer, so the order of additions never
 * depends on the thread count. Element-wise conversion uses the same chunks
 * as units of OpenMP work. */
#define ZT_DTYPE_CHUNK 4096
#define ZT_DTYPE_ROUND 256

/* Below this many elements a loop runs on one thread: waking the team costs
 * more than the loop (the CPU backend's ZT_CPU_PAR_MIN). */
#define ZT_DTYPE_PAR_MIN 32768

size_t zt_dtype_size(zt_dtype dt)
{
    switch (dt) {
    case ZT_F32:
        return 4;
    case ZT_F16:
    case ZT_BF16:
        return 2;
    default:
        return 0;
    }
}

const char *zt_dtype_name(zt_dtype dt)
{
    switch (dt) {
    case ZT_F32:
        return "fp32";
    case ZT_F16:
        return "fp16";
    case ZT_BF16:
        return "bf16";
    default:
        return "unknown";
    }
}

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* cond ? a : b as mask arithmetic. Written as ?: GCC turns the choice into a
 * branch and then, under the default -ftrapping-math, refuses to if-convert
 * the float operations feeding it, so the loop would not vectorise. */
static inline uint32_t pick(bool cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)cond;
    return (a & m) | (b & ~m);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t a = h & 0x7fffu;
    /* Normal: rebias the exponent from 15 to 127. */
    uint32_t normal = (a << 13) + ((uint32_t)(127 - 15) << 23);
    /* Inf and NaN keep the payload; NaN gets the quiet bit. */
    uint32_t special = 0x7f800000u | ((a & 0x3ffu) << 13) | ((uint32_t)(a > 0x7c00u) << 22);
    /* Zero and subnormal: mantissa * 2^-24, exact in fp32 (at most 10 bits,
     * and the product is an fp32 normal). */
    uint32_t sub = f32_bits((float)(int32_t)a * 0x1p-24f);
    uint32_t mag = pick(a >= 0x7c00u, special, pick(a >= 0x0400u, normal, sub));
    return f32_from_bits(sign | mag);
}

static inline uint16_t f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* Normal result: rebias, then round to nearest even on the 13 dropped
     * bits; a carry out of the mantissa correctly bumps the exponent, up to
     * 0x7c00 (inf) from 65520 on. */
    uint32_t normal = (a - ((uint32_t)(127 - 15) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* Subnormal result (|x| < 2^-14): |x| * 2^24 is exact and below 2^10, so
     * its integer part and fraction are exact too; round the fraction to
     * nearest even by hand. A result of 0x400 is the smallest normal, which is
     * the right encoding. Larger inputs are swapped for 0 first so the
     * float-to-int conversion never sees an out-of-range value. */
    float t = f32_from_bits(pick(a < 0x38800000u, a, 0u)) * 0x1p24f;
    int32_t q = (int32_t)t;
    float frac = t - (float)q;
    uint32_t odd = (uint32_t)q & 1u;
    uint32_t sub = (uint32_t)q + pick(frac > 0.5f, 1u, 0u) + pick(frac == 0.5f, odd, 0u);
    /* NaN: quiet, sign and top payload bits kept. */
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    uint32_t mag = pick(a > 0x7f800000u, nan,
                        pick(a >= 0x47800000u, 0x7c00u, pick(a >= 0x38800000u, normal, sub)));
    return (uint16_t)(sign | mag);
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    /* A signalling NaN becomes quiet. */
    return f32_from_bits(u | ((uint32_t)((u & 0x7fffffffu) > 0x7f800000u) << 22));
}

static inline uint16_t f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    /* Round to nearest even on the low 16 bits; a carry into the exponent
     * gives the next binade or inf, as it should. */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)pick((u & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

uint16_t zt_f32_to_f16(float x) { return f32_to_f16(x); }
float zt_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t zt_f32_to_bf16(float x) { return f32_to_bf16(x); }
float zt_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }

/* Element access by type. Byte copies instead of casts keep the accesses free
 * of aliasing assumptions; the compiler turns them into plain loads. */
static inline float load_f32(const void *p, int64_t i)
{
    float x;
    memcpy(&x, (const char *)p + i * 4, sizeof x);
    return x;
}

static inline uint16_t load_u16(const void *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, (const char *)p + i * 2, sizeof h);
    return h;
}

static inline float load_f16(const void *p, int64_t i) { return f16_to_f32(load_u16(p, i)); }
static inline float load_bf16(const void *p, int64_t i) { return bf16_to_f32(load_u16(p, i)); }

static inline void store_f32(void *p, int64_t i, float x)
{
    memcpy((char *)p + i * 4, &x, sizeof x);
}

static inline void store_f16(void *p, int64_t i, float x)
{
    uint16_t h = f32_to_f16(x);
    memcpy((char *)p + i * 2, &h, sizeof h);
}

static inline void store_bf16(void *p, int64_t i, float x)
{
    uint16_t h = f32_to_bf16(x);
    memcpy((char *)p + i * 2, &h, sizeof h);
}

/* One chunk of zt_convert_host for one (dst, src, accumulate) combination,
 * element offsets relative to dst and src. */
typedef void (*convert_kernel)(void *dst, const void *src, int64_t n, float alpha);

/* Wider vectors for the conversion loops, picked once at load time by the
 * CPU (GCC's target_clones): the CPU backend's typed ops widen and narrow
 * every 16-bit tensor they touch, and AVX2 runs these loops 1.6-1.8x faster
 * than the build's SSE4.2 (64K elements, in L2). dtype sits below
 * engine/cpu, so it cannot use that module's ZT_CPU_ISA dispatch; it needs
 * none, as every clone computes the same bits (integer operations and one
 * fp32 multiply, no FMA under -ffp-contract=off). */
#if defined(__x86_64__) && defined(__GNUC__)
#define ZT_DTYPE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ZT_DTYPE_CLONES
#endif

/* The product is its own statement: the header promises two roundings, and
 * C11 mode (-ffp-contract=off) keeps the compiler from fusing them. */
#define ZT_CONVERT_KERNELS(D, S)                                                         \
    ZT_DTYPE_CLONES static void convert_##D##_##S(void *dst, const void *src, int64_t n, \
                                                  float alpha)                            \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++)                                                   \
            store_##D(dst, i, alpha * load_##S(src, i));                                  \
    }                                                                                     \
    ZT_DTYPE_CLONES static void accumulate_##D##_##S(void *dst, const void *src,         \
                                                     int64_t n, float alpha)              \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                 \
            float scaled = alpha * load_##S(src, i);                                      \
            store_##D(dst, i, load_##D(dst, i) + scaled);                                 \
        }                                                                                 \
    }

ZT_CONVERT_KERNELS(f32, f32)
ZT_CONVERT_KERNELS(f32, f16)
ZT_CONVERT_KERNELS(f32, bf16)
ZT_CONVERT_KERNELS(f16, f32)
ZT_CONVERT_KERNELS(f16, f16)
ZT_CONVERT_KERNELS(f16, bf16)
ZT_CONVERT_KERNELS(bf16, f32)
ZT_CONVERT_KERNELS(bf16, f16)
ZT_CONVERT_KERNELS(bf16, bf16)

/* [dst][src][accumulate] */
static const convert_kernel convert_kernels[ZT_NDTYPES][ZT_NDTYPES][2] = {
    [ZT_F32] = {[ZT_F32] = {convert_f32_f32, accumulate_f32_f32},
                [ZT_F16] = {convert_f32_f16, accumulate_f32_f16},
                [ZT_BF16] = {convert_f32_bf16, accumulate_f32_bf16}},
    [ZT_F16] = {[ZT_F32] = {convert_f16_f32, accumulate_f16_f32},
                [ZT_F16] = {convert_f16_f16, accumulate_f16_f16},
                [ZT_BF16] = {convert_f16_bf16, accumulate_f16_bf16}},
    [ZT_BF16] = {[ZT_F32] = {convert_bf16_f32, accumulate_bf16_f32},
                 [ZT_F16] = {convert_bf16_f16, accumulate_bf16_f16},
                 [ZT_BF16] = {convert_bf16_bf16, accumulate_bf16_bf16}},
};

void zt_convert_host(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, int64_t n,
                     float alpha, bool accumulate)
{
    if (n <= 0)
        return;
    /* An unscaled fp32 copy is a byte copy (or nothing in place). */
    if (dst_dt == ZT_F32 && src_dt == ZT_F32 && alpha == 1.0f && !accumulate) {
        if (dst != src)
            memmove(dst, src, (size_t)n * sizeof(float));
        return;
    }
    convert_kernel k = convert_kernels[dst_dt][src_dt][accumulate];
    size_t dsz = zt_dtype_size(dst_dt), ssz = zt_dtype_size(src_dt);
    int64_t nchunks = (n + ZT_DTYPE_CHUNK - 1) / ZT_DTYPE_CHUNK;
#pragma omp parallel for schedule(static) if (n > ZT_DTYPE_PAR_MIN)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * ZT_DTYPE_CHUNK;
        int64_t len = n - lo < ZT_DTYPE_CHUNK ? n - lo : ZT_DTYPE_CHUNK;
        k((char *)dst + lo * (int64_t)dsz, (const char *)src + lo * (int64_t)ssz, len, alpha);
    }
}

/* Sum of squares of one chunk. Eight independent accumulators give the
 * compiler vector lanes without reassociating anything, and squares of floats
 * are exact in double, so only the additions round. */
#define ZT_CHUNK_SUM_SQUARES(S)                                                            \
    static double chunk_sum_squares_##S(const void *x, int64_t n)                          \
    {                                                                                       \
        double acc[8] = {0};                                                                \
        int64_t i = 0;                                                                      \
        for (; i + 8 <= n; i += 8)                                                          \
            for (int j = 0; j < 8; j++) {                                                   \
                double v = load_##S(x, i + j);                                              \
                acc[j] += v * v;                                                            \
            }                                                                               \
        for (; i < n; i++) {                                                                \
            double v = load_##S(x, i);                                                      \
            acc[0] += v * v;                                                                \
        }                                                                                   \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])); \
    }

ZT_CHUNK_SUM_SQUARES(f32)
ZT_CHUNK_SUM_SQUARES(f16)
ZT_CHUNK_SUM_SQUARES(bf16)

double zt_sum_squares_host(const void *x, zt_dtype dt, int64_t n)
{
    double (*chunk)(const void *, int64_t) = dt == ZT_F16    ? chunk_sum_squares_f16
                                             : dt == ZT_BF16 ? chunk_sum_squares_bf16
                                                             : chunk_sum_squares_f32;
    size_t sz = zt_dtype_size(dt);
    double total = 0.0;
    int64_t nchunks = (n + ZT_DTYPE_CHUNK - 1) / ZT_DTYPE_CHUNK;
    for (int64_t c0 = 0; c0 < nchunks; c0 += ZT_DTYPE_ROUND) {
        int64_t nc = nchunks - c0 < ZT_DTYPE_ROUND ? nchunks - c0 : ZT_DTYPE_ROUND;
        double part[ZT_DTYPE_ROUND];
#pragma omp parallel for schedule(static) if (nc * ZT_DTYPE_CHUNK > ZT_DTYPE_PAR_MIN)
        for (int64_t c = 0; c < nc; c++) {
            int64_t lo = (c0 + c) * ZT_DTYPE_CHUNK;
            int64_t len = n - lo < ZT_DTYPE_CHUNK ? n - lo : ZT_DTYPE_CHUNK;
            part[c] = chunk((const char *)x + lo * (int64_t)sz, len);
        }
        for (int64_t c = 0; c < nc; c++)
            total += part[c];
    }
    return total;
}

/* Inf and NaN are the all-ones exponent in every format. No early exit: a
 * branch-free scan vectorises and the common answer is "none", which needs the
 * whole scan anyway. */
bool zt_has_inf_nan_host(const void *x, zt_dtype dt, int64_t n)
{
    int bad = 0;
    if (dt == ZT_F32) {
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > ZT_DTYPE_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            bad |= (f32_bits(load_f32(x, i)) & 0x7f800000u) == 0x7f800000u;
    } else {
        uint16_t exp_mask = dt == ZT_F16 ? 0x7c00u : 0x7f80u;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > ZT_DTYPE_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            bad |= (load_u16(x, i) & exp_mask) == exp_mask;
    }
    return bad != 0;
}
