#!/usr/bin/env bash
# Roofline v2 (scripts/roofline.py, docs/roofline.md) and the simulator's
# performance counters it reads (ZT_SIM_PERF=1, tests/cudasim/sim/perf.cc):
# - calibration: the committed counts of 6380f99 (tests/fixtures/roofline/
#   6380f99.json, scripts/roofline-calibrate.sh) predict each step that
#   commit measured on an H100 within the fixture's +-35%;
# - the check can fail: the same fixture without its device counters (the
#   roofline of the time: compulsory bytes, no L1 wavefronts) is off by more
#   than that, and --calibrate exits 1;
# - a simulated GPT-lite step with ZT_SIM_PERF=1 reports per-op counters
#   that hold together (sectors at least the requests, wavefronts at least
#   the requests, launches at least the kernel calls, the flash attention's
#   shared-memory traffic), none without ZT_SIM_PERF, and roofline.py
#   predicts from them.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fx=tests/fixtures/roofline/6380f99.json

out=$(python3 scripts/roofline.py --calibrate "$fx") || { echo "$out"; fail "calibration off"; }
echo "$out" | grep -q "^calibration_off 0$" || { echo "$out"; fail "calibration: no verdict"; }
n=$(echo "$out" | sed -n 's/^calibration_runs //p')
[ "$n" -ge 8 ] || { echo "$out"; fail "calibration: $n runs, want the 8 measured"; }
echo "$out" | grep "^| bf16 ZeRO 0, GPT-2 BPE"
echo "ok: 6380f99's $n measured steps predicted within the tolerance"

python3 - "$fx" "$tmp/stripped.json" <<'PY'
import json, sys
fx = json.load(open(sys.argv[1]))
for p in fx["profiles"].values():
    for o in p["ops"].values():
        o.pop("device", None)
    p["ops"]["gemm"]["device"] = {"launches": p["ops"]["gemm"]["calls"]}
json.dump(fx, open(sys.argv[2], "w"))
PY
set +e
python3 scripts/roofline.py --calibrate "$tmp/stripped.json" >"$tmp/stripped.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] && grep -q "| OFF |" "$tmp/stripped.out" ||
    { cat "$tmp/stripped.out"; fail "without device counters: exit $rc, want 1 with OFF rows"; }
echo "ok: without the device counters the calibration fails (exit 1)"

cat >"$tmp/c.json" <<'JSON'
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "bf16": {"enabled": true}}
JSON
gpt=(--config "$tmp/c.json" --model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
     --n-layer 2 --n-embd 64 --n-head 2 --block-size 128 --dropout 0.1 --activation gelu
     --steps 1 --profile $ZT_DEVICE_FLAGS)
ZT_SIM_PERF=1 $ZT_MPIRUN -np 1 "$ZT_BIN" "${gpt[@]}" --report "$tmp/perf.json" \
    >"$tmp/perf.log" 2>&1 || { cat "$tmp/perf.log"; fail "ZT_SIM_PERF=1 run"; }
ZT_SIM_PERF=0 $ZT_MPIRUN -np 1 "$ZT_BIN" "${gpt[@]}" --report "$tmp/off.json" \
    >"$tmp/off.log" 2>&1 || { cat "$tmp/off.log"; fail "ZT_SIM_PERF=0 run"; }
python3 - "$tmp/perf.json" "$tmp/off.json" <<'PY'
import json, sys
on, off = (json.load(open(f))["profile"]["ops"] for f in sys.argv[1:])
assert not any("device" in o for o in off.values()), "device counters without ZT_SIM_PERF"
kernels = ("attn_flash_forward", "attn_flash_backward", "layernorm_forward", "adam", "gemm")
for name in kernels:
    d = on[name]["device"]
    assert d["launches"] >= on[name]["calls"], (name, d, on[name]["calls"])
for name, o in on.items():
    d = o.get("device")
    if not d or not d["global_requests"]:
        continue
    assert d["global_sectors"] >= d["global_requests"], (name, d)
    assert d["global_wavefronts"] >= d["global_requests"], (name, d)
    assert 32 * d["global_requests"] >= d["global_sectors"], (name, d)
    assert d["shared_wavefronts"] >= d["shared_requests"], (name, d)
    assert d["shared_bank_conflicts"] <= d["shared_wavefronts"], (name, d)
for name in ("attn_flash_forward", "attn_flash_backward"):
    assert on[name]["device"]["shared_wavefronts"] > 0, (name, on[name]["device"])
assert on["gemm"]["device"]["global_requests"] == 0, "cuBLAS is not counted access by access"
print("ok: per-op device counters of a simulated step")
PY
# The tensor-core attention's FLOP model (engine/monitor/attn_flops.c, which
# --profile counts as tensor_flops and roofline.py prices) against the
# mma.sync instructions the simulated kernels execute, 16 x 8 x 16
# multiply-adds each, at both head sizes: causal, dropout, bf16, T 96.
for hs in 64 128; do
    ZT_SIM_PERF=1 $ZT_MPIRUN -np 1 "$ZT_BIN" --config "$tmp/c.json" --model gptlite \
        --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 1 --n-embd 128 \
        --n-head $((128 / hs)) --block-size 96 --dropout 0.1 --activation gelu --steps 1 --profile \
        $ZT_DEVICE_FLAGS --report "$tmp/mma$hs.json" >"$tmp/mma$hs.log" 2>&1 ||
        { cat "$tmp/mma$hs.log"; fail "ZT_SIM_PERF=1 run at head size $hs"; }
    python3 - "$tmp/mma$hs.json" "$hs" <<'PY'
