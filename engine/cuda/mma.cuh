/*
 * mma: the warp-level tensor-core instructions and asynchronous copies the
 * CUDA kernels build on (sm_80 and later): mma.sync m16n8k16 for bf16 and
 * fp16 with fp32 accumulators, ldmatrix (x1, x2, x4, with .trans),
 * cp.async with commit and wait groups, and the packing of two fp32 values
 * into a 16-bit operand register.
 *
 * Under nvcc each is one inline PTX instruction. Under the CUDA simulator
 * (ZT_CUDASIM) each calls the simulator's implementation
 * (tests/cudasim/sim/warpmma.cc), which runs it as the warp collective it is
 * and states the fragment layouts with their PTX ISA sections; in short, with
 * g = lane / 4 and t = lane % 4: A's a_i at (g + 8 ((i / 2) % 2),
 * 2 t + i % 2 + 8 (i / 4)), B's b_i at (2 t + i % 2 + 8 (i / 2), g), C's and
 * D's c_i at (g + 8 (i / 2), 2 t + i % 2); a register holds two 16-bit values,
 * the lower-numbered in its low half. build/tests/mma-check runs the same
 * cases on a GPU (tests/tools/mma_check.cu).
 *
 * Contract: mma and ldmatrix are executed by all 32 lanes of a warp together
 * (.sync.aligned); ldmatrix's rows and cp.async's destination are shared
 * memory, 16-byte aligned rows, cp.async's source and destination aligned
 * to its size (4, 8 or 16 bytes). A cp.async's bytes may be read only after
 * the wait that completes its group (and, by other threads, a barrier).
 * Memory: none. Nothing here is collective beyond the warp.
 */
#ifndef ZT_CUDA_MMA_CUH
#define ZT_CUDA_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef ZT_CUDASIM
/* mma.sync m16n8k16 with 16-bit operands of type T ("bf16", "f16"), fp32 C and D. */
#define ZT_MMA_16816_PTX(T)                                                                       \
    "mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
    "{%8, %9}, {%10, %11, %12, %13};\n"
#define ZT_MMA_16816_OPERANDS                                                                     \
    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                             \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),  \
      "f"(c[2]), "f"(c[3])
#endif

/* d = a b + c on the warp's 16 x 8 x 16 tile: a, b pairs of bf16 (BF16) or
 * fp16 values, c, d fp32. */
template <bool BF16>
__device__ __forceinline__ void zt_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                             const float c[4])
{
#ifdef ZT_CUDASIM
    zs_mma_m16n8k16(d, a, b, c, BF16);
#else
    if constexpr (BF16)
        asm volatile(ZT_MMA_16816_PTX("bf16") ZT_MMA_16816_OPERANDS);
    else
        asm volatile(ZT_MMA_16816_PTX("f16") ZT_MMA_16816_OPERANDS);
#endif
}

#ifndef ZT_CUDASIM
__device__ __forceinline__ uint32_t zt_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* ldmatrix.m8n8.xN[.trans].b16: N 8 x 8 matrices of 16-bit values; row is
 * this lane's row (lanes 8 j .. 8 j + 7: matrix j's rows 0..7); r[j] gets
 * this lane's pair of matrix j. */
template <int N, bool TRANS>
__device__ __forceinline__ void zt_ldmatrix(uint32_t (&r)[N], const void *row)
{
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef ZT_CUDASIM
    zs_ldmatrix(r, N, TRANS, row);
#else
    const uint32_t s = zt_smem_addr(row);
    if constexpr (N == 1 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                     : "=r"(r[0]) : "r"(s));
    else if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                     : "=r"(r[0]) : "r"(s));
    else if constexpr (N == 2 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else if constexpr (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#endif
}

/* cp.async of BYTES (4, 8, 16) from global to shared memory (.cg, past L1,
 * for 16; .ca otherwise, the only form for 4 and 8). */
template <int BYTES> __device__ __forceinline__ void zt_cp_async(void *smem, const void *gmem)
{
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async moves 4, 8 or 16 bytes");
#ifdef ZT_CUDASIM
    zs_cp_async(smem, gmem, BYTES);
#else
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(zt_smem_addr(smem)),
                     "l"(gmem)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(zt_smem_addr(smem)),
                     "l"(gmem), "n"(BYTES)
                     : "memory");
#endif
}

/* Two fp32 values rounded to nearest even and packed as an operand register
 * of mma (bf16 when BF16, else fp16; lo in the low half): cvt.rn.bf16x2.f32
 * or cvt.rn.f16x2.f32, one instruction. NaN becomes the canonical NaN, so
 * this rounds operands, not stored tensors (those keep cuda_common.cuh's
 * bit rules). */
template <bool BF16> __device__ __forceinline__ uint32_t zt_pack_rn(float lo, float hi)
{
#ifdef ZT_CUDASIM
    if constexpr (BF16)
        return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
               ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
    else
        return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
               ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
#else
    uint32_t r;
    if constexpr (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}

/* Closes this thread's group of cp.async copies issued since the last. */
__device__ __forceinline__ void zt_cp_async_commit()
{
#ifdef ZT_CUDASIM
    zs_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N> __device__ __forceinline__ void zt_cp_async_wait()
{
#ifdef ZT_CUDASIM
    zs_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif
