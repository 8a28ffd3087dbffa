#!/usr/bin/env bash
# Runs each libFuzzer harness (build/fuzz/fuzz_NAME, built by `make fuzz`) for
# SECONDS from its seed corpus tests/fuzz/corpus/NAME:
#
#     bash tests/fuzz/run.sh SECONDS NAME...
#
# New inputs go to build/fuzz/corpus/NAME (kept between runs, so a later run
# starts from everything found so far; the seed corpus in the tree is never
# written), findings to build/fuzz/artifacts/NAME/, logs to
# build/fuzz/logs/NAME.log. Up to ZT_FUZZ_JOBS harnesses (default: the number
# of cores) run at once. Prints one line per harness (executions, coverage,
# corpus size) and, for a crash, leak or timeout, the reproducer's path and the
# command that replays it; exits non-zero on any finding.
set -u
cd "$(dirname "$0")/../.."
seconds=${1:?usage: tests/fuzz/run.sh SECONDS NAME...}
shift
# nproc alone answers OMP_NUM_THREADS, which the test environment sets to 1.
jobs=${ZT_FUZZ_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mkdir -p build/fuzz/logs

fuzz_one() {
    local name=$1
    mkdir -p "build/fuzz/corpus/$name" "build/fuzz/artifacts/$name"
    # Past max_total_time only a hung input can keep it running: -timeout
    # catches those first (10 s per input).
    timeout $((seconds + 120)) "build/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 \
        -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$name/" \
        "build/fuzz/corpus/$name" "tests/fuzz/corpus/$name" >"build/fuzz/logs/$name.log" 2>&1
    echo $? >"build/fuzz/logs/$name.rc"
}

running=0
for name in "$@"; do
    [ -x "build/fuzz/fuzz_$name" ] || { echo "FAIL fuzz/$name: build/fuzz/fuzz_$name is not built (make fuzz)"; exit 1; }
    fuzz_one "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait

failed=0
for name in "$@"; do
    log=build/fuzz/logs/$name.log
    rc=$(cat "build/fuzz/logs/$name.rc")
    # libFuzzer's last progress line: "#N DONE cov: C ft: F corp: K/S ...".
    stats=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -E 's/^#([0-9]+)[[:space:]]+[A-Z_]+[[:space:]]+/\1 execs, /')
    if [ "$rc" = 0 ]; then
        printf 'PASS fuzz/%-10s %ss: %s\n' "$name" "$seconds" "$stats"
        continue
    fi
    failed=1
    printf 'FAIL fuzz/%-10s exit %s after %s (log: %s)\n' "$name" "$rc" "$stats" "$log"
    grep -E 'ERROR: |runtime error|invariant broken|SUMMARY' "$log" | head -n 5 | sed 's/^/    /'
    repro=$(grep -o 'Test unit written to .*' "$log" | tail -n 1 | sed 's/^Test unit written to //')
    if [ -n "$repro" ]; then
        echo "    reproducer: $repro"
        echo "    replay:     build/fuzz/fuzz_$name $repro"
    else
        tail -n 20 "$log" | sed 's/^/    /'
    fi
done
exit "$failed"
