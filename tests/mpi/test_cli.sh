#!/usr/bin/env bash
# Bad input never crashes or hangs: unknown flags, bad values and a value
# flag given twice exit 2 with a message and a hint; config errors under mpirun are printed once and every
# rank exits; --help/--version work; --steps 0 dumps the initial weights; a
# run with the quick-start config trains.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch


good='{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}'
echo "$good" >"$tmp/good.json"
mlp=(--model mlp --width 16 --layers 2)
m=("${mlp[@]}" --steps 2)

expect 0 "usage: zerotrain" -- ./zerotrain --help
expect 0 "zerotrain 0" -- ./zerotrain --version
expect 2 "unknown flag '--widht'" -- ./zerotrain --config "$tmp/good.json" --model mlp --widht 3
expect 2 "hint:" -- ./zerotrain --config "$tmp/good.json" --model mlp --widht 3
expect 2 "bad value 'abc' for --width" -- ./zerotrain --config "$tmp/good.json" --model mlp --width abc
expect 2 "bad value '-3' for --steps" -- ./zerotrain --config "$tmp/good.json" --model mlp --steps -3
expect 2 "bad value '1' for --layers" -- ./zerotrain --config "$tmp/good.json" --model mlp --layers 1
expect 2 "needs a value" -- ./zerotrain --config "$tmp/good.json" --model
expect 2 "--config FILE is required" -- ./zerotrain --model mlp
expect 2 "not both" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --epochs 1
expect 2 "unknown model 'resnet'" -- ./zerotrain --config "$tmp/good.json" --model resnet
expect 2 "no-such.json" -- ./zerotrain --config "$tmp/no-such.json" "${m[@]}"

# A flag that takes a value is given once: a second one silently won before
# (--config A --config B trained on B). Said once at np 2; switches may repeat.
echo '{"train_batch_size": 4}' >"$tmp/other.json"
expect 2 "error: --config is given twice ('$tmp/good.json', then '$tmp/other.json'): give it once" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/good.json" --config "$tmp/other.json" "${m[@]}"
[ "$(grep -c 'error:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "repeated flag reported more than once"; }
expect 2 "error: --deepspeed_config is given twice ('$tmp/good.json' as --config, then '$tmp/good.json')" -- \
    ./zerotrain --config "$tmp/good.json" --deepspeed_config="$tmp/good.json" "${m[@]}"
expect 2 "error: --width is given twice ('16', then '32')" -- \
    ./zerotrain --config "$tmp/good.json" "${m[@]}" --width 32
expect 2 "error: --resume is given twice (without a value, then 'global_step2')" -- \
    ./zerotrain --config "$tmp/good.json" "${m[@]}" --save-dir "$tmp/ck" --resume --resume global_step2
expect 2 "error: --inject-overflow is given twice ('1', then '2')" -- \
    ./zerotrain --config "$tmp/good.json" "${m[@]}" --inject-overflow 1 --inject-overflow 2
expect 2 "error: --length is given twice ('5', then '6')" -- \
    ./zerotrain generate --checkpoint "$tmp" --length 5 --length 6
expect 2 "error: --max-bytes is given twice ('1M', then '2M')" -- \
    ./zerotrain check --max-bytes 1M --max-bytes 2M --config "$tmp/good.json" "${m[@]}"
expect 0 "zerotrain: done: 2 steps" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --strict --strict

# A config error at np 2: one message (not one per rank), both ranks exit.
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 0, "reduce_bucket_sise": 5}}' >"$tmp/typo.json"
expect 2 "did you mean" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/typo.json" "${m[@]}"
[ "$(grep -c 'error:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "config error printed more than once"; }
expect 2 "train_batch_size is not equal to" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/good.json" "${m[@]}" --micro-batch-size 3 --gradient-accumulation-steps 1
# The batch triple is bounded by the config check, named with its value and
# bound (it used to reach the pipeline schedule's "16777217 micro-batches").
expect 2 "gradient_accumulation_steps: Gradient accumulation steps: 16777217 has to be at most 16777216 (2^24)" -- \
    ./zerotrain --config <(echo '{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 16777217}') "${m[@]}"
expect 2 "bad value '16777217' for --gradient-accumulation-steps (an integer from 1 to 16777216)" -- \
    ./zerotrain --config "$tmp/good.json" "${m[@]}" --gradient-accumulation-steps 16777217
expect 2 "not implemented yet" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}') "${m[@]}"
expect 2 '"nvme_path" in DeepSpeed Config cannot be None if remote device is nvme' -- ./zerotrain --config <(echo '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}}') "${m[@]}"
expect 2 "offload_optimizer" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}') "${m[@]}"
expect 2 "offload_param" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}') "${m[@]}"
expect 2 "activation checkpointing is off" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "activation_checkpointing": {"cpu_checkpointing": true}}') "${m[@]}"
expect 2 "Contiguous Checkpointing is only available with partitioned activations" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "activation_checkpointing": {"contiguous_memory_optimization": true, "number_checkpoints": 2}}') "${m[@]}"
expect 2 "bfloat16 and fp16 modes cannot be simultaneously enabled" -- ./zerotrain --config <(echo '{"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}}') "${m[@]}"
expect 2 "--activation-checkpoint-interval" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --activation-checkpoint-interval -1
expect 2 "--inject-overflow wants" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --inject-overflow 0
expect 2 "--inject-overflow wants" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --inject-overflow 2:x
expect 2 "does not exist" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --inject-overflow 2:99
expect 2 "fewer than one global batch" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --num-samples 4
expect 2 "cannot write dump" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --dump-params /nonexistent/dir/p.bin

