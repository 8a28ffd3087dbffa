#!/usr/bin/env bash
# Mixed precision end to end.
#  1. fp16 with forced overflows (--inject-overflow: the last rank puts an inf
#     into one unit's gradient before the reduction) at np 2, stages 1-3, two
#     micro-steps: every rank skips exactly those steps, rank 0 alone prints
#     DeepSpeed's OVERFLOW lines, the report's loss-scale history follows
#     DeepSpeed's scaler (hysteresis 2, window 3), and the final fp32 master
#     weights equal an independent float64 replay (numpy, below) of the applied
#     steps: AdamW from the initial weights on each applied step's reduced,
#     unscaled gradient (--dump-grads with %d), clipped by the global norm,
#     with WarmupLR advancing only on applied steps and Adam's step count
#     counting only applied steps. Tolerance 1e-5 relative L2 (fp32 Adam
#     against float64).
#  2. An overflow with the scale at min_loss_scale stops the run with a message
#     naming the first unit whose gradients overflowed.
#  3. GPT-lite (2 layers, C 64, T 32) on tiny shakespeare for 200 steps in fp16
#     and bf16 tracks fp32: the mean loss of the last 20 steps within 2%. Its
#     units run on 16-bit tensors themselves (the report's
#     mixed_precision.units names the 16-bit type); with --typed-tensors off
#     they compute on fp32 copies instead (units "fp32"), and that bf16 run
#     tracks fp32 within 2% too.
#  4. The classifier's units run on 16-bit tensors too (units "bf16"; its
#     typed ops against fp32 are test_models' test_classifier_typed).
#  5. So do the MLP's, its fp32 input rounded to the 16-bit type as it is
#     loaded: bf16 and fp16 runs (units "bf16" / "fp16") track fp32 step by
#     step, every one of 30 losses within 1% (measured 0.12% / 0.01%; an
#     input read in the wrong type is off by far more). Its data's labels
#     are nearly random, so the loss barely moves: step by step, not a
#     trend, is what can be compared, at a learning rate low enough that
#     the ReLU on the logits does not die (fp32 then sits at ln 10).
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10 --seed 3)
for stage in 1 2 3; do
    cat >"$tmp/fp16-s$stage.json" <<JSON
{
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
  "gradient_clipping": 0.5,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.1, "eps": 1e-6}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-2,
                                               "warmup_num_steps": 4, "warmup_type": "linear"}},
  "fp16": {"enabled": true, "initial_scale_power": 8, "loss_scale_window": 3, "hysteresis": 2},
  "csv_monitor": {"enabled": true, "output_path": "$tmp/csv-s$stage", "job_name": "job"},
  "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0}
}
JSON
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/fp16-s$stage.json" "${mlp[@]}" --steps 0 \
        --dump-params "$tmp/init-s$stage.bin" >"$tmp/init-s$stage.log" 2>&1 ||
        { cat "$tmp/init-s$stage.log"; echo "FAIL: stage $stage initial dump"; exit 1; }
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/fp16-s$stage.json" "${mlp[@]}" --steps 10 \
        --inject-overflow 2,5,6 --dump-grads "$tmp/g-s$stage-%d.bin" \
        --dump-params "$tmp/final-s$stage.bin" --report "$tmp/r-s$stage.json" \
        >"$tmp/run-s$stage.log" 2>&1 ||
        { cat "$tmp/run-s$stage.log"; echo "FAIL: stage $stage fp16 run"; exit 1; }
    lines=$(grep -c 'OVERFLOW! Rank 0 Skipping step' "$tmp/run-s$stage.log" || true)
    [ "$lines" = 3 ] || { cat "$tmp/run-s$stage.log"; echo "FAIL: stage $stage: $lines OVERFLOW lines, want 3 (rank 0 only)"; exit 1; }
    grep -q 'Attempted loss scale: 256, but hysteresis is 2. Reducing hysteresis to 1' "$tmp/run-s$stage.log" ||
        { echo "FAIL: stage $stage: no hysteresis line"; exit 1; }
    # DeepSpeed's CSV event: the scale after each step's update, by samples seen.
    csv="$tmp/csv-s$stage/job/Train_Samples_loss_scale.csv"
    [ "$(head -1 "$csv")" = "step,loss_scale" ] && [ "$(sed -n 11p "$csv")" = "160,128" ] &&
        [ "$(sed -n 7p "$csv")" = "96,64" ] || { cat "$csv"; echo "FAIL: stage $stage: loss-scale CSV"; exit 1; }
    $ZT_PYTHON - "$tmp" "$stage" <<'PY'
