#!/usr/bin/env bash
# A host lost mid-run, on 2 hosts x 2 ranks of scripts/netns-cluster.sh, with
# mpirun started on the head node ztn0 (as on a cluster) and ZT_COMM_TIMEOUT=4.
# The job trains and saves every 20 steps; once a checkpoint exists, ztn1 is
# taken away:
#  1. its link cut (`ip link set ztv1 down`): the ranks on ztn0 wait in a
#     collective until the watchdog fires, probe their peers (2 s, half the
#     limit) and fail naming the collective and the host that did not answer
#     ("ranks 2-3 (host ztn1)"); MPI_Abort with zerotrain's exit code 1, which
#     mpirun passes on once TCP on ztn0 has given up on ztn1's daemon (~3 s,
#     the cluster's tcp_retries2). The job must end after the limit and within
#     limit + probe + 16 s of the cut (10.5-13.9 s here when quiet; the abort's
#     teardown alone took up to 14 s on a loaded machine). The cut may land in
#     a checkpoint save: its agreement is under the watchdog too;
#  2. its orted killed: mpirun sees the daemon's connection close at once and
#     ends the job itself ("ORTE has lost communication with a remote daemon
#     ... on node ztn1"), with Open MPI's exit code 205 (ORTE_ERR_COMM_FAILURE)
#     within seconds, before any watchdog could fire: that code and message
#     are mpirun's decision, not zerotrain's.
# After each, the checkpoint `latest` names still loads: a run on this machine
# resumes from it and trains 2 more steps.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
source tests/netns.sh
zt_netns_up 2 2
t_start=$SECONDS

limit=4
probe=2
cat >"$tmp/c.json" <<JSON
{"train_batch_size": 16, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}}
JSON
job=(./zerotrain --config "$tmp/c.json" --model mlp --width 64 --layers 4 --steps 1000000
     --save-interval 20 --device cpu)

# Starts the job from ztn0 into $tmp/$1, waits for its first checkpoint and
# a little more (so the fault lands between saves), then runs the fault
# command. Sets rc, wall (seconds from the fault to the end of mpirun).
fault() { # tag fault-command...
    local tag=$1
    shift
    ZT_COMM_TIMEOUT=$limit bash scripts/netns-cluster.sh exec ztn0 timeout 120 \
        $netns_mpirun -np 4 "${job[@]}" --save-dir "$tmp/$tag" >"$tmp/$tag.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do [ -e "$tmp/$tag/latest" ] && break; sleep 0.1; done
    [ -e "$tmp/$tag/latest" ] || { kill $pid; cat "$tmp/$tag.log"; fail "$tag: no checkpoint in 60 s"; }
    sleep 0.5
    local t0
    t0=$(zt_now)
    "$@"
    rc=0
    wait $pid || rc=$?
    wall=$(awk -v a="$t0" -v b="$(zt_now)" 'BEGIN { printf "%.1f", b - a }')
    [ "$rc" != 124 ] || { cat "$tmp/$tag.log"; fail "$tag: the job hung (timeout 120 s)"; }
}

# The checkpoint latest names loads and trains on (on this machine, any world size).
loads() { # tag
    local tag=$1 step
    step=$(sed 's/^global_step//' "$tmp/$tag/latest")
    timeout 120 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/c.json" --model mlp --width 64 \
        --layers 4 --device cpu --steps $((step + 2)) --load-dir "$tmp/$tag" --resume \
        >"$tmp/$tag-resume.log" 2>&1 || { cat "$tmp/$tag-resume.log"; fail "$tag: latest does not load"; }
    grep -q "resumed from $tmp/$tag/global_step$step" "$tmp/$tag-resume.log" &&
        grep -q "now at step $((step + 2))" "$tmp/$tag-resume.log" ||
        { cat "$tmp/$tag-resume.log"; fail "$tag: no resume from global_step$step"; }
    echo "ok: $tag: global_step$step, the last checkpoint, loads and trains on"
}

orted_of() { # host: the pid of its orted
    local p
    for p in $(ip netns pids "$1"); do
        if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = orted ]; then echo "$p"; fi
    done
}

# ---- 1. ztn1's link cut
fault cut ip link set ztv1 down
[ "$rc" = 1 ] || { cat "$tmp/cut.log"; fail "link cut: exit $rc, expected zerotrain's 1"; }
pattern="did not complete within $limit\.[0-9] s on rank [01] of 4; ranks 2-3 \(host ztn1\) did not answer a probe within $probe\.0 s"
grep -E "error: MPI .*$pattern" "$tmp/cut.log" >/dev/null ||
    { cat "$tmp/cut.log"; fail "link cut: no watchdog message naming the collective and host ztn1"; }
awk -v w="$wall" -v lo="$limit" -v hi=$((limit + probe + 16)) 'BEGIN { exit !(w >= lo && w < hi) }' ||
    { cat "$tmp/cut.log"; fail "link cut: the job ended ${wall} s after the cut, want $limit..$((limit + probe + 16)) s"; }
echo "ok: link cut: exit 1 after ${wall} s: $(grep -oE "MPI [^#(]*(#[0-9]+ )?\([^)]*\)" "$tmp/cut.log" | head -1), ranks 2-3 (host ztn1) named"
# Whatever still runs cut off on ztn1 goes with its namespace.
bash scripts/netns-cluster.sh up 2 >/dev/null
loads cut

# ---- 2. ztn1's orted killed
kill_orted() {
    local p
    p=$(orted_of ztn1)
    [ -n "$p" ] || fail "no orted on ztn1"
    kill -9 $p
}
fault kill kill_orted
[ "$rc" = 205 ] || { cat "$tmp/kill.log"; fail "orted killed: exit $rc, expected Open MPI's 205"; }
grep -q "ORTE has lost communication with a remote daemon" "$tmp/kill.log" &&
    grep -qE "Remote daemon: .* on node ztn1" "$tmp/kill.log" ||
    { cat "$tmp/kill.log"; fail "orted killed: no message naming host ztn1"; }
awk -v w="$wall" -v hi="$limit" 'BEGIN { exit !(w < hi) }' ||
    { cat "$tmp/kill.log"; fail "orted killed: the job ended ${wall} s after the kill, want < $limit s"; }
echo "ok: orted killed: mpirun ended the job after ${wall} s (exit 205), naming host ztn1"
loads kill
echo "ok: host faults in $((SECONDS - t_start)) s"
