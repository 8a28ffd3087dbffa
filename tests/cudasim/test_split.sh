#!/usr/bin/env bash
# Split communicators and GPU sharing on the CUDA simulator.
#  - hpZ: GPT-lite at np 4 as 2 nodes of 2 (ZT_RANKS_PER_NODE), stage 3 with
#    zero_hpz_partition_size 2, fp32; MiCS: the MLP at np 4 with
#    mics_shard_size 2, fp16 (16-bit collectives on the sub-communicators;
#    not bf16: this MLP's bf16 runs differ from each other by 1e-2 for any
#    change of rounding, the CPU's bf16 from its own fp32 too). --device cuda --comm nccl (the sub-communicators
#    are ncclCommSplit's, sharing the device's one comm stream) against the
#    CPU backend with the same config: losses 1e-5 and weights 1e-4 (fp32),
#    2e-3 and 2.5e-3 (fp16; test_matrix.sh says why), and every
#    communicator's byte counters equal to the CPU run's (the same
#    collectives ran on the same groups), with the hpz, mics_shard and
#    mics_replica groups carrying traffic.
#  - GPU sharing is decided by device UUIDs: two ranks seeing one GPU
#    (ZT_SIM_DEVICES=1) get --comm nccl refused and --comm auto falls back to
#    staged MPI (which must still match the CPU); each rank given its own GPU
#    through the visible-devices list (ZT_SIM_VISIBLE_DEVICES, as Slurm's
#    --gpus-per-task sets CUDA_VISIBLE_DEVICES) sees one GPU each and gets
#    NCCL; two simulated nodes of one GPU each (ZT_RANKS_PER_NODE=1) too.
#  - Device memory headroom (engine/train/memcheck.c through cudaMemGetInfo):
#    the MLP's 0.03 GiB plan and the 0.5 GiB margin fit a 560 MiB GPU at
#    np 1, and not a 520 MiB one, nor 560 MiB shared by 2 ranks (the plans
#    are summed over the ranks sharing it), each refused with the planner's
#    breakdown.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --steps 3 --seed 11)
mlp=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 4 --seed 7)
cfg() { # file precision extra-zero
    local prec=""
    [ "$2" = fp16 ] && prec='"fp16": {"enabled": true, "initial_scale_power": 10},'
    cat >"$1" <<JSON
{"train_batch_size": 16, "gradient_accumulation_steps": "auto", "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}}, $prec
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000,
   "overlap_comm": true, "stage3_param_persistence_threshold": 0,
   "stage3_max_live_parameters": 5000, "stage3_prefetch_bucket_size": 3000 $3}}
JSON
}
cfg "$tmp/hpz.json" fp32 ', "zero_hpz_partition_size": 2'
cfg "$tmp/mics.json" fp16 ', "mics_shard_size": 2'

