#!/usr/bin/env bash
# The observability sections at np 2, checked against independent readers:
# - tensorboard: the event file is read back by tests/tools/tfevents.py (a
#   reader written from the TFRecord and protobuf specifications, sharing no
#   code with the writer): framing CRCs, file_version first, DeepSpeed's
#   Train/Samples/* tags at x = global samples, the values equal to what the
#   csv_monitor and the --report say, wall times in order;
# - comms_logger: the summary's counts and sizes are the report's comm
#   counters, in DeepSpeed's format;
# - flops_profiler: at profile_step, forward MACs per GPU equal the GPT-lite
#   count made here from its dimensions, one line per unit, and output_file.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

data=$ZT_SHARED/data/tinyshakespeare/input.txt
# L 2, C 32, H 4, T 32, vocab 65; micro 2, GAS 2, world 2: 8 samples per step
gpt=(--model gptlite --data "$data" --n-layer 2 --n-embd 32 --n-head 4 --block-size 32)
cat >"$tmp/obs.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "wall_clock_breakdown": true,
  "fp16": {"enabled": true, "initial_scale_power": 8},
  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_max_lr": 0.002}},
  "tensorboard": {"enabled": true, "output_path": "$tmp/logs/", "job_name": "tb"},
  "csv_monitor": {"enabled": true, "output_path": "$tmp/logs/", "job_name": "csv"},
  "comms_logger": {"enabled": true, "verbose": true},
  "flops_profiler": {"enabled": true, "profile_step": 1, "top_modules": 3}
}
JSON
expect 0 "zerotrain: done" -- $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/obs.json" "${gpt[@]}" \
    --steps 5 --eval-interval 2 --eval-iters 1 --report "$tmp/r.json"
cp "$tmp/out" "$tmp/run.log"
events=("$tmp"/logs/tb/events.out.tfevents.*)
[ ${#events[@]} = 1 ] || fail "expected one event file, got: ${events[*]}"
"$ZT_PYTHON" tests/tools/tfevents.py selftest
"$ZT_PYTHON" tests/tools/tfevents.py dump "${events[0]}" >"$tmp/events.jsonl"

"$ZT_PYTHON" - "$tmp" "${events[0]}" "$(hostname)" <<'PY'
import csv, json, math, os, re, struct, sys

tmp, path, host = sys.argv[1:4]
name = os.path.basename(path)
assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\.{re.escape(host)}\.\d+\.0", name), name
events = [json.loads(l) for l in open(f"{tmp}/events.jsonl")]
report = json.load(open(f"{tmp}/r.json"))
assert events[0].get("file_version") == "brain.Event:2", events[0]
walls = [e["wall_time"] for e in events]
assert walls == sorted(walls) and walls[-1] - walls[0] < 600, walls

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

series = {}
for e in events[1:]:
    assert len(e["values"]) == 1, e
    v = e["values"][0]
    series.setdefault(v["tag"], []).append((e["step"], v["simple_value"]))
timers = ["forward", "backward", "backward_inner", "backward_allreduce", "step"]
want_tags = {"Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/loss_scale",
             "Train/Samples/eval_loss"} | {f"Train/Samples/elapsed_time_ms_{t}" for t in timers}
assert set(series) == want_tags, sorted(series)
tb = report["train_batch_size"]
assert tb == 8
steps = [tb * k for k in range(1, 6)]
for tag, points in series.items():
    if tag != "Train/Samples/eval_loss":
        assert [s for s, _ in points] == steps, (tag, points)

def close(a, b):
    return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))

# train_loss: the report's history, stored as float32
for (s, v), want in zip(series["Train/Samples/train_loss"], report["loss_history"]):
    assert close(v, f32(want)), (s, v, want)
# lr and loss_scale: the csv_monitor's files
for tag, fname in [("lr", "Train_Samples_lr.csv"), ("loss_scale", "Train_Samples_loss_scale.csv")]:
    rows = list(csv.reader(open(f"{tmp}/logs/csv/{fname}")))
    assert rows[0] == ["step", tag], rows[0]
    got = series[f"Train/Samples/{tag}"]
    assert len(rows) - 1 == len(got)
    for (s, v), (cs, cv) in zip(got, rows[1:]):
        assert s == int(cs) and close(v, f32(float(cv))), (tag, s, v, cs, cv)
# WarmupLR (log) rises from 0 over 3 steps, then holds; fp16's initial scale is 2^8
lrs = [v for _, v in series["Train/Samples/lr"]]
assert lrs == sorted(lrs) and lrs[0] == 0 and 0 < lrs[2] < lrs[3], lrs
assert close(lrs[3], f32(0.002)) and lrs[4] == lrs[3], lrs
assert series["Train/Samples/loss_scale"][0][1] in (256.0, 128.0)
# eval_loss at every 2nd step and at the end, x = step * train_batch_size
evals = [(e["step"] * tb, e["loss"]) for e in report["eval"]]
assert [s for s, _ in series["Train/Samples/eval_loss"]] == [s for s, _ in evals] == [16, 32, 40]
for (s, v), (_, want) in zip(series["Train/Samples/eval_loss"], evals):
    assert close(v, f32(want)), (s, v, want)