import json, math, sys
import numpy as np
d, stage = sys.argv[1], sys.argv[2]
r = json.load(open(f"{d}/r-s{stage}.json"))
skipped = {2, 5, 6}
assert r["skipped_steps"] == 3, r["skipped_steps"]
# DeepSpeed's scaler, by hand (window 3, hysteresis 2, start 2^8): step 2
# uses up hysteresis, step 5 halves to 128 (hysteresis still 1), step 6
# halves to 64; 3 clean steps after step 6 (7, 8, 9) double at step 10... the
# report lists the scale each step ran with.
want = [256, 256, 256, 256, 256, 128, 64, 64, 64, 64]
got = r["loss_scale_history"]
assert got == want, f"scale history {got}, want {want}"

def dump(path):
    return np.fromfile(path, dtype="<f4").astype(np.float64)

p = dump(f"{d}/init-s{stage}.bin")
m = np.zeros_like(p)
v = np.zeros_like(p)
lr_min, lr_max, W = 1e-3, 1e-2, 4
b1, b2, eps, wd, clip_max = 0.9, 0.999, 1e-6, 0.1, 0.5
applied = 0
for step in range(1, 11):
    g = dump(f"{d}/g-s{stage}-{step}.bin")
    if step in skipped:
        assert not np.all(np.isfinite(g)), f"step {step}: the dumped gradient has no inf"
        continue
    assert np.all(np.isfinite(g)), f"step {step}: non-finite gradient"
    norm = math.sqrt(float(np.dot(g, g)))
    clip = max(1.0, (norm + 1e-6) / clip_max)
    g = g / clip
    it = applied - 1  # the k-th applied step uses f(k - 2)
    lr = lr_min if it < 0 else lr_min + (lr_max - lr_min) * (it / W if it < W else 1.0)
    applied += 1
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** applied, 1 - b2 ** applied
    p = p - lr * ((m / bc1) / (np.sqrt(v / bc2) + eps) + wd * p)
final = dump(f"{d}/final-s{stage}.bin")
err = np.linalg.norm(final - p) / np.linalg.norm(p)
moved = np.linalg.norm(final - dump(f"{d}/init-s{stage}.bin")) / np.linalg.norm(p)
assert err < 1e-5, f"final weights differ from the replay: rel L2 {err:.3g}"
print(f"ok: stage {stage}: 3 skipped steps, scale history {got[0]}..{got[-1]}, "
      f"replay rel L2 {err:.2e} (weights moved {moved:.2e})")
PY
done

# 2. At the minimum scale an overflow stops the run and names the unit.
cat >"$tmp/fp16-min.json" <<JSON
{
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "fp16": {"enabled": true, "initial_scale_power": 1, "hysteresis": 1, "min_loss_scale": 1},
  "zero_optimization": {"stage": 2}
}
JSON
expect 1 "gradients overflow with the fp16 loss scale already at its minimum" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/fp16-min.json" "${mlp[@]}" --steps 5 --inject-overflow 1,2:1
grep -q "first unit whose gradients hold inf or nan is .* (unit 1)" "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: the message does not name unit 1"; exit 1; }
echo "ok: an overflow at the minimum loss scale stops the run and names unit 1"

# 3. fp16 and bf16 GPT-lite track fp32.
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 64
     --n-head 4 --block-size 32 --dropout 0 --steps 200 --seed 9)
