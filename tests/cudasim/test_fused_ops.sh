#!/usr/bin/env bash
# tests/mpi/test_fused_ops.sh on the CUDA simulator: the fused epilogue
# kernels (engine/cuda/backend_cuda_fused.cu, the residual layernorm) inside
# GPT-lite, the classifier and the MLP against --fused-ops off, the CUDA
# backend's op-by-op kernels: losses to 1e-5 and the same weight bits.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
[ -x "$ZT_BIN" ] || fail "$ZT_BIN is not built (run make sim)"
exec bash tests/mpi/test_fused_ops.sh
