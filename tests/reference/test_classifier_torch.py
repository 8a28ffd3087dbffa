#!/usr/bin/python3
"""PyTorch reference test for zerotrain's transformer classifier (models.md section 3).

zerotrain trains a small classifier (2 layers, E 32, 4 heads, H 64, max_len 48,
byte tokenizer, dropout 0) on a CSV this script writes (79 reviews of 3 to ~150
bytes, so batches hold padded and truncated samples; some with `<br />`,
commas, quotes, a newline and non-ASCII text) for 5 AdamW steps with gradient
accumulation, at 1 rank (ZeRO stage 0, GAS 8) and 2 ranks (stage 3, every unit
partitioned, GAS 4). The 5 steps cross an epoch boundary of the shuffled
training set. This script rebuilds the model from torch.nn modules
(nn.TransformerEncoderLayer, batch_first, post-LN, with src_key_padding_mask;
the PyTorch tutorials' sinusoidal table; masked mean pooling; Linear + ReLU +
Linear head) in float64, loads zerotrain's dumped initial weights, rebuilds the
batches itself from data/labelled.h, data/tokenizer.h and data/sampler.h
(validation rows removed, the sampler's keyed shuffle) and checks:

  - the step-1 loss to 1e-5 relative;
  - the step-1 gradient (--dump-grads) per tensor to 1e-4 relative L2;
  - all 5 AdamW losses to 1e-5 relative and the final weights per tensor to
    1e-4 relative L2; the attention key bias (a third of in_proj_bias, zero
    true gradient: Adam turns fp32 rounding noise there into drift) is checked
    apart, see ztref.check_null_rows;
  - the final validation loss (--eval-interval) to 1e-5 relative, and the
    validation accuracy exactly.

    /usr/bin/python3 tests/reference/test_classifier_torch.py [--zerotrain ./zerotrain]

Exit status 0 when every check passes, 1 on a failed check, 2 when zerotrain
could not be run.
"""
import csv
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from ztref import (adamw_config, reference_args, CheckFailed, Entry, adamw, check_init, check_permute,  # noqa: E402
                   check_prng, check_training_run, entries_numel, find_zerotrain,
                   flatten_entries, global_batch_indices, load_entries, read_dump, rel_err,
                   rel_l2, report, run_zerotrain)

N_LAYER, N_HEAD, EMBED, HIDDEN, MAX_LEN = 2, 4, 32, 64, 48
SEED = 1234
STEPS = 5
N_REVIEWS = 79  # 7 validation rows (j % 10 == 9), 72 training rows
# Byte tokenizer (data/tokenizer.h): ids 0-255 bytes, 256 <|endoftext|>, 257 <pad>.
VOCAB, PAD_ID = 258, 257

# tb 16 with micro 2: GAS 8 at 1 rank, GAS 4 at 2 ranks. 72 // 16 = 4 steps per
# epoch, so step 5 reads epoch 1's permutation.
# Clipping 1.0 is zerotrain's default (DeepSpeed's since PR #8068), written out
# so the test does not lean on it; the reference clips the same way.
CONFIG = adamw_config(16, 2, 1.0)

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
PARAM_RTOL = 1e-4
EVAL_RTOL = 1e-5


# ---------------------------------------------------------------- data

WORDS = ("the film movie plot acting was great terrible boring brilliant awful "
         "a an and but not really very quite of it this that actors story "
         "ending music scenes director").split()
EXTRAS = ["<br />", "<br /><br />", ",", ", and", "\"quoted\"", "it's", "café", "naïve",
          "5/10", "10/10!", "(sigh)", "\"so-called\" hero,"]


def make_reviews(n):
    """Deterministic reviews and labels: byte lengths from 3 to ~150, so a batch
    of max_len 48 holds padded and truncated samples; `<br />` (never at either
    end), commas, double quotes, one embedded newline, non-ASCII UTF-8."""
    rnd = random.Random(20240607)
    targets = [3, 5, 9, 14, 20, 27, 33, 40, 46, 47, 48, 49, 50, 55, 62, 75, 90, 110, 130, 150]
    rows = []
    for i in range(n):
        target = targets[(i * 7) % len(targets)]
        words = [rnd.choice(WORDS)]
        while len(" ".join(words).encode()) < target:
            pool = EXTRAS if rnd.random() < 0.2 else WORDS
            words.append(rnd.choice(pool))
        while words[-1].startswith("<br"):
            words[-1] = rnd.choice(WORDS)
        text = " ".join(words)
        if i == 1:
            text = "Bad"
        if i == 12:
            text = "First line,\nsecond \"line\" of the review"
        label = "positive" if rnd.random() < 0.5 else "negative"
        rows.append((text, label))
    return rows


def tokenize(text):
    """Byte tokenizer of data/labelled.h: `<br />` -> one space, UTF-8 bytes,
    truncated to MAX_LEN."""
    return list(text.replace("<br />", " ").encode("utf-8"))[:MAX_LEN]


