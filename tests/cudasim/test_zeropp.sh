#!/usr/bin/env bash
# ZeRO++ on the CUDA simulator: the quantize/dequantize kernels and the NCCL
# all-to-all (grouped ncclSend/ncclRecv) of qgZ, with qwZ's quantized
# gathers, GPT-lite in bf16 at stage 3 on np 4 as 2 nodes of 2 with hpZ 2.
# Against the CPU backend with the same config: every step's loss within
# 2e-3 relative (bf16 rounding differs between the backends, as in
# test_matrix.sh) and every rank's bytes per communicator and kind equal,
# so the simulated run moved exactly the quantized blocks the CPU run did.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

cat >"$tmp/cfg.json" <<'JSON'
{"train_batch_size": 16, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "stage3_max_reuse_distance": 0, "reduce_bucket_size": 3000,
   "zero_hpz_partition_size": 2,
   "zero_quantized_weights": true, "zero_quantized_gradients": true}}
JSON
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --steps 4 --seed 5)
for side in cpu sim; do
    if [ $side = cpu ]; then bin=./zerotrain; flags=(--device cpu); else bin=$ZT_BIN; flags=($ZT_DEVICE_FLAGS); fi
    ZT_RANKS_PER_NODE=2 timeout 300 $ZT_MPIRUN -np 4 "$bin" --config "$tmp/cfg.json" "${gpt[@]}" \
        "${flags[@]}" --report "$tmp/$side.json" >"$tmp/$side.log" 2>&1 ||
        { cat "$tmp/$side.log"; fail "ZeRO++ GPT-lite on $side"; }
    grep -q "zt-sim:" "$tmp/$side.log" && { cat "$tmp/$side.log"; fail "the simulator reported on $side"; }
done
$ZT_PYTHON - "$tmp/cpu.json" "$tmp/sim.json" <<'PY'
import json, sys
cpu, sim = (json.load(open(p)) for p in sys.argv[1:])
lc = cpu["loss_history"]
ls = sim["loss_history"]
assert len(lc) == len(ls) == 4, (lc, ls)
worst = max(abs(a - b) / abs(a) for a, b in zip(lc, ls))
assert worst <= 2e-3, f"losses differ by {worst:.2e} relative: {lc} vs {ls}"
groups = lambda r: {g: v["bytes"] for g, v in r["ranks"][0]["comm"].items()}
gc, gs = groups(cpu), groups(sim)
assert gc == gs, f"comm bytes differ:\ncpu {gc}\nsim {gs}"
a2a = sum(v.get("all_to_all", 0) for v in gc.values())
assert a2a > 0, f"no all_to_all bytes: {gc}"
print(f"ok: ZeRO++ on the simulator: losses within {worst:.1e} of the CPU backend, "
      f"the same bytes per group and kind ({a2a} all_to_all bytes on rank 0)")
PY
