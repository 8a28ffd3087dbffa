#!/usr/bin/env bash
# The quick-start job (make run): GPT-lite (4 layers, C 128, 4 heads, T 128,
# 0.83M parameters) learns character-level tiny shakespeare on 2 MPI ranks in
# about two minutes on 2 cores: zerotrain's progress line and validation loss
# every 100 steps (it falls from 4.2 to about 2.0), then 300 sampled
# characters. The data comes from scripts/get-data.sh (../shared/data when
# present, else the public source, sha256-checked). Extra arguments go to
# zerotrain, replacing the defaults they name (--steps 2500 trains to about
# 1.7).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$(bash scripts/get-data.sh --print shakespeare)
mkdir -p runs
# Extra arguments replace the defaults they name (zerotrain takes each flag
# once), the others are added.
defaults=(--config scripts/configs/gptlite-shakespeare.json --model gptlite --data "$data"
          --n-layer 4 --n-embd 128 --n-head 4 --block-size 128 --dropout 0
          --steps 500 --eval-interval 100 --eval-iters 8 --sample 300
          --report runs/default-report.json)
given() { # FLAG: the user gave it (or, for --config, one of its spellings)
    local a f
    for a in "${user[@]}"; do
        for f in "$1" ${2:-}; do [[ $a == "$f" || $a == "$f="* ]] && return 0; done
    done
    return 1
}
user=("$@")
args=()
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
    other=""
    [ "${defaults[i]}" = --config ] && other="--deepspeed_config --deepspeed"
    given "${defaults[i]}" "$other" || args+=("${defaults[i]}" "${defaults[i + 1]}")
done
# No OMP_NUM_THREADS: zerotrain gives each rank its share of the cores (and
# says so); --bind-to none lets a rank use more than one core.
exec mpirun --oversubscribe --bind-to none -np 2 ./zerotrain "${args[@]}" "$@"
