#!/usr/bin/env bash
# ZeRO++ quantized communication (docs/zeropp.md), on simulated nodes
# (ZT_RANKS_PER_NODE):
# 0. The qgZ all-to-all itself against a float64 sum (build/tests/qgz-check,
#    tests/tools/qgz_check.c): bit for bit where both quantizations are
#    exact, else within the two int4 stages' error bound; np 4 as 2 nodes of
#    2 and np 3 as 3 nodes of 1.
# 1. Bytes: the MLP at stage 3 (no persistent units, reuse distance 0, small
#    buckets) with qwZ + qgZ: np 4 as 2 nodes of 2 in bf16 with hpZ 2, and
#    np 3 as 3 nodes of 1 in fp32 with the optimizer and the parameters
#    offloaded (staged gathers, host-side delivery, no intra-node hop). Every
#    rank's measured bytes per group and kind, and the stage policy's
#    statement, must equal tests/tools/ztzeropp.py's formulas (DeepSpeed's
#    qwZ group size, int4 chunks of 256-element blocks per bucket) exactly.
# 2. Tracking: GPT-lite in bf16 with qwZ + qgZ against the same run without,
#    at np 2 (2 nodes of 1) and np 4 (2 nodes of 2, hpZ 2): every step's loss
#    within 2% (relative), all-gather bytes about half, each qgZ hop about a
#    quarter of the bf16 reduce-scatter; the comms_logger summary lists qgZ's
#    all_to_all_single. (The 300-step runs of a larger GPT-lite,
#    scripts/bench-zeropp.sh, are in docs/zeropp.md.)
# 3. One node: qgZ does not run (DeepSpeed's fallback), says so, and the
#    report shows the plain reduce-scatter; qwZ still quantizes.
# 4. DeepSpeed's refusals (qgZ without reduce_scatter, hpZ not dividing the
#    world) with its messages; below stage 3 the
#    keys are ignored with a warning (a run at np 2 as 2 nodes shows no qgZ
#    group), and refused under --strict.
# 5. fp16 overflow survives qgZ: the same steps skipped as unquantized.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
zp="$ZT_PYTHON tests/tools/ztzeropp.py"
failed=0

run() { # tag np rpn config args...
    local tag=$1 np=$2 rpn=$3 cfg=$4
    shift 4
    if ! ZT_RANKS_PER_NODE=$rpn timeout 300 $ZT_MPIRUN -np "$np" ./zerotrain --config "$cfg" "$@" \
        --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1; then
        tail -20 "$tmp/$tag.log"
        echo "FAIL: $tag did not run"
        failed=1
        return 1
    fi
}

cfg() { # name train_batch extra-top-level-json extra-zero-json: $tmp/cfg-NAME.json
    cat >"$tmp/cfg-$1.json" <<JSON
{
  "train_batch_size": $2,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
  $3
  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
    "stage3_max_reuse_distance": 0 $4}
}
JSON
}
q=', "zero_quantized_weights": true, "zero_quantized_gradients": true'

# ---- 0. qgZ's reduction against float64
for a in "4 2" "3 1"; do
    read -r np l <<<"$a"
    $ZT_MPIRUN -np "$np" build/tests/qgz-check "$l" || { echo "FAIL: qgz-check np $np L $l"; failed=1; }
done

# ---- 1. bytes against independent formulas
mlp=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 3 --seed 7)
cfg mlp-bf16 24 '"bf16": {"enabled": true},' "$q"', "reduce_bucket_size": 1000, "zero_hpz_partition_size": 2'
cfg mlp-off 24 '' "$q"', "reduce_bucket_size": 1000, "overlap_comm": false,
    "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}'
run mlp-bf16 4 2 "$tmp/cfg-mlp-bf16.json" "${mlp[@]}" &&
    { $zp bytes "$tmp/mlp-bf16.json" --mlp 64,4,32,10 --label "MLP bf16 np 4 (2x2) hpZ 2" || failed=1; }
run mlp-off 3 1 "$tmp/cfg-mlp-off.json" "${mlp[@]}" &&
    { $zp bytes "$tmp/mlp-off.json" --mlp 64,4,32,10 --label "MLP fp32 np 3 (3x1) offload" || failed=1; }

# ---- 2. loss tracking and bytes saved, GPT-lite
gpt_shape=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2
     --n-embd 32 --n-head 4 --block-size 32 --seed 11)
gpt=("${gpt_shape[@]}" --steps 40)
cfg plain-2 16 '"bf16": {"enabled": true},' ''
cfg quant-2 16 '"bf16": {"enabled": true}, "comms_logger": {"enabled": true},' "$q"
cfg plain-4 16 '"bf16": {"enabled": true},' ', "zero_hpz_partition_size": 2'
cfg quant-4 16 '"bf16": {"enabled": true}, "comms_logger": {"enabled": true},' "$q"', "zero_hpz_partition_size": 2'
$zp header
for np in 2 4; do
    rpn=$((np / 2))
    run "plain-$np" $np $rpn "$tmp/cfg-plain-$np.json" "${gpt[@]}" || continue
    run "quant-$np" $np $rpn "$tmp/cfg-quant-$np.json" "${gpt[@]}" || continue
    grep -q "^all_to_all_single" "$tmp/quant-$np.log" ||
        { echo "FAIL: np $np: the comms_logger summary has no all_to_all_single row"; failed=1; }
    $zp compare "$tmp/quant-$np.json" "$tmp/plain-$np.json" --max-loss-rel 0.02 \
        --label "GPT-lite bf16 np $np ($((np / rpn)) nodes of $rpn)" || failed=1
    $ZT_PYTHON - "$tmp/quant-$np.json" "$tmp/plain-$np.json" "$np" <<'PY' || failed=1
