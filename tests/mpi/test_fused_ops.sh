#!/usr/bin/env bash
# The fused ops (residual + layernorm, linear + bias + activation, activation
# gradient + bias gradient, linear backward; backend.h) against the op-by-op path
# they replace, run by the same binary with --fused-ops off: over 8 fp32 AdamW
# steps at np 2 (ZeRO stage 1) the per-step losses must agree to 1e-5
# (relative), and on the CPU, where the fused ops keep the unfused float32
# expressions term for term, the final weights must be the same bits (on the
# CUDA backend too, whose fused kernels keep its own op-by-op expressions and
# sums: tests/cudasim/test_fused_ops.sh runs this script there with ZT_SIM=1).
# GPT-lite and the classifier run with GELU and with ReLU, with dropout 0.1 (the
# branch dropout before the fused residual add keeps its keyed mask), and the MLP;
# on the CPU each model also at np 1 on two threads, where the linear backward
# runs its two products at once, each on one thread, while --fused-ops off runs
# each on two. OpenBLAS's Haswell and Zen sgemm kernels give a product other
# bits on two threads than on one (engine/cpu/backend_cpu.c), so there every
# step's gradient must agree to 1e-6 (relative L2: a few fp32 roundings of the
# same sums, measured 1.2e-7 to 2.9e-7), the losses to 1e-5, and the final
# weights to 1e-4: AdamW's m / sqrt(v) turns the last bits of a near-zero
# gradient into whole steps of lr (measured 1.5e-5 after 8 steps). tests/run.sh
# runs this test under two OpenBLAS core types.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
shared=$ZT_SHARED

zt_short_reviews 96 "$tmp/reviews.csv" 78

cat >"$tmp/cfg.json" <<JSON
{
  "train_batch_size": 8,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": 1}
}
JSON

gpt=(--model gptlite --data "$shared/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1)
cls=(--model classifier --data "$tmp/reviews.csv" --n-layer 2 --embed-dim 32 --n-head 4
     --hidden-dim 64 --max-len 48 --dropout 0.1)
mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10)

failures=()
run() { # tag fused model-args...
    local tag=$1 fused=$2
    shift 2
    # shellcheck disable=SC2086 # ZT_DEVICE_FLAGS is a list of flags
    if ! timeout 300 $ZT_MPIRUN -np "${NP:-2}" "$ZT_BIN" --config "$tmp/cfg.json" ${ZT_DEVICE_FLAGS:---device cpu} \
        --steps 8 --seed 7 --fused-ops "$fused" "$@" --dump-params "$tmp/$tag.bin" \
        --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1; then
        failures+=("$tag: zerotrain failed")
        sed 's/^/    | /' "$tmp/$tag.log" | tail -20
        return 1
    fi
}
compare() { # tag [grads]: with grads, the gradients and weights within tolerances, not bits
    grep -q -- "--fused-ops off: " "$tmp/$1-off.log" && ! grep -q -- "--fused-ops off" "$tmp/$1-on.log" ||
        failures+=("$1: the --fused-ops off notice is not where it belongs")
    $ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/$1-off.json" "$tmp/$1-on.json" --tol 1e-5 ||
        failures+=("$1: losses differ by more than 1e-5")
    if [ -z "${2:-}" ]; then
        cmp -s "$tmp/$1-off.bin" "$tmp/$1-on.bin" ||
            failures+=("$1: fused and unfused weights differ in their bits")
        return
    fi
    for s in 1 2 3 4 5 6 7 8; do
        $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/$1-off-g$s.bin" "$tmp/$1-on-g$s.bin" --tol 1e-6 ||
            failures+=("$1: step $s's gradients differ by more than 1e-6")
    done
    $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/$1-off.bin" "$tmp/$1-on.bin" --tol 1e-4 ||
        failures+=("$1: fused and unfused weights differ by more than 1e-4")
}

t0=$SECONDS
for case in gpt:gelu gpt:relu cls:gelu cls:relu mlp:; do
    m=${case%%:*} act=${case#*:}
    declare -n args=$m
    extra=()
    [ -n "$act" ] && extra=(--activation "$act")
    tag="$m${act:+-$act}"
    run "$tag-on" on "${args[@]}" "${extra[@]}" && run "$tag-off" off "${args[@]}" "${extra[@]}" &&
        compare "$tag"
    unset -n args
done
# On two threads the CPU backend's linear backward runs its two products at
# once (one thread each): np 1, every step's gradient dumped.
if [ -z "${ZT_SIM:-}" ]; then
    for m in gpt cls mlp; do
        declare -n args=$m
        NP=1 OMP_NUM_THREADS=2 run "$m-2t-on" on "${args[@]}" --dump-grads "$tmp/$m-2t-on-g%d.bin" &&
            NP=1 OMP_NUM_THREADS=2 run "$m-2t-off" off "${args[@]}" --dump-grads "$tmp/$m-2t-off-g%d.bin" &&
            compare "$m-2t" grads
        unset -n args
    done
fi
if [ "${#failures[@]}" -gt 0 ]; then
    echo "FAIL: ${#failures[@]} problems:"
    printf '  %s\n' "${failures[@]}"
    exit 1
fi
echo "ok: 5 models, fused and --fused-ops off agree (losses within 1e-5, same weights)$([ -z "${ZT_SIM:-}" ] && echo "; 3 on two threads (gradients within 1e-6, weights within 1e-4)") in $((SECONDS - t0)) s (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto})"
