#!/usr/bin/env bash
# bench-cpu: zerotrain against a PyTorch DDP peer (gloo) on this machine's CPUs.
#
# Same model (the benchmark MLP, W=1024 L=8, in=out=1024), same global batch (256),
# AdamW, fp32, at each rank count in NP, with threads per rank = cores / ranks for
# both tools, run one after the other in this one invocation so that both see the
# same machine state. Prints a Markdown table for the README: samples/s, the ratio,
# and each tool's FLOP rate as a fraction of the sgemm peak that build/bench-sgemm
# measures here (forward + backward = 6 * linear-weight params * samples, the
# bias/ReLU/loss/optimizer work being small next to the GEMMs).
#
# Env: STEPS (default 30), NP (default "1 2"), WIDTH, LAYERS, BATCH, STAGE (ZeRO
# stage for zerotrain, default 0 = plain data parallelism, what DDP does).
#   bash scripts/bench-cpu.sh          (or: make bench)
#
# Mode `adam` (bash scripts/bench-cpu.sh adam, or BENCH=adam) runs, instead of
# the above (mode `mlp`, the default), the offloaded optimizer's CPU Adam step
# alone: build/bench-adam times zt_adam_cpu (AdamW, bias correction) on each
# ISA path it is compiled for that this CPU runs (baseline, avx2, avx512: see
# zt_cpu_isa in engine/cpu/cpu.h) at each thread count in ADAM_THREADS, next
# to parallel copies (glibc memcpy and a non-temporal-store copy) at the same
# thread counts, and prints a Markdown table, one row per (ISA, threads):
# ms/step, parameters/s, the memory traffic that implies (28 bytes/parameter:
# p, g, m, v read, p, m, v written), its ratio to the faster copy, i.e. how
# much of the bandwidth the kernel uses, and the speed-up over the baseline
# path. Two tables: in cache (ADAM_SMALL_N parameters, next to a copy of the
# same 16 bytes/parameter footprint), where the arithmetic and so the ISA
# decides, and out of cache (ADAM_N, next to COPY_MB), where DRAM should.
# Before timing, every ISA is checked bitwise against a scalar FusedAdam
# reference; any difference fails the run. ISAs this CPU lacks are listed
# as not run.
# Threads are pinned (OMP_PROC_BIND=close, OMP_PLACES=cores, unless already
# set) so that a thread stays on the memory its pages were first touched from.
# Env: ADAM_N (default 100000000: 1.6 GB of fp32 state), ADAM_STEPS (timed
# steps, default 10, after 3 warm-up), ADAM_SMALL_N (default 1000000: 16 MB),
# ADAM_SMALL_STEPS (default 200, after 20 warm-up), ADAM_THREADS (default
# "1 <nproc>"), ADAM_ISA (default: every ISA this CPU runs; e.g. "baseline
# avx2"), COPY_MB (default 400; keep it >= 4x the last-level cache).
#   bash scripts/bench-cpu.sh adam
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PY=/usr/bin/python3
STEPS=${STEPS:-30}
NP=${NP:-"1 2"}
WIDTH=${WIDTH:-1024}
LAYERS=${LAYERS:-8}
BATCH=${BATCH:-256}
STAGE=${STAGE:-0}
CORES=$(nproc)

die() { echo "bench-cpu: error: $*" >&2; exit 1; }

MODE=${1:-${BENCH:-mlp}}
case "$MODE" in
mlp) ;;
adam)
    ADAM_N=${ADAM_N:-100000000}
    ADAM_STEPS=${ADAM_STEPS:-10}
    ADAM_SMALL_N=${ADAM_SMALL_N:-1000000}
    ADAM_SMALL_STEPS=${ADAM_SMALL_STEPS:-200}
    if [ "$CORES" -gt 1 ]; then ADAM_THREADS=${ADAM_THREADS:-"1 $CORES"}; else ADAM_THREADS=${ADAM_THREADS:-1}; fi
    COPY_MB=${COPY_MB:-400}
    # The in-cache copy moves what the in-cache shard holds: 16 bytes/param
    # = source + destination of 8 bytes/param each.
    SMALL_COPY_MB=$(( (ADAM_SMALL_N * 8 + 999999) / 1000000 ))
    isa=(); [ -n "${ADAM_ISA:-}" ] && isa=(--isa "$ADAM_ISA")
    # Always through make: the kernel lives in libzt.a, and a stale binary
    # would time someone else's old optim_cpu.c.
    make --no-print-directory build/bench-adam >&2 || die "could not build build/bench-adam (run make)"
    export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
    echo "bench-cpu: adam in cache: N=$ADAM_SMALL_N steps=$ADAM_SMALL_STEPS threads=\"$ADAM_THREADS\" copy=${SMALL_COPY_MB}MB" >&2
    echo "In cache:"
    echo
    build/bench-adam --n "$ADAM_SMALL_N" --steps "$ADAM_SMALL_STEPS" --warmup 20 \
        --threads "$ADAM_THREADS" "${isa[@]}" --copy-mb "$SMALL_COPY_MB" --copy-reps 100 \
        || die "bench-adam failed (in cache)"
    echo "bench-cpu: adam out of cache: N=$ADAM_N steps=$ADAM_STEPS threads=\"$ADAM_THREADS\" copy=${COPY_MB}MB" >&2
    echo
    echo "Out of cache:"
    echo
    build/bench-adam --n "$ADAM_N" --steps "$ADAM_STEPS" --threads "$ADAM_THREADS" "${isa[@]}" \
        --copy-mb "$COPY_MB" || die "bench-adam failed (out of cache)"
    exit 0
    ;;