import json, sys
q, p, np_ = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
def b(r, g, k):
    return sum(int(rk["comm"].get(g, {}).get("bytes", {}).get(k, 0)) for rk in r["ranks"])
ag = (b(q, "world", "all_gather") + b(q, "hpz", "all_gather")) / (
    b(p, "world", "all_gather") + b(p, "hpz", "all_gather"))
rs = b(p, "world", "reduce_scatter")
hops = [b(q, "qgz_intra", "all_to_all") / rs] if np_ == 4 else []
hops.append(b(q, "qgz_inter", "all_to_all") * (2 if np_ == 4 else 1) / rs)
bad = []
if not 0.45 <= ag <= 0.6:
    bad.append(f"all-gather bytes {ag:.3f} of bf16's, expected about half")
if b(q, "world", "reduce_scatter") != 0 or not q["zero"]["qgz_active"]:
    bad.append("qgZ did not replace the reduce-scatter")
for h in hops:  # each hop moves int4 chunks of the whole (intra) or 1/L (inter) input
    if not 0.25 <= h <= 0.3:
        bad.append(f"a qgZ hop moves {h:.3f} of bf16's bytes per element, expected about a quarter")
for m in bad:
    print(f"FAIL: np {np_}: {m}")
sys.exit(1 if bad else 0)
PY
done

# ---- 3. one node: no qgZ, as DeepSpeed; qwZ still on
run one-node 2 2 "$tmp/cfg-quant-2.json" "${gpt_shape[@]}" --steps 4 && {
    grep -q "qgZ: one node" "$tmp/one-node.log" ||
        { echo "FAIL: one node: no line saying qgZ does not run"; failed=1; }
    $ZT_PYTHON - "$tmp/one-node.json" <<'PY' || failed=1
import json, sys
r = json.load(open(sys.argv[1]))
w = r["ranks"][0]["comm"]["world"]["bytes"]
ok = not r["zero"]["qgz_active"] and w["reduce_scatter"] > 0 and "qgz_inter" not in r["ranks"][0]["comm"]
ok = ok and r["zero"]["policy"]["bytes_per_step"]["world"]["all_gather"] * r["steps"] == w["all_gather"]
print(("ok" if ok else "FAIL") + f": one node: qgz_active {r['zero']['qgz_active']}, world bytes {w}")
sys.exit(0 if ok else 1)
PY
}

# ---- 4. DeepSpeed's refusal; below stage 3 the keys are ignored with a
# warning (as DeepSpeed ignores them), and --strict refuses them
cfg no-rs 16 '' "$q"', "reduce_scatter": false'
expect 2 "when enable all_to_all_reduce, reduce_scatter should also be enabled for data type checks." \
    -- ./zerotrain --config "$tmp/cfg-no-rs.json" "${gpt[@]}"
cfg hpz-np3 12 '' "$q"', "zero_hpz_partition_size": 2'
expect 2 "(DeepSpeed: \"3 is not divisible by 2\")" \
    -- $ZT_MPIRUN -np 3 ./zerotrain --config "$tmp/cfg-hpz-np3.json" "${gpt[@]}"
sed 's/"stage": 3/"stage": 2/' "$tmp/cfg-quant-4.json" >"$tmp/cfg-stage2.json"
run stage2 2 1 "$tmp/cfg-stage2.json" "${gpt_shape[@]}" --steps 3 && {
    for k in zero_hpz_partition_size zero_quantized_weights zero_quantized_gradients; do
        grep -q "warning: zero_optimization.$k: ignored at stage 2, as DeepSpeed does" "$tmp/stage2.log" ||
            { echo "FAIL: stage 2: no warning that $k is ignored"; failed=1; }
    done
    $ZT_PYTHON - "$tmp/stage2.json" <<'PY' || failed=1
import json, sys
c = json.load(open(sys.argv[1]))["ranks"][0]["comm"]
ok = set(c) == {"world"} and c["world"]["bytes"]["all_to_all"] == 0
print(("ok" if ok else "FAIL") + f": stage 2 ignores ZeRO++: groups {sorted(c)}")
sys.exit(0 if ok else 1)
PY
}
expect 2 "so stage 2 ignores it, as DeepSpeed does (--strict refuses settings zerotrain ignores)" \
    -- ./zerotrain --config "$tmp/cfg-stage2.json" "${gpt[@]}" --strict

# ---- 5. fp16 overflow through qgZ: a loss scale of 2^32 overflows; the inf
# must survive the int4 chunks (as NaN) so the same steps are skipped, with
# the same scale history, as without quantization
for v in plain quant; do
    z=''
    [ $v = quant ] && z="$q"
    cfg "fp16-$v" 16 '"fp16": {"enabled": true, "initial_scale_power": 32},' "$z"
    run "fp16-$v" 2 1 "$tmp/cfg-fp16-$v.json" "${gpt_shape[@]}" --steps 24 || continue
done
$ZT_PYTHON - "$tmp/fp16-quant.json" "$tmp/fp16-plain.json" <<'PY' || failed=1
import json, sys
q, p = (json.load(open(f)) for f in sys.argv[1:3])
ok = q["skipped_steps"] == p["skipped_steps"] > 0 and q["loss_scale_history"] == p["loss_scale_history"]
print(("ok" if ok else "FAIL") + f": fp16 with qgZ skipped {q['skipped_steps']} steps, "
      f"unquantized {p['skipped_steps']}; scale histories {'equal' if ok else 'differ'}")
sys.exit(0 if ok else 1)
PY

[ "$failed" = 0 ] || { echo "FAIL: see above"; exit 1; }
echo "ok: ZeRO++ qwZ and qgZ"
