#!/usr/bin/env python3
"""roofline: a predicted GPU step time and MFU from a --profile report.

    python3 scripts/roofline.py REPORT [REPORT2] --gpu h100|h200|a100 [--scale-batch N]
                                [--comm include|exclude] [--top K]

REPORT is a zerotrain --report written with --profile: per backend op, its
calls, FLOPs and bytes read and written per dtype over the profiled steps
(engine/monitor/profile.h). Each op's predicted time per step is

    matmul ops (gemm, gemm_batched):  max(FLOPs / (0.7 x GEMM peak), bytes / (0.8 x HBM))
    fma ops (the flash attention):    max(FLOPs / (0.25 x fp32 peak), bytes / (0.8 x HBM))
    memory ops (everything else):     bytes / (0.8 x HBM)
    host transfers (copy_h2d/d2h):    bytes / (0.8 x PCIe, one direction)

with the GEMM peak the dense tensor-core peak of the run's GEMM dtype (bf16
and fp16: the bf16 peak; fp32: TF32's with --tf32, else plain fp32's). Ops are
summed as if serial (no overlap). Collectives (included by default) cost the
bytes one rank sends over NVLink in one direction, for ring algorithms:
all_reduce 2 (p-1)/p of the buffer, reduce_scatter and all_gather (p-1)/p of
the full buffer, broadcast the buffer, all_to_all (p-1)/p; also serial, where
the trainer overlaps them with compute.

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

python3's standard library only.
"""
import argparse
import json
import sys

