#!/usr/bin/env bash
# roofline-calibrate: the inputs of roofline v2's calibration on the one real
# GPU run (docs/gpu-results.md: H100, main at 6380f99), as the fixture
# tests/fixtures/roofline/6380f99.json that `roofline.py --calibrate` and
# tests/cudasim/test_roofline.sh predict in every CI run.
#
#   bash scripts/roofline-calibrate.sh [--out DIR] [--fixture FILE]
#
# 1. A git worktree of 6380f99 in DIR/tree, with today's simulator
#    (tests/cudasim/sim and include) and scripts/calibration/6380f99-profile.patch:
#    that commit's --profile had no hooks for the simulator (the op a kernel
#    belongs to, its device counters, the host-blocking calls); the patch adds
#    them and changes nothing else. Built twice: the CPU binary and the
#    simulator's (make build/sim/zerotrain).
# 2. The counts at the measured shape, on the CPU (the counts are the same on
#    every device): GPT-lite 12 x 768, 12 heads, T 1024, one profiled step
#    at micro-batches 1 and 2 for each measured configuration (what
#    gpu-check.sh ran then: its roofline part bf16 with the GPT-2 BPE and
#    GELU; its bench part ReLU, the default then, with a character
#    vocabulary of 65 or --vocab-size 50257).
# 3. The device counters on the simulator (ZT_SIM_PERF=1) at a shape it runs
#    in minutes: one layer, C 128, two heads (the head size, 64, and T, 1024,
#    as measured, so the attention's tiles and rows are the same), micro-batch 1.
# 4. The fixture: those reports' profiles and the measured steps.
# About 25 minutes on 2 cores (the 6380f99 attention is slow on the
# simulator too: ~3 minutes a run). Env: ZT_SHARED, MPIRUN.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$(pwd)
OUT=./calibration-6380f99 FIXTURE=tests/fixtures/roofline/6380f99.json
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift ;;
    --fixture) FIXTURE=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "roofline-calibrate: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
COMMIT=6380f99b77d447e7278bbe64b5afba4c5134af42
SHARED=${ZT_SHARED:-$(cd .. && pwd)/shared}
DATA=$SHARED/data/tinyshakespeare/input.txt
BPE=$SHARED/data/gpt2-bpe
[ -f "$DATA" ] && [ -d "$BPE" ] || { echo "roofline-calibrate: no $DATA or $BPE" >&2; exit 2; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -ra mpirun <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none}"
mkdir -p "$OUT/cpu" "$OUT/sim"
OUT=$(cd "$OUT" && pwd)
TREE=$OUT/tree
if [ ! -d "$TREE" ]; then
    git worktree add --detach "$TREE" "$COMMIT" >/dev/null
    git -C "$TREE" apply "$HERE/scripts/calibration/6380f99-profile.patch"
    rm -rf "$TREE/tests/cudasim/sim" "$TREE/tests/cudasim/include"
    cp -r tests/cudasim/sim tests/cudasim/include "$TREE/tests/cudasim/"
fi
echo "roofline-calibrate: building 6380f99 (CPU and simulator) in $TREE" >&2
make -C "$TREE" -j2 NO_CUDA=1 zerotrain >"$OUT/build-cpu.log" 2>&1 ||
    { tail -5 "$OUT/build-cpu.log" >&2; exit 1; }
make -C "$TREE" -j2 build/sim/zerotrain >"$OUT/build-sim.log" 2>&1 ||
    { tail -5 "$OUT/build-sim.log" >&2; exit 1; }

# run DIR TAG DEVICE LAYERS EMBD HEADS MICRO: one profiled step; TAG is
# DTYPE-VOCAB-ACT[-sSTAGE] with VOCAB v50257 (the GPT-2 BPE), v65 (the
# data's characters) or v50257c (characters, --vocab-size 50257).
run() {
    local dir=$1 tag=$2 dev=$3 nl=$4 ne=$5 nh=$6 b=$7
    IFS=- read -r dt v act st <<<"$tag"
    local s=${st#s}
    [ -n "$s" ] || s=0
    local tok=(--vocab-size 65)
    [ "$v" = v50257 ] && tok=(--tokenizer "$BPE")
    [ "$v" = v50257c ] && tok=(--vocab-size 50257)
    local mixed=
    [ "$dt" = bf16 ] && mixed=', "bf16": {"enabled": true}'
    local f=$dir/$tag-b$b
    cat >"$f.cfg.json" <<JSON
{"train_batch_size": $b, "train_micro_batch_size_per_gpu": $b, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $s}$mixed}
JSON
    local bin=$TREE/zerotrain env=()
    [ "$dev" = cuda ] && bin=$TREE/build/sim/zerotrain env=(env ZT_SIM_PERF=1)
    echo "roofline-calibrate: $dev $tag micro-batch $b" >&2
    "${env[@]}" "${mpirun[@]}" -np 1 "$bin" --config "$f.cfg.json" --model gptlite \
        --data "$DATA" "${tok[@]}" --n-layer "$nl" --n-embd "$ne" --n-head "$nh" \
        --block-size 1024 --activation "$act" --dropout 0.1 --steps 1 --device "$dev" \
        --profile --report "$f.json" >"$f.log" 2>&1 ||
        { tail -5 "$f.log" >&2; echo "roofline-calibrate: $f failed" >&2; exit 1; }
}
cpu_tags=(bf16-v50257-gelu-s0 bf16-v50257-gelu-s3 bf16-v65-relu-s0 bf16-v65-relu-s3
          fp32-v65-relu-s0 fp32-v65-relu-s3 bf16-v50257c-relu-s0 bf16-v50257c-relu-s3)