# A config that is not a regular file is refused by name at once (a FIFO used
# to block in open()); a pipe with a writer, as in --config <(...), is read.
mkfifo "$tmp/fifo.json"
expect 2 "config file $tmp/fifo.json: is a pipe or FIFO that nothing writes to" -- \
    timeout 20 ./zerotrain --config "$tmp/fifo.json" "${m[@]}"
expect 2 "config file $tmp/fifo.json: is a pipe or FIFO" -- \
    timeout 20 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/fifo.json" "${m[@]}"
expect 2 "config file /dev/null: is a character device, not a regular file" -- \
    timeout 20 ./zerotrain --config /dev/null "${m[@]}"
expect 2 "config file $tmp: is a directory" -- timeout 20 ./zerotrain --config "$tmp" "${m[@]}"
ln -s "$tmp/loop.json" "$tmp/loop.json"
expect 2 "config file $tmp/loop.json: is a symlink loop" -- \
    timeout 20 ./zerotrain --config "$tmp/loop.json" "${m[@]}"
expect 0 "zerotrain: done" -- timeout 60 ./zerotrain --config <(cat "$tmp/good.json") "${m[@]}"
if zt_unprivileged "permission denied on a config file"; then
    cp "$tmp/good.json" "$tmp/secret.json"
    chmod 000 "$tmp/secret.json"
    expect 2 "permission denied: cannot read config file $tmp/secret.json" -- \
        timeout 20 "${unpriv[@]}" ./zerotrain --config "$tmp/secret.json" "${m[@]}"
    grep -q "hint: .*chmod a+r" "$tmp/out" || { cat "$tmp/out"; fail "no chmod hint"; }
fi

# Output paths are checked before step 1: a long run must not end in "cannot
# write" and lose its results. Nothing trains, and the check leaves no file.
before_step1() { # pattern command...: exit 2 with pattern, no step trained
    local pattern=$1
    shift
    expect 2 "$pattern" -- timeout 20 "$@"
    if grep -q "step=\|zerotrain: done" "$tmp/out"; then
        cat "$tmp/out"
        fail "trained before refusing: $*"
    fi
}
before_step1 "cannot write report /nonexistent/dir/r.json: directory /nonexistent/dir does not exist" \
    ./zerotrain --config "$tmp/good.json" --model mlp --width 16 --layers 2 --steps 3000 \
    --report /nonexistent/dir/r.json
before_step1 "cannot write report /nonexistent/dir/r.json" $ZT_MPIRUN -np 2 ./zerotrain \
    --config "$tmp/good.json" --model mlp --width 16 --layers 2 --steps 3000 \
    --report /nonexistent/dir/r.json
