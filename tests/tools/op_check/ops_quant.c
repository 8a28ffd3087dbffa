/*
 * ops_quant: op-check's cases of the block quantization ops (quantize,
 * dequantize; engine/backend.h). Both backends follow the same fp32
 * operations, so every output must match bit for bit (ndiff 0): the packed
 * values, the scales and the dequantized (and accumulated) results, for every
 * dtype, 8 and 4 bits, DeepSpeed's qwZ block and qgZ's 256, tails shorter
 * than a block, and blocks that are all zero, hold an inf or a NaN, or are
 * tiny enough that the multiplier overflows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

/* Random values in [-1, 1) with special blocks: block 0 all zero, block 1
 * one huge value, block 2 an inf, block 3 a NaN, block 4 tiny (subnormal). */
static float *quant_inputs(int64_t n, int64_t block)
{
    float *x = oc_rand_f32(n, -1, 1);
    for (int64_t b = 0; b < 5 && (b + 1) * block <= n; b++)
        for (int64_t i = b * block; i < (b + 1) * block; i++) {
            if (b == 0)
                x[i] = 0.0f;
            else if (b == 4)
                x[i] *= 1e-39f;
        }
    if (2 * block <= n)
        x[block + block / 3] = 3e4f;
    if (3 * block <= n)
        x[2 * block + 1] = INFINITY;
    if (4 * block <= n)
        x[3 * block + 2] = NAN;
    return x;
}

static void quant_run(zt_dtype dt, int bits, int64_t n, int64_t block)
{
    tcase k;
    oc_begin(&k, "quantize", "ndiff", THR_EXACT, "%s int%d n=%lld block %lld (special blocks)",
             zt_dtype_name(dt), bits, (long long)n, (long long)block);
    int64_t nb = (n + block - 1) / block;
    size_t qbytes = (size_t)(n * bits + 7) / 8;
    float *hx = quant_inputs(n, block);
    void *hxd = oc_to_dtype(hx, n, dt);
    uint8_t *hq0 = oc_rand_bytes((int64_t)qbytes);
    float *hs0 = oc_filled(nb, 7.0f);
    pair x = oc_pair_new(hxd, (size_t)n * zt_dtype_size(dt));
    pair q = oc_pair_new(hq0, qbytes), s = oc_pair_f32(hs0, nb);
    oc.cpu.quantize(&oc.cpu, q.c, s.c, x.c, dt, n, block, bits);
    oc.gpu.quantize(&oc.gpu, q.g, s.g, x.g, dt, n, block, bits);
    uint8_t *gq = oc_fetch(&q);
    for (size_t i = 0; i < qbytes; i++)
        if (gq[i] != ((uint8_t *)q.c)[i])
            oc_miss(&k, "q byte %zu = 0x%x, cpu 0x%x", i, gq[i], ((uint8_t *)q.c)[i]);
    free(gq);
    oc_cmp_bits(&k, "scales", &s, ZT_F32, nb);
    oc_end(&k);

    /* Dequantize what the CPU made, into a fresh output and accumulating. */
    for (int acc = 0; acc < 2; acc++) {
        oc_begin(&k, "dequantize", "ndiff", THR_EXACT, "%s int%d n=%lld block %lld accumulate=%d",
                 zt_dtype_name(dt), bits, (long long)n, (long long)block, acc);
        float *hy = oc_rand_f32(n, -1, 1);
        void *hyd = oc_to_dtype(hy, n, dt);
        pair y = oc_pair_new(hyd, (size_t)n * zt_dtype_size(dt));
        pair qc = oc_pair_new(q.c, qbytes), sc = oc_pair_new(s.c, (size_t)nb * sizeof(float));
        oc.cpu.dequantize(&oc.cpu, y.c, dt, qc.c, sc.c, n, block, bits, acc);
        oc.gpu.dequantize(&oc.gpu, y.g, dt, qc.g, sc.g, n, block, bits, acc);
        oc_cmp_bits(&k, "y", &y, dt, n);
        oc_pair_free(&y);
        oc_pair_free(&qc);
        oc_pair_free(&sc);
        free(hy);
        free(hyd);
        oc_end(&k);
    }
    oc_pair_free(&x);
    oc_pair_free(&q);
    oc_pair_free(&s);
    free(hx);
    free(hxd);
    free(hq0);
    free(hs0);
}

void op_quantize(void)
{
    /* qwZ's block for a 1.6M-element shard (DeepSpeed's group size), qgZ's
     * 256, and a 5000-element block with a short tail. */
    const struct {
        int64_t n, block;
        int bits;
    } cases[] = {
        {1600000, 8000, 8}, {50001, 5000, 8}, {7, 256, 8},
        {1 << 20, 256, 4},  {50001, 256, 4},  {7, 256, 4},
    };
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (oc.quick && cases[c].n > 100000)
                continue;
            quant_run((zt_dtype)dt, cases[c].bits, cases[c].n, cases[c].block);
        }
}
