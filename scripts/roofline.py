#!/usr/bin/env python3
"""roofline: a predicted GPU step time and MFU from --profile reports (roofline v2).

    python3 scripts/roofline.py REPORT [REPORT2] --gpu h100|h200|a100 [--scale-batch N]
                                [--device-counts SIM] [--comm include|exclude] [--top K]
    python3 scripts/roofline.py --calibrate FIXTURE
    python3 scripts/roofline.py --attention N,H,T,HS --gpu G [--causal] [--dropout]
                                [--dtype bf16|fp16] [--device-counts SIM] [--loops FILE]

REPORT is a zerotrain --report written with --profile: per backend op, its
calls, FLOPs (what the CUDA kernels execute, recomputation included) and
bytes read and written per dtype over the profiled steps
(engine/monitor/profile.h). SIM, given, is a --profile report of the same
model on the CUDA simulator with ZT_SIM_PERF=1, at any shape (a smaller one:
one layer, two heads, micro-batch 1): its per-op "device" counters
(tests/cudasim/sim/perf.cc) become densities, per FLOP for the fma-class ops
(the flash attention, whose work grows with T^2) and per counted byte for the
others, and are applied to REPORT's counts. Each op's predicted time per step:

    work  = max(tensor FLOPs / (TENSOR_EFF x tensor peak)   matmul ops (cuBLAS)
                FMA FLOPs / (FMA_EFF x fp32 peak)           fma ops (our kernels, no HMMA)
                DRAM bytes / (DRAM_EFF x HBM)               sectors x 32 (bytes where uncounted)
                L1 wavefronts / (LSU_EFF x SMs x clock))    global + shared wavefronts
    time  = max(work, launches x LAUNCH_US) + host-blocking calls x SYNC_US

The GEMMs' peak is the tensor-core peak of the run's GEMM dtype (bf16, fp16:
bf16's; fp32: TF32's with --tf32, else the fp32 FMA peak). Host copies take
bytes / (DRAM_EFF x PCIe). Ops are summed as if serial (no overlap).
Without SIM, launches are the op's calls, DRAM bytes its compulsory bytes and
the L1 term and host syncs are not known (0). Collectives (included by
default) cost the bytes one rank sends over NVLink in one direction, for ring
algorithms: all_reduce 2 (p-1)/p of the buffer, reduce_scatter and
all_gather (p-1)/p of the full buffer, broadcast the buffer, all_to_all
(p-1)/p; also serial, where the trainer overlaps them with compute.

Predicted MFU = model FLOPs per step / (predicted step time x dense bf16 peak),
model FLOPs per rank per step = (6 (params - (V + T) C) + 12 L C T) x tokens
(micro-batch x gradient accumulation x T), as scripts/gpu-check.sh counts them.

--scale-batch N: predicts micro-batch N from two reports of the same run at
two micro-batches (REPORT and REPORT2): every count is extrapolated linearly
in the micro-batch, which is exact for counts that are affine in it (all of
a transformer's ops: activations scale, weights and optimizer state do not).

--comm-from R: the collectives' bytes per step from report R (a run of the
same model and stage at np > 1; the counters count whole buffers, which do
not depend on the micro-batch or the world size). --world P: predict the
collectives for P ranks (default: the world size the bytes were counted at).
The ops' counts stay the report's: at P ranks a partitioned optimizer step
would be 1/P of it, which the prediction leaves as counted.

--attention N,H,T,HS: one layer's tensor-core attention alone (batch N, H
heads, T tokens, head size 64 or 128), its counts as --profile would make
them; with --device-counts, the densities of a simulated run at that head
size. The tensor-core attention is priced by its kernels' main loops
(--loops, default docs/gpu-audit-loops.json from make gpu-audit).

--calibrate FIXTURE: predicts every run of a calibration fixture (reports of
a commit that ran on a GPU, with the measured step; scripts/roofline-
calibrate.sh makes them, tests/fixtures/roofline/) and prints predicted
against measured; exit 1 when one is off by more than the fixture's
tolerance (docs/roofline.md, "Calibration").

python3's standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_audit  # noqa: E402  (the loops' pipe model, one definition)

# Data-sheet numbers (dense, no sparsity), TFLOP/s and GB/s; SMs and the
# boost clock their FP32 peak implies (SMs x 128 FP32 lanes x 2 x clock on
# Hopper, x 64 on Ampere):
# H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (bf16 989.4, TF32 494.7,
#   FP32 66.9; HBM3 3.35 TB/s; NVLink 4 900 GB/s total = 450 per direction;
#   PCIe Gen5 x16 64 GB/s per direction; 132 SMs, 1.98 GHz).
# H200 SXM: NVIDIA H200 datasheet (the H100's compute; HBM3e 4.8 TB/s).
# A100 SXM4 80GB: NVIDIA A100 Tensor Core GPU datasheet (bf16 312, TF32 156,
#   FP32 19.5; HBM2e 2.039 TB/s; NVLink 3 600 GB/s total = 300 per direction;
#   PCIe Gen4 x16 32 GB/s per direction; 108 SMs, 1.41 GHz).
GPUS = {
    "h100": {"name": "H100 SXM5", "bf16": 989.4, "tf32": 494.7, "fp32": 66.9, "hbm": 3350.0,
             "nvlink": 450.0, "pcie": 64.0, "sms": 132, "ghz": 1.98, "arch": "sm_90"},
    "h200": {"name": "H200 SXM", "bf16": 989.4, "tf32": 494.7, "fp32": 66.9, "hbm": 4800.0,
             "nvlink": 450.0, "pcie": 64.0, "sms": 132, "ghz": 1.98, "arch": "sm_90"},
    "a100": {"name": "A100 SXM4 80GB", "bf16": 312.0, "tf32": 156.0, "fp32": 19.5,
             "hbm": 2039.0, "nvlink": 300.0, "pcie": 32.0, "sms": 108, "ghz": 1.41,
             "arch": "sm_80"},
}
# The efficiencies, each a share of a data-sheet rate, set from what limits
# the pipe and not fitted to a measurement (docs/roofline.md, "Roofline v2"):
# TENSOR_EFF: cuBLAS's GEMMs of GPT-2's shapes; the 8192^3 bf16 GEMM measured
#   790 of 989 TFLOP/s (80%) on the H100 run of 6380f99, smaller ones less.
# FMA_EFF: our kernels' scalar FFMA at 8 warps an SM (their 12.5% occupancy):
#   two warps a scheduler, each a chain of dependent FFMAs of 4 clocks'
#   latency, issue about every other clock.
# DRAM_EFF: streaming kernels reach about 80% of HBM's bandwidth.
# LSU_EFF: L1/shared memory passes one wavefront (128 bytes) a clock per SM.
# LAUNCH_US: the spacing of back-to-back kernel launches on one stream (no
#   CUDA graphs): an op cannot finish faster than its launches issue.
# SYNC_US: a call that blocks the host on the device drains the queue; the
#   GPU idles for the round trip and the next launch.
TENSOR_EFF = 0.7
FMA_EFF = 0.5
DRAM_EFF = 0.8
LSU_EFF = 1.0
LAUNCH_US = 2.5
SYNC_US = 10.0
# The tensor-core attention (our mma.sync kernels; docs/roofline.md):
# MMA_SYNC_EFF: the share of the dense 16-bit peak mma.sync reaches. On
#   sm_80 it is the native path (TENSOR_EFF's 0.7); on sm_90 the full rate
#   needs wgmma, and FlashAttention-2, on mma.sync, plateaus at 0.37 of it
#   forward with its softmax in the loop: 0.5 for the tensor pipe alone, an
#   assumption until a GPU measures it.
# ISSUE_EFF: the share of the sub-partitions' issue cycles the loop's
#   instructions get with 8 to 12 warps an SM (2 to 3 a scheduler).
# HMMA_FLOPS: one mma.sync m16n8k16: 16 x 8 x 16 multiply-adds.
MMA_SYNC_EFF = {"sm_90": 0.5, "sm_80": 0.7}
ISSUE_EFF = 0.7
HMMA_FLOPS = 2 * 16 * 8 * 16
# bytes one rank sends per byte counted (engine/comm/comm.h counts whole buffers)
RING = {"all_reduce": lambda p: 2 * (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
        "all_gather": lambda p: (p - 1) / p, "broadcast": lambda p: 1.0 if p > 1 else 0.0,
        "all_to_all": lambda p: (p - 1) / p, "send": lambda p: 1.0, "recv": lambda p: 0.0}


def fail(msg):
    print(f"roofline: {msg}", file=sys.stderr)
    sys.exit(2)


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {what} {path}: {e}")


def load(path):
    p = read_json(path, "report").get("profile")
    if not p:
        fail(f"{path} has no profile: run zerotrain with --profile --report FILE")
    if p["steps"] <= 0:
        fail(f"{path}: no step was profiled")
    return p


DEVICE_COUNTERS = ("launches", "global_requests", "global_sectors", "global_wavefronts",
                   "dram_sectors", "shared_requests", "shared_wavefronts",
                   "shared_bank_conflicts")


def nbytes(o):
    return sum(o["read"].values()) + sum(o["written"].values())


def per_step(p):
    """{op: {class, calls, flops, read {kind: b}, written {kind: b}}} per step."""
    s = p["steps"]
    ops = {}
    for name, o in p["ops"].items():
        ops[name] = {"class": o["class"], "calls": o["calls"] / s, "flops": o["flops"] / s,
                     "read": {k: v / s for k, v in o["bytes_read"].items()},
                     "written": {k: v / s for k, v in o["bytes_written"].items()},
                     "tensor_flops": o.get("tensor_flops", 0) / s,
                     "tensor_width": o.get("tensor_width", 0),
                     "dropout_share": o.get("dropout_calls", 0) / o["calls"] if o["calls"] else 0}
        if "time_ms" in o:
            ops[name]["ms"] = o["time_ms"] / s
    return ops, dict(p["comm_bytes_per_step"])


def extrapolate(a, b, ma, mb, n):
    """Counts at micro-batch n, linear through (ma, a) and (mb, b)."""
    t = (n - ma) / (mb - ma)

    def lin(x, y):
        return max(0.0, x + t * (y - x))

    def kinds(x, y):
        return {k: lin(x.get(k, 0), y.get(k, 0)) for k in set(x) | set(y)}

    ops = {}
    for name in set(a[0]) | set(b[0]):
        empty = {"class": (a[0].get(name) or b[0][name])["class"], "calls": 0, "flops": 0,
                 "read": {}, "written": {}, "tensor_flops": 0, "tensor_width": 0,
                 "dropout_share": 0}
        x, y = a[0].get(name, empty), b[0].get(name, empty)
        ops[name] = {"class": x["class"] if name in a[0] else y["class"],
                     "calls": lin(x["calls"], y["calls"]), "flops": lin(x["flops"], y["flops"]),
                     "read": kinds(x["read"], y["read"]),
                     "written": kinds(x["written"], y["written"]),
                     "tensor_flops": lin(x.get("tensor_flops", 0), y.get("tensor_flops", 0)),
                     "tensor_width": x.get("tensor_width") or y.get("tensor_width", 0),
                     "dropout_share": x.get("dropout_share", 0) if name in a[0]
                     else y.get("dropout_share", 0)}
    comm = {k: lin(a[1].get(k, 0), b[1].get(k, 0)) for k in set(a[1]) | set(b[1])}
    return ops, comm


def densities(sim, where):
    """Per op of a ZT_SIM_PERF report: its counters per unit of work (FLOPs for
    fma ops, counted bytes for the rest), launches and host-blocking calls per
    call; and the host-blocking calls outside ops per step."""
    hb = sim.get("host_blocking_calls")
    if not isinstance(hb, dict):
        fail(f"{where}: no host_blocking_calls: not a report of the CUDA simulator")
    d = {}
    for name, o in sim["ops"].items():
        if not o["calls"]:
            continue
        e = {"hb_per_call": o.get("host_blocking_calls", 0) / o["calls"]}
        dev = o.get("device")
        if dev:
            unit = o["flops"] if o["class"] == "fma" else \
                sum(o["bytes_read"].values()) + sum(o["bytes_written"].values())
            e["launches_per_call"] = dev["launches"] / o["calls"]
            if unit > 0:
                e.update({k: dev.get(k, 0) / unit for k in DEVICE_COUNTERS if k != "launches"})
        d[name] = e
    if not any("launches_per_call" in e for e in d.values()):
        fail(f"{where}: no op has device counters: run the simulator with ZT_SIM_PERF=1")
    return d, hb["outside_ops"] / sim["steps"]


def load_loops(path):
    """The tensor-core kernels' main loops (scripts/gpu_audit.py loops)."""
    return read_json(path, "kernel loop counts")["kernels"]


