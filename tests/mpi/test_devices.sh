#!/usr/bin/env bash
# --device and --comm: what a machine without a GPU answers (clear errors for
# cuda/nccl, auto falling back to the CPU, with one notice line only where an
# NVIDIA driver is loaded), the flags' validation, ZT_COMM_TIMEOUT validation,
# and, where a GPU answers, a short CUDA run at np 1 (NCCL) and np 2 (MPI
# staged, sharing the GPU) against the CPU.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

echo '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
       "zero_optimization": {"stage": 2}}' >"$tmp/cfg.json"
m=(--config "$tmp/cfg.json" --model mlp --width 32 --layers 3 --steps 3)

# Flag validation does not depend on the machine.
expect 2 "--comm must be auto, mpi or nccl, not 'gloo'" -- ./zerotrain "${m[@]}" --comm gloo
expect 2 "--device must be auto, cpu or cuda, not 'tpu'" -- ./zerotrain "${m[@]}" --device tpu
expect 2 "--tf32 sets how CUDA GEMMs round" -- ./zerotrain "${m[@]}" --device cpu --tf32
expect 2 "--comm nccl needs the CUDA backend" -- ./zerotrain "${m[@]}" --device cpu --comm nccl
expect 2 "hint: use --comm mpi" -- ./zerotrain "${m[@]}" --device cpu --comm nccl
expect 2 "ZT_COMM_TIMEOUT" -- env ZT_COMM_TIMEOUT=soon ./zerotrain "${m[@]}" --device cpu
expect 0 "device cpu, comm mpi" -- ./zerotrain "${m[@]}" --device cpu
if grep -q "no GPU" "$tmp/out"; then cat "$tmp/out"; fail "--device cpu printed a fallback notice"; fi

built=no
./zerotrain --version | grep -q "cuda" && built=yes
if [ "$built" = yes ]; then
    # The CUDA build links cuBLAS and NCCL dynamically (what users' ldd shows).
    ldd ./zerotrain | grep -q "libcublas.so" || fail "ldd ./zerotrain shows no libcublas"
    if ./zerotrain --version | grep -q nccl; then
        ldd ./zerotrain | grep -q "libnccl.so" || fail "ldd ./zerotrain shows no libnccl"
    fi
fi
gpu=no
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then gpu=yes; fi

if [ "$gpu" = no ]; then
    if [ "$built" = yes ]; then
        expect 1 "--device cuda: no usable GPU (" -- ./zerotrain "${m[@]}" --device cuda
        expect 1 "hint: run on a machine with an NVIDIA GPU, or use --device cpu" -- \
            ./zerotrain "${m[@]}" --device cuda
        # Under mpirun the failure is printed once and every rank exits.
        expect 1 "no usable GPU" -- $ZT_MPIRUN -np 2 ./zerotrain "${m[@]}" --device cuda
        [ "$(grep -c 'error:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "error printed more than once"; }
        expect 1 "no usable GPU" -- ./zerotrain "${m[@]}" --device cuda --comm nccl
    else
        expect 2 "built without CUDA" -- ./zerotrain "${m[@]}" --device cuda
    fi
    # auto: the CPU run. A notice line (rank 0's alone) only where a GPU was to be
    # expected: a CUDA build on a host with the NVIDIA driver loaded.
    expect 0 "device cpu, comm mpi" -- $ZT_MPIRUN -np 2 ./zerotrain "${m[@]}"
    notices=$(grep -c 'no GPU answers' "$tmp/out" || true)
    if [ "$built" = yes ] && [ -e /proc/driver/nvidia/version ]; then
        [ "$notices" = 1 ] || { cat "$tmp/out"; fail "the fallback notice is not exactly one line"; }
    else
        [ "$notices" = 0 ] || { cat "$tmp/out"; fail "a fallback notice without a GPU driver"; }
    fi
    expect 2 "--comm nccl needs the CUDA backend" -- ./zerotrain "${m[@]}" --comm nccl
    echo "skipped: no GPU (the CUDA runs of this test need one; scripts/gpu-check.sh is the full check)"
    exit 0
fi

# A GPU answers: CUDA at np 1 (NCCL when built) and np 2 sharing it (staged MPI)
# must train to the CPU backend's weights (fp32, TF32 off; reduction order differs).
expect 0 "done" -- ./zerotrain "${m[@]}" --device cpu --dump-params "$tmp/cpu.bin"
expect 0 "device cuda" -- ./zerotrain "${m[@]}" --device cuda --dump-params "$tmp/cuda1.bin"
expect 0 "comm staged" -- $ZT_MPIRUN -np 2 ./zerotrain "${m[@]}" --device cuda --comm mpi \
    --dump-params "$tmp/cuda2.bin"
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/cpu.bin" "$tmp/cuda1.bin" --tol 1e-4
$ZT_PYTHON tests/tools/ztcheck.py dumps "$tmp/cpu.bin" "$tmp/cuda2.bin" --tol 1e-4
echo "devices: CUDA np 1 and np 2 (staged) match the CPU backend"
