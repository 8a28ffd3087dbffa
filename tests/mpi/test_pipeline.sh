#!/usr/bin/env bash
# Pipeline parallelism (engine/pipe) is exact and says what it did.
# 1. Equivalence: the MLP, GPT-lite (dropout 0.1, so masks must be keyed by
#    sample, not by rank or stage) and the transformer classifier at P 2 and 4,
#    D 1 and 2, GAS 4 and 8 (the micro-batches of a step), ZeRO 0 and 1, 1F1B
#    and GPipe, with and without activation checkpointing, give the np 1 stage 0
#    run's weights to 1e-6 relative L2 and its losses to 1e-6 after fp32 AdamW
#    steps with clipping at 0.1, which every model hits (so the norm must be
#    the global one over all stages, as a mutation check showed). Each run takes
#    the same train_batch_size as the reference (micro x GAS x D); the
#    differences are summation order (measured <= 6e-8).
# 2. fp16: an overflow injected on one stage skips the step on every stage: P 4
#    has the np 1 run's loss-scale history and weights bit for bit. bf16 with
#    the optimizer offloaded: P 2 x D 2 gives np 2's weights bit for bit. The
#    references run with --typed-tensors off: a pipeline runs 16-bit units on
#    fp32 copies (not on the 16-bit tensors themselves).
# 3. Checkpoints: saved at P 2 x D 2, resumed at P 1 (np 1) and at P 4: the
#    np 1 uninterrupted run's weights to 1e-6.
# 4. Report: 1F1B keeps at most min(P - s, M) micro-batches in flight on stage
#    s (GPipe M) and a smaller ACTS peak than GPipe; the pipe group's counted
#    send/recv bytes equal the program's statement times the steps; the
#    partition printout gives DeepSpeed's lines with the parameter counts.
# 5. Errors: ZeRO-2/3, a world the stages do not divide, more stages than
#    units, an unknown partition method, a type:REGEX matching nothing.
# Adam eps 1e-5 for the reason given in test_stages_equivalence.sh.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

# 80 short reviews: mixed lengths pad micro-batches differently per rank.
zt_short_reviews 80 "$tmp/reviews.csv" 78

mlp_shape=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --seed 7)
gpt_shape=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --seed 5)
mlp=("${mlp_shape[@]}" --steps 8)
gpt=("${gpt_shape[@]}" --steps 8)
cls=(--model classifier --data "$tmp/reviews.csv" --n-layer 2 --embed-dim 32 --n-head 4
     --hidden-dim 64 --max-len 48 --steps 6 --seed 11)