[ "$(grep -c 'error:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "printed more than once"; }
touch "$tmp/plain"
before_step1 "cannot write dump $tmp/plain/p.bin: $tmp/plain (or a directory above it) is not a directory" \
    ./zerotrain --config "$tmp/good.json" "${mlp[@]}" --steps 3000 --dump-params "$tmp/plain/p.bin"
before_step1 "cannot write gradient dump $tmp/nodir/g%d.bin: directory $tmp/nodir does not exist" \
    ./zerotrain --config "$tmp/good.json" "${mlp[@]}" --steps 3000 --dump-grads "$tmp/nodir/g%d.bin"
before_step1 "cannot write gradient dump $tmp: it is a directory" \
    ./zerotrain --config "$tmp/good.json" "${mlp[@]}" --steps 3000 --dump-grads "$tmp"
before_step1 "cannot write report $tmp/fifo.json: it is a FIFO (named pipe), not a regular file" \
    ./zerotrain --config "$tmp/good.json" "${mlp[@]}" --steps 3000 --report "$tmp/fifo.json"
# A run that fails after the check leaves no empty report behind.
expect 2 "does not exist" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" \
    --inject-overflow 2:99 --report "$tmp/left.json"
[ ! -e "$tmp/left.json" ] || fail "the output check left $tmp/left.json behind"
if zt_unprivileged "an output directory without write permission"; then
    mkdir -m 555 "$tmp/ro"
    before_step1 "permission denied: cannot write report $tmp/ro/r.json" "${unpriv[@]}" \
        ./zerotrain --config "$tmp/good.json" "${mlp[@]}" --steps 3000 --report "$tmp/ro/r.json"
    grep -q "hint: .*chmod u+w" "$tmp/out" || { cat "$tmp/out"; fail "no chmod hint"; }
fi

# --steps 0 writes the initial weights: 16*16+16 + 16*16+16 floats.
./zerotrain --config "$tmp/good.json" --model mlp --width 16 --layers 2 --steps 0 --dump-params "$tmp/init.bin" >/dev/null
[ "$(stat -c %s "$tmp/init.bin")" = $(( (16 * 16 + 16) * 2 * 4 )) ] || fail "init dump has the wrong size"
echo "ok: --steps 0 dump has $(stat -c %s "$tmp/init.bin") bytes"

# The quick-start config trains at np 2 and prints DeepSpeed-shaped lines.
$ZT_MPIRUN -np 2 ./zerotrain --config scripts/configs/mlp-stage0.json --model mlp --width 32 --layers 3 \
    --steps 40 --report "$tmp/r.json" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "quick-start config did not run"; }
grep -q '^\[Rank 0\] step=40, skipped=0, loss=' "$tmp/run.log" || { cat "$tmp/run.log"; fail "no progress line"; }
grep -q 'RunningAvgSamplesPerSec=.*MemAllocated=.*MaxMemAllocated=' "$tmp/run.log" || fail "no throughput line"
$ZT_PYTHON - "$tmp/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in ["model", "world_size", "device", "stage", "precision", "train_batch_size", "micro_batch_size",
          "gradient_accumulation_steps", "steps", "skipped_steps", "loss_history", "final_loss",
          "samples_per_sec", "param_norm", "ranks"]:
    assert k in r, k
assert r["world_size"] == 2 and len(r["ranks"]) == 2 and r["steps"] == 40 and len(r["loss_history"]) == 40
assert r["gradient_accumulation_steps"] == 2 and r["micro_batch_size"] == 64
for rk in r["ranks"]:
    dev = rk["memory_bytes"]["device"]
    assert set(dev) == {"PARAMS", "GRADS", "MASTER", "OPTIM", "ACTS", "COMM", "WORK", "SWAP"}
    # fp32 AdamW at stage 0: params 4, grads 4, moments 8 bytes per (padded) parameter
    p = dev["PARAMS"]["current"]
    assert p > 0 and dev["GRADS"]["current"] == p and dev["OPTIM"]["current"] == 2 * p, dev
    assert set(rk["comm_bytes"]) == {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                     "all_to_all", "send", "recv"}
    assert rk["comm_bytes"]["send"] == rk["comm_bytes"]["recv"] == 0  # no pipeline stages
    # one all-reduce of every (padded) gradient per step
    assert rk["comm_bytes"]["all_reduce"] == 40 * p, rk["comm_bytes"]
print("ok: report fields, memory classes and comm bytes")
PY

# One rank communicates nothing, and its report says so.
./zerotrain --config "$tmp/good.json" "${m[@]}" --report "$tmp/r1.json" >/dev/null
$ZT_PYTHON -c "import json,sys; c=json.load(open(sys.argv[1]))['ranks'][0]['comm_bytes']; assert sum(c.values()) == 0, c; print('ok: np 1 comm bytes', c)" "$tmp/r1.json"

# What a message quotes from the user (a config key, a flag's value) reaches
# the terminal escaped: an ESC sequence in a key once cleared the screen, an
# invalid UTF-8 byte came out raw. cmd/ prints every error through
# zt_quote_message.
printf '{"train_batch_size": 8, "\\u001b[2Jbad\\u0085": 1}' >"$tmp/esc.json"
expect 2 'error: .*esc.json: \\x1B\[2Jbad\\u{0085}: unknown key' -- ./zerotrain --config "$tmp/esc.json" "${m[@]}"
zt_printable "$tmp/out"
expect 2 "unknown model 'ml\\\\x1B\[2Jp'" -- ./zerotrain --config "$tmp/good.json" --model "$(printf 'ml\033[2Jp')"
zt_printable "$tmp/out"
expect 2 "error: .*\\\\xFF" -- ./zerotrain --config "$tmp/good.json" "${m[@]}" --report "$(printf '/nonexistent/\377/r.json')"
zt_printable "$tmp/out"
echo "ok: quoted user bytes are escaped in messages"
