#!/usr/bin/env bash
# get-cuda-tools: cuobjdump and nvdisasm into DIR/bin (default
# build/tools/cuda), from the PyPI wheels pinned in scripts/cuda-tools.txt,
# for the SASS audit (make gpu-audit, tests/cudasim/test_gpu_audit.sh).
#
#   bash scripts/get-cuda-tools.sh [DIR]
#
# pip only downloads (hash-checked); the wheels are zip files, unpacked with
# Python's zipfile, so nothing is installed into any Python environment.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/tools/cuda}
PYTHON=${PYTHON:-/usr/bin/python3}
die() { echo "get-cuda-tools: error: $*" >&2; exit 1; }
# Installed from the pins as they are now: a changed pin installs again.
[ -x "$DIR/bin/cuobjdump" ] && [ -x "$DIR/bin/nvdisasm" ] &&
    cmp -s scripts/cuda-tools.txt "$DIR/cuda-tools.txt" && exit 0
"$PYTHON" -m pip --version >/dev/null 2>&1 ||
    die "$PYTHON has no pip (apt-get install python3-pip; scripts/install-deps.sh does)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    -r scripts/cuda-tools.txt -d "$tmp/wheels" ||
    die "could not download the wheels of scripts/cuda-tools.txt from PyPI (pip's message above)"
mkdir -p "$tmp/unpacked"
for w in "$tmp"/wheels/*.whl; do
    "$PYTHON" -m zipfile -e "$w" "$tmp/unpacked"
done
mkdir -p "$DIR/bin"
for tool in cuobjdump nvdisasm; do
    src=$(find "$tmp/unpacked" -type f -name "$tool" -path '*/bin/*' | head -1)
    [ -n "$src" ] || die "no bin/$tool in the wheels of scripts/cuda-tools.txt"
    install -m 0755 "$src" "$DIR/bin/$tool"
done
cp scripts/cuda-tools.txt "$DIR/cuda-tools.txt"
echo "get-cuda-tools: $("$DIR/bin/cuobjdump" --version | tail -1) in $DIR/bin"
