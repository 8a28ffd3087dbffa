#!/usr/bin/env bash
# gpu-check: zerotrain's GPU acceptance kit, run on a machine with an NVIDIA GPU.
#
#   bash scripts/gpu-check.sh [--quick] [--out DIR] [--parts LIST] [--deps DIR|FILE]
#   bash scripts/gpu-check.sh --pack-deps FILE.tar.xz        (on the build machine)
#
# Parts, in order (--parts takes a comma list of ops, stages, bench; default all
# three). Every part runs even when an earlier one failed; the exit status is 0
# when all passed, 1 when one failed, 2 when the kit could not run at all.
#   0. environment: nvidia-smi summary; libraries of ./zerotrain and
#      build/tests/op-check (ldd), missing CUDA libraries looked up in the CUDA
#      toolkit and in python3's pip nvidia/torch packages; build with make when
#      nvcc, mpicc and the headers are here (incremental: an existing build is
#      reused), else the binaries already in place (carried from a build machine).
#   ops: build/tests/op-check: every backend op, CUDA against the CPU backend
#      (tolerances in tests/tools/op_check/main.c).
#   stages: the ZeRO stage-equivalence matrix on the CUDA backend. MLP and
#      GPT-lite (small, fp32, dropout 0, Adam eps 1e-5 as in
#      tests/mpi/test_stages_equivalence.sh, small buckets and a stage-3 gather
#      window), stages 0-3 at np 1 (--comm nccl) and np 2, 3, 4 (--comm mpi:
#      ranks share the one GPU, NCCL refuses two ranks on one device); with two
#      or more GPUs also np 2 up to min(GPUs, 4) over NCCL, one GPU per rank
#      (the world's and, at np 4, hpZ's and MiCS's sub-communicators: a
#      stage-3 run with zero_hpz_partition_size 2 and one with mics_shard_size
#      2 are added there). Each run's
#      --dump-params and --report loss history against the np 1 stage 0 CUDA run
#      (1e-5: only the order of reductions differs between stages and world
#      sizes) and against the CPU backend's np 1 stage 0 run (1e-4: every op
#      rounds differently, Adam amplifies that a little over the steps), with
#      tests/tools/ztcheck.py dumps / losses (relative L2 / max relative).
#   matrix (not in the default list: --parts matrix): mixed precision,
#      offload and activation checkpointing: tests/cudasim/test_matrix.sh's
#      24 runs (GPT-lite and the classifier, fp32/bf16/fp16, stages 0-3 at
#      np 1-3, optimizer and parameter offload, checkpointing on the GPU and
#      on the host) with ./zerotrain on the GPU against the CPU backend, at
#      its tolerances (fp32 1e-5 losses / 1e-4 weights, 16-bit 2e-3 / 2.5e-3);
#      ranks share one GPU over MPI (NCCL with 3 or more GPUs). Needs the
#      IMDB sample beside tiny shakespeare (DATA's ../../imdb). Into
#      matrix.txt. MATRIX_TIMEOUT (900) caps it; MATRIX_BIN (./zerotrain) is the
#      binary on the GPU side (build/sim/zerotrain checks the part without one).
#   bench: throughput at GPT-2 small's shape (12 layers, C 768, 12 heads, T 1024,
#      vocab 65), micro-batch MICRO (16) at np 1 over NCCL, fp32 and bf16, ZeRO
#      stages 0-3 (quick: 0 and 3), and at GPT-2's vocabulary (50257: the lm_head
#      GEMMs whose 16-bit operands exceed the cast workspace and run in tiles)
#      in bf16 at stages 0 and 3 (micro-batch MICRO_BIGV, 8), next to
#      scripts/torch_gptlite_peer.py on the
#      same GPU (eager and torch.compile, fp32 and bf16 autocast, and compile+bf16
#      with flash attention). tokens/s: zerotrain's median CurrSamplesPerSec over
#      the steps after the first 2 (DeepSpeed's throughput timer) times T; the
#      peer's median step time. MFU = tokens/s * F / P, F = 6 N + 12 L C T FLOPs
#      per token (N: parameters less the two embedding tables, which do no
#      matmul; 12 L C T: attention scores and weighted values, full T x T as both
#      tools compute it), P the bf16 GEMM peak op-check --gemm-peak measures here
#      and, in a second column, the GPU's dense bf16 peak from its data sheet
#      (known GPUs by nvidia-smi name; SPEC_PEAK_TFLOPS overrides). fp32 rows
#      are against the same bf16 peaks (fp32 peak printed alongside).
#   table (not in the default list: --parts table): the bench part's table
#      (throughput.md) from the runs already in OUT/bench, for a bench part
#      that a time limit cut short.
#   roofline (not in the default list: --parts roofline, or ops,stages,bench,roofline):
#      docs/roofline.md's table measured. GPT-2 small (12 layers, C 768, 12
#      heads, T 1024, vocab 50257: the GPT-2 BPE tokenizer when its folder is
#      found beside the data, else --vocab-size 50257 over the data's
#      characters, which counts the same), bf16, micro-batch ROOF_MICRO (16),
#      ZeRO stages 0 and 3 at np 1, ROOF_STEPS (8) steps with --profile: the
#      step time scripts/roofline.py predicts from the run's own counts (for
#      the GPU by nvidia-smi name: h100/h200 or a100; ROOF_GPU overrides;
#      ROOF_COUNTS, a ZT_SIM_PERF report of the same kernels, adds roofline
#      v2's device counters: gpu-lease.sh sets it)
#      next to the measured median step (CurrSamplesPerSec after the first 2
#      steps), with both MFUs, into roofline.md; then stage 0 for 3 steps with
#      --profile-time: each op's measured time next to its prediction
#      (roofline/gpt2-bf16-s0-bMICRO-timed.roofline.md, printed).
#      ROOF_DEVICE=cpu with a small N_LAYER/N_EMBD/N_HEAD/BLOCK, ROOF_VOCAB
#      and ROOF_MICRO runs the part's plumbing on a machine without a GPU (its
#      "measured" is then the CPU's).
# --quick: np 1 and 2 only, fewer steps, op-check --quick, bench stages 0 and 3.
# --out DIR (default ./gpu-results): every raw log, the op-check output, the
# matrix (stages.md) and the throughput table (throughput.md).
# --deps DIR|FILE: a folder or .tar.xz made by --pack-deps: Open MPI, jansson
# and OpenBLAS runtime files for a GPU machine that lacks them.
# --pack-deps FILE: run where zerotrain was built: packs the shared libraries
# ./zerotrain and build/tests/op-check need (less glibc and the CUDA/driver
# libraries: the GPU machine has its own) and Open MPI's launcher, plugins and
# help files, at their absolute paths, into FILE (about 10 MB).
# Paths are relative to the directory the script is started from.
# Env: MPIRUN (default "mpirun --oversubscribe --bind-to none"), ZT_PYTHON (default
# python3 from PATH), ZT_DEVICE (GPU ordinal for op-check, default 0), MICRO, MICRO_BIGV,
# SPEC_PEAK_TFLOPS,
# BENCH_STEPS, N_LAYER/N_EMBD/N_HEAD/BLOCK (the bench shape), DATA (a text file;
# default tiny shakespeare, else a generated one with 65 characters), time limits
# in seconds OPCHECK_TIMEOUT (900), RUN_TIMEOUT (300, a stage run), BENCH_TIMEOUT
# (400, a bench run).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "gpu-check: error: $*" >&2; exit 2; }
section() { printf '\n== %s ==\n' "$*"; }

