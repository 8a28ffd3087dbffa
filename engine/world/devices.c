/*
 * devices: device and communicator choice and construction
 * (engine/world/devices.h).
 */
#include "engine/world/devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/env.h"

zt_status zt_device_choose(const zt_device_request *req, zt_device_choice *out)
{
    memset(out, 0, sizeof *out);
    bool want_cuda = !strcmp(req->device, "cuda");
    bool want_nccl = !strcmp(req->comm, "nccl");
    if (strcmp(req->device, "auto") && strcmp(req->device, "cpu") && !want_cuda)
        return zt_fail(ZT_ERR_USAGE, "", "--device must be auto, cpu or cuda, not '%s'",
                       req->device);
    if (strcmp(req->comm, "auto") && strcmp(req->comm, "mpi") && !want_nccl)
        return zt_fail(ZT_ERR_USAGE, "", "--comm must be auto, mpi or nccl, not '%s'", req->comm);
    if (want_cuda && !req->cuda_built)
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "rebuild on a machine with the CUDA toolkit (make CUDA_HOME=...), or "
                       "use --device cpu",
                       "--device cuda: this zerotrain was built without CUDA");
    if (want_cuda && req->gpu_count == 0)
        return zt_fail(ZT_ERR_DEVICE, "run on a machine with an NVIDIA GPU, or use --device cpu",
                       "--device cuda: no usable GPU (%s)", req->no_gpu_why);
    bool cuda = want_cuda || (!strcmp(req->device, "auto") && req->cuda_built &&
                              req->gpu_count > 0);
    if (!cuda) {
        if (want_nccl)
            return zt_fail(ZT_ERR_USAGE, "use --comm mpi (or auto) on the CPU",
                           "--comm nccl needs the CUDA backend (NCCL moves GPU memory), but "
                           "the device is the CPU%s%s",
                           strcmp(req->device, "auto") ? "" : ": ",
                           strcmp(req->device, "auto") ? "" : req->no_gpu_why);
        out->device = ZT_DEVICE_CPU;
        out->comm = ZT_COMM_USE_MPI;
        snprintf(out->why, sizeof out->why,
                 "device cpu (%s%s); comm mpi: the CPU backend's buffers are host memory",
                 strcmp(req->device, "auto") ? "--device cpu" : "--device auto: no GPU: ",
                 strcmp(req->device, "auto") ? "" : req->no_gpu_why);
        if (!strcmp(req->device, "auto") && req->cuda_built && req->gpu_driver)
            snprintf(out->notice, sizeof out->notice,
                     "zerotrain: --device auto: an NVIDIA driver is loaded but no GPU answers "
                     "(%s): training on the CPU",
                     req->no_gpu_why);
        return ZT_OK;
    }
    out->device = ZT_DEVICE_CUDA;
    out->ordinal = req->local_rank % req->gpu_count;
    bool shared = req->shared;
    if (want_nccl && !req->nccl_built)
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "rebuild with NCCL (make NCCL_HOME=...), or use --comm mpi",
                       "--comm nccl: this zerotrain was built without NCCL");
    if (want_nccl && shared && req->local_size > req->gpu_count)
        return zt_fail(ZT_ERR_USAGE,
                       "start at most one rank per GPU, or use --comm mpi to share GPUs",
                       "--comm nccl needs one GPU per rank: %d ranks on this node share %d "
                       "GPU(s)",
                       req->local_size, req->gpu_count);
    if (want_nccl && shared)
        return zt_fail(ZT_ERR_USAGE,
                       "start at most one rank per GPU, or use --comm mpi to share GPUs",
                       "--comm nccl needs one GPU per rank: another rank on this host uses "
                       "the same GPU (device %d here; ZT_RANKS_PER_NODE or "
                       "CUDA_VISIBLE_DEVICES may map two ranks to one GPU)",
                       out->ordinal);
    if (want_nccl || (!strcmp(req->comm, "auto") && req->nccl_built && !shared)) {
        out->comm = ZT_COMM_USE_NCCL;
        snprintf(out->why, sizeof out->why,
                 "device cuda:%d (local rank %d of %d GPU(s)); comm nccl: %s", out->ordinal,
                 req->local_rank, req->gpu_count,
                 want_nccl ? "--comm nccl"
                           : "--comm auto, this build has NCCL and every rank has a GPU of its "
                             "own");
        return ZT_OK;
    }
    out->comm = ZT_COMM_USE_STAGED;
    snprintf(out->why, sizeof out->why,
             "device cuda:%d (local rank %d of %d GPU(s)); comm mpi staged through host "
             "memory: %s",
             out->ordinal, req->local_rank, req->gpu_count,
             strcmp(req->comm, "auto") ? "--comm mpi"
             : !req->nccl_built        ? "this build has no NCCL"
                                       : "several ranks share a GPU (NCCL needs one GPU per rank)");
    if (!strcmp(req->comm, "auto"))
        snprintf(out->notice, sizeof out->notice,
                 "zerotrain: --comm auto: %s: collectives use MPI through host memory",
                 !req->nccl_built ? "built without NCCL"
                 : "several ranks share a GPU (NCCL needs one GPU per rank)");
    return ZT_OK;
}

/* The launcher's local rank of this process, or -1. */
static int devices_env_local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                 "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end = NULL;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && *end == '\0' && r >= 0)
            return (int)r;
    }
    return -1;
}

void zt_devices_select_early(const char *device)
{
    const zt_backend_entry *cuda = zt_backend_find(ZT_DEVICE_CUDA);
    int local = devices_env_local_rank();
    if (!strcmp(device, "cpu") || local < 0 || !cuda->select_early)
        return;
    int count = cuda->device_count(NULL);
    if (count > 0)
        cuda->select_early(local % count);
}

