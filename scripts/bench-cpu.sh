#!/usr/bin/env bash
# bench-cpu: zerotrain against PyTorch DDP peers (gloo) on this machine's CPUs.
#
# Default mode (`all`, also `mlp`, its old name; make bench): the built-in models
# of models.md, each at every rank count in NP, zerotrain and then its PyTorch
# peer, one after the other in this one invocation so that both see the same
# machine state:
#   mlp               benchmark MLP W=1024 L=8 (in = out = W), batch 256
#                     (peer: scripts/torch_mlp_peer.py)
#   gptlite-small     GPT-lite 4 layers, C 128, 4 heads, T 128, batch 16
#   gptlite-large     GPT-lite 6 layers, C 384, 6 heads, T 256, batch 16
#                     (tiny shakespeare characters, random windows of T + 1)
#   classifier-small  classifier 2 layers, E 128, 4 heads, FF 256, max_len 256, batch 16
#   classifier-large  classifier 6 layers, E 256, 8 heads, FF 1024, max_len 512, batch 16
#                     (imdb-2500.csv as UTF-8 bytes, each micro-batch padded to
#                     its longest review; peer: scripts/torch_transformer_cpu_peer.py)
# Both tools: the same global batch, micro-batch = batch / ranks, fp32 AdamW,
# dropout 0, no gradient clipping, threads per rank = cores / ranks, the same
# number of steps, timed over the steps after the first 2 (zerotrain's --report
# samples_per_sec, DeepSpeed's throughput-timer convention; the peer's
# samples_per_sec_mean). Table 1: samples/s (and tokens/s), zerotrain / PyTorch,
# and each tool's FLOP rate as a fraction of the sgemm peak that
# build/bench-sgemm measures here before and after the runs, the better of the
# two (FLOPs per sample: MLP 6 x linear
# weights; transformers (6 x matmul weights + 12 x layers x T x width) x T, plus
# the classifier head's 6 x weights once per sample). Table 2: zerotrain at
# STAGE_NP ranks under ZeRO stages 1, 2, 3 (DeepSpeed's defaults for every other
# zero_optimization key) as a ratio to stage 0.
#
# Modes `check` (make bench-check) and `record`: the short version (the MLP and
# the small transformers, fewer steps, np 1 and 2, stages at np 2), REPEAT=3
# rounds, each ratio (zerotrain / PyTorch, stage k / stage 0) the median of its
# 3 rounds: ratios, not absolute numbers, so that the machine's speed cancels.
# `record` writes them to BASELINE (scripts/bench-baseline.json) with the date,
# machine and commands; `check` measures them again and exits 1, with a table
# of which fell, when any is more than TOLERANCE (0.2: 20%) below its recorded
# value.
#
# Env: NP (default "1 2"); MODELS (names from the list above, or a prefix:
# "gptlite" is both GPT-lite rows; default all five, check/record: "mlp
# gptlite-small classifier-small"); STEPS (every model's steps, >= 3; default
# mlp 30, small 20, large 3, i.e. one timed step of 5-15 s on a 2-core machine,
# to keep make bench near 10 minutes; check/record: mlp 12, small 8); REPEAT
# (default 1, check/record 3); STAGES (default "1 2 3"; "" skips table 2);
# STAGE_NP (default 2); STAGE (ZeRO stage of table 1's zerotrain runs, default 0 = plain data
# parallelism, what DDP does); WIDTH, LAYERS, BATCH (the MLP: 1024, 8, 256);
# BASELINE; TOLERANCE; NOTE (record: a remark stored in the baseline);
# ZT_SHARED (default ../shared: the data is ZT_SHARED/data).
#   bash scripts/bench-cpu.sh          (or: make bench)
#   bash scripts/bench-cpu.sh check    (or: make bench-check)
#   bash scripts/bench-cpu.sh record   (re-records scripts/bench-baseline.json)
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
NP=${NP:-"1 2"}
WIDTH=${WIDTH:-1024}
LAYERS=${LAYERS:-8}
BATCH=${BATCH:-256}
STAGE=${STAGE:-0}
# nproc alone would answer OMP_NUM_THREADS.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

die() { echo "bench-cpu: error: $*" >&2; exit 1; }

