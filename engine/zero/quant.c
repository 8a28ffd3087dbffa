/*
 * quant: ZeRO++'s quantized collectives (engine/zero/quant.h).
 */
#include "engine/zero/quant.h"

#include <stdlib.h>
#include <string.h>

/* ---- Chunks ---- */

zt_quant_chunk zt_quant_chunk_of(int64_t numel, int64_t block, int bits)
{
    zt_quant_chunk k = {.numel = numel, .block = block, .bits = bits};
    k.n_blocks = numel > 0 ? (numel + block - 1) / block : 0;
    size_t values = (size_t)(numel * bits + 7) / 8;
    size_t bytes = (size_t)k.n_blocks * sizeof(float) + values;
    k.bytes = (bytes + ZT_QUANT_ALIGN - 1) / ZT_QUANT_ALIGN * ZT_QUANT_ALIGN;
    return k;
}

/* The scales open the chunk, so the values start 4-byte aligned. */
static void *quant_values(const zt_quant_chunk *k, const void *chunk)
{
    return (char *)chunk + (size_t)k->n_blocks * sizeof(float);
}

void zt_quant_pack(const zt_backend *be, const zt_quant_chunk *k, void *chunk, const void *x,
                   zt_dtype dt)
{
    be->quantize(be, quant_values(k, chunk), (float *)chunk, x, dt, k->numel, k->block, k->bits);
}

void zt_quant_unpack(const zt_backend *be, const zt_quant_chunk *k, void *y, zt_dtype dt,
                     const void *chunk, bool accumulate)
{
    be->dequantize(be, y, dt, quant_values(k, chunk), (const float *)chunk, k->numel, k->block,
                   k->bits, accumulate);
}

static int64_t quant_words(const zt_quant_chunk *k) { return (int64_t)(k->bytes / sizeof(float)); }

/* ---- qwZ ---- */

zt_status zt_qwz_block(int64_t numel, int64_t *block)
{
    /* CUDAQuantizer.quantize (deepspeed/runtime/zero/partition_parameters.py):
     * its doubling loop never runs once g >= ceil(numel / 8000). */
    int64_t g = (numel + ZT_QWZ_TARGET_BLOCK - 1) / ZT_QWZ_TARGET_BLOCK;
    if (g < 1)
        g = 1;
    while (g < numel && numel % (8 * g) != 0)
        g++;
    /* DeepSpeed's assertion message, its spelling kept. */
    if (numel <= 0 || numel % (8 * g) != 0)
        return zt_fail(ZT_ERR_INTERNAL, "",
                       "Qantized weight requires the number of weights be a multiple of 8. Yet "
                       "%lld cannot be divided by 8*%lld",
                       (long long)numel, (long long)g);
    *block = numel / g;
    return ZT_OK;
}

bool zt_qwz_on(const zt_config *cfg, const zt_comm *c)
{
    return cfg->zero.zero_quantized_weights && c && c->size > 1;
}

/* The shard sizes are multiples of 16 (engine/zero/layout.h), so the block
 * always exists; a caller that could pass another size checks zt_qwz_block. */
static zt_quant_chunk qwz_chunk(int64_t send_numel)
{
    int64_t block = send_numel > 0 ? send_numel : 1;
    if (zt_qwz_block(send_numel, &block) != ZT_OK)
        block = send_numel > 0 ? send_numel : 1;
    return zt_quant_chunk_of(send_numel, block, ZT_QWZ_BITS);
}

size_t zt_qwz_buffer_bytes(int64_t send_numel, int ranks)
{
    return qwz_chunk(send_numel).bytes * (size_t)ranks;
}

zt_status zt_qwz_gather_start(const zt_backend *be, zt_comm *c, const void *send, zt_dtype dt,
                              int64_t send_numel, void *qbuf, zt_comm_req *req)
{
    zt_quant_chunk k = qwz_chunk(send_numel);
    void *mine = (char *)qbuf + (size_t)c->rank * k.bytes;
    zt_quant_pack(be, &k, mine, send, dt);
    return c->ops->all_gather(c, mine, qbuf, quant_words(&k), ZT_F32, req);
}