write_cfg() { # name stage extra
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 16, "gradient_clipping": 0.1,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
  $3
  "zero_optimization": {"stage": $2}
}
JSON
}
write_cfg s0 0 ""
write_cfg s1 1 ""
write_cfg s2 2 ""
write_cfg s3 3 ""
write_cfg f16 1 '"fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3, "hysteresis": 1},'
cat >"$tmp/bf16-off.json" <<'JSON'
{"train_batch_size": 8, "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "eps": 1e-5}},
 "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
JSON

run() { # tag np cfg [flags...]: --dump-params/--report into $tmp/<tag>.*
    local tag=$1 np=$2 cfg=$3
    shift 3
    timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 ||
        { cat "$tmp/$tag.log"; fail "zerotrain run $tag"; }
}
same() { # ref tag
    $ZT_PYTHON tests/tools/ztstages.py same "$tmp/$1.bin" "$tmp/$1.json" "$tmp/$2.bin" \
        "$tmp/$2.json" --tol 1e-6 --tag "$2" || fail "$2 differs from $1"
}

# 1. Equivalence. pipe TAG P D GAS CFG MODEL-ARRAY [flags...]
pipe() {
    local tag=$1 p=$2 d=$3 gas=$4 cfg=$5 ref=$6
    shift 6
    run "$tag" $((p * d)) "$cfg" "$@" --pipeline-stages "$p" --gradient-accumulation-steps "$gas"
    same "$ref" "$tag"
}
run mlp-ref 1 s0 "${mlp[@]}" --gradient-accumulation-steps 4
pipe mlp-p2d1-g8-s0 2 1 8 s0 mlp-ref "${mlp[@]}"
pipe mlp-p2d2-g4-s1 2 2 4 s1 mlp-ref "${mlp[@]}"
pipe mlp-p4d1-g4-s1-gpipe 4 1 4 s1 mlp-ref "${mlp[@]}" --pipeline-schedule gpipe
pipe mlp-p4d2-g2-s1 4 2 2 s1 mlp-ref "${mlp[@]}"

run gpt-ref 1 s0 "${gpt[@]}" --gradient-accumulation-steps 8
pipe gpt-p4d1-g8-s1 4 1 8 s1 gpt-ref "${gpt[@]}"
# Activation checkpointing, and the checkpoint of part 3, at P 2 x D 2.
pipe gpt-p2d2-g4-s1-ac 2 2 4 s1 gpt-ref "${gpt[@]}" --activation-checkpoint-interval 1 \
    --save-dir "$tmp/ck" --save-interval 4

run cls-ref 1 s0 "${cls[@]}" --gradient-accumulation-steps 4
pipe cls-p2d2-g2-s0 2 2 2 s0 cls-ref "${cls[@]}"
pipe cls-p4d1-g4-s1-ac 4 1 4 s1 cls-ref "${cls[@]}" --activation-checkpoint-interval 2
echo "ok: mlp, gptlite (dropout), classifier at P 2/4 x D 1/2, GAS 2-8, ZeRO 0/1, 1f1b/gpipe, activation checkpointing = np 1"

# 2. A global overflow: the injected inf is on one stage's gradient only.
run f16-ref 1 f16 "${gpt[@]}" --gradient-accumulation-steps 8 --inject-overflow 3,6 \
    --typed-tensors off
run f16-p4 4 f16 "${gpt[@]}" --gradient-accumulation-steps 8 --inject-overflow 3,6 \
    --pipeline-stages 4
cmp "$tmp/f16-ref.bin" "$tmp/f16-p4.bin" || fail "fp16 P 4 weights differ from np 1"
$ZT_PYTHON - "$tmp/f16-ref.json" "$tmp/f16-p4.json" <<'PY' || fail "fp16 histories differ"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in ("loss_history", "loss_scale_history", "skipped_steps"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["skipped_steps"] == 2, a["skipped_steps"]
PY
echo "ok: fp16 overflow injected on one of 4 stages skips steps 3 and 6 everywhere (cmp)"
# bf16 with the optimizer offloaded: bf16 activations cross the stages, and
# P 2 x D 2 rounds its gradient reductions as np 2 data parallelism does.
run bf16-dp2 2 bf16-off "${gpt_shape[@]}" --steps 4 --gradient-accumulation-steps 2 --typed-tensors off
run bf16-p2d2 4 bf16-off "${gpt_shape[@]}" --steps 4 --gradient-accumulation-steps 2 --pipeline-stages 2
cmp "$tmp/bf16-dp2.bin" "$tmp/bf16-p2d2.bin" || fail "bf16 offload P 2 x D 2 differs from np 2"
echo "ok: bf16 with CPU-offloaded optimizer: P 2 x D 2 = np 2 data parallel (cmp)"

# 3. Resume the P 2 x D 2 checkpoint elsewhere.
run gpt-re-p1 1 s1 "${gpt[@]}" --gradient-accumulation-steps 8 --load-dir "$tmp/ck" \
    --resume global_step4
grep -q "resumed from $tmp/ck/global_step4 at step 4" "$tmp/gpt-re-p1.log" || fail "no resume line"
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/gpt-ref.bin" "$tmp/gpt-re-p1.bin" --tol 1e-6 ||
    fail "P 2 x D 2 checkpoint resumed at np 1"
run gpt-re-p4 4 s1 "${gpt[@]}" --gradient-accumulation-steps 8 --load-dir "$tmp/ck" \
    --resume global_step4 --pipeline-stages 4
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/gpt-ref.bin" "$tmp/gpt-re-p4.bin" --tol 1e-6 ||
    fail "P 2 x D 2 checkpoint resumed at P 4"
echo "ok: checkpoint saved at P 2 x D 2 resumes at P 1 and P 4"

# 4. What the report and the printout say.
run mlp-p4-1f1b 4 s1 "${mlp[@]}" --pipeline-stages 4 --gradient-accumulation-steps 8
run mlp-p4-gpipe 4 s1 "${mlp[@]}" --pipeline-stages 4 --gradient-accumulation-steps 8 \
    --pipeline-schedule gpipe
$ZT_PYTHON - "$tmp/mlp-p4-1f1b.json" "$tmp/mlp-p4-gpipe.json" <<'PY' || fail "pipeline report"
import json, sys
one, gp = (json.load(open(f)) for f in sys.argv[1:])
P, M = 4, 8
for r, sched in ((one, "1f1b"), (gp, "gpipe")):
    pl = r["pipeline"]
    assert (pl["stages"], pl["data_parallel"], pl["schedule"], pl["micro_batches"]) == (P, 1, sched, M), pl
    assert abs(pl["bubble_fraction_ideal"] - (P - 1) / (M + P - 1)) < 1e-12
    assert sum(s["params"] for s in pl["per_stage"]) == r["model"]["params"]
    for s in pl["per_stage"]:
        bound = min(P - s["stage"], M) if sched == "1f1b" else M
        assert s["in_flight_max"] == bound == s["slots"], (sched, s)
        assert 0 <= s["bubble_fraction"] <= 1 and s["timed_steps"] == r["steps"] - 2, s
    for rk in r["ranks"]:
        st, c = rk["pipeline"], rk["comm"]["pipe"]["bytes"]
        assert c["send"] == st["p2p_sent_bytes_per_step"] * r["steps"], (rk["rank"], c, st)
        assert c["recv"] == st["p2p_recv_bytes_per_step"] * r["steps"], (rk["rank"], c, st)
        assert st["p2p_sent_bytes_per_step"] > 0
a, b = (r["pipeline"]["per_stage"][0]["acts_peak_bytes"] for r in (one, gp))
assert a < b, f"1f1b ACTS peak {a} not below gpipe's {b} on stage 0"
print(f"ok: in flight 1f1b {[s['in_flight_max'] for s in one['pipeline']['per_stage']]} vs gpipe "
      f"{M}; stage 0 ACTS peak {a} vs {b} bytes; p2p counters = program")
PY
grep -q "^stage=0 layers=2 params=6272$" "$tmp/mlp-p2d1-g8-s0.log" &&
    grep -q "^     3: layers.3 (LinearReLU)$" "$tmp/mlp-p2d1-g8-s0.log" &&
    grep -q "^  loss: cross_entropy$" "$tmp/mlp-p2d1-g8-s0.log" ||
    { cat "$tmp/mlp-p2d1-g8-s0.log"; fail "partition printout"; }
run mlp-uniform 2 s0 "${mlp_shape[@]}" --steps 2 --pipeline-stages 2 --partition-method uniform
run gpt-type 2 s0 "${gpt_shape[@]}" --steps 2 --pipeline-stages 2 --partition-method 'type:block'
grep -q "^stage=1 layers=2 params=14913$" "$tmp/gpt-type.log" ||
    { cat "$tmp/gpt-type.log"; fail "type:block (matched case-insensitively) should put one Block on each stage"; }

# 5. Bad configurations.
small=(--model mlp --width 16 --layers 2 --in-size 8 --out-size 4 --steps 2)
expect 2 "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/s2.json" "${small[@]}" --pipeline-stages 2
expect 2 "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/s3.json" "${small[@]}" --pipeline-stages 2
expect 2 "num_stages (2) must divide distributed world size (3)" -- \
    $ZT_MPIRUN -np 3 ./zerotrain --config "$tmp/s0.json" "${small[@]}" --pipeline-stages 2
expect 2 "model mlp has 2 units for 4 stages" -- \
    $ZT_MPIRUN -np 4 ./zerotrain --config "$tmp/s0.json" "${small[@]}" --pipeline-stages 4
expect 2 "Partitioning method bogus not implemented" -- \
    ./zerotrain --config "$tmp/s0.json" "${small[@]}" --partition-method bogus
expect 2 "Partitioning 'conv' found no valid layers to partition" -- \
    ./zerotrain --config "$tmp/s0.json" "${small[@]}" --partition-method type:conv
expect 2 "does not model pipeline stages" -- ./zerotrain --estimate-memory "${small[@]}" --num-gpus 4 \
    --pipeline-stages 2
echo "ok: pipeline tests in $((SECONDS - t0)) s"
