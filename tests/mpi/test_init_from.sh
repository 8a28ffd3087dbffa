#!/usr/bin/env bash
# --init-from under bad input (engine/ckpt/safetensors.h). Each case exits
# non-zero with a message naming the file and the tensor at fault, before any
# step: a missing tensor, a tensor the model does not have, a wrong shape
# (the hint quotes the model arguments the file's metadata records), an
# integer dtype, a nan, a truncated file, a header length past the end, a
# header that is not JSON, data offsets that do not span the shape, two
# tensors whose bytes overlap (each alone spans its shape inside the file),
# bytes after the last tensor, a consolidated file whose index is broken or
# whose tensors overlap, a missing file, and --init-from with --resume. The
# good files (safetensors and consolidated) load at 2 ranks, stage 2, bit for
# bit (--dump-params), and a run trains on from them; so does bf16 at stage 3
# with the optimizer offloaded (the master copy).
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

mlp=(--model mlp --width 16 --layers 3 --in-size 8 --out-size 4 --seed 3 --device cpu)
cat >"$tmp/cfg.json" <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
 "zero_optimization": {"stage": 2}}
JSON
z=(timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}")
expect 0 "saved checkpoint" -- "${z[@]}" --steps 2 --save-dir "$tmp/ck"
expect 0 "safetensors, PyTorch names" -- ./zerotrain consolidate "$tmp/ck" --out "$tmp/w.st" \
    --format safetensors
expect 0 "tensor index" -- ./zerotrain consolidate "$tmp/ck" --out "$tmp/w.bin"

# The good files load at 2 ranks, stage 2, bit for bit; a run then trains on.
for f in w.st w.bin; do
    expect 0 "initialised from $tmp/$f" -- "${z[@]}" --steps 0 --init-from "$tmp/$f" \
        --dump-params "$tmp/$f.dump"
    cmp "$tmp/$f.dump" "$tmp/w.bin" || fail "--init-from $f: weights differ from the checkpoint's"
    echo "ok: --init-from $f reproduces the checkpoint's weights"
done
expect 0 "done: 2 steps" -- "${z[@]}" --steps 2 --init-from "$tmp/w.st"
# bf16 at stage 3 with the optimizer offloaded: the fp32 master copy on the
# host takes the file's values exactly.
sed 's/"stage": 2}/"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": true}/' \
    "$tmp/cfg.json" >"$tmp/bf16.json"
expect 0 "initialised from" -- timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/bf16.json" \
    "${mlp[@]}" --steps 0 --init-from "$tmp/w.st" --dump-params "$tmp/bf16.dump"
cmp "$tmp/bf16.dump" "$tmp/w.bin" || fail "--init-from under bf16 + offload: weights differ"
echo "ok: --init-from under bf16, stage 3, optimizer offload reproduces the weights"

# Bad files, made from the good one with scripts/zt_safetensors.py.
"$ZT_PYTHON" - "$tmp" <<'PY'
import json, struct, sys
sys.path.insert(0, "scripts")
import numpy as np
import zt_safetensors as st
d = sys.argv[1]
t, meta = st.read(f"{d}/w.st")
def w(name, tensors, m=meta):
    st.write(f"{d}/{name}", tensors, m)