QUICK=0
OUT=./gpu-results
PARTS=ops,stages,bench
DEPS=${ZT_DEPS:-}
PACK=
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT=$2; shift ;;
    --parts) [ $# -ge 2 ] || die "--parts needs a list"; PARTS=$2; shift ;;
    --deps) [ $# -ge 2 ] || die "--deps needs a folder or file"; DEPS=$2; shift ;;
    --pack-deps) [ $# -ge 2 ] || die "--pack-deps needs a file name"; PACK=$2; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
for p in ${PARTS//,/ }; do
    case $p in
    ops | stages | matrix | bench | roofline | table) ;;
    *) die "--parts: unknown part '$p' (ops, stages, matrix, bench, roofline, table)" ;;
    esac
done
want() { [[ ",$PARTS," == *",$1,"* ]]; }
# Paths given to the script (and DATA) are the caller's; it runs in the repository.
abs() { case $1 in /* | '') echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
OUT=$(abs "$OUT") DEPS=$(abs "$DEPS") PACK=$(abs "$PACK") DATA=$(abs "${DATA:-}")
cd "$ROOT" || exit 2
ARCH_LIB=$(uname -m)-linux-gnu

# ---------------------------------------------------------------- --pack-deps

# The libraries a binary or plugin loads, less the C library and the CUDA and
# driver libraries (the GPU machine's own must be used).
portable_libs() {
    ldd "$@" 2>/dev/null | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
        case ${lib##*/} in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so* | \
            libcudart.so* | libcublas* | libnccl* | libnvidia*) ;;
        *) echo "$lib" ;;
        esac
    done
}

