#!/bin/sh
# Open MPI's rsh agent for the hosts of scripts/netns-cluster.sh: called as
# ssh would be (`netns-rsh.sh [options] HOST COMMAND...`), it runs COMMAND
# with /bin/sh inside HOST's network namespace and in a UTS namespace whose
# hostname is HOST. ssh's options (Open MPI may pass some) are skipped.
while [ $# -gt 0 ]; do
    case $1 in
    -[1246AaCfGgKkMNnqsTtVvXxYy]) shift ;;
    -*) shift 2 ;;
    *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "netns-rsh: usage: netns-rsh.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift
ip netns list | grep -q "^$host\b" || { echo "netns-rsh: no namespace $host (scripts/netns-cluster.sh up N)" >&2; exit 255; }
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