w("missing.st", {k: v for k, v in t.items() if k != "layers.1.bias"})
w("extra.st", {**t, "layers.3.weight": np.zeros((2, 2), np.float32)})
w("shape.st", {**t, "layers.0.weight": np.zeros((16, 9), np.float32)})
w("dtype.st", {**t, "layers.2.bias": np.zeros(4, np.int64)})
nan = dict(t); nan["layers.1.weight"] = t["layers.1.weight"].copy(); nan["layers.1.weight"][3, 5] = np.nan
w("nan.st", nan)
raw = open(f"{d}/w.st", "rb").read()
open(f"{d}/trunc.st", "wb").write(raw[:-100])
open(f"{d}/hlen.st", "wb").write(struct.pack("<Q", len(raw)) + raw[8:])
(n,) = struct.unpack("<Q", raw[:8])
open(f"{d}/json.st", "wb").write(raw[:8] + b"[" + raw[9:])
hdr = json.loads(raw[8:8 + n]); hdr["layers.0.bias"]["data_offsets"][1] += 4
text = json.dumps(hdr).encode(); text += b" " * (-len(text) % 8)
open(f"{d}/offsets.st", "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
# layers.0.bias moved onto the last 64 bytes of layers.0.weight.
hdr = json.loads(raw[8:8 + n]); hdr["layers.0.bias"]["data_offsets"] = [448, 512]
text = json.dumps(hdr).encode(); text += b" " * (-len(text) % 8)
open(f"{d}/overlap.st", "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
open(f"{d}/trailing.st", "wb").write(raw + bytes(4))
import shutil
shutil.copy(f"{d}/w.bin", f"{d}/bad.bin")
open(f"{d}/bad.bin.json", "w").write('[{"name": "layers.0.weight"}]')
shutil.copy(f"{d}/w.bin", f"{d}/overlap.bin")
index = json.load(open(f"{d}/w.bin.json"))
index[1]["offset"] -= 16; index[1]["byte_offset"] -= 64
json.dump(index, open(f"{d}/overlap.bin.json", "w"))
PY

# The first two at 2 ranks (every rank reads and agrees), the rest in one
# process, which is quicker to start.
i=(timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}" --steps 1 --init-from)
i1=(./zerotrain --config "$tmp/cfg.json" "${mlp[@]}" --steps 1 --init-from)
expect 2 "no tensor 'layers.1.bias'" -- "${i[@]}" "$tmp/missing.st"
expect 2 "tensor 'layers.3.weight' is not a tensor of model mlp" -- "${i[@]}" "$tmp/extra.st"
expect 2 "tensor 'layers.0.weight' has shape \[16, 9\]; this run's mlp needs \[16, 8\]" -- \
    "${i[@]}" "$tmp/shape.st"
grep -q 'written for model mlp {"width":16' "$tmp/out" || fail "the shape hint quotes no metadata"
expect 2 "tensor 'layers.2.bias' is I64; --init-from reads F32, F64, F16 and BF16" -- \
    "${i1[@]}" "$tmp/dtype.st"
expect 2 "tensor 'layers.1.weight' element 53 is nan" -- "${i1[@]}" "$tmp/nan.st"
bad="is not a valid safetensors file"
expect 2 "trunc.st $bad: entry 'layers.2.weight': data_offsets \[1664, 1920\] lie past the end \
of the file's 1836 data bytes (truncated?)" -- "${i1[@]}" "$tmp/trunc.st"
expect 2 "hlen.st is not a valid safetensors file: header length" -- "${i1[@]}" "$tmp/hlen.st"
expect 2 "json.st is not a valid safetensors file: the header is not a JSON object" -- \
    "${i1[@]}" "$tmp/json.st"
expect 2 "offsets.st $bad: entry 'layers.0.bias': data_offsets \[512, 580\] hold 68 bytes; \
F32 \[16\] is 64 bytes" -- "${i1[@]}" "$tmp/offsets.st"
expect 2 "overlap.st $bad: entries 'layers.0.weight' and 'layers.0.bias' overlap: \
bytes \[0, 512) and \[448, 512) of the data" -- "${i[@]}" "$tmp/overlap.st"
expect 2 "trailing.st $bad: bytes \[1936, 1940) of the data belong to no entry: 4 trailing \
bytes after the last entry 'layers.2.bias'" -- "${i1[@]}" "$tmp/trailing.st"
expect 2 "bad.bin is not a valid consolidated checkpoint" -- "${i1[@]}" "$tmp/bad.bin"
expect 2 "overlap.bin is not a valid consolidated checkpoint: its tensor index \
$tmp/overlap.bin.json: entries 'layers.0.weight' and 'layers.0.bias' overlap" -- \
    "${i1[@]}" "$tmp/overlap.bin"
expect 2 "weights file $tmp/none.st" -- "${i1[@]}" "$tmp/none.st"
expect 2 "--init-from starts a new run" -- "${i1[@]}" "$tmp/w.st" --resume --save-dir "$tmp/ck"
echo "test_init_from: all cases passed in $((SECONDS - t0)) s"
