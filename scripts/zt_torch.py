#!/usr/bin/python3
"""zerotrain's three models as PyTorch nn.Modules, loaded from safetensors.

`zerotrain consolidate DIR --out model.safetensors --format safetensors`
writes a checkpoint's weights under the state_dict names of the modules
below and the model's arguments in the file's metadata. Then:

    import zt_torch                       # scripts/ on sys.path
    model, meta = zt_torch.load("model.safetensors")   # float32, eval mode
    logits = model(tokens)                # gptlite: (n, t) ids -> (n, t, vocab)
    ids = zt_torch.encode("ROMEO:", meta)    # gptlite's characters: decode(ids, meta)

and back: zt_torch.save(model, "tuned.safetensors") writes a file that
`zerotrain --init-from tuned.safetensors` starts training from.

load refuses, with zt_safetensors.FormatError (a ValueError) naming the file
and the tensor, a file that breaks the safetensors format (zt_safetensors.read),
metadata that names no model of ours or gives its arguments wrong (an unknown
or missing key, a value of the wrong type or out of zerotrain's bounds), and
tensors that are not the module's: a missing or extra name, another shape, or
a dtype that is not a float (an I32 entry is refused, never reinterpreted).
The shapes are checked on PyTorch's meta device before any memory is taken.

The modules follow docs/models.md (docs/interop.md has the
names):
  MLP         layers.{l} = Linear; ReLU after every layer, the last too.
  GPTLite     wte, wpe (Embedding); h.{i}: ln_1, attn.{query,key,value,proj},
              ln_2, mlp.{fc,proj} (pre-LN, causal attention, dropout on the
              attention weights and after each residual branch); ln_f, lm_head.
  Classifier  embedding + fixed sinusoidal table (a non-persistent buffer) +
              dropout; layers.{i} = nn.TransformerEncoderLayer (batch_first,
              post-LN); masked mean pooling; fc1, ReLU, dropout, fc2.
              forward(tokens, pad) with pad True at padded positions.

    /usr/bin/python3 scripts/zt_torch.py FILE    prints the model it holds
"""
import inspect
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zt_safetensors  # noqa: E402

FormatError = zt_safetensors.FormatError


def _act(name):
    if name == "gelu":  # zerotrain's GELU is GPT-2's tanh form
        return lambda x: F.gelu(x, approximate="tanh")
    return F.relu


class MLP(nn.Module):
    def __init__(self, width, layers, in_size=0, out_size=0, device=None):
        super().__init__()
        in_size, out_size = in_size or width, out_size or width
        dims = [in_size] + [width] * (layers - 1) + [out_size]
        self.layers = nn.ModuleList(nn.Linear(a, b, device=device)
                                    for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))  # the ReLU on the logits is the model users run
        return x


class Attention(nn.Module):
    def __init__(self, c, heads, dropout, device=None):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(c, c, device=device) for _ in range(3))
        self.proj = nn.Linear(c, c, device=device)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        n, t, c = x.shape
        hs = c // self.heads

        def split(z):  # (n, t, c) -> (n, heads, t, hs)
            return z.view(n, t, self.heads, hs).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = self.drop(att.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(n, t, c))


class FeedForward(nn.Module):
    def __init__(self, c, activation, device=None):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c, device=device)
        self.proj = nn.Linear(4 * c, c, device=device)
        self.act = _act(activation)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, c, heads, dropout, activation, device=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5, device=device)
        self.attn = Attention(c, heads, dropout, device)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5, device=device)
        self.mlp = FeedForward(c, activation, device)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPTLite(nn.Module):
    def __init__(self, vocab_size, n_layer, n_embd, n_head, block_size, dropout=0.0,
                 activation="relu", device=None):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd, device=device)
        self.wpe = nn.Embedding(block_size, n_embd, device=device)
        self.h = nn.ModuleList(Block(n_embd, n_head, dropout, activation, device)
                               for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5, device=device)
        self.lm_head = nn.Linear(n_embd, vocab_size, device=device)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def sinusoidal_table(max_len, e, device=None):
    """The PyTorch tutorials' positional encoding, as zerotrain's classifier adds it."""
    pe = torch.zeros(max_len, e, dtype=torch.float64, device=device)
    pos = torch.arange(max_len, dtype=torch.float64, device=device).unsqueeze(1)
    div = torch.exp(torch.arange(0, e, 2, dtype=torch.float64, device=device) *
                    (-math.log(10000.0) / e))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, :e // 2]
    return pe


