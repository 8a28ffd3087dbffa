#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer on the simulated kernels
# (`make sim-sanitize` builds build/sim-asan/ first, the simulator and the
# .cu files included, and runs this): op-check --quick without its GEMM
# cases (every other backend op in every dtype against the CPU backend, the
# typed ops on bf16 and fp16 tensors too; the GEMMs are OpenBLAS under the
# simulator, and run in the trainings below), then training with
# --device cuda --comm nccl: GPT-lite at np 2, stage 3 bf16 with activation
# checkpointing, prefetch and optimizer offload, its units on the bf16
# tensors themselves (typed ops, GEMMs reading bf16); the classifier at np 2,
# stage 2 fp16 with an injected overflow, on fp32 copies (--typed-tensors
# off: its GEMMs' 16-bit operand casts). Options and leak suppressions are
# tests/sanitize/env.sh's. That build has no race-checker hooks (the Makefile
# says why): the normal sim build's tests check device-memory accesses and
# stream order, this one the host memory the kernels and the simulator touch.
# A run passes when it exits 0 with no sanitizer report.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1 ZT_BIN=build/sim-asan/zerotrain
source tests/env.sh
source tests/sanitize/env.sh
zt_scratch
[ -x "$ZT_BIN" ] && [ -x build/sim-asan/op-check ] || fail "build/sim-asan is not built (make sim-sanitize)"

check() { # name log: exit status was 0; no report
    ! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:|zt-sim: error' "$2" ||
        { cat "$2"; fail "$1: a sanitizer or the simulator reported an error"; }
    echo "ok: $1 under ASan+UBSan ($(tail -n 1 "$2"))"
}
timeout 600 build/sim-asan/op-check --quick --skip gemm,gemm_batched >"$tmp/op.log" 2>&1 || { cat "$tmp/op.log"; fail "op-check"; }
check op-check "$tmp/op.log"

zt_short_reviews 40 "$tmp/reviews.csv"
cat >"$tmp/gpt.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "activation_checkpointing": {"number_checkpoints": 2},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
   "overlap_comm": true, "stage3_param_persistence_threshold": 0,
   "stage3_max_live_parameters": 20000, "stage3_prefetch_bucket_size": 10000,
   "offload_optimizer": {"device": "cpu"}}}
JSON
cat >"$tmp/cls.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
 "fp16": {"enabled": true, "initial_scale_power": 10},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 2000, "overlap_comm": true}}
JSON
mpi=($ZT_MPIRUN -np 2 -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS)
timeout 300 "${mpi[@]}" "$ZT_BIN" --config "$tmp/gpt.json" --model gptlite \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32 --n-head 4 \
    --block-size 16 --dropout 0.1 --steps 2 --seed 11 $ZT_DEVICE_FLAGS >"$tmp/gpt.log" 2>&1 ||
    { cat "$tmp/gpt.log"; fail "GPT-lite"; }
check "GPT-lite np 2 stage 3 bf16" "$tmp/gpt.log"
timeout 300 "${mpi[@]}" "$ZT_BIN" --config "$tmp/cls.json" --model classifier --data "$tmp/reviews.csv" \
    --n-layer 1 --embed-dim 32 --n-head 4 --hidden-dim 64 --max-len 24 --steps 2 --seed 11 \
    --inject-overflow 1 --typed-tensors off $ZT_DEVICE_FLAGS >"$tmp/cls.log" 2>&1 || { cat "$tmp/cls.log"; fail "classifier"; }
check "classifier np 2 stage 2 fp16" "$tmp/cls.log"
echo "cudasim: ASan+UBSan found nothing in the simulated kernels"
