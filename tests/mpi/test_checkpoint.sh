#!/usr/bin/env bash
# Checkpoints: save, resume, reshard, consolidate, generate, eval.
#  1. Bit-exact resume: GPT-lite (dropout 0.1, fp16 with a dynamic loss scale,
#     an injected overflow at step 3 so the scaler's hysteresis and skipped
#     steps are part of the saved state) at np 2, stages 0-3, and the MLP
#     (AdamW at stage 1, SGD with momentum at stage 3): a run of 8 steps that
#     saves at step 4, and a run resumed from that checkpoint, end with the same
#     weights (cmp of --dump-params) and the same loss and loss-scale histories.
#  2. --save-interval and --keep-last: the directory holds exactly the newest
#     checkpoints, DIR/latest names the last, nothing partial is left.
#  3. Resharding: a GPT-lite checkpoint saved at np 4 stage 3 resumes at np 3
#     stage 1, np 1 stage 0, np 2 stage 2 with offload_optimizer and np 3 stage 3
#     with both offloads; one saved at np 2 stage 2 resumes at np 1 stage 0.
#     Each resumed run ends within 1e-6 (relative L2) of an uninterrupted run at
#     the new setting (different world sizes sum in other orders: the README's
#     stage-equivalence tolerance).
#  4. consolidate writes exactly what --dump-params wrote for the same step
#     (cmp) and a tensor index that covers the file; tests/tools/ztcheck.py
#     reads shards with its own reader of the documented format (zlib CRC-32,
#     header fields, zero padding) and finds the same weights.
#  5. generate prints the prompt and N characters (char vocabulary), the same
#     ones for the same seed; eval of a classifier checkpoint prints the
#     validation loss and accuracy the training run printed at that step.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

dev=(--device cpu)
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --seed 5 "${dev[@]}")
mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10 --seed 5 "${dev[@]}")

write_cfg() { # name stage extra-top extra-zero
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 12, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
  $3
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
                        "stage3_param_persistence_threshold": 300 $4}
}
JSON
}

run() { # np cfg tag [flags...]: --dump-params/--report into $tmp/<tag>.*
    local np=$1 cfg=$2 tag=$3
    shift 3
    timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 ||
        { cat "$tmp/$tag.log"; fail "zerotrain run $tag"; }
}

same_history() { # ref other: equal loss and loss-scale histories
    $ZT_PYTHON - "$tmp/$1.json" "$tmp/$2.json" <<'PY' || fail "histories of $1 and $2 differ"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in ("loss_history", "loss_scale_history", "skipped_steps", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
}

# 1. Bit-exact resume at the same world size and stage.
fp16='"fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3,
                "hysteresis": 2},'
for stage in 0 1 2 3; do
    write_cfg "gpt16-s$stage" $stage "$fp16" ""
    run 2 "gpt16-s$stage" "full-s$stage" "${gpt[@]}" --steps 8 --inject-overflow 3,6 \
        --save-dir "$tmp/ck-s$stage" --save-interval 4
    run 2 "gpt16-s$stage" "resumed-s$stage" "${gpt[@]}" --steps 8 --inject-overflow 3,6 \
        --load-dir "$tmp/ck-s$stage" --resume global_step4
    grep -q "resumed from $tmp/ck-s$stage/global_step4 at step 4" "$tmp/resumed-s$stage.log" ||
        fail "stage $stage: no resume line"
    cmp "$tmp/full-s$stage.bin" "$tmp/resumed-s$stage.bin" ||
        fail "stage $stage: resumed weights differ from the uninterrupted run"
    same_history "full-s$stage" "resumed-s$stage"
    echo "ok: gptlite fp16 np 2 stage $stage: resumed at step 4 = uninterrupted (cmp)"
done
write_cfg mlp-s1 1 "" ""
cat >"$tmp/mlp-sgd-s3.json" <<'JSON'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.02, "momentum": 0.9, "nesterov": true}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 600}}
JSON
for cfg in mlp-s1 mlp-sgd-s3; do
    run 2 $cfg "full-$cfg" "${mlp[@]}" --steps 6 --save-dir "$tmp/ck-$cfg" --save-interval 3
    run 2 $cfg "resumed-$cfg" "${mlp[@]}" --steps 6 --load-dir "$tmp/ck-$cfg" --resume global_step3
    cmp "$tmp/full-$cfg.bin" "$tmp/resumed-$cfg.bin" || fail "$cfg: resumed weights differ"
    same_history "full-$cfg" "resumed-$cfg"
    echo "ok: mlp $cfg np 2: resumed at step 3 = uninterrupted (cmp)"