/* Whether another rank of this host uses the GPU this rank would: each rank's
 * device id gathered over the host. Without ids (a backend that has none) the
 * count decides, as the only information left. */
static zt_status devices_shared(const zt_world *w, const zt_backend_entry *cuda, int ordinal,
                                int gpus, bool *shared)
{
    enum { ID = 64 };
    char mine[ID] = "";
    int ok = cuda->device_id && cuda->device_id(ordinal, mine, sizeof mine), all_ok = 0;
    int n = 0;
    MPI_Comm_size(w->host_comm, &n);
    char *ids = calloc((size_t)n, ID);
    int oom = !ids, any_oom = 0;
    if (MPI_Allreduce(&oom, &any_oom, 1, MPI_INT, MPI_MAX, w->comm) != MPI_SUCCESS ||
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, w->host_comm) != MPI_SUCCESS) {
        free(ids);
        return zt_fail(ZT_ERR_COMM, "", "cannot compare the ranks' GPUs");
    }
    if (any_oom) {
        free(ids);
        return zt_fail(ZT_ERR_OOM, "", "cannot compare the ranks' GPUs");
    }
    *shared = false;
    if (!all_ok) {
        *shared = w->local_size > gpus;
    } else {
        MPI_Allgather(mine, ID, MPI_CHAR, ids, ID, MPI_CHAR, w->host_comm);
        int me = 0;
        MPI_Comm_rank(w->host_comm, &me);
        for (int r = 0; r < n; r++)
            if (r != me && !strncmp(ids + (size_t)r * ID, mine, ID))
                *shared = true;
    }
    free(ids);
    /* The comm choice must be the same everywhere: one shared GPU anywhere
     * makes every rank stage through MPI. */
    int s = *shared, any = 0;
    MPI_Allreduce(&s, &any, 1, MPI_INT, MPI_MAX, w->comm);
    *shared = any != 0;
    return ZT_OK;
}

zt_status zt_world_devices(const zt_world *w, const zt_device_flags *f, zt_dtype gemm_dtype,
                           zt_backend *be, zt_comm *comm, FILE *notice_to)
{
    return zt_world_devices_chosen(w, f, gemm_dtype, be, comm, notice_to, NULL);
}

zt_status zt_world_devices_chosen(const zt_world *w, const zt_device_flags *f,
                                  zt_dtype gemm_dtype, zt_backend *be, zt_comm *comm,
                                  FILE *notice_to, zt_device_choice *chosen)
{
    const zt_backend_entry *cuda = zt_backend_find(ZT_DEVICE_CUDA);
    const char *why = "";
    /* --device cpu never touches the CUDA driver (its start-up costs time). */
    int gpus = strcmp(f->device, "cpu") ? cuda->device_count(&why) : 0;
    int fewest = gpus;
    if (MPI_Allreduce(&gpus, &fewest, 1, MPI_INT, MPI_MIN, w->comm) != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "", "cannot agree on the GPU count");
    if (fewest == 0 && gpus > 0)
        why = "another node has none";
    bool shared = false;
    if (fewest > 0)
        ZT_TRY(devices_shared(w, cuda, w->local_rank % fewest, fewest, &shared));
    zt_device_request req = {.device = f->device,
                             .comm = f->comm,
                             .cuda_built = cuda->built(),
                             .nccl_built = zt_comm_nccl_built(),
                             .gpu_count = fewest,
                             .shared = shared,
                             .no_gpu_why = why,
                             .gpu_driver = access("/proc/driver/nvidia/version", F_OK) == 0,
                             .local_rank = w->local_rank,
                             .local_size = w->local_size};
    zt_device_choice ch;
    ZT_TRY(zt_device_choose(&req, &ch));
    if (chosen)
        *chosen = ch;
    if (f->tf32 && ch.device != ZT_DEVICE_CUDA)
        return zt_fail(ZT_ERR_USAGE, "leave --tf32 out on the CPU",
                       "--tf32: the device is the CPU (%s)", ch.notice);
    if (w->rank == 0 && ch.notice[0]) {
        fprintf(notice_to, "%s\n", ch.notice);
        fflush(notice_to);
    }
    zt_backend_options opt = {.device = ch.ordinal, .tf32 = f->tf32, .gemm_dtype = gemm_dtype};
    /* The backend is this rank's alone (its device, its memory) and may fail
     * here alone; the communicator below is built together. Every rank
     * learns of a failure first, so none is left in the collective
     * MPI_Comm_dup waiting for one that returned. */
    zt_status st = zt_backend_find(ch.device)->init(be, &opt);
    if (st == ZT_OK && (st = zt_env_fail_at("backend")) != ZT_OK)
        zt_backend_free(be);
    zt_status agreed = zt_world_agree(w, st, NULL);
    if (agreed != ZT_OK) {
        if (st == ZT_OK)
            zt_backend_free(be);
        return agreed;
    }
    if (f->fused_ops && !strcmp(f->fused_ops, "off")) {
        zt_backend_unfuse(be);
        if (w->rank == 0) {
            fprintf(notice_to, "zerotrain: --fused-ops off: residual + layernorm, bias + "
                               "activation and bias gradients run op by op\n");
            fflush(notice_to);
        }
    }
    if (f->typed_tensors && !strcmp(f->typed_tensors, "off"))
        be->typed_dtypes = 1u << ZT_F32;
    if (ch.comm == ZT_COMM_USE_NCCL)
        return zt_comm_nccl_init(comm, w->comm, be);
    if (ch.comm == ZT_COMM_USE_STAGED)
        return zt_comm_staged_init(comm, w->comm, be);
    return zt_comm_mpi_init(comm, w->comm);
}
