#!/usr/bin/env bash
# The fused cross-entropy on GPT-lite with the GPT-2 BPE vocabulary (V 50257,
# logits rows padded to 50304; docs/models.md), np 1, fp32, micro-batch 2,
# T 64 (rows = 128):
#  - memory: the loss gradient is written over the logits, so device WORK
#    holds no (rows, V) buffer: its peak is below rows * V * 4 bytes (before
#    the fused loss it held two, >= 2 * rows * V * 4); ACTS holds the padded
#    logits, at least rows * Vp * 4;
#  - eval's loss (the op without a gradient, over padded rows) matches a
#    float64 log-softmax of the logits `eval --dump-logits` writes, with the
#    labels rebuilt from tokenize-tool's ids, to 1e-5 relative; the dump has V
#    columns per row, not Vp.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
tok=build/tests/tokenize-tool
make --no-print-directory "$tok" >/dev/null || fail "cannot build $tok"
text="$ZT_SHARED/data/tinyshakespeare/input.txt"
bpe="$ZT_SHARED/data/gpt2-bpe"
cat >"$tmp/c.json" <<'JSON'
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "steps_per_print": 0}
JSON
gpt=(--model gptlite --data "$text" --tokenizer "$bpe" --n-layer 2 --n-embd 64 --n-head 4
     --block-size 64 --dropout 0 --seed 3)
$ZT_MPIRUN -np 1 ./zerotrain --config "$tmp/c.json" "${gpt[@]}" --steps 2 \
    --report "$tmp/r.json" --save-dir "$tmp/ck" >"$tmp/train.out" 2>&1 ||
    { cat "$tmp/train.out"; fail "training GPT-lite with the BPE vocabulary failed"; }
python3 - "$tmp/r.json" <<'EOF' || fail "memory check"
import json, sys
rows, V, Vp = 2 * 64, 50257, 50304
mem = json.load(open(sys.argv[1]))["ranks"][0]["memory_bytes"]["device"]
work, acts = mem["WORK"]["peak"], mem["ACTS"]["peak"]
print(f"device WORK peak {work} B (a (rows, V) fp32 buffer is {rows * V * 4} B), "
      f"ACTS peak {acts} B (padded logits {rows * Vp * 4} B)")
sys.exit(0 if work < rows * V * 4 and acts >= rows * Vp * 4 else 1)
EOF
./zerotrain eval --checkpoint "$tmp/ck" --data "$text" --eval-iters 1 --micro-batch-size 2 \
    --dump-logits "$tmp/logits.bin" >"$tmp/eval.out" 2>&1 ||
    { cat "$tmp/eval.out"; fail "eval --dump-logits failed"; }
python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1], encoding="utf-8").read()))' \
    "$text" >"$tmp/text.jsonl"
"$tok" "$bpe" "$tmp/text.jsonl" >"$tmp/ids.json" || fail "tokenize-tool failed"
/usr/bin/python3 - "$tmp" <<'EOF' || { cat "$tmp/eval.out"; fail "eval loss against float64"; }
import json, re, sys
import numpy as np
d = sys.argv[1]
n, T, V = 2, 64, 50257
ids = np.array(json.load(open(f"{d}/ids.json"))["ids"], dtype=np.int64)
n_train = ids.size - ids.size // 10  # data/text.h: the last tenth validates
labels = np.stack([ids[n_train + T * i + 1: n_train + T * (i + 1) + 1] for i in range(n)])
raw = np.fromfile(f"{d}/logits.bin", dtype="<f4")
if raw.size != n * T * V:
    print(f"the dump holds {raw.size} floats, not n * T * V = {n * T * V}")
    sys.exit(1)
z = raw.reshape(n * T, V).astype(np.float64)
mx = z.max(axis=1, keepdims=True)
lse = mx[:, 0] + np.log(np.exp(z - mx).sum(axis=1))
ref = float(np.mean(lse - z[np.arange(n * T), labels.reshape(-1)]))
got = float(re.search(r"validation loss ([0-9.]+)", open(f"{d}/eval.out").read()).group(1))
err = abs(got - ref) / ref
print(f"eval loss {got:.6f}, float64 from the dumped logits {ref:.6f}, rel err {err:.1e}")
sys.exit(0 if err <= 1e-5 else 1)
EOF
echo "PASS: fused cross-entropy, padded BPE vocabulary: memory, eval loss, dump"