pack_deps() {
    local file=$1 stage mpirun bindir pkglib pkgdata f
    if [ ! -x ./zerotrain ] || [ ! -x build/tests/op-check ]; then
        die "--pack-deps: build first (make zerotrain build/tests/op-check)"
    fi
    if ! command -v mpirun >/dev/null || ! command -v ompi_info >/dev/null; then
        die "--pack-deps: Open MPI (mpirun, ompi_info) is not installed here"
    fi
    stage=$(mktemp -d)
    mpirun=$(readlink -f "$(command -v mpirun)")
    bindir=$(ompi_info --parsable --path bindir | cut -d: -f3)
    pkglib=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    pkgdata=$(ompi_info --parsable --path pkgdatadir | cut -d: -f3)
    # mpirun under its own name (Debian's is a symlink through /etc/alternatives)
    mkdir -p "$stage$bindir" "$stage$pkglib" "$stage$pkgdata"
    cp -L "$mpirun" "$stage$bindir/mpirun"
    cp -L "$bindir/orted" "$stage$bindir/orted"
    cp -L "$pkglib"/*.so "$stage$pkglib/"
    cp -r "$pkgdata/." "$stage$pkgdata/"
    for f in $(portable_libs ./zerotrain build/tests/op-check "$mpirun" "$bindir/orted" \
        "$pkglib"/*.so); do
        mkdir -p "$stage$(dirname "$f")"
        cp -L "$f" "$stage$f"
    done
    tar -cJf "$file" -C "$stage" . || die "--pack-deps: tar failed"
    rm -rf "$stage"
    echo "gpu-check: packed $(du -h "$file" | cut -f1) into $file; on the GPU machine:"
    echo "    bash scripts/gpu-check.sh --deps $file"
    echo "(it runs where glibc is at least this machine's: $(ldd --version | head -1))"
}

if [ -n "$PACK" ]; then
    pack_deps "$PACK"
    exit 0
fi

mkdir -p "$OUT" || die "cannot create --out $OUT"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
# Wait for tee at exit, so that no line is lost to whoever reads our output.
tee_pid=$!
trap 'exec >&- 2>&-; wait "$tee_pid"' EXIT
echo "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) parts=$PARTS quick=$QUICK out=$OUT"
echo "gpu-check: zerotrain $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
STATUS=0
fail_part() { echo "gpu-check: FAIL: $*"; STATUS=1; }

# ---------------------------------------------------------------- 0. environment

section "0. environment"
if [ -n "$DEPS" ]; then
    if [ -f "$DEPS" ]; then
        mkdir -p "$OUT/deps"
        tar -xJf "$DEPS" -C "$OUT/deps" || die "--deps: cannot unpack $DEPS"
        DEPS=$OUT/deps
    fi
    [ -d "$DEPS" ] || die "--deps $DEPS: no such folder or file"
    export PATH="$DEPS/usr/bin:$PATH"
    [ -d "$DEPS/usr/share/openmpi" ] && export OPAL_PREFIX="$DEPS/usr"
fi
# Library folders zerotrain's binaries need beyond the system's; only their
# commands get them (run_zt), so python3 and torch keep the machine's own.
ZT_LIBS=
add_lib_dir() { [[ ":$ZT_LIBS:" == *":$1:"* ]] || ZT_LIBS=${ZT_LIBS:+$ZT_LIBS:}$1; }
if [ -n "$DEPS" ]; then
    for d in "$DEPS/usr/lib/$ARCH_LIB" "$DEPS/usr/lib/$ARCH_LIB/openblas-openmp" \
        "$DEPS/usr/lib/$ARCH_LIB/openmpi/lib" "$DEPS/lib/$ARCH_LIB"; do
        [ -d "$d" ] && add_lib_dir "$d"
    done
fi
run_zt() { LD_LIBRARY_PATH="$ZT_LIBS${LD_LIBRARY_PATH:+${ZT_LIBS:+:}$LD_LIBRARY_PATH}" "$@"; }

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit,clocks.max.sm \
        --format=csv || true
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
else
    echo "gpu-check: no nvidia-smi: is this a GPU machine?"
fi
# GPUs this job can use: CUDA_VISIBLE_DEVICES's entries, else nvidia-smi's list.
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    IFS=, read -ra cvd <<<"$CUDA_VISIBLE_DEVICES"
    N_GPU=${#cvd[@]}
else
    N_GPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "GPUs: $N_GPU ($GPU_NAME)"
# nproc alone would answer OMP_NUM_THREADS.
nproc_all=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
echo "CPU: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo) x $nproc_all;" \
    "$(ldd --version | head -1)"

export ZT_PYTHON=${ZT_PYTHON:-$(command -v python3 || true)}
PY=$ZT_PYTHON
[ -n "$PY" ] || die "no python3 in PATH (set ZT_PYTHON)"
# tests/env.sh: Open MPI as root, shared-memory transport only, one thread per rank.
# shellcheck source=tests/env.sh
source tests/env.sh
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
read -ra mpirun_cmd <<<"$MPIRUN"
torch_v=$($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null ||
    echo 'MISSING (the bench peer rows will fail)')
have_numpy=1
numpy_v=$($PY -c 'import numpy; print(numpy.__version__)' 2>/dev/null) ||
    { have_numpy=0; numpy_v="missing: the stages part compares in plain Python"; }
echo "python: $PY ($($PY -c 'import sys; print(sys.version.split()[0])')), torch $torch_v," \
    "numpy $numpy_v"

# Build when this machine can; otherwise use what was carried here.
NVCC=$(command -v nvcc || command -v "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" || true)
missing_build=()
[ -n "$NVCC" ] || missing_build+=(nvcc)
for t in make mpicc; do command -v $t >/dev/null || missing_build+=("$t"); done
[ -f /usr/include/jansson.h ] || missing_build+=("jansson.h (libjansson-dev)")
[ -n "$(find /usr/include -maxdepth 2 -name cblas.h -print -quit 2>/dev/null)" ] ||
    missing_build+=("cblas.h (libopenblas-openmp-dev)")
if [ ${#missing_build[@]} -eq 0 ]; then
    echo "build: make zerotrain build/tests/op-check (nvcc $NVCC)"
    make --no-print-directory zerotrain build/tests/op-check >"$OUT/build.log" 2>&1 ||
        { tail -30 "$OUT/build.log"; die "make failed (log: $OUT/build.log)"; }
    tail -3 "$OUT/build.log"
else
    echo "build: cannot build here (missing: ${missing_build[*]}); using the binaries in place"
fi
[ -x ./zerotrain ] || die "no ./zerotrain: build it where the CUDA toolkit is (make zerotrain" \
    "build/tests/op-check) and carry ./zerotrain and build/tests/op-check here"

# Each library ldd cannot find is looked up in the CUDA toolkit and in the pip
# packages torch brings (nvidia/*/lib, torch/lib).
lib_roots=()
for d in "${CUDA_HOME:-/usr/local/cuda}" /usr/local/cuda /usr/local/cuda-13*; do
    [ -d "$d" ] && lib_roots+=("$d")
done
while read -r sp; do
    [ -d "$sp/nvidia" ] && lib_roots+=("$sp/nvidia")
    [ -d "$sp/torch/lib" ] && lib_roots+=("$sp/torch/lib")
