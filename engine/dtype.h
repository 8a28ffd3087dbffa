/*
 * dtype: the element types tensors are stored in (fp32, fp16, bf16) and the
 * host-side conversions between them.
 *
 * Mixed precision stores parameters, activations and gradients in 16 bits and
 * computes in fp32: every op converts 16-bit inputs to fp32, works in fp32 and
 * rounds its result once. Rounding is IEEE round-to-nearest-even for both
 * 16-bit formats; fp16 results beyond its range become +-inf (that is how an
 * fp16 overflow shows up for the loss scaler), NaN stays NaN (quiet) and keeps
 * its sign; fp16 subnormals are produced and read exactly. bf16 is the top 16
 * bits of an fp32 rounded to nearest even (its range is fp32's).
 *
 * The zt_convert_host family runs on host memory with OpenMP over chunks and
 * compiler-vectorised inner loops; the CPU backend's `convert` op and the
 * offloaded optimizer call it. Results never depend on the thread count.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { ZT_F32 = 0, ZT_F16, ZT_BF16, ZT_NDTYPES } zt_dtype;

size_t zt_dtype_size(zt_dtype dt);
const char *zt_dtype_name(zt_dtype dt); /* "fp32", "fp16", "bf16" */

/* Element i of a tensor of dt at p. */
static inline void *zt_dtype_at(const void *p, zt_dtype dt, int64_t i)
{
    return (char *)p + i * (int64_t)zt_dtype_size(dt);
}

/* One value. Widening is exact; a signalling NaN comes out quiet. */
uint16_t zt_f32_to_f16(float x);
float zt_f16_to_f32(uint16_t h);
uint16_t zt_f32_to_bf16(float x);
float zt_bf16_to_f32(uint16_t h);

/* dst(n) = (accumulate ? dst : 0) + alpha * src, element by element: src and
 * (when accumulating) dst are read as fp32, the sum is formed in fp32 as
 * `dst + alpha * src` (two roundings: the product, then the sum; alpha == 1
 * multiplies exactly) and rounded once to dst's type. Without accumulate the
 * result is `alpha * src` itself (a -0 stays -0). Any pair of types; dst ==
 * src is allowed when the types are equal, other overlaps are not. */
void zt_convert_host(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, int64_t n,
                     float alpha, bool accumulate);

/* Sum of squares of x(n) read as fp32, accumulated in float64 in a fixed
 * order (the value does not depend on the thread count). */
double zt_sum_squares_host(const void *x, zt_dtype dt, int64_t n);

/* Any inf or nan among x(n). */
bool zt_has_inf_nan_host(const void *x, zt_dtype dt, int64_t n);

#endif