done
# --resume with no tag takes DIR/latest: the final save of the 8-step run.
run 2 gpt16-s2 latest-s2 "${gpt[@]}" --steps 8 --load-dir "$tmp/ck-s2" --resume
grep -q "resumed from $tmp/ck-s2/global_step8 at step 8" "$tmp/latest-s2.log" ||
    fail "--resume did not take DIR/latest (global_step8)"
cmp "$tmp/full-s2.bin" "$tmp/latest-s2.bin" || fail "weights of the latest checkpoint differ"
echo "ok: --resume reads DIR/latest"

# 2. Interval saves and --keep-last.
run 2 mlp-s1 keep "${mlp[@]}" --steps 10 --save-dir "$tmp/keep" --save-interval 3 --keep-last 2
[ "$(grep -c 'saved checkpoint' "$tmp/keep.log")" = 4 ] || fail "expected saves at 3, 6, 9, 10"
listing=$(cd "$tmp/keep" && echo *)
[ "$listing" = "global_step10 global_step9 latest" ] || fail "--keep-last 2 left: $listing"
[ "$(cat "$tmp/keep/latest")" = global_step10 ] || fail "latest is $(cat "$tmp/keep/latest")"
[ "$(ls "$tmp/keep/global_step10")" = "zero_pp_rank_0_mp_rank_00_optim_states.zt
zero_pp_rank_1_mp_rank_00_optim_states.zt
zt_manifest.json" ] || fail "unexpected files in global_step10: $(ls "$tmp/keep/global_step10")"
echo "ok: --save-interval 3 --keep-last 2 over 10 steps: $listing"

# 3. Resharding: another world size, stage, offload.
write_cfg f32-s3 3 "" ""
write_cfg f32-s1 1 "" ""
write_cfg f32-s0 0 "" ""
write_cfg f32-s2 2 "" ""
write_cfg f32-s2-off 2 "" ', "offload_optimizer": {"device": "cpu"}'
write_cfg f32-s3-off 3 "" ', "offload_optimizer": {"device": "cpu"},
                           "offload_param": {"device": "cpu"}'
run 4 f32-s3 np4-s3 "${gpt[@]}" --steps 8 --save-dir "$tmp/ck-np4" --save-interval 4
run 2 f32-s2 np2-s2 "${gpt[@]}" --steps 8 --save-dir "$tmp/ck-np2" --save-interval 4
reshard() { # np cfg source-dir
    local np=$1 cfg=$2 src=$3
    [ -f "$tmp/ref-$np-$cfg.bin" ] || run "$np" "$cfg" "ref-$np-$cfg" "${gpt[@]}" --steps 8
    run "$np" "$cfg" "re-$np-$cfg-$src" "${gpt[@]}" --steps 8 --load-dir "$tmp/ck-$src" \
        --resume global_step4
    $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/ref-$np-$cfg.bin" "$tmp/re-$np-$cfg-$src.bin" \
        --tol 1e-6 || fail "resumed from $src at np $np $cfg"
}
reshard 3 f32-s1 np4
reshard 1 f32-s0 np4
reshard 2 f32-s2-off np4
reshard 3 f32-s3-off np4
reshard 1 f32-s0 np2
echo "ok: np 4 stage 3 -> np 3 s1, np 1 s0, np 2 s2 offload, np 3 s3 offload; np 2 s2 -> np 1 s0"

# 4. consolidate = --dump-params of the same step (the final save at step 8).
./zerotrain consolidate "$tmp/ck-np4" --out "$tmp/cons.bin" >"$tmp/cons.log" 2>&1 ||
    { cat "$tmp/cons.log"; fail "consolidate"; }
cmp "$tmp/np4-s3.bin" "$tmp/cons.bin" || fail "consolidated weights differ from --dump-params"
$ZT_PYTHON - "$tmp/cons.bin" <<'PY' || fail "tensor index"
import json, os, sys
idx = json.load(open(sys.argv[1] + ".json"))
size = os.path.getsize(sys.argv[1])
off = 0
for t in idx:
    n = 1
    for d in t["shape"]:
        n *= d
    assert t["numel"] == n and t["offset"] == off and t["byte_offset"] == 4 * off, t
    off += n
assert 4 * off == size, (off, size)
names = [t["name"] for t in idx]
assert names[0] == "embed.wte" and names[-1] == "head.lm_head.bias", names
assert "h.1.attn.qkv.weight" in names, names
print(f"ok: tensor index: {len(idx)} tensors cover {size} bytes")
PY
./zerotrain consolidate "$tmp/ck-np4" --tag global_step4 --out "$tmp/cons4.bin" >/dev/null ||
    fail "consolidate --tag"
cmp -s "$tmp/cons4.bin" "$tmp/cons.bin" && fail "--tag global_step4 gave the step-8 weights"
echo "ok: consolidate equals --dump-params (cmp)"
# An independent reader of the documented format (Python, zlib's CRC-32).
$ZT_PYTHON tests/tools/ztcheck.py ckpt "$tmp/ck-np4" --dump "$tmp/np4-s3.bin" ||
    fail "ztcheck ckpt np 4 stage 3"
$ZT_PYTHON tests/tools/ztcheck.py ckpt "$tmp/ck-mlp-sgd-s3" --tag global_step3 ||
    fail "ztcheck ckpt SGD stage 3"
$ZT_PYTHON tests/tools/ztcheck.py ckpt "$tmp/ck-s0" --dump "$tmp/full-s0.bin" ||
    fail "ztcheck ckpt fp16 stage 0"

# 5. generate and eval.
./zerotrain generate --checkpoint "$tmp/ck-np4" --prompt "ROMEO:" --length 40 --seed 3 \
    "${dev[@]}" >"$tmp/gen1.txt" 2>"$tmp/gen.err" || { cat "$tmp/gen.err"; fail "generate"; }
./zerotrain generate --checkpoint "$tmp/ck-np4" --prompt "ROMEO:" --length 40 --seed 3 \
    "${dev[@]}" >"$tmp/gen2.txt" 2>/dev/null || fail "generate"
cmp "$tmp/gen1.txt" "$tmp/gen2.txt" || fail "generate is not reproducible for one seed"
$ZT_PYTHON - "$tmp/gen1.txt" <<'PY' || fail "generated text shape"
import sys
text = open(sys.argv[1], encoding="utf-8").read()
assert text.startswith("ROMEO:") and text.endswith("\n"), repr(text)
assert len(text) == len("ROMEO:") + 40 + 1, (len(text), repr(text))
PY
./zerotrain generate --checkpoint "$tmp/ck-np4" --length 10 --temperature 0 "${dev[@]}" \
    >"$tmp/greedy.txt" 2>/dev/null || fail "greedy generate"
[ "$(wc -m <"$tmp/greedy.txt")" = 11 ] || fail "greedy: $(wc -m <"$tmp/greedy.txt") characters"
echo "ok: generate: prompt + 40 characters, reproducible; greedy"

cls=(--model classifier --data "$ZT_SHARED/data/imdb/imdb-2500.csv" --n-layer 1 --embed-dim 16
     --n-head 2 --hidden-dim 32 --max-len 64 "${dev[@]}")
cat >"$tmp/cls.json" <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
JSON
run 2 cls cls "${cls[@]}" --steps 6 --eval-interval 6 --save-dir "$tmp/ck-cls"
want=$(sed -n 's/.*eval: step=6, val_loss=\([0-9.]*\), val_accuracy=\([0-9.]*\).*/\1 \2/p' \
    "$tmp/cls.log")
[ -n "$want" ] || { cat "$tmp/cls.log"; fail "no eval line in the training run"; }
./zerotrain eval --checkpoint "$tmp/ck-cls" --data "$ZT_SHARED/data/imdb/imdb-2500.csv" \
    "${dev[@]}" >"$tmp/eval.log" 2>&1 || { cat "$tmp/eval.log"; fail "eval"; }
got=$(sed -n 's/.*validation loss \([0-9.]*\), accuracy \([0-9.]*\).*/\1 \2/p' "$tmp/eval.log")
[ "$got" = "$want" ] || { cat "$tmp/eval.log"; fail "eval printed '$got', training '$want'"; }
echo "ok: eval of the step-6 classifier: loss and accuracy $got as in training"

echo "PASS: checkpoints ($((SECONDS - t0)) s)"
