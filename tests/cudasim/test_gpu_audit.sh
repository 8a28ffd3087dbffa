#!/usr/bin/env bash
# The SASS audit's rules (scripts/gpu_audit.py, docs/gpu-audit.md) on the
# Makefile's own nvcc objects, launched as the simulator's path runs launch
# them (scripts/gpu-audit.sh check): tensor-core instructions under every op
# the profile counts as tensor-core work, no spill or local memory on the
# GPT-2 (head 64) and Llama-width (head 128) paths, the occupancy floor on
# the GPT-2 path. Then each rule must fail where it should:
#   - the attention ops, which count tensor_flops in bf16, tagged onto the
#     scalar flash kernels (no tensor-core instruction);
#   - tests/cudasim/audit/broken.cu: a huge local array, a forced register
#     spill, an FMA matrix product under a matmul op, a launch below the
#     occupancy floor, a tensor-core loop with a loop of unstated trips
#     inside; its mma.sync kernel, the control, passes the tensor rule.
# And docs/gpu-audit.md must be as new as the kernels (make gpu-audit).
# Needs nvcc (the CI machines have it at /usr/local/cuda); without one the
# build has no CUDA objects and the test says it skipped.
set -eu
cd "$(dirname "$0")/../.."
export ZT_SIM=1
source tests/env.sh
zt_scratch
NVCC=$(command -v "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" || command -v nvcc || true)
if [ -z "$NVCC" ]; then
    echo "skipped: no nvcc, so no CUDA objects to audit"
    exit 0
fi
ls build/engine/cuda/backend_cuda_flash.ptxas >/dev/null 2>&1 ||
    fail "nvcc is at $NVCC but build/engine/cuda has no objects with ptxas lines (make)"
audit() { /usr/bin/python3 scripts/gpu_audit.py "$@"; }

# The docs are as new as the kernels, and the main loops the roofline
# prices the tensor-core attention by are today's SASS.
want=$(bash scripts/gpu-audit.sh hash)
grep -q "engine/cuda hashes to \`$want\`" docs/gpu-audit.md ||
    fail "docs/gpu-audit.md is older than engine/cuda (its hash is $want): run make gpu-audit"
audit loops --out "$tmp/loops.json" --sources-hash "$want" >/dev/null
cmp -s "$tmp/loops.json" docs/gpu-audit-loops.json ||
    { diff "$tmp/loops.json" docs/gpu-audit-loops.json | head -20
      fail "docs/gpu-audit-loops.json is not today's SASS: run make gpu-audit"; }

# The real kernels pass.
ZT_AUDIT_DIR=$tmp/runs bash scripts/gpu-audit.sh check >"$tmp/check.out" 2>&1 ||
    { cat "$tmp/check.out"; fail "the audit rules fail on today's kernels"; }
grep -q "^gpu_audit: rules pass" "$tmp/check.out" || { cat "$tmp/check.out"; fail "no pass line"; }
for run in gpt2-h64 h128; do
    grep -q "flash_fwd_mma" "$tmp/runs/$run.log" && grep -q "flash_bwd_mma" "$tmp/runs/$run.log" ||
        fail "the $run run (bf16) launched no tensor-core attention kernel"
    grep -q "^attn_flash_backward" "$tmp/runs/$run.log" || fail "the $run log has no op tags"
done

# Tensor rule for the attention: its ops count tensor_flops in the bf16
# runs; tagged onto the scalar kernels (no HMMA) instead, both fail.
/usr/bin/python3 - "$tmp/runs/gpt2-h64.json" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))["profile"]["ops"]
for op in ("attn_flash_forward", "attn_flash_backward"):
    assert ops[op]["class"] == "fma" and ops[op]["tensor_flops"] > 0, ops[op]
PY
cuda_tools=build/tools/cuda/bin
scalar=$("$cuda_tools/cuobjdump" -res-usage build/engine/cuda/backend_cuda_flash.o |
    sed -n 's/^ *Function \(\S*flash_forward_reg\S*\):$/\1/p' | head -n 1)
[ -n "$scalar" ] || fail "no flash_forward_reg in backend_cuda_flash.o"
printf 'attn_flash_forward\tsym:%s\t64\t1\t1\t0\t%s\tx.cu:1\t-\nattn_flash_backward\tsym:%s\t64\t1\t1\t0\t%s\tx.cu:1\t-\n' \
    "$scalar" "$scalar" "$scalar" "$scalar" >"$tmp/attn.log"
