#!/usr/bin/env bash
# Stage 0 data parallelism is exact: the same global batch at np 1..4, with
# gradient accumulation 1 and 4 and reduce buckets smaller and larger than a
# unit (overlapped and not), gives the np 1 weights to 1e-6 relative L2 and the
# np 1 losses to 1e-6 after 20 fp32 steps; and the loss falls. Adam eps is
# 1e-5 so rounding noise on near-zero gradients is not amplified past the
# tolerance (see test_stages_equivalence.sh).
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

model=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --steps 20 --seed 7)
write_cfg() { # bucket overlap
    cat >"$tmp/cfg-$1-$2.json" <<JSON
{
  "train_batch_size": 48,
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "zero_optimization": {"stage": 0, "reduce_bucket_size": $1, "overlap_comm": $2}
}
JSON
}
write_cfg 500000000 false
write_cfg 1000 true
write_cfg 1000 false

./zerotrain --config "$tmp/cfg-500000000-false.json" "${model[@]}" --gradient-accumulation-steps 1 \
    --dump-params "$tmp/ref.bin" --report "$tmp/ref.json" >"$tmp/ref.log"
$ZT_PYTHON tests/tools/ztcheck.py loss-falls "$tmp/ref.json"

for np in 1 2 3 4; do
    for gas in 1 4; do
        for cfg in 500000000-false 1000-true 1000-false; do
            [ "$np" = 1 ] && [ "$gas" = 1 ] && [ "$cfg" = 500000000-false ] && continue
            tag="np$np-gas$gas-$cfg"
            $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/cfg-$cfg.json" "${model[@]}" \
                --gradient-accumulation-steps "$gas" --dump-params "$tmp/$tag.bin" \
                --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 || { cat "$tmp/$tag.log"; exit 1; }
            $ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/ref.bin" "$tmp/$tag.bin" --tol 1e-6
            $ZT_PYTHON tests/tools/ztcheck.py losses "$tmp/ref.json" "$tmp/$tag.json" --tol 1e-6
        done
    done
done
