#!/usr/bin/env bash
# roofline-gpt2: docs/roofline.md's table of predicted MFU, from --profile runs
# on this machine's CPU (the counts are the same on every device).
#
#   bash scripts/roofline-gpt2.sh [--out DIR] [--top K] [--world P]
#
# GPT-2 small's shape (12 layers, C 768, 12 heads, T 1024, the GPT-2 BPE
# vocabulary, 50257), GELU, dropout 0.1, AdamW, bf16, np 1, at ZeRO stages 0
# and 3: one profiled step each at micro-batches 1 and 2, extrapolated by
# scripts/roofline.py to micro-batch MICRO (16; the counts are affine in the
# micro-batch, so this is exact), predicted for an H100 and an A100. Prints
# the summary table and each config's top K ops (8) on the H100; the reports
# and the full tables stay in DIR (default ./roofline-results). About 5
# minutes on 2 cores (a micro-batch 16 step would take ~25 GB).
# --world P: also one step at np 2 per stage (micro-batch 1: its collectives'
# buffers do not depend on the micro-batch or the world size) and a second
# table predicting P ranks over NVLink (about 4 more minutes, 8.5 GB).
# Env: N_LAYER, N_EMBD, N_HEAD, BLOCK, MICRO, DATA (a text file, default tiny
# shakespeare from $ZT_SHARED/data), TOKENIZER (default the GPT-2 BPE folder
# beside it; "none" uses the data's characters with VOCAB, default 50257),
# ZT_BIN (./zerotrain), ZT_SIM_BIN, MPIRUN.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=./roofline-results TOP=8 WORLD=
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift ;;
    --top) TOP=$2; shift ;;
    --world) WORLD=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "roofline-gpt2: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
SHARED=${ZT_SHARED:-$(cd .. && pwd)/shared}
DATA=${DATA:-$SHARED/data/tinyshakespeare/input.txt}
TOKENIZER=${TOKENIZER:-$SHARED/data/gpt2-bpe}
N_LAYER=${N_LAYER:-12} N_EMBD=${N_EMBD:-768} N_HEAD=${N_HEAD:-12} BLOCK=${BLOCK:-1024}
MICRO=${MICRO:-16}
BIN=${ZT_BIN:-./zerotrain}
SIM_BIN=${ZT_SIM_BIN:-build/sim/zerotrain}
# mpirun refuses root unless told; CI and containers run as root.
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -ra mpirun <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none}"
[ -x "$BIN" ] || { echo "roofline-gpt2: no $BIN: run make first" >&2; exit 2; }
[ -x "$SIM_BIN" ] || { echo "roofline-gpt2: no $SIM_BIN: run make sim first" >&2; exit 2; }
[ -f "$DATA" ] || { echo "roofline-gpt2: DATA=$DATA: no such file" >&2; exit 2; }
if [ "$TOKENIZER" = none ]; then
    tok=(--vocab-size "${VOCAB:-50257}")
else
    tok=(--tokenizer "$TOKENIZER")
fi
mkdir -p "$OUT"
runs=("0 1 1" "0 2 1" "3 1 1" "3 2 1")
[ -n "$WORLD" ] && runs+=("0 1 2" "3 1 2")
for run in "${runs[@]}"; do
    read -r s b np <<<"$run"
    tag=s$s-b$b
    [ "$np" = 1 ] || tag=s$s-np$np
    {
        cat >"$OUT/$tag.cfg.json" <<JSON
{"train_batch_size": $((b * np)), "train_micro_batch_size_per_gpu": $b,
 "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
 "bf16": {"enabled": true}, "zero_optimization": {"stage": $s}}
JSON
        echo "roofline-gpt2: profiling ZeRO stage $s, micro-batch $b, np $np" >&2
        "${mpirun[@]}" -np "$np" "$BIN" --config "$OUT/$tag.cfg.json" --model gptlite \
            --data "$DATA" "${tok[@]}" --n-layer "$N_LAYER" --n-embd "$N_EMBD" \
            --n-head "$N_HEAD" --block-size "$BLOCK" --activation gelu --dropout 0.1 \
            --steps 1 --device cpu --profile --report "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1 ||
            { tail -5 "$OUT/$tag.log" >&2; echo "roofline-gpt2: run $tag failed" >&2; exit 1; }
    }
