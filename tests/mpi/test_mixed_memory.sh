#!/usr/bin/env bash
# Memory of mixed precision, offload and activation checkpointing, read from
# every rank's report (measured arena peaks, bytes; the stage policy's stated
# bytes in the report must be the same):
#  - fp16 and bf16, one micro-step, Adam: model states per rank are exactly the
#    ZeRO paper's 2 + 2 + 12 bytes per (padded) parameter split by stage, class
#    by class: stage 0 PARAMS 2P GRADS 2P MASTER 4P OPTIM 8P (16P); stage 1 2P,
#    2P, 4P/N, 8P/N (4P + 12P/N); stage 2 2P, 2P/N, 4P/N, 8P/N (2P + 14P/N);
#    stage 3 2P/N, 2P/N, 4P/N, 8P/N (16P/N), at np 2 and 4;
#  - two micro-steps: GRADS holds the fp32 accumulator (4 bytes instead of 2);
#  - offload_optimizer (stages 1-3): device MASTER and OPTIM empty, the host
#    holds MASTER 4P/N, OPTIM 8P/N and the fp32 gradient partition 4P/N;
#    device GRADS 2P at stage 1 (the full 16-bit gradient), 0 above;
#  - offload_param (stage 3): device PARAMS holds only the persistent units
#    (none with stage3_param_persistence_threshold 0); the host the shards;
#  - activation checkpointing at interval 1 on GPT-lite at least halves the
#    device ACTS peak; with cpu_checkpointing the kept inputs move to host ACTS.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

mlp=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 2 --seed 3)
cfg() { # name stage precision gas extra-zero
    local prec='"fp16": {"enabled": true},'
    [ "$3" = bf16 ] && prec='"bf16": {"enabled": true},'
    local zero=$5
    [ -n "$zero" ] || zero=', "stage3_param_persistence_threshold": 0'
    cat >"$tmp/$1.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": $4,
  "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
  $prec
  "zero_optimization": {"stage": $2 $zero}
}
JSON
}
runs=()
go() { # name np
    $ZT_MPIRUN -np "$2" ./zerotrain --config "$tmp/$1.json" "${mlp[@]}" \
        --report "$tmp/$1-np$2.report" >"$tmp/$1-np$2.log" 2>&1 ||
        { cat "$tmp/$1-np$2.log"; echo "FAIL: $1 at np $2"; exit 1; }
    runs+=("$1-np$2")
}
for stage in 0 1 2 3; do
    for prec in fp16 bf16; do
        cfg "s$stage-$prec" $stage $prec 1 ""
        for np in 2 4; do go "s$stage-$prec" $np; done
    done
    cfg "s$stage-gas2" $stage fp16 2 ""
    go "s$stage-gas2" 2
    [ $stage = 0 ] && continue
    cfg "s$stage-offopt" $stage fp16 1 ', "offload_optimizer": {"device": "cpu"}, "stage3_param_persistence_threshold": 0'
    go "s$stage-offopt" 2
done
cfg s3-offparam 3 fp16 1 ', "offload_param": {"device": "cpu"}, "stage3_param_persistence_threshold": 0'
go s3-offparam 2
cfg s3-offparam-persist 3 fp16 1 ', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"},
    "stage3_param_persistence_threshold": 3000'
go s3-offparam-persist 4

$ZT_PYTHON - "$tmp" "${runs[@]}" <<'PY'
import json, sys
d, runs = sys.argv[1], sys.argv[2:]
fails = []
def peaks(rank, loc):
    return {k: v["peak"] for k, v in rank["memory_bytes"][loc].items()}