done < <($PY -c 'import site
print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
missing_libs() { run_zt ldd "$@" 2>&1 | awk '/not found/ { print $1 }' | sort -u; }
bins=(./zerotrain)
[ -x build/tests/op-check ] && bins+=(build/tests/op-check)
for lib in $(missing_libs "${bins[@]}"); do
    for r in "${lib_roots[@]}"; do
        hit=$(find -L "$r" -maxdepth 5 -name "$lib" -print -quit 2>/dev/null)
        if [ -n "$hit" ]; then
            add_lib_dir "$(dirname "$hit")"
            echo "libs: $lib from $(dirname "$hit")"
            break
        fi
    done
done
still=$(missing_libs "${bins[@]}" | tr '\n' ' ')
if [ -n "$still" ]; then
    echo "libs: MISSING: $still"
    cat <<EOF
gpu-check: the binaries cannot load these libraries. On the machine they were
built on (Debian 12 here), pack the runtime files and carry the file here:
    bash scripts/gpu-check.sh --pack-deps gpu-deps.tar.xz
then run this script with --deps gpu-deps.tar.xz (it unpacks into $OUT/deps and
puts its usr/lib/$ARCH_LIB, openblas-openmp and openmpi/lib folders on
LD_LIBRARY_PATH, usr/bin on PATH, OPAL_PREFIX=<deps>/usr). By hand: download the
Debian runtime packages (apt-get download libopenmpi3 openmpi-bin libjansson4
libopenblas0-openmp libgfortran5 libhwloc15 libevent-core-2.1-7
libevent-pthreads-2.1-7 libpmix2), unpack each with dpkg-deb -x PKG.deb DIR, and
pass --deps DIR. CUDA libraries (libcudart, libcublas, libnccl) are searched in
/usr/local/cuda and in python3's nvidia/torch packages: install torch with CUDA,
or put their folder on LD_LIBRARY_PATH.
EOF
    die "missing libraries: $still"
fi
[ -n "$ZT_LIBS" ] && echo "libs: zerotrain's commands run with LD_LIBRARY_PATH += $ZT_LIBS"
# grep reads all of ldd's output: with -q it may exit first, and ldd's
# SIGPIPE fails the pipeline under pipefail.
if ! run_zt ldd ./zerotrain | grep libcudart >/dev/null; then
    die "./zerotrain is a CPU-only build (no libcudart): rebuild where nvcc is found"
fi
command -v mpirun >/dev/null || die "no mpirun (Open MPI): install it, or --deps (see --pack-deps)"
echo "mpi: $(run_zt mpirun --version 2>&1 | head -1); MPIRUN=$MPIRUN"

# Tiny shakespeare, or text with as many distinct characters (65) when the data
# folder did not come along: only its vocabulary matters to what is checked.
if [ -z "$DATA" ]; then
    for d in "$ZT_SHARED" "$ROOT/shared" "$ROOT/../shared"; do
        if [ -f "$d/data/tinyshakespeare/input.txt" ]; then
            DATA=$d/data/tinyshakespeare/input.txt
            break
        fi
    done
fi
if [ -z "$DATA" ]; then
    DATA=$OUT/synthetic-65.txt
    $PY - "$DATA" <<'PY'
import random, string, sys
chars = (string.ascii_letters + string.digits + " \n.")[:65]
random.seed(1)
open(sys.argv[1], "w").write("".join(chars) + "".join(random.choices(chars, k=2_000_000)))
PY
    echo "data: tiny shakespeare not found; generated $DATA (65 characters, 2 MB)"
else
    echo "data: $DATA"
fi
[ -f "$DATA" ] || die "DATA=$DATA: no such file"

# ---------------------------------------------------------------- ops

if want ops; then
    section "ops: build/tests/op-check"
    if [ ! -x build/tests/op-check ]; then
        fail_part "ops: build/tests/op-check is not built (make build/tests/op-check)"
    else
        quick=()
        [ "$QUICK" = 1 ] && quick=(--quick)
        # The CPU reference uses every core.
        OMP_NUM_THREADS=$nproc_all OPENBLAS_NUM_THREADS=$nproc_all \
            run_zt timeout "${OPCHECK_TIMEOUT:-900}" build/tests/op-check \
            --device "${ZT_DEVICE:-0}" "${quick[@]}" >"$OUT/op-check.txt" 2>&1
        rc=$?
        grep -E 'FAIL|error' "$OUT/op-check.txt" | head -40
        tail -1 "$OUT/op-check.txt"
        [ $rc = 0 ] || fail_part "ops: op-check exit $rc (full output: $OUT/op-check.txt)"
    fi
fi

# ---------------------------------------------------------------- stages

# zt TAG NP DEVICE COMM CONFIG ARGS...: one zerotrain run into $SDIR/TAG.*
zt() {
    local tag=$1 np=$2 device=$3 comm=$4 cfg=$5
    shift 5
    run_zt timeout "${RUN_TIMEOUT:-300}" "${mpirun_cmd[@]}" -np "$np" ./zerotrain \
        --config "$cfg" "$@" --device "$device" --comm "$comm" \
        --dump-params "$SDIR/$tag.bin" --report "$SDIR/$tag.json" >"$SDIR/$tag.log" 2>&1
}

# ztcheck dumps|losses REF RUN --tol T: tests/tools/ztcheck.py, or where python3
# has no numpy (torch does not need it), the same two formulas in plain Python.
ztcheck() {
    if [ "$have_numpy" = 1 ]; then
        $PY tests/tools/ztcheck.py "$@"
        return
    fi
    $PY - "$@" <<'PY'
import array, json, math, sys
what, ref, run, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[5])
if what == "dumps":
    a, b = array.array("f"), array.array("f")  # little-endian float32, as the host
    a.frombytes(open(ref, "rb").read())
    b.frombytes(open(run, "rb").read())
    if len(a) != len(b) or not all(math.isfinite(x) for x in b):
        sys.exit(f"FAIL: {run}: {len(b)} params, {ref} {len(a)}, or non-finite ones")
    num = math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(b, a)))
    d = num / max(math.sqrt(math.fsum(y * y for y in a)), 1e-30)
    label = f"params {run} vs {ref}: rel L2"
else:
    h = [[math.nan if v is None else v for v in json.load(open(f))["loss_history"]]
         for f in (ref, run)]
    if len(h[0]) != len(h[1]):
        sys.exit(f"FAIL: loss histories differ in length: {len(h[0])} vs {len(h[1])}")
    rels = [abs(o - r) / max(abs(r), 1e-30) for r, o in zip(*h)]
    d = math.nan if any(math.isnan(x) for x in rels) else max(rels, default=0.0)
    label = f"losses {run} vs {ref}: max rel"
ok = d <= tol
print(f"{'ok' if ok else 'FAIL'}: {label} {d:.3e} (tol {tol:g})")
sys.exit(0 if ok else 1)
PY
}

# same REF RUN TOL: "PASS|FAIL params-rel-L2 losses-max-rel"
same() {
    local d l rc=0
    d=$(ztcheck dumps "$SDIR/$1.bin" "$SDIR/$2.bin" --tol "$3" 2>&1) || rc=1
    l=$(ztcheck losses "$SDIR/$1.json" "$SDIR/$2.json" --tol "$3" 2>&1) || rc=1
    printf '%s\n%s\n' "$d" "$l" >>"$SDIR/compare.txt"
    printf '%s %s %s\n' "$([ $rc = 0 ] && echo PASS || echo FAIL)" \
        "$(sed -n 's/.*rel L2 \([^ ]*\).*/\1/p' <<<"$d")" \
        "$(sed -n 's/.*max rel \([^ ]*\).*/\1/p' <<<"$l")"
}