import json, sys
ops, hs = json.load(open(sys.argv[1]))["profile"]["ops"], int(sys.argv[2])
for name in ("attn_flash_forward", "attn_flash_backward"):
    o = ops[name]
    assert o["tensor_width"] == hs, (name, o)
    got = 2 * 16 * 8 * 16 * o["device"]["tensor_instructions"]
    assert got == o["tensor_flops"] > 0, (name, hs, got, o["tensor_flops"])
print(f"ok: head size {hs}: the profile's tensor_flops are the kernels' executed mma.sync")
PY
done
out=$(python3 scripts/roofline.py "$tmp/perf.json" --gpu h100 --device-counts "$tmp/perf.json")
echo "$out" | grep -q "^| attn_flash_backward | 2 |" ||
    { echo "$out"; fail "roofline v2: no attention row"; }
echo "$out" | grep -q "LSU_EFF 1.0" ||
    { echo "$out"; fail "roofline v2: efficiencies not printed"; }
v2=$(echo "$out" | sed -n 's/^predicted_step_ms //p')
v1=$(python3 scripts/roofline.py "$tmp/perf.json" --gpu h100 | sed -n 's/^predicted_step_ms //p')
python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert b > a > 0, (a, b)" "$v1" "$v2" ||
    fail "roofline v2: $v2 ms with the device counters, $v1 ms without: want more with them"
expect 2 "no op has device counters: run the simulator with ZT_SIM_PERF=1" -- \
    python3 scripts/roofline.py "$tmp/perf.json" --gpu h100 --device-counts "$tmp/off.json"
# The tensor-core attention's model: roofline.py's own counts of one call
# (attention_ops, for --attention) are what --profile counts on a bf16 run
# at head size 64 (engine/monitor/attn_flops.c), dropout on; the loops' JSON
# prices it, slower with dropout's draws than without.
$ZT_MPIRUN -np 1 ./zerotrain --config "$tmp/c.json" --model gptlite \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 1 --n-embd 128 --n-head 2 \
    --block-size 96 --dropout 0.1 --activation gelu --steps 1 --profile --device cpu \
    --report "$tmp/tc.json" >"$tmp/tc.log" 2>&1 || { cat "$tmp/tc.log"; fail "the hs 64 profile"; }
python3 - "$tmp/tc.json" <<'PY'
import json, sys
sys.path.insert(0, "scripts")
import roofline
ops = json.load(open(sys.argv[1]))["profile"]["ops"]
want = roofline.attention_ops(2, 2, 96, 64, True, True, "bf16")
for name, w in want.items():
    o = ops[name]
    per = lambda v: v / o["calls"]
    assert (per(o["flops"]), per(o["tensor_flops"]), o["tensor_width"]) == \
        (w["flops"], w["tensor_flops"], 64), (name, o, w)
    assert o["dropout_calls"] == o["calls"], o
    for side, key in (("read", "bytes_read"), ("written", "bytes_written")):
        got = {k: per(v) for k, v in o[key].items() if k in w[side]}
        assert got == w[side], (name, side, got, w[side])
print("ok: roofline.py's attention counts are --profile's")
PY
a=$(python3 scripts/roofline.py --gpu h100 --attention 16,12,1024,64 --causal)
b=$(python3 scripts/roofline.py --gpu h100 --attention 16,12,1024,64 --causal --dropout)
echo "$a" | grep -q "^| attn_flash_backward | [0-9.,]* | [0-9.]* | [a-z]* | [0-9,]* |$" ||
    { echo "$a"; fail "--attention: no backward row"; }
ta=$(echo "$a" | sed -n 's/^predicted_attention_ms //p')
tb=$(echo "$b" | sed -n 's/^predicted_attention_ms //p')
python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert 0 < a < b, (a, b)" "$ta" "$tb" ||
    fail "--attention: $ta ms without dropout, $tb ms with: want more with the draws"
# With the simulator's counters of the same layer (ldmatrix and cp.async
# counted), the prediction can only grow.
ZT_SIM_PERF=1 $ZT_MPIRUN -np 1 "$ZT_BIN" --config "$tmp/c.json" --model gptlite \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 1 --n-embd 128 --n-head 2 \
    --block-size 96 --dropout 0.1 --activation gelu --steps 1 --profile $ZT_DEVICE_FLAGS \
    --report "$tmp/tcs.json" >"$tmp/tcs.log" 2>&1 || { cat "$tmp/tcs.log"; fail "the hs 64 sim run"; }
tc=$(python3 scripts/roofline.py --gpu h100 --attention 16,12,1024,64 --causal --dropout \
    --device-counts "$tmp/tcs.json" | sed -n 's/^predicted_attention_ms //p')
python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert b >= a > 0, (a, b)" "$tb" "$tc" ||
    fail "--attention --device-counts: $tc ms, $tb ms without the counters"
expect 2 "the tensor-core kernels take head sizes 64 and 128" -- \
    python3 scripts/roofline.py --gpu h100 --attention 1,1,64,96
expect 2 "expected N,H,T,HS" -- python3 scripts/roofline.py --gpu h100 --attention 1,2,64
expect 2 "attention needs --gpu" -- python3 scripts/roofline.py --attention 1,2,64,64
echo "ok: --attention $ta ms (GPT-2 small's layer, no dropout), $tb ms with dropout, $tc ms with the simulator's counters"
echo "cudasim: roofline v2 calibrated and the counters consistent"
