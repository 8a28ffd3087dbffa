#!/usr/bin/env python3
"""Checks on zerotrain outputs for the shell tests.

  ztcheck.py dumps REF OTHER --tol T     relative L2 distance of two --dump-params files
  ztcheck.py losses REF OTHER --tol T    per-step loss histories of two --report files
  ztcheck.py loss-falls REPORT           mean of the last 5 losses < mean of the first 5
"""
import argparse
import json
import sys

import numpy as np


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["dumps", "losses", "loss-falls"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    if args.what == "dumps":
        ref, other = (np.fromfile(f, dtype="<f4").astype(np.float64) for f in args.files)
        if ref.shape != other.shape:
            sys.exit(f"FAIL: {args.files[1]} has {other.size} params, {args.files[0]} {ref.size}")
        if not np.all(np.isfinite(other)):
            sys.exit(f"FAIL: {args.files[1]} has non-finite parameters")
        d = rel_l2(other, ref)
        ok = d <= args.tol
        print(f"{'ok' if ok else 'FAIL'}: params {args.files[1]} vs {args.files[0]}: rel L2 {d:.3e} (tol {args.tol:g})")
    elif args.what == "losses":
        ref, other = (np.array(json.load(open(f))["loss_history"]) for f in args.files)
        if ref.shape != other.shape:
            sys.exit(f"FAIL: loss histories differ in length: {ref.size} vs {other.size}")
        d = float(np.max(np.abs(other - ref) / np.maximum(np.abs(ref), 1e-30)))
        ok = d <= args.tol
        print(f"{'ok' if ok else 'FAIL'}: losses {args.files[1]} vs {args.files[0]}: max rel {d:.3e} (tol {args.tol:g})")
    else:
        h = json.load(open(args.files[0]))["loss_history"]
        first, last = float(np.mean(h[:5])), float(np.mean(h[-5:]))
        ok = len(h) >= 10 and last < first
        print(f"{'ok' if ok else 'FAIL'}: loss {first:.5f} -> {last:.5f} over {len(h)} steps")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