MODE=${1:-${BENCH:-all}}
case "$MODE" in
all|mlp|check|--check|record|--record) ;;
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
*) die "unknown mode '$MODE' (modes: all, the default (mlp is its old name), check, record, adam)" ;;
esac
case "$MODE" in
check|--check) MODE=check ;;
record|--record) MODE=record ;;
*) MODE=all ;;
esac
SHORT=0; [ "$MODE" = all ] || SHORT=1

ALL_MODELS="mlp gptlite-small gptlite-large classifier-small classifier-large"
if [ "$SHORT" = 1 ]; then
    MODELS=${MODELS:-"mlp gptlite-small classifier-small"}
    REPEAT=${REPEAT:-3}
else
    MODELS=${MODELS:-$ALL_MODELS}
    REPEAT=${REPEAT:-1}
fi
STAGES=${STAGES-"1 2 3"}
STAGE_NP=${STAGE_NP:-2}
BASELINE=${BASELINE:-scripts/bench-baseline.json}
TOLERANCE=${TOLERANCE:-0.2}
DATA=${ZT_SHARED:-../shared}/data
TEXT=$DATA/tinyshakespeare/input.txt
CSV=$DATA/imdb/imdb-2500.csv

# MODELS: names or prefixes ("gptlite" = gptlite-small gptlite-large), in the
# order of ALL_MODELS.
SEL=()
for m in $ALL_MODELS; do
    for w in $MODELS; do
        if [ "$m" = "$w" ] || [[ "$m" == "$w"-* ]]; then SEL+=("$m"); break; fi
    done
done
for w in $MODELS; do
    ok=0
    for m in $ALL_MODELS; do { [ "$m" = "$w" ] || [[ "$m" == "$w"-* ]]; } && ok=1; done
    [ "$ok" = 1 ] || die "MODELS: unknown model '$w' (models: $ALL_MODELS, or a prefix such as gptlite)"
done
[ "${#SEL[@]}" -gt 0 ] || die "MODELS is empty"
for v in $NP $STAGE_NP $REPEAT; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "NP, STAGE_NP and REPEAT take positive integers, got '$v'"
done
for s in $STAGE $STAGES; do [[ "$s" =~ ^[0-3]$ ]] || die "STAGE and STAGES take ZeRO stages 0-3, got '$s'"; done
[ -z "${STEPS:-}" ] || [[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 3 ]] \
    || die "STEPS=$STEPS: need at least 3 (the first 2 steps are not timed)"
[[ "$TOLERANCE" =~ ^0?\.[0-9]+$ ]] || die "TOLERANCE=$TOLERANCE: give a fraction such as 0.2"

[ -x ./zerotrain ] && [ -x build/bench-sgemm ] || make --no-print-directory zerotrain build/bench-sgemm >&2 \
    || die "could not build ./zerotrain and build/bench-sgemm (run make)"
command -v mpirun >/dev/null || die "mpirun not found"
$PY -c 'import torch' 2>/dev/null || die "$PY has no torch (the PyTorch peers need it; Debian: python3-torch)"
case " ${SEL[*]} " in *" gptlite-"*) [ -f "$TEXT" ] || die "no $TEXT (tiny shakespeare; set ZT_SHARED)" ;; esac
case " ${SEL[*]} " in *" classifier-"*) [ -f "$CSV" ] || die "no $CSV (the IMDB sample; set ZT_SHARED)" ;; esac
if [ "$MODE" = check ]; then
    [ -f "$BASELINE" ] || die "no baseline $BASELINE: record one with 'bash scripts/bench-cpu.sh record'"
fi

TMP=$(mktemp -d /tmp/zt-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: > "$TMP/runs.tsv"
: > "$TMP/specs.tsv"
: > "$TMP/commands.txt"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# Other work on the machine moves single runs by 2x and more (a rank's OpenMP
# threads wait for a descheduled one at every parallel region): say so.
if awk -v l="${LOAD_START%% *}" -v c="$CORES" 'BEGIN { exit !(l > c / 2) }'; then
    echo "bench-cpu: warning: load average ${LOAD_START%% *} on $CORES cores before the runs:" \
         "other work is running, so the numbers will be noisy$([ "$MODE" = check ] &&
         echo "; rerun a failed check on a quiet machine before believing it")" >&2
fi

