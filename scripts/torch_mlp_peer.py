#!/usr/bin/python3
"""PyTorch DDP peer for zerotrain's CPU benchmark (scripts/bench-cpu.sh).

Trains the benchmark MLP of models.md section 1 (Linear+ReLU layers, ReLU on the
logits too, cross-entropy) with DistributedDataParallel over gloo on this host,
AdamW in fp32, and prints one JSON line with the throughput:

    {"tool": "torch-ddp", "np": 2, "threads_per_rank": 1, "samples_per_sec": ..., ...}

samples_per_sec is the global batch over the median step time of the timed steps
(the first --warmup steps are not timed: they include allocator growth and gloo's
first-use setup). samples_per_sec_mean uses DeepSpeed's throughput-timer
convention instead (all steps after the first 2), which is what zerotrain's
--report gives, so the two tools can be compared either way.

The data is synthetic as in models.md (x ~ U(-10, 10), y = floor(x.x) mod out) but
drawn with torch's generator, not zerotrain's counter PRNG: throughput does not
depend on the values.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def build_mlp(in_size, width, layers, out_size):
    dims = [in_size] + [width] * (layers - 1) + [out_size]
    mods = []
    for a, b in zip(dims[:-1], dims[1:]):
        mods += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def free_port():
    # Bind to port 0 so the kernel picks an unused one; a race with another process
    # taking it before gloo binds is possible but not on a benchmark machine.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_batches(n, micro, in_size, out_size, seed):
    # A few distinct batches, generated before timing, cycled through: fresh data
    # each step without putting data generation inside the timed region.
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        x = torch.rand(micro, in_size, generator=g) * 20.0 - 10.0
        y = torch.floor((x.double() * x.double()).sum(dim=1)).long() % out_size
        batches.append((x, y))
    return batches


def worker(rank, args, port, result_q):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.np)
    torch.manual_seed(args.seed)  # same init on every rank; DDP also broadcasts it
    model = build_mlp(args.in_size, args.width, args.layers, args.out_size)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    micro = args.batch // args.np
    batches = make_batches(4, micro, args.in_size, args.out_size, args.seed * 1000 + rank)

    times = []
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        # Line the ranks up so that no step's time includes waiting for a rank
        # still finishing the previous one.
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    # The step time that counts is the slowest rank's.
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        result_q.put((t.tolist(), loss.item()))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=1, help="number of DDP processes")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per process (default: cores / np)")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--in-size", type=int, default=0, help="default: width")
    ap.add_argument("--out-size", type=int, default=0, help="default: width")
    ap.add_argument("--batch", type=int, default=256, help="global batch per step")
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.in_size = args.in_size or args.width
    args.out_size = args.out_size or args.width
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.np)
    if args.batch % args.np:
        sys.exit(f"error: --batch {args.batch} is not divisible by --np {args.np}")
    if args.layers < 2:
        sys.exit("error: --layers must be at least 2")

    ctx = mp.get_context("spawn")
    result_q = ctx.SimpleQueue()
    mp.spawn(worker, args=(args, free_port(), result_q), nprocs=args.np, join=True)
    times, loss = result_q.get()

    timed = times[args.warmup:]
    median = statistics.median(timed)
    after2 = times[2:] if len(times) > 2 else times
    model = build_mlp(args.in_size, args.width, args.layers, args.out_size)
    weights = sum(m.weight.numel() for m in model if isinstance(m, torch.nn.Linear))
    print(json.dumps({
        "tool": "torch-ddp",
        "torch": torch.__version__,
        "np": args.np,
        "threads_per_rank": args.threads,
        "width": args.width, "layers": args.layers,
        "in_size": args.in_size, "out_size": args.out_size,
        "params": sum(p.numel() for p in model.parameters()),
        "linear_weights": weights,
        "batch": args.batch,
        "timed_steps": len(timed),
        "median_step_s": median,
        "samples_per_sec": args.batch / median,
        "samples_per_sec_mean": args.batch * len(after2) / sum(after2),
        "final_loss": loss,
    }), flush=True)


if __name__ == "__main__":
    main()
