#!/usr/bin/env bash
# Multi-node for real: 2 hosts x 2 ranks of scripts/netns-cluster.sh (network
# namespaces with their own addresses; ranks on different hosts talk TCP),
# launched with a plain `mpirun --hostfile hostfiles/netns-2`. Against the np 1
# stage 0 run of tests/mpi/test_stages_equivalence.sh's MLP (same model, data,
# AdamW with eps 1e-5; see there for why), to its tolerance 1e-6 (relative L2
# of the weights, per-step losses), GAS 3, small buckets with overlap:
#  1. stages 0-3: the report sees 2 hosts (ranks 0-1 on ztn0, 2-3 on ztn1);
#  2. hpZ, zero_hpz_partition_size 2 = ranks per host, with ZT_RANKS_PER_NODE
#     unset: the node groups are the real hosts. The exact stage-3 counters
#     (tests/tools/ztstages.py check: the forward gathers over the world, the
#     backward's over the hpZ group) and the group's "hosts": 1, so the
#     backward gather sent nothing between hosts. Ranks placed round-robin
#     over the hosts (--map-by node) put an hpZ group across them: refused;
#  3. MiCS with mics_shard_size 2: one shard group per host ("hosts": 1), the
#     replica groups across them, nothing on the world communicator;
#  4. a checkpoint saved at step 10 on 2 x 2 (stage 3) resumes on 1 host x 3
#     ranks (stage 1) and ends at step 20 with the reference's weights.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
source tests/netns.sh
unset ZT_RANKS_PER_NODE
zt_netns_up 2 2
t0=$SECONDS

model=(--model mlp --width 64 --layers 4 --in-size 32 --out-size 10 --seed 7)
write_cfg() { # name stage extra-zero-json
    cat >"$tmp/cfg-$1.json" <<JSON
{
  "train_batch_size": 72,
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "zero_optimization": {"stage": $2$3}
}
JSON
}
small=', "reduce_bucket_size": 1000, "allgather_bucket_size": 1000, "overlap_comm": true'
window=', "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 5000,
    "stage3_prefetch_bucket_size": 3000, "stage3_max_reuse_distance": 0'
write_cfg ref 0 ', "reduce_bucket_size": 500000000, "overlap_comm": false'
for s in 0 1 2; do write_cfg "s$s" "$s" "$small"; done
write_cfg s3 3 "$small$window"
write_cfg hpz 3 "$small$window, \"zero_hpz_partition_size\": 2"
write_cfg mics 3 "$small$window, \"mics_shard_size\": 2"

./zerotrain --config "$tmp/cfg-ref.json" "${model[@]}" --steps 20 --gradient-accumulation-steps 1 \
    --dump-params "$tmp/ref.bin" --report "$tmp/ref.json" >"$tmp/ref.log" 2>&1 ||
    { cat "$tmp/ref.log"; fail "the np 1 reference run"; }

run() { # tag cfg mpirun-args... -- zerotrain-args...: 2 x 2 unless the args say otherwise
    local tag=$1 cfg=$2
    shift 2
    local launch=()
    while [ "$1" != -- ]; do launch+=("$1"); shift; done
    shift
    timeout 120 $netns_mpirun "${launch[@]}" ./zerotrain --config "$tmp/cfg-$cfg.json" \
        "${model[@]}" --dump-params "$tmp/$tag.bin" --report "$tmp/$tag.json" "$@" \
        >"$tmp/$tag.log" 2>&1 || { cat "$tmp/$tag.log"; fail "$tag: zerotrain failed"; }
}

# The report's hosts per rank and per comm group: HOSTS is the expected host of
# each rank; GROUP=N pairs say how many hosts each group must span.
hosts_check() { # report tag hosts group=n...
    $ZT_PYTHON - "$@" <<'PY' || exit 1
import json, sys
path, tag, want_hosts = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
r = json.load(open(path))
got = [k["host"] for k in r["ranks"]]
bad = []
if got != want_hosts:
    bad.append(f"ranks run on {got}, expected {want_hosts}")
for spec in sys.argv[4:]:
    g, n = spec.split("=")
    for k in r["ranks"]:
        h = k["comm"][g]["hosts"]
        if h != int(n):
            bad.append(f"rank {k['rank']}: group {g} spans {h} host(s), expected {n}")
if bad:
    sys.exit(f"FAIL: {tag}: " + "; ".join(bad))
print(f"ok: {tag}: ranks on {','.join(got)}; " + ", ".join(
    f"{s.split('=')[0]} on {s.split('=')[1]} host(s)" for s in sys.argv[4:]))
PY
}
same() { # tag stage: weights and losses equal the reference's
    $ZT_PYTHON tests/tools/ztstages.py same "$tmp/ref.bin" "$tmp/ref.json" "$tmp/$1.bin" \
        "$tmp/$1.json" --tol 1e-6 --expect "stage=$2,np=4,gas=3" --tag "$1: 2 hosts x 2 ranks" ||
        { cat "$tmp/$1.log"; fail "$1 differs from the np 1 stage 0 run"; }
}
two_hosts=ztn0,ztn0,ztn1,ztn1

