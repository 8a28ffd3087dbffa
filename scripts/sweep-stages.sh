#!/usr/bin/env bash
# sweep-stages: one model at one world size under ZeRO stages 0-3, measured.
#
#   scripts/sweep-stages.sh "MODEL_FLAGS" NP [extra zerotrain flags...]
#   scripts/sweep-stages.sh "--model mlp --width 1024 --layers 8" 4
#   scripts/sweep-stages.sh "--model mlp --width 1024 --layers 8" 4 --steps 50 --train-batch-size 128
#   scripts/sweep-stages.sh --plot plots/ "--model mlp --width 1024 --layers 8" 4
#
# --plot DIR (anywhere on the line) also draws DIR/throughput.png (samples/s
# per variant) and DIR/memory.png (rank 0's peak memory per class per
# variant) as bar charts with scripts/plot.py (matplotlib; docs/plots.md).
#
# Runs ./zerotrain once per variant with scripts/configs/sweep-VARIANT.json and
# --report, then prints a Markdown table from the reports: throughput, rank 0's
# peak device memory per class (MiB), the model states (PARAMS + GRADS + MASTER
# + OPTIM), COMM, the sum of all class peaks and averages, and what a rank sent
# per optimizer step. Defaults: --steps 30 and --train-batch-size 64 unless the
# extra flags set them (the configs leave train_batch_size "auto"); threads per
# rank = cores / NP unless OMP_NUM_THREADS is set.
#
# Env: VARIANTS (default "stage0 stage1 stage2 stage3": config names after
# "sweep-"; offload variants will slot in here as e.g. "stage2-offload" with a
# scripts/configs/sweep-stage2-offload.json, and the table then grows host
# memory columns, which it prints as soon as any report has host bytes),
# PIPELINE (default "1": pipeline stage counts P to run each variant at, e.g.
# "1 2 4"; P > 1 runs only the stage0/stage1 variants, as DeepSpeed refuses
# ZeRO-2/3 with pipelining, and adds the P, bubble and p2p columns),
# ZT_MPIRUN (default "mpirun --oversubscribe --bind-to none"), ZT_PYTHON
# (default /usr/bin/python3), OUT (report directory, default runs/sweep-stages).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
die() { echo "sweep-stages: error: $*" >&2; exit 2; }

