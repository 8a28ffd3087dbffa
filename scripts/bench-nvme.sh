#!/usr/bin/env bash
# bench-nvme: the nvme offload (docs/nvme.md) on the disk of DIR, three
# Markdown tables:
#
#  1. Swap I/O: GB/s writing then reading SIZE_MIB MiB with O_DIRECT, by `dd
#     oflag=direct` / `dd iflag=direct` (bs 1 MiB, one request at a time) and
#     by zerotrain's aio engine (build/bench-nvme: operations of OP_MIB MiB,
#     3 in flight, as a sub-group's tensors are) with DeepSpeed's aio defaults
#     (block_size 1 MiB, queue_depth 8, 1 thread) and with queue_depth 32 over
#     4 threads. Median of REPS passes each, alternating tools.
#  2. Step time: the MLP (W=WIDTH, L=LAYERS, ZeRO stage 2, AdamW, fp32, one
#     rank) with offload_optimizer cpu, and nvme with sub_group_size a
#     quarter of the parameters: 1 sub-group of buffers (buffer_count 3, no
#     overlap), and 3 (buffer_count 9, pipeline_read and pipeline_write).
#     Columns: ms/step over the timed steps (DeepSpeed's: the first two left
#     out), the swap bytes per step (optimizer state and gradients), the
#     wait on swap I/O, and the bytes over the step time.
#  3. Host memory: peak host bytes by class for two model sizes (L=LAYERS and
#     4*LAYERS at W=WIDTH, stage 3, both offloads, max_in_cpu 0), cpu against
#     nvme with the same swap settings at both sizes: the nvme run holds its
#     swap buffers (the same at both sizes) and a model-independent rest (the
#     micro-batch's staging, one unit's parameter staging, one sub-group's
#     staging of reduced gradients), and no gradient partition, master
#     weights, moments or parameter shards; those are the nvme files column.
#
# Env: SIZE_MIB (default 512), OP_MIB (16), REPS (3), WIDTH (1024), LAYERS
# (8), STEPS (10). DIR must be on the disk to measure (not tmpfs: that
# measures memory). The machine is what it is: quote ratios measured side by
# side, not absolute numbers from a shared machine.
#   bash scripts/bench-nvme.sh /mnt/nvme/zt
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
source tests/env.sh

DIR=${1:-}
[ -n "$DIR" ] || { echo "usage: bash scripts/bench-nvme.sh DIR" >&2; exit 2; }
SIZE_MIB=${SIZE_MIB:-512}
OP_MIB=${OP_MIB:-16}
REPS=${REPS:-3}
WIDTH=${WIDTH:-1024}
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-10}
PY=/usr/bin/python3

mkdir -p "$DIR"
make -s all build/bench-nvme >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -f "$DIR/dd.bin"' EXIT
fs=$(stat -f -c %T "$DIR")

# ---- 1. swap I/O
dd_rate() { # dd args...: GB/s from dd's byte count and seconds
    LC_ALL=C dd "$@" 2>&1 | awk '/copied/ {print $1 / $(NF-3) / 1e9}'
}
: >"$work/io"
for r in $(seq "$REPS"); do
    w=$(dd_rate if=/dev/zero of="$DIR/dd.bin" bs=1M count="$SIZE_MIB" oflag=direct conv=fsync)
    rd=$(dd_rate if="$DIR/dd.bin" of=/dev/null bs=1M iflag=direct)
    rm -f "$DIR/dd.bin"
    echo "dd $w $rd" >>"$work/io"
    read -r w rd direct engine < <(build/bench-nvme "$DIR" "$SIZE_MIB" "$OP_MIB" 1048576 8 1 0 1)
    echo "ds $w $rd" >>"$work/io"
    read -r w rd direct engine < <(build/bench-nvme "$DIR" "$SIZE_MIB" "$OP_MIB" 1048576 32 4 0 1)
    echo "q32 $w $rd" >>"$work/io"
done

# ---- 2. step time
model=(--model mlp --width "$WIDTH" --layers "$LAYERS" --in-size "$WIDTH" --out-size "$WIDTH"
       --steps "$STEPS" --seed 1)
