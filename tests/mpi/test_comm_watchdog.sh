#!/usr/bin/env bash
# The collective watchdog (ZT_COMM_TIMEOUT). build/tests/comm-check stall
# (tests/tools/comm_check.c) runs with ZT_COMM_TIMEOUT=2: the last rank sleeps
# 15 s before an all_reduce the others enter at once. Through the MPI comm
# (blocking and non-blocking) and the staged comm: the job fails (non-zero
# exit), a waiting rank's message names the collective and its sequence number
# ("all_reduce #3"), its rank, ZT_COMM_TIMEOUT and the sleeper, the one rank
# that did not answer the peers' probe, with its host; and the job ends well before
# the sleeper wakes (the others print and MPI_Abort, as zerotrain does). Also:
# ZT_COMM_TIMEOUT=abc is refused with a message naming the variable.
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

set +e
ZT_COMM_TIMEOUT=abc timeout 60 $ZT_MPIRUN -x ZT_COMM_TIMEOUT -np 1 "$tool" >"$tmp/out" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$tmp/out"; fail "ZT_COMM_TIMEOUT=abc: exit $rc"; }
grep -qF 'ZT_COMM_TIMEOUT=abc is not a number of seconds' "$tmp/out" ||
    { cat "$tmp/out"; fail "ZT_COMM_TIMEOUT=abc: no clear error"; }
echo "ok: ZT_COMM_TIMEOUT=abc refused (exit $rc)"
