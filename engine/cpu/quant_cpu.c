/*
 * quant_cpu: block quantization on the CPU (engine/cpu/quant_cpu.h).
 */
#include "engine/cpu/quant_cpu.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "engine/cpu/backend_cpu_nn.h"

static inline float quant_load(const void *x, zt_dtype dt, int64_t i)
{
    switch (dt) {
    case ZT_F16:
        return zt_f16_to_f32(((const uint16_t *)x)[i]);
    case ZT_BF16:
        return zt_bf16_to_f32(((const uint16_t *)x)[i]);
    default:
        return ((const float *)x)[i];
    }
}

static inline void quant_store(void *y, zt_dtype dt, int64_t i, float v)
{
    switch (dt) {
    case ZT_F16:
        ((uint16_t *)y)[i] = zt_f32_to_f16(v);
        break;
    case ZT_BF16:
        ((uint16_t *)y)[i] = zt_f32_to_bf16(v);
        break;
    default:
        ((float *)y)[i] = v;
    }
}

/* Element i's quantized value (bits 4: the sign-extended nibble). */
static inline int quant_get(const void *q, int64_t i, int bits)
{
    if (bits == 8)
        return ((const int8_t *)q)[i];
    int b = ((const uint8_t *)q)[i / 2];
    int nib = (i & 1) ? b >> 4 : b & 0xf;
    return nib >= 8 ? nib - 16 : nib;
}

/* One block [lo, hi): its scale, and its values written into q. */
static float quant_block(void *q, const void *x, zt_dtype dt, int64_t lo, int64_t hi, int bits)
{
    float a = 0.0f;
    bool finite = true;
    for (int64_t i = lo; i < hi; i++) {
        float v = quant_load(x, dt, i);
        finite = finite && isfinite(v);
        float m = fabsf(v);
        a = m > a ? m : a;
    }
    const float half = (float)(1 << (bits - 1));
    float mult = a == 0.0f ? 1.0f : half / a;
    float scale = 1.0f / mult;
    bool zero = !finite || isinf(mult);
    if (!finite)
        scale = NAN;
    else if (isinf(mult))
        scale = 0.0f;
    const float qmin = -half, qmax = half - 1.0f;
    for (int64_t i = lo; i < hi; i++) {
        float r = 0.0f;
        if (!zero) {
            r = rintf(quant_load(x, dt, i) * mult);
            r = r < qmin ? qmin : (r > qmax ? qmax : r);
        }
        int v = (int)r;
        if (bits == 8) {
            ((int8_t *)q)[i] = (int8_t)v;
        } else {
            uint8_t *byte = (uint8_t *)q + i / 2;
            uint8_t nib = (uint8_t)(v & 0xf);
            /* The block owns both nibbles of its bytes (block is even): the
             * even element writes the whole byte, the odd one adds its half. */
            *byte = (i & 1) ? (uint8_t)(*byte | nib << 4) : nib;
        }
    }
    return scale;
}

static void cpu_quantize(const zt_backend *be, void *q, float *scales, const void *x,
                         zt_dtype dt, int64_t n, int64_t block, int bits)
{
    (void)be;
    if (n <= 0)
        return;
    int64_t nb = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        scales[b] = quant_block(q, x, dt, lo, hi, bits);
    }
}

static void cpu_dequantize(const zt_backend *be, void *y, zt_dtype dt, const void *q,
                           const float *scales, int64_t n, int64_t block, int bits,
                           bool accumulate)
{
    (void)be;
    if (n <= 0)
        return;
    int64_t nb = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        const float s = scales[b];
        for (int64_t i = lo; i < hi; i++) {
            float v = (float)quant_get(q, i, bits) * s;
            if (accumulate)
                v = quant_load(y, dt, i) + v;
            quant_store(y, dt, i, v);
        }
    }
}

void zt_backend_cpu_quant_ops(zt_backend *be)
{
    be->quantize = cpu_quantize;
    be->dequantize = cpu_dequantize;
}