class Classifier(nn.Module):
    def __init__(self, vocab_size, n_layer, n_embd, n_head, hidden_dim, max_len, dropout=0.0,
                 activation="relu", n_classes=2, device=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, n_embd, device=device)
        self.register_buffer("pe", sinusoidal_table(max_len, n_embd, device).float(),
                             persistent=False)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model=n_embd, nhead=n_head, dim_feedforward=hidden_dim,
                                       dropout=dropout, activation=_act(activation),
                                       batch_first=True, norm_first=False, device=device)
            for _ in range(n_layer))
        self.fc1 = nn.Linear(n_embd, hidden_dim, device=device)
        self.fc2 = nn.Linear(hidden_dim, n_classes, device=device)

    def forward(self, tokens, pad=None):
        if pad is None:
            pad = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
        x = self.drop(self.embedding(tokens) + self.pe[:tokens.shape[1]].to(self.fc1.weight.dtype))
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)  # mean over the valid positions
        return self.fc2(self.drop(F.relu(self.fc1(pooled))))


MODELS = {"mlp": MLP, "gptlite": GPTLite, "classifier": Classifier}

# The arguments each model takes, with zerotrain's bounds (models/registry.c):
# (low, high) for an integer, a tuple of strings for a choice, a float range
# [low, high) for the dropout. n_classes is PyTorch's alone (the file's fc2).
_W, _L, _S = 1 << 24, 1 << 16, 1 << 20
ARGS = {
    "mlp": {"width": (1, _W), "layers": (2, _L), "in_size": (1, _W), "out_size": (2, _W)},
    "gptlite": {"n_layer": (1, _L), "n_embd": (1, _W), "n_head": (1, _L),
                "block_size": (1, _S), "vocab_size": (1, 2**31 - 1),
                "activation": ("relu", "gelu"), "dropout": (0.0, 1.0)},
    "classifier": {"n_layer": (1, _L), "n_embd": (1, _W), "n_head": (1, _L),
                   "hidden_dim": (1, _W), "max_len": (1, _S), "vocab_size": (1, 2**31 - 1),
                   "activation": ("relu", "gelu"), "dropout": (0.0, 1.0),
                   "n_classes": (1, _W)},
}


def check_args(name, args, where="args"):
    """FormatError unless args (a dict) are arguments model `name` takes:
    known keys, every required one, values of the right type in range, heads
    dividing the width."""
    if name not in MODELS:
        raise FormatError(f"{where}: model '{name}' is not one of {', '.join(MODELS)}")
    if not isinstance(args, dict):
        raise FormatError(f"{where}: the model arguments are not a JSON object")
    spec = ARGS[name]
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise FormatError(f"{where}: {name} takes no argument {unknown[0]!r} (it takes "
                          f"{', '.join(spec)})")
    params = inspect.signature(MODELS[name]).parameters
    missing = [k for k in spec if k not in args and params[k].default is inspect.Parameter.empty]
    if missing:
        raise FormatError(f"{where}: {name} needs argument {missing[0]!r}")
    for k, v in args.items():
        kind = spec[k]
        if isinstance(kind[0], str):
            ok, want = isinstance(v, str) and v in kind, " or ".join(kind)
        elif isinstance(kind[0], float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and \
                kind[0] <= v < kind[1]
            want = f"a number in [{kind[0]:g}, {kind[1]:g})"
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and kind[0] <= v <= kind[1]
            want = f"an integer from {kind[0]} to {kind[1]}"
        if not ok:
            raise FormatError(f"{where}: {name} argument {k} is {json.dumps(v)[:40]}; "
                              f"expected {want}")
    if "n_head" in args and args["n_embd"] % args["n_head"]:
        raise FormatError(f"{where}: {name}'s n_embd {args['n_embd']} is not a multiple of "
                          f"n_head {args['n_head']}")


def build(name, args, device=None):
    """The nn.Module of zerotrain model `name` from its arguments (the
    metadata's zerotrain.model_args), on the CPU in float32 (device="meta":
    shapes only, no memory)."""
    model = MODELS[name](**args, device=device)
    model.zt_model, model.zt_args = name, dict(args)
    return model


_FLOATS = "F32, F64, F16 or BF16"


def _check_tensors(path, name, args, tensors):
    """FormatError unless tensors are exactly the state_dict of model `name`
    with args: the same names and shapes, float values."""
    what = f"model {name} {json.dumps(args, sort_keys=True)}"
    want = {k: tuple(v.shape) for k, v in build(name, args, device="meta").state_dict().items()}
    for k, arr in tensors.items():
        if k not in want:
            raise FormatError(f"{path}: tensor '{k}' is not a tensor of {what} (the file holds "
                              f"another model, or other names)")
        if arr.dtype.kind != "f":
            raise FormatError(f"{path}: tensor '{k}' is {zt_safetensors._dtype_name(arr)}; "
                              f"the module's parameters read {_FLOATS} (other bytes are not "
                              f"reinterpreted as floats)")
        if tuple(arr.shape) != want[k]:
            raise FormatError(f"{path}: tensor '{k}' has shape {list(arr.shape)}; {what} "
                              f"needs {list(want[k])}")
    for k, shape in want.items():
        if k not in tensors:
            raise FormatError(f"{path}: no tensor '{k}' (shape {list(shape)}), which {what} "
                              f"needs")


def load(path, dtype=torch.float32, model=None, args=None):
    """(module, metadata) from a safetensors file; the model and its
    arguments come from the metadata unless given. Strict: every tensor
    must match (FormatError otherwise)."""
    tensors, meta = zt_safetensors.read(path)
    where = f"{path}: the arguments given"
    if model is None:
        model = meta.get("zerotrain.model")
        if model is None:
            raise FormatError(f"{path}: no zerotrain.model / zerotrain.model_args metadata: "
                              f"pass model= and args=")
        if model not in MODELS:
            raise FormatError(f"{path}: zerotrain.model: model '{model[:40]}' is not one of "
                              f"{', '.join(MODELS)}")
    if args is None:
        text = meta.get("zerotrain.model_args")
        if not text:
            raise FormatError(f"{path}: no zerotrain.model_args metadata: pass args=")
        where = f"{path}: zerotrain.model_args"
        try:
            args = zt_safetensors.strict_json(text)
        except FormatError as e:
            raise FormatError(f"{where}: {e}") from None
    check_args(model, args, where)
    args = dict(args)
    fc2 = tensors.get("fc2.weight")
    if model == "classifier" and "n_classes" not in args and fc2 is not None and fc2.ndim == 2:
        args["n_classes"] = int(fc2.shape[0])
        check_args(model, args, f"{path}: fc2.weight's rows")
    _check_tensors(path, model, args, tensors)
    m = build(model, args)
    state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}
    m.load_state_dict(state, strict=True)
    m.zt_meta = meta
    return m.to(dtype).eval(), meta


