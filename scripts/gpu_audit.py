#!/usr/bin/env python3
"""gpu_audit: what the GPU kernels compile to, from the built objects alone.

    python3 scripts/gpu_audit.py report --out docs/gpu-audit.md [inputs]
    python3 scripts/gpu_audit.py check [inputs]
    python3 scripts/gpu_audit.py loops --out docs/gpu-audit-loops.json [--objects ...]

Inputs (defaults in brackets):
    --objects O.o ...   nvcc objects [build/engine/cuda/*.o]; each needs the
                        X.ptxas the Makefile writes beside it (-Xptxas -v)
    --tools DIR         cuobjdump's folder [build/tools/cuda/bin]
    --log NAME=FILE     a launch log (ZT_SIM_LAUNCH_LOG) of the simulator run
                        NAME; repeatable
    --report FILE       a --profile report: each op's class [none]
    --paths NAME,...    the logs whose kernels the spill rule covers [all]
    --hot NAME,...      the logs whose kernels the occupancy rule covers: the
                        hot path, whose speed the README claims [--paths]
    --sources-hash H    the hash of engine/cuda printed in the report

Per kernel instantiation and architecture (sm_80, sm_90) it takes:
    - registers, stack, static shared and local memory (cuobjdump -res-usage);
    - spill stores and loads (ptxas -v, X.ptxas);
    - instruction counts by pipe and width (cuobjdump -sass): tensor-core
      (HMMA, HGMMA, IMMA, ...), FFMA, FMUL/FADD, DFMA/DADD/DMUL, MUFU, LDS and
      STS and LDG and STG by width, LDL/STL, LDSM, LDGSTS, TMA;
    - the block sizes and dynamic shared memory of its launches, from the
      launch logs, and so its occupancy on an H100 (sm_90) and an A100
      (sm_80) with the limiter.
These are static counts: instructions in the code, not executed ones.
For kernels with tensor-core instructions it also takes the main loop (the
backward branch's span with the most of them) by pipe, one iteration's
instructions, a loop nested in it weighted by the trip count INNER_TRIPS
states (none stated: the loop rule fails): the report tabulates them, and
`loops --out FILE` writes them
as JSON (docs/gpu-audit-loops.json, which scripts/roofline.py prices the
tensor-core attention by).

`check` applies the rules `make test` enforces (tests/cudasim/test_gpu_audit.sh)
and exits 1 naming every violation:
    tensor   every op the profile classes "matmul", or counts tensor_flops
             for (tensor-core work, which scripts/roofline.py charges at a
             tensor-core rate), launches tensor-core work: a cuBLAS call on
             16-bit or TF32 operands, or a kernel of ours whose SASS has
             tensor-core instructions;
    loop     every tensor-core main loop of a kernel the path logs launch with a
             loop inside has its trip count in INNER_TRIPS;
    spill    no kernel launched by the path logs spills or uses local memory
             (stack frame, LDL/STL) on either architecture;
    occupancy  no kernel launched by the hot logs runs below OCC_FLOOR of
             the SM's warps on an H100 (the A100's is reported only).

python3's standard library, c++filt and nm (binutils) and cuobjdump.
"""
import argparse
import bisect
import collections
import concurrent.futures
import glob
import json
import math
import os
import re
import subprocess
import sys

# Below 8 resident warps (2 per scheduler) an SM has too few warps to hide a
# memory or a shared-memory latency without the instruction-level
# parallelism our kernels do not have (one row per thread): 12.5% of 64
# warps. The rule holds on the H100 (sm_90), the GPU the project's speed
# claims are for; the A100's occupancy is reported, not enforced: its
# 164 KiB of shared memory per SM fits 3 blocks of flash_dkv_reg (9.4%).
OCC_FLOOR = 0.125
OCC_RULE_ARCHS = ("sm_90",)

# Per SM (CUDA C Programming Guide, compute capability tables; the occupancy
# calculator's allocation rules): registers in 4 sub-partitions, allocated
# per warp in units of 256; shared memory per SM at the largest carve-out,
# in 128-byte units, plus 1 KiB the system reserves per block.
GPUS = {
    "sm_90": {"name": "H100", "regs": 65536, "warps": 64, "blocks": 32, "smem": 228 * 1024},
    "sm_80": {"name": "A100", "regs": 65536, "warps": 64, "blocks": 32, "smem": 164 * 1024},
}
ARCHS = ("sm_90", "sm_80")

