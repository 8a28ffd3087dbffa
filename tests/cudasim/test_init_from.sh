#!/usr/bin/env bash
# --init-from on the CUDA backend (the simulator): a safetensors file exported
# from a CPU checkpoint loads into stage-3 shards on simulated GPUs at np 2
# exactly as it loads on the CPU backend (cmp of --dump-params at --steps 0),
# so the per-rank span copies to device memory move the right bytes, and
# they are the file's weights, not the seed's initial ones.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 2 --block-size 16 --dropout 0 --seed 3)
$ZT_MPIRUN -np 2 ./zerotrain --config scripts/configs/zero2.json "${gpt[@]}" --device cpu \
    --steps 3 --save-dir "$tmp/ck" >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail "training"; }
./zerotrain consolidate "$tmp/ck" --format safetensors --out "$tmp/w.safetensors" >"$tmp/c.log" 2>&1 ||
    { cat "$tmp/c.log"; fail "consolidate"; }
for side in cpu sim; do
    if [ $side = cpu ]; then bin=./zerotrain; flags=(--device cpu); else bin=$ZT_BIN; flags=($ZT_DEVICE_FLAGS); fi
    $ZT_MPIRUN -np 2 "$bin" --config scripts/configs/zero3.json "${gpt[@]}" "${flags[@]}" --steps 0 \
        --init-from "$tmp/w.safetensors" --dump-params "$tmp/$side.bin" >"$tmp/$side.log" 2>&1 ||
        { cat "$tmp/$side.log"; fail "--init-from on $side"; }
    ! grep -q "zt-sim:" "$tmp/$side.log" || { cat "$tmp/$side.log"; fail "the simulator reported"; }
done
cmp -s "$tmp/cpu.bin" "$tmp/sim.bin" || fail "--init-from on the simulated GPUs differs from the CPU"
# The loaded weights are the trained ones, not the seed's initial weights.
$ZT_MPIRUN -np 2 "$ZT_BIN" --config scripts/configs/zero3.json "${gpt[@]}" $ZT_DEVICE_FLAGS --steps 0 \
    --dump-params "$tmp/init.bin" >"$tmp/init.log" 2>&1 || { cat "$tmp/init.log"; fail "the initial dump"; }
! cmp -s "$tmp/init.bin" "$tmp/sim.bin" || fail "--init-from left the initial weights in place"
echo "ok: --init-from loads the same weights on simulated GPUs (stage 3, np 2) as on the CPU"
