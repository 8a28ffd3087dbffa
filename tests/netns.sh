# The multi-node tests' cluster (scripts/netns-cluster.sh), for tests/mpi
# scripts: source it after tests/env.sh and zt_scratch. `zt_netns_up N [SLOTS]`
# brings up N hosts of SLOTS slots, sources their Open MPI settings (which
# replace env.sh's OMPI_MCA_btl) and sets $netns_mpirun to the plain launch
# line; the hosts are torn down when the test exits, passed or failed. Where
# network namespaces cannot be made (not root, no iproute2, a container
# without CAP_NET_ADMIN) the test prints "skipped: WHY" and exits 0. A lock
# keeps two such tests from sharing the hosts.
zt_netns_up() {
    local n=$1 slots=${2:-2} why=""
    if [ "$(id -u)" != 0 ]; then
        why="not root (ip netns needs it; CI runs as root)"
    elif ! command -v ip >/dev/null; then
        why="no 'ip' command (apt-get install iproute2)"
    elif ! command -v unshare >/dev/null; then
        why="no 'unshare' command (util-linux)"
    elif ! ip netns add "ztprobe$$" 2>/dev/null; then
        why="cannot create a network namespace here (no CAP_NET_ADMIN?)"
    fi
    if [ -n "$why" ]; then
        echo "skipped: multi-node tests: $why"
        exit 0
    fi
    ip netns del "ztprobe$$"
    exec 8>/run/zt-netns-tests.lock
    flock 8
    trap "bash scripts/netns-cluster.sh down $n >/dev/null 2>&1; rm -rf \"\$tmp\"" EXIT
    trap 'exit 1' INT TERM HUP
    bash scripts/netns-cluster.sh up "$n" "$slots" || fail "scripts/netns-cluster.sh up $n failed"
    # shellcheck disable=SC1090
    source "hostfiles/netns-$n.env"
    netns_mpirun="mpirun --hostfile hostfiles/netns-$n"
}

# Seconds since the epoch, with fractions.
zt_now() { date +%s.%N; }
