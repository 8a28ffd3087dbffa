#!/usr/bin/env bash
# The ZeRO stage matrix on the CUDA simulator: GPT-lite and the transformer
# classifier train with --device cuda --comm nccl (build/sim/zerotrain, one
# simulated GPU per rank) and must match the CPU backend (./zerotrain, MPI
# comm) run with the same config, world size and flags.
#
# A covering subset, not the cross product (2 models x 4 stages x 3 world
# sizes x 3 precisions x offload x checkpointing is 400+ runs, an hour here):
# 24 runs. For model group g (GPT-lite fp32, bf16, fp16 = 0, 1, 2; the
# classifier likewise) stage s runs at np 1 + (s + g) % 3, so each model meets
# every (stage, np) pair once over its three precisions; activation
# checkpointing is on when s + g is even (every interval, or ceil(units/2)
# segments kept on the host, alternately); stage 1 (g even) or 2 (g odd)
# offloads the optimizer, and stage 3 offloads the parameters (g even) or both
# (g odd). So every model x precision has a stage-3 run, an offloaded
# optimizer and checkpointing, and every stage and world size is in every
# precision.
#
# Tolerances (losses: max relative difference per step; weights: relative L2
# of the fp32 master after 3 steps, tests/tools/ztcheck.py). No whole run is
# bit-identical to the CPU: GEMMs sum in another order, softmax,
# cross-entropy and layernorm's dx round differently (docs/gpu.md). Under
# fp16/bf16 the units run on the 16-bit tensors themselves on both backends
# (typed ops: the same tensors, each op's outputs rounded once), except the
# fp16 classifier rows (--typed-tensors off), which compute on fp32 copies,
# where the CUDA GEMMs multiply 16-bit-rounded operands and the CPU fp32
# ones. Op-level bit identity is op-check's (test_op_check.sh).
#   fp32       losses 1e-5, weights 1e-4     (measured up to 2e-8 / 1.4e-8)
#   bf16/fp16  losses 2e-3, weights 2.5e-3   (measured up to 1.4e-3 / 8.2e-4
#              on fp32 copies, 2.5e-4 / 7.6e-5 typed; the three
#              steps move the weights by 2e-2, so an update off by more than
#              an eighth fails: a wrong gradient, a missed reduction or a
#              stale gather is far outside)
#   16-bit rows on the tensor-core attention (typed, head sizes 64 and 128):
#              losses 5e-3, weights 2.5e-3 (measured up to 2.3e-3 / 8.6e-4:
#              P and dS are rounded to the dtype inside the attention, 3u per
#              product (docs/gpu-results.md), and the classifier's loss of
#              about 0.69 at 24 tokens moves with its pooled features)
# Anything the simulator reports (a race, a bad pointer, an illegal access, a
# collective hang) fails the run.
#
# scripts/gpu-check.sh --parts matrix runs this file on a real GPU: ZT_BIN
# ./zerotrain, and ZT_DEVICE_FLAGS "--device cuda --comm mpi" where ranks
# must share one GPU (NCCL refuses two ranks on one device).
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

# 120 reviews cut to 3..60 bytes: --max-len 24 truncates some and pads the
# others, so ranks pad micro-batches to different lengths.
zt_short_reviews 120 "$tmp/reviews.csv"

# Four units each (embedding, two blocks, head), dropout on so recomputed
# segments must redraw the same masks.
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --steps 3 --seed 11)
cls=(--model classifier --data "$tmp/reviews.csv" --n-layer 2 --embed-dim 32 --n-head 4
     --hidden-dim 64 --max-len 24 --dropout 0.1 --steps 3 --seed 11)
# The 16-bit rows at the head sizes the tensor-core attention runs
# (engine/cuda/backend_cuda_flash_mma.cu): GPT-lite at 64, the classifier (key
# padding) at 128; its launch log must show the tensor-core kernels.
gpt16=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 64
       --n-head 1 --block-size 16 --dropout 0.1 --steps 3 --seed 11)
cls16=(--model classifier --data "$tmp/reviews.csv" --n-layer 2 --embed-dim 128 --n-head 1
       --hidden-dim 64 --max-len 24 --dropout 0.1 --steps 3 --seed 11)

write_cfg() { # file stage precision extra-zero extra-top
    local prec="" zero="\"reduce_bucket_size\": 3000, \"allgather_bucket_size\": 3000, \"overlap_comm\": true"
    case $3 in
    fp16) prec='"fp16": {"enabled": true, "initial_scale_power": 10},' ;;
    bf16) prec='"bf16": {"enabled": true},' ;;
    esac
    [ "$2" = 3 ] && zero="$zero, \"stage3_param_persistence_threshold\": 0,
        \"stage3_max_live_parameters\": 40000, \"stage3_prefetch_bucket_size\": 20000"
    cat >"$1" <<JSON
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
 $prec $5
 "zero_optimization": {"stage": $2, $zero $4}}
JSON
}

