#!/usr/bin/python3
"""PyTorch DDP peer for zerotrain's CPU benchmark of the transformers (scripts/bench-cpu.sh).

Trains GPT-lite (models.md section 2) or the transformer classifier (section 3)
with DistributedDataParallel over gloo on this host, AdamW in fp32, dropout 0,
no gradient clipping, and prints one JSON line with the throughput:

    {"tool": "torch-ddp", "model": "gptlite", "np": 2, "samples_per_sec": ..., ...}

It does the work zerotrain does for the same flags:

  - gptlite: tiny shakespeare's characters (vocabulary = the file's sorted
    unique characters, 65), training windows of block_size + 1 tokens at
    random offsets in the first 90% of the file; token + learned position
    embeddings, pre-LayerNorm blocks (query/key/value stacked in one
    Linear(C, 3C) as zerotrain stores them, causal attention materialising the
    (B, H, T, T) scores, ReLU MLP of width 4C), final LayerNorm, Linear(C,
    vocab); mean cross-entropy over all B*T positions.
  - classifier: imdb-2500.csv (`review,sentiment`; every tenth row is the
    validation split and is left out), `<br />` -> space, UTF-8 bytes (vocab
    258: bytes, <|endoftext|> 256, <pad> 257) cut to max_len; the training
    reviews shuffled each epoch, each rank's micro-batch padded to its longest
    review with a key-padding mask; token embedding + sinusoidal positions,
    nn.TransformerEncoderLayer (batch_first, post-LN, ReLU), mean over the
    non-padded positions, Linear(E, H) + ReLU + Linear(H, 2), cross-entropy.

Global batch --batch, micro-batch --batch / --np per process, no gradient
accumulation. Each rank's batches are made before its step's clock starts, and
the ranks meet at a barrier before each step (as scripts/torch_mlp_peer.py).

samples_per_sec is the global batch over the median step time of the timed
steps (after --warmup untimed ones); samples_per_sec_mean uses DeepSpeed's
throughput-timer convention instead (all steps after the first 2), which is
what zerotrain's --report gives. tokens_per_sec(_mean) count the tokens the
model ran on, padding included (for gptlite batch * block_size per step), with
the same two conventions; mean_padded_len is the classifier's mean padded
micro-batch length.

    /usr/bin/python3 scripts/torch_transformer_cpu_peer.py --model gptlite --np 2 \\
        --data ../shared/data/tinyshakespeare/input.txt --n-layer 4 --n-embd 128 \\
        --n-head 4 --block-size 128 --batch 16 --steps 10
    /usr/bin/python3 scripts/torch_transformer_cpu_peer.py --model classifier --np 2 \\
        --data ../shared/data/imdb/imdb-2500.csv --n-layer 2 --embed-dim 128 --n-head 4 \\
        --hidden-dim 256 --max-len 256 --batch 16 --steps 10
"""
import argparse
import csv
import json
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

PAD_ID, BYTE_VOCAB = 257, 258  # data/tokenizer.h's byte fallback


# ---------------------------------------------------------------- GPT-lite

