#!/usr/bin/env bash
# Bad data and bad transformer flags end a run with exit 2 and a message that
# names the file (and line), on one rank and on two (where a rank must not be
# left waiting). The loaders' finer cases are unit-tested (test_text_data,
# test_tokenizer); this checks what a user sees from the binary.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

cfg="$tmp/cfg.json"
echo '{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' >"$cfg"
gpt_heads=(./zerotrain --config "$cfg" --model gptlite --n-layer 1 --n-embd 16 --steps 1)
gpt=("${gpt_heads[@]}" --n-head 2)
cls=(./zerotrain --config "$cfg" --model classifier --n-layer 1 --embed-dim 16 --n-head 2
     --hidden-dim 16 --max-len 16 --steps 1)

# gptlite: text files
printf 'hello world\n' >"$tmp/short.txt"
: >"$tmp/empty.txt"
printf 'line one\nline two\nline \xff three\n' >"$tmp/latin1.txt"
expect 2 "needs --data PATH" -- "${gpt[@]}"
expect 2 "$tmp/missing.txt" -- "${gpt[@]}" --data "$tmp/missing.txt"
expect 2 "$tmp/empty.txt" -- "${gpt[@]}" --data "$tmp/empty.txt"
expect 2 "$tmp/short.txt" -- "${gpt[@]}" --data "$tmp/short.txt" --block-size 64
expect 2 "$tmp/latin1.txt:3" -- "${gpt[@]}" --data "$tmp/latin1.txt" --block-size 2
expect 2 "encoder.json" -- "${gpt[@]}" --data "$ZT_SHARED/data/tinyshakespeare/input.txt" \
    --tokenizer "$tmp"

# classifier: labelled CSV
printf 'text,label\n"a good film",positive\n' >"$tmp/columns.csv"
{ echo 'review,sentiment'; for i in $(seq 1 12); do echo "review $i,positive"; done
  echo 'review 13,neutral'; } >"$tmp/labels.csv"
{ echo 'review,sentiment'; echo 'fine,positive'; printf 'caf\xe9,negative\n'; } >"$tmp/bytes.csv"
expect 2 "$tmp/columns.csv" -- "${cls[@]}" --data "$tmp/columns.csv"
expect 2 "$tmp/labels.csv:14" -- "${cls[@]}" --data "$tmp/labels.csv"
expect 2 "neutral" -- "${cls[@]}" --data "$tmp/labels.csv"
expect 2 "$tmp/bytes.csv:3" -- "${cls[@]}" --data "$tmp/bytes.csv"
expect 2 "$tmp/nodir" -- "${cls[@]}" --data "$tmp/nodir"

# Two ranks: every rank fails the same way, one prints, nobody hangs.
expect 2 "$tmp/labels.csv:14" -- $ZT_MPIRUN -np 2 "${cls[@]}" --data "$tmp/labels.csv"

# Flags that belong to another model are refused, not ignored.
expect 2 "--max-len is a flag of --model classifier" -- "${gpt[@]}" --max-len 8 \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
expect 2 "--width is a flag of --model mlp" -- "${cls[@]}" --width 8 --data "$tmp/labels.csv"
expect 2 "--sample is a flag of --model gptlite" -- "${cls[@]}" --sample 10 --data "$tmp/labels.csv"
expect 2 "not divisible" -- "${gpt_heads[@]}" --n-head 3 --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
expect 2 "bad value" -- "${gpt[@]}" --dropout 1 --data "$ZT_SHARED/data/tinyshakespeare/input.txt"
expect 2 "smaller than the tokenizer's 65 tokens" -- "${gpt[@]}" --vocab-size 10 \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt"

# CSV layout errors that used to mislead: lines ending in CR alone got no hint
# about line endings, a quote left open was reported a line late, and extra
# columns were read silently (cutting a review at an unquoted comma).
{ printf 'review,sentiment\r'; for i in $(seq 1 12); do printf 'review %d,positive\r' "$i"; done; } \
    >"$tmp/cr.csv"
