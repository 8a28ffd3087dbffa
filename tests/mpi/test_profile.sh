#!/usr/bin/env bash
# --profile's counts against formulas made here from the model's shape
# (engine/monitor/profile.h), and scripts/roofline.py on the reports:
# - GPT-lite (L 2, C 32, H 4, T 32, vocab 65), micro 2, GAS 2, np 2, ZeRO 2,
#   bf16, 2 steps: per step, the gemm FLOPs are 3 x 2 x tokens x (12 L C^2 +
#   C V) (each Linear's forward, input gradient and weight gradient) and the
#   fused attention's FLOPs as the CUDA kernels execute them, over the P =
#   T (T + 1) / 2 causal pairs at the head width padded to 32 (8 -> 32, one
#   window): 4 x B P H 32 per layer forward (QK^T and PV) and 14 x B P H 32
#   + 2 B T C backward (D = rowsum(dY Y); QK^T and dP in both the dK/dV and
#   the dQ kernel, dV, dK, dQ); the units run on bf16 tensors (typed ops), so no operand is
#   cast and every GEMM reads bf16 only; the blocks' Linear forwards counted
#   under linear_act_forward (GEMM and its bias / GELU epilogue);
#   layernorm_forward's and residual_layernorm_forward's calls and bytes
#   (bf16 tensors, fp32 statistics); the comm bytes per step times the steps
#   are rank 0's comm counters;
# - roofline.py: prints its table and MFU; collectives at --world 8 are 7/4
#   of np 2's (ring algorithms); extrapolating micro-batches 1 and 2 to 3
#   predicts what the micro-batch 3 run's own counts predict;
# - --profile-time: the same counts, each op's time (their sum within the
#   training time), roofline.py's measured column;
# - --profile or --profile-time without --report is refused.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

data=$ZT_SHARED/data/tinyshakespeare/input.txt
gpt=(--model gptlite --data "$data" --n-layer 2 --n-embd 32 --n-head 4 --block-size 32
    --dropout 0 --activation gelu)
cfg() { # MICRO GAS STAGE
    cat >"$tmp/c$1-$2-$3.json" <<JSON
{"train_micro_batch_size_per_gpu": $1, "gradient_accumulation_steps": $2,
 "bf16": {"enabled": true}, "zero_optimization": {"stage": $3}}
JSON
    echo "$tmp/c$1-$2-$3.json"
}

expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 $ZT_BIN --config "$(cfg 2 2 2)" "${gpt[@]}" \
    --steps 2 --profile --report "$tmp/p.json"
python3 - "$tmp/p.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["profile"]
L, C, H, T, V = 2, 32, 4, 32, 65
B, gas, steps = 2, 2, 2
m = p["model"]
assert (m["n_layer"], m["n_embd"], m["n_head"], m["block_size"], m["vocab_size"]) == \
    (L, C, H, T, V), m
assert (p["steps"], p["micro_batch_size"], p["gradient_accumulation_steps"], p["stage"],
        p["world_size"], p["gemm_dtype"]) == (steps, B, gas, 2, 2, "bf16"), p
ops = p["ops"]
tokens = B * T * gas * steps  # per rank, over the profiled steps
want_gemm = 3 * 2 * tokens * (12 * L * C * C + C * V)
pairs = T * (T + 1) // 2
width = 32  # the head width 8, padded as the register path runs it
want_fwd = 4 * L * B * pairs * H * width * gas * steps
want_bwd = L * (14 * B * pairs * H * width + 2 * B * T * C) * gas * steps
# the blocks' Linear forwards (qkv C->3C, proj C->C, fc C->4C with GELU,
# proj 4C->C) run as linear_act_forward: the GEMM, then the bias (1 FLOP per
# output) and GELU (8 more) epilogue; the head's Linear stays a gemm
blk_fwd = 2 * tokens * L * 12 * C * C
la = ops["linear_act_forward"]
assert la["flops"] == blk_fwd + tokens * L * (3 * C + C + 9 * 4 * C + C), (la, blk_fwd)
assert la["class"] == "matmul", la
assert ops["gemm"]["flops"] == want_gemm - blk_fwd, (ops["gemm"]["flops"], want_gemm - blk_fwd)
assert ops["attn_flash_forward"]["flops"] == want_fwd, (ops["attn_flash_forward"], want_fwd)
assert ops["attn_flash_backward"]["flops"] == want_bwd, (ops["attn_flash_backward"], want_bwd)
assert "gemm_batched" not in ops, ops["gemm_batched"]
assert ops["gemm"]["class"] == "matmul" and ops["layernorm_forward"]["class"] == "memory"
assert ops["attn_flash_forward"]["class"] == "fma"
# typed: GEMM operands are bf16 as stored, never cast
assert "gemm_operand_cast" not in ops, ops["gemm_operand_cast"]
for name in ("gemm", "linear_act_forward"):
    assert set(ops[name]["bytes_read"]) == {"bf16"}, (name, ops[name]["bytes_read"])