pair() { # tag np lt wt groups model-array cfg [mpirun args]: CPU and simulator, compared
    local tag=$1 np=$2 lt=$3 wt=$4 groups=$5 arr=$6 c=$7
    shift 7
    local -n margs=$arr
    $ZT_MPIRUN -np "$np" "$@" ./zerotrain --config "$c" "${margs[@]}" --device cpu \
        --report "$tmp/$tag-cpu.json" --dump-params "$tmp/$tag-cpu.bin" >"$tmp/$tag-cpu.log" 2>&1 ||
        { cat "$tmp/$tag-cpu.log"; fail "$tag on the CPU"; }
    timeout 300 $ZT_MPIRUN -np "$np" "$@" "$ZT_BIN" --config "$c" "${margs[@]}" $ZT_DEVICE_FLAGS \
        --report "$tmp/$tag-sim.json" --dump-params "$tmp/$tag-sim.bin" >"$tmp/$tag-sim.log" 2>&1 ||
        { cat "$tmp/$tag-sim.log"; fail "$tag on the simulator"; }
    grep -q "device cuda, comm nccl" "$tmp/$tag-sim.log" || { cat "$tmp/$tag-sim.log"; fail "$tag: not on cuda/nccl"; }
    ! grep -q "zt-sim" "$tmp/$tag-sim.log" || { cat "$tmp/$tag-sim.log"; fail "$tag: the simulator reported an error"; }
    $ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/$tag-cpu.json" "$tmp/$tag-sim.json" --tol "$lt"
    $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/$tag-cpu.bin" "$tmp/$tag-sim.bin" --tol "$wt"
    $ZT_PYTHON - "$tmp/$tag-cpu.json" "$tmp/$tag-sim.json" "$groups" <<'PY'
import json, sys
cpu, sim = (json.load(open(p)) for p in sys.argv[1:3])
for a, b in zip(cpu["ranks"], sim["ranks"]):
    assert a["comm"] == b["comm"], f"rank {a['rank']}: CPU {a['comm']} vs simulator {b['comm']}"
    for g in sys.argv[3].split(","):
        assert sum(b["comm"][g]["bytes"].values()) > 0, f"rank {b['rank']}: no traffic on {g}"
print(f"ok: {len(sim['ranks'])} ranks' communicator counters equal the CPU run's; "
      f"traffic on {sys.argv[3]}")
PY
}
pair hpz 4 1e-5 1e-4 world,hpz gpt "$tmp/hpz.json" -x ZT_RANKS_PER_NODE=2
pair mics 4 2e-3 2.5e-3 mics_shard,mics_replica mlp "$tmp/mics.json"

# ---- GPU sharing
echo '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
       "zero_optimization": {"stage": 2}}' >"$tmp/d.json"
m=(--config "$tmp/d.json" --model mlp --width 32 --layers 3 --steps 3 --seed 3)
expect 2 "--comm nccl needs one GPU per rank: 2 ranks on this node share 1 GPU" -- \
    $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=1 "$ZT_BIN" "${m[@]}" --device cuda --comm nccl
expect 0 "device cuda, comm staged" -- \
    $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=1 "$ZT_BIN" "${m[@]}" --device cuda --comm auto \
    --report "$tmp/staged.json"
grep -q "several ranks share a GPU" "$tmp/out" || { cat "$tmp/out"; fail "no notice of the fallback"; }
! grep -q "zt-sim" "$tmp/out" || { cat "$tmp/out"; fail "the simulator reported an error"; }
expect 0 "device cpu, comm mpi" -- $ZT_MPIRUN -np 2 ./zerotrain "${m[@]}" --device cpu --report "$tmp/cpu.json"
$ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/cpu.json" "$tmp/staged.json" --tol 1e-5
cat >"$tmp/own-gpu.sh" <<'SH'
#!/bin/sh
ZT_SIM_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"
SH
chmod +x "$tmp/own-gpu.sh"
expect 0 "device cuda, comm nccl" -- \
    $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=2 "$tmp/own-gpu.sh" "$ZT_BIN" "${m[@]}" --device cuda --comm auto
expect 0 "2 rank(s) on 2 node(s), device cuda, comm nccl" -- \
    $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=1 -x ZT_RANKS_PER_NODE=1 "$ZT_BIN" "${m[@]}" --device cuda --comm nccl

# ---- device memory headroom
expect 0 "device cuda, comm nccl" -- env ZT_SIM_DEVICES=1 ZT_SIM_DEVICE_MEMORY_MB=560 \
    "$ZT_BIN" "${m[@]}" --device cuda --comm nccl
expect 1 "error: not enough device memory: this rank plans 0.03 GiB (PARAMS" -- \
    env ZT_SIM_DEVICES=1 ZT_SIM_DEVICE_MEMORY_MB=520 "$ZT_BIN" "${m[@]}" --device cuda --comm nccl
grep -q "+ 0.50 GiB outside the arenas" "$tmp/out" || { cat "$tmp/out"; fail "no margin in the message"; }
expect 1 "the 2 ranks of this host on device [0-9a-f]* need 1.06 GiB" -- \
    $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=1 -x ZT_SIM_DEVICE_MEMORY_MB=560 "$ZT_BIN" "${m[@]}" --device cuda --comm auto
echo "cudasim: hpZ and MiCS on split NCCL communicators match the CPU; GPU sharing told by UUIDs; memory headroom checked"
