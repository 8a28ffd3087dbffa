#!/usr/bin/env bash
# bench-comm: is zerotrain's MPI communicator as fast as plain MPI, and does
# overlap_comm overlap? (make bench-comm; docs/benchmarks.md has the tables.)
#
# Table 1, for each world size in COMM_NP (default "2 4"): build/bench-comm
# (scripts/bench_comm.c) on buffers of 1 KB to MAX_BYTES (default 64 MB, x4
# steps): all_reduce, reduce_scatter and all_gather in fp32, each timed as the
# blocking MPI call (Open MPI's tuned algorithms), the non-blocking MPI call
# and MPI_Wait, zerotrain's blocking collective (a task of its comm thread,
# engine/comm/worker.c, that the caller sleeps on) and zerotrain's
# non-blocking one (issued, then waited for). Medians of ITERS (default 10)
# of the slowest rank's time, with the ratio of each zerotrain column to
# blocking MPI.
#
# Table 2: what overlap does to backward. The benchmark MLP (W1024 L8, batch
# 256, fp32 AdamW, threads per rank = cores / ranks) at OVERLAP_NP ranks
# (default 2), ZeRO stages OVERLAP_STAGES (default "0 2 3"), with
# overlap_comm false and true, reduce_bucket_size BUCKET (default 2e6
# elements, about two of the MLP's layers: at DeepSpeed's 5e8 one bucket
# holds the whole model, and stage 0 can only issue it when backward is
# over; DeepSpeed's defaults otherwise), STEPS steps
# (default 20) each, ROUNDS rounds (default 3) alternating the two settings.
# Per setting, the median over the timed steps (all but the first 2) of
# wall_clock_breakdown's per-step milliseconds: bwd_inner (the backward pass,
# with the buckets it issues), bwd_allreduce (the wait for what is left at
# its end) and bwd = their sum, then the median over rounds; and samples/s
# from --report. Overlap works when bwd_allreduce shrinks by more than
# bwd_inner grows.
#
#   bash scripts/bench-comm.sh          (or: make bench-comm)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=/usr/bin/python3
COMM_NP=${COMM_NP:-"2 4"}
MAX_BYTES=${MAX_BYTES:-67108864}
ITERS=${ITERS:-10}
OVERLAP_NP=${OVERLAP_NP:-2}
OVERLAP_STAGES=${OVERLAP_STAGES:-"0 2 3"}
BUCKET=${BUCKET:-2000000}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
# nproc alone would answer OMP_NUM_THREADS.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

die() { echo "bench-comm: error: $*" >&2; exit 1; }

for v in MAX_BYTES ITERS OVERLAP_NP BUCKET STEPS ROUNDS; do
    [[ "${!v}" =~ ^[0-9]+$ && "${!v}" -ge 1 ]] || die "$v=${!v}: give a positive integer"
done
[ "$STEPS" -ge 3 ] || die "STEPS=$STEPS: need at least 3 (the first 2 steps are not timed)"
for s in $OVERLAP_STAGES; do [[ "$s" =~ ^[0-3]$ ]] || die "OVERLAP_STAGES takes ZeRO stages 0-3, got '$s'"; done
(( 256 % OVERLAP_NP == 0 )) || die "OVERLAP_NP=$OVERLAP_NP does not divide the batch of 256"
command -v mpirun >/dev/null || die "mpirun not found"
make --no-print-directory zerotrain build/bench-comm >&2 || die "could not build ./zerotrain and build/bench-comm"

# As the tests run Open MPI (tests/env.sh): as root when CI is, over shared memory.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v c="$CORES" 'BEGIN { exit !(l > c / 2) }'; then
    echo "bench-comm: warning: load average $load on $CORES cores: timings will be noisy" >&2