def attention_kernel(op, width, dropout, gemm_dtype):
    """The tensor-core kernel an attention op's main loop runs in."""
    kind = "fwd" if op == "attn_flash_forward" else "bwd"
    dt = 2 if gemm_dtype == "bf16" else 1  # zt_dtype: ZT_F16 1, ZT_BF16 2
    return f"flash_{kind}_mma<{int(width)}, (zt_dtype){dt}, {'true' if dropout else 'false'}>"


def attention_terms(name, o, gemm_dtype, g, loops):
    """The tensor-core attention's terms (docs/roofline.md, "The tensor-core
    attention"): its tensor FLOPs at MMA_SYNC_EFF of the 16-bit peak; the
    cycles its main loop's instructions hold an SM sub-partition per
    tensor-core instruction, by pipe (the loop's SASS, gpu_audit.loop_cycles),
    over ISSUE_EFF of the SMs' 4 sub-partitions a clock, the share of calls
    with dropout priced by the kernel with the draws; the rest of its FLOPs
    (the row sums) on FMA."""
    if loops is None:
        fail(f"{name} runs on tensor cores: give --loops (docs/gpu-audit-loops.json, "
             "make gpu-audit)")
    hmma = o["tensor_flops"] / HMMA_FLOPS
    cyc = {}
    for drop, share in ((False, 1 - o["dropout_share"]), (True, o["dropout_share"])):
        if share <= 0:
            continue
        k = attention_kernel(name, o["tensor_width"], drop, gemm_dtype)
        lp = loops.get(k, {}).get(g["arch"])
        if not lp:
            fail(f"no main loop of {k} on {g['arch']} in the loop counts: stale "
                 "(make gpu-audit)")
        for pipe, c in gpu_audit.loop_cycles(lp, g["arch"]).items():
            cyc[pipe] = cyc.get(pipe, 0.0) + share * c / lp["tensor"]
    t = {"tensor": o["tensor_flops"] / (MMA_SYNC_EFF[g["arch"]] * g["bf16"] * 1e12),
         "fma": (o["flops"] - o["tensor_flops"]) / (FMA_EFF * g["fp32"] * 1e12)}
    for pipe, c in cyc.items():
        t[pipe] = hmma * c / (ISSUE_EFF * 4 * g["sms"] * g["ghz"] * 1e9)
    return t


