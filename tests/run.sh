#!/usr/bin/env bash
# Runs every test: the source-tree rules (tests/lint), cmocka unit tests,
# multi-rank MPI tests, the CUDA simulator's tests (tests/cudasim/test_*.sh on
# `make sim`'s build), PyTorch reference tests, then the sanitizer stages
# (`make sanitize`, `make sim-sanitize`) and short fuzz runs (`make fuzz`,
# ZT_FUZZ_SECONDS per harness, default 30), each in its own build dir. Each is one executable or
# script; its exit status decides. Prints a final "N passed, N failed" line
# and exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
source tests/env.sh

passed=0
failed=0
failures=()
run_one() {
    local name=$1; shift
    local log="build/test-logs/${name//\//_}.log"
    mkdir -p build/test-logs
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        printf 'PASS %-50s %4ss\n' "$name" $((SECONDS - t0))
        # A test's GPU half that could not run says so on the console too.
        grep '^skipped:' "$log" | sed 's/^/    /' || true
    else
        failed=$((failed + 1))
        failures+=("$name")
        printf 'FAIL %-50s %4ss (log: %s)\n' "$name" $((SECONDS - t0)) "$log"
        tail -n 40 "$log" | sed 's/^/    /'
    fi
}

for t in tests/lint/*.py; do
    run_one "lint/$(basename "$t" .py)" "$ZT_PYTHON" "$t"
done
for t in build/tests/test_*; do
    [ -x "$t" ] && run_one "unit/$(basename "$t")" "$t"
done
for t in tests/mpi/test_*.sh; do
    run_one "mpi/$(basename "$t" .sh)" bash "$t"
done
# The fused ops are checked against op-by-op BLAS calls, and whether two such
# calls give the same bits depends on the kernel OpenBLAS picks for the CPU
# (or OPENBLAS_CORETYPE): the unit test under every core type this CPU runs,
# the training comparison under one whose sgemm bits follow the thread count
# (Haswell) and one whose do not (SkylakeX, or Sandybridge without AVX-512).
coretypes=$(zt_blas_coretypes | tr "\n" " ")
for ct in $coretypes; do
    run_one "unit/test_backend_fused@$ct" env OPENBLAS_CORETYPE="$ct" build/tests/test_backend_fused
done
mpi_coretypes=()
for ct in $coretypes; do
    case $ct in
    Haswell | SkylakeX) mpi_coretypes+=("$ct") ;;
    Sandybridge) [[ " $coretypes " == *" SkylakeX "* ]] || mpi_coretypes+=("$ct") ;;
    esac
done
for ct in "${mpi_coretypes[@]}"; do
    run_one "mpi/test_fused_ops@$ct" env OPENBLAS_CORETYPE="$ct" bash tests/mpi/test_fused_ops.sh
done
for t in tests/cudasim/test_*.sh; do
    run_one "cudasim/$(basename "$t" .sh)" bash "$t"
done
for t in tests/reference/test_*.py; do
    run_one "reference/$(basename "$t" .py)" "$ZT_PYTHON" "$t" --zerotrain ./zerotrain
done
# Their own builds, with both cores (MAKEFLAGS cleared: `make test`'s job
# server does not reach this script).
run_one "sanitize" env MAKEFLAGS= make --no-print-directory -j"$(zt_cores)" sanitize
run_one "cudasim/asan" env MAKEFLAGS= make --no-print-directory -j"$(zt_cores)" sim-sanitize
run_one "fuzz" env MAKEFLAGS= make --no-print-directory -j"$(zt_cores)" fuzz \
    FUZZ_SECONDS="${ZT_FUZZ_SECONDS:-30}"

echo
if [ "$failed" -gt 0 ]; then
    printf 'failed: %s\n' "${failures[@]}"
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
