#!/usr/bin/env bash
# The MPI communicator's collectives in fp32, fp16 and bf16, blocking and
# non-blocking, at np 1 to 4: build/tests/comm-check (tests/tools/comm_check.c,
# built by `make unit-test`) checks each result against a reference it
# computes itself and the byte counters against elements x dtype size, and
# exits non-zero on any rank's failure.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh

tool=build/tests/comm-check
[ -x "$tool" ] || fail "$tool is missing; build it with: make unit-test"
for np in 1 2 3 4; do
    timeout 120 $ZT_MPIRUN -np "$np" "$tool" || fail "$tool at np $np (output above)"
    echo "ok: np $np"
done