def predict(ops, comm, p, g, world, comm_on, dens=None, loops=None):
    """Each op's predicted time per step: rows [name, calls, flops, dram bytes,
    wavefronts, launches, host blocks, seconds, bound, measured ms]."""
    gd = p["gemm_dtype"]
    gemm_peak = g["bf16"] if gd in ("bf16", "fp16") else g["tf32"] if p["tf32"] else g["fp32"]
    hbm, pcie = DRAM_EFF * g["hbm"] * 1e9, DRAM_EFF * g["pcie"] * 1e9
    lsu = LSU_EFF * g["sms"] * g["ghz"] * 1e9
    dens, outside = dens or ({}, 0.0)
    rows = []
    for name, o in ops.items():
        e = dens.get(name, {})
        nb = nbytes(o)
        hb = e.get("hb_per_call", 0.0) * o["calls"]
        if o["class"] == "transfer":
            nb = sum(o["read"].values())
            rows.append([name, o["calls"], o["flops"], nb, 0.0, 0.0, hb,
                         nb / pcie + hb * SYNC_US * 1e-6, "pcie", o.get("ms")])
            continue
        unit = o["flops"] if o["class"] == "fma" else nb
        dram = max(nb, 32 * e.get("dram_sectors", 0.0) * unit)
        wav = (e.get("global_wavefronts", 0.0) + e.get("shared_wavefronts", 0.0)) * unit
        launches = e.get("launches_per_call", 1.0 if name not in ("sync", "check") else 0.0) \
            * o["calls"]
        terms = {"dram": dram / hbm, "l1": wav / lsu, "launch": launches * LAUNCH_US * 1e-6}
        if o["class"] == "matmul":
            terms["tensor" if gemm_peak != g["fp32"] else "fma"] = \
                o["flops"] / (TENSOR_EFF * gemm_peak * 1e12)
        elif o["class"] == "fma" and o.get("tensor_flops"):
            terms.update(attention_terms(name, o, p["gemm_dtype"], g, loops))
        elif o["class"] == "fma":
            terms["fma"] = o["flops"] / (FMA_EFF * g["fp32"] * 1e12)
        bound = max(terms, key=terms.get)
        if terms[bound] == 0 and hb > 0:
            bound = "sync"
        t = terms[bound if bound != "sync" else "dram"] + hb * SYNC_US * 1e-6
        rows.append([name, o["calls"], o["flops"], dram, wav, launches, hb, t, bound, o.get("ms")])
    if outside > 0:
        rows.append(["(host syncs between ops)", 0, 0, 0, 0, 0, outside,
                     outside * SYNC_US * 1e-6, "sync", None])
    comm_bytes = sum(RING.get(k, lambda q: 1.0)(world) * v for k, v in comm.items()) \
        if world > 1 else 0.0
    t_comm = comm_bytes / (g["nvlink"] * 1e9)
    if comm_on and comm_bytes > 0:
        rows.append(["collectives (sent over NVLink)", 0, 0, comm_bytes, 0, 0, 0, t_comm,
                     "nvlink", None])
    return rows, comm_bytes, t_comm


