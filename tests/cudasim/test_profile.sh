#!/usr/bin/env bash
# --profile on the CUDA backend (the simulator): the wrapper sits between the
# trainer and the CUDA backend (workspace, streams, NCCL at np 2) and its
# counts are the CPU backend's, op for op, with the same comm bytes per step:
# they depend on the shapes and the config's GEMM dtype, never on the device
# (engine/monitor/profile.h), which is why docs/roofline.md profiles on a CPU.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}
JSON
gpt=(--config "$tmp/c.json" --model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
     --n-layer 2 --n-embd 32 --n-head 4 --block-size 32 --dropout 0.1 --activation gelu
     --steps 2 --profile)
for side in cpu sim; do
    if [ $side = cpu ]; then bin=./zerotrain; flags=(--device cpu); else bin=$ZT_BIN; flags=($ZT_DEVICE_FLAGS); fi
    $ZT_MPIRUN -np 2 "$bin" "${gpt[@]}" "${flags[@]}" --report "$tmp/$side.json" \
        >"$tmp/$side.log" 2>&1 || { cat "$tmp/$side.log"; fail "--profile on $side"; }
    ! grep -q "zt-sim:" "$tmp/$side.log" || { cat "$tmp/$side.log"; fail "the simulator reported"; }
done
python3 - "$tmp/cpu.json" "$tmp/sim.json" <<'PY'
import json, sys
cpu, sim = (json.load(open(f)) for f in sys.argv[1:])
assert sim["device"] == "cuda" and cpu["device"] == "cpu", (sim["device"], cpu["device"])
a, b = cpu["profile"], sim["profile"]
assert a["ops"] and a["ops"].keys() == b["ops"].keys(), (sorted(a["ops"]), sorted(b["ops"]))
for op in a["ops"]:
    assert a["ops"][op] == b["ops"][op], (op, a["ops"][op], b["ops"][op])
assert a["comm_bytes_per_step"] == b["comm_bytes_per_step"], (a["comm_bytes_per_step"],
                                                              b["comm_bytes_per_step"])
assert a["comm_bytes_per_step"]["all_gather"] > 0
print(f"profile: {len(a['ops'])} ops equal on the CPU and the simulated GPUs")
PY
echo "test_profile (sim): PASS"