# Machine peak: sgemm on every core; the best of the measured shapes, and
# (measure_peak again after the runs) the better of the two measurements: a
# slow spell of a shared machine during one of them would otherwise put the
# trainers above 100% of a peak measured low.
measure_peak() {
    OMP_NUM_THREADS=$CORES OPENBLAS_NUM_THREADS=$CORES build/bench-sgemm >> "$TMP/sgemm.txt" \
        || die "build/bench-sgemm failed"
    PEAK=$(awk '{ if ($NF > p) p = $NF } END { print p }' "$TMP/sgemm.txt")
}
measure_peak

VOCAB=0
case " ${SEL[*]} " in *" gptlite-"*)
    VOCAB=$($PY -c 'import sys; print(len(set(open(sys.argv[1], encoding="utf-8").read())))' "$TEXT") \
        || die "could not read $TEXT as UTF-8" ;;
esac

# spec MODEL: sets LABEL SHAPE MB (global batch) SEQ (tokens per sample, 0 for
# the MLP) FLOPS (per sample, forward + backward) NSTEPS ZT_FLAGS PEER.
spec() {
    local l c h t ff
    case "$1" in
    mlp)
        LABEL="MLP"; SHAPE="W$WIDTH L$LAYERS"; MB=$BATCH; SEQ=0
        FLOPS=$(( 6 * LAYERS * WIDTH * WIDTH ))  # in = out = W: L linear layers of W x W
        NSTEPS=$([ "$SHORT" = 1 ] && echo 12 || echo 30)
        ZT_FLAGS=(--model mlp --width "$WIDTH" --layers "$LAYERS")
        PEER=(scripts/torch_mlp_peer.py --width "$WIDTH" --layers "$LAYERS")
        ;;
    gptlite-small|gptlite-large)
        if [ "$1" = gptlite-small ]; then l=4 c=128 h=4 t=128; NSTEPS=$([ "$SHORT" = 1 ] && echo 8 || echo 20)
        else l=6 c=384 h=6 t=256; NSTEPS=3; fi
        LABEL="GPT-lite ${1#gptlite-}"; SHAPE="${l}L C$c H$h T$t"; MB=16; SEQ=$t
        # q, k, v, proj, fc, fc_proj: 12 C^2 per layer; lm_head C x vocab
        FLOPS=$(( t * (6 * (l * 12 * c * c + c * VOCAB) + 12 * l * t * c) ))
        ZT_FLAGS=(--model gptlite --data "$TEXT" --n-layer $l --n-embd $c --n-head $h --block-size $t --dropout 0)
        PEER=(scripts/torch_transformer_cpu_peer.py --model gptlite --data "$TEXT" --n-layer $l
              --n-embd $c --n-head $h --block-size $t)
        ;;
    classifier-small|classifier-large)
        if [ "$1" = classifier-small ]; then l=2 c=128 h=4 ff=256 t=256; NSTEPS=$([ "$SHORT" = 1 ] && echo 8 || echo 20)
        else l=6 c=256 h=8 ff=1024 t=512; NSTEPS=3; fi
        LABEL="classifier ${1#classifier-}"; SHAPE="${l}L E$c H$h FF$ff T$t"; MB=16; SEQ=$t
        # in_proj 3E^2, out_proj E^2, linear1/2 2 E FF per layer and token; the
        # head (E x FF, FF x 2) once per sample on the pooled vector
        FLOPS=$(( t * (6 * l * (4 * c * c + 2 * c * ff) + 12 * l * t * c) + 6 * (c * ff + ff * 2) ))
        ZT_FLAGS=(--model classifier --data "$CSV" --n-layer $l --embed-dim $c --n-head $h
                  --hidden-dim $ff --max-len $t --dropout 0)
        PEER=(scripts/torch_transformer_cpu_peer.py --model classifier --data "$CSV" --n-layer $l
              --embed-dim $c --n-head $h --hidden-dim $ff --max-len $t)
        ;;
    *) die "internal: no spec for model '$1'" ;;
    esac
    NSTEPS=${STEPS:-$NSTEPS}
}

# done_line SAMPLES_PER_SEC T0: ends a run's progress line.
done_line() { printf ': %.2f samples/s, %d s\n' "${1:-0}" $(( SECONDS - $2 )) >&2; }

threads_for() { local t=$(( CORES / $1 )); [ "$t" -ge 1 ] && echo "$t" || echo 1; }

