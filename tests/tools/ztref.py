"""Shared helpers of the PyTorch reference tests (tests/reference/test_*_torch.py).

Everything here is written again from the C headers' definitions, not read out
of zerotrain, so that a bug in the C data path cannot hide on both sides:

  - the counter PRNG of engine/rng.h (rng_mix, rng_u64, rng_uniform), in numpy;
  - the sampler's keyed shuffle permutation (zt_sampler_permute, data/sampler.c)
    and the global batch positions of an optimizer step (data/sampler.h);
  - reading --dump-params / --dump-grads files (float32 LE, unpadded);
  - running zerotrain under mpirun with tests/env.sh's Open MPI settings;
  - rel_l2 and the [PASS]/[FAIL] check lines.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ZT_SHARED", REPO.parent / "shared"))

# engine/rng.h's streams.
STREAM_INIT = 1
STREAM_DATA = 2
STREAM_SHUFFLE = 3
STREAM_DROPOUT = 4
STREAM_WINDOW = 5
STREAM_SAMPLE = 6

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_M64_INT = (1 << 64) - 1


class CheckFailed(Exception):
    pass


def reference_args(doc):
    """Command line of the transformer reference tests."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--zerotrain", default="zerotrain",
                    help="path to the zerotrain binary (default: REPO/zerotrain)")
    ap.add_argument("--np", default="1,2",
                    help="comma-separated rank counts (default 1,2; 1 runs ZeRO stage 0, "
                         "more stage 3)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return ap.parse_args()


def adamw_config(train_batch, micro, clip):
    """The reference tests' DeepSpeed config: AdamW as torch.optim.AdamW runs it."""
    return {
        "train_batch_size": train_batch,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_clipping": clip,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        },
        "steps_per_print": 0,
    }


def report(ok, name, detail):
    """Prints one [PASS]/[FAIL] line; a failure raises CheckFailed."""
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
    if not ok:
        raise CheckFailed(name)


def rel_l2(a, b):
    """||a - b|| / ||b|| in float64 (b is the reference)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def rel_err(a, b):
    """|a - b| / |b| elementwise, float64 (b is the reference)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.abs(a - b) / np.abs(b)


# ---------------------------------------------------------------- PRNG (engine/rng.h)

def rng_mix(z):
    """splitmix64's finaliser on a uint64 array; numpy uint64 arithmetic wraps mod 2^64."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) & _M64


def rng_u64(seed, stream, counters):
    key = rng_mix(rng_mix(np.array([seed], dtype=np.uint64)) ^ np.uint64(stream))
    return rng_mix(key ^ np.asarray(counters, dtype=np.uint64))


def rng_uniform(seed, stream, counters):
    # The top 24 bits are an integer below 2^24, exact in float32, and the scale is
    # a power of two, so this is exactly the C float.
    top = (rng_u64(seed, stream, counters) >> np.uint64(40)).astype(np.float32)
    return top * np.float32(1.0 / 16777216.0)


def check_prng():
    # Known answers from compiling engine/rng.h: they pin this port to the C
    # definition, including the wrap-around of a counter near 2^64.
    got = rng_u64(1234, 2, np.arange(3, dtype=np.uint64))
    want = np.array([0x5A822AD446A8ED46, 0x739AA1F2DCE94775, 0xEE7505A3AB5CF983],
                    dtype=np.uint64)
    big = rng_u64(0, 7, np.array([0xFFFFFFFFFFFFFFF0], dtype=np.uint64))[0]
    u = rng_uniform(1234, 2, np.array([0], dtype=np.uint64))[0]
    ok = (np.array_equal(got, want) and big == np.uint64(0xDC6FEA4577E2E9ED)
          and u == np.float32(0.353548646))
    report(ok, "prng known answers", "numpy port of engine/rng.h matches the C values"
           if ok else f"got {[hex(int(v)) for v in got]} big {hex(int(big))} u {u!r}")


# ---------------------------------------------------------------- sampler (data/sampler.c)

def _mix_int(z):
    return int(rng_mix(np.array([z & _M64_INT], dtype=np.uint64))[0])


def sampler_permute(n, seed, epoch, p):
    """zt_sampler_permute: a 4-round Feistel network on the smallest even bit width
    2*half with 4^half >= n, cycle-walked back into [0, n); round keys
    zt_rng_u64(seed, STREAM_SHUFFLE, epoch * 4 + round)."""
    half = 1
    while (1 << (2 * half)) < n:
        half += 1
    mask = (1 << half) - 1
    keys = [int(v) for v in rng_u64(seed, STREAM_SHUFFLE,
                                    np.array([(epoch * 4 + r) & _M64_INT for r in range(4)],
                                             dtype=np.uint64))]
    x = p
    while True:
        l, r = x >> half, x & mask
        for rnd in range(4):
            f = _mix_int(r ^ keys[rnd]) & mask
            l, r = r, l ^ f
        x = (l << half) | r
        if x < n:
            return x


def check_permute():
    # Known answers from compiling data/sampler.c.
    cases = [((72, 1234, 0), [11, 30, 51, 23, 12, 46, 9, 33]),
             ((72, 1234, 1), [12, 39, 21, 40, 9, 27, 63, 7]),
             ((1000, 1234, 1), [122, 979, 143, 394, 527, 112, 804, 287]),
             ((5, 7, 3), [2, 3, 0, 1, 4])]
    bad = []
    for (n, seed, epoch), want in cases:
        got = [sampler_permute(n, seed, epoch, p) for p in range(len(want))]
        if got != want:
            bad.append(f"n={n} seed={seed} epoch={epoch}: got {got}, C {want}")
    perm = sorted(sampler_permute(72, 1234, 0, p) for p in range(72))
    if perm != list(range(72)):
        bad.append("n=72 is not a bijection")
    report(not bad, "sampler permutation known answers",
           "python port of zt_sampler_permute matches the C values" if not bad else "; ".join(bad))


def global_batch_indices(step, train_batch, n_samples, shuffle, seed):
    """Sample indices of optimizer step `step`'s global batch (data/sampler.h):
    positions base + [0, train_batch), base = (step % steps_per_epoch) * train_batch,
    mapped through the epoch's permutation when shuffling. The order is the
    positions' order; which rank and micro-step reads which does not change the
    global-batch mean loss."""
    steps_per_epoch = n_samples // train_batch
    epoch = step // steps_per_epoch
    base = (step % steps_per_epoch) * train_batch
    pos = range(base, base + train_batch)
    if not shuffle:
        return list(pos)
    return [sampler_permute(n_samples, seed, epoch, p) for p in pos]


# ---------------------------------------------------------------- dumps

def read_dump(path, expected):
    """A --dump-params / --dump-grads file: `expected` float32 LE values."""
    path = Path(path)
    raw = np.fromfile(path, dtype="<f4")
    if raw.size != expected:
        report(False, f"dump size {path.name}",
               f"{raw.size} floats, expected {expected} (the model's parameter count)")
    return raw


def split_flat(flat, shapes):
    """Splits a flat dump into arrays of the given (name, shape) list, in order."""
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = np.asarray(flat[off:off + n]).reshape(shape)
        off += n
    assert off == len(flat), f"{off} != {len(flat)}"
    return out


# ---------------------------------------------------------------- zerotrain

def mpi_env(threads=1):
    """tests/env.sh's environment: Open MPI as root, shared memory only, one
    thread per rank."""
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    return env


def run_zerotrain(exe, np_, args, workdir, timeout=120):
    """Runs `mpirun -np np_ exe args...` in workdir; exits the test with status 2
    (could not run) when zerotrain fails or times out."""
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none",
           "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", str(exe)]
    cmd += [str(a) for a in args]
    try:
        res = subprocess.run(cmd, cwd=workdir, env=mpi_env(1), capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"error: zerotrain timed out after {timeout} s: {' '.join(cmd)}", file=sys.stderr)
        sys.exit(2)
    if res.returncode != 0:
        print(f"error: zerotrain exited {res.returncode}: {' '.join(cmd)}\n"
              f"--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-4000:]}",
              file=sys.stderr)
        sys.exit(2)
    return res


def find_zerotrain(path):
    """The zerotrain binary (relative paths from the repository root) and mpirun,
    or None after printing why (the caller exits 2)."""
    exe = Path(path)
    if not exe.is_absolute():
        exe = (REPO / exe).resolve()
    if not exe.is_file():
        print(f"error: zerotrain binary not found at {exe}\nhint: run `make` in {REPO}",
              file=sys.stderr)
        return None
    if shutil.which("mpirun") is None:
        print("error: mpirun not found on PATH", file=sys.stderr)
        return None
    return exe


# ---------------------------------------------------------------- dump layout <-> torch

class Entry:
    """One tensor of zerotrain's dump: its name (model.h), shape and the torch
    parameters whose concatenation along dim 0 it is (one part, or e.g. the
    query, key and value weights of gptlite's stacked qkv). init says what
    model.h's initialisation must have drawn: ("normal",), ("ones",),
    ("zeros",) or ("uniform", bound). null_rows = (start, stop): rows along
    dim 0 whose true gradient is zero by the model's mathematics (the key bias
    of attention: softmax ignores a per-query constant), see check_null_rows."""

    def __init__(self, name, parts, init, null_rows=None):
        self.name = name
        self.parts = list(parts)
        self.init = init
        rows = sum(p.shape[0] for p in self.parts)
        self.shape = (rows,) + tuple(self.parts[0].shape[1:])
        self.numel = int(np.prod(self.shape))
        self.null_rows = null_rows

    def null_mask(self):
        """Boolean (numel,) mask of the null rows' elements (all False if none)."""
        m = np.zeros(self.shape, dtype=bool)
        if self.null_rows:
            m[self.null_rows[0]:self.null_rows[1]] = True
        return m.reshape(-1)


def entries_numel(entries):
    return sum(e.numel for e in entries)


def load_entries(entries, flat):
    """Copies the flat dump (float32) into the torch parameters, as float64."""
    import torch
    off = 0
    with torch.no_grad():
        for e in entries:
            for p in e.parts:
                n = p.numel()
                p.copy_(torch.from_numpy(np.asarray(flat[off:off + n], dtype=np.float64))
                        .reshape(p.shape))
                off += n
    assert off == len(flat), f"loaded {off} of {len(flat)} values"


def flatten_entries(entries, grad=False):
    """Parameters (or their .grad; None counts as zeros) in dump order, float64."""
    out = []
    for e in entries:
        for p in e.parts:
            t = p.grad if grad else p
            v = np.zeros(p.numel()) if t is None else t.detach().double().reshape(-1).numpy()
            out.append(v)
    return np.concatenate(out)


def entry_errors(got, want, entries):
    """[(name, rel L2 of got vs want over that tensor)] in dump order."""
    rows, off = [], 0
    for e in entries:
        g, w = got[off:off + e.numel], want[off:off + e.numel]
        rows.append((e.name, rel_l2(g, w) if np.linalg.norm(w) > 0 else float(np.linalg.norm(g))))
        off += e.numel
    return rows


def check_per_tensor(tag, what, got, want, entries, tol, skip_null=False):
    """One check line: every tensor's rel L2 <= tol, naming the worst (and on a
    failure every tensor over tol). skip_null: a tensor's null rows are left
    out of its error (they are checked by check_null_rows)."""
    errs, off = [], 0
    for e in entries:
        g, w = got[off:off + e.numel], want[off:off + e.numel]
        off += e.numel
        name = e.name
        if skip_null and e.null_rows:
            keep = ~e.null_mask()
            g, w = g[keep], w[keep]
            name += f" (rows outside {e.null_rows[0]}:{e.null_rows[1]})"
        errs.append((name, rel_l2(g, w) if np.linalg.norm(w) > 0 else float(np.linalg.norm(g))))
    worst = max(errs, key=lambda r: r[1])
    bad = [r for r in errs if not r[1] <= tol]
    detail = (f"worst tensor {worst[0]} rel L2 {worst[1]:.2e} (tol {tol:.0e}), "
              f"{len(errs)} tensors")
    if not skip_null:
        detail += f", whole vector {rel_l2(got, want):.2e}"
    if bad:
        detail += "; over tol: " + ", ".join(f"{n} {e:.2e}" for n, e in bad)
    report(not bad, f"{tag} {what}", detail)


def check_null_rows(tag, final, ref_final, ref_grads, entries, steps, lr):
    """The null rows (attention key biases) after `steps` AdamW steps.

    Their true gradient is zero, so float64 leaves them at their weight-decayed
    init while any fp32 implementation (torch's own fp32 included) feeds its
    O(1e-9) rounding noise into Adam, which divides by sqrt(v) + eps and turns
    it into moves up to lr per step: a relative comparison there measures
    rounding noise, not correctness (and they cannot change any output). What
    is checked instead: the float64 gradient there is zero to 1e-12 of its
    tensor's (the premise), and zerotrain's values lie within the largest
    drift Adam's normalised update allows, 2 * steps * lr per element."""
    rows, off = [], 0
    premise_bad, drift_bad = [], []
    for e in entries:
        sl = slice(off, off + e.numel)
        off += e.numel
        if not e.null_rows:
            continue
        m = e.null_mask()
        g = ref_grads[sl]
        ratio = np.linalg.norm(g[m]) / np.linalg.norm(g[~m])
        drift = float(np.abs(final[sl][m] - ref_final[sl][m]).max())
        rows.append(f"{e.name}[{e.null_rows[0]}:{e.null_rows[1]}] drift {drift:.1e}")
        if not ratio <= 1e-12:
            premise_bad.append(f"{e.name}: float64 gradient ratio {ratio:.1e}")
        if not drift <= 2 * steps * lr:
            drift_bad.append(f"{e.name} drift {drift:.2e}")
    if not rows:
        return
    report(not premise_bad and not drift_bad, f"{tag} attention key biases",
           f"zero true gradient (float64 ratio <= 1e-12), max |zerotrain - torch| "
           f"<= {2 * steps * lr:.0e}: " + ", ".join(rows)
           + ("; " + "; ".join(premise_bad + drift_bad) if premise_bad or drift_bad else ""))


def check_init(entries, flat, tag="init layout"):
    """The dumped initial weights have model.h's initialisation tensor by tensor:
    a misplaced or transposed tensor shows as the wrong distribution."""
    bad, off = [], 0
    for e in entries:
        v = np.asarray(flat[off:off + e.numel], dtype=np.float64)
        off += e.numel
        kind = e.init[0]
        if kind == "ones":
            ok = bool(np.all(v == 1.0))
        elif kind == "zeros":
            ok = bool(np.all(v == 0.0))
        elif kind == "uniform":
            b = e.init[1]
            ok = bool(np.all(np.abs(v) <= b * (1 + 1e-6)))
            if v.size >= 64:  # a wider tensor reaches close to its bound
                ok &= (bool(np.abs(v).max() >= 0.8 * b)
                       and abs(v.mean()) < 6 * b / np.sqrt(3 * v.size))
        elif kind == "normal":
            ok = abs(v.mean()) < 6 / np.sqrt(v.size) and 0.85 < v.std() < 1.15
        else:
            raise ValueError(kind)
        if not ok:
            bad.append(f"{e.name} ({kind}: min {v.min():.4g} max {v.max():.4g} "
                       f"mean {v.mean():.4g} std {v.std():.4g})")
    report(not bad, tag, f"{len(entries)} tensors, {off} params, each with model.h's "
           "initialisation" if not bad else "unexpected values in " + "; ".join(bad))


def adamw(params, opt_cfg):
    """torch.optim.AdamW from a DeepSpeed optimizer params block."""
    import torch
    return torch.optim.AdamW(params, lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]),
                             eps=opt_cfg["eps"], weight_decay=opt_cfg["weight_decay"])


