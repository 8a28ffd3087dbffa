#!/usr/bin/env python3
"""Checks of the ZeRO stages on zerotrain's --report and --dump-params files.

  ztstages.py same REF.bin REF.json RUN.bin RUN.json [--tol T] [--expect stage=S,np=N,gas=G] [--tag TAG]
      the run's parameter dump equals the reference's to T relative L2 and its
      per-step losses to T relative (one line: "ok: TAG ..."), and the report
      says the stage / world size / accumulation the test asked for.

  ztstages.py check REPORT --mlp W,L,IN,OUT [--persist-threshold T] [--max-live M]
                           [--reuse-distance D] [--moments K] [--label TEXT]
      every rank's measured memory (memory_bytes.device.CLASS.peak) and
      communication (comm_bytes, comm.world / comm.hpz) against the ZeRO
      formulas for the report's stage, world size N, accumulation GAS and
      steps, exactly. Psi_p (padded parameters) is recomputed here from the
      MLP shape (each unit padded to a multiple of N * 16) and must equal the
      report's zero.padded_params. The stage policy's own statement in the
      report (zero.policy: model-state bytes, elements per step) must equal
      these formulas too. Prints a table of the measured values and
      "expected X, measured Y" for every mismatch.

Formulas (fp32, K = 2 moments for Adam/AdamW; bytes per rank; P = Psi_p, N ranks,
p = persistent (padded) params of stage 3, q = P - p, h = hpZ group size):
  stage 0  PARAMS 4P        GRADS 4P    OPTIM 4KP    MASTER 0
  stage 1  PARAMS 4P        GRADS 4P    OPTIM 4KP/N
  stage 2  PARAMS 4P        GRADS 4P/N  OPTIM 4KP/N
  stage 3  PARAMS 4(q/N + p [+ q/h with hpZ])  GRADS 4P/N  OPTIM 4KP/N
Communication per optimizer step, in elements (comm bytes / 4 / steps). The
counters count whole logical buffers: an all-reduce its buffer once, a
reduce-scatter its full input, an all-gather its full output. So stage 0's
all_reduce = P is the ZeRO paper's 2 Psi (an all-reduce is a reduce-scatter
plus an all-gather), and stages 1-2's reduce_scatter P + all_gather P are the
same 2 Psi:
  stage 0  all_reduce P
  stage 1  reduce_scatter P          all_gather P
  stage 2  reduce_scatter GAS * P    all_gather P
  stage 3  reduce_scatter GAS * P    all_gather p + 2 GAS q  (reuse distance 0:
           every non-persistent unit gathered before forward and again before
           backward; persistent units re-gathered once after the step)
           with hpZ: world all_gather p + GAS q (forward), hpz all_gather GAS q
           (backward, within the group)
Every other kind is 0; a world of one rank counts nothing.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ztcheck import dump_distance, loss_distance  # noqa: E402

ALIGN = 16
CLASSES = ["PARAMS", "GRADS", "MASTER", "OPTIM", "ACTS", "COMM", "WORK"]
KINDS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]


def cmd_same(args):
    ref_bin, ref_json, run_bin, run_json = args.files
    tag = args.tag or run_bin
    problems = []
    d_params, problem = dump_distance(ref_bin, run_bin)
    if problem:
        problems.append(problem)
    elif not d_params <= args.tol:
        problems.append(f"params rel L2 {d_params:.3e} > {args.tol:g}")
    d_loss, problem = loss_distance(ref_json, run_json)
    if problem:
        problems.append(problem)
    elif not d_loss <= args.tol:
        problems.append(f"losses max rel {d_loss:.3e} > {args.tol:g}")
    rrun = json.load(open(run_json))
    if args.expect:
        got = {"stage": rrun.get("stage"), "np": rrun.get("world_size"),
               "gas": rrun.get("gradient_accumulation_steps")}
        for item in args.expect.split(","):
            k, v = item.split("=")
            if got.get(k) != int(v):
                problems.append(f"report says {k} {got.get(k)}, the test asked for {v}")
    status = "ok" if not problems else "FAIL"
    print(f"{status}: {tag}: params rel L2 {d_params:.2e}, losses max rel {d_loss:.2e} (tol {args.tol:g})"
          + ("" if not problems else ": " + "; ".join(problems)))
    return not problems


def mlp_units(width, layers, in_size, out_size):
    units = [in_size * width + width]
    units += [width * width + width] * (layers - 2)
    units += [width * out_size + out_size]
    return units


def padded(n, world):
    m = world * ALIGN
    return (n + m - 1) // m * m


HEADER = ("| run | rank | PARAMS | GRADS | OPTIM | MASTER | COMM peak / reserved | gather peak live "
          "| per step (elements): all_reduce | reduce_scatter | all_gather (world + hpz) |")


def cmd_check(args):
    r = json.load(open(args.report))
    z = r["zero"]
    stage, N = int(r["stage"]), int(r["world_size"])
    gas, steps = int(r["gradient_accumulation_steps"]), int(r["steps"])
    P, part, pers = int(z["padded_params"]), int(z["partition_params"]), int(z["persistent_params"])
    h = int(z.get("hpz_partition_size") or 1)
    hpz = stage == 3 and h > 1
    K = args.moments
    label = args.label or f"stage {stage} np {N}"
    errors = []

    def expect(what, expected, measured):
        if expected != measured:
            errors.append(f"{label}: {what}: expected {expected}, measured {measured}"
                          + (f" (diff {measured - expected:+d})" if isinstance(expected, int)
                             and isinstance(measured, int) else ""))

    # --- layout: recompute Psi_p from the MLP shape
    W, L, IN, OUT = (int(v) for v in args.mlp.split(","))
    units = mlp_units(W, L, IN, OUT)
    punits = [padded(u, N) for u in units]
    expect("model.params (unpadded)", sum(units), int(r["model"]["params"]))
    expect("zero.padded_params (Psi_p, each unit padded to N*16)", sum(punits), P)
    expect("zero.partition_params (Psi_p / N)", P // N, part)
    if P % N:
        errors.append(f"{label}: Psi_p {P} is not divisible by N {N}")
    slack = P - int(r["model"]["params"])
    if not 0 <= slack < len(units) * N * ALIGN:
        errors.append(f"{label}: Psi_p - params = {slack}, not within padding [0, {len(units) * N * ALIGN})")
    exp_pers = 0
    if stage == 3:
        exp_pers = sum(pu for u, pu in zip(units, punits) if u <= args.persist_threshold)
    expect("zero.persistent_params", exp_pers, pers)
    q = P - pers
    max_unit = max(punits)
    max_np_unit = max([pu for u, pu in zip(units, punits) if not (stage == 3 and u <= args.persist_threshold)],
                      default=0)

    # --- memory (bytes)
    if stage == 3:
        params = 4 * (q // N + pers + (q // h if hpz else 0))
    else:
        params = 4 * P
    exp_mem = {
        "PARAMS": params,
        "GRADS": 4 * P if stage <= 1 else 4 * P // N,
        "OPTIM": 4 * K * P if stage == 0 else 4 * K * P // N,
        "MASTER": 0,
    }
    # --- communication per step (elements) on the world and hpz communicators
    exp_world = dict.fromkeys(KINDS, 0)
    exp_hpz = dict.fromkeys(KINDS, 0)
    if N > 1:
        if stage == 0:
            exp_world["all_reduce"] = P
        elif stage == 1:
            exp_world["reduce_scatter"] = P
            exp_world["all_gather"] = P
        elif stage == 2:
            exp_world["reduce_scatter"] = gas * P
            exp_world["all_gather"] = P
        else:
            exp_world["reduce_scatter"] = gas * P
            if hpz:
                exp_world["all_gather"] = pers + gas * q
                exp_hpz["all_gather"] = gas * q
            else:
                exp_world["all_gather"] = pers + 2 * gas * q
    exact_gather = stage != 3 or args.reuse_distance == 0

    # --- what the stage policy states for this run (engine/zero/stage.h)
    pol = z["policy"]
    for c, e in exp_mem.items():
        expect(f"zero.policy.memory_bytes.device.{c}", e, int(pol["memory_bytes"]["device"][c]))
        expect(f"zero.policy.memory_bytes.host.{c}", 0, int(pol["memory_bytes"]["host"][c]))
    expect("zero.policy.elements_exact", exact_gather, bool(pol["elements_exact"]))
    for gname, exp_g in (("world", exp_world), ("hpz", exp_hpz)):
        for k in KINDS:
            expect(f"zero.policy.elements_per_step.{gname}.{k}", exp_g[k],
                   int(pol["elements_per_step"][gname][k]))

    rows = []
    for rk in r["ranks"]:
        i = rk["rank"]
        dev = rk["memory_bytes"]["device"]
        for c, e in exp_mem.items():
            expect(f"rank {i} {c} peak bytes", e, int(dev[c]["peak"]))
        comm = dev["COMM"]
        if comm["peak"] > comm["reserved"]:
            errors.append(f"{label}: rank {i} COMM peak {comm['peak']} > reserved {comm['reserved']}")
        if stage == 0:
            expect(f"rank {i} COMM peak bytes (stage 0 reduces in place)", 0, int(comm["peak"]))
        elif not comm["peak"] > 0:
            errors.append(f"{label}: rank {i} COMM peak is {comm['peak']}, expected > 0 at stage {stage}")
        gpl = int(rk.get("gather_peak_live_params", 0))
        if stage == 3 and q > 0 and N > 1:
            if not max_np_unit <= gpl <= args.max_live + max_unit:
                errors.append(f"{label}: rank {i} gather_peak_live_params {gpl} not in "
                              f"[largest gathered unit {max_np_unit}, max_live {args.max_live} + largest unit {max_unit}]")
            # the full model never exists on a rank: shard + gather window < Psi_p
            # (the hpZ secondary partition is a second copy of shards, left out)
            own = int(dev["PARAMS"]["peak"]) - (4 * q // h if hpz else 0)
            if pers == 0 and not own + 4 * gpl < 4 * P:
                errors.append(f"{label}: rank {i}: the full model existed on the rank: PARAMS peak "
                              f"{own} (less hpZ secondary) + 4 * gather peak {gpl} >= 4 * Psi_p {4 * P}")
            if not int(comm["peak"]) >= 4 * gpl:
                errors.append(f"{label}: rank {i} COMM peak {comm['peak']} < 4 * gather_peak_live_params {gpl} "
                              "(gather blocks live in COMM)")
        elif stage != 3:
            expect(f"rank {i} gather_peak_live_params (no stage-3 window)", 0, gpl)
        # comm: totals over the run, compared as exact integers
        groups = rk.get("comm", {})
        world_b = groups.get("world", {}).get("bytes", rk["comm_bytes"])
        hpz_b = groups.get("hpz", {}).get("bytes")
        if hpz and hpz_b is None:
            errors.append(f"{label}: rank {i} report has no comm.hpz section although hpZ is on")
            hpz_b = dict.fromkeys(KINDS, 0)
        if not hpz and hpz_b is not None:
            errors.append(f"{label}: rank {i} report has a comm.hpz section although hpZ is off")
        hpz_b = hpz_b or dict.fromkeys(KINDS, 0)
        for k in KINDS:
            expect(f"rank {i} comm_bytes.{k} == world + hpz", int(world_b[k]) + int(hpz_b[k]),
                   int(rk["comm_bytes"][k]))
            for gname, exp_g, got_b in (("world", exp_world, world_b), ("hpz", exp_hpz, hpz_b)):
                got = int(got_b[k])
                if k == "all_gather" and not exact_gather:
                    continue  # bounded below, over both communicators
                expect(f"rank {i} {gname} {k} elements per step (bytes {got} / 4 / {steps} steps)",
                       exp_g[k], got // (4 * steps) if got % (4 * steps) == 0 else got / (4 * steps))
        if not exact_gather and N > 1:
            # reuse distance > 0: retained units skip gathers; each unit is still
            # gathered at least once per step and at most twice per micro-step
            got = int(world_b["all_gather"]) + int(hpz_b["all_gather"])
            lo, hi = pers + q, pers + 2 * gas * q
            if not 4 * lo * steps <= got <= 4 * hi * steps:
                errors.append(f"{label}: rank {i} all_gather {got / 4 / steps:g} elements/step not in "
                              f"[{lo}, {hi}] (reuse distance {args.reuse_distance})")
        def ps(b, k):  # elements per step, as an integer where it is one
            v = int(b[k]) / 4 / steps
            return f"{v:.0f}" if v == int(v) else f"{v:.2f}"
        ag = ps(world_b, "all_gather") + (f" + {ps(hpz_b, 'all_gather')}" if hpz else "")
        rows.append(f"| {label} | {i} | {dev['PARAMS']['peak']} | {dev['GRADS']['peak']} | {dev['OPTIM']['peak']} "
                    f"| {dev['MASTER']['peak']} | {comm['peak']} / {comm['reserved']} | {gpl} "
                    f"| {ps(world_b, 'all_reduce')} | {ps(world_b, 'reduce_scatter')} | {ag} |")
    print(f"{label}: Psi_p {P} (params {r['model']['params']}), N {N}, Psi_p/N {part}, persistent {pers}, "
          f"hpZ {h}, GAS {gas}, steps {steps}; expected bytes " +
          ", ".join(f"{c} {v}" for c, v in exp_mem.items()) + "; expected elements/step world " +
          ", ".join(f"{k} {v}" for k, v in exp_world.items() if v) +
          ("; hpz " + ", ".join(f"{k} {v}" for k, v in exp_hpz.items() if v) if hpz else ""))
    print(HEADER)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    for e in errors:
        print("FAIL: " + e)
    if not errors:
        print(f"ok: {label}: memory and communication match the stage-{stage} formulas on {len(rows)} ranks")
    return not errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("same")
    s.add_argument("files", nargs=4)
    s.add_argument("--tol", type=float, default=1e-6)
    s.add_argument("--expect", default="")
    s.add_argument("--tag", default="")
    c = sub.add_parser("check")
    c.add_argument("report")
    c.add_argument("--mlp", required=True, help="W,L,IN,OUT")
    c.add_argument("--persist-threshold", type=int, default=0)
    c.add_argument("--max-live", type=int, default=10**9)
    c.add_argument("--reuse-distance", type=int, default=0)
    c.add_argument("--moments", type=int, default=2, help="optimizer state floats per param (AdamW 2)")
    c.add_argument("--label", default="")
    args = ap.parse_args()
    if args.what == "same":
        ok = cmd_same(args)
    else:
        ok = cmd_check(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
