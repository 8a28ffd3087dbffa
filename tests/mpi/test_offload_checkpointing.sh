#!/usr/bin/env bash
# Offload and activation checkpointing change nothing numerically. For the MLP
# and GPT-lite (dropout 0.1, so recomputed segments must redraw the same
# masks), at np 1-4, each run with a variant is compared with the same run
# without it (same stage, world size and precision): the final weights
# (--dump-params, the fp32 master) must agree to 1e-6 relative L2 and the loss
# histories to 1e-6. Variants:
#   ckpt1      --activation-checkpoint-interval 1 (stages 0-3)
#   ckpt2cpu   number_checkpoints = ceil(units / 2) segments of 2, kept on the
#              host (cpu_checkpointing) (stages 0-3)
#   offopt     offload_optimizer cpu (stages 1-3)
#   offparam   offload_param cpu, no persistent units (stage 3)
#   offboth    both offloads with persistent units and a small gather window (stage 3)
# in fp32 at every world size, and in fp16 (dynamic loss scale) and bf16 at np 2.
# The CPU backend makes every variant bit-identical; the test says how many were.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10 --steps 4 --seed 5)
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --steps 4 --seed 5)

write_cfg() { # name stage precision extra-zero extra-top
    local prec=""
    case $3 in
    fp16) prec='"fp16": {"enabled": true, "initial_scale_power": 10},' ;;
    bf16) prec='"bf16": {"enabled": true},' ;;
    esac
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 12,
  "train_micro_batch_size_per_gpu": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  $prec $5
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
                        "overlap_comm": true $4}
}
JSON
}

n=0
exact=0
failures=()
run() { # tag np model-array-name cfg [flags...]
    local tag=$1 np=$2 arr=$3 cfg=$4
    shift 4
    local -n margs=$arr
    if ! timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" "${margs[@]}" "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1; then
        failures+=("$tag: zerotrain failed")
        [ "${#failures[@]}" -le 3 ] && sed 's/^/    | /' "$tmp/$tag.log"
        return 1
    fi
}
# Pairs are checked together at the end (one interpreter, not two per pair).
compare() { # ref tag
    n=$((n + 1))
    cmp -s "$tmp/$1.bin" "$tmp/$2.bin" && exact=$((exact + 1))
    echo "$tmp/$1 $tmp/$2" >>"$tmp/pairs"
}

t0=$SECONDS
cases() { # model precision np-list
    # 4 units either way: 4 Linear layers; embedding, 2 blocks, head.
    local model=$1 prec=$2 nps=$3 units=4
    for stage in 0 1 2 3; do
        local base=""
        [ "$stage" = 3 ] && base=', "stage3_param_persistence_threshold": 0'
        write_cfg "$model-$prec-s$stage" $stage $prec "$base" ""
        write_cfg "$model-$prec-s$stage-ckpt2cpu" $stage $prec "$base" \
            "\"activation_checkpointing\": {\"number_checkpoints\": $(( (units + 1) / 2 )), \"cpu_checkpointing\": true},"
        write_cfg "$model-$prec-s$stage-offopt" $stage $prec "$base, \"offload_optimizer\": {\"device\": \"cpu\"}" ""
        write_cfg "$model-$prec-s$stage-offparam" $stage $prec "$base, \"offload_param\": {\"device\": \"cpu\"}" ""
        write_cfg "$model-$prec-s$stage-offboth" $stage $prec \
            ', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu", "pin_memory": true},
             "stage3_param_persistence_threshold": 1000, "stage3_max_live_parameters": 20000,
             "stage3_prefetch_bucket_size": 10000' ""
        for np in $nps; do
            local ref="$model-$prec-s$stage-np$np"
            run "$ref" "$np" "$model" "$model-$prec-s$stage" || continue
            run "$ref-ckpt1" "$np" "$model" "$model-$prec-s$stage" --activation-checkpoint-interval 1 &&
                compare "$ref" "$ref-ckpt1"
            run "$ref-ckpt2cpu" "$np" "$model" "$model-$prec-s$stage-ckpt2cpu" &&
                compare "$ref" "$ref-ckpt2cpu"
            [ "$stage" = 0 ] && continue
            run "$ref-offopt" "$np" "$model" "$model-$prec-s$stage-offopt" && compare "$ref" "$ref-offopt"
            [ "$stage" = 3 ] || continue
            run "$ref-offparam" "$np" "$model" "$model-$prec-s$stage-offparam" &&
                compare "$ref" "$ref-offparam"
            # The reference for offboth keeps the same persistent units and window.
            write_cfg "$model-$prec-s3-window" 3 $prec ', "stage3_param_persistence_threshold": 1000,
             "stage3_max_live_parameters": 20000, "stage3_prefetch_bucket_size": 10000' ""
            run "$ref-window" "$np" "$model" "$model-$prec-s3-window" &&
                run "$ref-offboth" "$np" "$model" "$model-$prec-s$stage-offboth" &&
                compare "$ref-window" "$ref-offboth"
        done
    done
}
cases mlp fp32 "1 2 3 4"
cases gpt fp32 "1 2 3 4"
cases mlp fp16 "2"
cases gpt fp16 "2"
cases gpt bf16 "2"

out=$($ZT_PYTHON tests/tools/ztcheck.py runs "$tmp/pairs" --tol 1e-6 2>&1) || failures+=("$out")
echo "$out" | tail -1

# The variants really ran: the reports say so.
$ZT_PYTHON - "$tmp" <<'PY' || failures+=("report settings")
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/gpt-fp32-s3-np2-offboth.json"))
assert r["offload"] == {"optimizer": "cpu", "param": "cpu"}, r["offload"]
r = json.load(open(f"{d}/gpt-fp32-s1-np2-ckpt2cpu.json"))
assert r["activation_checkpointing"] == {"interval": 2, "cpu_checkpointing": True}, r["activation_checkpointing"]
r = json.load(open(f"{d}/gpt-fp16-s2-np2-ckpt1.json"))
assert r["activation_checkpointing"]["interval"] == 1 and r["precision"] == "fp16", r
PY

if [ "${#failures[@]}" -gt 0 ]; then
    printf 'FAIL: %s\n' "${failures[@]}"
    echo "FAIL: of $n comparisons (runs that failed and pairs beyond 1e-6, above)"
    exit 1
fi
echo "ok: $n offload and checkpointing variants match their plain runs (1e-6; $exact bit-identical) in $((SECONDS - t0)) s"
