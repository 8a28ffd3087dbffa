#!/usr/bin/env bash
# What --data holds on the host is counted and reported (its peak while
# loading is measured by tests/unit/test_data_memory):
#  - the report's "data" against the file: char text of N ASCII bytes is N
#    ids of 1 byte, tiny shakespeare's GPT-2 BPE 338025 ids (tiktoken's count)
#    of 2 bytes, a CSV's reviews 2 bytes a token and 16 bytes a review; held =
#    ids + index + tokenizer, the same on every rank; --estimate-memory shows
#    the same numbers (a "data" row of the host table, in its total);
#  - a plan that does not fit the memory cgroup names the data already held
#    beside the classes.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

cfg="$tmp/cfg.json"
echo '{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' >"$cfg"
gpt=(./zerotrain --config "$cfg" --model gptlite --n-layer 1 --n-embd 16 --n-head 2 --steps 1)
cls=(./zerotrain --config "$cfg" --model classifier --n-layer 1 --embed-dim 16 --n-head 2
     --hidden-dim 16 --max-len 16 --steps 1)
shakespeare="$ZT_SHARED/data/tinyshakespeare/input.txt"

# Char text: the alphabet "\nabcdefgh", 100,000 bytes.
$ZT_PYTHON -c 'import random, sys; random.seed(1); open(sys.argv[1], "w").write("".join(random.choice("\nabcdefgh") for _ in range(100000)))' "$tmp/a.txt"
$ZT_MPIRUN -np 2 "${gpt[@]}" --data "$tmp/a.txt" --report "$tmp/a.json" >"$tmp/a.log" 2>&1 ||
    { cat "$tmp/a.log"; fail "char run"; }
grep -q "; 9[0-9.]* KiB on the host (100000 tokens x 1 byte(s))" "$tmp/a.log" ||
    { cat "$tmp/a.log"; fail "the summary does not say what the data holds"; }
"${gpt[@]}" --data "$shakespeare" --tokenizer "$ZT_SHARED/data/gpt2-bpe" \
    --report "$tmp/b.json" >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; fail "BPE run"; }
zt_short_reviews 40 "$tmp/r.csv"
"${cls[@]}" --data "$tmp/r.csv" --report "$tmp/r.json" >"$tmp/r.log" 2>&1 ||
    { cat "$tmp/r.log"; fail "classifier run"; }
./zerotrain --estimate-memory --config "$cfg" --model gptlite --n-layer 1 --n-embd 16 --n-head 2 \
    --data "$tmp/a.txt" --report "$tmp/est.json" >"$tmp/est.log" 2>&1 ||
    { cat "$tmp/est.log"; fail "estimate"; }
grep -q "^  data " "$tmp/est.log" || { cat "$tmp/est.log"; fail "no data row in the estimate"; }
$ZT_PYTHON - "$tmp" "$ZT_SHARED/data/tinyshakespeare/input.txt" <<'PY'
import csv, json, os, sys
tmp, shakespeare = sys.argv[1], sys.argv[2]
def data(name):
    return json.load(open(f"{tmp}/{name}.json"))["data"]
def check(d, what):
    assert d["held_bytes"] == d["ids_bytes"] + d["index_bytes"] + d["tokenizer_bytes"], (what, d)
    assert d["ids_bytes"] == d["tokens"] * d["token_bytes"], (what, d)
    assert d["load_peak_bytes"] >= d["held_bytes"], (what, d)
a = data("a")
n = os.path.getsize(f"{tmp}/a.txt")
assert (a["file_bytes"], a["tokens"], a["token_bytes"], a["ids_bytes"], a["index_bytes"]) == (n, n, 1, n, 0), a
assert 0 < a["tokenizer_bytes"] < 4096, a
check(a, "char")
b = data("b")
assert (b["file_bytes"], b["tokens"], b["token_bytes"]) == (os.path.getsize(shakespeare), 338025, 2), b
check(b, "bpe")
r = data("r")
reviews = list(csv.DictReader(open(f"{tmp}/r.csv", encoding="utf-8")))
# Byte tokens cut to --max-len 16, after <br /> became a space.
tokens = sum(min(16, len(x["review"].replace("<br />", " ").encode())) for x in reviews)
assert (r["file_bytes"], r["tokens"], r["token_bytes"], r["ids_bytes"], r["index_bytes"]) == \
    (os.path.getsize(f"{tmp}/r.csv"), tokens, 2, 2 * tokens, 16 * len(reviews)), (r, tokens)
check(r, "csv")
est = json.load(open(f"{tmp}/est.json"))["data"]
assert est == a, ("the estimate's data differs from the run's", est, a)
print(f"ok: data held: char {a['held_bytes']} bytes for {n}, BPE {b['held_bytes']}, CSV {r['held_bytes']}; "
      "the estimate agrees")
PY

# The trainer's host check names the data it holds already.
mkdir -p "$tmp/cg"
echo $((300 * 1024 * 1024)) >"$tmp/cg/memory.max"
expect 1 "not enough host memory: this rank plans .* outside the arenas, and holds 1.1 MiB of data loaded already (counted as in use below), but this node's ranks in the memory cgroup need" \
    -- env ZT_CGROUP_ROOT="$tmp/cg" ./zerotrain --config "$cfg" --model gptlite --n-layer 8 \
    --n-embd 1024 --n-head 8 --block-size 64 --steps 1 --data "$shakespeare"
echo "ok: the data's host memory is counted and reported"
