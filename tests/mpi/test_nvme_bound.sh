#!/usr/bin/env bash
# NVMe offload (docs/nvme.md): host memory is bounded by the swap buffers,
# not by the model. The same MLP at 4 and at 16 layers (4x the parameters),
# with the same swap settings, at stage 3 (offload_optimizer and
# offload_param on nvme, np 2) and at stage 2 (offload_optimizer on nvme,
# np 1), each run's --report JSON, rank by rank:
#  - host peak(16 layers) - host peak(4 layers) <= 64 KiB;
#  - host GRADS, MASTER and OPTIM peak at 0 (the fp32 gradient partition is
#    swapped with the optimizer state), and host PARAMS at 0 (max_in_cpu 0);
#  - SWAP <= offload_optimizer's buffer_count x one tensor of the largest
#    sub-group (at most sub_group_size + one layer's elements) + 2 gradient
#    buffers of that size + offload_param's buffer_count x buffer_size, plus
#    4 KiB of alignment per swapper;
#  - host peak <= SWAP + max_in_cpu + 2 MiB, the model-independent rest: the
#    micro-batch's host staging, one unit's parameter staging and one
#    sub-group's staging of reduced gradients (reduce_bucket_size is left
#    far above the model, so a bucket is the whole partition).
# The 16-layer stage-3 run is also bit-identical to the cpu offload's (cmp
# of --dump-grads, read back from the gradient file, and of --dump-params;
# equal loss histories): gradient accumulation over 2 micro-steps, clipping
# on, the reduced bucket staged in sub-group pieces.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

# write_cfg name stage optimizer-offload param-offload
write_cfg() {
    local off=""
    case $3 in
    cpu) off=', "offload_optimizer": {"device": "cpu"}' ;;
    nvme) off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/swap\",
              \"buffer_count\": 6, \"pipeline_read\": true, \"pipeline_write\": true}" ;;
    esac
    case $4 in
    cpu) off="$off, \"offload_param\": {\"device\": \"cpu\"}" ;;
    nvme) off="$off, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/swap\",
              \"max_in_cpu\": 0, \"buffer_count\": 4, \"buffer_size\": 100000}" ;;
    esac
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.5,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 500000000, "sub_group_size": 30000,
                        "stage3_param_persistence_threshold": 1000 $off}
}
JSON
}

run() { # np cfg tag layers [flags...]
    local np=$1 cfg=$2 tag=$3 layers=$4
    shift 4
    timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" --model mlp --width 256 \
        --layers "$layers" --in-size 64 --out-size 10 --steps 3 --seed 7 "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 ||
        { cat "$tmp/$tag.log"; fail "zerotrain run $tag"; }
}

write_cfg s3-nvme 3 nvme nvme
write_cfg s3-cpu 3 cpu cpu
write_cfg s2-nvme 2 nvme none
for L in 4 16; do
    run 2 s3-nvme "s3-L$L" $L --dump-grads "$tmp/s3-L$L.grads"
    run 1 s2-nvme "s2-L$L" $L
done

bound() { # small large stage
    $ZT_PYTHON - "$tmp/$1.json" "$tmp/$2.json" "$tmp/s3-nvme.json" "$3" <<'PY' || fail "$3: host memory grows with the model"
import json, sys
small, large, cfg = (json.load(open(f)) for f in sys.argv[1:4])
stage = sys.argv[4]
KiB, MiB = 1024, 1024 * 1024
z = cfg["zero_optimization"]
oo, op = z["offload_optimizer"], z["offload_param"]
# One optimizer buffer: a tensor of the largest sub-group, which passes
# sub_group_size by less than one unit's shard (a layer: 256 x 256 + 256),
# padded to 4 KiB; the same bound at both depths.
unit = 256 * 256 + 256
group = -(-(z["sub_group_size"] + unit) * 4 // (4 * KiB)) * 4 * KiB
for r in (small, large):
    swap_max = (oo["buffer_count"] + 2) * group + 4 * KiB * 3
    if r["offload"]["param"] == "nvme":
        swap_max += op["buffer_count"] * op["buffer_size"] * 4
    for rk in r["ranks"]:
        host = rk["memory_bytes"]["host"]
        for c in ("GRADS", "MASTER", "OPTIM", "PARAMS"):
            assert host[c]["peak"] == 0, (stage, rk["rank"], c, host[c])
        swap, peak = host["SWAP"]["peak"], rk["memory_total_bytes"]["host"]["peak"]
        assert 0 < swap <= swap_max, (stage, swap, swap_max)
        max_in_cpu = op["max_in_cpu"] * 4 if r["offload"]["param"] == "nvme" else 0
        assert peak <= swap + max_in_cpu + 2 * MiB, (stage, peak, swap)
params = [r["nvme"]["swap_file_bytes"] for r in (small, large)]
assert params[1] > 3 * params[0], ("the large model is not larger", params)
for a, b in zip(small["ranks"], large["ranks"]):
    pa, pb = (x["memory_total_bytes"]["host"]["peak"] for x in (a, b))
    assert pb - pa <= 64 * KiB, (stage, a["rank"], pa, pb)
    print(f"ok: stage {stage} rank {a['rank']}: host peak {pa} B at 4 layers, {pb} B at 16 "
          f"(swap files {params[0]} B -> {params[1]} B)")
PY
}
bound s3-L4 s3-L16 3
bound s2-L4 s2-L16 2

run 2 s3-cpu s3-L16-cpu 16 --dump-grads "$tmp/s3-L16-cpu.grads"
cmp -s "$tmp/s3-L16-cpu.grads" "$tmp/s3-L16.grads" || fail "stage 3 16 layers: nvme gradients differ from cpu offload"
cmp -s "$tmp/s3-L16-cpu.bin" "$tmp/s3-L16.bin" || fail "stage 3 16 layers: nvme weights differ from cpu offload"
$ZT_PYTHON - "$tmp/s3-L16-cpu.json" "$tmp/s3-L16.json" <<'PY' || fail "stage 3 16 layers: histories differ"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in ("loss_history", "loss_scale_history", "skipped_steps", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
echo "ok: stage 3 np 2, 16 layers: nvme = cpu offload (cmp), gradients accumulated and clipped"
echo "ok: nvme host bound in $((SECONDS - t0)) s"
