#!/usr/bin/env bash
# zerotrain check, the preflight, started with a job's own mpirun line and flags:
#  1. one host, np 2 (GPT-lite with --data): exit 0; the hosts, ranks and
#     devices, the communicator and why, MPI's yield setting (zerotrain's
#     default 1; a user's 0 kept); the files' hashes; a bandwidth table
#     for the world from 1 KB to --max-bytes with every row's busbw = algbw x
#     nccl-tests' factor (2(n-1)/n all_reduce, (n-1)/n all_gather and
#     reduce_scatter) and algbw = bytes / time, as printed; no inter-host table;
#  2. mismatches, exit 2 naming what differs and the rank: an MPMD line whose
#     second rank reads another --data file, another --config file, or another
#     --seed (the same files); a bad --max-bytes is a usage error;
#  3. 2 hosts x 2 ranks of scripts/netns-cluster.sh: 2 hosts with ranks 0-1
#     and 2-3, node groups = the hosts, and three tables: world (4 ranks),
#     intra-host (2), inter-host (2).
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

cat >"$tmp/c.json" <<JSON
{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
cp "$tmp/c.json" "$tmp/c2.json"
echo ' ' >>"$tmp/c2.json"
head -c 20000 "$ZT_SHARED/data/tinyshakespeare/input.txt" >"$tmp/a.txt"
head -c 30000 "$ZT_SHARED/data/tinyshakespeare/input.txt" >"$tmp/b.txt"
cp "$tmp/a.txt" "$tmp/a-copy.txt"
gpt=(--model gptlite --n-layer 2 --n-embd 32 --n-head 2 --block-size 32 --device cpu)

# The tables of a check's output: every row's columns against the formulas.
tables_check() { # output want-tables(name:ranks,...) max-bytes
    $ZT_PYTHON - "$@" <<'PY'
import re, sys
text, want, max_bytes = open(sys.argv[1]).read(), sys.argv[2].split(","), int(sys.argv[3])
factor = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n}
ops = ["all_reduce", "all_gather", "reduce_scatter"]
titles = re.findall(r"^(world|intra-host|inter-host)\b.*: (\d+) rank\(s\)$", text, re.M)
got = [f"{t}:{n}" for t, n in titles]
if got != want:
    sys.exit(f"FAIL: tables {got}, expected {want}")
blocks = re.split(r"^(?:world|intra-host|inter-host)\b.*rank\(s\)$", text, flags=re.M)[1:]
for (title, n), block in zip(titles, blocks):
    n = int(n)
    rows = [l.split() for l in block.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\|", l)]
    sizes = [int(r[0]) for r in rows]
    nominal = [1024 << i for i in range(len(rows))]
    if not rows or nominal[-1] > max_bytes or nominal[-1] * 2 <= max_bytes:
        sys.exit(f"FAIL: {title}: {len(rows)} rows for 1 KB..{max_bytes}")
    for s, nom in zip(sizes, nominal):
        if not (nom - 4 * n < s <= nom and s % (4 * n) == 0):
            sys.exit(f"FAIL: {title}: size {s} for {nom} over {n} ranks")
    for r in rows:
        nums = [x for x in r[2:] if x != "|"]
        for i, op in enumerate(ops):
            t, alg, bus = (float(x) for x in nums[3 * i:3 * i + 3])
            # Printed to 0.1 us and 0.001 GB/s: within those roundings.
            if abs(alg - int(r[0]) / (t * 1e-6) / 1e9) > 0.0011 + alg * 0.06 / max(t, 1):
                sys.exit(f"FAIL: {title} {op} {r[0]} B: algbw {alg} != bytes / {t} us")
            if abs(bus - alg * factor[op](n)) > 0.0011 * (1 + factor[op](n)):
                sys.exit(f"FAIL: {title} {op} {r[0]} B: busbw {bus} != {alg} x {factor[op](n):.3f}")
    print(f"ok: {title} ({n} ranks): {len(rows)} sizes, busbw = algbw x nccl-tests' factor")
PY
}

# ---- 1. one host
$ZT_MPIRUN -np 2 ./zerotrain check --max-bytes 8K --config "$tmp/c.json" "${gpt[@]}" \
    --data "$tmp/a.txt" >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; fail "check on one host"; }
