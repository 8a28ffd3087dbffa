#!/usr/bin/env bash
# gpu-audit: the SASS audit of the CUDA kernels (scripts/gpu_audit.py) with
# the simulator runs that say how they are launched.
#
#   bash scripts/gpu-audit.sh report   # writes docs/gpu-audit.md and docs/gpu-audit-loops.json (make gpu-audit)
#   bash scripts/gpu-audit.sh check    # the rules only (make test)
#   bash scripts/gpu-audit.sh hash     # prints the sources' hash the doc records
#
# Needs the nvcc build's objects (build/engine/cuda/*.o and their .ptxas),
# the simulator build (make sim) and cuobjdump (scripts/get-cuda-tools.sh).
# The path runs, each 2 steps of GPT-lite in bf16 on the simulated GPU with
# --profile (which tags every launch with its op):
#   gpt2-h64: GPT-2 small's head size (64) and its BPE vocabulary (50257);
#   h128:     Llama's head size (128), GPT-2's vocabulary.
# The report adds op-check --quick (every op, every dtype) for the block
# sizes of the kernels the paths do not launch. Env: ZT_AUDIT_DIR (where the
# logs and reports go; default a temporary folder, removed).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
die() { echo "gpu-audit: error: $*" >&2; exit 2; }
sources_hash() { cat engine/cuda/*.cu engine/cuda/*.cuh | sha256sum | cut -c1-16; }
case $mode in
hash) sources_hash; exit 0 ;;
report | check) ;;
*) die "usage: bash scripts/gpu-audit.sh report|check|hash" ;;
esac
SHARED=${ZT_SHARED:-$(cd .. && pwd)/shared}
SIM_BIN=build/sim/zerotrain
for f in "$SIM_BIN" build/sim/op-check build/tools/cuda/bin/cuobjdump; do
    [ -x "$f" ] || die "$f is missing (make sim; bash scripts/get-cuda-tools.sh)"
done
ls build/engine/cuda/*.ptxas >/dev/null 2>&1 || die "no nvcc objects in build/engine/cuda (make, with nvcc)"
if [ -n "${ZT_AUDIT_DIR:-}" ]; then
    dir=$ZT_AUDIT_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
export ZT_SIM_DEVICES=1 OMP_NUM_THREADS=1
cat >"$dir/bf16.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {"stage": 0}}
JSON
logs=() reports=()
path_run() {
    local name=$1; shift
    rm -f "$dir/$name.log"
    ZT_SIM_LAUNCH_LOG="$dir/$name.log" "$SIM_BIN" --device cuda --config "$dir/bf16.json" \
        --model gptlite --data "$SHARED/data/tinyshakespeare/input.txt" \
        --tokenizer "$SHARED/data/gpt2-bpe" --n-layer 1 --block-size 64 --activation gelu \
        --dropout 0.1 --steps 2 --seed 3 --profile --report "$dir/$name.json" "$@" \
        >"$dir/$name.out" 2>&1 || { cat "$dir/$name.out" >&2; die "the $name run failed"; }
    logs+=(--log "$name=$dir/$name.log")
    reports+=(--report "$dir/$name.json")
}
path_run gpt2-h64 --n-embd 128 --n-head 2
path_run h128 --n-embd 256 --n-head 2
# The spill rule covers both paths, the occupancy floor the hot one (GPT-2's).
paths=(--paths gpt2-h64,h128 --hot gpt2-h64)
if [ "$mode" = report ]; then
    rm -f "$dir/op-check.log"
    ZT_SIM_LAUNCH_LOG="$dir/op-check.log" build/sim/op-check --quick >"$dir/op-check.out" 2>&1 ||
        { tail -20 "$dir/op-check.out" >&2; die "op-check failed on the simulator"; }
    logs+=(--log "op-check=$dir/op-check.log")
    /usr/bin/python3 scripts/gpu_audit.py loops --out docs/gpu-audit-loops.json \
        --sources-hash "$(sources_hash)"
    exec /usr/bin/python3 scripts/gpu_audit.py report --out docs/gpu-audit.md "${logs[@]}" \
        "${reports[@]}" "${paths[@]}" --sources-hash "$(sources_hash)"
fi
exec /usr/bin/python3 scripts/gpu_audit.py check "${logs[@]}" "${reports[@]}" "${paths[@]}"
