#!/usr/bin/env bash
# Checkpoints across devices: GPT-lite (dropout 0.1, fp16 with a dynamic loss
# scale and an injected overflow, WarmupLR) at np 2, stage 3 with both
# offloads on the simulator (--device cuda --comm nccl) and stage 2 on the
# CPU, so the checkpoint also reshards between stages.
#   1. The simulator trains 3 steps and saves; the CPU loads that checkpoint
#      and stops at once: its weights are the simulator's bit for bit (cmp).
#   2. The CPU resumes it to step 6 and saves; the simulator loads that and
#      stops at once: the CPU's weights bit for bit.
#   3. The simulator resumes the CPU's step-6 checkpoint to step 8. The chain
#      sim 0-3, CPU 3-6, sim 6-8 must end where an uninterrupted simulator
#      run ends: weights 2.5e-3 relative L2 and losses 2e-3 (the fp16
#      tolerances of test_matrix.sh: the CPU's three steps round differently;
#      measured 5e-5 and 6e-6), with the same loss-scale history and skipped
#      step: optimizer moments, loss scale, scheduler, sampler and dropout
#      state all crossed.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --seed 5 --inject-overflow 5)
write_cfg() { # name stage extra-zero
    cat >"$tmp/$1.json" <<JSON
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
 "fp16": {"enabled": true, "initial_scale_power": 10},
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000 $3}}
JSON
}
write_cfg sim 3 ', "stage3_param_persistence_threshold": 300, "offload_optimizer": {"device": "cpu"},
   "offload_param": {"device": "cpu"}'
write_cfg cpu 2 ''

run() { # where tag [flags...]: --dump-params/--report into $tmp/<tag>.*
    local where=$1 tag=$2 bin=./zerotrain cfg=cpu dev=(--device cpu)
    shift 2
    [ "$where" = sim ] && { bin=$ZT_BIN; cfg=sim; dev=($ZT_DEVICE_FLAGS); }
    timeout 300 $ZT_MPIRUN -np 2 "$bin" --config "$tmp/$cfg.json" "${gpt[@]}" "${dev[@]}" "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 ||
        { cat "$tmp/$tag.log"; fail "run $tag"; }
    ! grep -q "zt-sim" "$tmp/$tag.log" || { cat "$tmp/$tag.log"; fail "$tag: the simulator reported an error"; }
}
resumed() { # tag dir step
    grep -q "resumed from $2/global_step$3 at step $3" "$tmp/$1.log" ||
        { cat "$tmp/$1.log"; fail "$1: no resume line for $2/global_step$3"; }
}

run sim full --steps 8
run sim sim3 --steps 3 --save-dir "$tmp/ck-sim" --save-interval 3
run cpu cpu-load3 --steps 3 --load-dir "$tmp/ck-sim" --resume global_step3
resumed cpu-load3 "$tmp/ck-sim" 3
cmp "$tmp/sim3.bin" "$tmp/cpu-load3.bin" || fail "the CPU did not load the simulator's step-3 weights"
echo "ok: saved on the simulator (stage 3, offloads), loaded on the CPU (stage 2): same weights (cmp)"

run cpu cpu6 --steps 6 --load-dir "$tmp/ck-sim" --resume global_step3 --save-dir "$tmp/ck-cpu" \
    --save-interval 6
resumed cpu6 "$tmp/ck-sim" 3
run sim sim-load6 --steps 6 --load-dir "$tmp/ck-cpu" --resume global_step6
resumed sim-load6 "$tmp/ck-cpu" 6
cmp "$tmp/cpu6.bin" "$tmp/sim-load6.bin" || fail "the simulator did not load the CPU's step-6 weights"
echo "ok: saved on the CPU, loaded on the simulator: same weights (cmp)"

run sim chain --steps 8 --load-dir "$tmp/ck-cpu" --resume global_step6
resumed chain "$tmp/ck-cpu" 6
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/full.bin" "$tmp/chain.bin" --tol 2.5e-3
$ZT_PYTHON - "$tmp/full.json" "$tmp/chain.json" <<'PY'
# A resumed run's report carries the history it loaded: the chain's holds
# the simulator's steps 1-3, the CPU's 4-6 and its own 7-8.
import json, sys
full, chain = (json.load(open(f)) for f in sys.argv[1:])
loss, ref = chain["loss_history"], full["loss_history"]
assert len(loss) == len(ref) == 8, (loss, ref)
worst = max(abs(x - y) / abs(y) for x, y in zip(loss, ref))
assert worst <= 2e-3, f"chained losses {loss} vs {ref}: {worst:.3e}"
scale = chain["loss_scale_history"]
assert scale == full["loss_scale_history"], (scale, full["loss_scale_history"])
assert full["skipped_steps"] == chain["skipped_steps"] == 1, (full["skipped_steps"], chain["skipped_steps"])
print(f"ok: sim 0-3, CPU 3-6, sim 6-8 = uninterrupted simulator run: losses within {worst:.2e}, "
      f"loss scales {scale}, one skipped step")
PY
echo "cudasim: checkpoints cross between the simulator and the CPU both ways"
