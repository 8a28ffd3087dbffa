#!/usr/bin/env bash
# NVMe offload (ZeRO-Infinity, docs/nvme.md) against the CPU offload, which
# keeps the same state in memory and steps it with the same kernels:
#  1. Bit-identity (cmp of --dump-params, equal loss histories) at np 1 and 2:
#     the MLP in fp32 at stages 1 and 2 with offload_optimizer nvme and at
#     stage 3 with offload_param and offload_optimizer nvme, and GPT-lite
#     (bf16, dropout) at stage 3 np 2; with several sub-groups, fewer swap
#     buffers than sub-groups and units, pipeline_read/write, max_in_cpu 0,
#     small I/O blocks over 2 threads. The reports say nvme, show bytes moved
#     through the files, and no MASTER, OPTIM or GRADS in memory. Every run
#     accumulates gradients over micro-steps (12 samples, micro-batch 1) and
#     clips them (gradient_clipping 1.0, the norm computed from the swapped
#     gradients).
#  2. Checkpoints: a GPT-lite fp16 run on nvme saved at step 4 and resumed
#     ends bit-identical to the uninterrupted run, resumed with nvme and with
#     cpu offload; a cpu-offload run's step-4 checkpoint resumed with nvme too.
#     The memory report puts the bytes the cpu offload holds in host memory
#     in the swap files instead (memory_bytes.nvme).
#  3. Errors name the file and lose nothing: an unwritable nvme_path, a full
#     disk (a small tmpfs, where mount is allowed); after each, the last
#     checkpoint still resumes. A diverged run (exit 1) and a failed save
#     (exit 2) leave nvme_path empty. While a run runs, its swap files have
#     no names (only the locks do): /proc/PID/fd shows them with DeepSpeed's
#     names and the sizes the report states, allocated; killed with -9 it
#     leaves only the folders and locks, which the next run removes.
#     A bad aio block_size and a buffer_size under a shard fail naming the key.
#  4. --estimate-memory's nvme rows are the reservation of the nvme run.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

mlp=(--model mlp --width 48 --layers 4 --in-size 24 --out-size 10 --steps 4 --seed 5)
gpt=(--model gptlite --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 2 --n-embd 32
     --n-head 4 --block-size 16 --dropout 0.1 --seed 5)

# write_cfg name stage precision optimizer-offload param-offload [nvme_path]
write_cfg() {
    local prec="" off="" path=${6:-$tmp/swap}
    case $3 in
    fp16) prec='"fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3},' ;;
    bf16) prec='"bf16": {"enabled": true},' ;;
    esac
    case $4 in
    cpu) off=', "offload_optimizer": {"device": "cpu"}' ;;
    nvme) off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$path\",
              \"buffer_count\": 6, \"pipeline_read\": true, \"pipeline_write\": true}" ;;
    esac
    case $5 in
    cpu) off="$off, \"offload_param\": {\"device\": \"cpu\"}" ;;
    nvme) off="$off, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$path\",
              \"max_in_cpu\": 0, \"buffer_count\": 2, \"buffer_size\": 100000}" ;;
    esac
    cat >"$tmp/$1.json" <<JSON
{
  "train_batch_size": 12, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
  $prec
  "aio": {"block_size": 4096, "queue_depth": 4, "intra_op_parallelism": 2},
  "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000, "sub_group_size": 1000,
                        "stage3_param_persistence_threshold": 500 $off}
}
JSON
}

run() { # np cfg tag [flags...]
    local np=$1 cfg=$2 tag=$3
    shift 3
    timeout 120 $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" "$@" \
        --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" >"$tmp/$tag.log" 2>&1 ||
        { cat "$tmp/$tag.log"; fail "zerotrain run $tag"; }
}

