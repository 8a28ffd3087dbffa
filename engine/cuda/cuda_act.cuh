/*
 * cuda_act: the GELU of the CUDA backend (tanh form) and its derivative as
 * device functions, shared by the plain ops (backend_cuda_nn.cu) and the fused
 * epilogues (backend_cuda_fused.cu) so both round alike. Every product and sum
 * is rounded separately (__fmul_rn/__fadd_rn, never an FMA), the CPU's
 * expression term for term (engine/cpu/backend_cpu_nn.c); tanhf is CUDA's.
 *
 * Memory: none. Collective: none.
 */
#ifndef ZT_CUDA_ACT_CUH
#define ZT_CUDA_ACT_CUH

#include <cuda_runtime.h>
#include <math.h>

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (as on the CPU). */
#define ZT_GELU_K0 0.7978845608028654f
#define ZT_GELU_K1 0.044715f

/* sqrt(2/pi) (x + 0.044715 x^3), rounded step by step as the CPU does. */
static __device__ __forceinline__ float gelu_inner(float v)
{
    float cube = __fmul_rn(__fmul_rn(__fmul_rn(ZT_GELU_K1, v), v), v);
    return __fmul_rn(ZT_GELU_K0, __fadd_rn(v, cube));
}

static __device__ __forceinline__ float gelu(float v)
{
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, tanhf(gelu_inner(v))));
}

static __device__ __forceinline__ float gelu_grad(float dy, float v)
{
    float th = tanhf(gelu_inner(v));
    float du = __fmul_rn(ZT_GELU_K0,
                         __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, ZT_GELU_K1), v), v)));
    float d = __fadd_rn(__fmul_rn(0.5f, __fadd_rn(1.0f, th)),
                        __fmul_rn(__fmul_rn(__fmul_rn(0.5f, v), __fsub_rn(1.0f, __fmul_rn(th, th))),
                                  du));
    return __fmul_rn(dy, d);
}

#endif
