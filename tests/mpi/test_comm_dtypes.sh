#!/usr/bin/env bash
# The communicators' collectives in fp32, fp16 and bf16, blocking and
# non-blocking, at np 1 to 4: build/tests/comm-check (tests/tools/comm_check.c,
# built by `make unit-test`) checks each result against a reference it
# computes itself, the byte counters against elements x dtype size and the
# sequence numbers, and exits non-zero on any rank's failure. It does so for
# the MPI comm and for the staged comm (on the CPU backend, which stages
# through host buffers like it does on a GPU: same results, same counters),
# then checks the bootstrap of device communicators with fake id and join
# functions, failures on rank 0 and on the last rank included.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh

tool=build/tests/comm-check
[ -x "$tool" ] || fail "$tool is missing; build it with: make unit-test"
for mode in mpi staged bootstrap; do
    for np in 1 2 3 4; do
        timeout 120 $ZT_MPIRUN -np "$np" "$tool" "$mode" ||
            fail "$tool $mode at np $np (output above)"
        echo "ok: $mode at np $np"
    done
done
