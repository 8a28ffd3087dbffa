#!/usr/bin/env bash
# The data scripts, offline: scripts/get-data.sh links ../shared/data's files
# when their sha256 is the pinned one, fetches from a mirror (file://) when
# there is no shared copy, refuses a download with the wrong sum (leaving
# nothing in place) and replaces a corrupted file; scripts/imdb_sample.py turns
# an aclImdb tree into a CSV whose rows are the reviews' files (checked with
# Python's csv module) that the classifier trains on; scripts/run-default.sh
# (make run's job) runs end to end for 3 steps: validation loss, the sample.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

get=(bash scripts/get-data.sh)
sha() { sha256sum "$1" | cut -d' ' -f1; }

# ---- from the shared copy: links, --print's paths, nothing downloaded
out=$(ZT_SHARED_DATA="$ZT_SHARED/data" ZT_DATA_MIRROR=file:///nonexistent "${get[@]}" --dir "$tmp/ds" --print shakespeare gpt2-bpe imdb)
[ "$out" = "$tmp/ds/tinyshakespeare/input.txt
$tmp/ds/gpt2-bpe
$tmp/ds/imdb/imdb-2500.csv" ] || fail "--print printed: $out"
for f in tinyshakespeare/input.txt gpt2-bpe/encoder.json gpt2-bpe/vocab.bpe imdb/imdb-2500.csv; do
    [ -L "$tmp/ds/$f" ] || fail "$f is not linked to the shared copy"
    [ "$(sha "$tmp/ds/$f")" = "$(sha "$ZT_SHARED/data/$f")" ] || fail "$f differs from the shared copy"
done
echo "ok: get-data.sh links the shared copies"

# ---- from a mirror: downloaded and checked; a wrong sum is refused
mkdir -p "$tmp/mirror"
cp "$ZT_SHARED/data/tinyshakespeare/input.txt" "$ZT_SHARED/data/gpt2-bpe/encoder.json" "$tmp/mirror/"
printf 'not the merges\n' >"$tmp/mirror/vocab.bpe"
export ZT_SHARED_DATA=$tmp/none ZT_DATA_MIRROR=file://$tmp/mirror
expect 0 "ready in $tmp/dl: shakespeare" -- "${get[@]}" --dir "$tmp/dl" shakespeare
[ -f "$tmp/dl/tinyshakespeare/input.txt" ] && [ ! -L "$tmp/dl/tinyshakespeare/input.txt" ] ||
    fail "the mirror's file was not downloaded"
expect 1 "vocab.bpe has sha256 .*, expected 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5: not used" -- \
    "${get[@]}" --dir "$tmp/dl" gpt2-bpe
[ ! -e "$tmp/dl/gpt2-bpe/vocab.bpe" ] && [ ! -e "$tmp/dl/gpt2-bpe/vocab.bpe.part" ] ||
    fail "a download with the wrong sum was left in place"
echo "tampered" >>"$tmp/dl/tinyshakespeare/input.txt"
expect 0 "has the wrong sha256: replacing it" -- "${get[@]}" --dir "$tmp/dl" shakespeare
[ "$(sha "$tmp/dl/tinyshakespeare/input.txt")" = "$(sha "$ZT_SHARED/data/tinyshakespeare/input.txt")" ] ||
    fail "the corrupted file was not replaced"
expect 1 "cannot download file://$tmp/mirror/aclImdb_v1.tar.gz" -- "${get[@]}" --dir "$tmp/dl" imdb
expect 2 "unknown data set or flag 'shakespear'" -- "${get[@]}" shakespear
unset ZT_SHARED_DATA ZT_DATA_MIRROR
echo "ok: get-data.sh downloads, checks sums, refuses and repairs"

# ---- imdb_sample.py: a small aclImdb tree to CSV, read back by Python's csv and by zerotrain
$ZT_PYTHON - "$tmp/acl" <<'PY'
import os, sys
root = sys.argv[1]
for label in ("pos", "neg"):
    os.makedirs(f"{root}/train/{label}")
    for i in range(30):
        text = f'Review {label} {i}: "quoted", a comma,<br /><br />and a second line. {"great" if label == "pos" else "awful"} film.'
        open(f"{root}/train/{label}/{i}_{7 if label == 'pos' else 2}.txt", "w").write(text)
PY
$ZT_PYTHON scripts/imdb_sample.py "$tmp/acl" "$tmp/s1.csv" 40
$ZT_PYTHON scripts/imdb_sample.py "$tmp/acl" "$tmp/s2.csv" 40
cmp "$tmp/s1.csv" "$tmp/s2.csv" || fail "imdb_sample.py is not deterministic"
$ZT_PYTHON - "$tmp/acl" "$tmp/s1.csv" <<'PY'
import csv, os, sys
root, path = sys.argv[1:]
rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
assert rows[0] == ["review", "sentiment"], rows[0]
assert len(rows) == 41, len(rows)
seen = set()
for review, label in rows[1:]:
    lab = review.split()[1]
    i = int(review.split()[2].rstrip(":"))
    name = f"{lab}/{i}_{7 if lab == 'pos' else 2}.txt"
    assert review == open(os.path.join(root, "train", name)).read(), name
    assert label == ("positive" if lab == "pos" else "negative"), (name, label)
    seen.add(name)
assert len(seen) == 40
print(f"ok: imdb_sample.py wrote 40 distinct reviews, {sum(r[1] == 'positive' for r in rows[1:])} positive")
PY
expect 1 "fewer than 100" -- $ZT_PYTHON scripts/imdb_sample.py "$tmp/acl" "$tmp/s3.csv" 100
echo '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' >"$tmp/c.json"
expect 0 "zerotrain: done: 2 steps" -- ./zerotrain --config "$tmp/c.json" --model classifier --data "$tmp/s1.csv" \
    --n-layer 1 --embed-dim 16 --n-head 2 --hidden-dim 16 --max-len 32 --steps 2 --eval-interval 2
grep -q "36 training samples, 4 validation samples" "$tmp/out" || { cat "$tmp/out"; fail "the classifier did not read the sample's 40 rows"; }

# ---- make run's job, 3 steps: the data from the shared copy, evaluation and a sample
expect 0 "zerotrain: done: 3 steps" -- env ZT_DATA_DIR="$tmp/run-data" bash scripts/run-default.sh --steps 3 \
    --eval-interval 3 --sample 40 --report "$tmp/run.json"
grep -q "model gptlite: 826433 parameters" "$tmp/out" || { cat "$tmp/out"; fail "make run does not train the 0.83M GPT-lite"; }
grep -q "^\[Rank 0\] eval: step=3, val_loss=" "$tmp/out" || { cat "$tmp/out"; fail "make run prints no validation loss"; }
grep -q "^zerotrain: sample of 40 tokens" "$tmp/out" || { cat "$tmp/out"; fail "make run prints no sample"; }
grep -qE "^step 3/3 \| loss [0-9.]+ \| .* tokens/s" "$tmp/out" || { cat "$tmp/out"; fail "make run prints no progress line"; }
[ -L "$tmp/run-data/tinyshakespeare/input.txt" ] || fail "make run did not take the shared copy"
echo "ok: data scripts"
