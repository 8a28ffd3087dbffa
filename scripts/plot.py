#!/usr/bin/python3
"""Plots of zerotrain runs as PNG files (matplotlib, docs/plots.md).

    scripts/plot.py curves [--out DIR] RUN...
        Loss and evaluation curves. Each RUN is a --report JSON file, a
        JSON-lines history (--log-file, one {"event": ...} object per line),
        or a csv_monitor directory (Train_Samples_train_loss.csv,
        Train_Samples_eval_loss.csv, Train_Samples_eval_accuracy.csv);
        NAME=RUN labels it. Writes DIR/loss.png (training loss per step,
        one line per run) and, when a run evaluated, DIR/eval.png
        (validation loss, and accuracy on a second axis for classifiers).

    scripts/plot.py sweep [--out DIR] [NAME=]REPORT...
        The bar charts of scripts/sweep-stages.sh --plot: DIR/throughput.png
        (samples/s per variant) and DIR/memory.png (rank 0's peak memory per
        class per variant, MiB; host memory in a second panel when any run
        kept some there).

Default DIR: the current directory. Exit status 2 on unreadable input.
"""
import argparse
import csv
import json
import sys
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # scripts/install-deps.sh installs python3-matplotlib
    plt = None

CLASSES = ["PARAMS", "GRADS", "MASTER", "OPTIM", "ACTS", "COMM", "WORK"]


class InputError(Exception):
    pass


def _label(arg):
    name, sep, path = arg.partition("=")
    if sep and not Path(arg).exists():
        return name, Path(path)
    return Path(arg).stem if not Path(arg).is_dir() else Path(arg).name, Path(arg)


def _read_csv(path):
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return [(float(r[0]), float(r[1])) for r in rows[1:] if len(r) == 2]


def read_run(path):
    """{"loss": [(step, loss)], "eval": [(step, loss, accuracy|None)]} of one run."""
    if path.is_dir():
        # csv_monitor: x is global samples; steps are samples / train_batch_size, which
        # the CSV does not record, so the curves use samples.
        loss = _read_csv(path / "Train_Samples_train_loss.csv")
        ev = _read_csv(path / "Train_Samples_eval_loss.csv")
        acc = dict(_read_csv(path / "Train_Samples_eval_accuracy.csv"))
        if not loss and not ev:
            raise InputError(f"{path}: no Train_Samples_train_loss.csv or eval_loss.csv")
        return {"x": "samples", "loss": loss, "eval": [(x, v, acc.get(x)) for x, v in ev]}
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    try:
        rep = json.loads(text)
    except json.JSONDecodeError:
        rep = None
    if isinstance(rep, dict) and "loss_history" in rep:
        loss = [(i + 1, v) for i, v in enumerate(rep["loss_history"]) if v is not None]
        ev = [(e["step"], e["loss"], e.get("accuracy")) for e in rep.get("eval") or []
              if e.get("loss") is not None]
        return {"x": "step", "loss": loss, "eval": ev}
    loss, ev = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            if n == len(text.splitlines()):
                break  # a killed run's last line may be cut short
            raise InputError(f"{path}:{n}: not a JSON line (a report or a history?)")
        if e.get("event") == "step" and e.get("loss") is not None:
            loss.append((e["step"], e["loss"]))
        elif e.get("event") == "eval" and e.get("val_loss") is not None:
            ev.append((e["step"], e["val_loss"], e.get("val_accuracy")))
    if not loss and not ev:
        raise InputError(f"{path}: neither a --report JSON nor a history with step events")
    return {"x": "step", "loss": loss, "eval": ev}


def curves(runs, out):
    data = [(name, read_run(p)) for name, p in runs]
    if len({d["x"] for _, d in data}) > 1:
        raise InputError("csv_monitor directories count global samples, reports and histories "
                         "count steps: plot them separately")
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, d in data:
        if d["loss"]:
            xs, ys = zip(*d["loss"])
            ax.plot(xs, ys, label=name, lw=1.2)
    ax.set_xlabel("global samples" if data[0][1]["x"] == "samples" else "step")
    ax.set_ylabel("training loss")
    ax.set_title("training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    written = [out / "loss.png"]
    fig.savefig(written[0])
    plt.close(fig)
    if any(d["eval"] for _, d in data):
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        ax2 = None
        for name, d in data:
            if not d["eval"]:
                continue
            xs, ys, accs = zip(*d["eval"])
            ax.plot(xs, ys, "o-", label=f"{name} loss", lw=1.2)
            if any(a is not None for a in accs):
                ax2 = ax2 or ax.twinx()
                pts = [(x, a) for x, a in zip(xs, accs) if a is not None]
                ax2.plot(*zip(*pts), "s--", label=f"{name} accuracy", lw=1.0)
                ax2.set_ylabel("validation accuracy")
        ax.set_xlabel("global samples" if data[0][1]["x"] == "samples" else "step")
        ax.set_ylabel("validation loss")
        ax.set_title("evaluation")
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if ax2:
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        ax.legend(handles, labels)
        fig.tight_layout()
        written.append(out / "eval.png")
        fig.savefig(written[-1])
        plt.close(fig)
    return written


def _peaks(rep, where):
    mem = ((rep.get("ranks") or [{}])[0].get("memory_bytes") or {}).get(where) or {}
    return [((mem.get(c) or {}).get("peak") or 0) / 2**20 for c in CLASSES]


def sweep(runs, out):
    reps = []
    for name, p in runs:
        try:
            reps.append((name, json.loads(p.read_text())))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"{p}: not a --report JSON ({e})")
    names = [n for n, _ in reps]
    title = ""
    if reps:
        r = reps[0][1]
        title = f"{(r.get('model') or {}).get('name', '?')}, {r.get('world_size', '?')} rank(s)"
    fig, ax = plt.subplots(figsize=(6, 3.8), dpi=110)
    sps = [r.get("samples_per_sec") or 0 for _, r in reps]
    bars = ax.bar(names, sps, color="#4C72B0")
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel("samples/s")
    ax.set_title(f"throughput: {title}")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    written = [out / "throughput.png"]
    fig.savefig(written[0])
    plt.close(fig)

    # A host panel when a run kept model states there (offload), as the table does.
    where = ["device"] + (["host"] if any(sum(_peaks(r, "host")[:4]) for _, r in reps) else [])
    fig, axes = plt.subplots(1, len(where), figsize=(7 * len(where), 4.2), dpi=110,
                             squeeze=False)
    width = 0.8 / max(1, len(reps))
    for ax, w in zip(axes[0], where):
        for k, (name, r) in enumerate(reps):
            xs = [i + (k - (len(reps) - 1) / 2) * width for i in range(len(CLASSES))]
            ax.bar(xs, _peaks(r, w), width, label=name)
        ax.set_xticks(range(len(CLASSES)), CLASSES)
        ax.set_ylabel("peak MiB, rank 0")
        ax.set_title(f"{w} memory per class: {title}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    written.append(out / "memory.png")
    fig.savefig(written[-1])
    plt.close(fig)
    return written


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("what", choices=["curves", "sweep"])
    ap.add_argument("runs", nargs="+", metavar="RUN")
    ap.add_argument("--out", default=".", help="directory for the PNG files (created)")
    a = ap.parse_args(argv)
    if plt is None:
        print("plot: error: matplotlib is not installed (scripts/install-deps.sh installs "
              "python3-matplotlib)", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        written = (curves if a.what == "curves" else sweep)([_label(r) for r in a.runs], out)
    except InputError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        return 2
    for w in written:
        print(f"plot: wrote {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
