#!/usr/bin/env bash
# The CUDA simulator's own checks (build/sim/sim-test, tests/cudasim/sim_test*.cu):
# launch limits; host and freed pointers handed to kernels, also inside a
# functor, named with the kernel and the argument; shared memory with
# __syncthreads, shuffles and votes; event ordering over several seeds; a
# missing stream wait (read-after-write, write-after-read, write-after-write,
# a copy) reported as a race on every one of several seeds, whichever stream
# the device thread happened to run first; illegal addresses and warp misuse;
# copies and memory; device UUIDs per node and ordinal, and the visible list;
# cuBLAS; NCCL collectives at np 2, collectives issued in different orders on
# two communicators, reported instead of hanging, and two ranks on one GPU
# refused as NCCL does; the performance counters (ZT_SIM_PERF) on patterns
# counted by hand; mma.sync, ldmatrix and cp.async against scalar references,
# and cp.async's misuses reported.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
bin=build/sim/sim-test
[ -x "$bin" ] || fail "$bin is not built (run make sim)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
seeds="1 2 3 4 5 6"

# case EXIT PATTERN... -- ENV... : exit status EXIT and each PATTERN (extended
# regex) in the output of `env ENV... sim-test ARGS`, where ARGS is $args.
case_is() {
    local code=$1; shift
    local patterns=()
    while [ "$1" != -- ]; do patterns+=("$1"); shift; done
    shift
    set +e
    timeout 120 env "$@" "$bin" $args >"$tmp/out" 2>&1
    local got=$?
    set -e
    [ "$got" = "$code" ] || { cat "$tmp/out"; fail "sim-test $args ($*): exit $got, want $code"; }
    local p
    for p in "${patterns[@]}"; do
        grep -Eq -- "$p" "$tmp/out" || { cat "$tmp/out"; fail "sim-test $args ($*): no /$p/"; }
    done
    echo "ok: sim-test $args $*"
}

args=limits case_is 0 "grid \(1, 65536, 1\) .*cudaErrorInvalidConfiguration" \
    "49153 bytes of dynamic shared memory" "102401 bytes .* limit of 102400" -- X=1
args="pointer plain" case_is 0 \
    "kernel k_fill launched at tests/cudasim/sim_test.cu:[0-9]+ on device 0: argument 0 \(float\*\) is 0x[0-9a-f]+: a host pointer" -- X=1
args="pointer pinned" case_is 0 "argument 0 \(float\*\) .*page-locked" -- X=1
args="pointer functor" case_is 0 \
    "kernel k_functor .*argument 0 \(copy_functor, bytes 16..23\) is 0x[0-9a-f]+: a host pointer" -- X=1
args="pointer freed" case_is 0 "argument 0 \(float\*\) .*no live allocation" -- X=1
args="pointer ok" case_is 0 "pointer ok: ok" -- X=1
grep -q "zt-sim" "$tmp/out" && { cat "$tmp/out"; fail "a correct functor was reported"; }
args=shared case_is 0 "shared : ok" -- X=1
for s in $seeds; do
    args=events case_is 0 "events : ok" -- ZT_SIM_SEED=$s
    grep -q "zt-sim" "$tmp/out" && { cat "$tmp/out"; fail "ordered streams were reported"; }
done

# Every seed must find the race; across seeds the device thread runs the two
# streams in both orders, so both halves of the report are exercised.
orders=""
for how in raw war waw copy; do
    for s in $seeds; do
        args="race $how" case_is 0 "race on device memory 0x[0-9a-f]+ \(device 0 allocation" \
            "nothing orders the two" -- ZT_SIM_SEED=$s
        case $how in
        raw | war)
            grep -q "k_fill" "$tmp/out" && grep -q "k_scale_copy" "$tmp/out" ||
                { cat "$tmp/out"; fail "the race report names both kernels"; } ;;
        waw) grep -q "cudaMemsetAsync" "$tmp/out" || fail "the memset is named" ;;
        copy) grep -q "cudaMemcpyAsync DeviceToDevice" "$tmp/out" || fail "the copy is named" ;;
        esac
        [ $how = raw ] && orders="$orders $(grep -o 'k_[a-z_]*<<<' "$tmp/out" | head -1)"
    done
done
echo "race raw: first kernel reported per seed:$orders"
[ "$(echo $orders | tr ' ' '\n' | sort -u | wc -l)" = 2 ] ||
    fail "over seeds $seeds the streams always ran in one order: the picks are not random"

args=illegal case_is 0 "illegal address: kernel k_write_at.* writes 4 bytes at 0x[0-9a-f]+ \(device 0: 0 bytes past the end of allocation" -- X=1
args="warp exited" case_is 0 "__shfl_xor_sync\(mask 0xffffffff\) by lanes 0,.*,15, but lanes 16,.*,31 of the mask have exited" -- X=1
args="warp divergent" case_is 0 "48 threads wait at __syncthreads, 16 in a warp operation" -- X=1
args=memory case_is 0 "memory : ok" "the ranges overlap" "freed twice" -- ZT_SIM_DEVICE_MEMORY_MB=256
args=cublas case_is 0 "cublas : ok" "cublasGemmEx: A of batch entry 0 .* is not a range of device 0's memory" -- X=1
args=limits case_is 2 "ZT_SIM_DEVICES=many" -- ZT_SIM_DEVICES=many
args=limits case_is 2 "ZT_SIM_NCCL_STALL=1:0: RANK:N" -- ZT_SIM_NCCL_STALL=1:0