void zt_qwz_gather_finish(const zt_backend *be, const zt_comm *c, const void *qbuf, void *recv,
                          zt_dtype dt, int64_t send_numel)
{
    zt_quant_chunk k = qwz_chunk(send_numel);
    for (int r = 0; r < c->size; r++)
        zt_quant_unpack(be, &k, zt_zero_at(recv, (int64_t)r * send_numel, dt), dt,
                        (const char *)qbuf + (size_t)r * k.bytes, false);
}

/* ---- qgZ ---- */

static void qgz_comm_free(zt_comm **c)
{
    if (*c) {
        zt_comm_free(*c);
        free(*c);
        *c = NULL;
    }
}

static zt_status qgz_split(zt_comm *part, int color, zt_comm **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate a qgZ group communicator");
    return part->ops->split(part, color, part->rank, *out);
}

zt_status zt_qgz_init(zt_qgz *q, const zt_config *cfg, zt_comm *part, int node, int n_nodes,
                      int local_rank, int local_size)
{
    memset(q, 0, sizeof *q);
    if (!cfg->zero.zero_quantized_gradients || n_nodes <= 1 || part->size <= 1)
        return ZT_OK;
    /* Destination rank q is node q / L, local index q % L: every node the
     * same size and the ranks numbered node by node. */
    int mine[2] = {local_size, part->rank == node * local_size + local_rank ? 1 : 0};
    int lo[2] = {mine[0], mine[1]}, hi[2] = {mine[0], mine[1]};
    ZT_TRY(zt_comm_side_all_reduce(part, part->side, lo, 2, MPI_INT, MPI_MIN,
                                   "the qgZ node layout"));
    ZT_TRY(zt_comm_side_all_reduce(part, part->side, hi, 2, MPI_INT, MPI_MAX,
                                   "the qgZ node layout"));
    if (lo[0] != hi[0] || (int64_t)n_nodes * lo[0] != part->size)
        return zt_fail(ZT_ERR_CONFIG,
                       "run the same number of ranks on every node (ZT_RANKS_PER_NODE simulates "
                       "nodes)",
                       "zero_optimization.zero_quantized_gradients: qgZ's hierarchical "
                       "all-to-all needs equal nodes; they hold %d to %d of the %d ranks",
                       lo[0], hi[0], part->size);
    if (lo[1] == 0)
        return zt_fail(ZT_ERR_CONFIG,
                       "place ranks node by node (Open MPI's default --map-by slot), not round "
                       "robin",
                       "zero_optimization.zero_quantized_gradients: qgZ needs ranks numbered "
                       "node by node (rank = node * %d + local rank)",
                       local_size);
    q->local = local_rank;
    q->local_size = local_size;
    q->node = node;
    q->n_nodes = n_nodes;
    zt_status st = ZT_OK;
    if (local_size > 1)
        st = qgz_split(part, node, &q->intra);
    if (st == ZT_OK)
        st = qgz_split(part, local_rank, &q->inter);
    if (st != ZT_OK) {
        zt_qgz_free(q);
        return st;
    }
    q->active = true;
    return ZT_OK;
}

void zt_qgz_free(zt_qgz *q)
{
    qgz_comm_free(&q->intra);
    qgz_comm_free(&q->inter);
    q->active = false;
}

static zt_quant_chunk qgz_chunk(int64_t width)
{
    return zt_quant_chunk_of(width, ZT_QGZ_BLOCK, ZT_QGZ_BITS);
}

/* Work area: the n chunks sent, the n chunks received, one fp32 block. */
typedef struct {
    char *send, *recv;
    float *acc;
} qgz_work;

