#!/usr/bin/env bash
# The quick-start job: the benchmark MLP, ZeRO stage 0, data parallel over 2 MPI
# ranks on this machine, a short run that prints DeepSpeed-shaped progress.
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
threads=$(( cores / 2 > 0 ? cores / 2 : 1 ))
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
mkdir -p runs
exec mpirun --oversubscribe --bind-to none -np 2 ./zerotrain --config scripts/configs/mlp-stage0.json \
    --model mlp --width 256 --layers 4 --steps 200 --report runs/default-report.json "$@"
