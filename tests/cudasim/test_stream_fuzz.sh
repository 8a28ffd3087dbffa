#!/usr/bin/env bash
# Stream-order fuzzing: the simulator's device thread picks among the ready
# streams (compute, comm, copies) at random from ZT_SIM_SEED, honouring only
# what CUDA guarantees. Two stream-heavy runs, each under five seeds:
#   GPT-lite, np 2, stage 3 bf16: overlap_comm, small buckets, prefetch and
#     release of every unit, activation checkpointing, optimizer offload;
#   the classifier, np 3, stage 2 fp16: overlap_comm, small buckets, an
#     injected overflow (the skip path's host reads of device flags).
# Every seed must finish with no simulator report (the race checker flags any
# cross-stream access no event orders, whatever order ran) and the same
# weights and losses bit for bit (cmp): kernels, GEMMs and collectives are
# deterministic, so only a missing wait or a host read of unfinished work can
# make the order matter. The runs' orders must differ (the device thread's
# pick sequences are compared through ZT_SIM_STATS), so this is not one order
# run five times.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"

zt_short_reviews 60 "$tmp/reviews.csv"
cat >"$tmp/gpt.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "activation_checkpointing": {"number_checkpoints": 2},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
   "overlap_comm": true, "stage3_param_persistence_threshold": 0,
   "stage3_max_live_parameters": 20000, "stage3_prefetch_bucket_size": 10000,
   "offload_optimizer": {"device": "cpu"}}}
JSON
cat >"$tmp/cls.json" <<JSON
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
 "fp16": {"enabled": true, "initial_scale_power": 10},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 2000, "allgather_bucket_size": 2000,
   "overlap_comm": true}}
JSON
gpt=(2 --config "$tmp/gpt.json" --model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
     --n-layer 2 --n-embd 32 --n-head 4 --block-size 16 --dropout 0.1 --steps 3 --seed 11)
cls=(3 --config "$tmp/cls.json" --model classifier --data "$tmp/reviews.csv" --n-layer 1
     --embed-dim 32 --n-head 4 --hidden-dim 64 --max-len 24 --steps 3 --seed 11 --inject-overflow 2)

t0=$SECONDS
for model in gpt cls; do
    declare -n args=$model
    for seed in 1 2 3 4 5; do
        tag=$model-$seed
        timeout 300 $ZT_MPIRUN -np "${args[0]}" -x ZT_SIM_SEED=$seed -x ZT_SIM_STATS=1 "$ZT_BIN" \
            "${args[@]:1}" $ZT_DEVICE_FLAGS --report "$tmp/$tag.json" --dump-params "$tmp/$tag.bin" \
            >"$tmp/$tag.log" 2>&1 || { cat "$tmp/$tag.log"; fail "$tag failed"; }
        ! grep -q "zt-sim: error" "$tmp/$tag.log" || { cat "$tmp/$tag.log"; fail "$tag: the simulator reported an error"; }
        grep -q "device cuda, comm nccl" "$tmp/$tag.log" || { cat "$tmp/$tag.log"; fail "$tag: not on cuda/nccl"; }
        [ $seed = 1 ] && continue
        cmp -s "$tmp/$model-1.bin" "$tmp/$tag.bin" || fail "$tag: weights differ from seed 1's"
        $ZT_PYTHON - "$tmp/$model-1.json" "$tmp/$tag.json" <<'PY' || fail "$tag: history differs from seed 1's"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in ("loss_history", "loss_scale_history", "skipped_steps"):
    assert a.get(k) == b.get(k), (k, a.get(k), b.get(k))
PY
    done
    orders=$(grep -h "^zt-sim: stats: device thread order" "$tmp/$model"-*.log | sort -u | wc -l)
    [ "$orders" -ge 5 ] || { grep -h "^zt-sim: stats" "$tmp/$model"-*.log; fail "$model: the seeds ran $orders distinct orders"; }
    echo "ok: $model under 5 seeds ($orders distinct stream orders over the ranks): no report, same bits"
done
echo "cudasim: stream-order fuzzing over 5 seeds x 2 runs in $((SECONDS - t0)) s"
