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
    to float32 once) and in bfloat16 (widened exactly);
  - damaged files (first, without zerotrain): each kind of damage of a valid
    MLP file (truncations, the header length, invalid or too deeply nested
    JSON, a name twice, fields of the wrong type or missing, offsets out of
    order, overlapping, leaving a hole or trailing bytes, unknown or non-float
    dtypes, byte lengths that are not the shape's, tensors and model
    arguments that are not the module's) makes zt_torch.load raise
    zt_safetensors.FormatError naming the file with the expected message, the
    zt_torch.py command exits 2 with "error:" and no traceback, and 5000
    seeded random damages (of the MLP file and a GPT-lite one) either load or
    raise FormatError, nothing else.

    /usr/bin/python3 tests/reference/test_interop_torch.py [--zerotrain ./zerotrain]

Exit status 0 when every check passes, 1 on a failed check, 2 when zerotrain
could not be run.
"""
import json
import random
import shutil
import struct
import subprocess
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


# ---------------------------------------------------------------- damaged files

FUZZ_CASES = 5000


def _split(raw):
    """(header dict, data bytes) of a valid file's bytes."""
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _file(header, data, pad=True):
    """A safetensors file's bytes: header (a dict, or raw JSON bytes) and data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def _edit(raw, fn):
    """The file with its header changed in place by fn(header dict)."""
    header, data = _split(raw)
    fn(header)
    return _file(header, data)


def _args_edit(raw, change):
    """The file with its zerotrain.model_args replaced by change(args dict)
    (a dict, or the JSON text itself)."""
    def fn(h):
        new = change(json.loads(h["__metadata__"]["zerotrain.model_args"]))
        h["__metadata__"]["zerotrain.model_args"] = new if isinstance(new, str) else \
            json.dumps(new)
    return _edit(raw, fn)


def _outcome(fn, path):
    """'ok', or the FormatError's message; anything else escaping is returned
    as (type name, message) for the caller to fail on."""
    try:
        fn(path)
    except zt_safetensors.FormatError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - a crash of the loader is the finding
        return (type(e).__name__, str(e)[:300])
    return "ok"


def damaged_cases(raw):
    """(label, file bytes, the FormatError's message fragment) of each kind of
    damage, from a valid MLP file's bytes raw (width 16, in 8, out 4)."""
    header, data = _split(raw)
    n = struct.unpack("<Q", raw[:8])[0]
    deep = b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}"
    dup = json.dumps(header).encode().replace(b'"layers.0.bias"', b'"layers.0.weight"', 1)

    def entry(name, **kw):
        return lambda h: h[name].update(kw)

    def meta(key, value):
        return lambda h: h["__metadata__"].__setitem__(key, value)

    return [
        # the 8-byte length and truncation
        ("empty file", b"", "shorter than its 8-byte header length"),
        ("5 bytes", raw[:5], "shorter than its 8-byte header length"),
        ("cut in the header", raw[:8 + n - 3], f"header length {n} does not fit"),
        ("cut in the data", raw[:-4], "entry 'layers.2.bias': data_offsets [1920, 1936] lie "
                                      "past the end of the file's 1932 data bytes (truncated?)"),
        ("length over 100 MB", struct.pack("<Q", 200_000_000) + raw[8:],
         "header length 200000000 is over the format's limit of 100000000 bytes"),
        ("length 1", struct.pack("<Q", 1) + raw[8:], "header length 1 cannot hold a JSON object"),
        # the JSON
        ("invalid JSON", _file(b'{"a": 1', data), "header JSON: "),
        ("a list, not an object", raw[:8] + b"[" + raw[9:],
         "the header is not a JSON object (its first byte is not '{')"),
        ("nesting 100000 deep", _file(deep, b""), "header JSON nested too deeply to read"),
        ("a name twice", _file(dup, data), "header key 'layers.0.weight' appears twice"),
        ("NaN in the JSON", _file(json.dumps(header).encode().replace(b"[16]", b"[NaN]", 1), data),
         "header NaN is not JSON"),
        ("a 5000-digit integer", _file(json.dumps(header).encode().replace(
            b"[16]", b"[" + b"9" * 5000 + b"]", 1), data), "header JSON: Exceeds the limit"),
        ("not UTF-8", _file(json.dumps(header).encode().replace(b'"pt"', b'"p\xff"'), data),
         "the header is not UTF-8"),
        # the fields' types, missing fields
        ("dtype a number", _edit(raw, entry("layers.0.bias", dtype=32)),
         "entry 'layers.0.bias' has no 'dtype' string"),
        ("no dtype", _edit(raw, lambda h: h["layers.0.bias"].pop("dtype")),
         "entry 'layers.0.bias' has no 'dtype' string"),
        ("shape a string", _edit(raw, entry("layers.0.bias", shape="16")),
         "entry 'layers.0.bias' has no 'shape' list"),
        ("shape [16.0]", _edit(raw, entry("layers.0.bias", shape=[16.0])),
         "entry 'layers.0.bias': dimension 0 of its shape is not a non-negative integer"),
        ("shape [true]", _edit(raw, entry("layers.0.bias", shape=[True])),
         "dimension 0 of its shape is not a non-negative integer"),
        ("shape [-16]", _edit(raw, entry("layers.0.bias", shape=[-16])),
         "dimension 0 of its shape is not a non-negative integer"),
        ("offsets strings", _edit(raw, entry("layers.0.bias", data_offsets=["512", "576"])),
         "entry 'layers.0.bias' has no 'data_offsets' [begin, end] of two integers"),
        ("no data_offsets", _edit(raw, lambda h: h["layers.0.bias"].pop("data_offsets")),
         "entry 'layers.0.bias' has no 'data_offsets'"),
        ("an entry that is a list", _edit(raw, lambda h: h.__setitem__("layers.0.bias", [1])),
         "entry 'layers.0.bias' is not an object"),
        ("__metadata__ a list", _edit(raw, lambda h: h.__setitem__("__metadata__", ["pt"])),
         "__metadata__ is not an object of strings"),
        ("__metadata__ null", _edit(raw, lambda h: h.__setitem__("__metadata__", None)),
         "__metadata__ is not an object of strings"),
        ("a metadata value 2", _edit(raw, meta("zerotrain.step", 2)),
         "__metadata__ key 'zerotrain.step' holds a value that is not a string"),
        # offsets: each alone, then the layout
        ("begin > end", _edit(raw, entry("layers.0.bias", data_offsets=[576, 512])),
         "entry 'layers.0.bias': data_offsets [576, 512] are not 0 <= begin <= end"),
        ("negative begin", _edit(raw, entry("layers.0.bias", data_offsets=[-64, 0])),
         "are not 0 <= begin <= end"),
        ("past the end", _edit(raw, entry("layers.2.bias", data_offsets=[1936, 1952])),
         "entry 'layers.2.bias': data_offsets [1936, 1952] lie past the end"),
        ("overlapping entries", _edit(raw, entry("layers.0.bias", data_offsets=[448, 512])),
         "entries 'layers.0.weight' and 'layers.0.bias' overlap: bytes [0, 512) and "
         "[448, 512) of the data"),
        ("the same bytes twice", _edit(raw, entry("layers.0.bias", data_offsets=[0, 64])),
         "entries 'layers.0.bias' and 'layers.0.weight' overlap"),
        ("a hole", _file(_split(_edit(raw, entry("layers.2.bias", data_offsets=[1924, 1940])))[0],
                         data + bytes(4)),
         "bytes [1920, 1924) of the data belong to no entry: a hole between 'layers.2.weight' "
         "and 'layers.2.bias'"),
        ("a hole at the start", _file(_split(_edit(raw, lambda h: [
            h[k].__setitem__("data_offsets", [b + 4, e + 4])
            for k, (b, e) in ((k, h[k]["data_offsets"]) for k in h if k != "__metadata__")]))[0],
            bytes(4) + data), "bytes [0, 4) of the data belong to no entry: a hole before the "
                              "first entry 'layers.0.weight'"),
        ("trailing bytes", raw + bytes(8),
         "bytes [1936, 1944) of the data belong to no entry: 8 trailing bytes after the last "
         "entry 'layers.2.bias'"),
        # dtypes and byte lengths
        ("an unknown dtype", _edit(raw, entry("layers.0.bias", dtype="Q32")),
         "entry 'layers.0.bias': dtype 'Q32' is not a dtype of the safetensors format"),
        ("I32 bytes as a float parameter", _edit(raw, entry("layers.0.bias", dtype="I32")),
         "tensor 'layers.0.bias' is I32; the module's parameters read F32, F64, F16 or BF16"),
        ("U8 bytes as a float parameter", _edit(raw, entry("layers.2.bias", dtype="U8",
                                                        shape=[16])),
         "tensor 'layers.2.bias' is U8"),
        ("an 8-bit float", _edit(raw, entry("layers.2.bias", dtype="F8_E4M3", shape=[16])),
         "entry 'layers.2.bias': dtype F8_E4M3 is not one this reader reads"),
        ("bytes short of the shape", _edit(raw, entry("layers.0.bias", shape=[17])),
         "entry 'layers.0.bias': data_offsets [512, 576] hold 64 bytes; F32 [17] is 68 bytes"),
        ("F64 over F32 bytes", _edit(raw, entry("layers.0.bias", dtype="F64")),
         "hold 64 bytes; F64 [16] is 128 bytes"),
        ("a shape overflowing 64 bits", _edit(raw, entry("layers.0.bias",
                                                         shape=[2**32, 2**32, 0])),
         "the element count of shape [4294967296, 4294967296, 0] overflows 64 bits"),
        # the module: tensors and metadata
        ("transposed weight", _edit(raw, entry("layers.0.weight", shape=[8, 16])),
         "tensor 'layers.0.weight' has shape [8, 16]; model mlp"),
        ("a tensor renamed", _edit(raw, lambda h: h.__setitem__("layers.9.bias",
                                                                 h.pop("layers.2.bias"))),
         "tensor 'layers.9.bias' is not a tensor of model mlp"),
        ("no zerotrain.model", _edit(raw, lambda h: h["__metadata__"].pop("zerotrain.model")),
         "no zerotrain.model / zerotrain.model_args metadata"),
        ("another model", _edit(raw, meta("zerotrain.model", "resnet")),
         "zerotrain.model: model 'resnet' is not one of mlp, gptlite, classifier"),
        ("model_args not JSON", _args_edit(raw, lambda a: "{width"),
         "zerotrain.model_args: JSON: "),
        ("model_args nested deep", _args_edit(raw, lambda a: "[" * 100000),
         "zerotrain.model_args: JSON nested too deeply"),
        ("model_args a list", _args_edit(raw, lambda a: [16, 3]),
         "zerotrain.model_args: the model arguments are not a JSON object"),
        ("model_args without width", _args_edit(raw, lambda a: {"layers": 3}),
         "zerotrain.model_args: mlp needs argument 'width'"),
        ("model_args with a typo", _args_edit(raw, lambda a: {**a, "widht": 16}),
         "zerotrain.model_args: mlp takes no argument 'widht'"),
        ("width a string", _args_edit(raw, lambda a: {**a, "width": "16"}),
         "mlp argument width is \"16\"; expected an integer from 1 to 16777216"),
        ("width true", _args_edit(raw, lambda a: {**a, "width": True}),
         "mlp argument width is true"),
        ("layers 1", _args_edit(raw, lambda a: {**a, "layers": 1}),
         "mlp argument layers is 1; expected an integer from 2 to 65536"),
        ("a model too big to build", _args_edit(raw, lambda a: {**a, "width": 1 << 24}),
         "tensor 'layers.0.weight' has shape [16, 8]; model mlp"),
        ("gptlite heads not dividing", _edit(raw, lambda h: h["__metadata__"].update({
            "zerotrain.model": "gptlite", "zerotrain.model_args": json.dumps(
                {"n_layer": 1, "n_embd": 30, "n_head": 4, "block_size": 8, "vocab_size": 65,
                 "activation": "gelu", "dropout": 0.0})})),
         "gptlite's n_embd 30 is not a multiple of n_head 4"),
        ("gptlite dropout 1", _edit(raw, lambda h: h["__metadata__"].update({
            "zerotrain.model": "gptlite", "zerotrain.model_args": json.dumps(
                {"n_layer": 1, "n_embd": 32, "n_head": 4, "block_size": 8, "vocab_size": 65,
                 "activation": "gelu", "dropout": 1})})),
         "gptlite argument dropout is 1; expected a number in [0, 1)"),
        ("gptlite activation tanh", _edit(raw, lambda h: h["__metadata__"].update({
            "zerotrain.model": "gptlite", "zerotrain.model_args": json.dumps(
                {"n_layer": 1, "n_embd": 32, "n_head": 4, "block_size": 8, "vocab_size": 65,
                 "activation": "tanh"})})),
         "gptlite argument activation is \"tanh\"; expected relu or gelu"),
    ]


def _mutate(rng, raw):
    """One random damage of raw: flipped bytes (mostly in the header), a cut,
    an inserted or deleted run, a header length off by a little."""
    b = bytearray(raw)
    n = struct.unpack("<Q", raw[:8])[0]
    kind = rng.randrange(6)
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(8 + n)] ^= 1 << rng.randrange(8)
    elif kind == 1:
        b[rng.randrange(8 + n)] = rng.choice(b'{}[]",:-0123456789 eE.\\\x00\xff')
    elif kind == 2:
        del b[rng.randrange(len(b)):]
    elif kind == 3:
        at = rng.randrange(8, 8 + n)
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif kind == 4:
        at = rng.randrange(8, 8 + n)
        del b[at:at + rng.randint(1, 16)]
    else:
        b[:8] = struct.pack("<Q", max(0, n + rng.randint(-16, 16)))
    return bytes(b)


