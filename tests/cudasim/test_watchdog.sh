#!/usr/bin/env bash
# The NCCL watchdog (engine/comm/nccl.c, ZT_COMM_TIMEOUT) on the simulator,
# GPT-lite at np 2, stage 2, --device cuda --comm nccl.
#  1. A stalled collective stops the job: ZT_SIM_NCCL_STALL=1:13 makes rank
#     1's 13th collective (the 5 warm-ups, then training's 8th, a
#     reduce-scatter) start and never progress, as a peer stuck inside NCCL.
#     With ZT_COMM_TIMEOUT=2 the job must fail (non-zero, not timeout(1)'s
#     124) well before the simulator's own hang report (ZT_SIM_NCCL_TIMEOUT,
#     120 s), with a rank's message naming the collective and the limit.
#  2. Queued compute does not count: every kernel sleeps 40 ms
#     (ZT_SIM_KERNEL_DELAY_US), so the host issues collectives seconds before
#     the device reaches them. With ZT_COMM_TIMEOUT=1 the job must finish, and
#     the simulator's stats must show a collective queued longer than that
#     limit (else the case tests nothing): a clock started at the host's call
#     would have ended this healthy job.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

cat >"$tmp/c.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000, "allgather_bucket_size": 3000,
                       "overlap_comm": true}}
JSON
gpt=("$ZT_BIN" --config "$tmp/c.json" --model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
     --n-layer 2 --n-embd 32 --n-head 4 --block-size 16 --seed 11 $ZT_DEVICE_FLAGS)

t0=$(date +%s.%N)
set +e
ZT_COMM_TIMEOUT=2 timeout 100 $ZT_MPIRUN -np 2 -x ZT_COMM_TIMEOUT -x ZT_SIM_NCCL_STALL=1:13 \
    "${gpt[@]}" --steps 20 >"$tmp/out" 2>&1
rc=$?
set -e
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ "$rc" != 0 ] || { cat "$tmp/out"; fail "the stalled job succeeded: no watchdog"; }
[ "$rc" != 124 ] || { cat "$tmp/out"; fail "the stalled job hung until timeout(1)"; }
! grep -q "NCCL hang" "$tmp/out" || { cat "$tmp/out"; fail "the simulator's hang report ended it, not the watchdog"; }
for pattern in 'error: NCCL reduce_scatter #8 (3000 elements, fp32) did not complete within 2' \
               'ZT_COMM_TIMEOUT=2 s is the limit'; do
    grep -qF -- "$pattern" "$tmp/out" || { cat "$tmp/out"; fail "no '$pattern' in the output"; }
done
awk -v w="$wall" 'BEGIN { exit !(w < 30) }' || { cat "$tmp/out"; fail "the stalled job took $wall s"; }
echo "ok: a stalled collective ended the job (exit $rc) after $wall s: $(grep -m1 'did not complete' "$tmp/out")"

ZT_COMM_TIMEOUT=1 timeout 120 $ZT_MPIRUN -np 2 -x ZT_COMM_TIMEOUT -x ZT_SIM_KERNEL_DELAY_US=40000 \
    -x ZT_SIM_STATS=1 "${gpt[@]}" --steps 1 >"$tmp/out" 2>&1 ||
    { cat "$tmp/out"; fail "a slow device's healthy job was stopped"; }
grep -q "zt-sim: error" "$tmp/out" && { cat "$tmp/out"; fail "the simulator reported an error"; }
queued=$(sed -n 's/^zt-sim: stats: a collective waited up to \([0-9.]*\) s.*/\1/p' "$tmp/out" | sort -g | tail -n 1)
[ -n "$queued" ] || { cat "$tmp/out"; fail "no simulator stats"; }
awk -v q="$queued" 'BEGIN { exit !(q > 1.2) }' ||
    fail "collectives queued at most $queued s: the device did not fall behind the 1 s limit"
echo "ok: a collective queued $queued s behind compute did not trip ZT_COMM_TIMEOUT=1"
echo "cudasim: the NCCL watchdog stops a stalled collective and ignores queued compute"
