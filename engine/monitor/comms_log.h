/*
 * comms_log: the `comms_logger` section. From the comm counters (calls and
 * bytes per collective, engine/comm/comm.h) of every communicator the
 * trainer runs (the world, hpZ, MiCS and qgZ groups), rank 0 prints DeepSpeed's
 * summary table after training and, with `verbose`, one line per collective
 * after each step.
 *
 * The names are deepspeed.comm's: all_reduce, reduce_scatter_tensor,
 * all_gather_into_tensor, broadcast, all_to_all_single (ZeRO++'s qgZ, as
 * DeepSpeed's all_to_all_quant_reduce calls it). What differs from DeepSpeed's
 * log_summary(): one row per operation with the mean message size (the
 * counters keep calls and bytes, not a histogram of sizes), and no latency
 * or bandwidth columns (DeepSpeed synchronises every logged operation to time
 * it; zerotrain's collectives overlap compute and are not timed one by one).
 *
 * Memory: borrows the trainer's communicators. Collective: none.
 */
#ifndef ZT_COMMS_LOG_H
#define ZT_COMMS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/train/trainer.h"

typedef struct {
    bool on;
    const zt_comms_logger_config *cfg;
    const zt_comm *comms[ZT_STAGE_GROUP_N + 1]; /* distinct communicators, and the pipeline's */
    int n_comms;
    uint64_t last_calls[ZT_COMM_NKINDS], last_bytes[ZT_COMM_NKINDS]; /* at the last step */
} zt_comms_log;

/* Off unless comms_logger.enabled; `stats` gives the communicators. */
void zt_comms_log_init(zt_comms_log *l, const zt_config *cfg, const zt_trainer_stats *stats);

/* Sums of calls and bytes per kind over the communicators, for the kinds
 * prof_all / prof_ops select (the others 0). */
void zt_comms_log_totals(const zt_comms_log *l, uint64_t calls[ZT_COMM_NKINDS],
                         uint64_t bytes[ZT_COMM_NKINDS]);

/* verbose: the collectives of the step just done, one line each. */
void zt_comms_log_step(zt_comms_log *l, int64_t step, FILE *out);

/* The summary table (after training). */
void zt_comms_log_summary(const zt_comms_log *l, FILE *out);

/* deepspeed.comm's name of a kind. */
const char *zt_comms_log_op_name(zt_comm_kind k);

/* DeepSpeed's convert_size: 1024-based, "0B", "512.0 B", "1.53 MB". */
void zt_comms_log_size(double bytes, char *buf, size_t n);

#endif
