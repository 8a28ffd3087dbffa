#!/usr/bin/env python3
"""The block quantization kernels (engine/backend.h quantize/dequantize, the
CPU backend's, which the CUDA backend matches bit for bit in op-check)
against a numpy reference, block by block, on what build/tests/quant-dump
writes (random blocks of magnitudes 1e-3..1e3, all-zero blocks, a single huge
value, all-negative blocks, blocks holding +a and -a, inf, NaN, blocks too
small for the multiplier, tails shorter than a block, odd int4 lengths):

  1. the format, exactly: mult = fp32(2^(b-1) / a) (1 when a == 0),
     q = clamp(rint(fp32(x * mult))), scale = fp32(1 / mult); a non-finite
     block has scale NaN and q 0, a block whose mult overflows scale 0 and q 0;
     an odd int4 tail leaves its last high nibble 0;
  2. the error bound per block, in float64: |x - q * scale| <= scale / 2,
     and <= scale where q was clamped at 2^(b-1) - 1 (the +a side), each
     plus 2^-21 a for the fp32 roundings, with scale within 2^-23 of
     a / 2^(b-1): the bound is a / 2^b (a / 2^(b-1) at +a);
  3. dequantize: y = dtype(fp32(q * scale)), and accumulating
     yacc = dtype(fp32(y0 + fp32(q * scale))), bit for bit;
  4. the qwZ block (engine/zero/quant.h zt_qwz_block) is DeepSpeed's group
     size (CUDAQuantizer, transcribed in tests/tools/ztzeropp.py) for shard
     lengths 16..1.6e7.

Prints, per dtype, bits and block, the largest error over the finite blocks
in units of the block's scale (apart from and at the clamped +absmax) and of
its absmax.

    /usr/bin/python3 tests/reference/test_quant_numpy.py [--tool build/tests/quant-dump]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from ztzeropp import deepspeed_groups  # noqa: E402

# fp32 roundings of mult, x * mult and 1 / mult, relative to the block's absmax
F32_SLACK = 2.0 ** -21


def widen(bits, dtype):
    """The dump's bit patterns as float64 values."""
    u = np.asarray(bits, dtype=np.uint64)
    if dtype == "fp32":
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return u.astype(np.uint16).view(np.float16).astype(np.float64)
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def narrow_bits(v32, dtype):
    """fp32 values rounded to nearest even in dtype, as bit patterns."""
    v32 = np.asarray(v32, dtype=np.float32)
    if dtype == "fp32":
        return v32.view(np.uint32).astype(np.uint64)
    if dtype == "fp16":
        return v32.astype(np.float16).view(np.uint16).astype(np.uint64)
    u = v32.view(np.uint32).astype(np.uint64)
    nan = np.isnan(v32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    r[nan] = ((u[nan] >> 16) | 0x40) & 0xFFFF
    return r


def same_bits(a, b, dtype):
    """Bit equality, any NaN matching any NaN."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    va, vb = widen(a, dtype), widen(b, dtype)
    return (a == b) | (np.isnan(va) & np.isnan(vb))


def check_case(c, errors, table):
    dt, bits, n, block = c["dtype"], c["bits"], c["n"], c["block"]
    name = f"{dt} int{bits} n={n} block {block}"
    x = widen(c["x"], dt)
    q = np.asarray(c["q"], dtype=np.int64)
    scales = np.asarray(c["scales"], dtype=np.uint64).astype(np.uint32).view(np.float32)
    half = 2 ** (bits - 1)
    qmin, qmax = -half, half - 1
    worst_in, worst_clamp, worst_amax = 0.0, 0.0, 0.0
    nb = (n + block - 1) // block
    if len(scales) != nb or len(q) != n:
        errors.append(f"{name}: {len(scales)} scales, {len(q)} values; want {nb}, {n}")
        return
    if bits == 4 and n % 2 and c["pad_nibble"] != 0:
        errors.append(f"{name}: the odd tail's unused nibble is {c['pad_nibble']}, not 0")
    for b in range(nb):
        lo, hi = b * block, min((b + 1) * block, n)
        xb, qb, s = x[lo:hi], q[lo:hi], scales[b]
        where = f"{name} block {b}"
        if not np.all(np.isfinite(xb)):
            if not np.isnan(s) or np.any(qb != 0):
                errors.append(f"{where}: non-finite block: scale {s}, q not all 0")
            continue
        # 1. the format, with numpy's fp32 arithmetic (correctly rounded)
        a = np.float32(np.max(np.abs(xb)))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            mult = np.float32(1.0) if a == 0 else np.float32(half) / a
        if np.isinf(mult):
            if s != 0 or np.any(qb != 0):
                errors.append(f"{where}: a = {a:g} overflows the multiplier: want scale 0, q 0; "
                              f"got scale {s:g}")
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            prod = xb.astype(np.float32) * mult
        want_q = np.clip(np.rint(prod), qmin, qmax).astype(np.int64)
        want_s = np.float32(1.0) / mult
        if s.view(np.uint32) != want_s.view(np.uint32):
            errors.append(f"{where}: scale {s!r} != {want_s!r}")
        bad = np.nonzero(qb != want_q)[0]
        if len(bad):
            i = bad[0]
            errors.append(f"{where}: {len(bad)} values differ, first [{lo + i}]: x {xb[i]!r} -> "
                          f"q {qb[i]}, want {want_q[i]}")
        # 2. the error bound, float64
        if a == 0:
            if s != 1 or np.any(qb != 0):
                errors.append(f"{where}: all-zero block: scale {s}, q not all 0")
            continue
        s64 = float(s)
        if abs(s64 - float(a) / half) > float(a) / half * 2.0 ** -23:
            errors.append(f"{where}: scale {s64!r} is not a / 2^{bits - 1} = {float(a) / half!r}")
        err = np.abs(xb - qb * s64)
        clamped = (qb == qmax) & (xb > (qmax + 0.5) * s64)
        bound = np.where(clamped, s64, 0.5 * s64) + F32_SLACK * float(a)
        over = np.nonzero(err > bound)[0]
        if len(over):
            i = over[0]
            errors.append(f"{where}: |x - q scale| = {err[i]:g} > {bound[i]:g} at [{lo + i}] "
                          f"(x {xb[i]!r}, q {qb[i]}, scale {s64!r})")
        if np.any(~clamped):
            worst_in = max(worst_in, float(np.max(err[~clamped])) / s64)
        if np.any(clamped):
            worst_clamp = max(worst_clamp, float(np.max(err[clamped])) / s64)
        worst_amax = max(worst_amax, float(np.max(err)) / float(a))
    # 3. dequantize, plain and accumulating
    s_per = np.repeat(scales, block)[:n]
    with np.errstate(invalid="ignore"):
        deq32 = q.astype(np.float32) * s_per
        acc32 = widen(c["y0"], dt).astype(np.float32) + deq32
    for key, want in (("y", deq32), ("yacc", acc32)):
        ok = same_bits(c[key], narrow_bits(want, dt), dt)
        if not np.all(ok):
            i = int(np.nonzero(~ok)[0][0])
            errors.append(f"{name}: dequantize {key}[{i}] bits {c[key][i]:#x}, want "
                          f"{int(narrow_bits(want[i:i + 1], dt)[0]):#x}")
    table.append((dt, bits, n, block, worst_in, worst_clamp, worst_amax))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default="build/tests/quant-dump")
    ap.add_argument("--zerotrain", help="(ignored: tests/run.sh passes it to every reference test)")
    args = ap.parse_args()
    if not os.access(args.tool, os.X_OK):
        print(f"FAIL: {args.tool} is not built (make unit-test)")
        return 1
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "dump.json")
        subprocess.run([args.tool, out], check=True)
        doc = json.load(open(out))
    errors, table = [], []
    for n, block in doc["qwz_blocks"].items():
        want = int(n) // deepspeed_groups(int(n))
        if block != want:
            errors.append(f"zt_qwz_block({n}) = {block}, DeepSpeed's group size is {want}")
    for c in doc["cases"]:
        check_case(c, errors, table)
    blocks = doc["qwz_blocks"]
    print(f"qwZ blocks: DeepSpeed's group size for {len(blocks)} shard lengths from 16 to "
          f"{max(int(n) for n in blocks)}, e.g. " +
          ", ".join(f"{n} -> {b}" for n, b in list(blocks.items())[:: len(blocks) // 6]))
    print("| dtype | bits | n | block | max error / scale | at the clamped +absmax | "
          "max error / absmax |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dt, bits, n, block, wi, wc, wa in table:
        print(f"| {dt} | {bits} | {n} | {block} | {wi:.4f} | {wc:.4f} | {wa:.3e} |")
    for e in errors[:30]:
        print("FAIL: " + e)
    if errors:
        print(f"FAIL: {len(errors)} problems")
        return 1
    print(f"ok: {len(doc['cases'])} cases: format bit for bit, error within scale/2 "
          "(scale at the clamped +absmax), dequantize bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