plot_dir=""
args=()
while [ $# -gt 0 ]; do
    if [ "$1" = --plot ]; then
        [ $# -ge 2 ] || die "--plot needs a directory"
        plot_dir=$2
        shift 2
    else
        args+=("$1")
        shift
    fi
done
set -- "${args[@]}"
[ $# -ge 2 ] || die "usage: scripts/sweep-stages.sh \"MODEL_FLAGS\" NP [extra flags]  (e.g. \"--model mlp --width 1024 --layers 8\" 4)"
read -r -a model_flags <<<"$1"
np=$2
shift 2
extra=("$@")
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "NP '$np' is not a positive integer"

VARIANTS=${VARIANTS:-"stage0 stage1 stage2 stage3"}
PIPELINE=${PIPELINE:-1}
for p in $PIPELINE; do
    [[ "$p" =~ ^[1-9][0-9]*$ ]] && [ $((np % p)) = 0 ] || die "PIPELINE: '$p' is not a stage count dividing NP $np"
done
PY=${ZT_PYTHON:-/usr/bin/python3}
MPIRUN=${ZT_MPIRUN:-"mpirun --oversubscribe --bind-to none"}
OUT=${OUT:-runs/sweep-stages}

has_flag() { local f; for f in "${extra[@]}" "${model_flags[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
defaults=()
has_flag --steps || has_flag --epochs || defaults+=(--steps 30)
has_flag --train-batch-size || defaults+=(--train-batch-size 64)

for v in $VARIANTS; do
    [ -f "scripts/configs/sweep-$v.json" ] || die "no config scripts/configs/sweep-$v.json for variant '$v'"
done
if [ ! -x ./zerotrain ]; then
    echo "sweep-stages: building ./zerotrain" >&2
    make --no-print-directory zerotrain >&2 || die "could not build ./zerotrain (run make)"
fi
command -v "${MPIRUN%% *}" >/dev/null || die "${MPIRUN%% *} not found"
"$PY" -c 'import json' 2>/dev/null || die "$PY does not run"
if [ -n "$plot_dir" ]; then
    "$PY" -c 'import matplotlib' 2>/dev/null ||
        die "--plot needs matplotlib for $PY (scripts/install-deps.sh installs python3-matplotlib)"
fi

[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# nproc alone would answer OMP_NUM_THREADS.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=$(( cores / np > 0 ? cores / np : 1 ))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
mkdir -p "$OUT"

reports=()
for p in $PIPELINE; do
  for v in $VARIANTS; do
    name=$v
    pipe=()
    if [ "$p" != 1 ]; then
        case $v in stage2* | stage3*) continue ;; esac
        name=$v-p$p
        pipe=(--pipeline-stages "$p")
    fi
    echo "sweep-stages: $name, np $np, $OMP_NUM_THREADS thread(s) per rank" >&2
    # -x: ranks on other nodes get the thread counts too (local ranks inherit them)
    if ! $MPIRUN -np "$np" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS ./zerotrain \
        --config "scripts/configs/sweep-$v.json" "${model_flags[@]}" "${defaults[@]}" "${extra[@]}" \
        "${pipe[@]}" --report "$OUT/$name.json" >"$OUT/$name.log" 2>&1; then
        cat "$OUT/$name.log" >&2
        die "zerotrain failed for $name: $MPIRUN -np $np ./zerotrain --config scripts/configs/sweep-$v.json ${model_flags[*]} ${defaults[*]} ${extra[*]} ${pipe[*]}"
    fi
    reports+=("$name=$OUT/$name.json")
  done
done

"$PY" - "$np" "$OMP_NUM_THREADS" "$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)" \
    "$cores" "${model_flags[*]} ${defaults[*]} ${extra[*]}" "${reports[@]}" <<'EOF'
import json, sys

np_, threads, cpu, cores, flags = sys.argv[1:6]
runs = [a.split("=", 1) for a in sys.argv[6:]]
MiB = 1024.0 * 1024.0
STATES = ["PARAMS", "GRADS", "MASTER", "OPTIM"]
notes = []

def per_rank(r, loc, cls, what):
    """rank 0's value; the max over ranks (marked *) where ranks differ."""
    vals = [rk["memory_bytes"][loc][cls][what] for rk in r["ranks"]]
    return vals[0], any(v != vals[0] for v in vals), max(vals)

def mib(r, loc, classes, what="peak"):
    total, differs = 0, False
    for c in classes:
        v0, d, m = per_rank(r, loc, c, what)
        d = d and what == "peak"  # time-weighted averages differ by timing alone
        total += m if d else v0
        differs |= d
    s = f"{total / MiB:,.2f}"
    if differs:
        notes.append("* ranks differ: the max over ranks is shown")
        s += "*"
    return s

def total_peak(r, loc):
    """the largest simultaneous peak over ranks (all classes at once)"""
    return f"{max(rk['memory_total_bytes'][loc]['peak'] for rk in r['ranks']) / MiB:,.2f}"

docs = [(name, json.load(open(path))) for name, path in runs]
# host columns once a variant keeps model states on the host (offload)
any_host = any(rk["memory_bytes"]["host"][c]["peak"] for _, r in docs for rk in r["ranks"]
               for c in STATES)
first = docs[0][1]
r0 = first
print(f"ZeRO stage sweep: {r0['model']['name']} ({r0['model']['params']:,} parameters, "
      f"Psi_p {r0['zero']['padded_params']:,} padded for {np_} ranks), {flags.strip()}; "
      f"np {np_}, {threads} thread(s) per rank on {cores} cores ({cpu}); global batch "
      f"{r0['train_batch_size']} = micro {r0['micro_batch_size']} x GAS {r0['gradient_accumulation_steps']} x {np_}; "
      f"fp32 AdamW; device memory of rank 0 in MiB.")
print()
cols = ["stage", "samples/s", "PARAMS", "GRADS", "OPTIM", "model states", "COMM peak",
        "total peak", "total avg", "sent per step (MB)", "volume per step"]
if any_host:
    cols += ["host model states", "host total peak"]
any_pipe = any(r.get("pipeline", {}).get("stages", 1) > 1 for _, r in docs)
if any_pipe:
    cols += ["P x D", "bubble measured / ideal", "p2p sent per step (MB)"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" + "---:|" * (len(cols) - 1))
for name, r in docs:
    steps = max(int(r["steps"]), 1)
    psi = int(r["zero"]["padded_params"])
    dev_classes = list(r["ranks"][0]["memory_bytes"]["device"])
    # comm: rank 0, bytes over all communicators, per optimizer step
    cb = r["ranks"][0]["comm_bytes"]
    sent = sum(cb.values()) / steps
    # the ZeRO paper's volume: an all-reduce is a reduce-scatter plus an all-gather
    vol = (2 * cb["all_reduce"] + cb["reduce_scatter"] + cb["all_gather"] + cb["broadcast"]) / 4 / steps / psi
    sps = r.get("samples_per_sec")
    row = [f"{name.removeprefix('stage') if name.startswith('stage') and name[5:].isdigit() else name}",
           f"{sps:,.0f}" if sps is not None else "n/a",
           mib(r, "device", ["PARAMS"]), mib(r, "device", ["GRADS"]), mib(r, "device", ["OPTIM"]),
           mib(r, "device", STATES), mib(r, "device", ["COMM"]),
           total_peak(r, "device"), mib(r, "device", dev_classes, "avg"),
           f"{sent / 1e6:,.2f}", f"{vol:.2f} Psi"]
    if any_host:
        row += [mib(r, "host", STATES), total_peak(r, "host")]
    if any_pipe:
        pl = r["pipeline"]
        # the worst stage's idle share of its step; rank 0's point-to-point bytes
        bub = max((s["bubble_fraction"] or 0) for s in pl["per_stage"])
        p2p = r["ranks"][0]["pipeline"]["p2p_sent_bytes_per_step"]
        row += [f"{pl['stages']} x {pl['data_parallel']}",
                f"{bub:.2f} / {pl['bubble_fraction_ideal']:.2f}", f"{p2p / 1e6:,.3f}"]
    print("| " + " | ".join(row) + " |")
print()
print("model states = PARAMS + GRADS + MASTER + OPTIM peaks (MASTER is 0 in fp32). total peak = the "
      "largest simultaneous peak of all classes (the report's memory_total_bytes); total avg = the sum of the time-weighted averages. sent per "
      "step = rank 0's collective bytes per optimizer step (whole logical buffers: all-reduce once, "
      "reduce-scatter its input, all-gather its output); volume counts an all-reduce twice "
      "(reduce-scatter + all-gather), in units of Psi_p, as the ZeRO paper does (2, 2, 2, 3 Psi). "
      "samples/s leaves out the first 2 steps. Host memory (input staging) is "
      f"{max(sum(rk['memory_bytes']['host'][c]['peak'] for c in rk['memory_bytes']['host']) for _, r in docs for rk in r['ranks']) / MiB:,.2f} MiB or less per rank."
      if not any_host else "samples/s leaves out the first 2 steps.")
if any_pipe:
    print("Rows -pP run P pipeline stages x D = NP/P data-parallel ranks (micro x GAS x D = the "
          "global batch, so GAS grows by P); memory columns are the largest stage's (*). bubble "
          "= the idlest stage's waiting time / its step time, against (P - 1) / (GAS + P - 1).")
for n in sorted(set(notes)):
    print(n)
EOF

if [ -n "$plot_dir" ]; then
    "$PY" scripts/plot.py sweep --out "$plot_dir" "${reports[@]}" >&2 ||
        die "plotting into $plot_dir failed"
fi
