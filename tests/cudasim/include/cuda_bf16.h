/*
 * cuda_bf16.h (zerotrain's CUDA simulator, tests/cudasim): __nv_bfloat16
 * and the conversions zerotrain's kernels use, in software with the
 * hardware's rounding: round to nearest even, overflow to infinity, every
 * NaN to the canonical 0x7fff.
 *
 * Memory: none. Thread safety: pure functions.
 */
#ifndef ZS_CUDA_BF16_H
#define ZS_CUDA_BF16_H

#include <stdint.h>

#include <zs_device.h>

struct __nv_bfloat16 {
    unsigned short __x;
};

__host__ __device__ inline __nv_bfloat16 __float2bfloat16_rn(float x)
{
    uint32_t u = __float_as_uint(x);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        b.__x = 0x7fffu;
    else
        b.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}

__host__ __device__ inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u)
{
    __nv_bfloat16 b;
    b.__x = u;
    return b;
}
__host__ __device__ inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }

__host__ __device__ inline float __bfloat162float(__nv_bfloat16 b)
{
    return __uint_as_float((uint32_t)b.__x << 16);
}

#endif
