#!/usr/bin/env bash
# DeepSpeed and HuggingFace configs and command lines in one pass:
# --deepspeed FILE / --deepspeed_config / --local_rank as their launchers pass
# them, "did you mean" for mistyped flags, --fp16/--bf16; every error of a
# config reported in one run (once at np 2); HF's "auto" template and a
# DeepSpeed-docs style config train as shipped in scripts/configs; --strict;
# the stage-3 warning when nothing is partitioned; Megatron-style
# contiguous_memory_optimization checkpointing every unit; DeepSpeed's warning
# for a schedule shorter than its warmup, once.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
zt=$PWD/zerotrain

data=$ZT_SHARED/data/tinyshakespeare/input.txt
gpt=(--model gptlite --data "$data" --n-layer 2 --n-embd 32 --n-head 4 --block-size 32)
m=(--model mlp --width 16 --layers 2 --steps 2)
echo '{"train_batch_size": 8}' >"$tmp/good.json"
echo '{"train_batch_size": 4}' >"$tmp/other.json"

# ---- Launchers' flags.
expect 0 "zerotrain: done" -- ./zerotrain --deepspeed "$tmp/good.json" "${m[@]}"
expect 0 "zerotrain: done" -- ./zerotrain --deepspeed --deepspeed_config "$tmp/good.json" "${m[@]}"
expect 0 "zerotrain: done" -- ./zerotrain --deepspeed="$tmp/good.json" --config "$tmp/good.json" "${m[@]}"
expect 2 "name two configs: give one" -- ./zerotrain --deepspeed "$tmp/good.json" --config "$tmp/other.json" "${m[@]}"
expect 2 "config FILE is required" -- ./zerotrain --deepspeed "${m[@]}"
expect 0 "note: --local_rank 0 ignored: mpirun places each rank" -- ./zerotrain --local_rank=0 --config "$tmp/good.json" "${m[@]}"
expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 ./zerotrain --local_rank 1 --deepspeed "$tmp/good.json" "${m[@]}"
[ "$(grep -c 'local_rank' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "the --local_rank note is printed once"; }
expect 2 "bad value 'x' for --local_rank" -- ./zerotrain --local_rank x --config "$tmp/good.json" "${m[@]}"

# ---- Mistyped flags.
expect 2 "unknown flag '--widht'; did you mean --width?" -- ./zerotrain --config "$tmp/good.json" --model mlp --widht 3
expect 2 "unknown flag '--confg'; did you mean --config?" -- ./zerotrain --confg "$tmp/good.json" --model mlp
expect 2 "did you mean --train-batch-size?" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --train_batch_size 8
expect 2 "did you mean --micro-batch-size?" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --per_device_train_batch_size 4
expect 2 "did you mean --lr?" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --learning_rate 1e-3
expect 2 "did you mean --n-layer?" -- ./zerotrain --config "$tmp/good.json" "${gpt[@]}" --n_layers 3
expect 2 "unknown flag '--tensor-parallel-size' for zerotrain consolidate" -- ./zerotrain consolidate "$tmp" --tensor-parallel-size 2
if grep -q "did you mean" "$tmp/out"; then cat "$tmp/out"; fail "an unrelated flag got a suggestion"; fi

# ---- --fp16 / --bf16 (HF's): fill "auto" and missing, contradict false.
echo '{"train_batch_size": 8, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}' >"$tmp/prec.json"
expect 0 "precision fp16" -- ./zerotrain --config "$tmp/prec.json" "${m[@]}" --fp16
expect 0 "precision bf16" -- ./zerotrain --config "$tmp/prec.json" "${m[@]}" --bf16
expect 0 "precision fp32" -- ./zerotrain --config "$tmp/prec.json" "${m[@]}"
expect 2 "--fp16 and --bf16 ask for two training dtypes" -- ./zerotrain --config "$tmp/prec.json" "${m[@]}" --fp16 --bf16
expect 2 "fp16.enabled: false in the config contradicts --fp16" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "fp16": {"enabled": false}}') "${m[@]}" --fp16

# ---- Every error of a file in one run, printed once at np 2.
cat >"$tmp/bad.json" <<'JSON'
{
  "train_batch_size": 8,
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sise": 1},
  "fp16": {"enabled": "yes"},
  "optimizer": {"type": "AdamW", "params": {"lr": -0.1}},
  "scheduler": {"type": "WarmupDecay"},
  "tensorboard": {"enabled": true, "job_nam": "x"},
  "amp": {"enabled": true}
}
JSON
expect 2 "bad.json: 6 errors:" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/bad.json" "${m[@]}"
[ "$(grep -c 'error:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "the errors were printed more than once"; }
for want in "bad.json:3: zero_optimization.stage3_prefetch_bucket_sise: unknown key; did you mean \`stage3_prefetch_bucket_size\`?" \
    "bad.json:4: fp16.enabled: got \"yes\", expected true or false" \
    "bad.json:5: optimizer.params.lr: got -0.1, expected a non-negative number" \
    "bad.json:6: scheduler.type: DeepSpeed does not recognize LR scheduler WarmupDecay; did you mean \`WarmupDecayLR\`?" \
    "bad.json:7: tensorboard.job_nam: unknown key; did you mean \`job_name\`?" \
    "bad.json: amp: this DeepSpeed feature is not implemented yet" \
    "hint: fix every line above"; do
    grep -qF -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "missing: $want"; }
done
echo "ok: 6 errors in one run"