expect 2 "$tmp/cr.csv: its lines end in a carriage return alone" -- "${cls[@]}" --data "$tmp/cr.csv"
grep -q "hint: .*line endings" "$tmp/out" || { cat "$tmp/out"; fail "no line-ending hint"; }
{ echo 'review,sentiment'; for i in $(seq 1 12); do echo "review $i,positive"; done
  echo '"review 13 never closed,positive'; echo '"review 14",negative'; } >"$tmp/quote.csv"
expect 2 "$tmp/quote.csv:14: a quoted field opens here and runs on to line 15" -- \
    "${cls[@]}" --data "$tmp/quote.csv"
{ echo 'review,sentiment'; for i in $(seq 1 12); do echo "review $i,positive"; done
  echo 'good, but long,negative'; } >"$tmp/extra.csv"
expect 2 "$tmp/extra.csv:14: too many columns (3 where the header has 2; expected review,sentiment)" \
    -- "${cls[@]}" --data "$tmp/extra.csv"

# Files that are not regular files are refused by name at once, never waited
# on (a FIFO used to block in open()); a symlink loop is not a missing file.
mkfifo "$tmp/fifo.txt" "$tmp/fifo.csv"
expect 2 "data file $tmp/fifo.txt: is a FIFO (named pipe), not a regular file" -- \
    timeout 20 "${gpt[@]}" --data "$tmp/fifo.txt"
expect 2 "data file $tmp/fifo.csv: is a FIFO" -- timeout 20 "${cls[@]}" --data "$tmp/fifo.csv"
expect 2 "data file $tmp/fifo.txt: is a FIFO" -- \
    timeout 20 $ZT_MPIRUN -np 2 "${gpt[@]}" --data "$tmp/fifo.txt"
mkdir "$tmp/bpe"
cp "$ZT_SHARED/data/gpt2-bpe/vocab.bpe" "$tmp/bpe/"
mkfifo "$tmp/bpe/encoder.json"
expect 2 "tokenizer file $tmp/bpe/encoder.json: is a FIFO" -- timeout 20 "${gpt[@]}" \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --tokenizer "$tmp/bpe"
mkdir -p "$tmp/acl/train/pos" "$tmp/acl/train/neg"
echo "a fine film" >"$tmp/acl/train/pos/1_9.txt"
mkfifo "$tmp/acl/train/neg/2_1.txt"
expect 2 "review file $tmp/acl/train/neg/2_1.txt: is a FIFO" -- \
    timeout 20 "${cls[@]}" --data "$tmp/acl"
expect 2 "data file $tmp/bpe: is a directory, not a file" -- timeout 20 "${gpt[@]}" \
    --data "$tmp/bpe"
ln -s "$tmp/loop.txt" "$tmp/loop.txt"
expect 2 "$tmp/loop.txt: is a symlink loop" -- timeout 20 "${gpt[@]}" --data "$tmp/loop.txt"
grep -q "No such file" "$tmp/out" && fail "a symlink loop reported as a missing file"
expect 2 "data path $tmp/loop.txt: is a symlink loop" -- timeout 20 "${cls[@]}" \
    --data "$tmp/loop.txt"
if zt_unprivileged "permission denied on a data file"; then
    cp "$ZT_SHARED/data/tinyshakespeare/input.txt" "$tmp/secret.txt"
    chmod 000 "$tmp/secret.txt"
    chmod 644 "$cfg"
    expect 2 "permission denied: cannot read data file $tmp/secret.txt" -- \
        timeout 20 "${unpriv[@]}" "${gpt[@]}" --data "$tmp/secret.txt"
    grep -q "hint: .*chmod a+r" "$tmp/out" || { cat "$tmp/out"; fail "no chmod hint"; }
