/*
 * quant-dump: runs the CPU backend's block quantization ops (quantize,
 * dequantize; engine/backend.h) on random blocks and edge cases and writes
 * inputs and outputs as JSON, for tests/reference/test_quant_numpy.py to check
 * against its float64 numpy reference:
 *
 *     build/tests/quant-dump OUT.json
 *
 * Cases: fp32, fp16 and bf16 inputs; int8 (qwZ) and int4 (qgZ); DeepSpeed's
 * qwZ block for a layout shard (engine/zero/quant.h's zt_qwz_block, also its
 * 8-element worst case), qgZ's 256, and lengths that end in a short block;
 * and zt_qwz_block itself over a range of shard lengths.
 * Blocks are scaled by 10^k (k from -3 to 3); block 1 is all zero, block 2 a
 * single huge value among small ones, block 3 all negative, block 4 holds
 * both +a and -a exactly, block 5 an inf, block 6 a NaN, block 7 values so
 * small that the multiplier overflows; the others are plain random. Every value is written as its bits
 * (fp32: 32-bit, fp16/bf16: 16-bit), q as integers, so nothing is lost.
 *
 * Memory: host buffers, freed per case. Collective: none (no MPI).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/dtype.h"
#include "engine/zero/quant.h"

static uint64_t dump_state = 0x9e3779b97f4a7c15ull;

static double dump_uniform(void)
{
    uint64_t z = (dump_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

/* Roughly normal (a sum of four uniforms), times 10^k per block. */
static void dump_inputs(float *x, int64_t n, int64_t block)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        double mag = pow(10.0, (double)((b % 7) - 3));
        for (int64_t i = lo; i < hi; i++) {
            double s = dump_uniform() + dump_uniform() + dump_uniform() + dump_uniform() - 2.0;
            x[i] = (float)(s * mag);
        }
        switch (b) {
        case 1:
            for (int64_t i = lo; i < hi; i++)
                x[i] = 0.0f;
            break;
        case 2:
            x[lo + (hi - lo) / 3] = 3e4f;
            break;
        case 3:
            for (int64_t i = lo; i < hi; i++)
                x[i] = -fabsf(x[i]) - 1e-3f;
            break;
        case 4:
            if (hi - lo >= 2) {
                x[lo] = 2.5f;
                x[hi - 1] = -2.5f;
            }
            break;
        case 5:
            x[lo] = INFINITY;
            break;
        case 6:
            x[hi - 1] = NAN;
            break;
        case 7:
            for (int64_t i = lo; i < hi; i++)
                x[i] *= 1e-36f;
            break;
        default:
            break;
        }
    }
}

static void dump_bits(FILE *f, const char *key, const void *p, zt_dtype dt, int64_t n)
{
    fprintf(f, "\"%s\": [", key);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        if (dt == ZT_F32)
            memcpy(&u, (const char *)p + 4 * i, 4);
        else
            u = ((const uint16_t *)p)[i];
        fprintf(f, "%s%u", i ? "," : "", (unsigned)u);
    }
    fprintf(f, "]");
}

