#!/usr/bin/env python3
"""Checks of ZeRO++'s quantized communication (docs/zeropp.md) on zerotrain's
--report files.

  ztzeropp.py bytes REPORT --mlp W,L,IN,OUT [--label TEXT]
      every rank's measured bytes per group and kind (comm.GROUP.bytes / steps)
      and the stage policy's statement (zero.policy.bytes_per_step) against
      formulas computed here from the MLP shape, independently of the C code:
        qwZ   a unit's shard of s elements travels as a chunk of
              align16(4 g + s) bytes, g = DeepSpeed's group count for s
              (CUDAQuantizer); a gather over n ranks moves n chunks; per
              micro-step every unit is gathered before forward (world) and
              before backward (world, or with hpZ h the group's chunks of
              padded / h elements);
        qgZ   a bucket of w columns per rank moves n chunks of
              align16(4 ceil(w / 256) + ceil(w / 2)) bytes within the node
              (none with one rank per node) and M chunks across nodes; the
              buckets cut the partition from its top in reduce_bucket_size / n
              columns. Unquantized collectives count elements times the dtype.
      Needs stage 3, no persistent units and reuse distance 0 (exact counts).

  ztzeropp.py compare QUANT.json PLAIN.json [--max-loss-rel R] [--label TEXT]
      the quantized run against the same run without quantization: bytes of
      the parameter all-gathers (world + hpz) and of the gradient reduction
      (reduce-scatter, or qgZ's two all-to-alls), each as a fraction of the
      plain run's, and the losses step by step: max |q - p| / p must be <= R.
      Prints one table row per run pair with both runs' samples/s
      (`ztzeropp.py header` prints the table's header).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ztstages import mlp_units, padded  # noqa: E402

QGZ_BLOCK = 256


def deepspeed_groups(numel, target=8000):
    """qwZ's group count: CUDAQuantizer.quantize (deepspeed/runtime/zero/
    partition_parameters.py), transcribed with its asserts."""
    groups = -(-numel // target)
    while groups < numel:
        if numel % (8 * groups) == 0:
            break
        groups += 1
    while True:
        if numel % (8 * groups * 2) == 0 and numel / groups > target:
            groups *= 2
        else:
            break
    assert numel % (8 * groups) == 0
    assert numel / groups < 16000
    assert numel > groups
    return groups


def align16(b):
    return (b + 15) // 16 * 16


def qwz_chunk(s):
    return align16(4 * deepspeed_groups(s) + s)


def qgz_chunk(w):
    return align16(4 * (-(-w // QGZ_BLOCK)) + (w + 1) // 2)


DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def expected_bytes(r, mlp):
    """Bytes per optimizer step by group and kind."""
    z = r["zero"]
    n, gas = int(r["world_size"]), int(r["gradient_accumulation_steps"])
    h = int(z.get("hpz_partition_size") or 1)
    pb = DTYPE_BYTES[r["precision"]]
    cb = DTYPE_BYTES[r["mixed_precision"]["comm_dtype"]]
    units = [padded(u, n) for u in mlp_units(*mlp)]
    P = sum(units)
    exp = {}

    def add(group, kind, v):
        exp.setdefault(group, {}).setdefault(kind, 0)
        exp[group][kind] += v

    if z["quantized_weights"]:
        fwd = sum(n * qwz_chunk(u // n) for u in units)
        add("world", "all_gather", gas * fwd)
        if h > 1:
            add("hpz", "all_gather", gas * sum(h * qwz_chunk(u // h) for u in units))
        else:
            add("world", "all_gather", gas * fwd)
    else:
        add("world", "all_gather", gas * (1 if h > 1 else 2) * P * pb)
        if h > 1:
            add("hpz", "all_gather", gas * P * pb)
    if z["qgz_active"]:
        L = int(z["qgz_ranks_per_node"])
        M = n // L
        width = max(1, min(int(z["reduce_bucket_size"]) // n, P // n))
        top, intra, inter = P // n, 0, 0
        while top > 0:
            w = min(width, top)
            intra += n * qgz_chunk(w) if L > 1 else 0
            inter += M * qgz_chunk(w)
            top -= w
        if L > 1:
            add("qgz_intra", "all_to_all", gas * intra)
        add("qgz_inter", "all_to_all", gas * inter)
    else:
        add("world", "reduce_scatter", gas * P * cb)
    return exp


def cmd_bytes(args):
    r = json.load(open(args.report))
    label = args.label or args.report
    mlp = tuple(int(v) for v in args.mlp.split(","))
    z = r["zero"]
    errors = []
    if int(r["stage"]) != 3 or int(z["persistent_params"]) != 0 or not z["policy"]["elements_exact"]:
        errors.append(f"{label}: needs stage 3, no persistent units and exact counts")
    exp = expected_bytes(r, mlp)
    steps = int(r["steps"])
    stated = z["policy"]["bytes_per_step"]
    for g, kinds in stated.items():
        for k, v in kinds.items():
            want = exp.get(g, {}).get(k, 0)
            if int(v) != want:
                errors.append(f"{label}: zero.policy.bytes_per_step.{g}.{k} = {v}, formula {want}")
    for rk in r["ranks"]:
        groups = rk.get("comm", {})
        for g in set(groups) | set(exp):
            got_kinds = groups.get(g, {}).get("bytes", {})
            for k in set(got_kinds) | set(exp.get(g, {})):
                got, want = int(got_kinds.get(k, 0)), exp.get(g, {}).get(k, 0) * steps
                if got != want:
                    errors.append(f"{label}: rank {rk['rank']} comm.{g}.bytes.{k} = {got}, "
                                  f"formula {want} ({steps} steps)")
    row = ", ".join(f"{g}.{k} {v}" for g, kinds in sorted(exp.items()) for k, v in kinds.items())
    for e in errors[:20]:
        print("FAIL: " + e)
    if not errors:
        print(f"ok: {label}: bytes per step {row}, measured on {len(r['ranks'])} ranks")
    return not errors


def traffic(r):
    """Bytes per step on rank 0: parameter gathers, gradient reduction."""
    steps = int(r["steps"])
    g = r["ranks"][0]["comm"]
    b = lambda grp, k: int(g.get(grp, {}).get("bytes", {}).get(k, 0))  # noqa: E731
    gather = b("world", "all_gather") + b("hpz", "all_gather")
    grad = b("world", "reduce_scatter") + b("qgz_intra", "all_to_all") + b("qgz_inter", "all_to_all")
    return (gather / steps, grad / steps, b("qgz_intra", "all_to_all") / steps,
            b("qgz_inter", "all_to_all") / steps)


def cmd_compare(args):
    q, p = json.load(open(args.quant)), json.load(open(args.plain))
    label = args.label or args.quant
    qg, qd, qi, qx = traffic(q)
    pg, pd, _, _ = traffic(p)
    lq, lp = q["loss_history"], p["loss_history"]
    errors = []
    if len(lq) != len(lp) or not lq:
        errors.append(f"{label}: {len(lq)} losses against {len(lp)}")
    rel = [abs(a - b) / abs(b) for a, b in zip(lq, lp)]
    worst = max(rel) if rel else float("inf")
    at = rel.index(worst) + 1 if rel else 0
    if not worst <= args.max_loss_rel:
        errors.append(f"{label}: loss differs by {worst:.4f} relative at step {at} "
                      f"(> {args.max_loss_rel})")
    print(f"| {label} | {len(lq)} | {lp[-1]:.4f} | {lq[-1]:.4f} | {worst:.4f} (step {at}) "
          f"| {qg / pg:.3f} | {qd / pd:.3f} | {qi / pd:.3f} | {qx / pd:.3f} "
          f"| {p['samples_per_sec']:.1f} | {q['samples_per_sec']:.1f} |")
    for e in errors:
        print("FAIL: " + e)
    return not errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("bytes")
    b.add_argument("report")
    b.add_argument("--mlp", required=True, help="W,L,IN,OUT")
    b.add_argument("--label", default="")
    c = sub.add_parser("compare")
    c.add_argument("quant")
    c.add_argument("plain")
    c.add_argument("--max-loss-rel", type=float, default=0.02)
    c.add_argument("--label", default="")
    sub.add_parser("header")
    args = ap.parse_args()
    if args.what == "header":
        print("| run | steps | final loss plain | quantized | max step loss diff (rel) "
              "| all-gather bytes q/plain | gradient bytes q/plain | intra-node hop | "
              "inter-node hop | samples/s plain | quantized |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        sys.exit(0)
    ok = cmd_bytes(args) if args.what == "bytes" else cmd_compare(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