fi
# What a message quotes from a user's file is escaped: a vocab.bpe cut inside
# a 2-byte character (its line 12212, "Ġ Ã") used to put the raw half
# character on the terminal. The whole output must be UTF-8 with no control
# bytes but newlines (zt_printable).
mkdir "$tmp/cut"
cp "$ZT_SHARED/data/gpt2-bpe/encoder.json" "$tmp/cut/"
$ZT_PYTHON - "$ZT_SHARED/data/gpt2-bpe/vocab.bpe" "$tmp/cut/vocab.bpe" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
at = data.index(b"\n\xc4\xa0 \xc3\x90\n") + 5  # just after the 0xC3 of "Ã"
open(sys.argv[2], "wb").write(data[:at])
PY
expect 2 'vocab.bpe:12212: token "\\xC3" is not in encoder.json' -- "${gpt[@]}" \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --tokenizer "$tmp/cut"
zt_printable "$tmp/out"
printf 'review,sentiment\nfine,positive\nbad,\033[2J\033]0;x\007\n' >"$tmp/esc.csv"
expect 2 'esc.csv:3: unknown label "\\x1B\[2J\\x1B\]0;x\\x07"' -- "${cls[@]}" --data "$tmp/esc.csv"
zt_printable "$tmp/out"

# Out of memory while reading gives the file, the bytes and a hint. An
# address-space limit (ulimit -v, in a subshell) and GPT-2 BPE on a 40 MiB
# run without whitespace, one piece whose merge scratch takes 112 bytes a
# byte: more than the limit whatever the binary maps at start.
$ZT_PYTHON -c 'import sys; open(sys.argv[1], "w").write("some words\n" * 100 + "a" * (40 << 20) + "\n")' \
    "$tmp/run.txt"
expect 1 "out of memory loading $tmp/run.txt: cannot allocate .* for the merge scratch of a 41943040-byte piece" \
    -- bash -c 'ulimit -v 3000000; exec "$@"' _ "${gpt[@]}" --data "$tmp/run.txt" \
    --tokenizer "$ZT_SHARED/data/gpt2-bpe"
grep -q "^hint: the text is 40.0 MiB; .* use a smaller data file" "$tmp/out" ||
    { cat "$tmp/out"; fail "no hint with the file's size"; }

# Data that does not fit the memory cgroup (the ZT_CGROUP_ROOT testing aid) is
# refused before its ids are allocated, with the breakdown; every rank of the
# node loads its own copy, so two ranks share the room. A CSV is refused
# before it is read.
mkdir -p "$tmp/cg"
echo $((2 * 1024 * 1024)) >"$tmp/cg/memory.max"
echo 0 >"$tmp/cg/memory.current"
$ZT_PYTHON -c 'import sys; open(sys.argv[1], "w").write(("to be or not to be\n" * 220753)[:4 << 20])' "$tmp/4m.txt"
expect 1 "not enough host memory to load $tmp/4m.txt (4.0 MiB on disk): this rank would hold .* (token ids 4.0 MiB for 4194304 tokens of 1 byte(s), tokenizer .*, read buffers .*), but the memory cgroup leaves 2.0 MiB for this node's 1 rank(s) in it ($tmp/cg/memory.max: limit 2.0 MiB, 0.0 MiB in use)" \
    -- env ZT_CGROUP_ROOT="$tmp/cg" "${gpt[@]}" --data "$tmp/4m.txt"
grep -q "^hint: use a smaller data file, fewer ranks per node" "$tmp/out" || { cat "$tmp/out"; fail "no hint"; }
expect 1 "leaves 2.0 MiB for this node's 2 rank(s) in it" -- \
    env ZT_CGROUP_ROOT="$tmp/cg" $ZT_MPIRUN -np 2 -x ZT_CGROUP_ROOT "${gpt[@]}" --data "$tmp/4m.txt"
{ echo 'review,sentiment'; for i in $(seq 1 150000); do echo "review $i,positive"; done; } >"$tmp/big.csv"
expect 1 "load $tmp/big.csv (.* on disk): .* (the CSV file is read whole), but the memory cgroup" \
    -- env ZT_CGROUP_ROOT="$tmp/cg" "${cls[@]}" --data "$tmp/big.csv"

echo "ok: bad data and transformer flags are refused with clear messages"
