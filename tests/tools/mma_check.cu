/*
 * mma-check: engine/cuda/mma.cuh's primitives on a real GPU (sm_80 or later)
 * against the scalar references of tests/cudasim/sim_test_mma.cu, the same
 * cases the simulator passes in CI: mma.sync m16n8k16 bf16 and fp16,
 * ldmatrix x1/x2/x4 plain and .trans, ldmatrix feeding mma, cp.async groups.
 * A fragment layout that the kernels and the simulator got wrong the same way
 * fails here. scripts/gpu-lease.sh run executes it first on any GPU loan.
 *
 *   build/tests/mma-check        exit 0 when every case holds
 */
#include "tests/cudasim/sim_test.h"

#include <stdio.h>

int st_failed;

int main(void)
{
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "mma-check: no CUDA device\n");
        return 2;
    }
    if (prop.major < 8) {
        fprintf(stderr, "mma-check: %s is sm_%d%d; mma.m16n8k16 bf16 and cp.async need sm_80\n",
                prop.name, prop.major, prop.minor);
        return 2;
    }
    printf("mma-check on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    const char *cases[] = {"mma", "ldmatrix", "cp-async"};
    int bad = 0;
    for (const char *c : cases) {
        st_failed = 0;
        int rc = st_mma(c);
        printf("mma-check %s: %s\n", c, rc ? "FAIL" : "ok");
        bad |= rc;
    }
    return bad ? 1 : 0;
}