def model_flops(p, micro):
    m = p["model"]
    L, C, T, V = m["n_layer"], m["n_embd"], m["block_size"], m["vocab_size"]
    tokens = micro * p["gradient_accumulation_steps"] * T
    return (6 * (m["params"] - (V + T) * C) + 12 * L * C * T) * tokens, tokens


def check_same_model(p, q, where, keys=("model",)):
    for k in keys:
        a, b = p[k], q[k]
        if k == "model":
            a, b = a["name"], b["name"]
        if a != b:
            fail(f"{where} differs in {k} ({a} and {b})")


def scaled_counts(p, p2, n, where):
    ops, comm = per_step(p)
    for k in ("gemm_dtype", "tf32", "stage", "world_size", "model",
              "gradient_accumulation_steps"):
        if p[k] != p2[k]:
            fail(f"the two reports differ in {k} ({p[k]} and {p2[k]}): not the same run")
    if p2["micro_batch_size"] == p["micro_batch_size"]:
        fail("the two reports have the same micro-batch: nothing to extrapolate from")
    return extrapolate((ops, comm), per_step(p2), p["micro_batch_size"],
                       p2["micro_batch_size"], n)


def sim_densities(sim, p, where):
    check_same_model(sim, p, f"--device-counts {where}", ("model", "gemm_dtype", "tf32"))
    return densities(sim, where)


