/*
 * quant: ZeRO++'s quantized communication at stage 3 (docs/zeropp.md), the
 * collectives the gather window (qwZ) and the gradient reducer (qgZ) call
 * instead of their plain all-gather and reduce-scatter.
 *
 * The format is DeepSpeed's symmetric block quantization (the backend's
 * quantize/dequantize ops, engine/backend.h): one fp32 scale per block,
 * q = clamp(rint(x * 2^(bits-1) / absmax)), |error| <= scale / 2 (scale at
 * the clamped +absmax), scale = absmax / 2^(bits-1). A run of elements
 * travels as one chunk: its fp32 scales, then its packed values, padded to
 * 16 bytes; the collectives move chunks as fp32 words (they only copy bits).
 *
 * qwZ (zero_quantized_weights): each rank quantizes its own shard to int8
 * in blocks of DeepSpeed's adaptive group size (zt_qwz_block: near 8000,
 * dividing the shard), the chunks are all-gathered and every rank
 * dequantizes all of them into the gathered unit, in the parameters' dtype.
 * Forward gathers over the world and, with hpZ, backward gathers over the
 * hpZ group (DeepSpeed quantizes both); the hpZ secondary partition itself
 * is kept in the parameters' dtype (full precision). The persistent units'
 * gather after the step stays unquantized.
 *
 * qgZ (zero_quantized_gradients): a bucket's reduce-scatter becomes the
 * ZeRO++ paper's hierarchical all-to-all, with L ranks per node and M nodes
 * (n = L M, ranks numbered node by node). Block q of the bucket (rank q's
 * columns) is quantized to int4 in blocks of ZT_QGZ_BLOCK; the chunks for
 * the ranks with local index l on every node go to local rank l in one
 * intra-node all-to-all; each rank dequantizes the L chunks per destination
 * node, sums them in fp32, re-quantizes the sum to int4 and sends it to that
 * node's rank with its local index in one inter-node all-to-all; the owner
 * dequantizes the M partial sums and adds them in fp32 into its block of the
 * bucket's receive buffer. With one rank per node the intra-node step is
 * skipped. On one node qgZ does not run (DeepSpeed falls back to the plain
 * reduce-scatter there too): zt_qgz_active says so.
 *
 * Memory: a zt_qgz owns its two group communicators; every device buffer
 * (qwZ chunks, qgZ work areas) is the caller's, sized by the *_bytes
 * functions here. Collective: zt_qgz_init, zt_qgz_free (over the partition
 * comm), zt_qwz_gather_start (over its comm), zt_qgz_start and
 * zt_qgz_finish (over the groups); all ranks call them in the same order.
 */
#ifndef ZT_QUANT_H
#define ZT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/layout.h"

#define ZT_QWZ_BITS 8
#define ZT_QWZ_TARGET_BLOCK 8000 /* DeepSpeed's CUDAQuantizer.target_group_size */
#define ZT_QGZ_BITS 4
#define ZT_QGZ_BLOCK 256
#define ZT_QUANT_ALIGN 16 /* bytes a chunk is padded to */

/* One quantized run of `numel` elements. */
typedef struct {
    int64_t numel, block, n_blocks;
    int bits;
    size_t bytes; /* scales + values, padded to ZT_QUANT_ALIGN */
} zt_quant_chunk;

zt_quant_chunk zt_quant_chunk_of(int64_t numel, int64_t block, int bits);
/* chunk <- quantize(x(numel) of dt). */
void zt_quant_pack(const zt_backend *be, const zt_quant_chunk *k, void *chunk, const void *x,
                   zt_dtype dt);
/* y(numel) of dt = (accumulate ? y : 0) + dequantize(chunk). */
void zt_quant_unpack(const zt_backend *be, const zt_quant_chunk *k, void *y, zt_dtype dt,
                     const void *chunk, bool accumulate);

/* ---- qwZ: quantized parameter all-gather ---- */

/* DeepSpeed's group size for numel elements: the smallest group count g >=
 * ceil(numel / 8000) with numel % (8 g) == 0 gives blocks of numel / g.
 * ZT_ERR_INTERNAL with DeepSpeed's message when numel is not a multiple of 8
 * (the layout's shards are multiples of 16). */
zt_status zt_qwz_block(int64_t numel, int64_t *block);
/* Whether gathers over c are quantized: qwZ is on and c has other ranks
 * (DeepSpeed gathers nothing, so quantizes nothing, on one rank). */
bool zt_qwz_on(const zt_config *cfg, const zt_comm *c);
/* Bytes of the chunk buffer one quantized gather of send_numel per rank over
 * `ranks` needs (ranks chunks), and what it counts on the comm. */
size_t zt_qwz_buffer_bytes(int64_t send_numel, int ranks);
/* Quantizes send (send_numel of dt) into this rank's chunk of qbuf and
 * all-gathers the chunks in place (non-blocking with req). */
zt_status zt_qwz_gather_start(const zt_backend *be, zt_comm *c, const void *send, zt_dtype dt,
                              int64_t send_numel, void *qbuf, zt_comm_req *req);
/* After the gather completed: recv(send_numel * c->size) of dt <- every
 * rank's chunk, dequantized. */
void zt_qwz_gather_finish(const zt_backend *be, const zt_comm *c, const void *qbuf, void *recv,
                          zt_dtype dt, int64_t send_numel);

/* ---- qgZ: hierarchical quantized all-to-all in place of reduce-scatter ---- */

typedef struct {
    zt_comm *intra;      /* the L ranks of this node (NULL when L == 1) */
    zt_comm *inter;      /* the M ranks with this local index, one per node */
    int local, local_size; /* l, L */
    int node, n_nodes;     /* m, M */
    bool active;
} zt_qgz;

/* Sets up qgZ over `part` (the world) when the config asks for it: node and
 * local index come from the world (engine/world/world.h). Inactive (nothing
 * made) when qgZ is off or M <= 1. ZT_ERR_CONFIG when the nodes differ in
 * size or ranks are not numbered node by node. Collective over part. */
zt_status zt_qgz_init(zt_qgz *q, const zt_config *cfg, zt_comm *part, int node, int n_nodes,
                      int local_rank, int local_size);
void zt_qgz_free(zt_qgz *q);
/* Device bytes of one bucket's work area for buckets of `width` columns per
 * rank over `ranks` ranks in `n_nodes` nodes. */
size_t zt_qgz_work_bytes(int64_t width, int ranks, int n_nodes);
/* send: (n, width) of dt, block q for rank q. Quantizes it and issues the
 * intra-node all-to-all (non-blocking with req; with L == 1 req comes back
 * complete). */
zt_status zt_qgz_start(const zt_qgz *q, const zt_backend *be, void *work, const void *send,
                       int64_t width, zt_dtype dt, zt_comm_req *req);
/* Waits for req, reduces, runs the inter-node all-to-all (blocking) and
 * writes this rank's reduced block into recv(width) of dt. */
zt_status zt_qgz_finish(const zt_qgz *q, const zt_backend *be, void *work, void *recv,
                        int64_t width, zt_dtype dt, zt_comm_req *req);
/* The comm a started bucket's request is pending on (for `test`). */
zt_comm *zt_qgz_pending_comm(const zt_qgz *q);
/* Bytes one reducing backward moves on the intra-node (inter false) or
 * inter-node (inter true) group, bucket by bucket as zt_zero_rs cuts them. */
int64_t zt_qgz_pass_bytes(const zt_qgz *q, const zt_layout *layout, int64_t width, bool inter);

#endif