for t in timers:
    assert all(v >= 0 and math.isfinite(v) for _, v in series[f"Train/Samples/elapsed_time_ms_{t}"])
print("ok: tensorboard events read back: %d scalars in %d tags" % (len(events) - 1, len(series)))
PY

# comms_logger: DeepSpeed's table from the counters the report has too.
"$ZT_PYTHON" - "$tmp" <<'PY'
import json, math, re, sys

tmp = sys.argv[1]
log = open(f"{tmp}/run.log").read()
calls = json.load(open(f"{tmp}/r.json"))["ranks"][0]["comm"]["world"]
header = f"{'Comm. Op': <20}{'Message Size': <20}{'Count': <20}{'Total Size': <20}"
assert header.rstrip() in log, "no comms summary"

def convert_size(size):  # deepspeed.utils.comms_logging.convert_size
    if size == 0:
        return "0B"
    names = ("B", "KB", "MB", "GB", "TB", "PB")
    i = int(math.floor(math.log(size, 1024)))
    return "%s %s" % (round(size / math.pow(1024, i), 2), names[i])

names = {"reduce_scatter": "reduce_scatter_tensor", "all_gather": "all_gather_into_tensor",
         "all_reduce": "all_reduce", "broadcast": "broadcast"}
seen = 0
for kind, ds in names.items():
    n, b = calls["calls"][kind], calls["bytes"][kind]
    if n == 0:
        assert f"\n{ds}\n" not in log, ds
        continue
    row = f"{ds}\n{'': <20}{convert_size(b / n): <20}{n: <20}{convert_size(b): <20}"
    assert row.rstrip() in log, (row, log[-2000:])
    seen += 1
assert seen >= 2, calls  # stage 3: reduce-scatter and all-gather at least
# verbose: one line per collective per step, the step's share of the counts
verbose = re.findall(r"\[Rank 0\] step=(\d+) comm op: (\S+) \| count: (\d+)", log)
for kind, ds in names.items():
    total = sum(int(c) for _, op, c in verbose if op == ds)
    assert total <= calls["calls"][kind], (kind, total)
assert {int(s) for s, _, _ in verbose} == {1, 2, 3, 4, 5}, verbose
print("ok: comms_logger summary = report counters:", {k: calls["calls"][k] for k in names})
PY

# flops_profiler: forward MACs per micro-batch of GPT-lite, counted here from
# its dimensions: per block 4C^2 + 2CF per token (F = 4C) plus two T x T x C
# attention products per sample; the head V x C per token.
"$ZT_PYTHON" - "$tmp" <<'PY'
import re, sys

tmp = sys.argv[1]
log = open(f"{tmp}/run.log").read()
assert log.count("Profile Summary at step 1:") == 1, "one profile, at step 1"
n, t, c, layers, vocab = 2, 32, 32, 2, 65
rows = n * t
macs = layers * (rows * (4 * c * c + 2 * c * 4 * c) + 2 * n * t * t * c) + rows * vocab * c
want = f"{macs / 1e6:.2f} MMACs"
got = re.search(r"fwd MACs per GPU:\s+(\S+ \S+)", log).group(1)
assert got == want, (got, want)
assert re.search(r"batch size per GPU:\s+2\s", log)
assert re.search(r"world size:\s+2\s", log)
params = re.search(r"params per GPU:\s+(\S+ \S+)", log).group(1)
n_params = 65 * c + t * c + layers * (12 * c * c + 13 * c) + 2 * c + vocab * c + vocab
assert params == f"{n_params / 1e3:.2f} K", (params, n_params)
units = re.findall(r"^  \((\S+)\): (\S+)\(", log, re.M)
assert units == [("embed", "embed"), ("h.0", "h"), ("h.1", "h"), ("head", "head")], units
assert re.search(r"depth 1:\n    params      - \{'h': ", log)
print("ok: flops profile", got, params)
PY

# output_file: the profile goes to the file, the console says where.
sed -e 's/"profile_step": 1, "top_modules": 3}/"profile_step": 0, "output_file": "'"${tmp//\//\\/}"'\/prof.txt"}/' \
    "$tmp/obs.json" >"$tmp/obs2.json"
expect 0 "flops profile of step 0 written to $tmp/prof.txt" -- $ZT_MPIRUN -np 2 ./zerotrain \
    --config "$tmp/obs2.json" "${gpt[@]}" --steps 2
grep -q "Profile Summary at step 0:" "$tmp/prof.txt" || fail "no profile in $tmp/prof.txt"
! grep -q "Profile Summary" "$tmp/out" || fail "the profile went to the console too"
echo "ok: flops profile written to output_file"