same() { # ref other: bit-identical weights, equal loss histories
    cmp -s "$tmp/$1.bin" "$tmp/$2.bin" || fail "$2: weights differ from $1"
    $ZT_PYTHON - "$tmp/$1.json" "$tmp/$2.json" <<'PY' || fail "$2: histories differ from $1"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in ("loss_history", "loss_scale_history", "skipped_steps", "steps"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
}

swapped() { # tag opt param cpu-tag: the report says nvme and shows the swap at work
    $ZT_PYTHON - "$tmp/$1.json" "$2" "$3" "$tmp/$4.json" <<'PY' || fail "$1: report does not show the nvme swap"
import json, sys
r, opt, param = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
cpu = json.load(open(sys.argv[4]))
assert r["offload"] == {"optimizer": opt, "param": param}, r["offload"]
n = r["nvme"]
assert n["engine"] in ("io_uring", "pread/pwrite threads"), n
if opt == "nvme":
    assert n["sub_groups"] > n["sub_groups_in_memory"] >= 1, n
for rk in r["ranks"]:
    host = rk["memory_bytes"]["host"]
    assert host["SWAP"]["reserved"] == n["swap_buffer_bytes"] > 0, (host["SWAP"], n)
    io = rk["nvme"]
    if opt == "nvme":
        assert host["MASTER"]["peak"] == 0 and host["OPTIM"]["peak"] == 0, host
        assert host["GRADS"]["peak"] == 0, host
        assert io["optimizer"]["bytes_written"] > 0 and io["optimizer"]["reads"] > 0, io
        assert io["gradient"]["bytes_written"] > 0 and io["gradient"]["reads"] > 0, io
    if param == "nvme":
        assert n["swapped_param_units"] > n["param_buffers"] >= 1, n
        assert host["PARAMS"]["peak"] == 0, host
        assert io["param"]["bytes_read"] > 0 and io["param"]["prefetches"] > 0, io
# The memory report accounts for what moved: each class the cpu offload held
# in host memory is in this rank's swap files, padded to 4 KiB per sub-group
# (master, states) or per unit (parameter shards), and nowhere else.
for rk, ck in zip(r["ranks"], cpu["ranks"]):
    files, host = rk["memory_bytes"]["nvme"], ck["memory_bytes"]["host"]
    moved = {"MASTER": (opt, n["sub_groups"]), "OPTIM": (opt, 2 * n["sub_groups"]),
             "GRADS": (opt, n["sub_groups"]),
             "PARAMS": (param, n["swapped_param_units"])}
    for c, (dev, pads) in moved.items():
        want = host[c]["peak"] if dev == "nvme" else 0
        assert want <= files[c] < want + 4096 * max(pads, 1), (c, files[c], want)
    assert rk["memory_total_bytes"]["nvme"] == sum(files.values()) == n["swap_file_bytes"], rk
PY
}

# 1. Bit-identity with the CPU offload.
for stage in 1 2 3; do
    op=none
    [ "$stage" = 3 ] && op=nvme
    write_cfg "mlp-s$stage-cpu" $stage fp32 cpu "${op/nvme/cpu}"
    write_cfg "mlp-s$stage-nvme" $stage fp32 nvme $op
    for np in 1 2; do
        run $np "mlp-s$stage-cpu" "mlp-s$stage-np$np-cpu" "${mlp[@]}"
        run $np "mlp-s$stage-nvme" "mlp-s$stage-np$np-nvme" "${mlp[@]}"
        same "mlp-s$stage-np$np-cpu" "mlp-s$stage-np$np-nvme"
        swapped "mlp-s$stage-np$np-nvme" nvme $op "mlp-s$stage-np$np-cpu"
        echo "ok: mlp fp32 stage $stage np $np: nvme = cpu offload (cmp)"
    done
done
write_cfg gpt-bf16-cpu 3 bf16 cpu cpu
write_cfg gpt-bf16-nvme 3 bf16 nvme nvme
run 2 gpt-bf16-cpu gpt-bf16-cpu "${gpt[@]}" --steps 4
run 2 gpt-bf16-nvme gpt-bf16-nvme "${gpt[@]}" --steps 4
same gpt-bf16-cpu gpt-bf16-nvme
swapped gpt-bf16-nvme nvme nvme gpt-bf16-cpu
grep -q "nvme: io_uring" "$tmp/gpt-bf16-nvme.log" || grep -q "nvme: pread" "$tmp/gpt-bf16-nvme.log" ||
    fail "no nvme line in the run's summary"
echo "ok: gptlite bf16 stage 3 np 2: both offloads on nvme = on cpu (cmp)"
[ -z "$(ls -A "$tmp/swap")" ] || { ls -R "$tmp/swap"; fail "swap files left after the runs"; }

# 2. Checkpoints hold the swapped state.
write_cfg gpt16-nvme 3 fp16 nvme nvme
write_cfg gpt16-cpu 3 fp16 cpu cpu
run 2 gpt16-nvme full "${gpt[@]}" --steps 8 --inject-overflow 3 --save-dir "$tmp/ck" --save-interval 4
run 2 gpt16-nvme resumed "${gpt[@]}" --steps 8 --inject-overflow 3 --load-dir "$tmp/ck" \
    --resume global_step4
same full resumed
run 2 gpt16-cpu resumed-cpu "${gpt[@]}" --steps 8 --inject-overflow 3 --load-dir "$tmp/ck" \
    --resume global_step4
same full resumed-cpu
run 2 gpt16-cpu cpu-saved "${gpt[@]}" --steps 4 --inject-overflow 3 --save-dir "$tmp/ck-cpu" \
    --save-interval 4
run 2 gpt16-nvme nvme-from-cpu "${gpt[@]}" --steps 8 --inject-overflow 3 --load-dir "$tmp/ck-cpu" \
    --resume global_step4
same full nvme-from-cpu
echo "ok: gptlite fp16 stage 3 np 2: resumed at step 4 with nvme and with cpu offload = uninterrupted, and a cpu-offload checkpoint resumes under nvme"

# 3. Errors: exit 2, the file or folder named; the checkpoint still resumes.
resumes() { # the checkpoint of step 4 still loads and ends where the full run did
    run 2 gpt16-nvme "after-$1" "${gpt[@]}" --steps 8 --inject-overflow 3 --load-dir "$tmp/ck" \
        --resume global_step4
    same full "after-$1"
    echo "ok: after the $1 error the checkpoint resumes to the same weights"
}
bad() { # name path: the same run with its swap under path
    write_cfg "$1" 3 fp16 nvme nvme "$2"
}
touch "$tmp/afile"
bad unwritable "$tmp/afile/swap"
expect 2 "cannot create swap folder $tmp/afile/swap/zero_stage_3/optimizer/rank0: $tmp/afile is not a directory" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/unwritable.json" "${gpt[@]}" --steps 8 \
    --load-dir "$tmp/ck" --resume global_step4
if zt_unprivileged "an nvme_path this user may not write"; then
    mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
    bad readonly "$tmp/ro/swap"
    chmod 644 "$tmp/readonly.json"
    expect 2 "cannot create swap folder $tmp/ro/swap: Permission denied" -- \
        "${unpriv[@]}" ./zerotrain --config "$tmp/readonly.json" "${gpt[@]}" --steps 8
fi
resumes unwritable

# Settings that cannot work fail before any file is made, naming the key.
sed 's/"block_size": 4096/"block_size": 6000/' "$tmp/mlp-s3-nvme.json" >"$tmp/badaio.json"
expect 2 "aio.block_size: 6000 bytes: swap files are read and written with O_DIRECT in multiples of 4096" -- \
    ./zerotrain --config "$tmp/badaio.json" "${mlp[@]}"
sed 's/"buffer_size": 100000/"buffer_size": 100/' "$tmp/mlp-s3-nvme.json" >"$tmp/badbuf.json"
expect 2 "zero_optimization.offload_param: More elements 1200 than buffer size 100" -- \
    ./zerotrain --config "$tmp/badbuf.json" "${mlp[@]}"
[ ! -e "$tmp/swap/zero_stage_3" ] || [ -z "$(find "$tmp/swap" -type f)" ] ||
    fail "swap files left by a refused config"

mkdir -p "$tmp/small"
if mount -t tmpfs -o size=64k tmpfs "$tmp/small" 2>/dev/null; then
    bad diskfull "$tmp/small"
    set +e
    timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/diskfull.json" "${gpt[@]}" --steps 8 \
        --load-dir "$tmp/ck" --resume global_step4 >"$tmp/out" 2>&1
    got=$?
    left=$(ls -A "$tmp/small")
    umount "$tmp/small"
    set -e
    [ "$got" = 2 ] || { cat "$tmp/out"; fail "full disk: exit $got, expected 2"; }
    grep -q "error: no space for swap file $tmp/small/zero_stage_3/.*\.tensor\.swp: it needs" \
        "$tmp/out" || { cat "$tmp/out"; fail "full disk: no error naming the swap file"; }
    [ -z "$left" ] || fail "full disk: swap files left behind: $left"
    echo "ok: a full disk (64 KiB tmpfs) fails naming the swap file, leaving nothing there"
    resumes full-disk
else
    echo "skipped: full disk (cannot mount a small tmpfs here: not root, or no mount rights)"
fi

# A run that fails leaves nothing in nvme_path: divergence (exit 1: an inf
# in step 2's gradients) and a failed save (exit 2: a disk that fills).
nvme_empty() { # what: no file and no folder left under $tmp/swap
    [ -z "$(ls -A "$tmp/swap")" ] || { ls -laR "$tmp/swap"; fail "$1: left in nvme_path"; }
}
write_cfg div 3 fp32 nvme nvme
expect 1 "step 2: the loss is .* and the gradient norm inf in fp32 training" -- \
    $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/div.json" "${gpt[@]}" --steps 4 \
    --inject-overflow 2
nvme_empty "a diverged run (exit 1)"
expect 2 "cannot write checkpoint file $tmp/ck-full/global_step2.partial/.*: No space left on device" -- \
    env ZT_CKPT_FAIL_AFTER_BYTES=1000 $ZT_MPIRUN -np 2 -x ZT_CKPT_FAIL_AFTER_BYTES ./zerotrain --config "$tmp/gpt16-nvme.json" \
    "${gpt[@]}" --steps 4 --save-dir "$tmp/ck-full" --save-interval 2
nvme_empty "a failed save (exit 2)"
echo "ok: a diverged run and a failed save leave nvme_path empty"

# While a job runs its swap files have no name: the rank folders hold their
# locks only, and the files show in /proc/PID/fd as "(deleted)", DeepSpeed's
# names, the sizes the report states, allocated. So a job killed with -9
# leaves none of their space behind, only the folders and locks, which the
# next job on nvme_path takes over and removes.
write_cfg gpt16-long 3 fp16 nvme nvme
set +e
$ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/gpt16-long.json" "${gpt[@]}" --steps 100000 \
    --save-dir "$tmp/ck2" --save-interval 5 >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 600); do
    [ -e "$tmp/ck2/global_step5" ] && break
    sleep 0.1
done
ranks=$(pgrep -P $job -f zerotrain)
[ -e "$tmp/ck2/global_step5" ] && [ "$(echo $ranks | wc -w)" = 2 ] ||
    { kill -9 $job; cat "$tmp/kill.log"; fail "no checkpoint in 60 s, or not 2 ranks under mpirun"; }
named=$(cd "$tmp/swap" && find . -type f -printf '%P\n' | sort)
for pid in $ranks; do
    for fd in /proc/$pid/fd/*; do
        target=$(readlink "$fd" 2>/dev/null) || continue
        case $target in
        "$tmp/swap/"*".tensor.swp (deleted)")
            name=${target#"$tmp/swap/"}
            echo "${name% (deleted)} $(stat -L -c '%s %b' "$fd")" ;;
        esac
    done
done >"$tmp/files.txt"
kill -9 "${ranks%%$'\n'*}"
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { kill -9 $job; fail "the job still runs 30 s after a rank was killed"; }
wait $job
got=$?
set -e
[ "$got" != 0 ] || fail "a job with a killed rank exited 0"
want=$(printf '%s\n' zero_stage_3/{float16params,optimizer}/rank{0,1}/.zerotrain.lock | sort)
[ "$named" = "$want" ] || { echo "$named"; fail "named files in nvme_path while training"; }
[ -z "$(find "$tmp/swap" -type f ! -name .zerotrain.lock)" ] || fail "kill -9 left swap files"
echo "ok: while training only the locks have names; kill -9 leaves no swap file behind"
$ZT_PYTHON - "$tmp/files.txt" "$tmp/full.json" <<'PY' || { cat "$tmp/files.txt"; fail "swap files on disk"; }
import json, re, sys
files = {}
for line in open(sys.argv[1]):
    name, size, blocks = line.split()
    files[name] = (int(size), int(blocks) * 512)
r = json.load(open(sys.argv[2]))
for rk in r["ranks"]:
    R, mem = rk["rank"], rk["memory_bytes"]["nvme"]
    opt = f"zero_stage_3/optimizer/rank{R}/"
    par = f"zero_stage_3/float16params/rank{R}/"
    mine = {k: v for k, v in files.items() if k.startswith((opt, par))}
    stems = {opt + s + ".tensor.swp" for s in ("fp32_master", "exp_avg", "exp_avg_sq", "gradient")}
    params = [k for k in mine if re.fullmatch(re.escape(par) + r"\d+_param\.tensor\.swp", k)]
    assert set(mine) == stems | set(params), mine
    assert len(params) == r["nvme"]["swapped_param_units"], params
    for k in stems | set(params):
        size, alloc = mine[k]
        assert size % 4096 == 0 and alloc >= size > 0, (k, size, alloc)
    assert all(mine[k][0] == mem["MASTER"] for k in stems), (mine, mem)
    assert sum(mine[k][0] for k in params) == mem["PARAMS"], (params, mem)
    assert 2 * mem["MASTER"] == mem["OPTIM"]
    print(f"ok: rank {R}: {len(stems) + len(params)} nameless swap files open, {sum(mine[k][0] for k in stems | set(params))} B allocated, as the report says")
PY
at=$(cat "$tmp/ck2/latest")
run 2 gpt16-nvme after-kill "${gpt[@]}" --steps $((${at#global_step} + 2)) --load-dir "$tmp/ck2" \
    --resume
grep -q "resumed from $tmp/ck2/global_step" "$tmp/after-kill.log" || fail "no resume after the kill"
nvme_empty "the run after a killed one"
echo "ok: after the kill the latest checkpoint resumes, and the next run removes the folders"

# 4. The estimate's nvme rows are the nvme run's reservation, class by class.
./zerotrain --estimate-memory --num-gpus 2 --config "$tmp/mlp-s3-nvme.json" "${mlp[@]}" \
    --report "$tmp/est.json" >"$tmp/est.log" 2>&1 || { cat "$tmp/est.log"; fail "estimate"; }
grep -q "stage=3, offload_param=nvme, offload_optimizer=nvme" "$tmp/est.log" ||
    { cat "$tmp/est.log"; fail "no nvme row in the estimate"; }
grep -q "^  nvme files" "$tmp/est.log" || fail "no nvme files row in the estimate"
$ZT_PYTHON tests/tools/ztcheck.py estimate "$tmp/est.json" "$tmp/mlp-s3-np2-nvme.json" --stage 3 \
    --tol 0 --offload-optimizer nvme --offload-param nvme
$ZT_PYTHON - "$tmp/est.json" "$tmp/mlp-s3-np2-nvme.json" <<'PY' || fail "estimate nvme bytes"
import json, sys
est, run = (json.load(open(f)) for f in sys.argv[1:])
v = [v for v in est["variants"] if v["offload_optimizer"] == "nvme" and v["offload_param"] == "nvme"]
assert len(v) == 1 and v[0]["nvme_bytes"] == run["nvme"]["swap_file_bytes"] > 0, (v, run["nvme"])
assert v[0]["host_bytes"]["SWAP"] == run["nvme"]["swap_buffer_bytes"]
print("ok: the estimate's nvme files and swap buffers are the run's")
PY
echo "ok: nvme offload in $((SECONDS - t0)) s"