# stage_cfg FILE STAGE TRAIN_BATCH BUCKET MAX_LIVE PERSIST
stage_cfg() {
    local z="\"reduce_bucket_size\": $4, \"allgather_bucket_size\": $4, \"overlap_comm\": true"
    [ "$2" = 3 ] && z="$z, \"stage3_param_persistence_threshold\": $6,
    \"stage3_max_live_parameters\": $5, \"stage3_prefetch_bucket_size\": $(($5 / 2)),
    \"stage3_max_reuse_distance\": $(($5 / 2))"
    cat >"$1" <<JSON
{
  "train_batch_size": $3,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "eps": 1e-5}},
  "zero_optimization": {"stage": $2, $z}
}
JSON
}

if want stages; then
    section "stages: ZeRO stages 0-3 on the CUDA backend"
    SDIR=$OUT/stages
    mkdir -p "$SDIR"
    : >"$SDIR/compare.txt"
    nps=(1 2 3 4) mlp_steps=20 gpt_steps=10
    [ "$QUICK" = 1 ] && nps=(1 2) mlp_steps=10 gpt_steps=5
    # np over NCCL, one GPU per rank: 2 .. min(GPUs, 4).
    nccl_nps=()
    for ((np = 2; np <= (N_GPU < 4 ? N_GPU : 4); np++)); do nccl_nps+=("$np"); done
    # MLP units (Linear+ReLU): 64*128+128 = 8320, 128*128+128 = 16512 twice, 128*10+10 =
    # 1290: buckets of 5000 split every unit but the head, which stage 3 keeps
    # whole (persistence 2000). GPT-lite: embedding 6208, blocks 49984, head 4353;
    # buckets of 3000, nothing persistent. 72 and 24 divide by np 1..4.
    mlp_args=(--model mlp --width 128 --layers 4 --in-size 64 --out-size 10 --steps "$mlp_steps"
        --seed 7)
    gpt_args=(--model gptlite --data "$DATA" --vocab-size 65 --n-layer 2 --n-embd 64 --n-head 4
        --block-size 32 --dropout 0 --steps "$gpt_steps" --seed 11)
    head="| model | stage | np 1 (nccl) |"
    for np in "${nps[@]:1}"; do head="$head np $np (mpi) |"; done
    for np in "${nccl_nps[@]}"; do head="$head np $np (nccl) |"; done
    table=("$head" "|---|---:|$(printf -- '---|%.0s' "${nps[@]}" "${nccl_nps[@]}")")
    for model in mlp gptlite; do
        if [ $model = mlp ]; then
            args=("${mlp_args[@]}") tb=72 bucket=5000 live=20000 persist=2000
        else
            args=("${gpt_args[@]}") tb=24 bucket=3000 live=100000 persist=0
        fi
        for s in 0 1 2 3; do stage_cfg "$SDIR/$model-s$s.json" $s $tb $bucket $live $persist; done
        # Stage 3 over sub-communicators (np 4 only): hpZ's secondary partition and MiCS.
        sed 's/"stage": 3,/"stage": 3, "zero_hpz_partition_size": 2,/' "$SDIR/$model-s3.json" \
            >"$SDIR/$model-s3hpz.json"
        sed 's/"stage": 3,/"stage": 3, "mics_shard_size": 2,/' "$SDIR/$model-s3.json" \
            >"$SDIR/$model-s3mics.json"
        stage_list=(0 1 2 3)
        [[ " ${nccl_nps[*]} " == *" 4 "* ]] && stage_list+=(3hpz 3mics)
        if ! zt "$model-cpu" 1 cpu mpi "$SDIR/$model-s0.json" "${args[@]}"; then
            tail -5 "$SDIR/$model-cpu.log"
            fail_part "stages: $model CPU reference failed ($SDIR/$model-cpu.log)"
            continue
        fi
        if ! zt "$model-s0-np1" 1 cuda nccl "$SDIR/$model-s0.json" "${args[@]}"; then
            tail -5 "$SDIR/$model-s0-np1.log"
            fail_part "stages: $model CUDA np 1 stage 0 failed ($SDIR/$model-s0-np1.log)"
            continue
        fi
        for s in "${stage_list[@]}"; do
            row="| $model | $s |"
            for col in "${nps[@]}" "${nccl_nps[@]/#/g}"; do
                np=${col#g}
                tag=$model-s$s-np$col
                comm=mpi
                [ "$np" = 1 ] || [ "$col" != "$np" ] && comm=nccl
                if [ "$s" != "${s%hpz}" ] || [ "$s" != "${s%mics}" ]; then
                    [ "$col" = g4 ] || { row="$row - |"; continue; }
                fi
                if [ "$tag" != "$model-s0-np1" ] &&
                    ! zt "$tag" "$np" cuda $comm "$SDIR/$model-s$s.json" "${args[@]}"; then
                    tail -5 "$SDIR/$tag.log"
                    fail_part "stages: $tag: zerotrain failed ($SDIR/$tag.log)"
                    row="$row run FAILED |"
                    continue
                fi
                read -r v1 p1 l1 < <(same "$model-s0-np1" "$tag" 1e-5)
                read -r v2 p2 l2 < <(same "$model-cpu" "$tag" 1e-4)
                verdict=PASS
                [ "$v1" = PASS ] && [ "$v2" = PASS ] || verdict=FAIL
                [ "$tag" = "$model-s0-np1" ] && verdict=$v2 # the reference itself: vs CPU only
                [ "$verdict" = PASS ] || fail_part "stages: $tag: vs CUDA ref $v1 (params" \
                    "${p1:-?}, losses ${l1:-?}), vs CPU $v2 (params ${p2:-?}, losses ${l2:-?})"
                row="$row $verdict ${p1:-?} / ${p2:-?} |"
            done
            table+=("$row")
        done
    done
    {
        echo "Stage equivalence on the CUDA backend: params relative L2 against the np 1 stage 0"
        echo "CUDA run (tol 1e-5) / against the CPU backend's np 1 stage 0 run (tol 1e-4);"
        echo "loss histories checked with the same tolerances (numbers in compare.txt)."
        echo
        printf '%s\n' "${table[@]}"
    } | tee "$SDIR/../stages.md"
fi

# ---------------------------------------------------------------- matrix

if want matrix; then
    section "matrix: mixed precision, offload and checkpointing on the CUDA backend"
    # Its data: tiny shakespeare's folder's parent must hold imdb/ too.
    mshared=$(dirname "$(dirname "$(dirname "$DATA")")")
    if [ ! -f "$mshared/data/imdb/imdb-2500.csv" ]; then
        fail_part "matrix: no $mshared/data/imdb/imdb-2500.csv beside DATA's folder (the" \
            "test reads ../shared/data; gpu-lease.sh prepare packs it)"
    else
        mflags="--device cuda --comm mpi"
        [ "$N_GPU" -ge 3 ] && mflags="--device cuda --comm nccl"
        echo "matrix: tests/cudasim/test_matrix.sh with ${MATRIX_BIN:-./zerotrain} $mflags"
        # python3 without the carried libraries: the check scripts use the
        # machine's numpy.
        if ZT_BIN=${MATRIX_BIN:-./zerotrain} ZT_DEVICE_FLAGS="$mflags" ZT_SHARED=$mshared \
            ZT_PYTHON="env -u LD_LIBRARY_PATH $PY" run_zt timeout "${MATRIX_TIMEOUT:-900}" \
            bash tests/cudasim/test_matrix.sh >"$OUT/matrix.txt" 2>&1; then
            tail -1 "$OUT/matrix.txt"
        else
            grep -vE '^ok: ' "$OUT/matrix.txt" | tail -30
            fail_part "matrix: runs differ from the CPU backend or failed ($OUT/matrix.txt)"
        fi
    fi
fi

# ---------------------------------------------------------------- bench

# The throughput table of the runs in $BDIR (bench/): also rebuilt on its own
# by --parts table, for a bench part a time limit cut short.
bench_table() {
    $PY - "$BDIR" "$N_LAYER" "$N_EMBD" "$BLOCK" "$steps" "$GPU_NAME" \
        "${SPEC_PEAK_TFLOPS:-}" <<'PY' | tee "$OUT/throughput.md"
import glob, json, os, re, statistics, sys

bdir, L, C, T, steps = sys.argv[1], *map(int, sys.argv[2:6])
gpu, spec_arg = sys.argv[6], sys.argv[7]
# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, TFLOP/s;
# the first name that is a substring of nvidia-smi's wins.
SPEC = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4),
        ("GH200", 989.4), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.05),
        ("L40", 181.05), ("L4", 121.0), ("A10", 125.0), ("RTX 4090", 165.2), ("V100", 125.0)]