# the fused attention reads bf16 q, k, v (and dy, y) and the fp32 log-sum-exp
for name in ("attn_flash_forward", "attn_flash_backward"):
    assert set(ops[name]["bytes_read"]) <= {"bf16", "fp32", "int32", "uint64"} and \
        ops[name]["bytes_read"]["bf16"] > 0, (name, ops[name]["bytes_read"])
ln = ops["layernorm_forward"]  # ln_1 per block and the final one, per micro-step
n_ln = (L + 1) * gas * steps
assert ln["calls"] == n_ln, ln
assert ln["bytes_read"] == {"bf16": 2 * n_ln * (B * T * C + 2 * C)}, ln
assert ln["bytes_written"] == {"bf16": 2 * n_ln * B * T * C, "fp32": 4 * n_ln * 2 * B * T}, ln
rl = ops["residual_layernorm_forward"]  # ln_2 with the residual add before it
n_rl = L * gas * steps
assert rl["calls"] == n_rl, rl
assert rl["bytes_read"] == {"bf16": 2 * n_rl * (2 * B * T * C + 2 * C)}, rl
assert rl["bytes_written"] == {"bf16": 2 * n_rl * 2 * B * T * C, "fp32": 4 * n_rl * 2 * B * T}, rl
# every step was profiled: the comm per step is the run's counters / steps
rank0 = r["ranks"][0]["comm_bytes"]
for k, v in p["comm_bytes_per_step"].items():
    assert v * steps == rank0.get(k, 0), (k, v, rank0)
assert p["comm_bytes_per_step"]["reduce_scatter"] > 0
print("profile counts: ok")
PY

# The tensor-core attention (bf16, head size 64; engine/monitor/attn_flops.h):
# its FLOPs over whole tiles, 64-row query blocks and 64-key tiles forward
# (4 hs a pair), 64-key blocks and 64-query tiles backward (10 hs a pair,
# plus the row sums on FMA), all of them tensor_flops; T 96 leaves the last
# block half empty.
expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 $ZT_BIN --config "$(cfg 2 2 2)" \
    --model gptlite --data "$data" --n-layer 2 --n-embd 128 --n-head 2 --block-size 96 \
    --dropout 0 --activation gelu --steps 2 --profile --report "$tmp/t.json"