# UUIDs: one per ordinal; the same for ranks of one node, another per node.
uuid() { # ORDINAL ENV...: that device's UUID
    local ordinal=$1; shift
    args=uuid case_is 0 "uuid 1" -- ZT_SIM_DEVICES=2 "$@" >&2
    grep "^uuid $ordinal " "$tmp/out" | cut -d' ' -f3
}
a0=$(uuid 0 OMPI_COMM_WORLD_RANK=0); a1=$(uuid 1 OMPI_COMM_WORLD_RANK=0)
b0=$(uuid 0 OMPI_COMM_WORLD_RANK=1)
c0=$(uuid 0 OMPI_COMM_WORLD_RANK=1 ZT_RANKS_PER_NODE=1)
d0=$(uuid 0 OMPI_COMM_WORLD_RANK=0 ZT_RANKS_PER_NODE=1)
[ "$a0" != "$a1" ] || fail "ordinals 0 and 1 share a UUID"
[ "$a0" = "$b0" ] || fail "ranks of one node see different UUIDs for ordinal 0"
[ "$c0" != "$d0" ] || fail "ZT_RANKS_PER_NODE=1: two nodes share a UUID"
# ZT_SIM_VISIBLE_DEVICES (the node's CUDA_VISIBLE_DEVICES): visible ordinal 0
# is the node's GPU 1, and a bad entry ends the list.
[ "$(uuid 0 OMPI_COMM_WORLD_RANK=0 ZT_SIM_DEVICES=2 ZT_SIM_VISIBLE_DEVICES=1,0)" = "$a1" ] ||
    fail "ZT_SIM_VISIBLE_DEVICES=1,0: ordinal 0 is not the node's GPU 1"
args=uuid case_is 0 "^uuid 0 $a1" -- ZT_SIM_DEVICES=2 ZT_SIM_VISIBLE_DEVICES=1,x OMPI_COMM_WORLD_RANK=0
! grep -q "^uuid 1" "$tmp/out" || fail "ZT_SIM_VISIBLE_DEVICES=1,x shows two GPUs"
echo "ok: UUIDs per ordinal and node"

mpi=($ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=2)
args=nccl case_is 0 "nccl : ok.*" "send buffer 0x[0-9a-f]+ is not 16 bytes of device 0's memory" -- "${mpi[@]}"
[ "$(grep -c 'nccl : ok' "$tmp/out")" = 2 ] || { cat "$tmp/out"; fail "both ranks pass"; }
t0=$SECONDS
args=nccl-hang case_is 0 \
    "rank 0\]: error: NCCL hang: ncclAllReduce #1 .* on communicator 'comm 0.0'" \
    "communicator 'comm 0.1' \(rank 0 of 2\): ncclBroadcast #1 .*queued" \
    "rank 1\]: error: NCCL hang: ncclAllReduce #1 .* on communicator 'comm 0.1'" \
    "communicator 'comm 0.0' \(rank 1 of 2\): ncclBroadcast #1 .*queued" \
    "rank 0: async error: unhandled system error" -- "${mpi[@]}" -x ZT_SIM_NCCL_TIMEOUT=2
[ $((SECONDS - t0)) -lt 30 ] || fail "the hang took $((SECONDS - t0)) s to be reported"
args=nccl-dup case_is 0 "rank 1: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device" \
    -- $ZT_MPIRUN -np 2 -x ZT_SIM_DEVICES=1
# The performance counters against hand-counted access patterns; off, nothing.
args=perf case_is 0 "perf : ok" "shared shared_wavefronts 44" -- ZT_SIM_PERF=1
args=perf case_is 1 "copy: launches 0, want 1" -- ZT_SIM_PERF=0
# The warp-level matrix and async-copy primitives (engine/cuda/mma.cuh) against
# scalar references, and the misuses of cp.async reported.
args="mma mma" case_is 0 "mma bf16: worst" "mma fp16: worst" "mma mma: ok" -- X=1
args="mma ldmatrix" case_is 0 "ldmatrix \+ mma \(Q K\^T\)" "mma ldmatrix: ok" -- X=1
args="mma cp-async" case_is 0 "mma cp-async: ok" -- X=1
args="mma early" case_is 0 "reads shared memory at 0x[0-9a-f]+ that a cp.async of thread 0 has not landed in" \
    "mma early: ok" -- X=1
args="mma nowait" case_is 0 "64 cp.async copies never waited for" "mma nowait: ok" -- X=1
# Dynamic shared memory: opted in, poisoned at the launch, bounded by its size.
args="mma dynamic" case_is 0 "mma dynamic: ok" -- X=1
args="mma dynamic-overrun" case_is 0 "writes 1 bytes of dynamic shared memory at offset 65536, past the launch's 65536 bytes" \
    "mma dynamic-overrun: ok" -- X=1
echo "cudasim: all simulator checks passed"