spec = float(spec_arg) if spec_arg else next((p for n, p in SPEC if n in gpu), None)
peak = fp32_peak = None
if os.path.exists(f"{bdir}/gemm-peak.txt"):
    for line in open(f"{bdir}/gemm-peak.txt"):
        k, _, v = line.partition(" ")
        if k == "gemm_peak_tflops":
            peak = float(v)
        elif k == "gemm_peak_fp32_tflops":
            fp32_peak = float(v)


def flops_per_token(params, V):
    # 6 N (forward 2 N + backward 4 N) with N the matmul parameters (the embedding
    # tables do lookups), plus attention's QK^T and PV: 12 L C T
    return 6 * (params - (V + T) * C) + 12 * L * C * T


rows = []
for rep in sorted(glob.glob(f"{bdir}/zt-*.json")):
    if rep.endswith(".cfg.json"):
        continue
    tag = os.path.basename(rep)[:-5]
    _, v, b, dt, stage = tag.split("-")
    r = json.load(open(rep))
    log = open(f"{bdir}/{tag}.log").read()
    sps = [float(x) for x in re.findall(r"CurrSamplesPerSec=([0-9.eE+-]+)", log)]
    sps = [x for x in sps if x > 0]  # the first 2 steps print 0 (DeepSpeed's timer)
    tps = statistics.median(sps) * T if sps else float(r["samples_per_sec"]) * T
    mem = r["ranks"][0]["memory_total_bytes"]["device"]["peak"] / 1e9
    rows.append(("zerotrain", f"{dt} ZeRO {stage[1:]}", int(v[1:]), int(b[1:]), tps,
                 int(r["model"]["params"]), mem))
for rep in sorted(glob.glob(f"{bdir}/torch-*.json")):
    lines = open(rep).read().strip().splitlines()
    if not lines:
        continue
    j = json.loads(lines[-1])
    attn = "flash (sdpa)" if j["attention"] == "sdpa" else "materialised"
    rows.append((f"PyTorch {j['torch']}", f"{j['dtype']} {j['mode']}, {attn} attention",
                 int(j["vocab"]), int(j["batch"]), float(j["tokens_per_s"]), int(j["params"]),
                 j["peak_mem_gb"] or float("nan")))

print(f"GPT-lite L={L} C={C} T={T}, np 1, AdamW, dropout 0.1, {steps} steps (median step) on "
      f"{gpu or 'an unknown GPU'}.")
print(f"bf16 GEMM peak (cuBLAS, measured): {peak if peak else 'n/a'} TFLOP/s; "
      f"fp32 (no TF32): {fp32_peak if fp32_peak else 'n/a'} TFLOP/s; "
      f"data-sheet dense bf16 peak: {spec if spec else 'unknown (set SPEC_PEAK_TFLOPS)'} "
      "TFLOP/s.")
print("MFU = tokens/s x (6 (params - (vocab + T) C) + 12 L C T) / bf16 peak (measured, "
      "data sheet).\n")
print("| tool | config | vocab | micro | tokens/s | TFLOP/s | MFU measured | MFU spec | params "
      "| peak GB |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
rows.sort(key=lambda r: (r[2], r[0] != "zerotrain"))
for tool, cfg, V, mb, tps, params, mem in rows:
    tf = tps * flops_per_token(params, V) / 1e12
    mfu = f"{100 * tf / peak:.1f}%" if peak else "n/a"
    mfu_spec = f"{100 * tf / spec:.1f}%" if spec else "n/a"
    print(f"| {tool} | {cfg} | {V} | {mb} | {tps:,.0f} | {tf:.1f} | {mfu} | {mfu_spec} | "
          f"{params:,} | {mem:.1f} |")
for V in sorted({r[2] for r in rows}):
    if len({r[5] for r in rows if r[2] == V}) > 1:
        print(f"\nWARNING: vocab {V}: parameter counts differ between rows: not the same model")
PY
}

