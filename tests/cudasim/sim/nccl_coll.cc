/*
 * nccl_coll: NCCL's collectives as stream operations over MPI's non-blocking
 * collectives, and the hang detector.
 *
 * A collective starts when its stream reaches it and every collective issued
 * before it on the same communicator has started (NCCL runs a communicator's
 * work in issue order; MPI needs its collectives started in the same order on
 * every rank). It then stays in flight, polled by the device thread, while
 * other streams run:
 *   all-reduce      MPI_Ialltoallv gives rank i everyone's slice i; rank i
 *                   reduces it; MPI_Iallgatherv gives everyone every slice
 *   reduce-scatter  the first half of that
 *   all-gather      MPI_Iallgather
 *   broadcast       MPI_Ibcast from the root's send buffer
 *   send/recv       MPI_Isend/MPI_Irecv, every part of a group posted at once
 *                   (a group's parts on one communicator and stream are one
 *                   operation, as NCCL fuses them); messages between two
 *                   ranks match in issue order, as NCCL's do
 * Reductions combine the ranks' values in rank order: sums in fp32, a 16-bit
 * result rounded (to nearest even) after each addition, as NCCL's half
 * types; max keeps the larger value, a NaN on any rank wins. So every rank
 * gets the same bits. The send buffer is copied when the collective starts
 * (in-place calls are fine); the race checker sees a read of send and a
 * write of recv.
 *
 * Hangs: a collective in flight ZT_SIM_NCCL_TIMEOUT seconds is reported with
 * this rank's communicators and their queued and in-flight collectives (a
 * different issue order on different ranks, the usual cause, then shows as
 * two reports naming each other's collectives), fails, and breaks every
 * communicator of the process (asynchronous error ncclSystemError, later
 * collectives fail at once without touching MPI, where they could meet a
 * peer's abandoned one), so nothing waits forever.
 *
 * ZT_SIM_NCCL_STALL=R:N makes world rank R's N-th collective start and then
 * never call MPI, as a peer stuck inside NCCL: its peers wait, and a
 * watchdog of the code under test must end the job (the hang detector above
 * fires only after ZT_SIM_NCCL_TIMEOUT).
 *
 * Memory: a collective's staging buffers live until it completes.
 * Thread safety: the API is called by host threads; start and poll run on the
 * device thread.
 */
#include "tests/cudasim/sim/zs_nccl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

namespace {

double g_longest_queued; /* ZT_SIM_STATS */

enum coll_kind { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, P2P };

/* The tag of the simulator's point-to-point messages on a communicator's MPI
 * duplicate (MPI's collectives never match them). */
const int P2P_TAG = 0x5a5a;

const char *kind_call(coll_kind k)
{
    static const char *names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                  "ncclBroadcast", "ncclSend/ncclRecv"};
    return names[k];
}

const char *type_name(ncclDataType_t t)
{
    return t == ncclFloat32 ? "float32" : t == ncclFloat16 ? "float16" : t == ncclBfloat16 ? "bfloat16"
         : t == ncclInt8    ? "int8"
                            : "uint8";
}

size_t type_size(ncclDataType_t t)
{
    return t == ncclFloat32 ? 4 : t == ncclInt8 || t == ncclUint8 ? 1 : 2;
}

