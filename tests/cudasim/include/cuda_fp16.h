/*
 * cuda_fp16.h (zerotrain's CUDA simulator, tests/cudasim): __half and the
 * conversions zerotrain's kernels use, in software with the hardware's
 * rounding: round to nearest even, overflow to infinity, every NaN to the
 * canonical 0x7fff.
 *
 * Memory: none. Thread safety: pure functions.
 */
#ifndef ZS_CUDA_FP16_H
#define ZS_CUDA_FP16_H

#include <math.h>
#include <stdint.h>

#include <zs_device.h>

struct __half {
    unsigned short __x;
};

__host__ __device__ inline __half __float2half_rn(float x)
{
    uint32_t u = __float_as_uint(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    __half h;
    if (a > 0x7f800000u) {
        h.__x = 0x7fffu;
    } else if (a >= 0x477ff000u) { /* 65520 and up round to infinity */
        h.__x = (unsigned short)(sign | 0x7c00u);
    } else if (a >= 0x38800000u) { /* normal: drop 13 bits, ties to even */
        a += 0xfffu + ((a >> 13) & 1u);
        h.__x = (unsigned short)(sign | ((a - 0x38000000u) >> 13));
    } else { /* subnormal or zero: units of 2^-24, scaled exactly, rounded to even */
        float m = rintf(__uint_as_float(a) * 0x1p24f);
        h.__x = (unsigned short)(sign | (uint16_t)m);
    }
    return h;
}

__host__ __device__ inline __half __ushort_as_half(unsigned short u)
{
    __half h;
    h.__x = u;
    return h;
}
__host__ __device__ inline unsigned short __half_as_ushort(__half h) { return h.__x; }

__host__ __device__ inline float __half2float(__half h)
{
    uint32_t sign = (uint32_t)(h.__x & 0x8000u) << 16;
    uint32_t a = h.__x & 0x7fffu;
    if (a >= 0x7c00u)
        return __uint_as_float(sign | 0x7f800000u | ((a & 0x3ffu) << 13));
    if (a >= 0x0400u)
        return __uint_as_float(sign | ((a << 13) + 0x38000000u));
    return __uint_as_float(sign | __float_as_uint((float)a * 0x1p-24f));
}

#endif