def check_damaged(tmp):
    """zt_torch.load on each kind of damaged file: FormatError naming the file
    with the expected message, and nothing else escaping (no traceback of
    json, numpy or torch); the zt_torch.py command says error: and exits 2;
    then FUZZ_CASES seeded random damages of the valid files load or raise
    FormatError, nothing else."""
    d = tmp / "damaged"
    d.mkdir()
    torch.manual_seed(SEED)
    good = d / "good.safetensors"
    zt_torch.save(zt_torch.build("mlp", {"width": 16, "layers": 3, "in_size": 8,
                                         "out_size": 4}), good, step=3)
    raw = good.read_bytes()
    report(_outcome(zt_torch.load, good) == "ok", "damaged files: the valid file",
           "the MLP file zt_torch.save wrote loads")
    cases = damaged_cases(raw)
    wrong = []
    for i, (label, data, want) in enumerate(cases):
        path = d / f"case{i}.safetensors"
        path.write_bytes(data)
        got = _outcome(zt_torch.load, path)
        if not (isinstance(got, str) and want in got and str(path) in got):
            wrong.append(f"{label}: got {got!r}, want FormatError with {want!r}")
    report(not wrong, "damaged files: FormatError", f"{len(cases)} kinds of damage each raise "
           f"zt_safetensors.FormatError naming the file and the entry" +
           "".join(f"\n    {w}" for w in wrong))
    overlap = next(i for i, c in enumerate(cases) if c[0] == "overlapping entries")
    cli = subprocess.run([sys.executable, str(REPO / "scripts" / "zt_torch.py"),
                          str(d / f"case{overlap}.safetensors")], capture_output=True, text=True)
    report(cli.returncode == 2 and cli.stderr.startswith("zt_torch.py: error: ") and
           "overlap" in cli.stderr and "Traceback" not in cli.stderr,
           "damaged files: zt_torch.py FILE", f"exit {cli.returncode}, {cli.stderr.strip()!r}")
    # A name from the file reaches the terminal escaped: ESC and a bidi override.
    header, data = _split(raw)
    header["layers.0.bias\x1b[2J\u202e"] = header.pop("layers.0.bias")
    (d / "esc.safetensors").write_bytes(_file(header, data))
    cli = subprocess.run([sys.executable, str(REPO / "scripts" / "zt_torch.py"),
                          str(d / "esc.safetensors")], capture_output=True, text=True)
    report(cli.returncode == 2 and "\\x1B[2J\\u{202E}" in cli.stderr and
           not any(c in cli.stderr for c in "\x1b\u202e"),
           "damaged files: names escaped", f"exit {cli.returncode}, {cli.stderr.strip()!r}")
    gpt = d / "gpt.safetensors"
    zt_torch.save(zt_torch.build("gptlite", {"n_layer": 1, "n_embd": 8, "n_head": 2,
                                             "block_size": 4, "vocab_size": 5,
                                             "activation": "gelu", "dropout": 0.1}), gpt)
    rng = random.Random(SEED)
    t0, loaded, refused, escaped = time.time(), 0, 0, []
    path = d / "fuzz.safetensors"
    for i in range(FUZZ_CASES):
        data = _mutate(rng, raw if i % 5 < 3 else gpt.read_bytes())
        path.write_bytes(data)
        got = _outcome(zt_torch.load, path)
        if got == "ok":
            loaded += 1
        elif isinstance(got, str):
            refused += 1
        else:
            escaped.append((i, got))
            (d / f"escaped{i}.safetensors").write_bytes(data)
    report(not escaped, "damaged files: fuzzing",
           f"{FUZZ_CASES} seeded random damages of the MLP and a GPT-lite file in "
           f"{time.time() - t0:.1f} s: {loaded} load, {refused} raise FormatError, "
           f"{len(escaped)} raise anything else" +
           "".join(f"\n    case {i}: {t}: {m}" for i, (t, m) in escaped[:5]))


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
        check_damaged(tmp)
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