python3 - "$tmp/t.json" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))["profile"]["ops"]
L, C, H, T, B, gas, steps = 2, 128, 2, 96, 2, 2, 2
hs, calls = C // H, L * gas * steps
ceil = lambda a, b: -(-a // b)
fwd_pairs = sum(64 * 64 * ceil(min(i0 + 64, T), 64) for i0 in range(0, T, 64))
bwd_pairs = sum(64 * 64 * ceil(T - j0, 64) for j0 in range(0, T, 64))
f, b = ops["attn_flash_forward"], ops["attn_flash_backward"]
assert f["tensor_flops"] == f["flops"] == calls * 4 * hs * B * H * fwd_pairs, f
assert b["tensor_flops"] == calls * 10 * hs * B * H * bwd_pairs, b
assert b["flops"] == b["tensor_flops"] + calls * 2 * B * T * C, b
print("tensor-core attention counts: ok")
PY

out=$(python3 scripts/roofline.py "$tmp/p.json" --gpu h100)
echo "$out" | grep -q "^| gemm |" || { echo "$out"; fail "roofline: no gemm row"; }
echo "$out" | grep -q "^predicted_mfu [0-9.]*%$" || { echo "$out"; fail "roofline: no MFU"; }
echo "$out" | grep -q "Collectives: included" || { echo "$out"; fail "roofline: collectives"; }

# ring algorithms: a rank sends (p - 1) / p of a reduce-scatter's and an
# all-gather's buffer, so 8 ranks send 7/8 / (1/2) = 1.75 times what 2 send
sent() { python3 scripts/roofline.py "$tmp/p.json" --gpu h100 "$@" |
    sed -n 's/.* GB (\([0-9]*\) bytes) sent per rank per step.*/\1/p'; }
s2=$(sent) s8=$(sent --world 8)
python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert a > 0 and abs(b / a - 1.75) < 1e-3, (a, b)" \
    "$s2" "$s8" || fail "roofline --world 8: $s8 GB against $s2 GB at np 2"

for b in 1 2 3; do
    expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 1 $ZT_BIN --config "$(cfg $b 1 0)" "${gpt[@]}" \
        --steps 1 --profile --report "$tmp/b$b.json"
done
ms() { python3 scripts/roofline.py "$@" --gpu a100 | sed -n 's/^predicted_step_ms //p'; }
direct=$(ms "$tmp/b3.json")
scaled=$(ms "$tmp/b1.json" "$tmp/b2.json" --scale-batch 3)
python3 -c "import sys; d, s = map(float, sys.argv[1:]); assert abs(d - s) <= 1e-3 * d, (d, s)" \
    "$direct" "$scaled" || fail "roofline --scale-batch 3 from micro 1 and 2: $scaled ms, micro 3 run: $direct ms"
expect 2 "comm-from .* differs in stage" -- python3 scripts/roofline.py "$tmp/b1.json" \
    --gpu h100 --comm-from "$tmp/p.json"
expect 2 "no collective was counted at world size 1" -- python3 scripts/roofline.py \
    "$tmp/b1.json" --gpu h100 --world 4
expect 2 "give REPORT REPORT2 --scale-batch N" -- python3 scripts/roofline.py "$tmp/b1.json" \
    --gpu h100 --scale-batch 4

# --profile-time: the same counts as an untimed run (u2), each op's time,
# their sum within the run's training time, and roofline.py's measured column.
# Both with --typed-tensors off: the units then compute on fp32 copies, so
# the modelled operand casts are there to be shown as timed inside GEMMs.
for r in u2:--profile t2:--profile-time; do
    expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 1 $ZT_BIN --config "$(cfg 2 1 0)" "${gpt[@]}" \
        --steps 1 --typed-tensors off ${r#*:} --report "$tmp/${r%%:*}.json"
done
python3 - "$tmp/u2.json" "$tmp/t2.json" <<'PY'
import json, sys
(u, ru), (t, rt) = [(r["profile"], r) for r in (json.load(open(f)) for f in sys.argv[1:])]
assert u["timed"] is False and t["timed"] is True, (u["timed"], t["timed"])
assert set(u["ops"]) == set(t["ops"]), (sorted(u["ops"]), sorted(t["ops"]))
total = 0.0
for name, o in t["ops"].items():
    counts = {k: v for k, v in o.items() if k != "time_ms"}
    assert counts == u["ops"][name], (name, counts, u["ops"][name])
    assert "time_ms" not in u["ops"][name], name
    if name == "gemm_operand_cast":  # modelled: timed inside its GEMM
        assert "time_ms" not in o, o
        continue
    assert o["time_ms"] >= 0, (name, o)
    total += o["time_ms"]
assert t["ops"]["gemm"]["time_ms"] > 0, t["ops"]["gemm"]
wall = 1e3 * rt["train_seconds"]
assert 0 < total <= wall * 1.02 + 0.5, (total, wall)
print(f"profile timing: ok ({total:.2f} ms of ops in {wall:.2f} ms of training)")
PY
out=$(python3 scripts/roofline.py "$tmp/t2.json" --gpu h100)
echo "$out" | grep -q "^| op | .* | measured ms | measured / predicted |$" ||
    { echo "$out"; fail "roofline: no measured column for a --profile-time report"; }
echo "$out" | grep -q "^| gemm_operand_cast | .* (in gemm) |" ||
    { echo "$out"; fail "roofline: the casts are not shown as timed inside gemm"; }
echo "$out" | grep -q "^measured_ops_ms [0-9.e+-]*$" || { echo "$out"; fail "roofline: no measured_ops_ms"; }
python3 scripts/roofline.py "$tmp/b2.json" --gpu h100 | grep -q "measured" &&
    fail "roofline: a measured column for an untimed report"

expect 2 "profile.*add --report FILE" -- $ZT_BIN --config "$(cfg 1 1 0)" "${gpt[@]}" --steps 1 \
    --profile
expect 2 "profile.*add --report FILE" -- $ZT_BIN --config "$(cfg 1 1 0)" "${gpt[@]}" --steps 1 \
    --profile-time
echo "test_profile: PASS"