# The config's precision section for fp32, fp16, bf16 or bf16-copies.
prec_json() {
    case $1 in
    fp16) echo '"fp16": {"enabled": true},' ;;
    bf16*) echo '"bf16": {"enabled": true},' ;;
    esac
}
for prec in fp32 fp16 bf16 bf16-copies; do
    p=$(prec_json $prec)
    extra=()
    [ $prec = bf16-copies ] && extra=(--typed-tensors off)
    cat >"$tmp/gpt-$prec.json" <<JSON
{
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20, "warmup_type": "linear"}},
  $p
  "zero_optimization": {"stage": 2}
}
JSON
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/gpt-$prec.json" "${gpt[@]}" ${extra[@]+"${extra[@]}"} \
        --report "$tmp/gpt-$prec.json.report" >"$tmp/gpt-$prec.log" 2>&1 ||
        { cat "$tmp/gpt-$prec.log"; echo "FAIL: gptlite $prec"; exit 1; }
done
$ZT_PYTHON - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def tail(prec):
    h = json.load(open(f"{d}/gpt-{prec}.json.report"))["loss_history"]
    return sum(h[-20:]) / 20, h[0]
ref, first = tail("fp32")
assert ref < 0.8 * first, f"fp32 did not learn: {first:.3f} -> {ref:.3f}"
units = {"fp16": "fp16", "bf16": "bf16", "bf16-copies": "fp32"}
for prec in ("fp16", "bf16", "bf16-copies"):
    got, _ = tail(prec)
    rel = abs(got - ref) / ref
    assert rel < 0.02, f"{prec}: last-20 mean loss {got:.4f} vs fp32 {ref:.4f} ({rel:.2%})"
    u = json.load(open(f"{d}/gpt-{prec}.json.report"))["mixed_precision"]["units"]
    assert u == units[prec], f"{prec}: the units computed on {u}, want {units[prec]}"
    print(f"ok: gptlite {prec} (units on {u}) last-20 mean loss {got:.4f} vs fp32 {ref:.4f} "
          f"({rel:.2%}, tol 2%)")
PY
# 4. The classifier's bf16 units are typed.
cat >"$tmp/cls-bf16.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3}}
JSON
head -n 41 "$ZT_SHARED/data/imdb/imdb-2500.csv" >"$tmp/reviews.csv"
$ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cls-bf16.json" --model classifier --data "$tmp/reviews.csv" \
    --n-layer 1 --embed-dim 32 --n-head 4 --hidden-dim 64 --max-len 64 --steps 3 \
    --report "$tmp/cls-bf16.report" >"$tmp/cls.log" 2>&1 || { cat "$tmp/cls.log"; echo "FAIL: classifier bf16"; exit 1; }
$ZT_PYTHON - "$tmp/cls-bf16.report" <<'PY'
import json, sys
u = json.load(open(sys.argv[1]))["mixed_precision"]["units"]
assert u == "bf16", f"the classifier's bf16 units computed on {u}"
print("ok: classifier bf16 units on bf16 tensors")
PY
# 5. The MLP's units are typed and track fp32.
for prec in fp32 bf16 fp16; do
    cat >"$tmp/mlp-$prec.json" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, $(prec_json $prec)
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "zero_optimization": {"stage": 2}}
JSON
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/mlp-$prec.json" "${mlp[@]}" --steps 30 \
        --report "$tmp/mlp-$prec.report" >"$tmp/mlp-$prec.log" 2>&1 ||
        { cat "$tmp/mlp-$prec.log"; echo "FAIL: mlp $prec"; exit 1; }
done
$ZT_PYTHON - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def report(prec):
    return json.load(open(f"{d}/mlp-{prec}.report"))
ref = report("fp32")["loss_history"]
assert len(ref) == 30 and max(ref) - min(ref) > 1e-3, f"the fp32 losses do not move: {ref}"
for prec in ("bf16", "fp16"):
    r = report(prec)
    u = r["mixed_precision"]["units"]
    assert u == prec, f"the MLP's {prec} units computed on {u}"
    worst = max(abs(a - b) / b for a, b in zip(r["loss_history"], ref))
    assert worst < 0.01, f"mlp {prec}: a step's loss is {worst:.2%} off fp32 (tol 1%)"
    print(f"ok: mlp {prec} units on {u}, 30 losses within {worst:.2%} of fp32 (tol 1%)")
PY
echo "ok: mixed precision in $((SECONDS - t0)) s"