for pattern in "zerotrain check 0.1.0: 2 rank(s) on 1 host(s)" \
    "$(hostname) *2 rank(s): 0-1; devices: cpu" \
    "rank 1 *host $(hostname) *local rank 1 of 2, node 0, device cpu" \
    "node groups: 1, the hosts" \
    "communicator: device cpu (--device cpu); comm mpi: the CPU backend's buffers are host memory" \
    "the --data file  *[0-9a-f]\{16\}  $tmp/a.txt" "the --config file  *[0-9a-f]\{16\}" \
    "settings: every rank runs the same flags and config" "inter-host: none (one host)" \
    "MPI progress: OMPI_MCA_mpi_yield_when_idle=1" \
    "zerotrain check: ok: 2 rank(s) on 1 host(s)"; do
    grep -q -- "$pattern" "$tmp/one.log" || { cat "$tmp/one.log"; fail "check: no '$pattern'"; }
done
tables_check "$tmp/one.log" world:2 8192 || { cat "$tmp/one.log"; exit 1; }
echo "ok: check on one host"
# A user's setting of MPI's yield wins over zerotrain's default.
OMPI_MCA_mpi_yield_when_idle=0 $ZT_MPIRUN -np 1 ./zerotrain check --max-bytes 1K --config "$tmp/c.json" \
    "${gpt[@]}" --data "$tmp/a.txt" >"$tmp/yield.log" 2>&1 || { cat "$tmp/yield.log"; fail "check, yield 0"; }
grep -q "MPI progress: OMPI_MCA_mpi_yield_when_idle=0" "$tmp/yield.log" ||
    { cat "$tmp/yield.log"; fail "check: the user's OMPI_MCA_mpi_yield_when_idle=0 was not kept"; }
echo "ok: the user's yield setting is kept"

# ---- 2. mismatches
mpmd() { # name: rank 0 with the first flags, rank 1 with the second
    set +e
    timeout 60 $ZT_MPIRUN -np 1 ./zerotrain check --max-bytes 0 "${gpt[@]}" $1 : \
        -np 1 ./zerotrain check --max-bytes 0 "${gpt[@]}" $2 >"$tmp/out" 2>&1
    local rc=$?
    set -e
    [ "$rc" = 2 ] && grep -q -- "$3" "$tmp/out" ||
        { cat "$tmp/out"; fail "mismatch: exit $rc, expected 2 and '$3'"; }
    echo "ok: refused (exit 2): $3"
}
mpmd "--config $tmp/c.json --data $tmp/a.txt" "--config $tmp/c.json --data $tmp/b.txt" \
    "rank 1 runs something other than rank 0: the --data file is '$tmp/b.txt' on rank 1 and '$tmp/a.txt' on rank 0"
mpmd "--config $tmp/c.json --data $tmp/a.txt" "--config $tmp/c2.json --data $tmp/a.txt" \
    "the --config file is '$tmp/c2.json' on rank 1"
mpmd "--config $tmp/c.json --data $tmp/a.txt" "--config $tmp/c.json --data $tmp/a-copy.txt --seed 9" \
    "--seed is '9' on rank 1"
expect 2 "--max-bytes needs a size from 1K to 16G" -- ./zerotrain check --max-bytes 12 \
    --config "$tmp/c.json" "${gpt[@]}" --data "$tmp/a.txt"

# ---- 3. two hosts
source tests/netns.sh
zt_netns_up 2 2
timeout 300 $netns_mpirun -np 4 ./zerotrain check --max-bytes 4K --config "$tmp/c.json" "${gpt[@]}" \
    --data "$tmp/a.txt" >"$tmp/two.log" 2>&1 || { cat "$tmp/two.log"; fail "check on 2 hosts"; }
for pattern in "zerotrain check 0.1.0: 4 rank(s) on 2 host(s)" \
    "ztn0 *2 rank(s): 0-1; devices: cpu" "ztn1 *2 rank(s): 2-3; devices: cpu" \
    "rank 2 *host ztn1 *local rank 0 of 2, node 1, device cpu" "node groups: 2, the hosts" \
    "zerotrain check: ok: 4 rank(s) on 2 host(s)"; do
    grep -q -- "$pattern" "$tmp/two.log" || { cat "$tmp/two.log"; fail "check: no '$pattern'"; }
done
tables_check "$tmp/two.log" world:4,intra-host:2,inter-host:2 4096 || { cat "$tmp/two.log"; exit 1; }
echo "ok: check on 2 hosts x 2 ranks"
