#!/usr/bin/env bash
# The AddressSanitizer + UndefinedBehaviorSanitizer stage (`make sanitize`
# builds build/asan/ first): every unit test, the test tools, and a
# representative set of multi-rank runs through build/asan/zerotrain:
#   - the MLP and GPT-lite (dropout 0.1) at ZeRO stages 0-3, np 2;
#   - GPT-lite at stage 3 with offload_optimizer + offload_param, in fp16
#     with an injected overflow, in bf16, with activation checkpointing;
#   - a checkpoint save at np 2, resumed at np 2 (another stage), then
#     consolidated (also as safetensors), sampled from (generate) and
#     evaluated with --dump-logits in one process, and --init-from the
#     safetensors file at np 2, stage 3;
#   - pipeline parallelism at P 2 (1F1B with checkpointing, evaluation,
#     sampling, a save; GPipe resuming it);
#   - the classifier on a small CSV (labelled loader, padded batches), and
#     --estimate-memory;
#   - comm-check's collectives (MPI and staged comm) and bootstrap at np 2,
#     and tokenize-tool's GPT-2 BPE on a few strings.
# A run passes when it exits 0; any ASan, LeakSanitizer or UBSan report makes
# it exit non-zero (tests/sanitize/env.sh: options and suppressions). Prints
# one line per run, the log of a failure, and a final count.
set -u
cd "$(dirname "$0")/../.."
source tests/env.sh
source tests/sanitize/env.sh
zt_scratch
bin=build/asan/zerotrain
[ -x "$bin" ] || fail "$bin is not built (make sanitize)"
logs=build/asan/logs
rm -rf "$logs"
mkdir -p "$logs"

passed=0
failed=0
failures=()
run() { # name command...: one run, its output in $logs/name.log ("/" as "_")
    local name=$1 log="$logs/${1//\//_}.log" t0=$SECONDS
    shift
    if timeout 300 "$@" >"$log" 2>&1 &&
        ! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
        passed=$((passed + 1))
        printf 'PASS asan/%-28s %4ss\n' "$name" $((SECONDS - t0))
    else
        failed=$((failed + 1))
        failures+=("$name (log: $log)")
        printf 'FAIL asan/%-28s %4ss (log: %s)\n' "$name" $((SECONDS - t0)) "$log"
        grep -E -A 12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log" | head -n 40 |
            sed 's/^/    /'
        tail -n 10 "$log" | sed 's/^/    /'
    fi
}

for t in build/asan/tests/test_*; do
    run "unit/$(basename "$t")" "$t"
done
for mode in mpi staged bootstrap; do
    run "comm-check-$mode" $ZT_MPIRUN -np 2 build/asan/tests/comm-check "$mode"
done
printf '"%s"\n' "Hello, world!" "  spaces  and\ttabs\n" "I'm 42 years old: é 中文 🙂" \
    >"$tmp/strings.jsonl"
run tokenize-tool build/asan/tests/tokenize-tool "$ZT_SHARED/data/gpt2-bpe" "$tmp/strings.jsonl"

write_cfg() { # name stage extra-top extra-zero
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
  $3
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
                        "stage3_param_persistence_threshold": 300 $4}
}
JSON
}
mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10 --seed 5 --device cpu)
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --seed 5 --device cpu)
np2=($ZT_MPIRUN -np 2 "$bin")

for stage in 0 1 2 3; do
    write_cfg "s$stage" $stage "" ""
    run "mlp-s$stage" "${np2[@]}" --config "$tmp/s$stage.json" "${mlp[@]}" --steps 3
    run "gptlite-s$stage" "${np2[@]}" --config "$tmp/s$stage.json" "${gpt[@]}" --steps 3
done
write_cfg offload 3 "" ', "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}'
run gptlite-s3-offload "${np2[@]}" --config "$tmp/offload.json" "${gpt[@]}" --steps 3
write_cfg fp16 2 '"fp16": {"enabled": true, "initial_scale_power": 10, "hysteresis": 1},' ""
run gptlite-s2-fp16-overflow "${np2[@]}" --config "$tmp/fp16.json" "${gpt[@]}" --steps 3 \
    --inject-overflow 2
write_cfg bf16 1 '"bf16": {"enabled": true},' ""
run gptlite-s1-bf16 "${np2[@]}" --config "$tmp/bf16.json" "${gpt[@]}" --steps 3
run gptlite-s3-act-ckpt "${np2[@]}" --config "$tmp/s3.json" "${gpt[@]}" --steps 3 \
    --activation-checkpoint-interval 1

run ckpt-save-s3 "${np2[@]}" --config "$tmp/s3.json" "${gpt[@]}" --steps 2 --save-dir "$tmp/ck"
run ckpt-resume-s1 "${np2[@]}" --config "$tmp/s1.json" "${gpt[@]}" --steps 4 --save-dir "$tmp/ck" \
    --resume
run ckpt-consolidate "$bin" consolidate "$tmp/ck" --out "$tmp/cons.bin"
run ckpt-generate "$bin" generate --checkpoint "$tmp/ck" --prompt "ROMEO:" --length 20 --device cpu
run ckpt-safetensors "$bin" consolidate "$tmp/ck" --out "$tmp/cons.st" --format safetensors
run init-from-s3 "${np2[@]}" --config "$tmp/s3.json" "${gpt[@]}" --steps 1 --init-from "$tmp/cons.st"
run eval-dump-logits "$bin" eval --checkpoint "$tmp/ck" \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --eval-iters 1 \
    --dump-logits "$tmp/logits.bin" --device cpu

printf 'review,sentiment\n' >"$tmp/reviews.csv"
for i in $(seq 24); do
    printf '"review %d, ""fine""<br />really",positive\nbad %d,negative\n' "$i" "$i" >>"$tmp/reviews.csv"
done
run classifier-s2 "${np2[@]}" --config "$tmp/s2.json" --model classifier --data "$tmp/reviews.csv" \
    --n-layer 1 --embed-dim 16 --n-head 2 --hidden-dim 32 --max-len 24 --steps 3 --device cpu \
    --eval-interval 3
# Pipeline parallelism: P 2 x D 1 with activation checkpointing, evaluation,
# sampling and a save; GPT-lite at np 2 P 2 resumes it.
run pipe-gptlite-p2-ckpt "${np2[@]}" --config "$tmp/s1.json" "${gpt[@]}" --steps 3 \
    --gradient-accumulation-steps 4 --pipeline-stages 2 --activation-checkpoint-interval 1 \
    --eval-interval 3 --eval-iters 2 --sample 8 --save-dir "$tmp/ck-pipe"
run pipe-gptlite-p2-resume "${np2[@]}" --config "$tmp/s0.json" "${gpt[@]}" --steps 4 \
    --gradient-accumulation-steps 4 --pipeline-stages 2 --pipeline-schedule gpipe \
    --load-dir "$tmp/ck-pipe" --resume
run estimate-memory "$bin" --estimate-memory --model gptlite --config "$tmp/offload.json" \
    --num-gpus 4

[ "$failed" -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
echo "sanitize: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