fi
TMP=$(mktemp -d /tmp/zt-bench-comm.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

echo "## Collectives: zerotrain's MPI comm against plain MPI"
echo
for np in $COMM_NP; do
    over=(); [ "$np" -le "$CORES" ] || over=(--oversubscribe)
    echo "bench-comm: build/bench-comm at np $np" >&2
    OMP_NUM_THREADS=1 mpirun -np "$np" "${over[@]}" --bind-to none build/bench-comm \
        --max-bytes "$MAX_BYTES" --iters "$ITERS" || die "build/bench-comm failed at np $np"
    echo
done

threads=$(( CORES / OVERLAP_NP )); [ "$threads" -ge 1 ] || threads=1
over=(); [ "$OVERLAP_NP" -le "$CORES" ] || over=(--oversubscribe)
for r in $(seq "$ROUNDS"); do
    for s in $OVERLAP_STAGES; do
        for ov in false true; do
            tag=s$s-$ov-r$r
            cat >"$TMP/$tag.json" <<JSON
{"train_batch_size": 256, "gradient_clipping": 0, "wall_clock_breakdown": true, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $s, "overlap_comm": $ov, "reduce_bucket_size": $BUCKET}}
JSON
            echo "bench-comm: [$r/$ROUNDS] MLP np $OVERLAP_NP stage $s overlap_comm $ov" >&2
            OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads mpirun -np "$OVERLAP_NP" \
                "${over[@]}" --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
                ./zerotrain --config "$TMP/$tag.json" --model mlp --width 1024 --layers 8 \
                --steps "$STEPS" --seed 1 --report "$TMP/$tag.report.json" >"$TMP/$tag.log" 2>&1 \
                || { tail -n 20 "$TMP/$tag.log" >&2; die "zerotrain failed (stage $s, overlap_comm $ov)"; }
        done
    done
done

echo "## overlap_comm: backward of the benchmark MLP at np $OVERLAP_NP"
echo
$PY - "$TMP" "$ROUNDS" "$OVERLAP_NP" "$threads" "$STEPS" "$BUCKET" $OVERLAP_STAGES <<'EOF'
import json, re, statistics, sys
tmp, rounds, np_, threads, steps, bucket = sys.argv[1:7]
rounds, stages = int(rounds), sys.argv[7:]
med = statistics.median

def run(tag):
    rows = []
    for line in open(f"{tmp}/{tag}.log"):
        if "time (ms)" in line:
            rows.append({k: float(v) for k, v in re.findall(r"(\w+): ([0-9.]+)", line)})
    rows = rows[2:]  # DeepSpeed's timer skips the first two steps, as --report does
    if not rows:
        sys.exit(f"bench-comm: no timed wall_clock_breakdown lines in {tag}.log")
    sps = json.load(open(f"{tmp}/{tag}.report.json"))["samples_per_sec"]
    return {k: med(r[k] for r in rows) for k in ("fwd", "bwd_inner", "bwd_allreduce", "bwd", "step")}, sps

print(f"MLP W1024 L8, batch 256, fp32 AdamW, reduce_bucket_size {int(bucket):,}, {threads} "
      f"thread(s) per rank, {steps} steps; ms per step: medians over the timed steps, then "
      f"over {rounds} round(s)")
print()
print("| stage | overlap_comm | fwd | bwd_inner | bwd_allreduce | bwd | samples/s | bwd: true / false |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for s in stages:
    got = {}
    for ov in ("false", "true"):
        runs = [run(f"s{s}-{ov}-r{r}") for r in range(1, rounds + 1)]
        t = {k: med(x[0][k] for x in runs) for k in runs[0][0]}
        got[ov] = (t, med(x[1] for x in runs))
    for ov in ("false", "true"):
        t, sps = got[ov]
        ratio = f"{got['true'][0]['bwd'] / got['false'][0]['bwd']:.2f}" if ov == "true" else ""
        print(f"| {s} | {ov} | {t['fwd']:.1f} | {t['bwd_inner']:.1f} | {t['bwd_allreduce']:.1f} | "
              f"{t['bwd']:.1f} | {sps:,.1f} | {ratio} |")
EOF
