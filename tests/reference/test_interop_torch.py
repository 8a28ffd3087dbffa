#!/usr/bin/python3
"""Checkpoints in PyTorch: consolidate --format safetensors, scripts/zt_torch.py
and --init-from (docs/interop.md).

For each of the three models zerotrain trains a few steps at 2 ranks (ZeRO
stage 3 for the transformers, 2 for the MLP) and saves; `consolidate
--format safetensors` exports the checkpoint and scripts/zt_torch.py builds the
nn.Module from the file's metadata and loads it (strict load_state_dict).
Checks:

  - the loaded state_dict, flattened in file order, equals the consolidated
    fp32 file bit for bit (names and layout are models.md's, in model order);
  - GPT-lite and classifier logits: `zerotrain eval --dump-logits` on the
    first validation samples against the PyTorch module in float64 on the
    same inputs, max |difference| <= LOGIT_TOL * max(1, max |logit|)
    (float32 against float64 arithmetic);
  - --init-from of the exported safetensors file and of the consolidated
    file (at 2 ranks, stage 3) reproduces the checkpoint's weights bit for
    bit (--dump-params), and so does a file PyTorch wrote in float64 (rounded
    to float32 once) and in bfloat16 (widened exactly).

    /usr/bin/python3 tests/reference/test_interop_torch.py [--zerotrain ./zerotrain]

Exit status 0 when every check passes, 1 on a failed check, 2 when zerotrain
could not be run.
"""
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "tools"))
sys.path.insert(0, str(REPO / "scripts"))
from ztref import (SHARED, CheckFailed, adamw_config, find_zerotrain, reference_args,  # noqa: E402
                   report, run_zerotrain)
import zt_safetensors  # noqa: E402
import zt_torch  # noqa: E402

TEXT = SHARED / "data" / "tinyshakespeare" / "input.txt"
IMDB = SHARED / "data" / "imdb" / "imdb-2500.csv"
LOGIT_TOL = 2e-5
SEED = 1234

GPT = ["--model", "gptlite", "--data", TEXT, "--n-layer", 2, "--n-head", 4, "--n-embd", 32,
       "--block-size", 24, "--dropout", 0.1, "--activation", "gelu"]
CLS = ["--model", "classifier", "--data", IMDB, "--n-layer", 2, "--n-head", 4,
       "--embed-dim", 32, "--hidden-dim", 48, "--max-len", 40, "--dropout", 0.1]
MLP = ["--model", "mlp", "--width", 24, "--layers", 3, "--in-size", 10, "--out-size", 6]


def zero_cfg(stage):
    cfg = adamw_config(8, 2, 1.0)
    cfg["zero_optimization"] = {"stage": stage}
    return cfg


def train_and_export(exe, tmp, name, model_args, stage):
    """3 steps at 2 ranks, saved; consolidated both ways. (st path, raw floats)."""
    d = tmp / name
    d.mkdir()
    (d / "cfg.json").write_text(json.dumps(zero_cfg(stage)))
    run_zerotrain(exe, 2, ["--config", d / "cfg.json"] + model_args +
                  ["--steps", 3, "--seed", SEED, "--save-dir", d / "ck"], d)
    run_zerotrain(exe, 1, ["consolidate", d / "ck", "--out", d / "w.safetensors",
                           "--format", "safetensors"], d)
    run_zerotrain(exe, 1, ["consolidate", d / "ck", "--out", d / "w.bin"], d)
    return d, np.fromfile(d / "w.bin", dtype="<f4")


def check_state(name, d, raw):
    model, meta = zt_torch.load(d / "w.safetensors", dtype=torch.float64)
    names = list(zt_safetensors.read(d / "w.safetensors")[0])
    state = model.state_dict()
    report(sorted(names) == sorted(state), f"{name} tensor names",
           "the file's tensors are exactly the module's state_dict")
    flat = np.concatenate([state[k].detach().numpy().astype(np.float32).ravel() for k in names])
    same = flat.shape == raw.shape and np.array_equal(flat, raw)
    report(same, f"{name} state_dict", f"{len(model.state_dict())} tensors, {flat.size} floats "
           f"loaded by zt_torch.load ({meta['zerotrain.model']} {meta['zerotrain.model_args']}) "
           f"equal the consolidated file bit for bit")
    return model


def compare_logits(name, got, want):
    err = float(np.max(np.abs(got - want)))
    scale = max(1.0, float(np.max(np.abs(want))))
    report(err <= LOGIT_TOL * scale, f"{name} logits",
           f"{got.size} logits, max |zerotrain - torch float64| {err:.2e} "
           f"(tol {LOGIT_TOL:.0e} x {scale:.2f}); argmax agrees on "
           f"{np.mean(got.argmax(-1) == want.argmax(-1)) * 100:.1f}%")