if want bench; then
    section "bench: GPT-lite throughput, zerotrain against PyTorch"
    BDIR=$OUT/bench
    mkdir -p "$BDIR"
    N_LAYER=${N_LAYER:-12} N_EMBD=${N_EMBD:-768} N_HEAD=${N_HEAD:-12} BLOCK=${BLOCK:-1024}
    MICRO=${MICRO:-16} MICRO_BIGV=${MICRO_BIGV:-8}
    steps=${BENCH_STEPS:-20} bstages=(0 1 2 3)
    [ "$QUICK" = 1 ] && steps=${BENCH_STEPS:-8} bstages=(0 3)
    shape=(--n-layer "$N_LAYER" --n-embd "$N_EMBD" --n-head "$N_HEAD" --block-size "$BLOCK")
    # (vocab, micro-batch, dtype, stage) of each zerotrain row
    zt_rows=()
    for dt in fp32 bf16; do
        for s in "${bstages[@]}"; do zt_rows+=("65 $MICRO $dt $s"); done
    done
    zt_rows+=("50257 $MICRO_BIGV bf16 0" "50257 $MICRO_BIGV bf16 3")
    if [ -x build/tests/op-check ]; then
        run_zt build/tests/op-check --gemm-peak --device "${ZT_DEVICE:-0}" \
            >"$BDIR/gemm-peak.txt" 2>&1 ||
            fail_part "bench: op-check --gemm-peak failed ($BDIR/gemm-peak.txt)"
        cat "$BDIR/gemm-peak.txt"
    fi
    for zr in "${zt_rows[@]}"; do
        read -r V mb dt s <<<"$zr"
        tag=zt-v$V-b$mb-$dt-s$s
        mixed=
        [ "$dt" = bf16 ] && mixed=', "bf16": {"enabled": true}'
        cat >"$BDIR/$tag.cfg.json" <<JSON
{"train_batch_size": $mb, "train_micro_batch_size_per_gpu": $mb,
 "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $s}$mixed}
JSON
        echo "bench: zerotrain vocab $V micro $mb $dt stage $s"
        if ! run_zt timeout "${BENCH_TIMEOUT:-400}" "${mpirun_cmd[@]}" -np 1 ./zerotrain \
            --config "$BDIR/$tag.cfg.json" --model gptlite --data "$DATA" --vocab-size "$V" \
            "${shape[@]}" --dropout 0.1 --steps "$steps" --device cuda --comm nccl \
            --report "$BDIR/$tag.json" >"$BDIR/$tag.log" 2>&1; then
            tail -5 "$BDIR/$tag.log"
            fail_part "bench: zerotrain vocab $V $dt stage $s failed ($BDIR/$tag.log)"
        fi
    done
    # compile+bf16+sdpa is what a PyTorch user would run; quick leaves out two compilations.
    variants=("eager fp32 math 65 $MICRO" "eager bf16 math 65 $MICRO"
        "compile fp32 math 65 $MICRO" "compile bf16 math 65 $MICRO" "compile bf16 sdpa 65 $MICRO"
        "eager bf16 math 50257 $MICRO_BIGV" "compile bf16 sdpa 50257 $MICRO_BIGV")
    [ "$QUICK" = 1 ] && variants=("eager fp32 math 65 $MICRO" "eager bf16 math 65 $MICRO"
        "compile bf16 sdpa 65 $MICRO" "eager bf16 math 50257 $MICRO_BIGV")
    for variant in "${variants[@]}"; do
        read -r mode dt attn V mb <<<"$variant"
        tag=torch-v$V-b$mb-$mode-$dt-$attn
        echo "bench: torch $mode $dt $attn vocab $V micro $mb"
        if ! timeout "${BENCH_TIMEOUT:-400}" "$PY" scripts/torch_gptlite_peer.py --mode "$mode" \
            --dtype "$dt" --attention "$attn" "${shape[@]}" --vocab "$V" --batch "$mb" \
            --dropout 0.1 --steps "$steps" --warmup 5 >"$BDIR/$tag.json" 2>"$BDIR/$tag.log"; then
            tail -5 "$BDIR/$tag.log"
            fail_part "bench: torch peer $variant failed ($BDIR/$tag.log)"
        fi
    done
    bench_table
fi

if want table && ! want bench; then
    section "table: the throughput table of $OUT/bench"
    BDIR=$OUT/bench
    N_LAYER=${N_LAYER:-12} N_EMBD=${N_EMBD:-768} BLOCK=${BLOCK:-1024}
    steps=${BENCH_STEPS:-20}
    [ "$QUICK" = 1 ] && steps=${BENCH_STEPS:-8}
    [ -d "$BDIR" ] || die "--parts table: no $BDIR (run the bench part first)"
    bench_table
fi

# ---------------------------------------------------------------- roofline

if want roofline; then
    section "roofline: GPT-2 small, predicted (scripts/roofline.py) against measured"
    RDIR=$OUT/roofline
    mkdir -p "$RDIR"
    N_LAYER=${N_LAYER:-12} N_EMBD=${N_EMBD:-768} N_HEAD=${N_HEAD:-12} BLOCK=${BLOCK:-1024}
    rmicro=${ROOF_MICRO:-16} rsteps=${ROOF_STEPS:-8} rdev=${ROOF_DEVICE:-cuda}
    rvocab=${ROOF_VOCAB:-50257}
    rgpu=${ROOF_GPU:-}
    if [ -z "$rgpu" ]; then
        case $GPU_NAME in
        *H200*) rgpu=h200 ;;
        *H100*) rgpu=h100 ;;
        *A100* | *A800*) rgpu=a100 ;;
        *)
            rgpu=h100
            echo "roofline: GPU '$GPU_NAME' has no data sheet in scripts/roofline.py:" \
                "predicting for h100 (set ROOF_GPU)"
            ;;
        esac
    fi
    rtok=()
    bpe=$(dirname "$(dirname "$DATA")")/gpt2-bpe
    if [ "$rvocab" = 50257 ] && [ -f "$bpe/vocab.bpe" ]; then
        rtok=(--tokenizer "$bpe")
    else
        rtok=(--vocab-size "$rvocab")
    fi
    rcomm=()
    [ "$rdev" = cuda ] && rcomm=(--comm nccl)
    # ROOF_COUNTS: a ZT_SIM_PERF report of the same kernels (gpu-lease.sh
    # prepare makes one): roofline v2's device counters
    rcounts=()
    [ -n "${ROOF_COUNTS:-}" ] && rcounts=(--device-counts "$ROOF_COUNTS")
    for s in 0 3; do
        tag=gpt2-bf16-s$s-b$rmicro
        cat >"$RDIR/$tag.cfg.json" <<JSON
{"train_batch_size": $rmicro, "train_micro_batch_size_per_gpu": $rmicro,
 "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
 "bf16": {"enabled": true}, "zero_optimization": {"stage": $s}}
