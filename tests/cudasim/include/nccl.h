/*
 * nccl.h (zerotrain's CUDA simulator, tests/cudasim): the NCCL calls
 * zerotrain makes, with the library's names and values, run over MPI (every
 * rank is an MPI process; MPI must be initialised, with
 * MPI_THREAD_MULTIPLE, before ncclCommInitRank). Collectives are stream
 * operations of the simulator's device thread: a collective starts when its
 * stream reaches it and, per communicator, in the order the host issued them
 * (as NCCL serialises a communicator's work); it then proceeds without
 * blocking the device thread. Sums add in fp32 in rank order, rounding
 * 16-bit elements back after each addition; max lets a NaN win.
 *
 * A collective whose peers do not all join within ZT_SIM_NCCL_TIMEOUT
 * seconds (default 120) is reported as the hang it would be on real NCCL
 * (naming this rank's communicators and their pending collectives), fails,
 * and sets the communicator's asynchronous error (ncclCommGetAsyncError).
 *
 * ncclCommInitRank: the unique id's creator must be one of the ranks (it is,
 * when rank 0 makes it, as zerotrain does). Only float32, float16 and
 * bfloat16 with sum or max are supported; anything else is
 * ncclInvalidArgument.
 *
 * Memory: a communicator is made by init or split and freed by destroy or
 * abort. Thread safety: a communicator is used by one host thread at a time;
 * ncclCommGetAsyncError may be called from any thread.
 */
#ifndef ZS_NCCL_H
#define ZS_NCCL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE 22800

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclComm *ncclComm_t;

/* ncclCommSplit's config: only `blocking` is read (non-blocking
 * communicators are not simulated: 0 is ncclInvalidArgument). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, 1}

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9
} ncclDataType_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *unique_id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId comm_id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
/* Groups nest. A collective is queued as it is called, which is NCCL's
 * behaviour for one collective per communicator; the sends and receives of a
 * group are held until the outermost ncclGroupEnd and then run as one
 * operation per communicator and stream, all posted at once, as NCCL fuses
 * them (so an exchange in both directions cannot deadlock). */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
