#!/usr/bin/env bash
# Threads per rank without OMP_NUM_THREADS (engine/world/threads.h): each rank
# takes the cores it may run on (its affinity, capped by a cgroup CPU quota)
# divided by the ranks of its host that share them, and rank 0 says so once;
# the expected numbers come from Python's os.sched_getaffinity and the cgroup
# files. A rank mpirun binds to its own core shares it with no one. An
# OMP_NUM_THREADS that oversubscribes the cores is named; one that does not is
# silent.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

echo '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' >"$tmp/c.json"
m=(./zerotrain --config "$tmp/c.json" --model mlp --width 32 --layers 3 --steps 2)
cores=$($ZT_PYTHON - <<'PY'
import math, os
n = len(os.sched_getaffinity(0))
for path in ("/sys/fs/cgroup/cpu.max",):
    try:
        q, p = open(path).read().split()
        if q != "max":
            n = min(n, math.ceil(int(q) / int(p)))
    except (OSError, ValueError):
        pass
try:
    q = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
    p = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
    if q > 0:
        n = min(n, math.ceil(q / p))
except (OSError, ValueError):
    pass
print(n)
PY
)
want=$((cores / 2 > 0 ? cores / 2 : 1))
expect 0 "zerotrain: OMP_NUM_THREADS is not set: $want thread(s) per rank ($cores core(s) shared by 2 rank(s) on this host)" -- \
    env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS $ZT_MPIRUN -np 2 "${m[@]}"
[ "$(grep -c 'OMP_NUM_THREADS is not set' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "the thread line is not printed once"; }
expect 0 "OMP_NUM_THREADS is not set: $cores thread(s) per rank ($cores core(s) shared by 1 rank(s)" -- \
    env -u OMP_NUM_THREADS "${m[@]}"
if [ "$cores" -ge 2 ]; then
    # Open MPI binds each of 2 ranks to its own core by default.
    expect 0 "OMP_NUM_THREADS is not set: 1 thread(s) per rank (1 core(s) shared by 1 rank(s)" -- \
        env -u OMP_NUM_THREADS mpirun -np 2 --bind-to core "${m[@]}"
    expect 0 "OMP_NUM_THREADS=$cores x 2 rank(s) is more threads than the $cores core(s) they share" -- \
        env OMP_NUM_THREADS=$cores $ZT_MPIRUN -np 2 "${m[@]}"
fi
expect 0 "zerotrain: done: 2 steps" -- env OMP_NUM_THREADS=1 $ZT_MPIRUN -np 2 "${m[@]}"
grep -q "OMP_NUM_THREADS" "$tmp/out" && { cat "$tmp/out"; fail "OMP_NUM_THREADS=1 at np 2 is not worth a line"; }
echo "ok: threads per rank: $want of $cores cores at np 2"