# run_zt MODEL NP STAGE ROUND: one zerotrain run; its report goes to runs.tsv.
run_zt() {
    local m=$1 np=$2 stage=$3 rep=$4 threads micro cfg tag over=()
    spec "$m"
    threads=$(threads_for "$np")
    (( MB % np == 0 )) || die "$m: batch $MB is not divisible by np=$np"
    micro=$(( MB / np ))
    cfg=$TMP/cfg-b$MB-np$np-s$stage.json
    cat > "$cfg" <<JSON
{"train_batch_size": $MB, "train_micro_batch_size_per_gpu": $micro, "gradient_clipping": 0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage}, "steps_per_print": 0}
JSON
    tag=zt-$m-np$np-s$stage-r$rep
    if [ "$np" -gt "$CORES" ]; then over=(--oversubscribe); fi
    # --bind-to none: Open MPI binds each rank to one core by default, which
    # would leave a rank's extra threads sharing that core.
    local cmd=(mpirun -np "$np" "${over[@]}" --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS
               ./zerotrain --config "$cfg" "${ZT_FLAGS[@]}" --steps "$NSTEPS" --seed 1
               --report "$TMP/$tag.json")
    printf 'bench-cpu: [%s/%s] zerotrain %s np=%s threads=%s stage=%s steps=%s' \
        "$rep" "$REPEAT" "$m" "$np" "$threads" "$stage" "$NSTEPS" >&2
    local t0=$SECONDS
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "${cmd[@]}" > "$TMP/$tag.log" 2>&1 \
        || { echo >&2; tail -n 30 "$TMP/$tag.log" >&2; die "zerotrain failed ($m np=$np stage=$stage): ${cmd[*]}"; }
    done_line "$(sed -n 's/.*"samples_per_sec": *\([0-9.]*\).*/\1/p' "$TMP/$tag.json" | head -n 1)" "$t0"
    printf '%s\t%s\t%s\tzt\t%s\t%s\n' "$m" "$np" "$stage" "$rep" "$TMP/$tag.json" >> "$TMP/runs.tsv"
    [ "$rep" != 1 ] || printf '%s\t%s\n' "OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads ${cmd[*]}" \
        "$(tr -s ' \n' ' ' < "$cfg")" >> "$TMP/commands.txt"
}

# run_torch MODEL NP ROUND: the PyTorch peer, as many steps, the first 2 untimed.
run_torch() {
    local m=$1 np=$2 rep=$3 threads tag
    spec "$m"
    threads=$(threads_for "$np")
    tag=torch-$m-np$np-r$rep
    local cmd=("$PY" "${PEER[@]}" --np "$np" --threads "$threads" --batch "$MB"
               --steps $(( NSTEPS - 2 )) --warmup 2)
    printf 'bench-cpu: [%s/%s] torch DDP %s np=%s threads=%s steps=%s' \
        "$rep" "$REPEAT" "$m" "$np" "$threads" "$NSTEPS" >&2
    local t0=$SECONDS
    OMP_NUM_THREADS=$threads "${cmd[@]}" > "$TMP/$tag.json" 2> "$TMP/$tag.log" \
        || { echo >&2; tail -n 30 "$TMP/$tag.log" >&2; die "torch peer failed ($m np=$np): ${cmd[*]}"; }
    done_line "$(sed -n 's/.*"samples_per_sec_mean": *\([0-9.]*\).*/\1/p' "$TMP/$tag.json" | tail -n 1)" "$t0"
    printf '%s\t%s\t0\ttorch\t%s\t%s\n' "$m" "$np" "$rep" "$TMP/$tag.json" >> "$TMP/runs.tsv"
    [ "$rep" != 1 ] || printf '%s\t\n' "OMP_NUM_THREADS=$threads ${cmd[*]}" >> "$TMP/commands.txt"
}

for m in "${SEL[@]}"; do
    spec "$m"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$LABEL" "$SHAPE" "$MB" "$NSTEPS" "$SEQ" "$FLOPS" >> "$TMP/specs.tsv"
done

# The report: tables (mode all), the baseline (record), the comparison (check).
cat > "$TMP/report.py" <<'PYEOF'
import datetime, json, os, platform, statistics, subprocess, sys

(mode, tmp, peak, cores, stage, stage_np, stages, repeat, baseline, tol, elapsed,
 load_start, note, nps) = sys.argv[1:]
