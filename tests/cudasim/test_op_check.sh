#!/usr/bin/env bash
# The CUDA backend's ops (engine/cuda, compiled unchanged but for ZT_LAUNCH)
# on the CUDA simulator against the CPU backend: build/sim/op-check --quick
# runs every op of the backend contract in every dtype and every GEMM setting
# (fp32, tf32, bf16, fp16) with op-check's stated tolerances (main.c), less
# its largest shapes (4096^3 GEMMs take minutes on one core): the typed ops
# on bf16 and fp16 tensors too (linear_backward aside: the CUDA backend has
# none). Any op the simulator reports (a race, a bad pointer, an illegal
# access) fails its case.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
bin=build/sim/op-check
[ -x "$bin" ] || fail "$bin is not built (run make sim)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --quick >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "op-check failed on the simulator"; }
grep -q "zt-sim" "$tmp/out" && { cat "$tmp/out"; fail "the simulator reported an error"; }
tail -n 1 "$tmp/out"
for op in $("$bin" --list | awk '/^[a-z]/ {print $1}'); do
    [ "$op" = "(every" ] && continue
    grep -q "^$op" "$tmp/out" || fail "op-check printed no case of $op"
done
for set in fp32 tf32 bf16 fp16; do
    grep -q "^gemm\[$set\]" "$tmp/out" && grep -q "^gemm_batched\[$set\]" "$tmp/out" ||
        fail "no GEMM cases in the $set setting"
done
for op in gemm bias_add bias_grad xent_forward_backward axpy embedding_forward \
    embedding_backward layernorm_forward layernorm_backward residual_layernorm_forward \
    linear_act_forward act_bias_grad attn_flash_forward attn_flash_backward dropout \
    sinusoid_add mean_pool_forward mean_pool_backward; do
    for dt in bf16 fp16; do
        grep -qE "^$op(\[[a-z0-9]+\])? +$dt[ ,]" "$tmp/out" || fail "no $dt case of the typed $op"
    done
done
# A GPU that cannot give the tensor-core backward its dynamic shared memory
# (an opt-in limit of 48 KiB): the backward falls back to the scalar kernels
# and still passes; the forward (static shared memory) keeps tensor cores.
ZT_SIM_SHARED_OPTIN_KB=48 ZT_SIM_LAUNCH_LOG="$tmp/optin.launches" \
    "$bin" --quick --only attn_flash >"$tmp/optin" 2>&1 ||
    { cat "$tmp/optin"; fail "op-check attn_flash with a 48 KiB opt-in limit"; }
grep -q "zt-sim" "$tmp/optin" && { cat "$tmp/optin"; fail "the simulator reported an error"; }
grep -q "flash_fwd_mma" "$tmp/optin.launches" || fail "48 KiB opt-in: no tensor-core forward ran"
grep -q "flash_bwd_mma" "$tmp/optin.launches" &&
    fail "48 KiB opt-in: the tensor-core backward launched without its shared memory"
grep -q "flash_dkv" "$tmp/optin.launches" || fail "48 KiB opt-in: no scalar backward ran"
echo "op-check: every op, dtype and GEMM setting passes on the simulator"
