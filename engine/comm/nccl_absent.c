/*
 * nccl_absent: what a build without NCCL says when asked for the NCCL
 * communicator (the Makefile compiles this file instead of nccl.c when it
 * finds no NCCL), so the choice is made at run time with a clear message.
 *
 * Memory: none. Collective: none (init fails on every rank alike).
 */
#include <string.h>

#include "engine/comm/comm.h"

bool zt_comm_nccl_built(void) { return false; }

zt_status zt_comm_nccl_init(zt_comm *c, MPI_Comm parent, const zt_backend *be)
{
    (void)parent, (void)be;
    memset(c, 0, sizeof *c);
    return zt_fail(ZT_ERR_UNSUPPORTED,
                   "install NCCL (with the CUDA toolkit) and rebuild, or use --comm mpi",
                   "--comm nccl: this zerotrain was built without NCCL");
}