# Data-sheet numbers (dense, no sparsity), TFLOP/s and GB/s:
# H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (bf16 989.4, TF32 494.7,
#   FP32 66.9; HBM3 3.35 TB/s; NVLink 4 900 GB/s total = 450 per direction;
#   PCIe Gen5 x16 64 GB/s per direction).
# H200 SXM: NVIDIA H200 datasheet (the H100's compute; HBM3e 4.8 TB/s).
# A100 SXM4 80GB: NVIDIA A100 Tensor Core GPU datasheet (bf16 312, TF32 156,
#   FP32 19.5; HBM2e 2.039 TB/s; NVLink 3 600 GB/s total = 300 per direction;
#   PCIe Gen4 x16 32 GB/s per direction).
GPUS = {
    "h100": {"name": "H100 SXM5", "bf16": 989.4, "tf32": 494.7, "fp32": 66.9, "hbm": 3350.0,
             "nvlink": 450.0, "pcie": 64.0},
    "h200": {"name": "H200 SXM", "bf16": 989.4, "tf32": 494.7, "fp32": 66.9, "hbm": 4800.0,
             "nvlink": 450.0, "pcie": 64.0},
    "a100": {"name": "A100 SXM4 80GB", "bf16": 312.0, "tf32": 156.0, "fp32": 19.5,
             "hbm": 2039.0, "nvlink": 300.0, "pcie": 32.0},
}
GEMM_EFF = 0.7
BW_EFF = 0.8
# fma-class ops (the flash attention: scalar fp32 FFMA, no tensor cores, per
# docs/gpu-audit.md): their FLOPs at this share of the fp32 peak. Its SASS
# issues about 3 shared-memory loads per 4 FFMA, so the shared-memory pipe,
# not the FMA pipe, bounds it near a quarter of the FMA peak
# (../shared/reference/gpu-audit-2026-12-01.md: >= 20.8 ms a GPT-2 small
# step at 100% of the peak, about 87 ms as issued).
FMA_EFF = 0.25
# bytes one rank sends per byte counted (engine/comm/comm.h counts whole buffers)
RING = {"all_reduce": lambda p: 2 * (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
        "all_gather": lambda p: (p - 1) / p, "broadcast": lambda p: 1.0 if p > 1 else 0.0,
        "all_to_all": lambda p: (p - 1) / p, "send": lambda p: 1.0, "recv": lambda p: 0.0}


def fail(msg):
    print(f"roofline: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read report {path}: {e}")
    p = r.get("profile")
    if not p:
        fail(f"{path} has no profile: run zerotrain with --profile --report FILE")
    if p["steps"] <= 0:
        fail(f"{path}: no step was profiled")
    return p


def per_step(p):
    """{op: {class, calls, flops, read {kind: b}, written {kind: b}}} per step."""
    s = p["steps"]
    ops = {}
    for name, o in p["ops"].items():
        ops[name] = {"class": o["class"], "calls": o["calls"] / s, "flops": o["flops"] / s,
                     "read": {k: v / s for k, v in o["bytes_read"].items()},
                     "written": {k: v / s for k, v in o["bytes_written"].items()}}
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
                 "read": {}, "written": {}}
        x, y = a[0].get(name, empty), b[0].get(name, empty)
        ops[name] = {"class": x["class"] if name in a[0] else y["class"],
                     "calls": lin(x["calls"], y["calls"]), "flops": lin(x["flops"], y["flops"]),
                     "read": kinds(x["read"], y["read"]),
                     "written": kinds(x["written"], y["written"])}
    comm = {k: lin(a[1].get(k, 0), b[1].get(k, 0)) for k in set(a[1]) | set(b[1])}
    return ops, comm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report")
    ap.add_argument("report2", nargs="?", help="the same run at another micro-batch")
    ap.add_argument("--gpu", required=True, choices=sorted(GPUS))
    ap.add_argument("--scale-batch", type=int, metavar="N",
                    help="predict micro-batch N (needs REPORT2)")
    ap.add_argument("--comm", choices=["include", "exclude"], default="include")
    ap.add_argument("--comm-from", metavar="R", help="collective bytes from report R (np > 1)")
    ap.add_argument("--world", type=int, metavar="P", help="predict collectives for P ranks")
    ap.add_argument("--top", type=int, default=0, help="rows of the op table (0: all)")
    a = ap.parse_args()
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
        p2 = load(a.report2)
        for k in ("gemm_dtype", "tf32", "stage", "world_size", "model",
                  "gradient_accumulation_steps"):
            if p[k] != p2[k]:
                fail(f"the two reports differ in {k} ({p[k]} and {p2[k]}): not the same run")
        if p2["micro_batch_size"] == micro:
            fail("the two reports have the same micro-batch: nothing to extrapolate from")
        ops, comm = extrapolate((ops, comm), per_step(p2), micro, p2["micro_batch_size"],
                                a.scale_batch)
        micro = a.scale_batch

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
                 else "TF32 tensor cores" if p["tf32"] else "fp32 (no tensor cores)")
    hbm = BW_EFF * g["hbm"] * 1e9
    pcie = BW_EFF * g["pcie"] * 1e9

    rows = []
    for name, o in ops.items():
        nbytes = sum(o["read"].values()) + sum(o["written"].values())
        if o["class"] == "transfer":
            nbytes = sum(o["read"].values())
            t, bound = nbytes / pcie, "pcie"
        else:
            t_mem = nbytes / hbm
            t_fl = (o["flops"] / (GEMM_EFF * gemm_peak * 1e12) if o["class"] == "matmul"
                    else o["flops"] / (FMA_EFF * g["fp32"] * 1e12) if o["class"] == "fma"
                    else 0.0)
            t, bound = (t_fl, "compute") if t_fl > t_mem else (t_mem, "memory")
        rows.append([name, o["calls"], o["flops"], nbytes, t, bound, o.get("ms")])
    comm_bytes = sum(RING.get(k, lambda q: 1.0)(world) * v for k, v in comm.items()) \
        if world > 1 else 0.0
    t_comm = comm_bytes / (g["nvlink"] * 1e9)
    if a.comm == "include" and comm_bytes > 0:
        rows.append(["collectives (sent over NVLink)", 0, 0, comm_bytes, t_comm, "nvlink", None])
    step = sum(r[4] for r in rows)
    tokens = micro * p["gradient_accumulation_steps"] * T
    model_flops = (6 * (m["params"] - (V + T) * C) + 12 * L * C * T) * tokens
    mfu = model_flops / (step * g["bf16"] * 1e12) if step > 0 else 0.0

    scaled = (f"; counts extrapolated to micro-batch {micro} from micro-batches "
              f"{p['micro_batch_size']} and {load(a.report2)['micro_batch_size']}"
              if a.report2 else "")
    print(f"# roofline: {m['name']} L {L}, C {C}, heads {m['n_head']}, T {T}, V {V}, "
          f"{m['params']:,} params; micro-batch {micro} x GAS "
          f"{p['gradient_accumulation_steps']}, ZeRO stage {p['stage']}, world {world}, "
          f"GEMM dtype {gd}{scaled}\n")
    print(f"Assumptions ({g['name']}, data sheet): dense bf16 {g['bf16']} TFLOP/s, TF32 "
          f"{g['tf32']}, fp32 {g['fp32']}; HBM {g['hbm'] / 1000:.2f} TB/s; NVLink "
          f"{g['nvlink']:.0f} GB/s per direction; PCIe {g['pcie']:.0f} GB/s per direction.")
    print(f"- GEMMs ({gemm_name}): max(FLOPs / ({GEMM_EFF:.0%} x {gemm_peak} TFLOP/s), "
          f"bytes / ({BW_EFF:.0%} x HBM)).")
    print(f"- The flash attention (fp32 FFMA, no tensor cores): max(FLOPs / ({FMA_EFF:.0%} x "
          f"{g['fp32']} TFLOP/s fp32), bytes / ({BW_EFF:.0%} x HBM)).")
    print(f"- Every other op: its counted bytes / ({BW_EFF:.0%} x HBM); host copies: bytes / "
          f"({BW_EFF:.0%} x PCIe). Ops run one after another (no overlap).")
    print("- Bytes are each op's tensor arguments once (its compulsory traffic); "
          + ("the GEMM operand casts of the CUDA backend's 16-bit path are modelled "
             "(gemm_operand_cast)." if gd != "fp32" else "fp32 GEMMs read fp32 operands."))
    if world > 1:
        print(f"- Collectives: {'included' if a.comm == 'include' else 'excluded'}: "
              f"{comm_bytes / 1e9:.3f} GB ({comm_bytes:.0f} bytes) sent per rank per step at "
              f"{world} ranks (ring algorithms; buffers {comm_src}) at {g['nvlink']:.0f} GB/s, "
              "not overlapped.")
    else:
        print("- Collectives: none (world size 1).")
    print(f"- MFU: model FLOPs per step (6 (params - (V + T) C) + 12 L C T) x {tokens:,} "
          f"tokens = {model_flops / 1e12:.3f} TFLOP, over predicted time x "
          f"{g['bf16']} TFLOP/s.\n")
    # --profile-time's measured op times, where the counts are this run's own
    timed = bool(p.get("timed")) and not a.report2
    if timed:
        print("Measured (--profile-time): each op's wall time on the device that ran, with "
              "the device drained before and after it, per step; a GEMM's includes its "
              "operand casts.\n")
        print("| op | calls | GFLOP | GB | predicted ms | % of step | bound | measured ms "
              "| measured / predicted |")
        print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    else:
        print("| op | calls | GFLOP | GB | predicted ms | % of step | bound |")
        print("|---|---:|---:|---:|---:|---:|---|")

    def measured(name, ms, t):
        if not timed:
            return ""
        if name == "gemm_operand_cast":
            return " (in gemm) | |"
        if ms is None:
            return " | |"
        return f" {ms:,.3f} | {ms / (t * 1e3) if t > 0 else float('inf'):,.2f} |"

    rows.sort(key=lambda r: -r[4])
    shown = rows[:a.top] if a.top > 0 else rows
    for name, calls, fl, nb, t, bound, ms in shown:
        print(f"| {name} | {calls:,.0f} | {fl / 1e9:,.1f} | {nb / 1e9:,.3f} | {t * 1e3:,.3f} | "
              f"{100 * t / step if step else 0:.1f}% | {bound} |" + measured(name, ms, t))
    if len(shown) < len(rows):
        rest = rows[len(shown):]
        t = sum(r[4] for r in rest)
        ms = sum(r[6] or 0.0 for r in rest)
        print(f"| ({len(rest)} more ops) | | | {sum(r[3] for r in rest) / 1e9:,.3f} | "
              f"{t * 1e3:,.3f} | {100 * t / step if step else 0:.1f}% | |" +
              measured("", ms, t))
    print(f"\npredicted_step_ms {step * 1e3:.6g}")
    print(f"predicted_mfu {100 * mfu:.1f}%")
    if a.comm == "exclude" and comm_bytes > 0:
        print(f"excluded_comm_ms {t_comm * 1e3:.3f}")
    if timed:
        print(f"measured_ops_ms {sum(r[6] or 0.0 for r in rows):.6g}")


if __name__ == "__main__":
    main()