done
echo "roofline-gpt2: device counters on the simulator (ZT_SIM_PERF=1)" >&2
# two heads of the real head size: the attention's tiles are the real ones
ZT_SIM_PERF=1 "${mpirun[@]}" -np 1 "$SIM_BIN" --config "$OUT/s0-b1.cfg.json" --model gptlite \
    --data "$DATA" "${tok[@]}" --n-layer 1 --n-embd $((2 * N_EMBD / N_HEAD)) --n-head 2 \
    --block-size "$BLOCK" --activation gelu --dropout 0.1 --steps 1 --device cuda --profile \
    --report "$OUT/sim.json" >"$OUT/sim.log" 2>&1 ||
    { tail -5 "$OUT/sim.log" >&2; echo "roofline-gpt2: the simulator run failed" >&2; exit 1; }
dev=(--device-counts "$OUT/sim.json")
for s in 0 3; do
    for g in h100 a100; do
        python3 scripts/roofline.py "$OUT/s$s-b1.json" "$OUT/s$s-b2.json" --scale-batch "$MICRO" \
            "${dev[@]}" --gpu $g >"$OUT/s$s-$g.md"
    done
done
val() { sed -n "s/^$1 //p" "$2"; }
ms() { printf '%.2f' "$(val predicted_step_ms "$1")"; }
echo "L $N_LAYER, C $N_EMBD, heads $N_HEAD, T $BLOCK, bf16, micro-batch $MICRO, np 1" \
    "(counts from micro-batches 1 and 2, scripts/roofline-gpt2.sh)"
echo
echo "| ZeRO stage | H100 step ms | H100 MFU | A100 step ms | A100 MFU |"
echo "|---|---:|---:|---:|---:|"
for s in 0 3; do
    echo "| $s | $(ms "$OUT/s$s-h100.md") | $(val predicted_mfu "$OUT/s$s-h100.md")" \
        "| $(ms "$OUT/s$s-a100.md") | $(val predicted_mfu "$OUT/s$s-a100.md") |"
done
if [ -n "$WORLD" ]; then
    echo
    echo "At np $WORLD, collectives over NVLink included (buffers counted at np 2):"
    echo
    echo "| ZeRO stage | H100 step ms | H100 MFU | A100 step ms | A100 MFU |"
    echo "|---|---:|---:|---:|---:|"
    for s in 0 3; do
        for g in h100 a100; do
            python3 scripts/roofline.py "$OUT/s$s-b1.json" "$OUT/s$s-b2.json" \
                --scale-batch "$MICRO" --comm-from "$OUT/s$s-np2.json" --world "$WORLD" \
                "${dev[@]}" --gpu $g >"$OUT/s$s-$g-np$WORLD.md"
        done
        echo "| $s | $(ms "$OUT/s$s-h100-np$WORLD.md") | $(val predicted_mfu "$OUT/s$s-h100-np$WORLD.md")" \
            "| $(ms "$OUT/s$s-a100-np$WORLD.md") | $(val predicted_mfu "$OUT/s$s-a100-np$WORLD.md") |"
    done
fi
for s in 0 3; do
    echo
    echo "ZeRO stage $s on the H100, top $TOP ops:"
    echo
    python3 scripts/roofline.py "$OUT/s$s-b1.json" "$OUT/s$s-b2.json" --scale-batch "$MICRO" \
        "${dev[@]}" --gpu h100 --top "$TOP" | sed -n '/^| op /,/^$/p' | sed '$d'
done
