#!/usr/bin/env bash
# Plots and the loss CSV files (docs/plots.md). A small GPT-lite run at 2
# ranks with csv_monitor and --eval-interval writes Train_Samples_train_loss.csv
# (one row per step: x = global samples, the report's loss_history to 1e-9
# relative, the CSV's %.10g) and Train_Samples_eval_loss.csv (one row per
# evaluation, the report's eval losses); a classifier run adds
# Train_Samples_eval_accuracy.csv. scripts/plot.py draws loss.png and eval.png
# from the report, from the run's JSON-lines history (REPORT.jsonl), from a
# history cut short by a kill, and from the CSV directory, and
# scripts/sweep-stages.sh --plot draws throughput.png and memory.png: each a
# PNG (signature) of at least 10 kB. Bad input to plot.py exits 2 naming the
# file. Skips (exit 0, saying so) only when matplotlib is missing.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS
if ! "$ZT_PYTHON" -c 'import matplotlib' 2>/dev/null; then
    echo "skipped: matplotlib is not installed (scripts/install-deps.sh installs python3-matplotlib)"
    exit 0
fi

cat >"$tmp/cfg.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv", "job_name": "gpt"}}
JSON
sed "s/\"job_name\": \"gpt\"/\"job_name\": \"cls\"/" "$tmp/cfg.json" >"$tmp/cls.json"
text=$ZT_SHARED/data/tinyshakespeare/input.txt
expect 0 "done: 12 steps" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" --model gptlite \
    --data "$text" --n-layer 1 --n-embd 32 --n-head 4 --block-size 16 --dropout 0 --steps 12 \
    --eval-interval 4 --eval-iters 2 --report "$tmp/gpt.json"
expect 0 "done: 4 steps" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cls.json" \
    --model classifier --data "$ZT_SHARED/data/imdb/imdb-2500.csv" --n-layer 1 --embed-dim 16 \
    --n-head 2 --hidden-dim 16 --max-len 32 --steps 4 --eval-interval 2 --eval-iters 1 \
    --report "$tmp/cls.json.report"

"$ZT_PYTHON" - "$tmp" <<'PY'
import csv, json, sys
d = sys.argv[1]
def rows(path, header):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    assert r[0] == ["step", header], f"{path}: header {r[0]}"
    return [(int(a), float(b)) for a, b in r[1:]]
def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
rep = json.load(open(f"{d}/gpt.json"))
tb = rep["train_batch_size"]
loss = rows(f"{d}/csv/gpt/Train_Samples_train_loss.csv", "train_loss")
want = [(tb * (i + 1), v) for i, v in enumerate(rep["loss_history"])]
assert len(loss) == len(want) == 12, (len(loss), len(want))
assert all(x == wx and close(v, wv) for (x, v), (wx, wv) in zip(loss, want)), (loss, want)
ev = rows(f"{d}/csv/gpt/Train_Samples_eval_loss.csv", "eval_loss")
want = [(tb * e["step"], e["loss"]) for e in rep["eval"]]
assert len(ev) == 3 and all(x == wx and close(v, wv) for (x, v), (wx, wv) in zip(ev, want)), (ev, want)
import os
assert not os.path.exists(f"{d}/csv/gpt/Train_Samples_eval_accuracy.csv"), "gptlite has no accuracy"
rep = json.load(open(f"{d}/cls.json.report"))
acc = rows(f"{d}/csv/cls/Train_Samples_eval_accuracy.csv", "eval_accuracy")
want = [(rep["train_batch_size"] * e["step"], e["accuracy"]) for e in rep["eval"]]
assert len(acc) == 2 and all(x == wx and close(v, wv) for (x, v), (wx, wv) in zip(acc, want)), (acc, want)
print(f"ok: CSV rows: 12 train_loss, 3 eval_loss, 2 eval_accuracy, equal to the reports'")
# A JSON-lines history as --log-file writes it (docs/running.md), with a
# killed run's cut last line.
with open(f"{d}/hist.jsonl", "w") as f:
    f.write(json.dumps({"event": "start", "steps": 12}) + "\n")
    for i, v in enumerate(json.load(open(f"{d}/gpt.json"))["loss_history"]):
        f.write(json.dumps({"event": "step", "step": i + 1, "loss": v}) + "\n")
        if (i + 1) % 4 == 0:
            f.write(json.dumps({"event": "eval", "step": i + 1, "val_loss": v + 0.1,
                                "val_accuracy": None}) + "\n")
    f.write('{"event": "step", "st')
PY

png() { # png FILE: a PNG signature and at least 10 kB
    [ -f "$1" ] || fail "$1 was not written"
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"
    [ "$(stat -c %s "$1")" -ge 10000 ] || fail "$1 is only $(stat -c %s "$1") bytes"
    echo "ok: $1 is a PNG of $(stat -c %s "$1") bytes"
}
p=("$ZT_PYTHON" scripts/plot.py)
expect 0 "wrote $tmp/a/eval.png" -- "${p[@]}" curves --out "$tmp/a" "$tmp/gpt.json" "$tmp/cls.json.report"
png "$tmp/a/loss.png"; png "$tmp/a/eval.png"
expect 0 "wrote $tmp/b/eval.png" -- "${p[@]}" curves --out "$tmp/b" history="$tmp/hist.jsonl"
png "$tmp/b/loss.png"; png "$tmp/b/eval.png"
[ -f "$tmp/gpt.jsonl" ] || fail "the run wrote no history $tmp/gpt.jsonl beside its report"
expect 0 "wrote $tmp/h/eval.png" -- "${p[@]}" curves --out "$tmp/h" "$tmp/gpt.jsonl"
png "$tmp/h/loss.png"; png "$tmp/h/eval.png"
expect 0 "wrote $tmp/c/eval.png" -- "${p[@]}" curves --out "$tmp/c" "$tmp/csv/gpt" "$tmp/csv/cls"
png "$tmp/c/loss.png"; png "$tmp/c/eval.png"
echo '{"not": "a report"}' >"$tmp/bad.json"
expect 2 "bad.json: neither a --report JSON nor a history" -- "${p[@]}" curves --out "$tmp/d" "$tmp/bad.json"
expect 2 "plot them separately" -- "${p[@]}" curves --out "$tmp/d" "$tmp/gpt.json" "$tmp/csv/gpt"

OUT="$tmp/sweep" expect 0 "wrote $tmp/s/memory.png" -- bash scripts/sweep-stages.sh --plot "$tmp/s" \
    "--model mlp --width 64 --layers 3 --device cpu" 2 --steps 4 --train-batch-size 16
png "$tmp/s/throughput.png"; png "$tmp/s/memory.png"
echo "test_plots: all cases passed in $((SECONDS - t0)) s"
