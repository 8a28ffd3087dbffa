/*
 * cuda_impl: what the CUDA backend's translation units (the .cu files here)
 * and the NCCL comm share: the backend's state, its error recording, and the
 * functions by which each op file fills its function pointers. Private to
 * engine/cuda and engine/comm/nccl.c; plain C so that nccl.c can include it.
 *
 * Memory: zt_cuda_impl is owned by the zt_backend (be->impl) and freed by its
 * destroy (zt_backend_free), with its streams, cuBLAS handle and the small
 * fixed scratch made once at init (reduction partials, a pinned result slot).
 * The workspace belongs to the caller of set_workspace (a WORK-arena block).
 * Collective: none.
 */
#ifndef ZT_CUDA_IMPL_H
#define ZT_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "engine/backend.h"
#include "engine/cuda/cuda.h"

typedef struct {
    int device;
    zt_backend_options opt;
    int sm_count;             /* multiprocessors, for grid sizing */
    cudaStream_t stream;      /* the compute stream: every op is ordered on it */
    /* The comm stream: the collectives of every NCCL communicator on this
     * device, in the order the host issues them (engine/comm/nccl.c). */
    cudaStream_t comm_stream;
    cublasHandle_t cublas;
    /* Workspace from set_workspace (may be NULL): cuBLAS workspace first, then
     * the GEMM operand cast buffers. */
    void *workspace;
    size_t workspace_bytes;
    /* Inside the workspace: the 16-bit GEMM path's buffers for A and B,
     * cast_bytes each (NULL and 0: every GEMM runs in fp32). */
    void *cast_a;
    void *cast_b;
    size_t cast_bytes;
    /* What init planned for cuBLAS's part and for each cast buffer. */
    size_t plan_blas_bytes;
    size_t plan_cast_bytes;
    /* Fixed scratch from init: per-block partial sums (double) and flags. */
    void *scratch;
    size_t scratch_bytes;
    void *host_result; /* pinned, for values ops return to the host */
    size_t host_result_bytes;
    /* First failure, kept until `check` reports it. */
    zt_status error;
    char error_msg[256];
} zt_cuda_impl;

/* Records the first CUDA failure of an op (later ones are dropped): `what`
 * names the op. Returns true when rc is cudaSuccess. */
bool zt_cuda_record(zt_cuda_impl *impl, cudaError_t rc, const char *what);
bool zt_cuda_record_blas(zt_cuda_impl *impl, cublasStatus_t rc, const char *what);
/* Records a failure the backend finds itself (not a CUDA or cuBLAS code). */
void zt_cuda_record_msg(zt_cuda_impl *impl, zt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Each op file fills the function pointers of the ops it defines and leaves
 * the rest of *be as it is; zt_backend_cuda_init calls every one. */
void zt_backend_cuda_gemm_ops(zt_backend *be);        /* backend_cuda_gemm.cu */
void zt_backend_cuda_elementwise_ops(zt_backend *be); /* backend_cuda_elementwise.cu */
void zt_backend_cuda_optim_ops(zt_backend *be);       /* backend_cuda_optim.cu */
void zt_backend_cuda_nn_ops(zt_backend *be);          /* backend_cuda_nn.cu */
void zt_backend_cuda_attn_ops(zt_backend *be);        /* backend_cuda_attn.cu */
void zt_backend_cuda_flash_ops(zt_backend *be);       /* backend_cuda_flash.cu */
void zt_backend_cuda_head_ops(zt_backend *be);        /* backend_cuda_head.cu */
void zt_backend_cuda_quant_ops(zt_backend *be);       /* backend_cuda_quant.cu */
void zt_backend_cuda_fused_ops(zt_backend *be);       /* backend_cuda_fused.cu */

/* cudaFuncGetAttributes of one of the backend's kernels, which fails when the
 * build has no code for the current device (backend_cuda_elementwise.cu). */
cudaError_t zt_cuda_probe_kernels(struct cudaFuncAttributes *attr);

#ifdef __cplusplus
}
#endif

#endif
