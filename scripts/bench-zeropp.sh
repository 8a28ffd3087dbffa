#!/usr/bin/env bash
# bench-zeropp: GPT-lite with ZeRO++ (qwZ + qgZ) against the same run without,
# on simulated nodes (ZT_RANKS_PER_NODE), and a Markdown table of the result.
#
#   scripts/bench-zeropp.sh [STEPS]        (default 300)
#
# Two pairs of runs, bf16 at stage 3, 4 layers of width 128, 4 heads, context
# 64, train_batch_size 16, seed 3: np 2 as 2 nodes of 1 rank, and np 4 as 2
# nodes of 2 ranks with hpZ 2 (the plain run keeps hpZ). For each pair,
# tests/tools/ztzeropp.py compare prints the losses' largest step-by-step
# relative difference (and fails the script above 2%), the bytes of the
# parameter gathers and of the gradient reduction as fractions of the plain
# run's, each qgZ hop's bytes against the plain reduce-scatter's, and both
# runs' samples/s. Which hop stays inside a node is only simulated here: all
# ranks share one machine, so the speed columns say what the quantize and
# dequantize work costs, not what a slow inter-node link would save.
#
# Env: ZT_MPIRUN (default "mpirun --oversubscribe --bind-to none"), ZT_PYTHON
# (default /usr/bin/python3), OUT (report directory, default runs/bench-zeropp),
# ZT_SHARED (default ../shared: the data).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
die() { echo "bench-zeropp: error: $*" >&2; exit 2; }

steps=${1:-300}
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "STEPS '$steps' is not a positive integer"
PY=${ZT_PYTHON:-/usr/bin/python3}
MPIRUN=${ZT_MPIRUN:-"mpirun --oversubscribe --bind-to none"}
OUT=${OUT:-runs/bench-zeropp}
data=${ZT_SHARED:-$ROOT/../shared}/data/tinyshakespeare/input.txt
[ -f "$data" ] || die "no $data (set ZT_SHARED)"
[ -x ./zerotrain ] || die "no ./zerotrain (run make)"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"

config() { # name zero-extra
    cat >"$OUT/$1.json" <<JSON
{
  "train_batch_size": 16,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 3 $2}
}
JSON
}
q=', "zero_quantized_weights": true, "zero_quantized_gradients": true'
config plain-2 ''
config quant-2 "$q"
config plain-4 ', "zero_hpz_partition_size": 2'
config quant-4 "$q"', "zero_hpz_partition_size": 2'

model=(--model gptlite --data "$data" --n-layer 4 --n-embd 128 --n-head 4 --block-size 64
       --steps "$steps" --seed 3)
# nproc alone would answer OMP_NUM_THREADS, which the loop sets.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
for np in 2 4; do
    export OMP_NUM_THREADS=$(( cores / np > 0 ? cores / np : 1 ))
    for v in plain quant; do
        echo "bench-zeropp: $v np $np, $steps steps" >&2
        ZT_RANKS_PER_NODE=$((np / 2)) $MPIRUN -np "$np" ./zerotrain --config "$OUT/$v-$np.json" \
            "${model[@]}" --report "$OUT/$v-$np.report.json" >"$OUT/$v-$np.log" 2>&1 ||
            { tail -20 "$OUT/$v-$np.log"; die "$v np $np failed (log $OUT/$v-$np.log)"; }
    done
done
"$PY" tests/tools/ztzeropp.py header
status=0
for np in 2 4; do
    "$PY" tests/tools/ztzeropp.py compare "$OUT/quant-$np.report.json" "$OUT/plain-$np.report.json" \
        --max-loss-rel 0.02 --label "GPT-lite bf16 np $np ($((np == 2 ? 1 : 2)) rank(s) per node)" ||
        status=1
done
exit $status
