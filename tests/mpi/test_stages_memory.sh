#!/usr/bin/env bash
# What each ZeRO stage holds and sends, measured: at np 4 with fp32 AdamW,
# every rank's report must show exactly the ZeRO formulas (tests/tools/ztstages.py
# has them): PARAMS / GRADS / OPTIM peaks of 4 / 4 / 8 bytes per padded
# parameter Psi_p, divided by N where the stage partitions them; COMM within its
# reservation (and 0 at stage 0, which reduces in place); per optimizer step an
# all-reduce of Psi_p at stage 0 (the paper's 2 Psi: an all-reduce is a
# reduce-scatter plus an all-gather, and the counter counts its buffer once),
# reduce-scatter + all-gather of Psi_p at stage 1, the reduce-scatter every
# micro-step at stage 2, and at stage 3 (no persistence, reuse distance 0) two
# gathers and one reduce-scatter of Psi_p per micro-step while the full model
# never exists on a rank. Then stage 3 with DeepSpeed's default persistence
# threshold (every unit persistent), and hpZ (2-rank nodes, secondary
# partition): the same weights and losses as the np 1 stage 0 reference, the
# backward gathers inside the node group, and the secondary partition in PARAMS.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
st() { $ZT_PYTHON tests/tools/ztstages.py "$@"; }
failed=0
# run TAG NP CFG [flags...]: one zerotrain run with --report TAG.json; prints the log on failure
run() {
    local tag=$1 np=$2 cfg=$3; shift 3
    if ! timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$cfg" "$@" --report "$tmp/$tag.json" \
        >"$tmp/$tag.log" 2>&1; then
        sed 's/^/    | /' "$tmp/$tag.log"
        echo "FAIL: $tag: zerotrain failed: $ZT_MPIRUN -np $np ./zerotrain --config $(basename "$cfg") $*"
        sed 's/^/    cfg: /' "$cfg"
        failed=1
        return 1
    fi
}

# ---- 1. stages 0-3 at np 4. Width 256 so the units are larger than the 20000-
# element buckets (but the head): units 64*256+256 = 16640, 256*256+256 = 65792 (x6),
# 256*10+10 = 2570 (2624 padded); Psi_p = 414016, Psi_p/4 = 103504. 8 layers so
# that a stage-3 window of 140000 (about two big units) plus the shard stays
# well under the full model.
mlp=(--model mlp --width 256 --layers 8 --in-size 64 --out-size 10 --seed 3)
mlp_shape=256,8,64,10
max_live=140000
write_cfg() { # stage extra-zero-json
    cat >"$tmp/cfg-mem-$1.json" <<JSON
{
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": ${1%%-*}, "reduce_bucket_size": 20000, "allgather_bucket_size": 20000,
                        "overlap_comm": true$2}
}
JSON
}
window=", \"stage3_max_live_parameters\": $max_live, \"stage3_prefetch_bucket_size\": 70000, \"stage3_max_reuse_distance\": 0"
write_cfg 0 ""
write_cfg 1 ""
write_cfg 2 ""
write_cfg 3 ", \"stage3_param_persistence_threshold\": 0$window"
write_cfg 3-persist "$window"   # DeepSpeed's default persistence threshold 1e5 > every unit

for s in 0 1 2 3; do
    run "mem-$s" 4 "$tmp/cfg-mem-$s.json" "${mlp[@]}" --steps 3 || continue
    st check "$tmp/mem-$s.json" --mlp $mlp_shape --persist-threshold 0 --max-live $max_live \
        --reuse-distance 0 --label "stage $s" || failed=1
done
if run mem-3-persist 4 "$tmp/cfg-mem-3-persist.json" "${mlp[@]}" --steps 3; then
    st check "$tmp/mem-3-persist.json" --mlp $mlp_shape --persist-threshold 100000 --max-live $max_live \
        --reuse-distance 0 --label "stage 3 persistent" || failed=1
fi

# ---- 2. hpZ: 4 ranks as 2 nodes of 2 (ZT_RANKS_PER_NODE), zero_hpz_partition_size 2.
# Same model, data and optimizer as tests/mpi/test_stages_equivalence.sh (see
# there for eps); 20 steps at GAS 3 must give the np 1 stage 0 weights and
# losses to 1e-6. Window without persistence and reuse distance 0 for the exact
# counters: forward gathers Psi_p over the world, backward gathers Psi_p inside
# the node group, each per micro-step; PARAMS = Psi_p/N shard + Psi_p/2
# secondary partition. A second run with the equivalence test's small window
# (head unit persistent, reuse distance 3000) checks the weights, the memory,
# and bounds on the gathers.
small=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 20 --seed 7)
write_eq_cfg() { # name stage extra-zero-json
    cat >"$tmp/cfg-$1.json" <<JSON
{
  "train_batch_size": 72,
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "zero_optimization": {"stage": $2$3}
}
JSON
}
buckets=', "reduce_bucket_size": 1000, "allgather_bucket_size": 1000, "overlap_comm": true'
write_eq_cfg ref 0 ', "reduce_bucket_size": 500000000, "overlap_comm": false'
write_eq_cfg hpz 3 "$buckets, \"zero_hpz_partition_size\": 2, \"stage3_param_persistence_threshold\": 0,
    \"stage3_max_live_parameters\": 5000, \"stage3_prefetch_bucket_size\": 3000, \"stage3_max_reuse_distance\": 0"
write_eq_cfg hpz-reuse 3 "$buckets, \"zero_hpz_partition_size\": 2, \"stage3_param_persistence_threshold\": 1000,
    \"stage3_max_live_parameters\": 5000, \"stage3_prefetch_bucket_size\": 3000, \"stage3_max_reuse_distance\": 3000"

run ref 1 "$tmp/cfg-ref.json" "${small[@]}" --gradient-accumulation-steps 1 --dump-params "$tmp/ref.bin" || exit 1
# Local ranks inherit mpirun's environment.
export ZT_RANKS_PER_NODE=2
declare -A hpz_check=(
    [hpz]="--persist-threshold 0 --max-live 5000 --reuse-distance 0 --label hpZ-2"
    [hpz-reuse]="--persist-threshold 1000 --max-live 5000 --reuse-distance 3000 --label hpZ-2-reuse")
for tag in hpz hpz-reuse; do
    run "$tag" 4 "$tmp/cfg-$tag.json" "${small[@]}" --gradient-accumulation-steps 3 \
        --dump-params "$tmp/$tag.bin" || continue
    grep -q "4 rank(s) on 2 node(s)" "$tmp/$tag.log" || {
        head -3 "$tmp/$tag.log"; echo "FAIL: $tag: ZT_RANKS_PER_NODE=2 did not make 2 nodes"; failed=1; }
    st same "$tmp/ref.bin" "$tmp/ref.json" "$tmp/$tag.bin" "$tmp/$tag.json" --tol 1e-6 \
        --expect stage=3,np=4,gas=3 --tag "$tag: np 4 (2 nodes of 2) vs np 1 stage 0" || failed=1
    st check "$tmp/$tag.json" --mlp 64,4,32,10 ${hpz_check[$tag]} || failed=1
done
unset ZT_RANKS_PER_NODE

[ "$failed" = 0 ] || { echo "FAIL: see above"; exit 1; }
echo "ok: stage memory and communication"
