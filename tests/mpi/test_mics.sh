#!/usr/bin/env bash
# MiCS (mics_shard_size m): stage 3 partitioned over groups of m ranks and
# replicated across groups. At np 4 with m = 2, GAS 1 and 3: the weights equal
# the np 1 stage 0 run to 1e-6 relative L2 and the losses to 1e-6; each rank
# holds PARAMS, GRADS and OPTIM of Psi/m (no persistent units); per optimizer
# step the shard group moves 2 x GAS x Psi all-gathered and GAS x Psi
# reduce-scattered, the replica group all-reduces GAS x Psi/m, and the world
# communicator carries nothing. Bad shard sizes are refused with exit 2.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

model=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 20 --seed 7)
write_cfg() { # name stage extra-zero-keys
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 144,
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 1000, "overlap_comm": true $3}
}
JSON
}
write_cfg ref 0 ""
write_cfg mics 3 ', "mics_shard_size": 2, "stage3_param_persistence_threshold": 0,
  "stage3_max_live_parameters": 5000, "stage3_prefetch_bucket_size": 3000,
  "stage3_max_reuse_distance": 0'
write_cfg mics3 3 ', "mics_shard_size": 3'
write_cfg mics_s2 2 ', "mics_shard_size": 2'

./zerotrain --config "$tmp/ref.json" "${model[@]}" --gradient-accumulation-steps 1 \
    --dump-params "$tmp/ref.bin" --report "$tmp/ref.json.out" >"$tmp/ref.log"
for gas in 1 3; do
    $ZT_MPIRUN -np 4 ./zerotrain --config "$tmp/mics.json" "${model[@]}" \
        --gradient-accumulation-steps "$gas" --dump-params "$tmp/m$gas.bin" \
        --report "$tmp/m$gas.json" >"$tmp/m$gas.log" 2>&1 || { cat "$tmp/m$gas.log"; exit 1; }
    $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/ref.bin" "$tmp/m$gas.bin" --tol 1e-6
    $ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/ref.json.out" "$tmp/m$gas.json" --tol 1e-6
    $ZT_PYTHON - "$tmp/m$gas.json" "$gas" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); gas = int(sys.argv[2])
z = r["zero"]; P = z["padded_params"]; m = z["mics_shard_size"]; steps = r["steps"]
assert m == 2 and z["partition_params"] * m == P and z["persistent_params"] == 0, z
bad = []
for k in r["ranks"]:
    dev = k["memory_bytes"]["device"]
    want = {"PARAMS": 4 * P // m, "GRADS": 4 * P // m, "OPTIM": 8 * P // m, "MASTER": 0}
    for c, v in want.items():
        if dev[c]["peak"] != v:
            bad.append(f"rank {k['rank']} {c} peak {dev[c]['peak']} != {v}")
    per = lambda g, kind: k["comm"][g]["bytes"][kind] / 4 / steps
    want_comm = [("mics_shard", "all_gather", 2 * gas * P), ("mics_shard", "reduce_scatter", gas * P),
                 ("mics_replica", "all_reduce", gas * P / m)]
    for g, kind, v in want_comm:
        if per(g, kind) != v:
            bad.append(f"rank {k['rank']} {g} {kind} {per(g, kind)} per step != {v}")
    if any(k["comm"]["world"]["bytes"].values()):
        bad.append(f"rank {k['rank']} world comm not empty: {k['comm']['world']['bytes']}")
# The stage policy's statement in the report says the same.
pol = z["policy"]
for c, v in want.items():
    if pol["memory_bytes"]["device"][c] != v:
        bad.append(f"policy states {c} {pol['memory_bytes']['device'][c]} != {v}")
for g, kind, v in want_comm:
    if pol["elements_per_step"][g][kind] != v:
        bad.append(f"policy states {g} {kind} {pol['elements_per_step'][g][kind]} per step != {v}")
if any(pol["elements_per_step"]["world"].values()):
    bad.append(f"policy states world traffic {pol['elements_per_step']['world']}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print(f"ok: MiCS m=2 np 4 gas {gas}: model states 16 Psi/m per rank, shard group "
      f"{2 * gas} Psi gathered + {gas} Psi reduce-scattered, replicas {gas} Psi/m all-reduced")
PY
done

expect_fail() { # needle config np
    local out rc=0
    out=$($ZT_MPIRUN -np "$3" ./zerotrain --config "$tmp/$2.json" "${model[@]}" 2>&1) || rc=$?
    if [ "$rc" = 0 ] || ! grep -q "$1" <<<"$out"; then
        echo "FAIL: expected an error with '$1' (rc $rc):"; echo "$out"; exit 1
    fi
    echo "ok: refused: $1"
}
expect_fail "mics_shard_size 3 does not divide the world size 4" mics3 4
expect_fail "MiCS partitions parameters, which only ZeRO stage 3 does" mics_s2 2
