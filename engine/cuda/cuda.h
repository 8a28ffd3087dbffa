/*
 * cuda: what is specific to the CUDA backend (cuBLAS + engine/cuda kernels) on
 * one device, with one non-blocking compute stream. The rest of the tree
 * reaches it through the backend table (zt_backend_cuda_entry,
 * engine/backend.h). Compiled when the Makefile finds nvcc (ZT_HAVE_CUDA);
 * otherwise cuda_absent.c says so (not built, count 0, init fails with
 * ZT_ERR_UNSUPPORTED). Plain C with no CUDA header, so it can be included in
 * either build.
 *
 * Memory: the backend's state is made by init and freed by zt_backend_free.
 * Collective: none.
 */
#ifndef ZT_CUDA_H
#define ZT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* backend.h has no linkage guard of its own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "engine/backend.h"

bool zt_backend_cuda_built(void);
/* GPUs this process can use; 0 with *why set (static text: no driver, no
 * device, not built with CUDA) when there are none. */
int zt_backend_cuda_device_count(const char **why);
/* Device `ordinal`'s UUID as 32 hex digits (engine/backend.h device_id). */
bool zt_backend_cuda_device_id(int ordinal, char *out, size_t n);
/* cudaSetDevice before MPI starts (engine/backend.h select_early). */
void zt_backend_cuda_select_early(int ordinal);
/* Makes the backend on device opt->device (made current on the calling
 * thread), with opt->tf32 and opt->gemm_dtype for its GEMMs. */
zt_status zt_backend_cuda_init(zt_backend *be, const zt_backend_options *opt);

/* The compute stream of a CUDA backend (a cudaStream_t, named by its struct so
 * that this header needs no CUDA header), for the NCCL comm. Only in builds
 * with CUDA. */
struct CUstream_st *zt_backend_cuda_stream(const zt_backend *be);
/* The comm stream every NCCL communicator on this device issues on: one per
 * device, so that collectives of the world and of hpZ/MiCS sub-communicators
 * never run at the same time (NCCL documents concurrent communicators on one
 * device as able to deadlock). */
struct CUstream_st *zt_backend_cuda_comm_stream(const zt_backend *be);

#ifdef __cplusplus
}
#endif

#endif
