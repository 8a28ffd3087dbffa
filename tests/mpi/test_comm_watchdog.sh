#!/usr/bin/env bash
# The collective watchdog (ZT_COMM_TIMEOUT). build/tests/comm-check stall
# (tests/tools/comm_check.c) runs with ZT_COMM_TIMEOUT=2: the last rank sleeps
# 15 s before an all_reduce the others enter at once. Through the MPI comm
# (blocking and non-blocking) and the staged comm: the job fails (non-zero
# exit), a waiting rank's message names the collective and its sequence number
# ("all_reduce #3"), its rank, ZT_COMM_TIMEOUT and the sleeper, the one rank
# that did not answer the peers' probe, with its host; and the job ends well before
# the sleeper wakes (the others print and MPI_Abort, as zerotrain does). The
# same for zerotrain with a rank stalled as a checkpoint save starts
# (ZT_CKPT_STALL_RANK): the agreement on the save is under the watchdog too.
# Also: ZT_COMM_TIMEOUT=abc is refused with a message naming the variable.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh

tool=build/tests/comm-check
[ -x "$tool" ] || fail "$tool is missing; build it with: make unit-test"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The sleeper's 15 s start after MPI's start-up; a job that ends within
# max_s of its launch did not wait for it.
max_s=9
stall() { # np, comm-check stall arguments...
    local np=$1; shift
    local t0 t1 rc
    t0=$(date +%s.%N)
    set +e
    ZT_COMM_TIMEOUT=2 timeout 60 $ZT_MPIRUN -x ZT_COMM_TIMEOUT -np "$np" "$tool" stall "$@" \
        >"$tmp/out" 2>&1
    rc=$?
    set -e
    t1=$(date +%s.%N)
    local wall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    [ "$rc" != 0 ] || { cat "$tmp/out"; fail "stall $*: the job succeeded: no watchdog"; }
    [ "$rc" != 124 ] || { cat "$tmp/out"; fail "stall $*: the job hung until timeout(1)"; }
    for pattern in 'error: MPI all_reduce #3 (4096 elements, fp16) did not complete within 2' \
                   'on rank 0 of' 'ZT_COMM_TIMEOUT=2 s is the limit' \
                   "; rank $((np - 1)) (host $(hostname)) did not answer a probe within 1.0 s"; do
        grep -qF -- "$pattern" "$tmp/out" ||
            { cat "$tmp/out"; fail "stall $*: no '$pattern' in the output"; }
    done
    awk -v w="$wall" -v m="$max_s" 'BEGIN { exit !(w < m) }' ||
        { cat "$tmp/out"; fail "stall $*: the job took ${wall} s, want < ${max_s} s"; }
    echo "ok: stall ${*:-mpi} at np $np: exit $rc after ${wall} s"
}
stall 3
stall 2 nonblocking
stall 2 staged

# A peer lost in the middle of a checkpoint save: ZT_CKPT_STALL_RANK=1 makes
# rank 1 sleep 30 s as its first save starts (step 3). Rank 0's agreement on
# the save runs under the watchdog too: it fails after 2 s naming it and the
# rank that did not answer, the job ends (MPI_Abort, exit 1) long before the
# sleeper wakes, and nothing is published as `latest`.
cat >"$tmp/c.json" <<JSON
{"train_batch_size": 16, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}}
JSON
t0=$(date +%s.%N)
set +e
ZT_COMM_TIMEOUT=2 ZT_CKPT_STALL_RANK=1 timeout 60 $ZT_MPIRUN -x ZT_COMM_TIMEOUT -x ZT_CKPT_STALL_RANK \
    -np 2 ./zerotrain --config "$tmp/c.json" --model mlp --width 64 --layers 4 --steps 10 \
    --save-interval 3 --save-dir "$tmp/ck" >"$tmp/out" 2>&1
rc=$?
set -e
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ "$rc" = 1 ] || { cat "$tmp/out"; fail "stalled save: exit $rc, want 1"; }
for pattern in "error: MPI all_reduce of the ranks' status (checkpoint) did not complete within 2" \
               "on rank 0 of 2; rank 1 (host $(hostname)) did not answer a probe"; do
    grep -qF -- "$pattern" "$tmp/out" || { cat "$tmp/out"; fail "stalled save: no '$pattern'"; }
done
[ ! -e "$tmp/ck/latest" ] || fail "stalled save: $tmp/ck/latest was published"
awk -v w="$wall" -v m="$max_s" 'BEGIN { exit !(w < m + 3) }' ||
    { cat "$tmp/out"; fail "stalled save: the job took ${wall} s, want < $((max_s + 3)) s"; }
echo "ok: a rank stalled in a checkpoint save: exit 1 after ${wall} s, the watchdog named it"

set +e
ZT_COMM_TIMEOUT=abc timeout 60 $ZT_MPIRUN -x ZT_COMM_TIMEOUT -np 1 "$tool" >"$tmp/out" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$tmp/out"; fail "ZT_COMM_TIMEOUT=abc: exit $rc"; }
grep -qF "ZT_COMM_TIMEOUT='abc' is not a number of seconds" "$tmp/out" ||
    { cat "$tmp/out"; fail "ZT_COMM_TIMEOUT=abc: no clear error"; }
echo "ok: ZT_COMM_TIMEOUT=abc refused (exit $rc)"