def calibrate(path):
    fx = read_json(path, "calibration fixture")
    g, tol = GPUS[fx["gpu"]], fx["tolerance"]
    print(f"# roofline v2 calibration: {fx['what']}\n")
    print(f"{g['name']}; the counts of commit {fx['commit']} ({fx['made_by']}); "
          f"tolerance +-{tol:.0%}. Efficiencies: TENSOR_EFF {TENSOR_EFF}, FMA_EFF {FMA_EFF}, "
          f"DRAM_EFF {DRAM_EFF}, LSU_EFF {LSU_EFF}, LAUNCH_US {LAUNCH_US}, SYNC_US {SYNC_US}.\n")
    print("| run | micro | predicted ms | measured ms | predicted / measured | top ops "
          "(predicted ms, bound) | |")
    print("|---|---:|---:|---:|---:|---|---|")
    bad = 0
    for run in fx["runs"]:
        p, p2, sim = (fx["profiles"][k] for k in (run["cpu"][0], run["cpu"][1], run["sim"]))
        ops, comm = scaled_counts(p, p2, run["micro"], run["name"])
        rows, _, _ = predict(ops, comm, p, g, 1, False, sim_densities(sim, p, run["sim"]))
        step = sum(r[7] for r in rows)
        rows.sort(key=lambda r: -r[7])
        top = ", ".join(f"{r[0]} {r[7] * 1e3:,.0f} ({r[8]})" for r in rows[:3])
        ratio = step * 1e3 / run["measured_ms"]
        ok = abs(ratio - 1) <= tol
        bad += not ok
        print(f"| {run['name']} | {run['micro']} | {step * 1e3:,.1f} | "
              f"{run['measured_ms']:,.1f} | {ratio:.2f} | {top} | {'ok' if ok else 'OFF'} |")
    print(f"\ncalibration_runs {len(fx['runs'])}\ncalibration_off {bad}")
    sys.exit(1 if bad else 0)


