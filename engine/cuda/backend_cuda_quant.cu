/*
 * backend_cuda_quant: the CUDA backend's block quantization ops (quantize,
 * dequantize; the format is in engine/backend.h, its use in
 * engine/zero/quant.h).
 *
 * quantize: one thread block per quantization block (grid-striding over the
 * blocks), a shared-memory max of |x| and a finiteness flag, then each thread
 * writes its strided share of the values (4 bits: whole bytes, two elements
 * each, since a block is even). dequantize: the map kernel, one element per
 * thread. Numerics as engine/cpu/quant_cpu.c operation for operation
 * (correctly rounded __fdiv_rn, __fmul_rn, __fadd_rn, rintf ties to even; no
 * FMA), so both backends give the same bits.
 *
 * Memory: ops write only the buffers they are given and allocate nothing.
 * Collective: none.
 */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

namespace {

#define QUANT_THREADS 256

template <int BITS> __device__ __forceinline__ int quant_value(float x, float mult, bool zero)
{
    const float half = (float)(1 << (BITS - 1));
    if (zero)
        return 0;
    float r = rintf(__fmul_rn(x, mult));
    r = r < -half ? -half : (r > half - 1.0f ? half - 1.0f : r);
    return (int)r;
}

template <zt_dtype T, int BITS>
__global__ void __launch_bounds__(QUANT_THREADS)
    quantize_kernel(void *q, float *scales, const void *x, int64_t n, int64_t block)
{
    using E = elem<T>;
    const typename E::raw *xs = static_cast<const typename E::raw *>(x);
    __shared__ float s_max[QUANT_THREADS];
    __shared__ int s_bad[QUANT_THREADS];
    __shared__ float s_mult;
    __shared__ int s_zero;
    const int64_t nb = (n + block - 1) / block;
    for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
        const int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float a = 0.0f;
        int bad = 0;
        for (int64_t i = lo + threadIdx.x; i < hi; i += QUANT_THREADS) {
            float v = E::widen(xs[i]);
            bad |= !isfinite(v);
            float m = fabsf(v);
            a = m > a ? m : a;
        }
        s_max[threadIdx.x] = a;
        s_bad[threadIdx.x] = bad;
        __syncthreads();
        for (int w = QUANT_THREADS / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w) {
                float o = s_max[threadIdx.x + w];
                s_max[threadIdx.x] = o > s_max[threadIdx.x] ? o : s_max[threadIdx.x];
                s_bad[threadIdx.x] |= s_bad[threadIdx.x + w];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            const float half = (float)(1 << (BITS - 1));
            float amax = s_max[0];
            float mult = amax == 0.0f ? 1.0f : __fdiv_rn(half, amax);
            float scale = __fdiv_rn(1.0f, mult);
            bool inf_mult = isinf(mult);
            if (s_bad[0])
                scale = __int_as_float(0x7fc00000);
            else if (inf_mult)
                scale = 0.0f;
            scales[b] = scale;
            s_mult = mult;
            s_zero = s_bad[0] || inf_mult;
        }
        __syncthreads();
        const float mult = s_mult;
        const bool zero = s_zero != 0;
        if (BITS == 8) {
            int8_t *qs = static_cast<int8_t *>(q);
            for (int64_t i = lo + threadIdx.x; i < hi; i += QUANT_THREADS)
                qs[i] = (int8_t)quant_value<BITS>(E::widen(xs[i]), mult, zero);
        } else {
            uint8_t *qs = static_cast<uint8_t *>(q);
            for (int64_t i = lo + 2 * threadIdx.x; i < hi; i += 2 * QUANT_THREADS) {
                int v0 = quant_value<BITS>(E::widen(xs[i]), mult, zero);
                int v1 = i + 1 < hi ? quant_value<BITS>(E::widen(xs[i + 1]), mult, zero) : 0;
                qs[i / 2] = (uint8_t)((v0 & 0xf) | (v1 & 0xf) << 4);
            }
        }
        /* s_max, s_mult are reused by the next block. */
        __syncthreads();
    }
}