def gpt_logits(exe, d, model):
    n, block = 4, 24
    run_zerotrain(exe, 1, ["eval", "--checkpoint", d / "ck", "--data", TEXT, "--eval-iters", 2,
                           "--micro-batch-size", 2, "--dump-logits", d / "logits.bin"], d)
    text = TEXT.read_bytes().decode("utf-8")
    meta = zt_safetensors.read(d / "w.safetensors")[1]
    report(zt_torch.char_vocab(meta) == sorted(set(text)) and
           zt_torch.decode(zt_torch.encode("ROMEO:", meta), meta) == "ROMEO:",
           "gptlite vocabulary", f"zerotrain.chars holds the {len(set(text))} sorted characters "
           "of the text; encode/decode round-trip")
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}
    ids = np.fromiter((stoi[c] for c in text), dtype=np.int64, count=len(text))
    n_train = ids.size - ids.size // 10  # data/text.h: the last tenth validates
    x = np.stack([ids[n_train + block * i: n_train + block * (i + 1)] for i in range(n)])
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    got = np.fromfile(d / "logits.bin", dtype="<f4").reshape(want.shape)
    compare_logits("gptlite", got, want)


def cls_logits(exe, d, model):
    n, max_len, pad_id = 8, 40, 257  # the byte tokenizer: <pad> is 257
    run_zerotrain(exe, 1, ["eval", "--checkpoint", d / "ck", "--data", IMDB, "--eval-iters", 1,
                           "--micro-batch-size", n, "--dump-logits", d / "logits.bin"], d)
    import csv
    with open(IMDB, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    val = [r for j, r in enumerate(rows) if j % 10 == 9][:n]  # data/labelled.h's split
    tokens = torch.full((n, max_len), pad_id, dtype=torch.long)
    pad = torch.ones(n, max_len, dtype=torch.bool)
    for k, (review, _) in enumerate(val):
        b = list(review.replace("<br />", " ").encode("utf-8"))[:max_len]
        tokens[k, :len(b)] = torch.tensor(b)
        pad[k, :len(b)] = False
    with torch.no_grad():
        want = model(tokens, pad).numpy()
    got = np.fromfile(d / "logits.bin", dtype="<f4").reshape(want.shape)
    compare_logits("classifier", got, want)


def check_init_from(exe, d, model_args, raw, model):
    """--init-from FILE --steps 0 --dump-params at 2 ranks, stage 3."""
    def dump(path, tag):
        out = d / f"init-{tag}.bin"
        run_zerotrain(exe, 2, ["--config", d / "z3.json"] + model_args +
                      ["--steps", 0, "--init-from", path, "--dump-params", out], d)
        return np.fromfile(out, dtype="<f4")

    (d / "z3.json").write_text(json.dumps(zero_cfg(3)))
    for path, tag in [(d / "w.safetensors", "safetensors"), (d / "w.bin", "consolidated")]:
        got = dump(path, tag)
        report(np.array_equal(got, raw), f"--init-from {tag}",
               f"{got.size} weights after --init-from {path.name} equal the checkpoint's")
    # A model PyTorch changed, saved in float64 and in bfloat16.
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    # zerotrain's flat order is the exported file's (a split qkv is not the
    # state_dict's order).
    order = list(zt_safetensors.read(d / "w.safetensors")[0])
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    zt_torch.save(model, d / "f64.safetensors", dtype=np.float64)
    want = np.concatenate([state[k].astype(np.float32).ravel() for k in order])
    got = dump(d / "f64.safetensors", "f64")
    report(np.array_equal(got, want), "--init-from a PyTorch float64 file",
           f"{got.size} weights equal PyTorch's rounded to float32 once")
    zt_torch.save(model, d / "bf16.safetensors", bf16=True)
    tensors, _ = zt_safetensors.read(d / "bf16.safetensors")
    want = np.concatenate([tensors[k].ravel() for k in order]).astype(np.float32)
    got = dump(d / "bf16.safetensors", "bf16")
    report(np.array_equal(got, want) and not np.array_equal(got, raw),
           "--init-from a PyTorch bfloat16 file", f"{got.size} weights equal the bf16 values")


def main():
    args = reference_args(__doc__)
    t0 = time.time()
    exe = find_zerotrain(args.zerotrain)
    if exe is None:
        return 2
    for p in (TEXT, IMDB):
        if not p.is_file():
            print(f"error: {p} not found (set ZT_SHARED)", file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="zt-ref-interop-"))
    try:
        d, raw = train_and_export(exe, tmp, "gptlite", GPT, 3)
        model = check_state("gptlite", d, raw)
        gpt_logits(exe, d, model)
        check_init_from(exe, d, GPT, raw, model)

        d, raw = train_and_export(exe, tmp, "classifier", CLS, 3)
        model = check_state("classifier", d, raw)
        cls_logits(exe, d, model)

        d, raw = train_and_export(exe, tmp, "mlp", MLP, 2)
        model = check_state("mlp", d, raw)
        x = torch.rand(5, 10, dtype=torch.float64) * 20 - 10
        report(tuple(model(x).shape) == (5, 6), "mlp forward", "(5, 10) -> (5, 6)")
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"all checks passed in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