def char_vocab(meta):
    """The character vocabulary of a gptlite file (id i is the i-th
    character), or None for other tokenizers."""
    chars = meta.get("zerotrain.chars")
    return list(chars) if chars else None


def encode(text, meta):
    """Token ids of text under the file's character vocabulary."""
    stoi = {c: i for i, c in enumerate(char_vocab(meta) or [])}
    missing = sorted(set(text) - set(stoi))
    if missing:
        raise ValueError(f"characters outside the vocabulary: {missing}")
    return [stoi[c] for c in text]


def decode(ids, meta):
    chars = char_vocab(meta)
    return "".join(chars[int(i)] for i in ids)


def save(model, path, step=None, dtype=np.float32, bf16=False):
    """Writes model's state_dict as safetensors with zerotrain's metadata
    (model.zt_model / model.zt_args, as load and build set them)."""
    meta = {"format": "pt", "zerotrain.model": model.zt_model,
            "zerotrain.model_args": json.dumps(model.zt_args)}
    for key in ("zerotrain.tokenizer", "zerotrain.chars"):  # carried over from load
        if key in getattr(model, "zt_meta", {}):
            meta[key] = model.zt_meta[key]
    if step is not None:
        meta["zerotrain.step"] = str(step)
    state = {k: v.detach().cpu().double().numpy().astype(dtype)
             for k, v in model.state_dict().items()}
    zt_safetensors.write(path, state, meta, bf16=set(state) if bf16 else ())


def _printable(text):
    """text with every character a terminal would act on (controls, bidi
    overrides) written as an escape, as zerotrain's own messages do: tensor
    names and metadata come from the file."""
    return "".join(c if c == "\n" or (c.isprintable() and c not in "\u2028\u2029")
                   else f"\\x{ord(c):02X}" if ord(c) < 0x100 else f"\\u{{{ord(c):04X}}}"
                   for c in str(text))


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    try:
        model, meta = load(argv[1])
    except (FormatError, OSError) as e:
        print(f"zt_torch.py: error: {_printable(e)}", file=sys.stderr)
        return 2
    n = sum(p.numel() for p in model.parameters())
    print(_printable(f"{argv[1]}: zerotrain {meta.get('zerotrain.model')} at step "
                     f"{meta.get('zerotrain.step', '?')}, {n} parameters, "
                     f"args {meta.get('zerotrain.model_args')}"))
    print(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