static qgz_work qgz_work_of(void *work, int64_t width, int ranks)
{
    /* Laid out for the widest bucket; narrower ones use the front. */
    size_t chunks = qgz_chunk(width).bytes * (size_t)ranks;
    qgz_work w = {.send = work, .recv = (char *)work + chunks};
    w.acc = (float *)(w.recv + chunks);
    return w;
}

size_t zt_qgz_work_bytes(int64_t width, int ranks, int n_nodes)
{
    (void)n_nodes;
    return 2 * qgz_chunk(width).bytes * (size_t)ranks + (size_t)width * sizeof(float);
}

static int qgz_ranks(const zt_qgz *q) { return q->local_size * q->n_nodes; }

zt_status zt_qgz_start(const zt_qgz *q, const zt_backend *be, void *work, const void *send,
                       int64_t width, zt_dtype dt, zt_comm_req *req)
{
    int L = q->local_size, M = q->n_nodes;
    zt_quant_chunk k = qgz_chunk(width);
    qgz_work w = qgz_work_of(work, width, qgz_ranks(q));
    /* Rank r = m L + l goes to local peer l, in its m-th chunk. */
    for (int r = 0; r < L * M; r++)
        zt_quant_pack(be, &k, w.send + (size_t)((r % L) * M + r / L) * k.bytes,
                      zt_zero_at(send, (int64_t)r * width, dt), dt);
    if (req)
        zt_comm_req_none(req);
    if (L == 1)
        return ZT_OK;
    return q->intra->ops->all_to_all(q->intra, w.send, w.recv, M * quant_words(&k), ZT_F32, req);
}

zt_status zt_qgz_finish(const zt_qgz *q, const zt_backend *be, void *work, void *recv,
                        int64_t width, zt_dtype dt, zt_comm_req *req)
{
    int L = q->local_size, M = q->n_nodes;
    zt_quant_chunk k = qgz_chunk(width);
    qgz_work w = qgz_work_of(work, width, qgz_ranks(q));
    if (L > 1) {
        if (req)
            ZT_TRY(q->intra->ops->wait(q->intra, req));
        /* Received: local peer j's chunk for node m at j M + m. Sum over the
         * peers in fp32, re-quantized into the m-th chunk to send. */
        for (int m = 0; m < M; m++) {
            for (int j = 0; j < L; j++)
                zt_quant_unpack(be, &k, w.acc, ZT_F32, w.recv + (size_t)(j * M + m) * k.bytes,
                                j > 0);
            zt_quant_pack(be, &k, w.send + (size_t)m * k.bytes, w.acc, ZT_F32);
        }
    }
    /* With L == 1 the m-th chunk already is node m's block, as quantized. */
    ZT_TRY(q->inter->ops->all_to_all(q->inter, w.send, w.recv, quant_words(&k), ZT_F32, NULL));
    float *sum = dt == ZT_F32 ? (float *)recv : w.acc;
    for (int m = 0; m < M; m++)
        zt_quant_unpack(be, &k, sum, ZT_F32, w.recv + (size_t)m * k.bytes, m > 0);
    if (dt != ZT_F32)
        be->convert(be, recv, dt, sum, ZT_F32, width, 1.0f, false);
    return ZT_OK;
}

zt_comm *zt_qgz_pending_comm(const zt_qgz *q) { return q->intra ? q->intra : q->inter; }

int64_t zt_qgz_pass_bytes(const zt_qgz *q, const zt_layout *layout, int64_t width, bool inter)
{
    if (!q->active || (!inter && q->local_size == 1))
        return 0;
    int64_t total = 0;
    /* zt_zero_rs's buckets: from the partition's top down, `width` columns
     * each, the last one what is left. */
    for (int64_t top = layout->partition_numel; top > 0; top -= width) {
        int64_t w = top > width ? width : top;
        total += (int64_t)qgz_chunk(w).bytes * (inter ? q->n_nodes : qgz_ranks(q));
    }
    return total;
}
