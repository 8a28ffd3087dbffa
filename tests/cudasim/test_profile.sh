#!/usr/bin/env bash
# --profile on the CUDA backend (the simulator): the wrapper sits between the
# trainer and the CUDA backend (workspace, streams, NCCL at np 2) and its
# counts are the CPU backend's, op for op, with the same comm bytes per step:
# they depend on the shapes and the config's GEMM dtype, never on the device
# (engine/monitor/profile.h), which is why docs/roofline.md profiles on a CPU.
# Both sides run GPT-lite's bf16 units on the 16-bit tensors themselves
# (typed tensors: no operand casts, no fp32 copies, and no cast buffers in
# the CUDA backend's workspace).
# --profile-time keeps them and times every op through the CUDA backend's sync.
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
units = (cpu["mixed_precision"]["units"], sim["mixed_precision"]["units"])
assert units == ("bf16", "bf16"), units
a, b = cpu["profile"], sim["profile"]
assert "gemm_operand_cast" not in b["ops"], b["ops"]["gemm_operand_cast"]
assert a["ops"] and a["ops"].keys() == b["ops"].keys(), (sorted(a["ops"]), sorted(b["ops"]))
def counts(o):
    return {k: v for k, v in o.items() if k != "host_blocking_calls"}
for op in a["ops"]:
    assert a["ops"][op] == counts(b["ops"][op]), (op, a["ops"][op], b["ops"][op])
# Host-blocking calls: the simulator counts them (a real CUDA runtime has no
# hook), the CPU build reports none. The backend's copies, check and sync
# each wait for their stream once (engine/cuda/backend_cuda.cu), so those
# ops block exactly once a call.
assert a["host_blocking_calls"] is None, a["host_blocking_calls"]
hb = b["host_blocking_calls"]
assert hb["counted_by"] == "cudasim", hb
assert hb["in_ops"] == sum(o["host_blocking_calls"] for o in b["ops"].values()), hb
assert abs(hb["per_step"] - (hb["in_ops"] + hb["outside_ops"]) / b["steps"]) < 1e-9, hb
for op in ("copy_h2d", "copy_d2h", "check", "sync"):
    if op in b["ops"]:
        o = b["ops"][op]
        assert o["host_blocking_calls"] == o["calls"], (op, o)
assert b["ops"]["gemm"]["host_blocking_calls"] == 0, b["ops"]["gemm"]
print(f"host-blocking calls: {hb['per_step']:.1f} per step ({hb['in_ops']} in ops, "
      f"{hb['outside_ops']} between them)")
assert a["comm_bytes_per_step"] == b["comm_bytes_per_step"], (a["comm_bytes_per_step"],
                                                              b["comm_bytes_per_step"])
assert a["comm_bytes_per_step"]["all_gather"] > 0
print(f"profile: {len(a['ops'])} ops equal on the CPU and the simulated GPUs (bf16 units, "
      "no operand casts)")
# Typed units leave out the backend workspace's operand-cast buffers (128 MiB
# by default): the device WORK arena exceeds the CPU's by cuBLAS's 32 MiB
# workspace and its 256-byte alignment slack, nothing more.
work = [r["ranks"][0]["memory_bytes"]["device"]["WORK"]["reserved"] for r in (cpu, sim)]
extra = work[1] - work[0]
assert (32 << 20) <= extra <= (32 << 20) + 512, f"WORK cpu {work[0]} sim {work[1]}"
print(f"workspace: the simulated GPU's WORK is the CPU's + {extra} bytes (cuBLAS's, no casts)")
PY

# --profile-time on the CUDA backend (np 2, stage 3: streams and NCCL): the
# same counts again, and every op timed through the backend's sync.
$ZT_MPIRUN -np 2 "$ZT_BIN" "${gpt[@]/--profile/--profile-time}" $ZT_DEVICE_FLAGS \
    --report "$tmp/timed.json" >"$tmp/timed.log" 2>&1 || { cat "$tmp/timed.log"; fail "--profile-time"; }
! grep -q "zt-sim:" "$tmp/timed.log" || { cat "$tmp/timed.log"; fail "the simulator reported"; }
python3 - "$tmp/sim.json" "$tmp/timed.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["profile"] for f in sys.argv[1:])
assert b["timed"] and not a["timed"]
for op, o in b["ops"].items():
    # The timing's own waits are the profiler's, not the op's: the
    # host-blocking counts equal the untimed run's.
    assert {k: v for k, v in o.items() if k != "time_ms"} == a["ops"][op], (op, o, a["ops"][op])
    assert "time_ms" in o, (op, o)
assert b["ops"]["attn_flash_forward"]["time_ms"] > 0, b["ops"]["attn_flash_forward"]
print(f"profile timing: {sum(o.get('time_ms', 0) for o in b['ops'].values()):.1f} ms of ops timed")
PY
echo "test_profile (sim): PASS"