class Labelled:
    def __init__(self, rows):
        self.train, self.val = [], []
        for j, (text, label) in enumerate(rows):
            sample = (tokenize(text), {"negative": 0, "positive": 1}[label])
            (self.val if j % 10 == 9 else self.train).append(sample)

    @staticmethod
    def batch(samples):
        """tokens (n, MAX_LEN) padded with PAD_ID, padding mask (True = pad), labels."""
        n = len(samples)
        tokens = torch.full((n, MAX_LEN), PAD_ID, dtype=torch.long)
        pad = torch.ones(n, MAX_LEN, dtype=torch.bool)
        for k, (ids, _) in enumerate(samples):
            tokens[k, :len(ids)] = torch.tensor(ids)
            pad[k, :len(ids)] = False
        labels = torch.tensor([y for _, y in samples])
        return tokens, pad, labels

    def train_batch(self, step, tb):
        # labelled.h: the training set is shuffled by the sampler each epoch.
        idx = global_batch_indices(step, tb, len(self.train), True, SEED)
        return self.batch([self.train[i] for i in idx]), idx


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")  # RFC 4180 quoting where needed
        w.writerow(["review", "sentiment"])
        w.writerows(rows)


# ---------------------------------------------------------------- model

def sinusoidal_table(max_len, e):
    """The PyTorch tutorials' positional encoding."""
    pe = torch.zeros(max_len, e, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    div = torch.exp(torch.arange(0, e, 2, dtype=torch.float64) * (-math.log(10000.0) / e))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.register_buffer("pe", sinusoidal_table(MAX_LEN, EMBED))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model=EMBED, nhead=N_HEAD, dim_feedforward=HIDDEN,
                                       dropout=0.0, activation="relu", batch_first=True,
                                       norm_first=False)
            for _ in range(N_LAYER))
        self.fc1 = nn.Linear(EMBED, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, 2)

    def forward(self, tokens, pad):
        x = self.embedding(tokens) + self.pe[:tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)  # mean over valid positions
        return self.fc2(F.relu(self.fc1(pooled)))


def dump_entries(m):
    """model.h's classifier tensors in dump order, as Entries over m's parameters."""
    lin_e, lin_h = ("uniform", 1 / math.sqrt(EMBED)), ("uniform", 1 / math.sqrt(HIDDEN))
    xavier = ("uniform", math.sqrt(6 / (EMBED + 3 * EMBED)))
    ones, zeros = ("ones",), ("zeros",)
    es = [Entry("embed.embedding.weight", [m.embedding.weight], ("normal",))]
    inits = {"self_attn.in_proj_weight": xavier, "self_attn.in_proj_bias": zeros,
             "self_attn.out_proj.weight": lin_e, "self_attn.out_proj.bias": zeros,
             "linear1.weight": lin_e, "linear1.bias": lin_e,
             "linear2.weight": lin_h, "linear2.bias": lin_h,
             "norm1.weight": ones, "norm1.bias": zeros,
             "norm2.weight": ones, "norm2.bias": zeros}
    for i, layer in enumerate(m.layers):
        params = dict(layer.named_parameters())
        # model.h's order is the layer's state_dict order.
        assert list(params) == list(inits), list(params)
        es += [Entry(f"layers.{i}.{name}", [params[name]], init,
                     null_rows=(EMBED, 2 * EMBED) if name == "self_attn.in_proj_bias" else None)
               for name, init in inits.items()]
    es += [Entry("head.fc1.weight", [m.fc1.weight], lin_e),
           Entry("head.fc1.bias", [m.fc1.bias], lin_e),
           Entry("head.fc2.weight", [m.fc2.weight], lin_h),
           Entry("head.fc2.bias", [m.fc2.bias], lin_h)]
    assert sum(e.numel for e in es) == sum(p.numel() for p in m.parameters())
    return es


def build():
    torch.manual_seed(0)  # weights come from zerotrain's dump
    m = Classifier().double()
    m.train()  # dropout is 0; train mode keeps torch off its inference fast path
    return m, dump_entries(m)


# ---------------------------------------------------------------- torch reference

def evaluate(model, data):
    """(mean loss, accuracy, smallest logit margin) over the validation split."""
    tokens, pad, labels = Labelled.batch(data.val)
    with torch.no_grad():
        logits = model(tokens, pad)
        loss = F.cross_entropy(logits, labels).item()
        acc = (logits.argmax(dim=1) == labels).double().mean().item()
        margin = (logits[:, 0] - logits[:, 1]).abs().min().item()
    return loss, acc, margin


