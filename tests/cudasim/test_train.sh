#!/usr/bin/env bash
# Smoke test of the CUDA backend and NCCL comm on the CUDA simulator: at np 2
# (one simulated GPU per rank), the MLP and GPT-lite train 4 fp32 steps at
# ZeRO stages 0 and 3 (overlap_comm on, small buckets, a stage-3 gather window
# that prefetches and releases every unit) and must report the CPU backend's
# losses to 1e-5 relative and its final weights to 1e-4 relative L2: the same
# data and updates, only GEMM and reduction rounding differ. GPT-lite also
# runs at 2 pipeline stages (ncclSend/ncclRecv between them), and the MLP
# in bf16 at stage 3 on its 16-bit tensors (to 2e-3 / 2.5e-3). Anything the
# simulator reports (a race, a bad pointer, a collective hang) fails the run.
# Runs through ZT_SIM=1 (tests/env.sh), the switch other multi-rank tests can
# use to run on the simulator.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

mlp=(--model mlp --width 64 --layers 3 --in-size 32 --out-size 10 --steps 4 --seed 7)
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --steps 4 --seed 11)
for stage in 0 3; do
    zero="\"reduce_bucket_size\": 3000, \"allgather_bucket_size\": 3000, \"overlap_comm\": true"
    [ $stage = 3 ] && zero="$zero, \"stage3_param_persistence_threshold\": 0,
        \"stage3_max_live_parameters\": 40000, \"stage3_prefetch_bucket_size\": 20000"
    cat >"$tmp/cfg$stage.json" <<JSON
{"train_batch_size": 16, "gradient_accumulation_steps": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "eps": 1e-5}},
 "zero_optimization": {"stage": $stage, $zero}}
JSON
done

# pair TAG CFG LOSS_TOL PARAM_TOL ARGS...: the run on the CPU backend and on
# the simulator; the simulator's losses and final weights against the CPU's.
pair() {
    local tag=$1 cfg=$2 lt=$3 wt=$4
    shift 4
    $ZT_MPIRUN -np 2 ./zerotrain --config "$cfg" "$@" --device cpu \
        --report "$tmp/$tag-cpu.json" --dump-params "$tmp/$tag-cpu.bin" >"$tmp/$tag-cpu.log" 2>&1 ||
        { cat "$tmp/$tag-cpu.log"; fail "$tag on the CPU"; }
    $ZT_MPIRUN -np 2 "$ZT_BIN" --config "$cfg" "$@" $ZT_DEVICE_FLAGS \
        --report "$tmp/$tag-sim.json" --dump-params "$tmp/$tag-sim.bin" >"$tmp/$tag-sim.log" 2>&1 ||
        { cat "$tmp/$tag-sim.log"; fail "$tag on the simulator"; }
    grep -q "device cuda, comm nccl" "$tmp/$tag-sim.log" || { cat "$tmp/$tag-sim.log"; fail "$tag did not run on cuda/nccl"; }
    grep -q "zt-sim" "$tmp/$tag-sim.log" && { cat "$tmp/$tag-sim.log"; fail "$tag: the simulator reported an error"; }
    $ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/$tag-cpu.json" "$tmp/$tag-sim.json" --tol "$lt"
    $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/$tag-cpu.bin" "$tmp/$tag-sim.bin" --tol "$wt"
}

for model in mlp gpt; do
    declare -n args=$model
    for stage in 0 3; do
        pair "$model-s$stage" "$tmp/cfg$stage.json" 1e-5 1e-4 "${args[@]}"
    done
done
# The MLP in bf16 at stage 3: typed units (the report says so on both
# sides), the input rounded on the host and copied to the device as bf16;
# 16-bit rounding of different GEMM orders gives the matrix's 16-bit
# tolerances (test_matrix.sh).
tag=mlp-bf16-s3
sed 's/^{/{"bf16": {"enabled": true}, /' "$tmp/cfg3.json" >"$tmp/$tag.json"
pair $tag "$tmp/$tag.json" 2e-3 2.5e-3 "${mlp[@]}"
for side in cpu sim; do
    $ZT_PYTHON - "$tmp/$tag-$side.json" <<'PY'
import json, sys
u = json.load(open(sys.argv[1]))["mixed_precision"]["units"]
assert u == "bf16", f"{sys.argv[1]}: the MLP's bf16 units computed on {u}"
PY
done
# Pipeline stages: the activations and their gradients move by ncclSend/ncclRecv.
pair gpt-pipe "$tmp/cfg0.json" 1e-5 1e-4 "${gpt[@]}" --pipeline-stages 2
echo "cudasim: MLP and GPT-lite at stages 0 and 3 (np 2, cuda + nccl), the bf16 MLP (typed) and GPT-lite at 2 pipeline stages match the CPU backend"
