/*
 * backend_cpu_nn: the CPU backend's transformer-layer ops (embedding, sinusoidal
 * positions, layernorm, GELU, batched gemm, attention softmax, fused attention
 * (backend_cpu_flash.c), keyed dropout, mean pooling, and the fused epilogues:
 * residual + layernorm, linear + bias + activation, activation gradient + bias
 * gradient), kept apart from backend_cpu.c so each file stays readable.
 * Private to engine/cpu: the rest of the tree reaches these ops only through
 * the zt_backend function pointers that zt_backend_cpu_init fills.
 *
 * Every op writes each output element from one thread with a fixed order of
 * additions, so results are bit-identical for any OMP_NUM_THREADS.
 *
 * Memory: ops write only the buffers they are given and allocate nothing.
 * Collective: none.
 */
#ifndef ZT_BACKEND_CPU_NN_H
#define ZT_BACKEND_CPU_NN_H

#include <stdint.h>

#include "engine/backend.h"

/* Below this many elements an op runs on one thread: waking the team costs
 * more than the loop. Shared by every CPU op. */
#define ZT_CPU_PAR_MIN 32768

/* Columns per bias_grad task (and act_bias_grad's, which must sum alike): 64
 * floats are four cache lines, wide enough for full-line reads down a column
 * block, narrow enough to give threads work. */
#define ZT_CPU_BIAS_COL_BLOCK 64

/* sum of a * b in float32: eight lanes, then a fixed tree, so a dot product
 * has the same bits wherever it is taken (attention softmax backward, the
 * fused attention's rowsum(dO * O)). */
static inline float zt_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Fills the transformer-layer function pointers of a CPU backend; the rest of
 * *be is left as it is. */
void zt_backend_cpu_nn_ops(zt_backend *be);
/* The fused attention ops (backend_cpu_flash.c); zt_backend_cpu_nn_ops calls it. */
void zt_backend_cpu_flash_ops(zt_backend *be);

#endif