peak, cores, stage, stage_np, repeat = float(peak), int(cores), int(stage), int(stage_np), int(repeat)
tol, stages = float(tol), [int(s) for s in stages.split() if int(s) != 0]
nps = [int(n) for n in nps.split()]

specs = {}
for line in open(f"{tmp}/specs.tsv"):
    m, label, shape, batch, steps, seq, flops = line.rstrip("\n").split("\t")
    specs[m] = dict(label=label, shape=shape, batch=int(batch), steps=int(steps),
                    seq=int(seq), flops=float(flops))

settings = {
    "stage": stage, "stage_np": stage_np, "repeat": repeat,
    "models": {m: {"shape": sp["shape"], "batch": sp["batch"], "steps": sp["steps"]}
               for m, sp in specs.items()},
}


def check_settings():
    """Dies (exit 1) when the baseline was recorded with other settings."""
    base = json.load(open(baseline))
    bs = base.get("settings", {})
    why = []
    if bs.get("stage") != stage or bs.get("stage_np") != stage_np:
        why.append(f"stage {bs.get('stage')} at np {bs.get('stage_np')} recorded, "
                   f"stage {stage} at np {stage_np} now")
    for m, s in settings["models"].items():
        b = bs.get("models", {}).get(m)
        if b is not None and b != s:
            why.append(f"{m}: recorded {b}, now {s}")
    if why:
        print(f"bench-cpu: error: {baseline} was recorded with other settings: " + "; ".join(why)
              + " (run with the recorded settings, or re-record: bash scripts/bench-cpu.sh record)",
              file=sys.stderr)
        sys.exit(1)


if mode == "precheck":
    check_settings()
    sys.exit(0)

runs = {}  # (model, np, stage, tool) -> {round: (samples/s, peer json or None)}
for line in open(f"{tmp}/runs.tsv"):
    m, np_, st, tool, rep, path = line.rstrip("\n").split("\t")
    if tool == "zt":
        rec = (float(json.load(open(path))["samples_per_sec"]), None)
    else:
        d = json.loads(open(path).read().strip().splitlines()[-1])
        rec = (float(d["samples_per_sec_mean"]), d)  # zerotrain's convention: after step 2
    runs.setdefault((m, int(np_), int(st), tool), {})[int(rep)] = rec


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ratio_runs(num, den):
    """Per-round ratios num/den over the rounds both have."""
    a, b = runs.get(num, {}), runs.get(den, {})
    return [a[r][0] / b[r][0] for r in sorted(a) if r in b]


def sps(key):
    return med([v[0] for v in runs.get(key, {}).values()])


ratios = {}  # name -> list of per-round values
for m in specs:
    for n in nps:
        ratios[f"{m} np{n} zerotrain/pytorch"] = ratio_runs((m, n, stage, "zt"), (m, n, 0, "torch"))
    for s in stages:
        ratios[f"{m} np{stage_np} stage{s}/stage0"] = ratio_runs((m, stage_np, s, "zt"),
                                                                 (m, stage_np, 0, "zt"))
ratios = {k: v for k, v in ratios.items() if v}


def fmt_ratio(vals):
    s = f"{med(vals):.2f}x"
    if len(vals) > 1:
        s += f" ({min(vals):.2f}-{max(vals):.2f})"
    return s


cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
           platform.processor() or "unknown CPU")
torch_version = next((v[1]["torch"] for k, r in runs.items() if k[3] == "torch"
                      for v in r.values()), "?")
load_now = open("/proc/loadavg").read().split()[0]
frac = lambda s, m: 100.0 * s * specs[m]["flops"] / (peak * 1e9)
rounds = f"median of {repeat} rounds" if repeat > 1 else "one round"