template <zt_dtype T, int BITS>
void quantize_launch(zt_cuda_impl *impl, void *q, float *scales, const void *x, int64_t n,
                     int64_t block)
{
    int64_t nb = (n + block - 1) / block;
    int64_t most = (int64_t)impl->sm_count * 8;
    unsigned grid = (unsigned)(nb < most ? nb : most);
    ZT_LAUNCH(grid, QUANT_THREADS, 0, impl->stream, quantize_kernel<T, BITS>)(q, scales, x, n, block);
    launched(impl, "quantize");
}

template <zt_dtype T, int BITS, bool ACC> struct dequant_op {
    void *y;
    const void *q;
    const float *scales;
    int64_t block;
    template <int W> __device__ void run(int64_t i) const
    {
        static_assert(W == 1, "one element at a time");
        int v;
        if (BITS == 8) {
            v = static_cast<const int8_t *>(q)[i];
        } else {
            int byte = static_cast<const uint8_t *>(q)[i / 2];
            int nib = (i & 1) ? byte >> 4 : byte & 0xf;
            v = nib >= 8 ? nib - 16 : nib;
        }
        float out[1];
        out[0] = __fmul_rn((float)v, scales[i / block]);
        if (ACC) {
            float cur[1];
            load_elems<T, 1>(y, i, cur);
            out[0] = __fadd_rn(cur[0], out[0]);
        }
        store_elems<T, 1>(y, i, out);
    }
};

typedef void (*quantize_fn)(zt_cuda_impl *, void *, float *, const void *, int64_t, int64_t);
typedef void (*dequantize_fn)(zt_cuda_impl *, void *, const void *, const float *, int64_t,
                              int64_t);

template <zt_dtype T, int BITS, bool ACC>
void dequantize_launch(zt_cuda_impl *impl, void *y, const void *q, const float *scales,
                       int64_t n, int64_t block)
{
    launch_map<1>(impl, dequant_op<T, BITS, ACC>{y, q, scales, block}, n, "dequantize");
}

/* [dtype][bits 4, 8] and [dtype][bits 4, 8][accumulate] */
const quantize_fn quantize_fns[ZT_NDTYPES][2] = {
    {quantize_launch<ZT_F32, 4>, quantize_launch<ZT_F32, 8>},
    {quantize_launch<ZT_F16, 4>, quantize_launch<ZT_F16, 8>},
    {quantize_launch<ZT_BF16, 4>, quantize_launch<ZT_BF16, 8>},
};

#define ZT_DEQUANT_BITS(T, B) {dequantize_launch<T, B, false>, dequantize_launch<T, B, true>}
const dequantize_fn dequantize_fns[ZT_NDTYPES][2][2] = {
    {ZT_DEQUANT_BITS(ZT_F32, 4), ZT_DEQUANT_BITS(ZT_F32, 8)},
    {ZT_DEQUANT_BITS(ZT_F16, 4), ZT_DEQUANT_BITS(ZT_F16, 8)},
    {ZT_DEQUANT_BITS(ZT_BF16, 4), ZT_DEQUANT_BITS(ZT_BF16, 8)},
};
#undef ZT_DEQUANT_BITS

void cuda_quantize(const zt_backend *be, void *q, float *scales, const void *x, zt_dtype dt,
                   int64_t n, int64_t block, int bits)
{
    if (n <= 0)
        return;
    quantize_fns[dt][bits == 8](impl_of(be), q, scales, x, n, block);
}

void cuda_dequantize(const zt_backend *be, void *y, zt_dtype dt, const void *q,
                     const float *scales, int64_t n, int64_t block, int bits, bool accumulate)
{
    if (n <= 0)
        return;
    dequantize_fns[dt][bits == 8][accumulate](impl_of(be), y, q, scales, n, block);
}

} // namespace

void zt_backend_cuda_quant_ops(zt_backend *be)
{
    be->quantize = cuda_quantize;
    be->dequantize = cuda_dequantize;
}
