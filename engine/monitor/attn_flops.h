/*
 * attn_flops: the FLOPs the CUDA backend's fused attention kernels execute
 * for one attn_flash_forward or attn_flash_backward call (the --profile
 * counts' model, "counts_model": "cuda"; engine/monitor/profile.c), and how
 * many of them run on tensor cores. Recomputation and the work of whole
 * tiles that masks leave partly empty are included; key padding is not
 * known to the host and is counted as full length.
 *
 * Two kernel families (engine/cuda/backend_cuda_flash*.cu), picked as the
 * backend picks them:
 *   tensor cores (bf16, fp16; head size 64 or 128; scale > 0): the forward
 *     scores and P V over 64-row query blocks and key tiles of 64 (hs 64) or
 *     32 (hs 128), 4 hs FLOPs a query-key pair; the backward's five products
 *     (S, dP, dV, dK, dQ) over key blocks of 64 or 32 and query tiles of as
 *     many, 10 hs a pair, plus the row sums D = rowsum(dY Y) on FMA;
 *   scalar FMA (everything else): heads up to 128 wide at their width
 *     rounded up to 32, 64 or 128 in one column window (two at 128), wider
 *     ones at their width in windows of 128; each window recomputes the
 *     scores (and backward dP). Forward 2 W + 2 FLOPs a pair and column,
 *     backward 8 W + 6, over the causal triangle or all t^2 pairs.
 * Keep in step with fm<HD> (backend_cuda_flash_mma.cu), fr<HSM> and FL_COLS
 * (backend_cuda_flash.cu), and flash_mma_fits.
 *
 * Memory: none. Collective: none.
 */
#ifndef ZT_MONITOR_ATTN_FLOPS_H
#define ZT_MONITOR_ATTN_FLOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/dtype.h"

typedef struct {
    uint64_t flops;        /* all of the call's FLOPs */
    uint64_t tensor_flops; /* of which on tensor cores (mma.sync) */
} zt_attn_flops;

/* Whether the CUDA backend runs a call of dt at head size hs and this scale
 * on tensor cores (flash_mma_fits, alignment aside). */
bool zt_attn_flops_tensor_path(zt_dtype dt, int64_t hs, float scale);

zt_attn_flops zt_attn_flops_forward(zt_dtype dt, int64_t n, int64_t h, int64_t t, int64_t c,
                                    float scale, bool causal);
zt_attn_flops zt_attn_flops_backward(zt_dtype dt, int64_t n, int64_t h, int64_t t, int64_t c,
                                     float scale, bool causal);

#endif