JSON
        echo "roofline: zerotrain bf16 stage $s micro $rmicro on $rdev"
        if ! run_zt timeout "${BENCH_TIMEOUT:-400}" "${mpirun_cmd[@]}" -np 1 ./zerotrain \
            --config "$RDIR/$tag.cfg.json" --model gptlite --data "$DATA" "${rtok[@]}" \
            --n-layer "$N_LAYER" --n-embd "$N_EMBD" --n-head "$N_HEAD" --block-size "$BLOCK" \
            --activation gelu --dropout 0.1 --steps "$rsteps" --device "$rdev" "${rcomm[@]}" \
            --profile --report "$RDIR/$tag.json" >"$RDIR/$tag.log" 2>&1; then
            tail -5 "$RDIR/$tag.log"
            fail_part "roofline: zerotrain stage $s failed ($RDIR/$tag.log)"
            continue
        fi
        $PY scripts/roofline.py "$RDIR/$tag.json" --gpu "$rgpu" "${rcounts[@]}" \
            >"$RDIR/$tag.roofline.md" ||
            fail_part "roofline: scripts/roofline.py failed on $RDIR/$tag.json"
    done
    # Stage 0 again with every op timed: predicted against measured, op by op
    # (slower: the device is drained around each op; not in the step table).
    tag=gpt2-bf16-s0-b$rmicro
    echo "roofline: zerotrain bf16 stage 0 micro $rmicro on $rdev, --profile-time"
    if run_zt timeout "${BENCH_TIMEOUT:-400}" "${mpirun_cmd[@]}" -np 1 ./zerotrain \
        --config "$RDIR/$tag.cfg.json" --model gptlite --data "$DATA" "${rtok[@]}" \
        --n-layer "$N_LAYER" --n-embd "$N_EMBD" --n-head "$N_HEAD" --block-size "$BLOCK" \
        --activation gelu --dropout 0.1 --steps 3 --device "$rdev" "${rcomm[@]}" \
        --profile-time --report "$RDIR/$tag-timed.json" >"$RDIR/$tag-timed.log" 2>&1; then
        if $PY scripts/roofline.py "$RDIR/$tag-timed.json" --gpu "$rgpu" "${rcounts[@]}" --top 15 \
            >"$RDIR/$tag-timed.roofline.md"; then
            sed -n '/^| op |/,$p' "$RDIR/$tag-timed.roofline.md"
        else
            fail_part "roofline: scripts/roofline.py failed on $RDIR/$tag-timed.json"
        fi
    else
        tail -5 "$RDIR/$tag-timed.log"
        fail_part "roofline: the --profile-time run failed ($RDIR/$tag-timed.log)"
    fi
    $PY - "$RDIR" "$rgpu" "$GPU_NAME" "$rdev" <<'PY' | tee "$OUT/roofline.md"
import glob, json, os, re, statistics, sys

rdir, gpu, name, dev = sys.argv[1:5]
print(f"GPT-lite at GPT-2 small's shape (or N_LAYER..BLOCK), bf16, np 1: step time predicted "
      f"for {gpu} by scripts/roofline.py from the run's --profile counts, against the step "
      f"measured on {name or 'an unknown GPU'} ({dev}; median after the first 2 steps).\n")
print("| config | predicted ms | measured ms | measured / predicted | predicted MFU "
      "| measured MFU |")
print("|---|---:|---:|---:|---:|---:|")
for rep in sorted(glob.glob(f"{rdir}/gpt2-*.json")):
    if rep.endswith(".cfg.json") or rep.endswith("-timed.json"):
        continue
    tag = os.path.basename(rep)[:-5]
    try:
        pred = open(f"{rdir}/{tag}.roofline.md").read()
        ms = float(re.search(r"^predicted_step_ms (\S+)", pred, re.M).group(1))
        mfu = float(re.search(r"^predicted_mfu (\S+)%", pred, re.M).group(1))
    except (OSError, AttributeError):
        continue
    p = json.load(open(rep))["profile"]
    sps = [float(x) for x in re.findall(r"CurrSamplesPerSec=([0-9.eE+-]+)",
                                        open(f"{rdir}/{tag}.log").read())]
    sps = [x for x in sps if x > 0]
    if not sps:
        print(f"| {tag} | {ms:.2f} | n/a | | {mfu:.1f}% | |")
        continue
    meas = 1e3 * p["micro_batch_size"] / statistics.median(sps)
    print(f"| bf16 ZeRO {p['stage']}, micro {p['micro_batch_size']} | {ms:.2f} | {meas:.2f} | "
          f"{meas / ms:.2f} | {mfu:.1f}% | {mfu * ms / meas:.1f}% |")
PY
fi

section "summary"
if [ $STATUS = 0 ]; then
    echo "gpu-check: PASS (parts: $PARTS; results in $OUT)"
else
    echo "gpu-check: FAIL (see the FAIL lines above; results in $OUT)"
fi
exit $STATUS