class Block(nn.Module):
    """Pre-LN block: x += proj(attn(ln_1(x))); x += fc_proj(relu(fc(ln_2(x))))."""

    def __init__(self, c, heads, block):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)
        # A plain tensor, not a buffer: gloo cannot broadcast bool buffers (DDP's
        # initial sync), and every rank builds the same one.
        self.causal = torch.ones(block, block, dtype=torch.bool).tril()

    def forward(self, x):
        n, t, c = x.shape
        hs = c // self.heads
        # (n, t, 3c) -> three (n, heads, t, hs): head k is channels [k*hs, (k+1)*hs)
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q = q.view(n, t, self.heads, hs).transpose(1, 2)
        k = k.view(n, t, self.heads, hs).transpose(1, 2)
        v = v.view(n, t, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.causal[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(n, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(F.relu(self.fc(self.ln_2(x))))


class GPTLite(nn.Module):
    def __init__(self, vocab, block, c, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.blocks = nn.ModuleList(Block(c, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = nn.Linear(c, vocab)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))

    def matmul_weights(self):
        """Weights of the per-token matmuls (the embeddings are lookups)."""
        lin = [m for m in self.modules() if isinstance(m, nn.Linear)]
        return sum(m.weight.numel() for m in lin)


class TextData:
    """data/text.h's char-level training split; windows at random offsets."""

    def __init__(self, path, block, seed):
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        chars = sorted(set(text))
        stoi = {ch: i for i, ch in enumerate(chars)}
        ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
        n_train = ids.numel() - ids.numel() // 10
        if n_train <= block + 1:
            sys.exit(f"error: {path}: {n_train} training characters, fewer than one window")
        self.ids, self.n_train, self.block, self.vocab = ids[:n_train], n_train, block, len(chars)
        self.g = torch.Generator().manual_seed(seed)

    def batch(self, n):
        off = torch.randint(0, self.n_train - self.block, (n,), generator=self.g)
        w = self.ids[off[:, None] + torch.arange(self.block + 1)[None, :]]
        return (w[:, :-1].contiguous(),), w[:, 1:].contiguous(), n * self.block


# ---------------------------------------------------------------- classifier

def sinusoidal_table(max_len, e):
    """The PyTorch tutorials' positional encoding."""
    pe = torch.zeros(max_len, e)
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, e, 2, dtype=torch.float32) * (-math.log(10000.0) / e))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class Classifier(nn.Module):
    def __init__(self, vocab, max_len, e, heads, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, e)
        self.register_buffer("pe", sinusoidal_table(max_len, e))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model=e, nhead=heads, dim_feedforward=hidden,
                                       dropout=0.0, activation="relu", batch_first=True,
                                       norm_first=False)
            for _ in range(layers))
        self.fc1 = nn.Linear(e, hidden)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, tokens, pad):
        x = self.embedding(tokens) + self.pe[:tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)  # mean over valid positions
        return self.fc2(F.relu(self.fc1(pooled)))

    def matmul_weights(self):
        """Weights of the per-token matmuls (the head runs once per sample)."""
        n = 0
        for layer in self.layers:
            n += layer.self_attn.in_proj_weight.numel() + layer.self_attn.out_proj.weight.numel()
            n += layer.linear1.weight.numel() + layer.linear2.weight.numel()
        return n