static int dump_case(FILE *f, const zt_backend *be, bool first, zt_dtype dt, int bits, int64_t n,
                     int64_t block)
{
    int64_t nb = (n + block - 1) / block;
    size_t qbytes = (size_t)(n * bits + 7) / 8;
    size_t es = zt_dtype_size(dt);
    float *x32 = malloc((size_t)n * sizeof(float)), *y0_32 = malloc((size_t)n * sizeof(float));
    float *scales = malloc((size_t)nb * sizeof(float));
    void *x = malloc((size_t)n * es), *y = malloc((size_t)n * es), *yacc = malloc((size_t)n * es);
    void *y0 = malloc((size_t)n * es);
    uint8_t *q = malloc(qbytes);
    if (!x32 || !y0_32 || !scales || !x || !y || !yacc || !y0 || !q) {
        fprintf(stderr, "quant-dump: out of memory\n");
        return 1;
    }
    dump_inputs(x32, n, block);
    for (int64_t i = 0; i < n; i++)
        y0_32[i] = (float)(dump_uniform() * 2.0 - 1.0);
    zt_convert_host(x, dt, x32, ZT_F32, n, 1.0f, false);
    zt_convert_host(y0, dt, y0_32, ZT_F32, n, 1.0f, false);
    memcpy(yacc, y0, (size_t)n * es);
    be->quantize(be, q, scales, x, dt, n, block, bits);
    be->dequantize(be, y, dt, q, scales, n, block, bits, false);
    be->dequantize(be, yacc, dt, q, scales, n, block, bits, true);

    fprintf(f, "%s{\"dtype\": \"%s\", \"bits\": %d, \"n\": %lld, \"block\": %lld, ", first ? "" : ",\n",
            zt_dtype_name(dt), bits, (long long)n, (long long)block);
    dump_bits(f, "x", x, dt, n);
    fprintf(f, ", \"q\": [");
    for (int64_t i = 0; i < n; i++) {
        int v;
        if (bits == 8) {
            v = ((int8_t *)q)[i];
        } else {
            int b = q[i / 2], nib = (i & 1) ? b >> 4 : b & 0xf;
            v = nib >= 8 ? nib - 16 : nib;
        }
        fprintf(f, "%s%d", i ? "," : "", v);
    }
    fprintf(f, "], ");
    /* The odd tail's unused nibble must be 0. */
    fprintf(f, "\"pad_nibble\": %d, ", bits == 4 && (n & 1) ? q[n / 2] >> 4 : 0);
    dump_bits(f, "scales", scales, ZT_F32, nb);
    fprintf(f, ", ");
    dump_bits(f, "y", y, dt, n);
    fprintf(f, ", ");
    dump_bits(f, "y0", y0, dt, n);
    fprintf(f, ", ");
    dump_bits(f, "yacc", yacc, dt, n);
    fprintf(f, "}");
    free(x32);
    free(y0_32);
    free(scales);
    free(x);
    free(y);
    free(yacc);
    free(y0);
    free(q);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: quant-dump OUT.json\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    zt_backend be;
    if (zt_backend_cpu_init(&be) != ZT_OK)
        return 1;
    /* qwZ: layout shards of 24016 elements (DeepSpeed's block: 1264) and
     * 100000 (5000), and 8 * 1009, whose only blocks are 8 elements. */
    int64_t qwz_n[] = {24016, 8 * 1009, 100000};
    int64_t qwz_block[3];
    for (int i = 0; i < 3; i++)
        if (zt_qwz_block(qwz_n[i], &qwz_block[i]) != ZT_OK) {
            fprintf(stderr, "quant-dump: %s\n", zt_status_message());
            return 1;
        }
    const struct {
        int bits;
        int64_t n, block;
    } cases[] = {
        {8, qwz_n[0], qwz_block[0]}, {8, qwz_n[1], qwz_block[1]}, {8, qwz_n[2], qwz_block[2]},
        {8, 2000, 256},              {4, 2000, 256},              {4, 1000, ZT_QGZ_BLOCK},
        {4, 257, ZT_QGZ_BLOCK},      {4, 7, ZT_QGZ_BLOCK},        {8, 7, 4},
        {4, 4099, 16},
    };
    /* zt_qwz_block over shard lengths the layout makes (multiples of 16). */
    fprintf(f, "{\"qwz_blocks\": {");
    for (int64_t n = 16, i = 0; n <= 40000000; n = n < 200000 ? n + 16 * 37 : n * 3 + 16, i++) {
        int64_t b = 0;
        if (zt_qwz_block(n, &b) != ZT_OK) {
            fprintf(stderr, "quant-dump: %s\n", zt_status_message());
            return 1;
        }
        fprintf(f, "%s\"%lld\": %lld", i ? ", " : "", (long long)n, (long long)b);
    }
    fprintf(f, "}, \"cases\": [\n");
    bool first = true;
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (dump_case(f, &be, first, (zt_dtype)dt, cases[c].bits, cases[c].n, cases[c].block))
                return 1;
            first = false;
        }
    fprintf(f, "]}\n");
    zt_backend_free(&be);
    return fclose(f) == 0 ? 0 : 1;
}
