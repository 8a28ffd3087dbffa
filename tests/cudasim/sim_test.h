/*
 * sim_test: the CUDA simulator's own test cases (build/sim/sim-test CASE),
 * which tests/cudasim/test_sim.sh runs one process per case and judges by
 * exit status and output: sim_test.cu has the runtime and kernel cases,
 * sim_test_lib.cu the cuBLAS and NCCL ones, sim_test_perf.cu the performance
 * counters, sim_test_mma.cu the warp-level matrix and async-copy primitives.
 *
 * A case returns 0 when everything it checked held; a failed check prints
 * "FAIL: ..." and the case returns 1. Cases that provoke an error the
 * simulator reports (a race, a host pointer) check the error code the program
 * sees; the script checks the report's text.
 *
 * Memory: each case frees what it allocates (unless it ends the device).
 * Collective: the nccl cases run under mpirun -np 2 and are collective over
 * MPI_COMM_WORLD.
 */
#ifndef ZT_SIM_TEST_H
#define ZT_SIM_TEST_H

#include <cuda_runtime.h>
#include <stdio.h>

/* Prints "FAIL: what" and makes the running case fail when !ok. */
#define ST_CHECK(ok, ...)                                                                         \
    do {                                                                                          \
        if (!(ok)) {                                                                              \
            printf("FAIL: %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                  \
            printf("\n");                                                                         \
            st_failed = 1;                                                                        \
        }                                                                                         \
    } while (0)

#define ST_CUDA(call)                                                                             \
    do {                                                                                          \
        cudaError_t st_rc = (call);                                                               \
        ST_CHECK(st_rc == cudaSuccess, "%s: %s", #call, cudaGetErrorString(st_rc));               \
    } while (0)

extern int st_failed;

int st_cublas(void);
int st_nccl(void);
int st_nccl_hang(void);
int st_nccl_dup(void);
int st_perf(void);
int st_mma(const char *arg);

#endif
