# Environment shared by the test scripts: Open MPI as root (CI runs as root),
# one thread per rank when ranks outnumber cores, and where things live.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's shared-memory transport needs no network; keep it off the NICs.
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export ZT_PYTHON=${ZT_PYTHON:-/usr/bin/python3}
export ZT_SHARED=${ZT_SHARED:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared}
ZT_MPIRUN="mpirun --oversubscribe --bind-to none"
# The binary a multi-rank test runs and the device flags it adds. ZT_SIM=1
# points them at the CUDA simulator's build (make sim; docs/simulator.md): the
# CUDA backend and NCCL on simulated GPUs, one per local rank.
if [ "${ZT_SIM:-0}" = 1 ]; then
    ZT_BIN=${ZT_BIN:-build/sim/zerotrain}
    ZT_DEVICE_FLAGS=${ZT_DEVICE_FLAGS:---device cuda --comm nccl}
    export ZT_SIM_DEVICES=${ZT_SIM_DEVICES:-8}
    export ZT_SIM_DEVICE_MEMORY_MB=${ZT_SIM_DEVICE_MEMORY_MB:-8192}
fi
ZT_BIN=${ZT_BIN:-./zerotrain}
ZT_DEVICE_FLAGS=${ZT_DEVICE_FLAGS:-}

fail() { echo "FAIL: $*"; exit 1; }

# The machine's cores: nproc alone answers OMP_NUM_THREADS, set to 1 above.
zt_cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

# A test's scratch directory $tmp, removed on exit; the binary must be built.
zt_scratch() {
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    [ -x ./zerotrain ] || fail "./zerotrain is not built (run make)"
}

# expect CODE PATTERN -- command...: exit status CODE and PATTERN in stdout+stderr
# (the calling script's $tmp holds the output).
expect() {
    local code=$1 pattern=$2; shift 3
    set +e
    timeout 60 "$@" >"$tmp/out" 2>&1
    local got=$?
    set -e
    [ "$got" = "$code" ] || { cat "$tmp/out"; fail "expected exit $code, got $got: $*"; }
    grep -q -- "$pattern" "$tmp/out" || { cat "$tmp/out"; fail "no '$pattern' in output of: $*"; }
    echo "ok: exit $code, '$pattern': ${*:1:6}"
}

# zt_short_reviews N OUT [SPAN]: the first N reviews of the shared IMDB sample,
# cut to 3 to SPAN + 2 bytes (review i keeps 3 + (37 i mod SPAN) bytes, at a
# UTF-8 boundary; SPAN 58 unless given), as a review,sentiment CSV: short,
# mixed lengths, so ranks pad their micro-batches to different lengths and the
# classifier runs in seconds.
zt_short_reviews() {
    $ZT_PYTHON - "$ZT_SHARED/data/imdb/imdb-2500.csv" "$2" "$1" "${3:-58}" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8")))[: int(sys.argv[3])]
span = int(sys.argv[4])
with open(sys.argv[2], "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f)
    w.writerow(["review", "sentiment"])
    for i, r in enumerate(rows):
        w.writerow([r["review"].encode()[: 3 + (i * 37) % span].decode("utf-8", "ignore"), r["sentiment"]])
PY
}

# Permission checks do not apply to root. zt_unprivileged WHAT sets $unpriv to
# a command prefix under which they do: nothing for another user, setpriv to
# nobody for root (the scratch directory is opened to nobody). Without
# setpriv, root cannot run such a case: it says what is skipped and returns 1.
zt_unprivileged() {
    unpriv=()
    [ "$(id -u)" != 0 ] && return 0
    if command -v setpriv >/dev/null &&
        setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
        unpriv=(setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp)
        chmod 755 "$tmp"
        return 0
    fi
    echo "skip: $1 (running as root without setpriv: root passes every permission check)"
    return 1
}

# The OPENBLAS_CORETYPE values of Haswell, SkylakeX, Zen and Sandybridge this
# CPU can execute (their kernels' instruction sets in /proc/cpuinfo's flags).
# Whether two BLAS calls give the same bits depends on the kernel OpenBLAS
# picks, so tests of such properties run under each (tests/run.sh).
zt_blas_coretypes() {
    local flags
    flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    has() { local f; for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
    has avx2 fma && echo Haswell
    has avx512f avx512cd avx512bw avx512dq avx512vl && echo SkylakeX
    has avx2 fma && echo Zen
    has avx && echo Sandybridge
    unset -f has
}

# zt_printable FILE: the file is valid UTF-8 with no control bytes but
# newlines, as every message zerotrain prints must be (engine/quote.h).
zt_printable() {
    $ZT_PYTHON - "$1" <<'PY' || { cat "$1"; fail "raw bytes in the output"; }
import sys
data = open(sys.argv[1], "rb").read()
data.decode("utf-8")
bad = [b for b in data if (b < 0x20 and b != 0x0A) or b == 0x7F]
assert not bad, f"control bytes {bad[:5]}"
PY
}