*) die "unknown mode '$MODE' (modes: mlp, the default, and adam)" ;;
esac

[ -x ./zerotrain ] && [ -x build/bench-sgemm ] || make --no-print-directory zerotrain build/bench-sgemm >&2 \
    || die "could not build ./zerotrain and build/bench-sgemm (run make)"
command -v mpirun >/dev/null || die "mpirun not found"
$PY -c 'import torch' 2>/dev/null || die "$PY has no torch (the peer needs it)"
[ "$STEPS" -ge 5 ] || die "STEPS=$STEPS: need at least 5 (the first steps are warm-up)"

TMP=$(mktemp -d /tmp/zt-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Machine peak: sgemm on every core; the best of the measured shapes.
OMP_NUM_THREADS=$CORES OPENBLAS_NUM_THREADS=$CORES build/bench-sgemm > "$TMP/sgemm.txt"
PEAK=$(awk '{ if ($NF > p) p = $NF } END { print p }' "$TMP/sgemm.txt")
SHAPE_GF=$(awk '$2 == 256 && $3 == 1024 && $4 == 1024 { print $NF }' "$TMP/sgemm.txt")

# FLOPs per sample: 6 x (weights of the Linear layers).
WEIGHTS=$(( WIDTH * WIDTH + (LAYERS - 2) * WIDTH * WIDTH + WIDTH * WIDTH ))
FLOP_PER_SAMPLE=$(( 6 * WEIGHTS ))

rows=()
notes=()
for np in $NP; do
    threads=$(( CORES / np )); [ "$threads" -ge 1 ] || threads=1
    (( BATCH % np == 0 )) || die "BATCH=$BATCH is not divisible by np=$np"
    micro=$(( BATCH / np ))
    cat > "$TMP/cfg$np.json" <<EOF
{"train_batch_size": $BATCH, "train_micro_batch_size_per_gpu": $micro,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $STAGE}, "steps_per_print": 0}
EOF
    over=(); [ "$np" -gt "$CORES" ] && over=(--oversubscribe)
    # --bind-to none: Open MPI binds each rank to one core by default, which
    # would leave a rank's extra threads sharing that core.
    echo "bench-cpu: zerotrain np=$np threads=$threads steps=$STEPS" >&2
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
        mpirun -np "$np" "${over[@]}" --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        ./zerotrain --config "$TMP/cfg$np.json" --model mlp --width "$WIDTH" --layers "$LAYERS" \
        --steps "$STEPS" --seed 1 --report "$TMP/zt$np.json" > "$TMP/zt$np.log" 2>&1 \
        || { cat "$TMP/zt$np.log" >&2; die "zerotrain failed at np=$np"; }

    echo "bench-cpu: torch DDP np=$np threads=$threads steps=$STEPS" >&2
    OMP_NUM_THREADS=$threads $PY scripts/torch_mlp_peer.py --np "$np" --threads "$threads" \
        --width "$WIDTH" --layers "$LAYERS" --batch "$BATCH" --steps "$STEPS" \
        > "$TMP/torch$np.json" 2> "$TMP/torch$np.log" \
        || { cat "$TMP/torch$np.log" >&2; die "torch peer failed at np=$np"; }

    line=$($PY - "$TMP/zt$np.json" "$TMP/torch$np.json" "$np" "$threads" "$FLOP_PER_SAMPLE" "$PEAK" <<'EOF'
import json, sys
zt = json.load(open(sys.argv[1]))
th = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
np_, threads, fps, peak = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
z, t = float(zt["samples_per_sec"]), float(th["samples_per_sec"])
frac = lambda s: 100.0 * s * fps / (peak * 1e9)
print(f"| {np_} | {threads} | {z:,.0f} | {t:,.0f} | {z / t:.2f}x | {frac(z):.1f}% | {frac(t):.1f}% |"
      f"\t{th['samples_per_sec_mean']:,.0f}")
EOF
)
    rows+=("${line%%$'\t'*}")
    notes+=("np=$np: ${line##*$'\t'}")
done

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
echo
echo "CPU benchmark: MLP W=$WIDTH L=$LAYERS (in=out=$WIDTH, $WEIGHTS linear weights), global batch $BATCH, AdamW fp32, ZeRO stage $STAGE; $STEPS steps."
echo "Machine: $cpu, $CORES cores; sgemm peak $PEAK GFLOP/s on $CORES threads (256x1024x1024: $SHAPE_GF GFLOP/s)."
echo
echo "| ranks | threads/rank | zerotrain samples/s | PyTorch DDP samples/s | zerotrain / PyTorch | zerotrain % of sgemm peak | PyTorch % of sgemm peak |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "zerotrain: samples_per_sec from --report (DeepSpeed's throughput timer: steps after the first 2)."
joined=$(IFS=';'; echo "${notes[*]}")
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)') DDP (gloo): median over $STEPS timed steps after 3 warm-up steps;" \
     "with zerotrain's convention instead: ${joined//;/, } samples/s."
echo "% of peak = 6 x linear weights x samples/s / sgemm peak."
