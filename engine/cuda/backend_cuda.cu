/*
 * backend_cuda: the CUDA backend (engine/cuda/cuda.h) on one device: init and
 * destroy, memory, copies, the compute stream and error recording, and the
 * backend's row of the backend table. The ops are in one file per job, each
 * filling its function pointers (cuda_impl.h) when init calls it:
 * backend_cuda_gemm.cu (cuBLAS GEMMs), backend_cuda_elementwise.cu (element-wise ops,
 * reductions, conversion), backend_cuda_optim.cu (Adam, SGD) and the
 * transformer layers (backend_cuda_nn.cu, backend_cuda_attn.cu,
 * backend_cuda_head.cu). Their shared kernel helpers are in cuda_common.cuh;
 * launch sizes and plans come from launch.c. Every op is enqueued on one
 * non-blocking compute stream. The typed ops (engine/backend.h, "Typed
 * tensors") take fp32, fp16 and bf16: their kernels are templates on the
 * dtype (cuda_common.cuh's with_dtype), so 16-bit tensors are read and
 * written as stored, and their GEMMs hand 16-bit operands to cuBLAS as they
 * are. linear_backward is left NULL (models/layers.c runs its gemm and
 * bias_grad sequence).
 *
 * Numerics follow the CPU backend operation for operation: products that
 * feed a sum are __fmul_rn/__fadd_rn intrinsics, which nvcc never fuses into
 * an FMA; each op file says what that makes bit-identical to the CPU.
 *
 * Ops must be called from a thread whose current device is this backend's
 * (init makes it current on the calling thread).
 *
 * Memory: the zt_cuda_impl (be->impl), its streams, cuBLAS handle, device
 * scratch and pinned result slot are made by init and freed by its destroy
 * (zt_backend_free). alloc/host_alloc memory belongs to the caller (the
 * arenas), and so does the workspace block passed to set_workspace.
 * Collective: none.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/cuda/cuda_common.cuh"
extern "C" {
#include "engine/env.h"
}

namespace {

/* ---- Memory, copies, errors. ---- */

zt_status cuda_alloc(const zt_backend *be, size_t bytes, void **out)
{
    zt_cuda_impl *impl = impl_of(be);
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaSuccess) {
        *out = p;
        return ZT_OK;
    }
    /* A failed allocation is not a device fault: clear it so that `check`
     * does not report it again. */
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        cudaGetLastError();
    if (rc != cudaErrorMemoryAllocation)
        return zt_fail(ZT_ERR_DEVICE, "the GPU is in an error state; earlier messages say why",
                       "cuda backend: cannot allocate %zu bytes on device %d: %s", bytes,
                       impl->device, cudaGetErrorString(rc));
    /* The trainer restates this with the arena's class and its remedies
     * (zt_train_reserve_failed); what is left to say is what no class
     * explains. */
    return zt_fail(ZT_ERR_OOM,
                   "other processes on this GPU (nvidia-smi) or more ranks per GPU leave less "
                   "than the memory check saw",
                   "cuda backend: cannot allocate %zu bytes on device %d (%zu of %zu bytes "
                   "free): %s",
                   bytes, impl->device, free_b, total_b, cudaGetErrorString(rc));
}

void cuda_free(const zt_backend *be, void *ptr)
{
    if (ptr)
        zt_cuda_record(impl_of(be), cudaFree(ptr), "free (cudaFree)");
}

zt_status cuda_host_alloc(const zt_backend *be, size_t bytes, void **out)
{
    (void)be;
    void *p = NULL;
    cudaError_t rc = cudaMallocHost(&p, bytes);
    if (rc == cudaSuccess) {
        *out = p;
        return ZT_OK;
    }
    cudaGetLastError();
    return zt_fail(ZT_ERR_OOM,
                   "host arenas are page-locked: lower the offloaded state (fewer parameters "
                   "per rank, more ranks) or raise the locked-memory limit (ulimit -l, the "
                   "container's memory)",
                   "cuda backend: cannot allocate %zu bytes of page-locked host memory: %s",
                   bytes, cudaGetErrorString(rc));
}

void cuda_host_free(const zt_backend *be, void *ptr)
{
    if (ptr)
        zt_cuda_record(impl_of(be), cudaFreeHost(ptr), "host_free (cudaFreeHost)");
}