want_comm=nccl # what the start line names: --comm mpi on a GPU is "staged"
[[ " $ZT_DEVICE_FLAGS " == *" --comm mpi "* ]] && want_comm=staged
failures=()
n=0
t0=$SECONDS
one() { # tag np model-array cfg flags...
    local tag=$1 np=$2 arr=$3 cfg=$4 prec=$5
    shift 5
    local -n margs=$arr
    local lt=1e-5 wt=1e-4
    [ "$prec" = fp32 ] || { lt=2e-3; wt=2.5e-3; }
    local all="$*" tensor=0
    [[ $arr == *16 && $all != *"--typed-tensors off"* ]] && { tensor=1; lt=5e-3; }
    n=$((n + 1))
    if ! timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$cfg" "${margs[@]}" "$@" --device cpu \
        --report "$tmp/$tag-cpu.json" --dump-params "$tmp/$tag-cpu.bin" >"$tmp/$tag-cpu.log" 2>&1; then
        failures+=("$tag: the CPU run failed")
        sed 's/^/    | /' "$tmp/$tag-cpu.log" | tail -n 20
        return
    fi
    if ! ZT_SIM_LAUNCH_LOG="$tmp/$tag.launches" timeout 300 $ZT_MPIRUN -np "$np" "$ZT_BIN" \
        --config "$cfg" "${margs[@]}" "$@" $ZT_DEVICE_FLAGS \
        --report "$tmp/$tag-sim.json" --dump-params "$tmp/$tag-sim.bin" >"$tmp/$tag-sim.log" 2>&1; then
        failures+=("$tag: the simulator run failed")
        sed 's/^/    | /' "$tmp/$tag-sim.log" | tail -n 30
        return
    fi
    grep -q "device cuda, comm $want_comm" "$tmp/$tag-sim.log" ||
        failures+=("$tag: not on cuda/$want_comm")
    if grep -q "zt-sim" "$tmp/$tag-sim.log"; then
        failures+=("$tag: the simulator reported an error")
        grep -A5 "zt-sim" "$tmp/$tag-sim.log" | head -n 20 | sed 's/^/    | /'
    fi
    if [[ $ZT_BIN == build/sim/* && $tensor = 1 ]]; then
        grep -qs flash_fwd_mma "$tmp/$tag.launches" && grep -qs flash_bwd_mma "$tmp/$tag.launches" ||
            failures+=("$tag: the attention did not run on tensor cores")
    fi
    local out
    if out=$($ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/$tag-cpu.json" "$tmp/$tag-sim.json" --tol $lt 2>&1) &&
       out="$out; $($ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/$tag-cpu.bin" "$tmp/$tag-sim.bin" --tol $wt 2>&1)"; then
        # "ok: losses ...: max rel X (tol T); ok: params ...: rel L2 Y (tol U)"
        echo "$out" | sed -E "s/^.*max rel ([^ ]+) .*rel L2 ([^ ]+) .*$/ok: $tag: losses \1 (tol $lt), weights \2 (tol $wt)/"
    else
        failures+=("$tag: $out")
    fi
}

g=0
for prec in fp32 bf16 fp16; do
    for model in gpt cls; do
        for stage in 0 1 2 3; do
            np=$((1 + (stage + g) % 3))
            zero="" top="" flags=() what=""
            if [ $(((stage + g) % 2)) = 0 ]; then
                if [ $((stage % 2)) = 0 ]; then
                    flags=(--activation-checkpoint-interval 1); what+=" ckpt1"
                else
                    top='"activation_checkpointing": {"number_checkpoints": 2, "cpu_checkpointing": true},'
                    what+=" ckpt2cpu"
                fi
            fi
            if { [ $stage = 1 ] && [ $((g % 2)) = 0 ]; } || { [ $stage = 2 ] && [ $((g % 2)) = 1 ]; }; then
                zero=', "offload_optimizer": {"device": "cpu"}'; what+=" offopt"
            elif [ $stage = 3 ]; then
                zero=', "offload_param": {"device": "cpu"}'; what+=" offparam"
                [ $((g % 2)) = 1 ] && { zero="$zero"', "offload_optimizer": {"device": "cpu"}'; what+="+opt"; }
            fi
            # fp16 classifier rows compute on fp32 copies (the CUDA GEMMs'
            # 16-bit operand casts); every other 16-bit row is typed.
            [ $model = cls ] && [ $prec = fp16 ] && { flags+=(--typed-tensors off); what+=" copies"; }
            tag="$model-$prec-s$stage-np$np${what// /-}"
            write_cfg "$tmp/$tag.json" $stage $prec "$zero" "$top"
            arr=$model
            [ $prec = fp32 ] || arr=${model}16
            one "$tag" $np $arr "$tmp/$tag.json" $prec "${flags[@]}"
        done
    done
    g=$((g + 1))
done

if [ ${#failures[@]} -gt 0 ]; then
    printf '  %s\n' "${failures[@]}"
    fail "${#failures[@]} of $n stage-matrix runs differ from the CPU backend"
fi
echo "cudasim: $n stage-matrix runs of GPT-lite and the classifier match the CPU backend in $((SECONDS - t0)) s"