# ---- 1. every stage over two hosts
for s in 0 1 2 3; do
    run "s$s" "s$s" -np 4 -- --steps 20 --gradient-accumulation-steps 3
    grep -q "4 rank(s) on 2 node(s)" "$tmp/s$s.log" ||
        { head -3 "$tmp/s$s.log"; fail "s$s: not 2 nodes"; }
    same "s$s" "$s"
    hosts_check "$tmp/s$s.json" "stage $s" "$two_hosts" world=2
done

# ---- 2. hpZ inside each host, from the real node split
run hpz hpz -np 4 -- --steps 20 --gradient-accumulation-steps 3
same hpz 3
$ZT_PYTHON tests/tools/ztstages.py check "$tmp/hpz.json" --mlp 64,4,32,10 --persist-threshold 0 \
    --max-live 5000 --reuse-distance 0 --label "hpZ 2 on 2 hosts" ||
    fail "hpZ's counters differ from the formulas"
hosts_check "$tmp/hpz.json" "hpZ" "$two_hosts" hpz=1 world=2
$ZT_PYTHON - "$tmp/hpz.json" <<'PY' || fail "hpZ's backward gather is not in the hpz group"
import json, sys
r = json.load(open(sys.argv[1]))
for k in r["ranks"]:
    assert k["comm"]["hpz"]["bytes"]["all_gather"] > 0, k["comm"]
print("ok: hpZ: every rank's backward gathers (comm.hpz.all_gather > 0) stayed on its host")
PY
set +e
timeout 120 $netns_mpirun -np 4 --map-by node ./zerotrain --config "$tmp/cfg-hpz.json" \
    "${model[@]}" --steps 20 >"$tmp/hpz-spread.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "zero_hpz_partition_size 2: ranks 0-1 span nodes 0-1" "$tmp/hpz-spread.log" ||
    { cat "$tmp/hpz-spread.log"; fail "an hpZ group across two hosts was not refused (exit $rc)"; }
echo "ok: hpZ: ranks round-robin over the hosts put a group across them: refused (exit 2)"

# ---- 3. MiCS: one shard group per host
run mics mics -np 4 -- --steps 20 --gradient-accumulation-steps 3
same mics 3
hosts_check "$tmp/mics.json" "MiCS" "$two_hosts" mics_shard=1 mics_replica=2 world=2
$ZT_PYTHON - "$tmp/mics.json" <<'PY' || fail "MiCS traffic"
import json, sys
r = json.load(open(sys.argv[1]))
for k in r["ranks"]:
    c = k["comm"]
    assert not any(c["world"]["bytes"].values()), c["world"]
    assert c["mics_shard"]["bytes"]["all_gather"] > 0 and c["mics_replica"]["bytes"]["all_reduce"] > 0, c
print("ok: MiCS: parameters gathered inside each host, replicas all-reduced across, world silent")
PY

# ---- 4. saved on 2 x 2, resumed on 1 host x 3 ranks
run ck-2x2 s3 -np 4 -- --gradient-accumulation-steps 3 --steps 10 --save-dir "$tmp/ck"
[ "$(cat "$tmp/ck/latest")" = global_step10 ] || fail "no global_step10 checkpoint"
run ck-1x3 s1 -np 3 --host ztn0:3 -- --steps 20 --load-dir "$tmp/ck" --resume
grep -q "3 rank(s) on 1 node(s)" "$tmp/ck-1x3.log" && grep -q "resumed from .*global_step10" \
    "$tmp/ck-1x3.log" || { cat "$tmp/ck-1x3.log"; fail "the 1 x 3 run did not resume"; }
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/ref.bin" "$tmp/ck-1x3.bin" --tol 1e-6 ||
    fail "saved on 2 x 2 stage 3, resumed on 1 x 3 stage 1: not the reference's weights"
hosts_check "$tmp/ck-1x3.json" "resumed" ztn0,ztn0,ztn0 world=1
echo "ok: multi-node: stages 0-3, hpZ, MiCS and a 2x2 -> 1x3 resume over hosts in $((SECONDS - t0)) s"
