#!/usr/bin/env bash
# gpu-lease: scripts/gpu-check.sh fitted to a short loan of a GPU machine that
# has no Open MPI, jansson, OpenBLAS or data (the device tool's machines: one
# command of at most 10 minutes, and only some files come back).
#
#   bash scripts/gpu-lease.sh prepare [DIR]     here, where the CUDA toolkit is
#   bash scripts/gpu-lease.sh run [DIR]         there, from the repository root
#
# prepare (default DIR .gpu): builds ./zerotrain and build/tests/op-check,
# copies them stripped into DIR with the runtime libraries (gpu-check.sh
# --pack-deps), tiny shakespeare and the GPT-2 BPE files from ../shared/data,
# and adds DIR to .git/info/exclude: the folder to name in the device tool's
# `carry` (about 40 MB); and the device counters roofline v2 predicts with
# (docs/roofline.md): one GPT-lite step of the same kernels on the CUDA
# simulator (ZT_SIM_PERF=1; 1 layer, 2 heads of 64, T 1024, the GPT-2 BPE,
# bf16, micro-batch 1: about 3 minutes) as DIR/sim-counts.json.
# run: first build/tests/mma-check (engine/cuda/mma.cuh's tensor-core and
# async-copy primitives on the hardware against the simulator's scalar
# references: seconds; its output is mma-check.txt), then puts the binaries
# in place and runs gpu-check.sh's parts in the order
# that matters most when time runs short, each under its own cap: ops (quick),
# roofline, bench (quick; its table rebuilt when the cap cut it short), stages
# (quick, with what is left of TOTAL). The results go to $OUT (or OUT_DIR):
# gpu-check.log and gpu-results.tar.xz (every part's folder less the parameter
# dumps and the unpacked libraries).
# Env (seconds): TOTAL (470: the parts' whole budget), OPS_T (130), ROOF_T
# (130), BENCH_T (200), MATRIX_T (0: extra seconds for the matrix part, the
# mixed precision and offload runs, after the others; none by default);
# BENCH_STEPS (10); RESULTS (/tmp/gpu-lease: the work folder there).
set -uo pipefail

die() { echo "gpu-lease: error: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
what=${1:-}
DIR=${2:-.gpu}

prepare() {
    local data=${ZT_SHARED:-$ROOT/../shared}/data
    [ -f "$data/tinyshakespeare/input.txt" ] || die "no $data/tinyshakespeare/input.txt (set ZT_SHARED)"
    make --no-print-directory zerotrain build/tests/op-check build/tests/mma-check sim >/dev/null ||
        die "make failed"
    ldd ./zerotrain | grep -q libcudart || die "./zerotrain is a CPU-only build: no nvcc found"
    rm -rf "$DIR"
    mkdir -p "$DIR/data/tinyshakespeare" "$DIR/data/gpt2-bpe" "$DIR/data/imdb"
    { strip -o "$DIR/zerotrain" ./zerotrain && strip -o "$DIR/op-check" build/tests/op-check &&
        strip -o "$DIR/mma-check" build/tests/mma-check; } || die "strip failed"
    bash scripts/gpu-check.sh --pack-deps "$DIR/gpu-deps.tar.xz" >/dev/null || die "--pack-deps failed"
    cp "$data/tinyshakespeare/input.txt" "$DIR/data/tinyshakespeare/"
    [ -d "$data/gpt2-bpe" ] && cp "$data/gpt2-bpe/"* "$DIR/data/gpt2-bpe/"
    [ -f "$data/imdb/imdb-2500.csv" ] && cp "$data/imdb/imdb-2500.csv" "$DIR/data/imdb/"
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    printf '%s\n' '{"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,' \
        '"optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},' \
        '"bf16": {"enabled": true}}' >"$DIR/sim-counts.cfg.json"
    ZT_SIM_PERF=1 mpirun --oversubscribe -np 1 build/sim/zerotrain --config "$DIR/sim-counts.cfg.json" \
        --model gptlite --data "$data/tinyshakespeare/input.txt" --tokenizer "$data/gpt2-bpe" \
        --n-layer 1 --n-embd 128 --n-head 2 --block-size 1024 --activation gelu --dropout 0.1 \
        --steps 1 --device cuda --profile --report "$DIR/sim-counts.json" >"$DIR/sim-counts.log" 2>&1 ||
        die "the simulator's counting run failed ($DIR/sim-counts.log)"
    local ex
    ex=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$ex")"
    grep -qxF "/$DIR/" "$ex" 2>/dev/null || echo "/$DIR/" >>"$ex"
    echo "gpu-lease: $(du -sh "$DIR" | cut -f1) in $DIR; on the GPU machine (carry $DIR):"
    echo "    bash scripts/gpu-lease.sh run $DIR"
}

run() {
    local out=${OUT_DIR:-${OUT:-}} res=${RESULTS:-/tmp/gpu-lease} t0 left
    [ -n "$out" ] || die "set OUT (the device tool's) or OUT_DIR"
    [ -x "$DIR/zerotrain" ] || die "no $DIR/zerotrain: run 'prepare' where the CUDA toolkit is"
    cp "$DIR/zerotrain" ./zerotrain && mkdir -p build/tests && cp "$DIR/op-check" build/tests/op-check
    export PYTHONUNBUFFERED=1 DATA=$ROOT/$DIR/data/tinyshakespeare/input.txt
    [ -f "$DIR/sim-counts.json" ] && export ROOF_COUNTS=$ROOT/$DIR/sim-counts.json
    mkdir -p "$res" "$out"
    local kit=(bash scripts/gpu-check.sh --quick --deps "$DIR/gpu-deps.tar.xz" --out "$res")
    LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64 timeout 60 "$DIR/mma-check" \
        >"$out/mma-check.txt" 2>&1
    echo "gpu-lease: mma-check exit $? ($(tail -1 "$out/mma-check.txt"))"
    t0=$(date +%s)
    since() { echo "gpu-lease: $1 done at $(($(date +%s) - t0)) s"; }
    OPCHECK_TIMEOUT=$((${OPS_T:-130} - 20)) timeout "${OPS_T:-130}" "${kit[@]}" --parts ops
    since ops
    BENCH_TIMEOUT=$((${ROOF_T:-130} - 40)) timeout "${ROOF_T:-130}" "${kit[@]}" --parts roofline
    since roofline
    BENCH_TIMEOUT=120 BENCH_STEPS=${BENCH_STEPS:-10} timeout "${BENCH_T:-200}" "${kit[@]}" --parts bench
    [ -f "$res/throughput.md" ] || timeout 30 "${kit[@]}" --parts table
    since bench
    left=$((${TOTAL:-470} - ($(date +%s) - t0)))
    [ "$left" -gt 20 ] && RUN_TIMEOUT=40 timeout "$left" "${kit[@]}" --parts stages
    since stages
    left=$((${TOTAL:-470} + ${MATRIX_T:-0} - ($(date +%s) - t0)))
    [ "${MATRIX_T:-0}" -gt 0 ] && [ "$left" -gt 30 ] &&
        MATRIX_TIMEOUT=$((left - 10)) timeout "$left" "${kit[@]}" --parts matrix
    since matrix
    cp "$res/gpu-check.log" "$out/" 2>/dev/null
    tar -cJf "$out/gpu-results.tar.xz" -C "$(dirname "$res")" --exclude="$(basename "$res")/deps" \
        --exclude='*.bin' "$(basename "$res")"
    ls -la "$out"
}

case $what in
prepare) prepare ;;
run) run ;;
*) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ "$what" = -h ] || [ "$what" = --help ] || exit 2 ;;
esac
