#!/usr/bin/env bash
# Installs the Debian packages zerotrain needs (idempotent: only what is missing).
# Build: Open MPI, jansson, OpenBLAS, cmocka (tests), python3-torch (reference
# tests and the PyTorch peer benchmark), python3-matplotlib (scripts/plot.py:
# loss curves and sweep bar charts, tests/mpi/test_plots.sh); liburing (the
# nvme offload's asynchronous swap I/O); clang with its compiler-rt (libFuzzer,
# sanitizers) and LLVM's OpenMP for the fuzz harnesses (`make fuzz`; gcc's
# ASan/UBSan runtimes come with gcc); iproute2 for scripts/netns-cluster.sh
# (the multi-node tests' hosts as network namespaces). CUDA is not a Debian package here: the
# Makefile finds it at /usr/local/cuda (or CUDA_HOME) when present, and then
# nvcc needs g++ as its host compiler. curl and ca-certificates let
# scripts/get-data.sh fetch the data sets where ../shared/data is absent.
# With nvcc, also python3-pip, and then cuobjdump and nvdisasm from PyPI into
# build/tools/cuda (scripts/get-cuda-tools.sh) for the SASS audit.
set -eu
cd "$(dirname "$0")/.."
cuda=0
pkgs=(make gcc openmpi-bin libopenmpi-dev libjansson-dev libopenblas-openmp-dev libcmocka-dev
      liburing-dev python3-torch python3-numpy python3-matplotlib clang libclang-rt-dev libomp-dev
      curl ca-certificates iproute2)
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || command -v nvcc >/dev/null; then
    pkgs+=(g++ python3-pip)
    cuda=1
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all present (${pkgs[*]})"
else
    echo "deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ $cuda = 0 ] || bash scripts/get-cuda-tools.sh