for tag in "${cpu_tags[@]}"; do
    for b in 1 2; do
        [ -f "$OUT/cpu/$tag-b$b.json" ] || run "$OUT/cpu" "$tag" cpu 12 768 12 $b
    done
done
for tag in bf16-v50257-gelu bf16-v65-relu fp32-v65-relu bf16-v50257c-relu; do
    [ -f "$OUT/sim/$tag-b1.json" ] || run "$OUT/sim" "$tag" cuda 1 128 2 1
done

mkdir -p "$(dirname "$FIXTURE")"
python3 - "$OUT" "$FIXTURE" "$COMMIT" <<'PY'
import json, sys
out, fixture, commit = sys.argv[1:]
# The measured steps (docs/gpu-results.md, "H100, 2026-11-28, main at
# 6380f99"): the roofline part's measured ms; the bench part's tokens/s as
# micro-batch x 1024 / tokens/s (the median of 10 steps).
tok = lambda micro, tps: micro * 1024 / tps * 1e3
runs = [("bf16 ZeRO 0, GPT-2 BPE (50257), GELU", "bf16-v50257-gelu-s0", 16, 2241.63),
        ("bf16 ZeRO 3, GPT-2 BPE (50257), GELU", "bf16-v50257-gelu-s3", 16, 2231.63),
        ("bf16 ZeRO 0, vocab 65, ReLU", "bf16-v65-relu-s0", 16, tok(16, 7506)),
        ("bf16 ZeRO 3, vocab 65, ReLU", "bf16-v65-relu-s3", 16, tok(16, 7498)),
        ("fp32 ZeRO 0, vocab 65, ReLU", "fp32-v65-relu-s0", 16, tok(16, 7084)),
        ("fp32 ZeRO 3, vocab 65, ReLU", "fp32-v65-relu-s3", 16, tok(16, 7066)),
        ("bf16 ZeRO 0, vocab 50257 (characters), ReLU", "bf16-v50257c-relu-s0", 8, tok(8, 6410)),
        ("bf16 ZeRO 3, vocab 50257 (characters), ReLU", "bf16-v50257c-relu-s3", 8, tok(8, 6418))]
profiles = {}
def prof(path):
    p = json.load(open(path))["profile"]
    p["ops"] = {k: v for k, v in p["ops"].items() if v["calls"]}
    return p
fx = {"what": "GPT-lite 12 x 768, 12 heads, T 1024 on one H100 SXM5, main at 6380f99 "
              "(docs/gpu-results.md)",
      "commit": commit, "gpu": "h100", "tolerance": 0.35,
      "made_by": "scripts/roofline-calibrate.sh: CPU --profile at the measured shape, "
                 "micro-batches 1 and 2; ZT_SIM_PERF=1 on the simulator at 1 layer, C 128, "
                 "2 heads, T 1024, micro-batch 1",
      "runs": [], "profiles": profiles}
for name, tag, micro, ms in runs:
    cpu = [f"cpu/{tag}-b1", f"cpu/{tag}-b2"]
    sim = "sim/" + tag.rsplit("-s", 1)[0] + "-b1"
    for k in cpu + [sim]:
        profiles.setdefault(k, prof(f"{out}/{k}.json"))
    fx["runs"].append({"name": name, "micro": micro, "measured_ms": round(ms, 2),
                       "cpu": cpu, "sim": sim})
with open(fixture, "w") as f:
    json.dump(fx, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"roofline-calibrate: wrote {fixture}", file=sys.stderr)
PY
python3 scripts/roofline.py --calibrate "$FIXTURE"