class ReviewData:
    """data/labelled.h's CSV training split, byte tokens; shuffled each epoch."""

    def __init__(self, path, max_len, seed):
        csv.field_size_limit(1 << 30)
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows or "review" not in rows[0] or "sentiment" not in rows[0]:
            sys.exit(f"error: {path}: expected a CSV with columns review,sentiment")
        labels = {"negative": 0, "positive": 1}
        self.samples = [(list(r["review"].replace("<br />", " ").encode("utf-8"))[:max_len],
                         labels[r["sentiment"]])
                        for j, r in enumerate(rows) if j % 10 != 9]
        self.g = torch.Generator().manual_seed(seed)
        self.order, self.pos = [], 0

    def batch(self, n):
        picked = []
        for _ in range(n):
            if self.pos == len(self.order):
                self.order = torch.randperm(len(self.samples), generator=self.g).tolist()
                self.pos = 0
            picked.append(self.samples[self.order[self.pos]])
            self.pos += 1
        t = max(len(ids) for ids, _ in picked)  # padded to this micro-batch's longest
        tokens = torch.full((n, t), PAD_ID, dtype=torch.long)
        pad = torch.ones(n, t, dtype=torch.bool)
        for k, (ids, _) in enumerate(picked):
            tokens[k, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            pad[k, :len(ids)] = False
        labels = torch.tensor([y for _, y in picked], dtype=torch.long)
        return (tokens, pad), labels, n * t


# ---------------------------------------------------------------- DDP run

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, result_q):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.np)
    torch.manual_seed(args.seed)  # same init on every rank; DDP also broadcasts it
    if args.model == "gptlite":
        data = TextData(args.data, args.block_size, args.seed * 1000 + rank)
        model = GPTLite(data.vocab, args.block_size, args.n_embd, args.n_head, args.n_layer)
    else:
        data = ReviewData(args.data, args.max_len, args.seed * 1000 + rank)
        model = Classifier(BYTE_VOCAB, args.max_len, args.embed_dim, args.n_head,
                           args.hidden_dim, args.n_layer)
    model.train()  # dropout is 0; train mode keeps torch off its inference fast path
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    micro = args.batch // args.np

    times, tokens, loss = [], [], None
    for step in range(args.warmup + args.steps):
        inputs, target, n_tok = data.batch(micro)
        dist.barrier()  # no step's time includes waiting for a rank still on the last
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = ddp(*inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        tokens.append(n_tok)
    # The step time that counts is the slowest rank's; the tokens are every rank's.
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    n = torch.tensor(tokens, dtype=torch.float64)
    dist.all_reduce(n, op=dist.ReduceOp.SUM)
    if rank == 0:
        result_q.put((t.tolist(), n.tolist(), loss.item(), data.vocab if args.model == "gptlite"
                      else BYTE_VOCAB))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["gptlite", "classifier"], required=True)
    ap.add_argument("--data", required=True,
                    help="gptlite: tiny shakespeare's input.txt; classifier: imdb-2500.csv")
    ap.add_argument("--np", type=int, default=1, help="number of DDP processes")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per process (default: cores / np)")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128, help="gptlite width C")
    ap.add_argument("--block-size", type=int, default=128, help="gptlite context T")
    ap.add_argument("--embed-dim", type=int, default=128, help="classifier width E")
    ap.add_argument("--hidden-dim", type=int, default=256, help="classifier FFN width H")
    ap.add_argument("--max-len", type=int, default=256, help="classifier tokens per review")
    ap.add_argument("--batch", type=int, default=16, help="global batch per step")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.np)
    if args.np < 1 or args.batch % args.np:
        sys.exit(f"error: --batch {args.batch} is not divisible by --np {args.np}")
    width = args.n_embd if args.model == "gptlite" else args.embed_dim
    if width % args.n_head:
        sys.exit(f"error: width {width} is not divisible by --n-head {args.n_head}")
    if args.steps < 1 or args.warmup < 0:
        sys.exit("error: need --steps >= 1 and --warmup >= 0")
    if not os.path.isfile(args.data):
        sys.exit(f"error: no data file {args.data}")

    ctx = mp.get_context("spawn")
    result_q = ctx.SimpleQueue()
    mp.spawn(worker, args=(args, free_port(), result_q), nprocs=args.np, join=True)
    times, tokens, loss, vocab = result_q.get()

    timed, timed_tok = times[args.warmup:], tokens[args.warmup:]
    median = statistics.median(timed)
    after2 = slice(2, None) if len(times) > 2 else slice(None)
    mean_s = sum(times[after2]) / len(times[after2])
    tok_step = sum(timed_tok) / len(timed_tok)
    if args.model == "gptlite":
        model = GPTLite(vocab, args.block_size, args.n_embd, args.n_head, args.n_layer)
        shape = {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head,
                 "block_size": args.block_size, "vocab": vocab}
    else:
        model = Classifier(vocab, args.max_len, args.embed_dim, args.n_head, args.hidden_dim,
                           args.n_layer)
        shape = {"n_layer": args.n_layer, "embed_dim": args.embed_dim, "n_head": args.n_head,
                 "hidden_dim": args.hidden_dim, "max_len": args.max_len, "vocab": vocab}
    out = {
        "tool": "torch-ddp",
        "torch": torch.__version__,
        "model": args.model,
        "np": args.np,
        "threads_per_rank": args.threads,
        **shape,
        "params": sum(p.numel() for p in model.parameters()),
        "matmul_weights": model.matmul_weights(),
        "batch": args.batch,
        "timed_steps": len(timed),
        "median_step_s": median,
        "samples_per_sec": args.batch / median,
        "samples_per_sec_mean": args.batch / mean_s,
        "tokens_per_sec": tok_step / median,
        "tokens_per_sec_mean": sum(tokens[after2]) / sum(times[after2]),
        "final_loss": loss,
    }
    if args.model == "classifier":
        out["mean_padded_len"] = sum(tokens) / len(tokens) / args.batch
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