def torch_reference(data, init_flat):
    model, entries = build()
    load_entries(entries, init_flat)
    opt = adamw(model.parameters(), CONFIG["optimizer"]["params"])
    losses, grads, stats, norms = [], None, [], []
    for step in range(STEPS):
        (tokens, pad, labels), _ = data.train_batch(step, CONFIG["train_batch_size"])
        stats.append((int(pad.any(dim=1).sum()), int((~pad).all(dim=1).sum())))
        # The mean over the whole global batch: the gradient every split must give.
        loss = F.cross_entropy(model(tokens, pad), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            grads = flatten_entries(entries, grad=True)  # --dump-grads: before clipping
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                          CONFIG["gradient_clipping"])))
        opt.step()
        losses.append(loss.item())
    return {"losses": np.array(losses), "grads": grads, "final": flatten_entries(entries),
            "eval": evaluate(model, data), "batch_stats": stats, "norms": norms}


# ---------------------------------------------------------------- main

def main():
    args = reference_args(__doc__)
    t_start = time.time()

    exe = find_zerotrain(args.zerotrain)
    if exe is None:
        return 2
    torch.set_num_threads(1)

    tmp = Path(tempfile.mkdtemp(prefix="zt-ref-classifier-"))
    try:
        check_prng()
        check_permute()
        rows = make_reviews(N_REVIEWS)
        csv_path = tmp / "reviews.csv"
        write_csv(csv_path, rows)
        data = Labelled(rows)
        lens = [len(t.replace("<br />", " ").encode()) for t, _ in rows]
        labels = [y for _, y in data.train]
        report(min(lens) < 8 and max(lens) > 2 * MAX_LEN and 0 < sum(labels) < len(labels),
               "review set", f"{len(rows)} reviews ({len(data.train)} train, {len(data.val)} "
               f"validation), {min(lens)}..{max(lens)} bytes, "
               f"{sum(n > MAX_LEN for n in lens)} truncated to {MAX_LEN}, "
               f"{sum(labels)}/{len(labels)} positive in train")

        model_args = ["--model", "classifier", "--data", csv_path, "--n-layer", N_LAYER,
                      "--n-head", N_HEAD, "--embed-dim", EMBED, "--hidden-dim", HIDDEN,
                      "--max-len", MAX_LEN, "--dropout", 0, "--activation", "relu",
                      "--seed", SEED]
        _, entries = build()
        n_params = entries_numel(entries)
        cfg_path = tmp / "config.json"
        cfg_path.write_text(json.dumps(CONFIG))
        run_zerotrain(exe, 1, ["--config", cfg_path] + model_args +
                      ["--steps", 0, "--dump-params", tmp / "init.bin"], tmp)
        init_flat = read_dump(tmp / "init.bin", n_params)
        check_init(entries, init_flat)

        t0 = time.time()
        ref = torch_reference(data, init_flat)
        padded = [p for p, _ in ref["batch_stats"]]
        report(min(padded) > 0 and min(full for _, full in ref["batch_stats"]) > 0,
               "batches with padding", f"padded/full-length samples per global batch of "
               f"{CONFIG['train_batch_size']}: {ref['batch_stats']}")
        moved = rel_l2(ref["final"], init_flat)
        report(moved > 10 * PARAM_RTOL, "weights move",
               f"{STEPS} AdamW steps change the float64 weights by rel L2 {moved:.2e} "
               f"(>= {10 * PARAM_RTOL:.0e}); gradient norms "
               f"{' '.join(f'{v:.4f}' for v in ref['norms'])} (clipped at "
               f"{CONFIG['gradient_clipping']}); torch reference took {time.time() - t0:.1f} s")

        want_loss, want_acc, margin = ref["eval"]
        for np_ in [int(v) for v in args.np.split(",") if v]:
            tag = f"np={np_}"
            rep = check_training_run(tag, exe, np_, CONFIG, model_args, tmp / f"np{np_}",
                                     entries, init_flat, ref, STEPS, LOSS_RTOL, GRAD_RTOL,
                                     PARAM_RTOL, extra=["--eval-interval", STEPS])
            evals = rep.get("eval") or []
            report([e.get("step") for e in evals] == [STEPS], f"{tag} eval points",
                   f"report evaluates after steps {[e.get('step') for e in evals]}, "
                   f"expected [{STEPS}]")
            e = evals[0]
            got = float("nan") if e.get("loss") is None else e["loss"]
            err = rel_err(got, want_loss)
            report(bool(err <= EVAL_RTOL), f"{tag} validation loss after step {STEPS}",
                   f"zerotrain {got:.8f}, torch float64 {want_loss:.8f} over "
                   f"{len(data.val)} reviews, rel err {err:.2e} (tol {EVAL_RTOL:.0e})")
            # An argmax this close to a tie could flip within fp32 rounding.
            if margin > 1e-4:
                report(e.get("accuracy") == want_acc, f"{tag} validation accuracy",
                       f"zerotrain {e.get('accuracy')}, torch {want_acc} "
                       f"(smallest logit margin {margin:.2e})")
            else:
                print(f"[SKIP] {tag} validation accuracy: a logit margin of {margin:.2e} is "
                      "within rounding of a tie", flush=True)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"all checks passed in {time.time() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