def attention_ops(n, h, t, hs, causal, dropout, dt):
    """One call each of attn_flash_forward and _backward as --profile counts
    them on the tensor-core path (engine/monitor/attn_flops.c's model, kept
    in step by tests/cudasim/test_roofline.sh)."""
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    bn, bb = 64 if hs <= 64 else 32, 64  # the forward's key tiles; the backward's blocks
    fwd = sum(64 * bn * ceil(min(i0 + 64, t) if causal else t, bn) for i0 in range(0, t, 64))
    bwd = sum(bb * bb * ceil(t - (j0 // bb * bb if causal else 0), bb) for j0 in range(0, t, bb))
    c, esz, share = h * hs, 2, 1.0 if dropout else 0.0
    ntc, nht = n * t * c, n * h * t

    def op(tf, fl, rd, wr):
        return {"class": "fma", "calls": 1, "flops": fl, "tensor_flops": tf, "tensor_width": hs,
                "dropout_share": share, "read": rd, "written": wr}
    tf_f, tf_b = 4 * hs * n * h * fwd, 10 * hs * n * h * bwd
    return {"attn_flash_forward": op(tf_f, tf_f, {dt: 3 * ntc * esz},
                                     {dt: ntc * esz, "fp32": 4 * nht}),
            "attn_flash_backward": op(tf_b, tf_b + 2 * ntc, {dt: 5 * ntc * esz,
                                                             "fp32": 4 * nht + 4 * ntc},
                                      {dt: 3 * ntc * esz, "fp32": 4 * ntc})}


def attention_main(a, g, loops):
    try:
        n, h, t, hs = (int(x) for x in a.attention.split(","))
    except ValueError:
        fail(f"--attention {a.attention}: expected N,H,T,HS (batch, heads, tokens, head size)")
    if min(n, h, t) < 1 or hs not in (64, 128):
        fail(f"--attention {a.attention}: the tensor-core kernels take head sizes 64 and 128")
    ops = attention_ops(n, h, t, hs, a.causal, a.dropout, a.dtype)
    p = {"gemm_dtype": a.dtype}
    # The simulator's densities (per FLOP) of a run at the same head size.
    dens = densities(load(a.device_counts), a.device_counts) if a.device_counts else None
    rows, _, _ = predict(ops, {}, p, g, 1, False, dens, loops)
    # FlashAttention's convention (its papers' TFLOPs/s): 4 n h t^2 hs forward,
    # halved when causal, and 2.5 times that backward.
    conv = 4 * n * h * t * t * hs / (2 if a.causal else 1)
    print(f"# roofline v2: the tensor-core attention, batch {n}, {h} heads, T {t}, head size "
          f"{hs}, {'causal' if a.causal else 'not causal'}, dropout "
          f"{'on' if a.dropout else 'off'}, {a.dtype}, {g['name']}\n")
    print("| op | tensor GFLOP executed | predicted ms | bound | TFLOP/s (FlashAttention's "
          "count) |")
    print("|---|---:|---:|---|---:|")
    total = 0.0
    for name, calls, fl, nb, wav, _, _, tsec, bound, _ in rows:
        f = conv * (2.5 if name == "attn_flash_backward" else 1)
        total += tsec
        print(f"| {name} | {ops[name]['tensor_flops'] / 1e9:,.1f} | {tsec * 1e3:,.3f} | {bound} | "
              f"{f / tsec / 1e12:,.0f} |")
    print(f"\npredicted_attention_ms {total * 1e3:.6g}")
    print(f"predicted_attention_tflops {3.5 * conv / total / 1e12:.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", nargs="?")
    ap.add_argument("report2", nargs="?", help="the same run at another micro-batch")
    ap.add_argument("--gpu", choices=sorted(GPUS))
    ap.add_argument("--scale-batch", type=int, metavar="N",
                    help="predict micro-batch N (needs REPORT2)")
    ap.add_argument("--device-counts", metavar="SIM",
                    help="a --profile report of the simulator with ZT_SIM_PERF=1")
    ap.add_argument("--comm", choices=["include", "exclude"], default="include")
    ap.add_argument("--comm-from", metavar="R", help="collective bytes from report R (np > 1)")
    ap.add_argument("--world", type=int, metavar="P", help="predict collectives for P ranks")
    ap.add_argument("--top", type=int, default=0, help="rows of the op table (0: all)")
    ap.add_argument("--calibrate", metavar="FIXTURE", help="predict a calibration fixture")
    ap.add_argument("--loops", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "docs", "gpu-audit-loops.json"),
                    help="the tensor-core kernels' main loops (make gpu-audit)")
    ap.add_argument("--attention", metavar="N,H,T,HS",
                    help="predict one layer's tensor-core attention alone")
    ap.add_argument("--causal", action="store_true", help="with --attention")
    ap.add_argument("--dropout", action="store_true", help="with --attention: p > 0")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="with --attention")
    a = ap.parse_args()
    if a.calibrate:
        calibrate(a.calibrate)
    loops = load_loops(a.loops) if os.path.exists(a.loops) else None
    if a.attention:
        if not a.gpu:
            fail("--attention needs --gpu")
        attention_main(a, GPUS[a.gpu], loops)
        return
    if not a.report or not a.gpu:
        fail("give REPORT and --gpu (or --calibrate FIXTURE)")
    g = GPUS[a.gpu]
    p = load(a.report)
    ops, comm = per_step(p)
    micro = p["micro_batch_size"]
    if a.report2 or a.scale_batch:
        if not (a.report2 and a.scale_batch):
            fail("--scale-batch N extrapolates from two reports at two micro-batches: "
                 "give REPORT REPORT2 --scale-batch N")
        if a.scale_batch < 1:
            fail("--scale-batch must be at least 1")
        ops, comm = scaled_counts(p, load(a.report2), a.scale_batch, a.report2)
        micro = a.scale_batch
    dens = sim_densities(load(a.device_counts), p, a.device_counts) if a.device_counts else None

    world = p["world_size"]
    comm_src = f"counted in {a.report} at np {world}"
    if a.comm_from:
        pc = load(a.comm_from)
        for k in ("model", "stage", "gemm_dtype"):
            if pc[k] != p[k]:
                fail(f"--comm-from {a.comm_from} differs in {k} ({pc[k]} and {p[k]})")
        comm, world = dict(pc["comm_bytes_per_step"]), pc["world_size"]
        comm_src = f"counted in {a.comm_from} at np {world}"
    if a.world:
        if a.world < 1:
            fail("--world must be at least 1")
        if world == 1 and a.world > 1:
            fail("no collective was counted at world size 1: give --comm-from a report of "
                 "the same run at np > 1")
        world = a.world
    m = p["model"]
    L, C, T, V = m["n_layer"], m["n_embd"], m["block_size"], m["vocab_size"]
    gd = p["gemm_dtype"]
    gemm_peak = g["bf16"] if gd in ("bf16", "fp16") else g["tf32"] if p["tf32"] else g["fp32"]
    gemm_name = ("bf16/fp16 tensor cores" if gd in ("bf16", "fp16")
                 else "TF32 tensor cores" if p["tf32"] else "fp32 FFMA (no tensor cores)")
    rows, comm_bytes, t_comm = predict(ops, comm, p, g, world, a.comm == "include", dens, loops)
    step = sum(r[7] for r in rows)
    mflops, tokens = model_flops(p, micro)
    mfu = mflops / (step * g["bf16"] * 1e12) if step > 0 else 0.0

    scaled = (f"; counts extrapolated to micro-batch {micro} from micro-batches "
              f"{p['micro_batch_size']} and {load(a.report2)['micro_batch_size']}"
              if a.report2 else "")
    print(f"# roofline v2: {m['name']} L {L}, C {C}, heads {m['n_head']}, T {T}, V {V}, "
          f"{m['params']:,} params; micro-batch {micro} x GAS "
          f"{p['gradient_accumulation_steps']}, ZeRO stage {p['stage']}, world {world}, "
          f"GEMM dtype {gd}{scaled}\n")
    print(f"Assumptions ({g['name']}, data sheet): dense bf16 {g['bf16']} TFLOP/s, TF32 "
          f"{g['tf32']}, fp32 {g['fp32']}; HBM {g['hbm'] / 1000:.2f} TB/s; NVLink "
          f"{g['nvlink']:.0f} GB/s per direction; PCIe {g['pcie']:.0f} GB/s per direction; "
          f"{g['sms']} SMs at {g['ghz']} GHz.")
    print(f"- Each op: the largest of its FLOPs at the peak of its pipe (GEMMs: {gemm_name}, "
          f"{gemm_peak} TFLOP/s x TENSOR_EFF {TENSOR_EFF}; the fma ops, our kernels: "
          f"{g['fp32']} TFLOP/s fp32 x FMA_EFF {FMA_EFF}), its DRAM bytes at HBM x DRAM_EFF "
          f"{DRAM_EFF}, its L1 wavefronts at one a clock per SM x LSU_EFF {LSU_EFF}, and its "
          f"launches x LAUNCH_US {LAUNCH_US}; plus its host-blocking calls x SYNC_US {SYNC_US}. "
          f"Host copies: bytes / (DRAM_EFF x PCIe). Ops run one after another (no overlap).")
    if dens:
        print(f"- Device counts (DRAM sectors, L1 wavefronts, launches, host-blocking calls): "
              f"the simulator's (ZT_SIM_PERF) from {a.device_counts}, per FLOP (fma ops) or "
              "per counted byte (the rest); DRAM bytes are at least the op's counted bytes.")
    else:
        print("- No device counts (--device-counts): DRAM bytes are each op's tensor "
              "arguments once (its compulsory traffic), launches its calls; L1 wavefronts and "
              "host syncs unknown (0): a lower bound for kernels that do not coalesce.")
    if world > 1:
        print(f"- Collectives: {'included' if a.comm == 'include' else 'excluded'}: "
              f"{comm_bytes / 1e9:.3f} GB ({comm_bytes:.0f} bytes) sent per rank per step at "
              f"{world} ranks (ring algorithms; buffers {comm_src}) at {g['nvlink']:.0f} GB/s, "
              "not overlapped.")
    else:
        print("- Collectives: none (world size 1).")
    print(f"- MFU: model FLOPs per step (6 (params - (V + T) C) + 12 L C T) x {tokens:,} "
          f"tokens = {mflops / 1e12:.3f} TFLOP, over predicted time x "
          f"{g['bf16']} TFLOP/s.\n")
    # --profile-time's measured op times, where the counts are this run's own
    timed = bool(p.get("timed")) and not a.report2
    head = "| op | calls | GFLOP | DRAM GB | L1 Gwavefronts | predicted ms | % of step | bound |"
    if timed:
        print("Measured (--profile-time): each op's wall time on the device that ran, with "
              "the device drained before and after it, per step; a GEMM's includes its "
              "operand casts.\n")
        print(head + " measured ms | measured / predicted |")
        print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    else:
        print(head)
        print("|---|---:|---:|---:|---:|---:|---:|---|")

    def measured(name, ms, t):
        if not timed:
            return ""
        if name == "gemm_operand_cast":
            return " (in gemm) | |"
        if ms is None:
            return " | |"
        return f" {ms:,.3f} | {ms / (t * 1e3) if t > 0 else float('inf'):,.2f} |"

    rows.sort(key=lambda r: -r[7])
    shown = rows[:a.top] if a.top > 0 else rows
    for name, calls, fl, nb, wav, _, _, t, bound, ms in shown:
        print(f"| {name} | {calls:,.0f} | {fl / 1e9:,.1f} | {nb / 1e9:,.3f} | {wav / 1e9:,.3f} | "
              f"{t * 1e3:,.3f} | {100 * t / step if step else 0:.1f}% | {bound} |" +
              measured(name, ms, t))
    if len(shown) < len(rows):
        rest = rows[len(shown):]
        t = sum(r[7] for r in rest)
        ms = sum(r[9] or 0.0 for r in rest)
        print(f"| ({len(rest)} more ops) | | | {sum(r[3] for r in rest) / 1e9:,.3f} | "
              f"{sum(r[4] for r in rest) / 1e9:,.3f} | {t * 1e3:,.3f} | "
              f"{100 * t / step if step else 0:.1f}% | |" + measured("", ms, t))
    print(f"\npredicted_step_ms {step * 1e3:.6g}")
    print(f"predicted_mfu {100 * mfu:.1f}%")
    if a.comm == "exclude" and comm_bytes > 0:
        print(f"excluded_comm_ms {t_comm * 1e3:.3f}")
    if timed:
        print(f"measured_ops_ms {sum(r[9] or 0.0 for r in rows):.6g}")


if __name__ == "__main__":
    main()
