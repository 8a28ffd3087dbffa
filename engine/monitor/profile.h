/*
 * profile: --profile's counting backend. zt_profile_wrap makes a zt_backend
 * whose every op adds, per op name, its calls, FLOPs and the bytes it reads
 * and writes per dtype, then calls the same op of the wrapped backend. The
 * counts come from each call's arguments, never from timing, so they are the
 * same on every device: scripts/roofline.py turns them into a predicted time
 * per op on a GPU (docs/roofline.md).
 *
 * What is counted: each tensor argument once, in the dtype the op's contract
 * gives it (engine/backend.h: fp32 for the layer ops; convert, quantize,
 * dequantize, sum_squares and has_inf_nan take a zt_dtype). That is the op's
 * compulsory traffic; a kernel that passes over a tensor twice moves more.
 * FLOPs of GEMMs are 2 m n k per product; the other ops' FLOPs are nominal
 * per-element counts (the roofline bounds them by bandwidth alone).
 *
 * Modelled, not called: the CUDA backend with a 16-bit gemm_dtype
 * (engine/cuda/backend_cuda_gemm.cu) casts both fp32 operands of every GEMM
 * into its workspace and multiplies the 16-bit copies. With such a
 * gemm_dtype in the options (the config's compute dtype, whatever device
 * runs) each GEMM counts those casts as the op "gemm_operand_cast" (fp32
 * read, 16-bit written, one pass: tiled products that recast an operand move
 * more) and reads its operands as 16-bit.
 *
 * Timing (opt.timing, --profile-time): each counted op also gets its time:
 * the wrapper drains the device (sync) before the op and waits for it after,
 * and adds the wall time between. That serialises the host with the device
 * and the ops with any overlapped transfer or collective, so a timed run's
 * step is slower than an untimed one; each op's time includes one launch and
 * one synchronisation (microseconds on a GPU). A GEMM's time includes the
 * modelled casts, which the CUDA backend runs inside it.
 *
 * Counting runs only between zt_profile_begin and zt_profile_end (the
 * trainer's steps), so set-up, evaluation and the report are left out. The
 * wrapper is only installed with --profile: without it nothing is counted
 * and nothing costs.
 *
 * Memory: the wrapper's impl (its counters) is made by zt_profile_wrap and
 * freed by the wrapper's destroy (zt_backend_free). The wrapped backend is
 * borrowed: it must outlive the wrapper and is freed by its owner.
 * Counters are added atomically (ops may come from more than one thread).
 * Collective: none.
 */
#ifndef ZT_PROFILE_H
#define ZT_PROFILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/train/trainer.h"

/* What the report states about the run next to the counts. */
typedef struct {
    zt_dtype gemm_dtype; /* the CUDA backend's GEMM operand dtype for this config */
    bool tf32;           /* fp32 GEMMs on TF32 tensor cores */
    const char *model;
    int64_t n_layer, n_embd, n_head, block_size, vocab_size, params;
    int64_t micro_batch_size, gradient_accumulation_steps;
    int stage, world_size;
    bool timing; /* also time each op (--profile-time) */
} zt_profile_options;

/* The byte kinds counted apart. */
typedef enum {
    ZT_PROF_FP32 = 0,
    ZT_PROF_FP16,
    ZT_PROF_BF16,
    ZT_PROF_INT32, /* token ids, labels, lengths */
    ZT_PROF_INT8,  /* quantized values (int4 packs two per byte) */
    ZT_PROF_UINT64, /* dropout row keys */
    ZT_PROF_BYTES, /* untyped: copies and memsets */
    ZT_PROF_NKINDS
} zt_profile_kind;

/* How the roofline bounds an op: tensor-core FLOPs or HBM bytes (MATMUL),
 * HBM bytes (MEMORY), host transfers by the host link, our kernels' FLOPs
 * or HBM bytes (FMA: the flash attention; its tensor_flops, counted where
 * its kernels run on tensor cores (bf16, fp16 at head sizes 64 and 128,
 * engine/monitor/attn_flops.h), at mma.sync's rate and the instructions
 * issued around them, the rest on the CUDA cores' FMA pipe). The SASS
 * audit's tensor rule (scripts/gpu_audit.py) fails an op classed MATMUL, or
 * an op with tensor_flops, whose kernels have no tensor-core instruction. */