for run in runs:
    r = json.load(open(f"{d}/{run}.report"))
    P, N, stage = r["zero"]["padded_params"], r["world_size"], r["zero"]["stage"]
    persistent = r["zero"]["persistent_params"]
    gas2, offopt = "gas2" in run, "offopt" in run or "persist" in run
    offparam = "offparam" in run
    g = 4 if gas2 else 2
    if stage == 0:
        want = {"PARAMS": 2 * P, "GRADS": g * P, "MASTER": 4 * P, "OPTIM": 8 * P}
    else:
        want = {"PARAMS": 2 * P if stage < 3 else 2 * P // N,
                "GRADS": g * P if stage < 2 else g * P // N,
                "MASTER": 4 * P // N, "OPTIM": 8 * P // N}
    host = {"PARAMS": 0, "GRADS": 0, "MASTER": 0, "OPTIM": 0}
    if offopt:
        host.update(MASTER=want["MASTER"], OPTIM=want["OPTIM"], GRADS=4 * P // N)
        want.update(MASTER=0, OPTIM=0, GRADS=2 * P if stage == 1 else 0)
    if offparam:
        host["PARAMS"] = 2 * (P - persistent) // N
        want["PARAMS"] = 2 * persistent
    if not gas2 and not offopt and not offparam:
        total = {0: 16 * P, 1: 4 * P + 12 * P // N, 2: 2 * P + 14 * P // N, 3: 16 * P // N}[stage]
        assert sum(want.values()) == total
    # The stage policy states the same bytes the run measured (its formulas).
    stated = r["zero"]["policy"]["memory_bytes"]
    for cls in want:
        if stated["device"][cls] != want[cls] or stated["host"][cls] != host[cls]:
            fails.append(f"{run}: the stage policy states {cls} device {stated['device'][cls]} "
                         f"host {stated['host'][cls]}, the test {want[cls]} and {host[cls]}")
    for rank in r["ranks"]:
        dev, hst = peaks(rank, "device"), peaks(rank, "host")
        for cls in want:
            if dev[cls] != want[cls]:
                fails.append(f"{run} rank {rank['rank']}: device {cls} {dev[cls]} != {want[cls]}")
            if hst[cls] != host[cls]:
                fails.append(f"{run} rank {rank['rank']}: host {cls} {hst[cls]} != {host[cls]}")
    if "persist" in run and persistent == 0:
        fails.append(f"{run}: expected some persistent units")
if fails:
    print("\n".join("FAIL: " + f for f in fails))
    sys.exit(1)
print(f"ok: model-state bytes of {len(runs)} runs match 2 + 2 + 12 per parameter by stage, "
      "the fp32 accumulator, and the offload placements")
PY

# Activation checkpointing on GPT-lite (4 blocks, T 64).
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 4 --n-embd 64
     --n-head 4 --block-size 64 --steps 2 --seed 3)
cat >"$tmp/gpt.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
cat >"$tmp/gpt-cpu.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "activation_checkpointing": {"cpu_checkpointing": true}}
JSON
$ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/gpt.json" "${gpt[@]}" --report "$tmp/g0.report" >"$tmp/g0.log" 2>&1 ||
    { cat "$tmp/g0.log"; echo "FAIL: gptlite"; exit 1; }
$ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/gpt.json" "${gpt[@]}" --activation-checkpoint-interval 1 \
    --report "$tmp/g1.report" >"$tmp/g1.log" 2>&1 || { cat "$tmp/g1.log"; echo "FAIL: gptlite ckpt"; exit 1; }
$ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/gpt-cpu.json" "${gpt[@]}" --activation-checkpoint-interval 1 \
    --report "$tmp/g2.report" >"$tmp/g2.log" 2>&1 || { cat "$tmp/g2.log"; echo "FAIL: gptlite cpu ckpt"; exit 1; }
$ZT_PYTHON - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def acts(name, loc):
    r = json.load(open(f"{d}/{name}.report"))
    return r["ranks"][0]["memory_bytes"][loc]["ACTS"]["peak"]
plain, ckpt, cpu = acts("g0", "device"), acts("g1", "device"), acts("g2", "device")
assert acts("g1", "host") == 0, "device checkpoints went to the host"
assert ckpt * 2 <= plain, f"interval 1 ACTS {ckpt} is more than half of {plain}"
assert cpu < ckpt and acts("g2", "host") > 0, f"cpu_checkpointing: device {cpu}, host {acts('g2', 'host')}"
print(f"ok: gptlite device ACTS peak {plain} B -> {ckpt} B at interval 1 ({ckpt / plain:.2f}x), "
      f"{cpu} B with cpu_checkpointing (host {acts('g2', 'host')} B)")
PY
echo "ok: memory checks in $((SECONDS - t0)) s"
