#!/usr/bin/env python3
"""Checks on zerotrain outputs for the shell tests.

  ztcheck.py dumps REF OTHER --tol T     relative L2 distance of two --dump-params files
  ztcheck.py losses REF OTHER --tol T    per-step loss histories of two --report files
  ztcheck.py runs PAIRS --tol T          both of the above for every line "REF OTHER" of the
                                         file PAIRS (REF.bin and REF.json against OTHER's):
                                         one interpreter for a test's many comparisons
  ztcheck.py loss-falls REPORT           mean of the last 5 losses < mean of the first 5
  ztcheck.py estimate EST RUN --stage S --tol T [--offload-optimizer cpu] [--offload-param cpu]
                                         --estimate-memory JSON vs a training report at
                                         stage S (and that offload variant; default none):
                                         model-state device bytes
                                         (PARAMS+GRADS+MASTER+OPTIM) and each of those
                                         classes within T of every rank's peak; every
                                         class equal to the rank's reservation
  ztcheck.py ckpt DIR [--tag T] [--dump FILE]
                                         reads a checkpoint with this file's own reader
                                         of the documented format (docs/checkpoints.md):
                                         every shard's size, zlib CRC-32 and header
                                         against the manifest, zero padding; the fp32
                                         weights reassembled from the shards equal FILE
                                         (a --dump-params of the same step) bit for bit;
                                         and the manifest's "manifest_crc32"
  ztcheck.py reseal MANIFEST [--drop]    rewrites MANIFEST's "manifest_crc32" for its
                                         content as it is now (tests edit manifests and
                                         reseal them to reach the checks behind the
                                         checksum); --drop removes it and sets
                                         format_version 1 (a manifest of the version
                                         before checksums)
"""
import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

MODEL_STATES = ["PARAMS", "GRADS", "MASTER", "OPTIM"]
CLASSES = MODEL_STATES + ["ACTS", "COMM", "WORK", "SWAP"]


def dump_distance(ref_path, other_path):
    """(relative L2 of two --dump-params files, problem or None)"""
    ref, other = (np.fromfile(f, dtype="<f4").astype(np.float64) for f in (ref_path, other_path))
    if ref.shape != other.shape:
        return float("nan"), f"{other_path} has {other.size} params, {ref_path} {ref.size}"
    if not np.all(np.isfinite(other)):
        return float("nan"), f"{other_path} has non-finite parameters"
    return rel_l2(other, ref), None


def loss_distance(ref_path, other_path):
    """(max relative difference of two reports' loss histories, problem or None);
    a diverged step (null) counts as NaN"""
    ref, other = (np.array([np.nan if v is None else v for v in json.load(open(f))["loss_history"]],
                           dtype=np.float64) for f in (ref_path, other_path))
    if ref.shape != other.shape:
        return float("nan"), f"loss histories differ in length: {ref.size} vs {other.size}"
    return float(np.max(np.abs(other - ref) / np.maximum(np.abs(ref), 1e-30))), None


def check_runs(pairs_path, tol):
    """dump_distance and loss_distance of every "REF OTHER" line of pairs_path;
    prints each failure and a count, True when none failed"""
    pairs = [line.split() for line in open(pairs_path) if line.strip()]
    bad = 0
    for ref, other in pairs:
        problems = []
        for what, (d, problem) in (("params", dump_distance(ref + ".bin", other + ".bin")),
                                   ("losses", loss_distance(ref + ".json", other + ".json"))):
            if problem or not d <= tol:
                problems.append(f"{what} {problem or f'{d:.3e} (tol {tol:g})'}")
        if problems:
            bad += 1
            print(f"FAIL: {other} vs {ref}: " + "; ".join(problems))
    print(f"{'ok' if bad == 0 else 'FAIL'}: {len(pairs) - bad} of {len(pairs)} pairs within {tol:g}"
          " in params and losses")
    return bad == 0 and len(pairs) > 0


def close(a, b, tol):
    return abs(a - b) <= tol * max(abs(a), abs(b))


