#!/usr/bin/env bash
# A rank that fails alone at start-up must still stop every rank together,
# with its message printed once: each case here once crashed or hung.
#  - a bad environment variable on one rank only (ZT_COMM_TIMEOUT=abc on rank 1
#    crashed with SIGFPE, on rank 0 it left rank 1 waiting forever; a value past
#    int64_t livelocked the comm thread): exit 2, the variable named once;
#  - ZT_RANKS_PER_NODE of 0, 3 or abc at np 2 (exit 1 from every rank before):
#    exit 2, one message;
#  - a watchdog limit that differs between ranks: the fingerprint names it;
#  - a bad OMP_NUM_THREADS (the OpenMP runtime only warns): exit 2;
#  - every start-up step a rank may fail alone (engine/env.h's ZT_FAIL_AT
#    sites: the backend, the pipeline's plan, the sampler, the trainer's plan,
#    the arenas' reservation), failed on rank 0 and on rank 1: exit 1 within
#    the limit, that rank's message once, never a hang or a rank that runs on.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

cat >"$tmp/c.json" <<JSON
{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
cat >"$tmp/pipe.json" <<JSON
{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "pipeline": {"stages": 2}}
JSON
mlp=(./zerotrain --model mlp --width 32 --layers 3 --steps 2)

# once PATTERN: the output has exactly one error line, and PATTERN.
once() {
    local n
    n=$(grep -c 'error:' "$tmp/out" || true)
    [ "$n" = 1 ] || { cat "$tmp/out"; fail "$n error lines, want 1"; }
    grep -q -- "$1" "$tmp/out" || { cat "$tmp/out"; fail "the error line is not '$1'"; }
}

# on_rank R VAR VALUE: $on_rank, the prefix of a command that runs at np 2
# with VAR=VALUE in rank R's environment only.
on_rank() {
    # shellcheck disable=SC2206 # ZT_MPIRUN is a list of words
    on_rank=($ZT_MPIRUN -np 2 env "ONLY_RANK=$1" "ONLY_VAR=$2" "ONLY_VALUE=$3" sh -c
        '[ "$OMPI_COMM_WORLD_RANK" = "$ONLY_RANK" ] && export "$ONLY_VAR=$ONLY_VALUE"; exec "$@"' _)
}

# ---- a bad variable on one rank, each rank in turn
for r in 0 1; do
    on_rank "$r" ZT_COMM_TIMEOUT abc
    expect 2 "\[rank $r [^]]*\] error: ZT_COMM_TIMEOUT='abc' is not a number of seconds from 0 to 1000000" -- \
        "${on_rank[@]}" "${mlp[@]}" --config "$tmp/c.json"
    once "hint: set ZT_COMM_TIMEOUT"
done
on_rank 1 ZT_COMM_TIMEOUT 99999999999999999999
expect 2 "ZT_COMM_TIMEOUT='99999999999999999999' is not a number of seconds" -- \
    "${on_rank[@]}" "${mlp[@]}" --config "$tmp/c.json"
once "error: ZT_COMM_TIMEOUT"
on_rank 1 OMP_NUM_THREADS abc
expect 2 "OMP_NUM_THREADS='abc' is not a thread count from 1 to 4096" -- \
    "${on_rank[@]}" "${mlp[@]}" --config "$tmp/c.json"
once "error: OMP_NUM_THREADS"

expect 2 "ZT_CPU_ISA='sse9' is not one of baseline, avx2, avx512" -- \
    env ZT_CPU_ISA=sse9 "${mlp[@]}" --config "$tmp/c.json"
once "error: ZT_CPU_ISA"

# ---- the simulated nodes
for v in 0 abc; do
    expect 2 "ZT_RANKS_PER_NODE='$v' is not a whole number of ranks from 1 to 65536" -- \
        env ZT_RANKS_PER_NODE=$v $ZT_MPIRUN -np 2 "${mlp[@]}" --config "$tmp/c.json"
    once "error: ZT_RANKS_PER_NODE"
done
expect 2 "ZT_RANKS_PER_NODE=3 does not divide the ranks of every host (host [^ ]* has 2)" -- \
    env ZT_RANKS_PER_NODE=3 $ZT_MPIRUN -np 2 "${mlp[@]}" --config "$tmp/c.json"
once "error: ZT_RANKS_PER_NODE=3"
# The same for the subcommands that start a world.
expect 2 "ZT_RANKS_PER_NODE='abc'" -- env ZT_RANKS_PER_NODE=abc $ZT_MPIRUN -np 2 ./zerotrain check \
    --config "$tmp/c.json" --model mlp
once "error: ZT_RANKS_PER_NODE"
expect 2 "ZT_RANKS_PER_NODE='abc'" -- env ZT_RANKS_PER_NODE=abc ./zerotrain generate --checkpoint "$tmp"
once "error: ZT_RANKS_PER_NODE"

# ---- ranks with different limits
on_rank 1 ZT_COMM_TIMEOUT 30
expect 2 "ZT_COMM_TIMEOUT is '30' on rank 1 and '600' on rank 0" -- \
    "${on_rank[@]}" "${mlp[@]}" --config "$tmp/c.json"
once "runs something other than rank 0"

# ---- a start-up step failed on one rank
t0=$SECONDS
for site in backend pipeline sampler plan reserve; do
    cfg=$tmp/c.json
    [ "$site" = pipeline ] && cfg=$tmp/pipe.json
    for r in 0 1; do
        expect 1 "ZT_FAIL_AT=$site@$r: the $site step failed on this rank" -- \
            env ZT_FAIL_AT=$site@$r $ZT_MPIRUN -np 2 "${mlp[@]}" --config "$cfg"
        once "ZT_FAIL_AT=$site@$r"
        grep -q "zerotrain: done" "$tmp/out" && { cat "$tmp/out"; fail "a rank trained on after $site failed"; }
    done
done
echo "ok: 10 start-up failures on one rank ended the job in $((SECONDS - t0)) s"
expect 2 "ZT_FAIL_AT='reserve' is not SITE@RANK" -- env ZT_FAIL_AT=reserve "${mlp[@]}" --config "$tmp/c.json"
echo "ok: start-up failures on one rank"