TENSOR_OPS = {"HMMA", "HGMMA", "IMMA", "IGMMA", "BMMA", "BGMMA", "QMMA", "QGMMA", "DMMA",
              "OMMA", "UTCHMMA", "UTCQMMA"}
TMA_OPS = {"UTMALDG", "UTMASTG", "UBLKCP", "UTMAPF"}
COUNTED = ("tensor", "FFMA", "FMUL/FADD", "fp64", "MUFU", "LDS", "STS", "LDG", "STG",
           "LDL/STL", "LDSM", "LDGSTS", "TMA")
WIDTHS = (8, 16, 32, 64, 128)


class AuditError(Exception):
    pass


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise AuditError(f"cannot run {cmd[0]}: {e}") from e
    if r.returncode != 0:
        raise AuditError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[:500]}")
    return r.stdout


def demangle(names):
    """Mangled -> readable, without anonymous namespaces or parameter lists:
    nvcc and g++ give an anonymous namespace different names, so this is
    the name both sides of a kernel share."""
    names = list(names)
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return {m: short_name(d) for m, d in zip(names, out)}


def short_name(d):
    d = d.replace("(anonymous namespace)::", "")
    if d.startswith("void "):
        d = d[5:]
    # Drop the parameter list: the last top-level parenthesised group.
    depth, cut = 0, len(d)
    for i in range(len(d) - 1, -1, -1):
        c = d[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    return d[:cut].strip()


def width_of(mods):
    for m in mods:
        if m in ("U8", "S8"):
            return 8
        if m in ("U16", "S16"):
            return 16
        if m == "64":
            return 64
        if m == "128":
            return 128
    return 32


def classify(opcode):
    """The counter an instruction adds to, or None."""
    parts = opcode.split(".")
    base, mods = parts[0], parts[1:]
    if base in TENSOR_OPS:
        return "tensor"
    if base == "FFMA" or base == "FFMA2":
        return "FFMA"
    if base in ("FMUL", "FADD", "FMUL2", "FADD2"):
        return "FMUL/FADD"
    if base in ("DFMA", "DADD", "DMUL"):
        return "fp64"
    if base == "MUFU":
        return "MUFU"
    if base in ("LDS", "STS", "LDG", "STG"):
        return f"{base}.{width_of(mods)}"
    if base in ("LDL", "STL"):
        return "LDL/STL"
    if base == "LDSM":
        return "LDSM"
    if base == "LDGSTS":
        return "LDGSTS"
    if base in TMA_OPS:
        return "TMA"
    return None


# The pipe an instruction issues to, for the main-loop model (Nsight
# Compute's pipes; lanes per SM sub-partition): alu 16 (integer, logic,
# compares, selects, min/max, conversions to 16 bits), fma 32 on sm_90 and
# 16 on sm_80 (fp32 arithmetic), imad 16 (integer multiplies, on the fma
# pipe's heavy half), xu 4 (MUFU, conversions to and from integers), tensor;
# "other" (memory, branches, barriers, uniform-datapath ops) takes an issue
# slot only.
PIPE_ALU = {"IADD3", "LOP3", "SHF", "ISETP", "FSETP", "FSEL", "SEL", "FMNMX", "PRMT", "LEA",
            "IMNMX", "VIADD", "VIMNMX", "PLOP3", "IABS", "BMSK", "SGXT", "F2FP", "MOV", "P2R",
            "R2P", "HSETP2", "IADD", "VIADDMNMX"}
PIPE_FMA = {"FFMA", "FMUL", "FADD", "HFMA2", "HADD2", "HMUL2", "FFMA2", "FMUL2", "FADD2"}
PIPE_IMAD = {"IMAD", "IMUL"}
PIPE_XU = {"MUFU", "I2F", "F2I", "F2F", "FRND", "POPC", "FLO", "BREV", "I2FP", "F2IP"}
LOOP_PIPES = ("total", "tensor", "alu", "fma", "imad", "xu")


def pipe_of(base):
    if base in TENSOR_OPS:
        return "tensor"
    for name, ops in (("alu", PIPE_ALU), ("fma", PIPE_FMA), ("imad", PIPE_IMAD), ("xu", PIPE_XU)):
        if base in ops:
            return name
    return "other"


SASS_BRA = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")
SASS_ADDR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/")


# Trip counts of the loops nested in a tensor-core main loop, which the
# static count cannot see: (kernel name prefix, trips of its one inner
# loop). flash_bwd_mma at head size 128 keeps its query parts as a loop
# (fm<128>::BPARTS = 4 parts a tile, backend_cuda_flash_mma.cu; unrolled it
# spills with dropout). A main loop with an inner loop not listed here fails
# the audit's loop rule instead of pricing the inner loop once.
INNER_TRIPS = {"flash_bwd_mma<128,": 4}


def pipes(body):
    c = collections.Counter(pipe_of(op.split(".")[0]) for _, op, _ in body)
    c["total"] = len(body)
    return c


def main_loop(insns):
    """The loop (a backward branch's span) with the most tensor-core
    instructions, or None: {pipes of one iteration as the code has them,
    inner: [pipes of each outermost loop inside it]}."""
    addrs = [a for a, _, _ in insns]
    spans = [(addrs.index(t), i) for i, (a, _, t) in enumerate(insns)
             if t is not None and t <= a and t in addrs]
    best = None
    for lo, hi in spans:
        c = pipes(insns[lo:hi + 1])
        if c["tensor"] and (best is None or c["tensor"] > best[0]["tensor"]):
            best = c, lo, hi
    if best is None:
        return None
    c, lo, hi = best
    inner = [(a, b) for a, b in spans if lo <= a and b < hi and (a, b) != (lo, hi)]
    outer = [(a, b) for a, b in inner if not any(x <= a and b <= y and (x, y) != (a, b)
                                                 for x, y in inner)]
    loop = {k: c[k] for k in LOOP_PIPES}
    loop["inner"] = [{k: pipes(insns[a:b + 1])[k] for k in LOOP_PIPES} for a, b in outer]
    return loop


def weigh_loop(loop, name):
    """One iteration of a main loop with its inner loops run their stated
    trips (INNER_TRIPS): (pipes, None), or (None, why) when an inner loop
    has no stated trip count."""
    if not loop["inner"]:
        return {k: loop[k] for k in LOOP_PIPES}, None
    trips = next((t for prefix, t in INNER_TRIPS.items() if name.startswith(prefix)), None)
    if trips is None or len(loop["inner"]) != 1:
        return None, (f"its main loop holds {len(loop['inner'])} inner loop(s) and "
                      f"INNER_TRIPS states {'no' if trips is None else 'one'} trip count")
    return {k: loop[k] + (trips - 1) * loop["inner"][0][k] for k in LOOP_PIPES}, None


SASS_FN = re.compile(r"^\s+Function : (\S+)")
SASS_ARCH = re.compile(r"^\s+code for (sm_\d+)")
SASS_INSN = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(text):
    """{(arch, mangled): Counter}, and {(arch, mangled): main_loop}"""
    counts, insns, arch, fn = {}, {}, None, None
    for line in text.splitlines():
        m = SASS_ARCH.match(line)
        if m:
            arch, fn = m.group(1), None
            continue
        m = SASS_FN.match(line)
        if m:
            fn = m.group(1)
            counts[(arch, fn)] = collections.Counter()
            insns[(arch, fn)] = []
            continue
        if fn is None:
            continue
        m = SASS_INSN.match(line)
        if m:
            k = classify(m.group(1))
            if k:
                counts[(arch, fn)][k] += 1
            b = SASS_BRA.search(line)
            insns[(arch, fn)].append((int(SASS_ADDR.match(line).group(1), 16), m.group(1),
                                      int(b.group(1), 16) if b else None))
    return counts, {key: main_loop(v) for key, v in insns.items()}


RES_ARCH = re.compile(r"^arch = (sm_\d+)")
RES_FN = re.compile(r"^\s*Function (\S+):")
RES_VALS = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def parse_res(text):
    """{(arch, mangled): {regs, stack, shared, local}} from cuobjdump -res-usage."""
    out, arch, fn = {}, None, None
    for line in text.splitlines():
        m = RES_ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = RES_FN.match(line)
        if m:
            fn = m.group(1)
            continue
        m = RES_VALS.search(line)
        if m and fn:
            out[(arch, fn)] = dict(zip(("regs", "stack", "shared", "local"), map(int, m.groups())))
            fn = None
    return out


PTX_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
PTX_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(text):
    """{(arch, mangled): (spill stores, spill loads)}: the properties line
    after each entry function's "Compiling" line."""
    out, cur = {}, None
    for line in text.splitlines():
        m = PTX_ENTRY.search(line)
        if m:
            cur = (m.group(2), m.group(1))
            continue
        m = PTX_PROPS.search(line)
        if m and cur:
            out[cur] = (int(m.group(2)), int(m.group(3)))
            cur = None
    return out


def load_objects(objects, tools):
    cuobjdump = os.path.join(tools, "cuobjdump")
    if not os.access(cuobjdump, os.X_OK):
        raise AuditError(f"no cuobjdump at {cuobjdump}: run `bash scripts/get-cuda-tools.sh` "
                         "(make test and make gpu-audit do)")
    for obj in objects:
        if not os.path.exists(obj[:-2] + ".ptxas"):
            raise AuditError(f"{obj[:-2]}.ptxas is missing: it comes from the Makefile's nvcc "
                             f"rule (-Xptxas -v); rebuild {obj} (rm it, then make)")

    def dump(obj):
        return (parse_res(run([cuobjdump, "-res-usage", obj])),
                parse_sass(run([cuobjdump, "-sass", obj])))

    with concurrent.futures.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        dumps = list(pool.map(dump, objects))
    kernels = {}
    for obj, (res, sass) in zip(objects, dumps):
        ptxas = obj[:-2] + ".ptxas"
        spills = parse_ptxas(open(ptxas, encoding="utf-8", errors="replace").read())
        src = os.path.basename(obj)[:-2]
        for key, r in res.items():
            if key[0] not in ARCHS:
                continue
            if key not in sass[0]:
                raise AuditError(f"{obj}: {key[1]} for {key[0]} has resources but no SASS")
            if key not in spills:
                raise AuditError(f"{ptxas} has no ptxas line for {key[1]} on {key[0]}: "
                                 f"stale, rebuild {obj}")
            st, ld = spills[key]
            kernels[key] = dict(r, spill_st=st, spill_ld=ld, counts=sass[0][key],
                                loop=sass[1][key], obj=src)
    if not kernels:
        raise AuditError("no sm_80/sm_90 kernels in " + " ".join(objects))
    names = demangle({k[1] for k in kernels})
    for (arch, m), k in kernels.items():
        k["name"] = names[m]
        if k["loop"]:
            k["loop"], k["loop_why"] = weigh_loop(k["loop"], k["name"])
    return kernels


def compile_units(binary):
    """[(start, end, source)] of binary's code, from its DWARF address ranges:
    which translation unit a kernel's address belongs to, since nvcc and g++
    both give every file's anonymous namespace one name, and two files may
    hold kernels of one name (bias_grad_join_kernel)."""
    dies = []
    for line in run(["readelf", "--debug-dump=info", "--dwarf-depth=1", binary]).splitlines():
        m = re.match(r"\s*<0><([0-9a-f]+)>: .*DW_TAG_compile_unit", line)
        if m:
            dies.append([int(m.group(1), 16), None])
            continue
        m = re.match(r"\s*<[0-9a-f]+>\s+DW_AT_name\s+:.*?:?\s*(\S+)$", line)
        if m and dies and dies[-1][1] is None:
            dies[-1][1] = m.group(1)
    offsets = [d[0] for d in dies]
    ranges, cu = [], None
    for line in run(["readelf", "--debug-dump=aranges", binary]).splitlines():
        m = re.match(r"\s*Offset into .debug_info:\s+(0x[0-9a-f]+|\d+)", line)
        if m:
            i = bisect.bisect_right(offsets, int(m.group(1), 0))
            cu = dies[i][1] if i < len(dies) else None
            continue
        m = re.match(r"\s+([0-9a-f]{8,})\s+([0-9a-f]{8,})\s*$", line)
        if m and cu:
            start, length = int(m.group(1), 16), int(m.group(2), 16)
            if length:
                ranges.append((start, start + length, cu))
    ranges.sort()
    return ranges


def source_of(ranges, addr):
    i = bisect.bisect_right(ranges, (addr, float("inf"), "")) - 1
    if i >= 0 and ranges[i][0] <= addr < ranges[i][1]:
        return ranges[i][2]
    return None


def load_logs(logs):
    """{run: [launch]}, each launch {op, entry, block, dyn, text, site, exe}; a
    kernel's gets its name and object ("backend_cuda_flash") from the symbol
    and compile unit at that offset of the simulator binary that wrote it, a
    "sym:MANGLED" entry (the audit's own tests) its name only."""
    out = {}
    for spec in logs:
        if "=" not in spec:
            raise AuditError(f"--log {spec}: expected NAME=FILE")
        name, path = spec.split("=", 1)
        launches = []
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except OSError as e:
            raise AuditError(f"launch log {path}: {e.strerror}") from e
        for n, line in enumerate(lines, 1):
            f = line.split("\t")
            if len(f) != 9 or not all(x.isdigit() for x in f[2:6]):
                raise AuditError(f"{path}:{n}: not a launch log line (9 tab-separated fields)")
            op, entry, bx, by, bz, dyn, text, site, exe = f
            launches.append({"op": op, "entry": entry, "block": int(bx) * int(by) * int(bz),
                             "dyn": int(dyn), "text": text, "site": site, "exe": exe})
        out[name] = launches
    binaries = {}
    for launches in out.values():
        for l in launches:
            if l["entry"].startswith("0x"):
                exe = l["exe"]
                if exe not in binaries:
                    if not os.path.exists(exe):
                        raise AuditError(f"{exe} is missing: the launch logs name its kernels "
                                         "by their offsets in it")
                    syms = {}
                    for line in run(["nm", "--defined-only", exe]).splitlines():
                        f = line.split()
                        if len(f) == 3 and f[1] in "tTwW":
                            syms.setdefault(int(f[0], 16), f[2])
                    binaries[exe] = (syms, demangle(syms.values()), compile_units(exe))
                syms, names, ranges = binaries[exe]
                addr = int(l["entry"], 16)
                m = syms.get(addr)
                if m is None:
                    raise AuditError(f"no symbol of {exe} at {l['entry']} ({l['text']}): "
                                     "was it rebuilt since the log was written?")
                l["name"] = names[m]
                src = source_of(ranges, addr)
                if src is None:
                    raise AuditError(f"{exe}: no compile unit holds {l['entry']} "
                                     f"({l['name']}): built without -g?")
                l["obj"] = os.path.basename(src).rsplit(".", 1)[0]
            elif l["entry"].startswith("sym:"):
                l["name"] = demangle([l["entry"][4:]])[l["entry"][4:]]
    return out


def occupancy(k, arch, block, dyn):
    """(fraction of the SM's warps, limiter) for blocks of `block` threads."""
    g = GPUS[arch]
    warps = math.ceil(block / 32)
    regs_warp = math.ceil(max(k["regs"], 1) * 32 / 256) * 256
    by = {"warps": g["warps"] // warps, "blocks": g["blocks"]}
    # Registers: each of the 4 sub-partitions holds a quarter of the file.
    by["registers"] = (4 * ((g["regs"] // 4) // regs_warp)) // warps
    smem = k["shared"] + dyn
    if smem:
        by["shared memory"] = g["smem"] // (math.ceil(smem / 128) * 128 + 1024)
    lim = min(by, key=lambda x: by[x])
    return by[lim] * warps / g["warps"], lim


def attach_launches(kernels, logs):
    """Adds each kernel's launches (with their run) as k['launches'];
    {arch: {(obj, name): kernel}}."""
    by = collections.defaultdict(dict)
    names = collections.defaultdict(list)
    for (arch, _), k in kernels.items():
        by[arch][k["obj"], k["name"]] = k
        names[arch, k["name"]].append(k)
        k["launches"] = []
    unknown = []
    for run_name, launches in logs.items():
        for l in launches:
            if "name" not in l:
                continue
            found = False
            for arch in ARCHS:
                if "obj" in l:
                    k = by[arch].get((l["obj"], l["name"]))
                else:
                    same = names.get((arch, l["name"]), [])
                    if len(same) > 1:
                        raise AuditError(f"{l['name']} is in {len(same)} objects: its launch "
                                         "log entry must come with its object")
                    k = same[0] if same else None
                if k is not None:
                    k["launches"].append(dict(l, run=run_name))
                    l.setdefault("kernels", {})[arch] = k
                    found = True
            if not found:
                unknown.append(f"{l['name']} (launched at {l['site']})")
    if unknown:
        raise AuditError("launched kernels with no SASS in the objects: " + "; ".join(unknown[:5]))
    return by


def run_sets(logs, paths, hot):
    """The runs the spill rule covers (--paths, default all) and those the
    occupancy rule covers (--hot, default the former)."""
    path_names = [n for n in logs if not paths or n in paths]
    return path_names, [n for n in logs if n in (hot or path_names)]


def check(kernels, logs, classes, paths, hot):
    bad = []
    # tensor: per matmul-class op, what its launches were.
    ops = collections.defaultdict(list)
    for launches in logs.values():
        for l in launches:
            if l["op"] != "-":
                ops[l["op"]].append(l)
    for op, cls in sorted(classes.items()):
        if cls not in ("matmul", "tensor") or op not in ops:
            continue
        tensor = [l for l in ops[op] if l["entry"] == "cublas-tensor" or
                  (l.get("kernels") and
                   all(k["counts"]["tensor"] > 0 for k in l["kernels"].values()))]
        if not tensor:
            what = sorted({l.get("name", l["entry"]) for l in ops[op]})
            how = "class matmul" if cls == "matmul" else "tensor_flops"
            bad.append(f"tensor: op {op} is profiled as tensor-core work ({how}), but "
                       f"none of what it launches has a tensor-core instruction or is a "
                       f"16-bit/TF32 cuBLAS call: {', '.join(what)}")
    path_names, hot_names = run_sets(logs, paths, hot)
    for (arch, _), k in sorted(kernels.items()):
        runs = sorted({l["run"] for l in k["launches"] if l["run"] in path_names + hot_names})
        where = f"{k['name']} on {arch} ({k['obj']}; launched in {', '.join(runs)})"
        if k.get("loop_why") and any(l["run"] in path_names for l in k["launches"]):
            bad.append(f"loop: {where}: {k['loop_why']}: the roofline would price the "
                       f"inner loop once")
        local = k["stack"] + k["local"] + k["counts"]["LDL/STL"]
        if (k["spill_st"] or k["spill_ld"] or local) and \
                any(l["run"] in path_names for l in k["launches"]):
            bad.append(f"spill: {where}: {k['spill_st']} bytes of spill stores, {k['spill_ld']} "
                       f"of spill loads, a {k['stack']}-byte stack frame, "
                       f"{k['counts']['LDL/STL']} LDL/STL")
        if arch not in OCC_RULE_ARCHS:
            continue
        for block, dyn in sorted({(l["block"], l["dyn"]) for l in k["launches"]
                                  if l["run"] in hot_names}):
            occ, lim = occupancy(k, arch, block, dyn)
            if occ < OCC_FLOOR:
                bad.append(f"occupancy: {where}: {occ:.1%} of the {GPUS[arch]['name']}'s warps "
                           f"with blocks of {block} threads ({k['regs']} registers, "
                           f"{k['shared'] + dyn} bytes of shared memory; limited by {lim}), "
                           f"below the floor of {OCC_FLOOR:.1%}")
    return bad


def fmt_counts(c):
    def w(kind):
        parts = [f"{c[f'{kind}.{b}']}x{b}" for b in WIDTHS if c[f"{kind}.{b}"]]
        return " ".join(parts) if parts else "0"
    return [str(c["tensor"]), str(c["FFMA"]), str(c["FMUL/FADD"]), str(c["fp64"]), str(c["MUFU"]),
            w("LDS"), w("STS"), w("LDG"), w("STG"), str(c["LDL/STL"]), str(c["LDSM"]),
            str(c["LDGSTS"]), str(c["TMA"])]


def occ_cell(k, arch):
    cells = []
    for block, dyn in sorted({(l["block"], l["dyn"]) for l in k["launches"]}):
        occ, lim = occupancy(k, arch, block, dyn)
        cells.append(f"{block}{'+' + str(dyn) + 'B' if dyn else ''}: {occ:.1%} ({lim})")
    return "; ".join(cells) if cells else "not launched"


def report(kernels, logs, classes, paths, hot, out, sources_hash):
    bad = check(kernels, logs, classes, paths, hot)
    path_names, hot_names = run_sets(logs, paths, hot)
    lines = ["# SASS audit of the CUDA kernels", "",
             "Generated by `make gpu-audit` (scripts/gpu_audit.py); do not edit by hand.",
             f"Sources: engine/cuda hashes to `{sources_hash}`. "
             "tests/cudasim/test_gpu_audit.sh fails when this file is older than them.", "",
             "Static counts from the Makefile's own objects (`cuobjdump -res-usage`, "
             "`cuobjdump -sass`, ptxas's `-Xptxas -v` lines): instructions in the code, "
             "not executed ones. Block sizes come from the CUDA simulator's launch logs "
             "(ZT_SIM_LAUNCH_LOG) of the runs below; occupancy is the resident warps' share "
             f"of 64 per SM, on an H100 for sm_90 and an A100 for sm_80, with its limiter. "
             "Rules (`check`, run by `make test`): tensor-core instructions under every "
             "op profiled as `matmul`; no spill or local memory in the kernels the path "
             f"runs launch; at least {OCC_FLOOR:.1%} occupancy on the H100 for those the hot "
             "runs launch.", ""]
    lines += ["## Runs", ""]
    for n, launches in logs.items():
        k = sum(1 for l in launches if "name" in l)
        lines.append(f"- `{n}`{' (path)' if n in path_names else ''}: {k} kernel launch "
                     f"configurations, {sum(1 for l in launches if l['entry'].startswith('cublas'))} "
                     "cuBLAS call kinds")
    lines += ["", "## Rules", ""]
    lines += [f"- FAIL {b}" for b in bad] or ["- all pass"]
    n90 = sum(1 for a, _ in kernels if a == "sm_90")
    t90 = sum(1 for (a, _), k in kernels.items() if a == "sm_90" and k["counts"]["tensor"])
    lines += ["", "## Totals", "",
              f"{n90} sm_90 kernels, {t90} with tensor-core instructions.", ""]
    low = []
    for (arch, _), k in sorted(kernels.items(), key=lambda x: (x[0][0], x[1]["name"])):
        ruled = hot_names if arch in OCC_RULE_ARCHS else []
        for block, dyn in sorted({(l["block"], l["dyn"]) for l in k["launches"]
                                  if l["run"] in path_names and l["run"] not in ruled}):
            occ, lim = occupancy(k, arch, block, dyn)
            if occ < OCC_FLOOR:
                runs = sorted({l["run"] for l in k["launches"] if l["run"] in path_names})
                low.append(f"- `{k['name']}` on {arch} ({GPUS[arch]['name']}), blocks of {block}: "
                           f"{occ:.1%}, limited by {lim} (runs: {', '.join(runs)})")
    lines += ["## Path kernels below the occupancy floor where the rule does not apply", "",
              f"The floor ({OCC_FLOOR:.1%}) is enforced on the hot path's kernels on the H100; "
              "these are reported only:", ""] + (low or ["- none"]) + [""]
    hdr = ("| kernel | obj | regs | spill st/ld | stack | smem | occupancy (block: share, limiter) "
           "| tensor | FFMA | FMUL/FADD | fp64 | MUFU | LDS | STS | LDG | STG | LDL/STL | LDSM "
           "| LDGSTS | TMA |")
    sep = "|" + "---|" * 20
    for arch in ARCHS:
        path_kernels = sorted((k for (a, _), k in kernels.items() if a == arch and
                               any(l["run"] in path_names for l in k["launches"])),
                              key=lambda k: k["name"])
        lines += [f"## Path kernels, {arch} ({GPUS[arch]['name']})", "",
                  "Launched by the path runs, with the ops that launched them:", "", hdr, sep]
        for k in path_kernels:
            ops = sorted({l["op"] for l in k["launches"] if l["op"] != "-"})
            lines.append(row(k, arch, " ".join(ops)))
        lines.append("")
    lines += loop_section(kernels)
    for arch in ARCHS:
        lines += [f"## Every kernel, {arch} ({GPUS[arch]['name']})", "", hdr, sep]
        for (a, _), k in sorted(kernels.items(), key=lambda x: (x[1]["obj"], x[1]["name"])):
            if a == arch:
                lines.append(row(k, arch, None))
        lines.append("")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return bad


# Cycles a warp-instruction of each pipe holds an SM sub-partition (32 lanes
# over the pipe's lanes; docs/roofline.md): the fma pipe has 32 fp32 lanes
# on sm_90 (its integer multiplies only the 16 of the heavy half), 16 on
# sm_80.
def loop_cycles(loop, arch):
    fma = loop["fma"]
    im = loop["imad"]
    return {"issue": loop["total"], "alu": 2 * loop["alu"],
            "fma": max(2 * im, im + fma) if arch == "sm_90" else 2 * (im + fma),
            "xu": 8 * loop["xu"]}


def loop_section(kernels):
    lines = ["## Tensor-core kernels: main loops", "",
             "One iteration of each kernel's main loop (the loop with the most tensor-core "
             "instructions; a loop nested in it counted its INNER_TRIPS times), its "
             "instructions by pipe, and the cycles per tensor-core "
             "instruction each pipe needs of an SM sub-partition (alu 2 per instruction, xu 8, "
             "fma 1 on sm_90 and 2 on sm_80, imad 2; issue 1). scripts/roofline.py prices "
             "the tensor-core attention by these (docs/gpu-audit-loops.json).", "",
             "| kernel | arch | total | tensor | alu | fma | imad | xu | cycles / tensor op "
             "(issue, alu, fma, xu) | bound |", "|" + "---|" * 10]
    for (arch, _), k in sorted(kernels.items(), key=lambda x: (x[1]["name"], x[0][0])):
        lp = k.get("loop")
        if not lp:
            continue
        cyc = loop_cycles(lp, arch)
        per = ", ".join(f"{cyc[p] / lp['tensor']:.1f}" for p in ("issue", "alu", "fma", "xu"))
        lines.append(f"| `{k['name']}` | {arch} | " +
                     " | ".join(str(lp[p]) for p in LOOP_PIPES) +
                     f" | {per} | {max(cyc, key=cyc.get)} |")
    return lines + [""]


def write_loops(kernels, out, sources_hash):
    """{kernel name: {arch: pipes}} for the kernels with a tensor-core loop."""
    loops = collections.defaultdict(dict)
    for (arch, _), k in sorted(kernels.items()):
        if k.get("loop"):
            loops[k["name"]][arch] = k["loop"]
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"what": "main loops of the tensor-core kernels (scripts/gpu_audit.py)",
                   "sources_hash": sources_hash, "kernels": loops}, f, indent=1, sort_keys=True)
        f.write("\n")
    return len(loops)


def row(k, arch, ops):
    name = k["name"].replace("|", "\\|")
    if ops:
        name += f" ({ops})"
    return "| " + " | ".join([f"`{name}`", k["obj"], str(k["regs"]),
                               f"{k['spill_st']}/{k['spill_ld']}", str(k["stack"]),
                               str(k["shared"]), occ_cell(k, arch)] + fmt_counts(k["counts"])) + " |"


def load_classes(path):
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        r = json.load(f)
    ops = (r.get("profile") or {}).get("ops")
    if not isinstance(ops, dict):
        raise AuditError(f"{path} has no profile.ops: write it with --profile")
    # An op whose FLOPs the profile puts on tensor cores (tensor_flops) must
    # launch tensor-core work as a matmul op must.
    return {n: "tensor" if o.get("tensor_flops") else o["class"] for n, o in ops.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("report", "check", "loops"))
    ap.add_argument("--objects", nargs="+", default=None)
    ap.add_argument("--tools", default="build/tools/cuda/bin")
    ap.add_argument("--log", action="append", default=[])
    ap.add_argument("--report", action="append", default=[])
    ap.add_argument("--paths", default="")
    ap.add_argument("--hot", default="")
    ap.add_argument("--out", default="docs/gpu-audit.md")
    ap.add_argument("--sources-hash", default="unknown")
    a = ap.parse_args()
    objects = a.objects or [f"build/engine/cuda/{os.path.basename(c)[:-3]}.o"
                            for c in sorted(glob.glob("engine/cuda/*.cu"))]
    try:
        kernels = load_objects(objects, a.tools)
        if a.mode == "loops":
            n = write_loops(kernels, a.out, a.sources_hash)
            print(f"gpu_audit: wrote {a.out}: {n} kernels with tensor-core loops")
            return 0
        logs = load_logs(a.log)
        attach_launches(kernels, logs)
        classes = {}
        for r in a.report:
            classes.update(load_classes(r))
        paths = [p for p in a.paths.split(",") if p]
        hot = [p for p in a.hot.split(",") if p]
        if a.mode == "report":
            bad = report(kernels, logs, classes, paths, hot, a.out, a.sources_hash)
            print(f"gpu_audit: wrote {a.out}: {len(kernels)} kernel-architecture pairs, "
                  f"{len(bad)} rule failures")
        else:
            bad = check(kernels, logs, classes, paths, hot)
    except AuditError as e:
        print(f"gpu_audit: error: {e}", file=sys.stderr)
        return 2
    for b in bad:
        print(f"gpu_audit: FAIL {b}")
    if a.mode == "check" and not bad:
        print(f"gpu_audit: rules pass ({len(kernels)} kernel-architecture pairs)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
