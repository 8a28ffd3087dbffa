/*
 * bandwidth: a short bandwidth table of one communicator, measured as
 * nccl-tests measures it (`zerotrain check` prints one per group: world,
 * intra-host, inter-host). For each size S from min_bytes to max_bytes,
 * doubling, it runs all_reduce, all_gather and reduce_scatter of fp32
 * elements through the comm's own ops (so the path training uses: the MPI
 * comm thread, staging, NCCL):
 *   time   the slowest rank's average seconds per call over `iters` calls,
 *          after five warm-up calls (the first one's result is checked);
 *   S      the whole logical buffer, nccl-tests' "size": the all-reduce's
 *          buffer, the all-gather's output, the reduce-scatter's input
 *          (rounded down to a multiple of 4 * ranks bytes);
 *   algbw  S / time;
 *   busbw  algbw * factor, the factor making it comparable to the link's
 *          bandwidth: all-reduce 2(n-1)/n, all-gather and reduce-scatter
 *          (n-1)/n (nccl-tests' doc/PERFORMANCE.md).
 * The warm-up's result is checked: every rank contributes rank + 1, so the
 * sum is n(n+1)/2 and the gathered block of rank r is r + 1.
 *
 * Memory: two buffers of max_bytes from the comm's backend (device memory on
 * CUDA), freed before returning; the rows are the caller's.
 * Collective over c: zt_bw_measure.
 */
#ifndef ZT_COMM_BANDWIDTH_H
#define ZT_COMM_BANDWIDTH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/status.h"

/* The three collectives of the table, in its column order. */
#define ZT_BW_OPS 3
extern const zt_comm_kind zt_bw_ops[ZT_BW_OPS];

typedef struct {
    int64_t bytes;              /* S */
    int iters;
    double seconds[ZT_BW_OPS];  /* per call, the slowest rank's average */
    double algbw[ZT_BW_OPS];    /* GB/s, 1e9 bytes */
    double busbw[ZT_BW_OPS];
} zt_bw_row;

/* nccl-tests' bus bandwidth factor of collective k over n ranks. */
double zt_bw_bus_factor(zt_comm_kind k, int n);

/* Calls per size: about 64 MiB moved per collective, 2 to 20 calls. */
int zt_bw_iters(int64_t bytes);

/* How many rows min_bytes..max_bytes (doubling) gives. */
int zt_bw_n_rows(int64_t min_bytes, int64_t max_bytes);

/* Measures every row of c (rows holds zt_bw_n_rows entries); buffers come
 * from be (c's backend). A warm-up result that is wrong fails with
 * ZT_ERR_COMM naming the collective and the size. */
zt_status zt_bw_measure(zt_comm *c, const zt_backend *be, int64_t min_bytes, int64_t max_bytes,
                        zt_bw_row *rows);

#endif
