#!/usr/bin/env python3
"""PyTorch peer for zerotrain's GPU throughput table (scripts/gpu-check.sh).

Trains GPT-lite (models.md section 2, models/gptlite.c) on one device with
AdamW and prints one JSON line:

    {"mode": "eager", "dtype": "bf16", "tokens_per_s": ..., "params": ..., ...}

The model is zerotrain's, tensor for tensor, so the parameter counts match:
token and learned position embeddings (no embedding dropout); pre-LayerNorm
blocks x += drop(proj(attn(ln_1(x)))), x += drop(fc_proj(act(fc(ln_2(x)))))
with the query/key/value Linear(C, C) layers stacked into one Linear(C, 3C)
as zerotrain stores them (same parameters, one GEMM), causal attention with
dropout on the attention weights, ReLU (or GELU, tanh form) MLP of width 4C;
final LayerNorm and a Linear(C, vocab) head with bias. torch's default inits
are zerotrain's: Linear weight and bias U(+-1/sqrt(fan_in)), Embedding N(0, 1),
LayerNorm ones and zeros. LayerNorm eps 1e-5. Loss: mean cross-entropy over
all B*T positions. Gradient clipping at 1.0 (zerotrain's default).

Attention: "math" materialises the (B, H, T, T) scores as zerotrain does;
"sdpa" is F.scaled_dot_product_attention (flash attention), what a PyTorch
user would reach for (torch >= 2.0).

Data is random token batches of the vocabulary (65: tiny shakespeare's
characters), made on the device before timing: data loading is not what is
measured. tokens_per_s = batch * block_size / median step time over the timed
steps (after --warmup untimed steps, which include torch.compile's compilation
and allocator growth); each step ends in a device synchronisation.

dtype fp32 keeps TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, or
fp32_precision = "ieee" where torch has it), as zerotrain's default; --tf32
turns it on (the model has no convolutions, so cuDNN's setting is moot). bf16
is torch.autocast(bfloat16) with fp32 parameters and optimizer state. AdamW is
fused on CUDA.

    python3 scripts/torch_gptlite_peer.py --mode compile --dtype bf16
    /usr/bin/python3 scripts/torch_gptlite_peer.py --device cpu --n-layer 1 --n-embd 32 \\
        --n-head 2 --block-size 16 --steps 2        (a smoke test, any torch >= 1.13)
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads, block, dropout, gelu, attention):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.attention = attention
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)
        self.act = nn.GELU(approximate="tanh") if gelu else nn.ReLU()
        self.drop = nn.Dropout(dropout)
        self.register_buffer("causal", torch.ones(block, block, dtype=torch.bool).tril(),
                             persistent=False)

    def attend(self, x):
        n, t, c = x.shape
        hs = c // self.heads
        # (n, t, 3c) -> three (n, heads, t, hs): head k is channels [k*hs, (k+1)*hs)
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(n, t, self.heads, hs).transpose(1, 2)
        k = k.view(n, t, self.heads, hs).transpose(1, 2)
        v = v.view(n, t, self.heads, hs).transpose(1, 2)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.causal[:t, :t], float("-inf")).softmax(dim=-1)
            y = F.dropout(att, self.dropout, self.training) @ v
        return self.proj(y.transpose(1, 2).reshape(n, t, c))

    def forward(self, x):
        x = x + self.drop(self.attend(self.ln_1(x)))
        return x + self.drop(self.fc_proj(self.act(self.fc(self.ln_2(x)))))


class GPTLite(nn.Module):
    def __init__(self, vocab, block, c, heads, layers, dropout, gelu, attention):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.blocks = nn.ModuleList(Block(c, heads, block, dropout, gelu, attention)
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = nn.Linear(c, vocab)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--attention", choices=["math", "sdpa"], default="math")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0, help="gradient clipping norm (0: off)")
    ap.add_argument("--tf32", action="store_true", help="let fp32 matmuls use TF32")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.n_embd % args.n_head:
        sys.exit(f"error: --n-embd {args.n_embd} is not divisible by --n-head {args.n_head}")
    if args.steps < 1:
        sys.exit("error: --steps must be at least 1")
    if args.mode == "compile" and not hasattr(torch, "compile"):
        sys.exit(f"error: --mode compile needs torch >= 2.0 (this is {torch.__version__})")
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"error: --attention sdpa needs torch >= 2.0 (this is {torch.__version__})")

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        # torch >= 2.9 spells it fp32_precision (and refuses a mix of the two spellings)
        matmul = torch.backends.cuda.matmul
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "tf32" if args.tf32 else "ieee"
        else:
            matmul.allow_tf32 = args.tf32
    torch.manual_seed(args.seed)
    model = GPTLite(args.vocab, args.block_size, args.n_embd, args.n_head, args.n_layer,
                    args.dropout, args.activation == "gelu", args.attention).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay, **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if args.mode == "compile" else model

    # A few distinct batches, cycled: fresh tokens each step, none made while timing.
    g = torch.Generator(device=dev).manual_seed(args.seed)
    batches = []
    for _ in range(4):
        w = torch.randint(0, args.vocab, (args.batch, args.block_size + 1), device=dev,
                          generator=g)
        batches.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    model.train()
    times, loss = [], None
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=args.dtype == "bf16"):
            logits = step_model(x)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1))
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)

    timed = times[args.warmup:]
    median = statistics.median(timed)
    tokens = args.batch * args.block_size
    print(json.dumps({
        "tool": "torch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "mode": args.mode,
        "dtype": args.dtype,
        "attention": args.attention,
        "tf32": args.tf32,
        "params": params,
        "n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head,
        "block_size": args.block_size, "vocab": args.vocab, "batch": args.batch,
        "dropout": args.dropout, "activation": args.activation,
        "timed_steps": len(timed),
        "median_step_s": median,
        "tokens_per_s": tokens / median,
        "peak_mem_gb": torch.cuda.max_memory_allocated(dev) / 1e9 if cuda else None,
        "final_loss": loss.item(),
    }), flush=True)


if __name__ == "__main__":
    main()