# ---- HF's ZeRO-3 template: every "auto" filled, as HF fills it.
hf=(--deepspeed scripts/configs/hf-zero3-auto.json "${gpt[@]}" --steps 6 --micro-batch-size 2
    --gradient-accumulation-steps 2 --lr 1e-3 --warmup-steps 0.5)
expect 0 "zerotrain: done: 6 steps" -- $ZT_MPIRUN -np 2 ./zerotrain "${hf[@]}" --fp16
for want in 'fp16.enabled "auto" -> true (--fp16)' 'bf16.enabled "auto" -> false (no --bf16)' \
    'train_batch_size "auto" -> 8 (derived)' 'optimizer.params.lr "auto" -> 0.001 (command line)' \
    'zero_optimization.reduce_bucket_size "auto" -> 1024 (hidden size 32 squared, as HF)' \
    'stage3_prefetch_bucket_size "auto" -> 921 (int(0.9 x 32^2), as HF)' \
    'stage3_param_persistence_threshold "auto" -> 320 (10 x hidden size 32, as HF)' \
    'scheduler.params.total_num_steps "auto" -> 6 (the run'"'"'s steps)' \
    'scheduler.params.warmup_num_steps "auto" -> 3 (ceil(6 steps x --warmup-steps 0.5))' \
    'precision fp16' 'offload: optimizer cpu'; do
    grep -qF -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "missing: $want"; }
done
grep -q "partitions nothing" "$tmp/out" && { cat "$tmp/out"; fail "HF's threshold shards GPT-lite"; }
# --epochs: the sampler's steps per epoch (64 samples / 8 per step)
expect 0 'total_num_steps "auto" -> 16 (the run' -- ./zerotrain --deepspeed scripts/configs/hf-zero3-auto.json \
    --model mlp --width 16 --layers 2 --num-samples 64 --epochs 2 --micro-batch-size 8
echo "ok: HF template in one pass"

# ---- A DeepSpeed-docs style config: every section in one pass (it writes
# its logs under ./ds_logs: run where that is the scratch directory).
ds=(--config "$PWD/scripts/configs/deepspeed-docs.json" "${gpt[@]}" --steps 3)
(cd "$tmp" && expect 0 "zerotrain: done: 3 steps" -- $ZT_MPIRUN -np 2 "$zt" "${ds[@]}")
for want in "warning: wandb.enabled: zerotrain has no Weights & Biases client" \
    "warning: checkpoint: zerotrain saves and loads its own checkpoint format" \
    "activation checkpointing: every 1 unit(s) of 4" "Profile Summary at step 1:" \
    "Comm. Op            Message Size" "precision fp16"; do
    grep -qF -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "missing: $want"; }
done
ls "$tmp"/ds_logs/train_gptlite/events.out.tfevents.* "$tmp"/ds_logs/train_gptlite/Train_Samples_lr.csv >/dev/null
# --strict refuses what it only warns about
(cd "$tmp" && expect 2 "deepspeed-docs.json: 2 errors:" -- "$zt" "${ds[@]}" --strict)
grep -qF "wandb.enabled: zerotrain has no Weights & Biases client" "$tmp/out" &&
    grep -qF "(--strict refuses settings zerotrain ignores)" "$tmp/out" || { cat "$tmp/out"; fail "strict"; }
echo "ok: DeepSpeed-docs config in one pass"

# ---- Stage 3 that partitions nothing says so.
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 3}}' >"$tmp/z3.json"
expect 0 "warning: ZeRO stage 3 partitions nothing: all 2 units are persistent (the largest has 272 parameters, stage3_param_persistence_threshold is 100000)" \
    -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/z3.json" "${m[@]}"
grep -qF "set zero_optimization.stage3_param_persistence_threshold below 272" "$tmp/out" || { cat "$tmp/out"; fail "no key to change"; }
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100}}' >"$tmp/z3b.json"
expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/z3b.json" "${m[@]}"
grep -q "partitions nothing" "$tmp/out" && { cat "$tmp/out"; fail "warned with units sharded"; }

# ---- Megatron-style contiguous_memory_optimization: one checkpoint per unit;
# recomputation changes no value (same weights as a run without it).
echo '{"train_batch_size": 8, "activation_checkpointing": {"partition_activations": true, "contiguous_memory_optimization": true}}' >"$tmp/cmo.json"
expect 0 "activation checkpointing: every 1 unit(s) of 4" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cmo.json" \
    "${gpt[@]}" --steps 2 --dump-params "$tmp/cmo.bin"
expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/good.json" "${gpt[@]}" --steps 2 \
    --dump-params "$tmp/plain.bin"
cmp "$tmp/cmo.bin" "$tmp/plain.bin" || fail "checkpointing every unit changed the weights"
echo "ok: contiguous_memory_optimization without number_checkpoints"

# ---- DeepSpeed's WarmupDecayLR/WarmupCosineLR warning when the schedule is
# shorter than its warmup: with HF's "auto" total (the run's steps) that is a
# warmup longer than the run. Its text, as a warning, once at np 2.
echo '{"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR",
 "params": {"total_num_steps": "auto", "warmup_num_steps": 100}}}' >"$tmp/warm.json"
expect 0 "  warning: total_num_steps 2 is less than warmup_num_steps 100" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/warm.json" "${m[@]}"
[ "$(grep -c 'is less than warmup_num_steps' "$tmp/out")" = 1 ] ||
    { cat "$tmp/out"; fail "the warmup warning is not printed exactly once"; }
