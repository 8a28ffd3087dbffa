/*
 * report: the --report JSON, built from the trainer's stats (settings, loss
 * history, throughput, the stage policy's statement of memory and traffic,
 * per-rank memory by class and communication bytes by kind and communicator).
 *
 * Report JSON (what scripts and tests read):
 *   zerotrain_version, model {name, params}, world_size, device, stage,
 *   precision, train_batch_size, micro_batch_size, gradient_accumulation_steps,
 *   steps, skipped_steps, loss_history [..], loss_scale_history [..] (fp16;
 *   null otherwise), final_loss, samples_per_sec, param_norm, train_seconds,
 *   eval [ {step, loss, accuracy} ] (accuracy null for language models),
 *   mixed_precision {grad_dtype, comm_dtype, units ("fp32" | "fp16" | "bf16": what
 *   the units compute on: fp32 copies, or 16-bit tensors themselves)},
 *   offload {optimizer, param}
 *   ("none" | "cpu" | "nvme"),
 *   data {file_bytes, tokens, token_bytes, ids_bytes, index_bytes, tokenizer_bytes,
 *         held_bytes, load_peak_bytes}  (what --data holds on each rank's host, the
 *         same on every rank: each loads its own copy; null for synthetic data),
 *   nvme {engine, direct, sub_groups, sub_groups_in_memory, swapped_param_units,
 *         param_buffers, param_in_cpu_params, swap_buffer_bytes, swap_file_bytes}
 *   (null without an nvme offload; docs/nvme.md),
 *   activation_checkpointing {interval, cpu_checkpointing},
 *   zero {stage, padded_params, partition_params, persistent_params,
 *         hpz_partition_size, mics_shard_size (0: off), overlap_comm, reduce_bucket_size,
 *         allgather_bucket_size, reduce_scatter, allgather_partitions,
 *         policy {optimizer_sharded, grads_sharded, params_sharded,
 *                 allgather_after_step, reduce_every_micro_step,
 *                 memory_bytes {device|host {PARAMS, GRADS, MASTER, OPTIM}},
 *                 elements_per_step {GROUP {KIND}}, elements_exact}},
 *         (the policy's statement for this run, engine/zero/stage.h; each
 *         rank's measured counters below must match it)
 *   ranks [ {rank, host,
 *            memory_bytes {device|host {CLASS {current, peak, avg, reserved}},
 *                          nvme {PARAMS, MASTER, OPTIM}},  (bytes in swap files, 0 without nvme)
 *            memory_total_bytes {device|host {current, peak}, nvme},  (all classes at once)
 *            comm_bytes {KIND: bytes summed over communicators},
 *            comm {GROUP {bytes {KIND}, calls {KIND}, hosts}},
 *                  (hosts: how many hosts the group's ranks run on; a group
 *                  on 1 host sent none of its bytes between hosts)
 *            gather_peak_live_params,   (stage 3's largest gathered window)
 *            nvme {optimizer|param {bytes_read, bytes_written, reads, writes, gets,
 *                  hits, prefetches, wait_seconds}} (or null),
 *            pipeline {stage, dp_rank, slots, in_flight_max, timed_steps,
 *                      forward_s, backward_s, idle_s, step_s (per timed step),
 *                      bubble_fraction (idle / step),
 *                      p2p_sent_bytes_per_step, p2p_recv_bytes_per_step}} ]
 *   pipeline {stages, data_parallel, partition_method, schedule, micro_batches,
 *             bubble_fraction_ideal ((P - 1) / (M + P - 1)),
 *             per_stage [ {stage, units [first, end), params, slots,
 *                          in_flight_max, acts_peak_bytes, memory_peak_bytes
 *                          (the largest over the stage's replicas), timed_steps,
 *                          forward_s, backward_s, idle_s, step_s,
 *                          bubble_fraction (averaged over the replicas)} ]}
 *   profile {steps, gemm_dtype, tf32, counts_model, model {..}, micro_batch_size,
 *            gradient_accumulation_steps, stage, world_size, comm_bytes_per_step {KIND},
 *            ops {OP {class, calls, flops, bytes_read {DTYPE}, bytes_written {DTYPE}}}}
 *   (rank 0's --profile counts over the profiled steps, engine/monitor/profile.h;
 *   null without --profile)
 * GROUP: world, and with hpZ hpz, with MiCS mics_shard and mics_replica, with
 * pipelining pipe (the point-to-point sends and receives between stages).
 * With pipelining, zero and its policy describe rank 0's stage.
 * CLASS: PARAMS GRADS MASTER OPTIM ACTS COMM WORK SWAP; KIND: all_reduce
 * reduce_scatter all_gather broadcast. Bytes are whole logical buffers (see
 * comm.h). Non-finite numbers are written as null.
 *
 * Memory: nothing kept. Collective: zt_report_write (gathers every rank's
 * memory and comm counters).
 */
#ifndef ZT_REPORT_H
#define ZT_REPORT_H

#include "engine/status.h"
#include "engine/train/trainer.h"

/* Rank 0 writes the report of trainer t to path; param_norm is
 * zt_trainer_param_norm's value. Every rank returns the same status. */
zt_status zt_report_write(const char *path, const zt_trainer *t, double param_norm);

#endif
