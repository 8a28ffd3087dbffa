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


def _act(name):
    if name == "gelu":  # zerotrain's GELU is GPT-2's tanh form
        return lambda x: F.gelu(x, approximate="tanh")
    return F.relu


class MLP(nn.Module):
    def __init__(self, width, layers, in_size=0, out_size=0, **_):
        super().__init__()
        in_size, out_size = in_size or width, out_size or width
        dims = [in_size] + [width] * (layers - 1) + [out_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))  # the ReLU on the logits is the model users run
        return x


class Attention(nn.Module):
    def __init__(self, c, heads, dropout):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.proj = nn.Linear(c, c)
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
    def __init__(self, c, activation):
        super().__init__()
        self.fc, self.proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.act = _act(activation)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, c, heads, dropout, activation):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(c, heads, dropout)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = FeedForward(c, activation)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPTLite(nn.Module):
    def __init__(self, vocab_size, n_layer, n_embd, n_head, block_size, dropout=0.0,
                 activation="relu", **_):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, dropout, activation)
                               for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def sinusoidal_table(max_len, e):
    """The PyTorch tutorials' positional encoding, as zerotrain's classifier adds it."""
    pe = torch.zeros(max_len, e, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    div = torch.exp(torch.arange(0, e, 2, dtype=torch.float64) * (-math.log(10000.0) / e))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, :e // 2]
    return pe


class Classifier(nn.Module):
    def __init__(self, vocab_size, n_layer, n_embd, n_head, hidden_dim, max_len, dropout=0.0,
                 activation="relu", n_classes=2, **_):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, n_embd)
        self.register_buffer("pe", sinusoidal_table(max_len, n_embd).float(), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model=n_embd, nhead=n_head, dim_feedforward=hidden_dim,
                                       dropout=dropout, activation=_act(activation),
                                       batch_first=True, norm_first=False)
            for _ in range(n_layer))
        self.fc1 = nn.Linear(n_embd, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, n_classes)

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


def build(name, args):
    """The nn.Module of zerotrain model `name` from its arguments (the
    metadata's zerotrain.model_args), on the CPU in float32."""
    model = MODELS[name](**args)
    model.zt_model, model.zt_args = name, dict(args)
    return model


def load(path, dtype=torch.float32, model=None, args=None):
    """(module, metadata) from a safetensors file; the model and its
    arguments come from the metadata unless given. Strict: every tensor
    must match."""
    tensors, meta = zt_safetensors.read(path)
    model = model or meta.get("zerotrain.model")
    if args is None:
        args = json.loads(meta.get("zerotrain.model_args", "null") or "null")
    if model not in MODELS or args is None:
        raise ValueError(f"{path}: no zerotrain.model / zerotrain.model_args metadata: "
                         f"pass model= and args=")
    if "classifier" == model:
        args.setdefault("n_classes", int(tensors["fc2.weight"].shape[0]))
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


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    model, meta = load(argv[1])
    n = sum(p.numel() for p in model.parameters())
    print(f"{argv[1]}: zerotrain {meta.get('zerotrain.model')} at step "
          f"{meta.get('zerotrain.step', '?')}, {n} parameters, args {meta.get('zerotrain.model_args')}")
    print(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