def check_estimate(est_path, run_path, stage, tol, opt="none", param="none"):
    est, run = json.load(open(est_path)), json.load(open(run_path))
    ok = True
    if run["stage"] != stage:
        print(f"FAIL: {run_path} ran stage {run['stage']}, expected {stage}")
        return False
    if est["world_size"] != run["world_size"]:
        print(f"FAIL: estimate for {est['world_size']} ranks, run at {run['world_size']}")
        return False
    vs = [v for v in est["variants"]
          if v["stage"] == stage and v["offload_optimizer"] == opt and v["offload_param"] == param]
    if len(vs) != 1:
        print(f"FAIL: {est_path} has {len(vs)} stage-{stage} variants with offload {opt}/{param}")
        return False
    v = vs[0]
    want = v["model_state_device_bytes"]
    if want != sum(v["device_bytes"][c] for c in MODEL_STATES):
        print(f"FAIL: model_state_device_bytes {want} is not the sum of {MODEL_STATES}")
        ok = False
    for r in run["ranks"]:
        mem = r["memory_bytes"]
        got = sum(mem["device"][c]["peak"] for c in MODEL_STATES)
        good = close(want, got, tol)
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: stage {stage} rank {r['rank']}: model states on the device "
              f"estimated {want} B, measured peak {got} B (tol {tol:g})")
        for c in MODEL_STATES:
            e, m = v["device_bytes"][c], mem["device"][c]["peak"]
            if not close(e, m, tol):
                print(f"FAIL: stage {stage} rank {r['rank']}: {c} estimated {e} B, measured peak {m} B")
                ok = False
        for loc, key in (("device", "device_bytes"), ("host", "host_bytes")):
            for c in CLASSES:
                e, got_c = v[key][c], mem[loc][c]
                if "reserved" not in got_c:
                    continue
                if e != got_c["reserved"]:
                    print(f"FAIL: stage {stage} rank {r['rank']}: {loc} {c} estimated {e} B, "
                          f"reserved {got_c['reserved']} B")
                    ok = False
                if got_c["peak"] > e:
                    print(f"FAIL: stage {stage} rank {r['rank']}: {loc} {c} peak {got_c['peak']} B "
                          f"exceeds the estimate {e} B")
                    ok = False
    if ok:
        print(f"ok: stage {stage}: every class of every rank agrees with {est_path}")
    return ok


def manifest_canonical(v):
    """the canonical form of docs/checkpoints.md: keys sorted, no white space,
    reals as %.17g (".0" added when that has neither '.' nor 'e'), strings
    escaping only '"', backslash and characters below U+0020"""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        s = "%.17g" % v
        return s if ("." in s or "e" in s) else s + ".0"
    if isinstance(v, str):
        return '"' + "".join('\\"' if ch == '"' else "\\\\" if ch == "\\" else
                             "\\u%04x" % ord(ch) if ord(ch) < 0x20 else ch for ch in v) + '"'
    if isinstance(v, list):
        return "[" + ",".join(manifest_canonical(x) for x in v) + "]"
    return "{" + ",".join(manifest_canonical(k) + ":" + manifest_canonical(v[k])
                          for k in sorted(v)) + "}"


def manifest_crc(man):
    """8 hex digits: zlib's CRC-32 of the canonical UTF-8 form of every member
    but "manifest_crc32" """
    rest = {k: v for k, v in man.items() if k != "manifest_crc32"}
    return "%08x" % zlib.crc32(manifest_canonical(rest).encode("utf-8"))


def reseal(path, drop=False):
    with open(path) as f:
        man = json.load(f)
    if drop:
        man.pop("manifest_crc32", None)
        man["format_version"] = 1
    else:
        man["manifest_crc32"] = manifest_crc(man)
    with open(path, "w") as f:
        json.dump(man, f, indent=1)
    return True