float widen(const unsigned char *p, size_t i, ncclDataType_t t)
{
    if (t == ncclFloat32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t == ncclFloat16 ? __half2float(__half{h}) : __bfloat162float(__nv_bfloat16{h});
}

void store(unsigned char *p, size_t i, float v, ncclDataType_t t)
{
    if (t == ncclFloat32) {
        memcpy(p + 4 * i, &v, 4);
        return;
    }
    uint16_t h = t == ncclFloat16 ? __half_as_ushort(__float2half_rn(v))
                                  : __bfloat16_as_ushort(__float2bfloat16_rn(v));
    memcpy(p + 2 * i, &h, 2);
}

/* dst(n) = src_0 op src_1 op ... in rank order; src_r at in + r * n elements. */
void reduce(unsigned char *dst, const unsigned char *in, size_t n, int nranks, ncclDataType_t t,
            ncclRedOp_t op)
{
    const size_t es = type_size(t);
    if (n == 0) /* a rank with no slice; its buffers may be empty vectors' nulls */
        return;
    memcpy(dst, in, n * es);
    for (int r = 1; r < nranks; r++) {
        const unsigned char *src = in + (size_t)r * n * es;
        for (size_t i = 0; i < n; i++) {
            float a = widen(dst, i, t), b = widen(src, i, t);
            if (op == ncclSum)
                store(dst, i, a + b, t);
            else if (!isnan(a) && (isnan(b) || b > a))
                memcpy(dst + i * es, src + i * es, es); /* the larger operand's own bits */
        }
    }
}

/* One send or receive of a point-to-point operation. */
struct p2p_part {
    bool is_send;
    int peer;
    const void *send; /* is_send */
    void *recv;       /* !is_send */
    size_t bytes;
};

class coll_op final : public zs_op {
public:
    coll_kind kind;
    std::vector<p2p_part> parts; /* P2P */
    ncclComm *comm;
    const void *send;
    void *recv;
    size_t count; /* elements: all-reduce/broadcast the buffer, else one rank's slice */
    ncclDataType_t type;
    ncclRedOp_t red;
    int root;
    uint64_t issue;
    double issued_at; /* zs_now() at the host's call */

    bool is_collective() const override { return true; }

    bool can_start() const override { return comm->started + 1 == issue; }

    void skip() override
    {
        comm->started = issue;
        finish();
    }

    bool start() override
    {
        comm->started = issue;
        if (comm->broken)
            return finish();
        t0 = zs_now();
        note_queued(t0 - issued_at);
        note_started();
        if (stalls()) {
            stalled = true;
            return false;
        }
        if (kind == P2P)
            return start_p2p();
        const size_t es = type_size(type), n = comm->nranks, me = comm->rank;
        const size_t in_bytes = (kind == REDUCE_SCATTER ? count * n : count) * es;
        const size_t out_bytes = (kind == ALL_GATHER ? count * n : count) * es;
        if (kind != BROADCAST || comm->rank == root)
            zs_race_range(send, in_bytes, false);
        zs_race_range(recv, out_bytes, true);
        staged.assign((const unsigned char *)send, (const unsigned char *)send + in_bytes);
        MPI_Comm m = comm->mpi;
        int rc = MPI_SUCCESS;
        switch (kind) {
        case ALL_REDUCE:
        case REDUCE_SCATTER: {
            /* Rank i owns slice i: `chunk` elements (an all-reduce's last ones
             * may be shorter or empty). */
            const size_t total = kind == ALL_REDUCE ? count : count * n;
            const size_t chunk = kind == ALL_REDUCE ? (count + n - 1) / n : count;
            counts.assign(n, 0);
            displs.assign(n, 0);
            for (size_t i = 0; i < n; i++) {
                size_t lo = i * chunk < total ? i * chunk : total;
                size_t hi = lo + chunk < total ? lo + chunk : total;
                counts[i] = (int)((hi - lo) * es);
                displs[i] = (int)(lo * es);
            }
            mine = (size_t)counts[me] / es;
            gathered.resize(mine * n * es);
            rcounts.assign(n, (int)(mine * es));
            rdispls.resize(n);
            for (size_t i = 0; i < n; i++)
                rdispls[i] = (int)(i * mine * es);
            rc = MPI_Ialltoallv(staged.data(), counts.data(), displs.data(), MPI_BYTE,
                                gathered.data(), rcounts.data(), rdispls.data(), MPI_BYTE, m,
                                &req);
            break;
        }
        case ALL_GATHER:
            rc = MPI_Iallgather(staged.data(), (int)(count * es), MPI_BYTE, recv,
                                (int)(count * es), MPI_BYTE, m, &req);
            break;
        case BROADCAST:
            if (comm->rank == root)
                memcpy(recv, staged.data(), count * es);
            rc = MPI_Ibcast(recv, (int)(count * es), MPI_BYTE, root, m, &req);
            break;
        case P2P: /* start_p2p */
            break;
        }
        if (rc != MPI_SUCCESS)
            return fail_comm(ncclSystemError, zs_format("%s: MPI failed to start it", what.c_str()));
        return false;
    }

    bool poll() override
    {
        if (stalled) /* never joins its peers, until the communicator breaks */
            return comm->broken ? finish() : false;
        int done = 0;
        if (kind == P2P) {
            if (MPI_Testall((int)reqs.size(), reqs.data(), &done, MPI_STATUSES_IGNORE) !=
                MPI_SUCCESS)
                return fail_comm(ncclSystemError, zs_format("%s: MPI failed", what.c_str()));
            if (done)
                return finish();
            return zs_now() - t0 > zs_cfg().nccl_timeout_s ? hang() : false;
        }
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return fail_comm(ncclSystemError, zs_format("%s: MPI failed", what.c_str()));
        if (!done) {
            if (zs_now() - t0 > zs_cfg().nccl_timeout_s)
                return hang();
            return false;
        }
        if ((kind == ALL_REDUCE || kind == REDUCE_SCATTER) && phase == 0) {
            const size_t es = type_size(type);
            unsigned char *out = kind == REDUCE_SCATTER ? static_cast<unsigned char *>(recv)
                                                        : (reduced.resize(mine * es), reduced.data());
            reduce(out, gathered.data(), mine, comm->nranks, type, red);
            if (kind == REDUCE_SCATTER)
                return finish();
            phase = 1;
            if (MPI_Iallgatherv(reduced.data(), (int)(mine * es), MPI_BYTE, recv, counts.data(),
                                displs.data(), MPI_BYTE, comm->mpi, &req) != MPI_SUCCESS)
                return fail_comm(ncclSystemError, zs_format("%s: MPI failed", what.c_str()));
            return false;
        }
        return finish();
    }

private:
    MPI_Request req = MPI_REQUEST_NULL;
    bool stalled = false;
    int phase = 0;
    double t0 = 0;
    size_t mine = 0;
    std::vector<unsigned char> staged, gathered, reduced;
    std::vector<int> counts, displs, rcounts, rdispls;
    std::vector<MPI_Request> reqs;                    /* P2P: one per part */
    std::vector<std::vector<unsigned char>> outgoing; /* P2P: sends, copied at start */

    /* Every part posted at once; the sends' bytes copied first, so a send
     * buffer may be reused (or received into) by a later part. */
    bool start_p2p()
    {
        reqs.assign(parts.size(), MPI_REQUEST_NULL);
        outgoing.resize(parts.size());
        for (size_t i = 0; i < parts.size(); i++) {
            const p2p_part &q = parts[i];
            if (q.is_send) {
                zs_race_range(q.send, q.bytes, false);
                outgoing[i].assign((const unsigned char *)q.send,
                                   (const unsigned char *)q.send + q.bytes);
            } else {
                zs_race_range(q.recv, q.bytes, true);
            }
        }
        for (size_t i = 0; i < parts.size(); i++) {
            const p2p_part &q = parts[i];
            int rc = q.is_send ? MPI_Isend(outgoing[i].data(), (int)q.bytes, MPI_BYTE, q.peer,
                                           P2P_TAG, comm->mpi, &reqs[i])
                               : MPI_Irecv(q.recv, (int)q.bytes, MPI_BYTE, q.peer, P2P_TAG,
                                           comm->mpi, &reqs[i]);
            if (rc != MPI_SUCCESS)
                return fail_comm(ncclSystemError,
                                 zs_format("%s: MPI failed to start it", what.c_str()));
        }
        return false;
    }

    /* ZT_SIM_NCCL_STALL: this process's collectives are counted as they
     * start, on the device thread. */
    static bool stalls()
    {
        static uint64_t started = 0;
        static int world = -2;
        if (zs_cfg().stall_rank < 0)
            return false;
        if (world == -2)
            MPI_Comm_rank(MPI_COMM_WORLD, &world);
        return ++started == zs_cfg().stall_n && world == zs_cfg().stall_rank;
    }

    /* ZT_SIM_STATS: the longest a collective waited from its call to its
     * start, printed at exit. */
    static void note_queued(double waited)
    {
        static std::atomic<bool> hooked{false};
        static double longest = 0;
        static std::mutex lock;
        if (!zs_cfg().stats)
            return;
        std::lock_guard<std::mutex> l(lock);
        if (waited > longest)
            longest = waited;
        g_longest_queued = longest;
        if (!hooked.exchange(true))
            atexit([] {
                fprintf(stderr, "zt-sim: stats: a collective waited up to %.3f s from its call "
                                "to its start on the device\n",
                        g_longest_queued);
            });
    }

    void note_started()
    {
        std::lock_guard<std::mutex> l(zs_nccl_lock());
        for (zs_coll_note &p : comm->pending)
            if (p.issue == issue)
                p.started = true;
    }

    bool finish()
    {
        std::lock_guard<std::mutex> l(zs_nccl_lock());
        comm->completed++;
        comm->pending.remove_if([&](const zs_coll_note &p) { return p.issue == issue; });
        return true;
    }

    bool fail_comm(ncclResult_t rc, const std::string &text)
    {
        comm->async_error = rc;
        comm->broken = true;
        zs_nccl_set_error(text);
        return finish();
    }

    /* The report of a collective whose peers never came. */
    bool hang()
    {
        std::string others;
        {
            std::lock_guard<std::mutex> l(zs_nccl_lock());
            for (ncclComm *c : zs_nccl_comms())
                for (const zs_coll_note &p : c->pending) {
                    if (c == comm && p.issue == issue)
                        continue;
                    others += zs_format("\n    communicator '%s' (rank %d of %d): %s, %s on %s",
                                        c->name.c_str(), c->rank, c->nranks, p.what.c_str(),
                                        p.started ? "in flight" : "queued",
                                        zs_stream_name(p.stream).c_str());
                }
        }
        std::string text = zs_format(
            "NCCL hang: %s on communicator '%s' (rank %d of %d, %s) has waited %.1f s "
            "(ZT_SIM_NCCL_TIMEOUT) for its peers, which real NCCL would wait for forever",
            what.c_str(), comm->name.c_str(), comm->rank, comm->nranks,
            zs_stream_name(stream).c_str(), zs_now() - t0);
        zs_report("%s. This rank's other collectives:%s\nhint: collectives of different "
                  "communicators must be issued in the same order on every rank (or the peers "
                  "skipped or died); compare with the other ranks' reports",
                  text.c_str(), others.empty() ? " none" : others.c_str());
        /* A hung job is lost: every communicator fails from here on, so that
         * no later collective meets a peer's stale one inside MPI. */
        {
            std::lock_guard<std::mutex> l(zs_nccl_lock());
            for (ncclComm *c : zs_nccl_comms()) {
                c->broken = true;
                int none = ncclSuccess;
                c->async_error.compare_exchange_strong(none, ncclSystemError);
            }
        }
        return fail_comm(ncclSystemError, text);
    }
};

ncclResult_t fail(ncclResult_t rc, const std::string &text)
{
    zs_nccl_set_error(text);
    return rc;
}

/* What every call checks first: a live communicator without an error, and
 * a live stream of its device (its index in *si). */
ncclResult_t check_call(const char *call, ncclComm_t comm, cudaStream_t stream, uint32_t *si)
{
    if (!zs_nccl_live(comm))
        return fail(ncclInvalidArgument, zs_format("%s: not a live communicator", call));
    if (comm->async_error != ncclSuccess)
        return (ncclResult_t)comm->async_error.load();
    if (zs_stream_index(stream, si) != cudaSuccess || zs_stream_device(*si) != comm->device)
        return fail(ncclInvalidArgument,
                    zs_format("%s: the stream is not a live stream of the communicator's device "
                              "%d",
                              call, comm->device));
    return ncclSuccess;
}

/* Gives op its place in its communicator's issue order and queues it. */
void queue(std::unique_ptr<coll_op> op, uint32_t si, const std::string &detail)
{
    ncclComm *comm = op->comm;
    op->issue = ++comm->issued;
    op->issued_at = zs_now();
    op->what = zs_format("%s #%llu %s", kind_call(op->kind), (unsigned long long)op->issue,
                         detail.c_str());
    {
        std::lock_guard<std::mutex> l(zs_nccl_lock());
        comm->pending.push_back(zs_coll_note{op->issue, op->what, si, false});
    }
    zs_enqueue(si, std::move(op));
}

ncclResult_t issue(coll_kind kind, const void *send, void *recv, size_t count,
                   ncclDataType_t type, ncclRedOp_t red, int root, ncclComm_t comm,
                   cudaStream_t stream)
{
    const char *call = kind_call(kind);
    uint32_t si = 0;
    ncclResult_t checked = check_call(call, comm, stream, &si);
    if (checked != ncclSuccess)
        return checked;
    if (type != ncclFloat32 && type != ncclFloat16 && type != ncclBfloat16)
        return fail(ncclInvalidArgument,
                    zs_format("%s: data type %d is not simulated (float32, float16, bfloat16)",
                              call, (int)type));
    if ((kind == ALL_REDUCE || kind == REDUCE_SCATTER) && red != ncclSum && red != ncclMax)
        return fail(ncclInvalidArgument,
                    zs_format("%s: reduction %d is not simulated (sum, max)", call, (int)red));
    if (kind == BROADCAST && (root < 0 || root >= comm->nranks))
        return fail(ncclInvalidArgument, zs_format("%s: root %d of %d ranks", call, root,
                                                   comm->nranks));
    if (count == 0)
        return ncclSuccess;
    const size_t es = type_size(type), n = (size_t)comm->nranks;
    const size_t in_bytes = (kind == REDUCE_SCATTER ? count * n : count) * es;
    const size_t out_bytes = (kind == ALL_GATHER ? count * n : count) * es;
    if (in_bytes > INT_MAX || out_bytes > INT_MAX)
        return fail(ncclInvalidArgument,
                    zs_format("%s: %zu bytes: more than 2 GiB per collective is not simulated",
                              call, in_bytes > out_bytes ? in_bytes : out_bytes));
    bool reads = kind != BROADCAST || comm->rank == root;
    const void *bad = NULL;
    zs_ptr_info info;
    if (reads && (!zs_device_range(send, in_bytes, &info) || info.device != comm->device))
        bad = send;
    else if (!zs_device_range(recv, out_bytes, &info) || info.device != comm->device)
        bad = recv;
    if (bad) {
        std::string text = zs_format("%s on '%s': %s buffer %s is not %zu bytes of device %d's "
                                     "memory",
                                     call, comm->name.c_str(), bad == send ? "send" : "receive",
                                     zs_describe_ptr(bad).c_str(),
                                     bad == send ? in_bytes : out_bytes, comm->device);
        zs_report("%s", text.c_str());
        return fail(ncclInvalidArgument, text);
    }
    std::unique_ptr<coll_op> op(new coll_op());
    op->kind = kind;
    op->comm = comm;
    op->send = send;
    op->recv = recv;
    op->count = count;
    op->type = type;
    op->red = red;
    op->root = root;
    queue(std::move(op), si,
          zs_format("(%zu x %s%s)", count, type_name(type),
                    kind == ALL_GATHER || kind == BROADCAST ? ""
                    : red == ncclSum                        ? ", sum"
                                                            : ", max"));
    return ncclSuccess;
}

/* A group's held point-to-point operations (calling thread), one per
 * communicator and stream, in the order their first part came. */
struct held_p2p {
    std::unique_ptr<coll_op> op;
    uint32_t stream;
    size_t elements;
    ncclDataType_t type;
};
thread_local std::vector<held_p2p> t_held;

std::string p2p_detail(const coll_op &op, size_t elements, ncclDataType_t type)
{
    size_t sends = 0;
    for (const p2p_part &q : op.parts)
        sends += q.is_send;
    return zs_format("(%zu send(s), %zu receive(s), %zu x %s)", sends, op.parts.size() - sends,
                     elements, type_name(type));
}

ncclResult_t p2p_issue(bool is_send, const void *send, void *recv, size_t count,
                       ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream)
{
    const char *call = is_send ? "ncclSend" : "ncclRecv";
    uint32_t si = 0;
    ncclResult_t checked = check_call(call, comm, stream, &si);
    if (checked != ncclSuccess)
        return checked;
    if (type != ncclFloat32 && type != ncclFloat16 && type != ncclBfloat16 && type != ncclInt8 &&
        type != ncclUint8)
        return fail(ncclInvalidArgument,
                    zs_format("%s: data type %d is not simulated (float32, float16, bfloat16, "
                              "int8, uint8)",
                              call, (int)type));
    if (peer < 0 || peer >= comm->nranks)
        return fail(ncclInvalidArgument,
                    zs_format("%s: peer %d of %d ranks", call, peer, comm->nranks));
    if (count == 0)
        return ncclSuccess;
    const size_t bytes = count * type_size(type);
    if (bytes > INT_MAX)
        return fail(ncclInvalidArgument,
                    zs_format("%s: %zu bytes: more than 2 GiB per message is not simulated", call,
                              bytes));
    const void *buf = is_send ? send : recv;
    zs_ptr_info info;
    if (!zs_device_range(buf, bytes, &info) || info.device != comm->device) {
        std::string text = zs_format("%s on '%s' with peer %d: buffer %s is not %zu bytes of "
                                     "device %d's memory",
                                     call, comm->name.c_str(), peer, zs_describe_ptr(buf).c_str(),
                                     bytes, comm->device);
        zs_report("%s", text.c_str());
        return fail(ncclInvalidArgument, text);
    }
    p2p_part part{is_send, peer, send, recv, bytes};
    if (zs_nccl_group_depth() > 0) {
        for (held_p2p &h : t_held)
            if (h.op->comm == comm && h.stream == si) {
                h.op->parts.push_back(part);
                h.elements += count;
                return ncclSuccess;
            }
    }
    std::unique_ptr<coll_op> op(new coll_op());
    op->kind = P2P;
    op->comm = comm;
    op->type = type;
    op->parts.push_back(part);
    if (zs_nccl_group_depth() > 0) {
        t_held.push_back(held_p2p{std::move(op), si, count, type});
        return ncclSuccess;
    }
    std::string detail = p2p_detail(*op, count, type);
    queue(std::move(op), si, detail);
    return ncclSuccess;
}

} // namespace

extern "C" ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return issue(ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t stream)
{
    return issue(REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

extern "C" ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return issue(ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

extern "C" ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return issue(BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

void zs_nccl_group_flush()
{
    std::vector<held_p2p> held;
    held.swap(t_held);
    for (held_p2p &h : held) {
        std::string detail = p2p_detail(*h.op, h.elements, h.type);
        queue(std::move(h.op), h.stream, detail);
    }
}

extern "C" ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, cudaStream_t stream)
{
    return p2p_issue(true, sendbuff, nullptr, count, datatype, peer, comm, stream);
}

extern "C" ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, cudaStream_t stream)
{
    return p2p_issue(false, nullptr, recvbuff, count, datatype, peer, comm, stream);
}