typedef enum { ZT_PROF_MATMUL = 0, ZT_PROF_MEMORY, ZT_PROF_TRANSFER, ZT_PROF_FMA } zt_profile_class;

/* The CUDA simulator's performance counters of an op's kernels (ZT_SIM_PERF=1,
 * tests/cudasim/sim/perf.cc says what each counts; docs/simulator.md). */
typedef enum {
    ZT_PROF_DEV_LAUNCHES = 0,
    ZT_PROF_DEV_GLOBAL_REQUESTS,
    ZT_PROF_DEV_GLOBAL_SECTORS,
    ZT_PROF_DEV_GLOBAL_WAVEFRONTS,
    ZT_PROF_DEV_DRAM_SECTORS,
    ZT_PROF_DEV_SHARED_REQUESTS,
    ZT_PROF_DEV_SHARED_WAVEFRONTS,
    ZT_PROF_DEV_SHARED_BANK_CONFLICTS,
    ZT_PROF_DEV_TENSOR_INSTRUCTIONS,
    ZT_PROF_NDEV
} zt_profile_device_counter;

typedef struct {
    uint64_t calls, flops;
    uint64_t tensor_flops; /* of flops, those on tensor cores (FMA-class ops that pick them) */
    uint64_t tensor_width;  /* the attention's head size on tensor cores (the last call's) */
    uint64_t dropout_calls; /* calls that drew a dropout mask (the attention) */
    uint64_t read[ZT_PROF_NKINDS], written[ZT_PROF_NKINDS];
    uint64_t ns; /* with timing: the calls' wall time, summed */
    uint64_t host_blocks; /* host-blocking CUDA calls inside the op (simulator only) */
    uint64_t device[ZT_PROF_NDEV]; /* ZT_SIM_PERF's counts (simulator only) */
} zt_profile_counts;

/* Makes *wrapper count the ops of inner (borrowed). */
zt_status zt_profile_wrap(zt_backend *wrapper, const zt_backend *inner,
                          const zt_profile_options *opt);

/* Whether be is a wrapper zt_profile_wrap made. */
bool zt_profile_is(const zt_backend *be);

/* Zeroes the counts and starts counting; snapshots the step counter and the
 * comm counters of t's communicators (t NULL: neither, for tests). */
void zt_profile_begin(const zt_backend *be, const zt_trainer *t);
/* Stops counting; the steps and comm bytes since begin are kept. */
void zt_profile_end(const zt_backend *be, const zt_trainer *t);

/* The ops (names, in zt_profile_op_name order) and their counts so far. */
int zt_profile_n_ops(void);
const char *zt_profile_op_name(int op);
zt_profile_class zt_profile_op_class(int op);
void zt_profile_get(const zt_backend *be, int op, zt_profile_counts *out);
const char *zt_profile_kind_name(zt_profile_kind k);
/* While counting (--profile): the name of the op this thread is inside, else
 * NULL. The CUDA simulator's launch log (ZT_SIM_LAUNCH_LOG) tags each kernel
 * with it, which ties the profile's ops to the kernels the SASS audit reads
 * (scripts/gpu_audit.py). */
const char *zt_profile_current_op(void);
/* Called by the CUDA simulator at every call that blocks the host on the
 * device (stream, device and event synchronisation, a copy that returns when
 * done): counted to the current op, or as between ops. A real CUDA runtime
 * has no such hook, so only the simulator's builds report the counts (the
 * report's "host_blocking_calls", docs/usage.md). Any thread. */
void zt_profile_host_block(void);
/* Called by the CUDA simulator with ZT_SIM_PERF=1 when a kernel (or cuBLAS
 * call) launched inside op has run: n counters by name (zt_profile_device_
 * counter's, lower case without the prefix: "launches", "global_sectors",
 * ...), added to op's. Unknown names and ops are ignored; nothing happens
 * when not counting. The device thread. */
void zt_profile_device_counts(const char *op, const char *const *names, const uint64_t *values,
                              int n);

/* The report's "profile" object (docs/usage.md); a new reference. */
json_t *zt_profile_json(const zt_backend *be);

#endif