void cuda_set_workspace(const zt_backend *be, void *ptr, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    /* GEMMs already queued may still use the old block, which the caller is
     * about to reuse or release. */
    sync_stream(impl, "set_workspace");
    impl->workspace = NULL;
    impl->workspace_bytes = 0;
    impl->cast_a = impl->cast_b = NULL;
    impl->cast_bytes = 0;
    if (!ptr || bytes == 0) {
        /* Setting the stream hands cuBLAS back its own workspace pool. */
        zt_cuda_record_blas(impl, cublasSetStream(impl->cublas, impl->stream),
                            "set_workspace (cublasSetStream)");
        return;
    }
    zt_launch_ws plan;
    plan.blas_bytes = impl->plan_blas_bytes;
    plan.cast_bytes = impl->plan_cast_bytes;
    plan.total_bytes = be->workspace_bytes;
    zt_launch_ws_parts parts = zt_launch_workspace_split((uintptr_t)ptr, bytes, &plan);
    char *base = static_cast<char *>(ptr);
    if (!zt_cuda_record_blas(impl,
                             cublasSetWorkspace(impl->cublas,
                                                parts.blas_bytes ? base + parts.blas_off : NULL,
                                                parts.blas_bytes),
                             "set_workspace (cublasSetWorkspace)"))
        return;
    impl->workspace = ptr;
    impl->workspace_bytes = bytes;
    if (parts.cast_bytes > 0) {
        impl->cast_a = base + parts.a_off;
        impl->cast_b = base + parts.b_off;
        impl->cast_bytes = parts.cast_bytes;
    }
}

zt_status cuda_check(const zt_backend *be)
{
    zt_cuda_impl *impl = impl_of(be);
    sync_stream(impl, "check (cudaStreamSynchronize)");
    zt_cuda_record(impl, cudaGetLastError(), "check (cudaGetLastError)");
    if (impl->error == ZT_OK)
        return ZT_OK;
    return zt_fail(impl->error,
                   "a device failure is reported by the first op that sees it, which may "
                   "come after the one that caused it: rerun with CUDA_LAUNCH_BLOCKING=1, or "
                   "under compute-sanitizer, to find that one",
                   "cuda backend: %s", impl->error_msg);
}

void cuda_copy_h2d(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_h2d (cudaMemcpyAsync)");
    sync_stream(impl, "copy_h2d (cudaStreamSynchronize)");
}

void cuda_copy_d2h(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_d2h (cudaMemcpyAsync)");
    sync_stream(impl, "copy_d2h (cudaStreamSynchronize)");
}

void cuda_copy_d2d(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0 || dst == src)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_d2d (cudaMemcpyAsync)");
}

void cuda_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemsetAsync(dst, 0, bytes, impl->stream),
                   "memset_zero (cudaMemsetAsync)");
}

void cuda_sync(const zt_backend *be) { sync_stream(impl_of(be), "sync"); }

zt_status cuda_mem_info(const zt_backend *be, zt_device_mem *out)
{
    zt_cuda_impl *impl = impl_of(be);
    *out = zt_device_mem{};
    size_t free_b = 0, total_b = 0;
    cudaError_t rc = cudaMemGetInfo(&free_b, &total_b);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return zt_fail(ZT_ERR_DEVICE, "check the GPU with nvidia-smi",
                       "cuda backend: cudaMemGetInfo on device %d failed: %s", impl->device,
                       cudaGetErrorString(rc));
    }
    out->free_bytes = free_b;
    out->total_bytes = total_b;
    if (!zt_backend_cuda_device_id(impl->device, out->id, sizeof out->id))
        snprintf(out->id, sizeof out->id, "ordinal %d", impl->device);
    return ZT_OK;
}

/* ---- Lifetime. ---- */

/* Releases whatever init made, in reverse order; NULL members are skipped. */
void impl_destroy(zt_cuda_impl *impl)
{
    if (impl->stream)
        cudaStreamSynchronize(impl->stream);
    if (impl->comm_stream)
        cudaStreamSynchronize(impl->comm_stream);
    if (impl->cublas)
        cublasDestroy(impl->cublas);
    if (impl->host_result)
        cudaFreeHost(impl->host_result);
    if (impl->scratch)
        cudaFree(impl->scratch);
    if (impl->comm_stream)
        cudaStreamDestroy(impl->comm_stream);
    if (impl->stream)
        cudaStreamDestroy(impl->stream);
    /* Teardown after a device fault fails too; nothing is left to report to. */
    cudaGetLastError();
    free(impl);
}

const char *const init_hint =
    "check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with --device cpu";