def zero_config(np_, base):
    """The run's DeepSpeed config: stage 0 at one rank, stage 3 (every unit
    partitioned: persistence threshold 0) at more."""
    cfg = json.loads(json.dumps(base))
    cfg["zero_optimization"] = ({"stage": 0} if np_ == 1 else
                                {"stage": 3, "stage3_param_persistence_threshold": 0})
    return cfg


def check_training_run(tag, exe, np_, base_cfg, model_args, workdir, entries, init_flat, ref,
                       steps, loss_rtol, grad_rtol, param_rtol, extra=()):
    """Runs zerotrain (np_ ranks, base_cfg at zero_config's stage) for `steps`
    steps with --report/--dump-grads/--dump-params and checks it against the
    float64 reference `ref` {losses, grads, final}. Returns the report."""
    d = Path(workdir)
    d.mkdir(parents=True, exist_ok=True)
    cfg = zero_config(np_, base_cfg)
    cfg_path = d / "config.json"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    n = entries_numel(entries)
    common = ["--config", cfg_path] + list(model_args)

    if np_ != 1:
        run_zerotrain(exe, np_, common + ["--steps", 0, "--dump-params", d / "init.bin"], d)
        init_np = read_dump(d / "init.bin", n)
        same = np.array_equal(init_np, init_flat)
        report(same, f"{tag} initial weights", "bitwise equal to the np=1 init" if same
               else f"differ from the np=1 init (rel L2 {rel_l2(init_np, init_flat):.2e})")

    run_zerotrain(exe, np_, common + ["--steps", steps, "--report", d / "report.json",
                                      "--dump-grads", d / "grads.bin",
                                      "--dump-params", d / "final.bin"] + list(extra), d)
    rep = json.loads((d / "report.json").read_text())
    losses = np.array([np.nan if v is None else v for v in rep["loss_history"]],
                      dtype=np.float64)
    tb, mb = cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]
    gas = tb // (mb * np_)
    shape_ok = (len(losses) == steps and rep.get("world_size") == np_
                and rep.get("stage") == cfg["zero_optimization"]["stage"]
                and rep.get("gradient_accumulation_steps") == gas
                and rep.get("model", {}).get("params") == n)
    report(shape_ok, f"{tag} report shape",
           f"{len(losses)} losses, world_size {rep.get('world_size')}, stage {rep.get('stage')}, "
           f"gas {rep.get('gradient_accumulation_steps')} (expected {gas}), "
           f"params {rep.get('model', {}).get('params')} (expected {n})")

    e0 = rel_err(losses[0], ref["losses"][0])
    report(bool(e0 <= loss_rtol), f"{tag} step-1 loss",
           f"zerotrain {losses[0]:.8f}, torch float64 {ref['losses'][0]:.8f}, "
           f"rel err {e0:.2e} (tol {loss_rtol:.0e})")

    grads = read_dump(d / "grads.bin", n)
    check_per_tensor(tag, "step-1 gradients", grads, ref["grads"], entries, grad_rtol)

    err = rel_err(losses, ref["losses"])
    report(bool(np.all(err <= loss_rtol)), f"{tag} AdamW loss history",
           f"{steps} steps, max rel err {np.nanmax(err):.2e} (tol {loss_rtol:.0e}); "
           f"zerotrain {' '.join(f'{v:.6f}' for v in losses)}; "
           f"torch {' '.join(f'{v:.6f}' for v in ref['losses'])}")

    final = read_dump(d / "final.bin", n)
    check_per_tensor(tag, f"params after {steps} AdamW steps", final, ref["final"], entries,
                     param_rtol, skip_null=True)
    check_null_rows(tag, final, ref["final"], ref["grads"], entries, steps,
                    cfg["optimizer"]["params"]["lr"])
    return rep
