#!/usr/bin/env bash
# Every ZeRO stage is exact: stages 0-3 at np 1..4, gradient accumulation 1 and
# 3, with "big" buckets (5e8 elements, no overlap) and "small" ones (1000
# elements, smaller than every unit, overlapped; stage 3 with a small gather
# window that keeps the 650-parameter head unit persistent and retains units
# for a near reuse) give the np 1 stage 0 weights to 1e-6 relative L2 and its
# losses to 1e-6 after 20 fp32 AdamW steps with clipping; and the loss falls.
# 63 runs (4 stages x 4 world sizes x 2 GAS x 2 bucket configs, less the
# reference itself). Then a wider MLP whose middle unit has shards of 32K
# elements or more at np 2 and 4, so that stages 1-2 all-gather it in place
# and stages 1-3 reduce-scatter it unpacked (engine/zero/allgather.c,
# reduce.c) while its small neighbours share buckets: 24 more runs against
# that model's own np 1 stage 0 reference, with buckets wider than the unit
# (no overlap: straight from its gradients; and overlapped, where stage 1's
# persistent gradients go straight and stages 2-3's backward writes the
# unit's gradient into its bucket).
#
# Adam's eps is 1e-5, not the default 1e-8: Adam divides by sqrt(v) + eps, so a
# parameter whose gradient is ~1e-8 (this MLP has a few: weights between nearly
# dead ReLUs) turns a rounding-level change of its gradient, which any change of
# summation order (world size, accumulation, buckets) makes, into an update
# change up to lr/eps times larger. With eps 1e-8 that is 6e-5 on one weight
# after one step, and 7.6e-6 relative L2 after 20 steps already at stage 0
# (np 4 GAS 1, or np 1 GAS 3, against np 1 GAS 1). eps 1e-5 bounds the gain to
# 300 (measured: <= 1.2e-7 at stage 0); a sharding bug (a wrong slice, a missed
# or doubled reduction, a stale parameter) stays orders of magnitude above 1e-6.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

model=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 20 --seed 7)
# Units (Linear+ReLU): 32*64+64 = 2112, 64*64+64 = 4160 twice, 64*10+10 = 650.
# 72 = np * micro * gas for np 1..4 and gas 1, 3.
write_cfg() { # stage kind
    local zero
    case $2 in
    big) zero="\"reduce_bucket_size\": 500000000, \"allgather_bucket_size\": 500000000, \"overlap_comm\": false"
         [ "$1" = 3 ] && zero="$zero, \"stage3_param_persistence_threshold\": 0" ;;
    small) zero="\"reduce_bucket_size\": 1000, \"allgather_bucket_size\": 1000, \"overlap_comm\": true"
           [ "$1" = 3 ] && zero="$zero, \"stage3_param_persistence_threshold\": 1000,
    \"stage3_max_live_parameters\": 5000, \"stage3_prefetch_bucket_size\": 3000,
    \"stage3_max_reuse_distance\": 3000" ;;
    esac
    cat >"$tmp/cfg-s$1-$2.json" <<JSON
{
  "train_batch_size": 72,
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "zero_optimization": {"stage": $1, $zero}
}
JSON
}
for stage in 0 1 2 3; do
    for kind in big small; do write_cfg $stage $kind; done
done

t0=$SECONDS
./zerotrain --config "$tmp/cfg-s0-big.json" "${model[@]}" --gradient-accumulation-steps 1 \
    --dump-params "$tmp/ref.bin" --report "$tmp/ref.json" >"$tmp/ref.log" 2>&1 || { cat "$tmp/ref.log"; exit 1; }
$ZT_PYTHON tests/tools/ztcheck.py loss-falls "$tmp/ref.json"

# Every case runs even after a failure (the summary lists them all); the log
# and config of the first few failures are printed.
n=0
failures=()
show_failure() { # tag cfg
    if [ "${#failures[@]}" -le 3 ]; then
        sed 's/^/    | /' "$tmp/$1.log" || true
        sed 's/^/    cfg: /' "$tmp/cfg-$2.json" || true
    fi
}
# run_case TAG STAGE NP GAS KIND REF: one run against the reference REF.bin/.json.
run_case() {
    local tag=$1 stage=$2 np=$3 gas=$4 kind=$5 ref=$6
    shift 6
    n=$((n + 1))
    local cmd="$ZT_MPIRUN -np $np ./zerotrain --config cfg-s$stage-$kind.json $* --gradient-accumulation-steps $gas"
    if ! timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/cfg-s$stage-$kind.json" \
        "$@" --gradient-accumulation-steps "$gas" --dump-params "$tmp/$tag.bin" \
        --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1; then
        failures+=("$tag: zerotrain failed: $cmd")
        echo "FAIL: ${failures[-1]}"
        show_failure "$tag" "s$stage-$kind"
        return 0
    fi
    if ! $ZT_PYTHON tests/tools/ztstages.py same "$tmp/$ref.bin" "$tmp/$ref.json" "$tmp/$tag.bin" \
        "$tmp/$tag.json" --tol 1e-6 --expect "stage=$stage,np=$np,gas=$gas" --tag "$tag"; then
        failures+=("$tag: differs from the reference: $cmd")
        show_failure "$tag" "s$stage-$kind"
    fi
}
for stage in 0 1 2 3; do
    for np in 1 2 3 4; do
        for gas in 1 3; do
            for kind in big small; do
                [ "$stage" = 0 ] && [ "$np" = 1 ] && [ "$gas" = 1 ] && [ "$kind" = big ] && continue
                run_case "stage$stage-np$np-gas$gas-$kind" $stage $np $gas $kind ref "${model[@]}"
            done
        done
    done
done
wide=(--model mlp --width 384 --layers 3 --in-size 32 --out-size 10 --steps 20 --seed 7)
# Units: 32*384+384 = 12672, 384*384+384 = 147840 (shards 73920 at np 2, 36960
# at np 4), 384*10+10 = 3850.
sed 's/"overlap_comm": false/"overlap_comm": true/; s/500000000/400000/g' "$tmp/cfg-s1-big.json" >"$tmp/cfg-s1-mid.json"
sed 's/"overlap_comm": false/"overlap_comm": true/; s/500000000/400000/g' "$tmp/cfg-s2-big.json" >"$tmp/cfg-s2-mid.json"
sed 's/"overlap_comm": false/"overlap_comm": true/; s/500000000/400000/g' "$tmp/cfg-s3-big.json" >"$tmp/cfg-s3-mid.json"
./zerotrain --config "$tmp/cfg-s0-big.json" "${wide[@]}" --gradient-accumulation-steps 1 \
    --dump-params "$tmp/wref.bin" --report "$tmp/wref.json" >"$tmp/wref.log" 2>&1 || { cat "$tmp/wref.log"; exit 1; }
for stage in 1 2 3; do
    for np in 2 4; do
        for gas in 1 3; do
            for kind in big mid; do
                run_case "wide-stage$stage-np$np-gas$gas-$kind" $stage $np $gas $kind wref "${wide[@]}"
            done
        done
    done
done
if [ "${#failures[@]}" -gt 0 ]; then
    echo "FAIL: ${#failures[@]} of $n runs:"
    printf '  %s\n' "${failures[@]}"
    exit 1
fi
echo "ok: $n runs of stages 0-3 match their np 1 stage 0 reference in $((SECONDS - t0)) s"