zt_status fail_cuda(zt_cuda_impl *impl, cudaError_t rc, const char *what)
{
    cudaGetLastError();
    return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: device %d: %s: %s", impl->device,
                   what, cudaGetErrorString(rc));
}

zt_status fail_blas(zt_cuda_impl *impl, cublasStatus_t rc, const char *what)
{
    return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: device %d: %s: %s", impl->device,
                   what, cublasGetStatusString(rc));
}

zt_status impl_init(zt_cuda_impl *impl)
{
    cudaError_t rc;
    cublasStatus_t st;
    if ((rc = cudaSetDevice(impl->device)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaSetDevice");
    cudaDeviceProp prop;
    if ((rc = cudaGetDeviceProperties(&prop, impl->device)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaGetDeviceProperties");
    impl->sm_count = prop.multiProcessorCount;
    /* A GPU this build has no code for fails every launch; say so now. */
    cudaFuncAttributes attr;
    if ((rc = zt_cuda_probe_kernels(&attr)) != cudaSuccess) {
        cudaGetLastError();
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "rebuild with an nvcc -gencode for this GPU's compute capability",
                       "cuda backend: this build has no kernels for device %d (%s, compute "
                       "capability %d.%d): %s",
                       impl->device, prop.name, prop.major, prop.minor, cudaGetErrorString(rc));
    }
    if ((rc = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaStreamCreateWithFlags");
    if ((rc = cudaStreamCreateWithFlags(&impl->comm_stream, cudaStreamNonBlocking)) !=
        cudaSuccess)
        return fail_cuda(impl, rc, "cudaStreamCreateWithFlags (comm stream)");
    if ((st = cublasCreate(&impl->cublas)) != CUBLAS_STATUS_SUCCESS) {
        impl->cublas = NULL;
        return fail_blas(impl, st, "cublasCreate");
    }
    if ((st = cublasSetStream(impl->cublas, impl->stream)) != CUBLAS_STATUS_SUCCESS)
        return fail_blas(impl, st, "cublasSetStream");
    /* TF32 only when asked: by default fp32 GEMMs are exact fp32. */
    cublasMath_t math = impl->opt.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if ((st = cublasSetMathMode(impl->cublas, math)) != CUBLAS_STATUS_SUCCESS)
        return fail_blas(impl, st, "cublasSetMathMode");
    if ((rc = cudaMalloc(&impl->scratch, ZT_CUDA_SCRATCH_BYTES)) != cudaSuccess) {
        impl->scratch = NULL;
        return fail_cuda(impl, rc, "cudaMalloc of the scratch");
    }
    impl->scratch_bytes = ZT_CUDA_SCRATCH_BYTES;
    if ((rc = cudaMallocHost(&impl->host_result, ZT_CUDA_HOST_RESULT_BYTES)) != cudaSuccess) {
        impl->host_result = NULL;
        return fail_cuda(impl, rc, "cudaMallocHost of the result slot");
    }
    impl->host_result_bytes = ZT_CUDA_HOST_RESULT_BYTES;
    return ZT_OK;
}

void cuda_destroy(zt_backend *be)
{
    if (be->impl)
        impl_destroy(impl_of(be));
    /* Clearing makes use after free fail loudly. */
    *be = zt_backend{};
}

} // namespace

/* ---- Exported. ---- */

bool zt_cuda_record(zt_cuda_impl *impl, cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return true;
    if (impl->error == ZT_OK) {
        impl->error = ZT_ERR_DEVICE;
        snprintf(impl->error_msg, sizeof impl->error_msg, "%s: %s (%s)", what,
                 cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    return false;
}

bool zt_cuda_record_blas(zt_cuda_impl *impl, cublasStatus_t rc, const char *what)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return true;
    if (impl->error == ZT_OK) {
        impl->error = ZT_ERR_DEVICE;
        snprintf(impl->error_msg, sizeof impl->error_msg, "%s: %s (%s)", what,
                 cublasGetStatusString(rc), cublasGetStatusName(rc));
    }
    return false;
}

void zt_cuda_record_msg(zt_cuda_impl *impl, zt_status st, const char *fmt, ...)
{
    if (impl->error != ZT_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(impl->error_msg, sizeof impl->error_msg, fmt, ap);
    va_end(ap);
    impl->error = st;
}

struct CUstream_st *zt_backend_cuda_stream(const zt_backend *be)
{
    return be->impl ? impl_of(be)->stream : NULL;
}

struct CUstream_st *zt_backend_cuda_comm_stream(const zt_backend *be)
{
    return be->impl ? impl_of(be)->comm_stream : NULL;
}

extern "C" bool zt_backend_cuda_built(void) { return true; }

extern "C" int zt_backend_cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    const char *reason = NULL;
    if (rc == cudaErrorInsufficientDriver)
        reason = "no CUDA driver, or one older than this build's CUDA runtime "
                 "(cudaErrorInsufficientDriver)";
    else if (rc == cudaErrorNoDevice)
        reason = "no CUDA device (cudaErrorNoDevice)";
    else if (rc != cudaSuccess)
        reason = cudaGetErrorString(rc); /* static text of the runtime */
    else if (n == 0)
        reason = "no CUDA device";
    if (!reason)
        return n;
    cudaGetLastError();
    if (why)
        *why = reason;
    return 0;
}

extern "C" zt_status zt_backend_cuda_init(zt_backend *be, const zt_backend_options *opt)
{
    *be = zt_backend{};
    if (opt->gemm_dtype != ZT_F32 && opt->gemm_dtype != ZT_F16 && opt->gemm_dtype != ZT_BF16)
        return zt_fail(ZT_ERR_INTERNAL, "", "cuda backend: GEMM dtype %d is not a dtype",
                       (int)opt->gemm_dtype);
    zt_launch_ws ws;
    ZT_TRY(zt_launch_workspace(zt_env_get()->cuda_gemm_workspace_mb, opt->gemm_dtype != ZT_F32,
                               &ws));
    const char *why = "";
    int count = zt_backend_cuda_device_count(&why);
    if (count == 0)
        return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: %s", why);
    if (opt->device < 0 || opt->device >= count)
        return zt_fail(ZT_ERR_DEVICE, init_hint,
                       "cuda backend: device %d does not exist (%d visible)", opt->device, count);

    zt_cuda_impl *impl = static_cast<zt_cuda_impl *>(calloc(1, sizeof *impl));
    if (!impl)
        return zt_fail(ZT_ERR_OOM, "", "cuda backend: cannot allocate its state");
    impl->device = opt->device;
    impl->opt = *opt;
    impl->error = ZT_OK;
    impl->plan_blas_bytes = ws.blas_bytes;
    impl->plan_cast_bytes = ws.cast_bytes;
    zt_status st = impl_init(impl);
    if (st != ZT_OK) {
        impl_destroy(impl);
        return st;
    }

    be->name = "cuda";
    be->kind = ZT_DEVICE_CUDA;
    be->impl = impl;
    be->destroy = cuda_destroy;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->mem_info = cuda_mem_info;
    be->workspace_bytes = ws.total_bytes;
    be->workspace_cast_bytes = 2 * ws.cast_bytes;
    /* Every typed op's kernels take fp32, fp16 and bf16 tensors as stored. */
    be->typed_dtypes = 1u << ZT_F32 | 1u << ZT_F16 | 1u << ZT_BF16;
    be->set_workspace = cuda_set_workspace;
    be->check = cuda_check;
    be->copy_h2d = cuda_copy_h2d;
    be->copy_d2h = cuda_copy_d2h;
    be->copy_d2d = cuda_copy_d2d;
    be->memset_zero = cuda_memset_zero;
    be->sync = cuda_sync;
    zt_backend_cuda_gemm_ops(be);
    zt_backend_cuda_elementwise_ops(be);
    zt_backend_cuda_optim_ops(be);
    zt_backend_cuda_nn_ops(be);
    zt_backend_cuda_attn_ops(be);
    zt_backend_cuda_flash_ops(be);
    zt_backend_cuda_head_ops(be);
    zt_backend_cuda_quant_ops(be);
    zt_backend_cuda_fused_ops(be);
    return ZT_OK;
}

extern "C" bool zt_backend_cuda_device_id(int ordinal, char *out, size_t n)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    size_t len = 0;
    for (int i = 0; i < 16 && len + 3 <= n; i++)
        len += (size_t)snprintf(out + len, n - len, "%02x", (unsigned char)prop.uuid.bytes[i]);
    return len == 32;
}

extern "C" void zt_backend_cuda_select_early(int ordinal)
{
    if (cudaSetDevice(ordinal) != cudaSuccess)
        cudaGetLastError();
}

extern "C" const zt_backend_entry zt_backend_cuda_entry = {
    "cuda",
    ZT_DEVICE_CUDA,
    zt_backend_cuda_built,
    zt_backend_cuda_device_count,
    zt_backend_cuda_init,
    zt_backend_cuda_device_id,
    zt_backend_cuda_select_early,
};