params=$(./zerotrain --estimate-memory --num-gpus 1 "${model[@]}" | awk '/parameters in|parameters, padded/ && !n++ {print $3}')
cfg() { # name stage zero-extra
    cat >"$work/$1.json" <<JSON
{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 64,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": $2 $3}}
JSON
}
nv="\"nvme_path\": \"$DIR/swap\""
sg=$(( ${params:-8000000} / 4 ))
cfg cpu 2 ', "offload_optimizer": {"device": "cpu"}'
cfg nvme1 2 ", \"sub_group_size\": $sg, \"offload_optimizer\": {\"device\": \"nvme\", $nv, \"buffer_count\": 3}"
cfg nvme3 2 ", \"sub_group_size\": $sg, \"offload_optimizer\": {\"device\": \"nvme\", $nv, \"buffer_count\": 9, \"pipeline_read\": true, \"pipeline_write\": true}"
for v in cpu nvme1 nvme3; do
    ./zerotrain --config "$work/$v.json" "${model[@]}" --report "$work/$v.rep" >"$work/$v.log" 2>&1 ||
        { cat "$work/$v.log"; exit 1; }
done

# ---- 3. host memory at two sizes: sub-groups of two layers, shards of one
unit=$(( (WIDTH + 1) * WIDTH ))
for l in "$LAYERS" $((4 * LAYERS)); do
    m=(--model mlp --width "$WIDTH" --layers "$l" --in-size "$WIDTH" --out-size "$WIDTH" --steps 3 --seed 1)
    cfg "mem-cpu-$l" 3 ', "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}'
    cfg "mem-nvme-$l" 3 ", \"stage3_param_persistence_threshold\": 0, \"sub_group_size\": $((2 * unit)), \"offload_optimizer\": {\"device\": \"nvme\", $nv, \"buffer_count\": 6, \"pipeline_read\": true}, \"offload_param\": {\"device\": \"nvme\", $nv, \"max_in_cpu\": 0, \"buffer_count\": 4, \"buffer_size\": $unit}"
    for v in cpu nvme; do
        ./zerotrain --config "$work/mem-$v-$l.json" "${m[@]}" --report "$work/mem-$v-$l.rep" \
            >"$work/mem-$v-$l.log" 2>&1 || { cat "$work/mem-$v-$l.log"; exit 1; }
    done
done

$PY - "$work" "$DIR" "$fs" "$SIZE_MIB" "$OP_MIB" "$WIDTH" "$LAYERS" "$engine" "$direct" <<'PY'
import json, statistics, sys
work, d, fs, size, op, width, layers, engine, direct = sys.argv[1:]
rows = {}
for line in open(f"{work}/io"):
    k, w, r = line.split()
    rows.setdefault(k, ([], []))
    rows[k][0].append(float(w)); rows[k][1].append(float(r))
med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in rows.items()}
print(f"### Swap I/O on {d} ({fs}), {size} MiB, median of {len(rows['dd'][0])}\n")
print("| tool | settings | write GB/s | read GB/s | write / dd | read / dd |")
print("|---|---|---:|---:|---:|---:|")
names = {"dd": ("dd oflag/iflag=direct", "bs 1 MiB, 1 request in flight"),
         "ds": (f"zerotrain aio ({engine}, {direct})", f"block 1 MiB, queue_depth 8, 1 thread (DeepSpeed's defaults), {op} MiB ops x3"),
         "q32": (f"zerotrain aio ({engine}, {direct})", f"block 1 MiB, queue_depth 32, 4 threads, {op} MiB ops x3")}
for k in ("dd", "ds", "q32"):
    w, r = med[k]
    print(f"| {names[k][0]} | {names[k][1]} | {w:.3f} | {r:.3f} | {w / med['dd'][0]:.2f} | {r / med['dd'][1]:.2f} |")

print(f"\n### Step time: MLP W={width} L={layers}, stage 2, one rank, AdamW fp32\n")
print("| offload_optimizer | sub-groups (in memory) | ms/step | swap MB/step | I/O wait ms/step | swap GB/s in the step | vs cpu |")
print("|---|---|---:|---:|---:|---:|---:|")
base = None
for v, label in (("cpu", "cpu"), ("nvme1", "nvme, buffer_count 3"), ("nvme3", "nvme, buffer_count 9, pipelined")):
    r = json.load(open(f"{work}/{v}.rep"))
    ms = 1e3 * r["train_batch_size"] / r["samples_per_sec"]
    base = base or ms
    n, ios = r["nvme"], r["ranks"][0]["nvme"] or {}
    io = ios.get("optimizer")
    if io:
        # The optimizer state and the gradient partition swapped with it.
        both = [ios[k] for k in ("optimizer", "gradient") if k in ios]
        steps = r["steps"]
        mb = sum(x["bytes_read"] + x["bytes_written"] for x in both) / steps / 1e6
        wait = 1e3 * sum(x["wait_seconds"] for x in both) / steps
        groups = f"{n['sub_groups']} ({n['sub_groups_in_memory']})"
        print(f"| {label} | {groups} | {ms:.1f} | {mb:.1f} | {wait:.1f} | {mb / ms:.2f} | {ms / base:.2f} |")
    else:
        print(f"| {label} | - | {ms:.1f} | - | - | - | 1.00 |")

print(f"\n### Host memory, peak bytes by class (stage 3, both offloads, W={width}, one rank; "
      "nvme: sub-groups of 2 layers, 6 optimizer buffers, 4 parameter buffers of one layer)\n")
print("| model | params | offload | PARAMS | GRADS | MASTER | OPTIM | SWAP | other | host total | nvme files |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for l in (int(layers), 4 * int(layers)):
    for v in ("cpu", "nvme"):
        r = json.load(open(f"{work}/mem-{v}-{l}.rep"))
        rk = r["ranks"][0]
        host = rk["memory_bytes"]["host"]
        peak = {c: host[c]["peak"] for c in host}
        other = sum(peak[c] for c in ("ACTS", "COMM", "WORK"))
        total = rk["memory_total_bytes"]["host"]["peak"]
        cols = " | ".join(f"{peak[c]:,}" for c in ("PARAMS", "GRADS", "MASTER", "OPTIM", "SWAP"))
        print(f"| MLP L={l} | {r['model']['params']:,} | {v} | {cols} | {other:,} | {total:,} | "
              f"{rk['memory_total_bytes']['nvme']:,} |")
PY