def check_ckpt(path, tag=None, dump=None):
    """True when the checkpoint DIR/<tag> is what docs/checkpoints.md says"""
    if tag is None:
        with open(os.path.join(path, "latest")) as f:
            tag = f.read()
    d = os.path.join(path, tag)
    with open(os.path.join(d, "zt_manifest.json")) as f:
        man = json.load(f)
    lay = man["layout"]
    units, parts, per = lay["units"], lay["partition_count"], lay["partition_numel"]
    sections = 1 + len(man["optimizer"]["state_sections"])
    head = 64 + 32 * len(units)
    assert man["tag"] == tag and len(man["files"]) == parts, (man["tag"], len(man["files"]))
    assert man["format_version"] == 2 and man["manifest_crc32"] == manifest_crc(man), \
        ("manifest checksum", man["format_version"], man.get("manifest_crc32"), manifest_crc(man))
    shards = []
    for r, entry in enumerate(man["files"]):
        assert entry["name"] == f"zero_pp_rank_{r}_mp_rank_00_optim_states.zt", entry
        with open(os.path.join(d, entry["name"]), "rb") as f:
            data = f.read()
        assert len(data) == entry["bytes"] == head + 4 * sections * per, (r, len(data))
        assert f"{zlib.crc32(data):08x}" == entry["crc32"], (r, entry["crc32"])
        fields = struct.unpack_from("<8sIIIIIIIIQQQ", data, 0)
        want = (b"ZTSHARD\0", 1, head, r, parts, man["zero_stage"], len(units), sections, 0,
                per, 4 * sections * per, 0)
        assert fields == want, (r, fields, want)
        for u, ul in enumerate(units):
            got = struct.unpack_from("<QQQQ", data, 64 + 32 * u)
            assert got == (ul["numel"], ul["padded_numel"], ul["shard_numel"], ul["part_offset"])
        shards.append(np.frombuffer(data, dtype="<f4", offset=head).reshape(sections, per))
    weights = []
    for ul in units:
        lo, n = ul["part_offset"], ul["shard_numel"]
        for k in range(sections):
            unit = np.concatenate([s[k, lo:lo + n] for s in shards])
            assert unit.size == ul["padded_numel"] and not unit[ul["numel"]:].any(), \
                "non-zero padding"
            if k == 0:
                weights.append(unit[:ul["numel"]])
    w = np.concatenate(weights)
    assert w.size == man["model"]["n_params"], (w.size, man["model"]["n_params"])
    if dump is not None:
        ref = np.fromfile(dump, dtype="<f4")
        if ref.shape != w.shape or not np.array_equal(ref.view("<u4"), w.view("<u4")):
            print(f"FAIL: weights of {d} differ from {dump}")
            return False
    print(f"ok: {d}: {parts} shard(s) of {sections} section(s), CRC-32s and headers as the "
          f"manifest says, {w.size} weights" + (f" = {dump}" if dump else ""))
    return True


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["dumps", "losses", "runs", "loss-falls", "estimate", "ckpt",
                                     "reseal"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--offload-optimizer", default="none", choices=["none", "cpu", "nvme"])
    ap.add_argument("--offload-param", default="none", choices=["none", "cpu", "nvme"])
    ap.add_argument("--tag")
    ap.add_argument("--dump")
    ap.add_argument("--drop", action="store_true")
    args = ap.parse_args()
    if args.what == "reseal":
        ok = reseal(args.files[0], args.drop)
    elif args.what == "ckpt":
        try:
            ok = check_ckpt(args.files[0], args.tag, args.dump)
        except (AssertionError, OSError, KeyError, ValueError) as e:
            sys.exit(f"FAIL: checkpoint {args.files[0]}: {e!r}")
    elif args.what == "estimate":
        if len(args.files) != 2:
            sys.exit("FAIL: estimate needs EST RUN")
        ok = check_estimate(args.files[0], args.files[1], args.stage, args.tol,
                            args.offload_optimizer, args.offload_param)
    elif args.what == "runs":
        ok = check_runs(args.files[0], args.tol)
    elif args.what == "dumps":
        d, problem = dump_distance(*args.files)
        if problem:
            sys.exit(f"FAIL: {problem}")
        ok = d <= args.tol
        print(f"{'ok' if ok else 'FAIL'}: params {args.files[1]} vs {args.files[0]}: rel L2 {d:.3e} (tol {args.tol:g})")
    elif args.what == "losses":
        d, problem = loss_distance(*args.files)
        if problem:
            sys.exit(f"FAIL: {problem}")
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