if mode == "all":
    print()
    print(f"CPU benchmark: zerotrain vs PyTorch {torch_version} DDP (gloo), fp32 AdamW, dropout 0, "
          f"no gradient clipping, zerotrain at ZeRO stage {stage}; threads per rank = cores / ranks; "
          f"{rounds}.")
    print(f"Machine: {cpu}, {cores} cores; sgemm peak {peak:g} GFLOP/s on {cores} threads "
          f"(build/bench-sgemm); load average {load_start.split()[0]} before the runs, "
          f"{load_now} after.")
    print()
    print("| model | shape | batch | steps | ranks | threads/rank | zerotrain samples/s | zerotrain tokens/s "
          "| PyTorch samples/s | zerotrain / PyTorch | zerotrain % of sgemm peak | PyTorch % of sgemm peak |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    medians, pads = [], []
    for m, sp in specs.items():
        for n in nps:
            z, t = sps((m, n, stage, "zt")), sps((m, n, 0, "torch"))
            tok = f"{z * sp['seq']:,.0f}" if sp["seq"] else "-"
            print(f"| {sp['label']} | {sp['shape']} | {sp['batch']} | {sp['steps']} | {n} | "
                  f"{max(1, cores // n)} | {z:,.1f} | {tok} | {t:,.1f} | "
                  f"{fmt_ratio(ratios.get(f'{m} np{n} zerotrain/pytorch', []))} | "
                  f"{frac(z, m):.1f}% | {frac(t, m):.1f}% |")
            peer = [v[1] for v in runs.get((m, n, 0, "torch"), {}).values()]
            medians.append(f"{sp['label']} np {n} {med([p['samples_per_sec'] for p in peer]):,.1f}")
            pads += [f"{sp['label']} np {n} {p['mean_padded_len']:.0f}" for p in peer[:1]
                     if "mean_padded_len" in p]
    print()
    print("Both tools run the same steps and are timed over the steps after the first 2 (zerotrain: "
          "its --report samples_per_sec, DeepSpeed's throughput timer; PyTorch: the mean step time "
          "of the same steps). The PyTorch peer's samples/s from its median step instead: "
          + ", ".join(medians) + ".")
    print("FLOPs per sample (forward + backward): MLP 6 x linear weights; transformers "
          "(6 x matmul weights + 12 x layers x T x width) x T, i.e. the weight GEMMs and the "
          "attention scores and weighted sums per token (the full T x T, causal or not), with "
          "T = block size (GPT-lite) or max_len (classifier), plus the classifier head's "
          "6 x weights once per sample; % of peak = FLOPs per sample x samples/s / sgemm peak.")
    if pads:
        print(f"Classifier tokens are padded tokens: each micro-batch is padded to its longest "
              f"review, which is max_len for almost every batch here (PyTorch's mean padded "
              f"length: {', '.join(pads)}); tokens/s = samples/s x T.")
    if stages:
        print()
        print(f"ZeRO stages: zerotrain at {stage_np} ranks, samples/s and the ratio to stage 0 "
              f"(DeepSpeed's defaults for the other zero_optimization keys; {rounds}).")
        print()
        print("| model | shape | stage 0 samples/s | " + " | ".join(f"stage {s}" for s in stages) + " |")
        print("|---|---|---:|" + "---:|" * len(stages))
        for m, sp in specs.items():
            cells = [f"{sps((m, stage_np, s, 'zt')):,.1f} "
                     f"({fmt_ratio(ratios.get(f'{m} np{stage_np} stage{s}/stage0', []))})"
                     for s in stages]
            print(f"| {sp['label']} | {sp['shape']} | {sps((m, stage_np, 0, 'zt')):,.1f} | "
                  + " | ".join(cells) + " |")
    sys.exit(0)

commands = []
for line in open(f"{tmp}/commands.txt"):
    cmd, cfg = line.rstrip("\n").split("\t")
    cmd = cmd.replace(tmp + "/", "$TMP/")
    commands.append({"run": cmd, **({"config": json.loads(cfg)} if cfg.strip() else {})})
now = {k: med(v) for k, v in ratios.items()}

if mode == "record":
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    doc = {
        "what": "ratios of scripts/bench-cpu.sh check: zerotrain/pytorch (samples/s, same "
                "model, batch, steps and threads) and stageK/stage0 (zerotrain at stage_np "
                "ranks), each the median of `repeat` rounds; make bench-check fails when one "
                "falls more than its tolerance below the value here",
        "recorded": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": "bash scripts/bench-cpu.sh record",
        "commit": commit,
        "machine": {"cpu": cpu, "cores": cores, "host": platform.node(),
                    "sgemm_peak_gflops": peak, "torch": torch_version,
                    "loadavg_before": load_start,
                    "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3])},
        "elapsed_s": int(elapsed),
        "tolerance": tol,
        "note": note,
        "settings": settings,
        "commands": commands,
        "ratios": {k: {"median": round(now[k], 4), "rounds": [round(x, 4) for x in v]}
                   for k, v in ratios.items()},
    }
    with open(baseline, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print()
    print(f"bench-cpu: recorded {len(now)} ratios in {baseline} ({rounds}):")
    print()
    print("| ratio | median | rounds |")
    print("|---|---:|---|")
    for k, v in ratios.items():
        print(f"| {k} | {now[k]:.3f} | {' '.join(f'{x:.3f}' for x in v)} |")
    sys.exit(0)

# check
check_settings()
base = json.load(open(baseline))
recorded = {k: v["median"] for k, v in base.get("ratios", {}).items()}
print()
print(f"bench-check: ratios now ({rounds}) against {baseline} (recorded {base.get('recorded')} "
      f"on {base.get('machine', {}).get('cpu')}, {base.get('machine', {}).get('cores')} cores, "
      f"commit {base.get('commit')}); a ratio fails when now / recorded < {1 - tol:.2f}. "
      f"Load average {load_start.split()[0]} before the runs, {load_now} after "
      f"({base.get('machine', {}).get('loadavg_before', '?').split()[0]} when recorded).")
print()
print("| ratio | recorded | now | rounds | now / recorded | |")
print("|---|---:|---:|---|---:|---|")
fell = []
for k, v in ratios.items():
    r = recorded.get(k)
    if r is None:
        print(f"| {k} | - | {now[k]:.3f} | {' '.join(f'{x:.3f}' for x in v)} | - | not in baseline |")
        continue
    rel = now[k] / r
    bad = rel < 1 - tol
    if bad:
        fell.append(k)
    print(f"| {k} | {r:.3f} | {now[k]:.3f} | {' '.join(f'{x:.3f}' for x in v)} | {rel:.2f} | "
          f"{'**FELL**' if bad else 'ok'} |")
missing = [k for k in recorded if k not in ratios]
print()
if missing:
    print(f"not measured this time (MODELS, NP or STAGES): {', '.join(missing)}")
if fell:
    print(f"bench-check: FAILED: {len(fell)} of {sum(k in recorded for k in now)} ratios fell more than {tol:.0%} below "
          f"the baseline: {', '.join(fell)}")
    sys.exit(1)
compared = [k for k in now if k in recorded]
if not compared:
    print(f"bench-cpu: error: none of the measured ratios is in {baseline}", file=sys.stderr)
    sys.exit(1)
print(f"bench-check: ok: {len(compared)} ratios within {tol:.0%} of the baseline (or above it)"
      + (f"; {len(now) - len(compared)} not in it" if len(compared) < len(now) else ""))
PYEOF
if [ "$MODE" = check ]; then  # before any run: a baseline of other settings is no use
    $PY "$TMP/report.py" precheck "$TMP" "$PEAK" "$CORES" "$STAGE" "$STAGE_NP" "$STAGES" "$REPEAT" \
        "$BASELINE" "$TOLERANCE" 0 "" "" "$NP"
fi

# Round-robin: every round runs every model once, so that a slow spell of the
# machine spreads over the models instead of hitting one model's rounds.
for rep in $(seq 1 "$REPEAT"); do
    for m in "${SEL[@]}"; do
        have_stage0=0
        for np in $NP; do
            run_zt "$m" "$np" "$STAGE" "$rep"
            run_torch "$m" "$np" "$rep"
            if [ "$np" = "$STAGE_NP" ] && [ "$STAGE" = 0 ]; then have_stage0=1; fi
        done
        [ -n "$STAGES" ] || continue
        [ "$have_stage0" = 1 ] || run_zt "$m" "$STAGE_NP" 0 "$rep"
        for s in $STAGES; do
            [ "$s" = 0 ] || run_zt "$m" "$STAGE_NP" "$s" "$rep"
        done
    done
done

measure_peak
$PY "$TMP/report.py" "$MODE" "$TMP" "$PEAK" "$CORES" "$STAGE" "$STAGE_NP" "$STAGES" "$REPEAT" "$BASELINE" \
    "$TOLERANCE" "$SECONDS" "$LOAD_START" "${NOTE:-}" "$NP"
echo "bench-cpu: finished ($MODE mode) in $SECONDS s" >&2