set +e
audit check --objects build/engine/cuda/backend_cuda_flash.o --log "gpt2-h64=$tmp/attn.log" \
    --report "$tmp/runs/gpt2-h64.json" >"$tmp/relabel.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || { cat "$tmp/relabel.out"; fail "attention on scalar kernels: exit $rc, want 1"; }
for op in attn_flash_forward attn_flash_backward; do
    grep -q "FAIL tensor: op $op is profiled as tensor-core work (tensor_flops)" "$tmp/relabel.out" ||
        { cat "$tmp/relabel.out"; fail "the tensor rule did not name $op"; }
done

# The broken kernels, each under its own rule.
arch=(-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90)
"$NVCC" -std=c++17 -O3 "${arch[@]}" --Werror all-warnings -Xptxas -v \
    -c tests/cudasim/audit/broken.cu -o "$tmp/broken.o" 2>"$tmp/broken.ptxas" ||
    { cat "$tmp/broken.ptxas"; fail "nvcc broken.cu"; }
printf '{"profile": {"ops": {"gemm": {"class": "matmul"}, "scale": {"class": "memory"}}}}\n' \
    >"$tmp/classes.json"
line() { printf '%s\tsym:%s\t%s\t1\t1\t%s\t%s\ttests/cudasim/audit/broken.cu:1\t-\n' "$1" "$2" "$3" "$4" "$2"; }
# case NAME WANT_RC PATTERN LOG_LINES...
case_() {
    local name=$1 want=$2 pattern=$3; shift 3
    printf '%s' "$@" >"$tmp/$name.log"
    set +e
    audit check --objects "$tmp/broken.o" --log "path=$tmp/$name.log" --report "$tmp/classes.json" \
        >"$tmp/$name.out" 2>&1
    local rc=$?
    set -e
    [ $rc = "$want" ] || { cat "$tmp/$name.out"; fail "$name: exit $rc, want $want"; }
    grep -q -- "$pattern" "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "$name: no '$pattern'"; }
}
case_ local 1 "FAIL spill: audit_local_array on sm_90 .*a 4096-byte stack frame" \
    "$(line scale audit_local_array 256 0)"$'\n'
case_ spill 1 "FAIL spill: audit_register_spill on sm_90 .*196 bytes of spill stores" \
    "$(line scale audit_register_spill 1024 0)"$'\n'
case_ fma-matmul 1 "FAIL tensor: op gemm is profiled as tensor-core work .*audit_fma_gemm" \
    "$(line gemm audit_fma_gemm 256 0)"$'\n'
case_ occupancy 1 "FAIL occupancy: audit_low_occupancy on sm_90 .*1.6% of the H100's warps .*limited by shared memory" \
    "$(line scale audit_low_occupancy 32 204800)"$'\n'
case_ nested 1 "FAIL loop: audit_nested_mma on sm_90 .* inner loop(s) and INNER_TRIPS states no trip count" \
    "$(line scale audit_nested_mma 32 0)"$'\n'
case_ control 0 "rules pass" \
    "$(line gemm audit_mma_gemm 32 0)"$'\n' "$(line scale audit_low_occupancy 256 4096)"$'\n'
# A matmul op with both: one tensor-core kernel is enough.
case_ mixed 0 "rules pass" "$(line gemm audit_mma_gemm 32 0)"$'\n' "$(line gemm audit_fma_gemm 256 0)"$'\n'
# The counters themselves, on the control's SASS: one HMMA per architecture.
audit report --objects "$tmp/broken.o" --log "path=$tmp/control.log" --report "$tmp/classes.json" \
    --out "$tmp/report.md" >/dev/null
grep -q '^| `audit_mma_gemm (gemm)` | broken | [0-9]* | 0/0 | 0 | 0 | 32: [0-9.]*% ([a-z ]*) | 1 |' \
    "$tmp/report.md" || { grep audit_mma_gemm "$tmp/report.md"; fail "the control's row"; }

# Inputs that are not what they claim are refused, with a message.
printf 'gemm\tsym:audit_mma_gemm\t32\n' >"$tmp/short.log"
set +e
audit check --objects "$tmp/broken.o" --log "path=$tmp/short.log" >"$tmp/short.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] && grep -q "short.log:1: not a launch log line" "$tmp/short.out" ||
    { cat "$tmp/short.out"; fail "a short log line: exit $rc"; }
rm "$tmp/broken.ptxas"
set +e
audit check --objects "$tmp/broken.o" >"$tmp/noptx.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] && grep -q "broken.ptxas is missing" "$tmp/noptx.out" ||
    { cat "$tmp/noptx.out"; fail "a missing .ptxas: exit $rc"; }
echo "PASS: the audit rules hold on today's kernels and fail each broken one"
