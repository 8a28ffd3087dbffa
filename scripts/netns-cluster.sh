#!/usr/bin/env bash
# A cluster of N hosts on this machine, for multi-node runs and tests without
# a second machine (root only):
#
#   scripts/netns-cluster.sh up N [SLOTS]     N hosts, SLOTS ranks each (default 2)
#   source hostfiles/netns-N.env
#   mpirun -np 4 --hostfile hostfiles/netns-N ./zerotrain ...
#   scripts/netns-cluster.sh exec HOST CMD... runs CMD on HOST (mpirun from a
#                                             head node, as on a real cluster)
#   scripts/netns-cluster.sh down N
#
# Each host is a Linux network namespace ztn0 .. ztn<N-1> with its own address
# 10.213.0.(10+i)/24 on a veth pair whose other end (ztv<i>) is a port of the
# bridge ztbr0 (10.213.0.1, this machine's side). /etc/hosts gets a line per
# host so the names resolve; `down` removes them.
#
# scripts/netns-rsh.sh is Open MPI's rsh agent: it starts each orted inside
# its host's namespace, in a UTS namespace whose hostname is the host's name,
# so every rank's gethostname() names its host.
#
# hostfiles/netns-N holds "ztn<i> slots=SLOTS" lines (Open MPI's hostfile
# format, which DeepSpeed's hostfiles use too). hostfiles/netns-N.env sets the
# OMPI_MCA_* variables the launch needs: the agent, no tree spawn, daemons and
# ranks on the bridge's subnet only, the byte transports self,vader,tcp, and
# waiting ranks that yield their core (the hosts share this machine's).
# vader (shared memory) joins only ranks that Open MPI places on the same
# host, so ranks on different hosts always talk TCP over the bridge. The file
# overrides the OMPI_MCA_btl=self,vader of tests/env.sh.
#
# Faults for tests: `ip link set ztv<i> down` cuts host i off; killing the
# orted among `ip netns pids ztn<i>` kills its daemon. `down` kills whatever
# still runs in the namespaces before deleting them.
set -eu
cd "$(dirname "$0")/.."

usage() {
    echo "usage: $0 up N [SLOTS] | down N | exec HOST CMD..." >&2
    exit 2
}
[ $# -ge 2 ] || usage
cmd=$1

need() {
    [ "$(id -u)" = 0 ] || { echo "netns-cluster: needs root (ip netns, /etc/hosts)" >&2; exit 1; }
    command -v ip >/dev/null || { echo "netns-cluster: no 'ip' (apt-get install iproute2)" >&2; exit 1; }
    command -v unshare >/dev/null || { echo "netns-cluster: no 'unshare' (util-linux)" >&2; exit 1; }
}

if [ "$cmd" = exec ]; then
    need
    host=$2
    shift 2
    [ $# -ge 1 ] || usage
    ip netns list | grep -q "^$host\b" ||
        { echo "netns-cluster: no host $host (scripts/netns-cluster.sh up N)" >&2; exit 1; }
    exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi

n=$2 slots=${3:-2}
[[ $n =~ ^[1-9][0-9]?$ ]] && [ "$n" -le 64 ] || { echo "netns-cluster: N must be 1..64" >&2; exit 2; }
[[ $slots =~ ^[1-9][0-9]?$ ]] || { echo "netns-cluster: SLOTS must be 1..99" >&2; exit 2; }

subnet=10.213.0
bridge=ztbr0
marker="# zerotrain netns-cluster"
hostfile=hostfiles/netns-$n

# Removes host i: its processes, namespace and veth.
host_down() {
    local ns=ztn$1
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    fi
    ip link del "ztv$1" 2>/dev/null || true
}

# Replaces this script's /etc/hosts lines with $1 (lines, may be empty), under
# a lock so two runs never interleave.
hosts_set() {
    (
        flock 9
        local t
        t=$(mktemp)
        grep -v "$marker\$" /etc/hosts >"$t" || true
        printf '%b' "$1" >>"$t"
        # Written in place: /etc/hosts may be a bind mount that mv cannot replace.
        cat "$t" >/etc/hosts
        rm -f "$t"
    ) 9>/run/zt-netns-cluster.lock
}

down() {
    for ((i = 0; i < n; i++)); do host_down "$i"; done
    hosts_set ""
    # The bridge stays while another cluster's hosts use it.
    if ip link show "$bridge" >/dev/null 2>&1 &&
        [ -z "$(ls "/sys/class/net/$bridge/brif" 2>/dev/null)" ]; then
        ip link del "$bridge"
    fi
    rm -f "$hostfile" "$hostfile.env"
}

up() {
    down
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add "$bridge" type bridge
        ip addr add "$subnet.1/24" dev "$bridge"
    fi
    ip link set "$bridge" up
    local lines=""
    for ((i = 0; i < n; i++)); do
        local ns=ztn$i addr=$subnet.$((10 + i))
        ip netns add "$ns"
        ip link add "ztv$i" type veth peer name eth0 netns "$ns"
        ip link set "ztv$i" master "$bridge" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$addr/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route add default via "$subnet.1"
        # TCP on these hosts gives up on an unanswered peer after ~3 s of
        # retransmissions (the kernel's default, 15, takes ~15 minutes), so a
        # launcher on a host sees a cut-off host's daemon as lost soon after
        # zerotrain's watchdog has named it (docs/multinode.md, "Failures").
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=3
        lines+="$addr $ns $marker\n"
    done
    hosts_set "$lines"
    mkdir -p hostfiles
    {
        echo "# $n hosts of scripts/netns-cluster.sh, $slots slots each (Open MPI and DeepSpeed format)"
        for ((i = 0; i < n; i++)); do echo "ztn$i slots=$slots"; done
    } >"$hostfile"
    cat >"$hostfile.env" <<ENV
# Open MPI settings for: mpirun --hostfile $hostfile ...  (scripts/netns-cluster.sh)
export OMPI_MCA_plm_rsh_agent=$PWD/scripts/netns-rsh.sh
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_oob_tcp_if_include=$subnet.0/24
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=$subnet.0/24
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_rmaps_base_oversubscribe=1
# The hosts share this machine's cores, which each orted sees as all its own:
# waiting ranks yield instead of spinning a core the others need.
export OMPI_MCA_mpi_yield_when_idle=1
ENV
    for ((i = 0; i < n; i++)); do
        getent hosts "ztn$i" >/dev/null || { echo "netns-cluster: ztn$i does not resolve" >&2; exit 1; }
    done
    echo "netns-cluster: $n hosts up: $hostfile, $hostfile.env"
}

need
case $cmd in
up) up ;;
down)
    down
    echo "netns-cluster: $n hosts down"
    ;;
*) usage ;;
esac
