#!/usr/bin/env bash
# Checkpoints under bad input. Each case exits non-zero with a message naming
# the file (or directory) at fault, loads nothing, and leaves the previous
# checkpoint loadable:
#   a shard with one flipped byte, a truncated shard, a missing shard, a
#   manifest whose checksum was edited, a manifest from a model of other
#   dimensions, model flags that differ from the checkpoint's, another global
#   batch, a broken manifest, DIR/latest naming a missing tag, --resume with
#   nothing saved, a --save-dir that cannot be created (below a regular file:
#   root ignores chmod), and a disk that fills during a save (a 160k tmpfs
#   when mount is permitted, and always ZT_CKPT_FAIL_AFTER_BYTES): the failed
#   save leaves no partial directory, DIR/latest and the previous checkpoint
#   stay, and resuming from them reproduces the uninterrupted run bit for bit.
#   A partial directory left by a crash is ignored on resume and replaced by
#   the next save of that step; re-saving an existing step replaces it whole.
#   A FIFO in place of DIR/latest, a manifest or a shard is refused at once by
#   name, a symlink loop is named as one, and a file this user may not read
#   (as nobody when root) is not called a damaged checkpoint.
#   consolidate refuses an --out it cannot write before reading the shards,
#   with a hint about --out rather than --save-dir.
#   A second job saving into a --save-dir in use is refused before it trains.
#   eval --eval-iters says how many samples it read; a manifest with an edited
#   vocabulary is named as the fault.
#   The manifest's own checksum: a one-digit edit of optimizer.step or of the
#   scaler's iteration is refused by it; behind a recomputed checksum
#   (tests/tools/ztcheck.py reseal, Python's zlib over the documented canonical
#   form) the range checks refuse a negative, zero or non-numeric fp16 loss
#   scale, a non-numeric loss history and counters that disagree; a manifest
#   claiming n_embd 2^24 over unchanged shards is a damaged checkpoint for
#   generate, eval, consolidate and --resume (exit 2, not "not enough host
#   memory"); DIR/latest holding a tag, a NUL and junk is refused; a manifest
#   of format 1 (no checksum) resumes bit for bit with a notice, and its
#   values are still range-checked.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
t0=$SECONDS

mlp_io=(--model mlp --in-size 24 --out-size 10 --seed 5 --device cpu)
mlp=("${mlp_io[@]}" --width 48 --layers 4)
cat >"$tmp/cfg.json" <<'JSON'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "eps": 1e-5}},
 "zero_optimization": {"stage": 1}}
JSON
sed 's/"train_batch_size": 12/"train_batch_size": 24/' "$tmp/cfg.json" >"$tmp/cfg24.json"
z=(timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}")
z_io=(timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" "${mlp_io[@]}")

# The reference: 4 steps, saved at 2 and 4.
expect 0 "saved checkpoint $tmp/ck/global_step4" -- "${z[@]}" --steps 4 --save-dir "$tmp/ck" \
    --save-interval 2 --dump-params "$tmp/full.bin"
cp -r "$tmp/ck" "$tmp/pristine"
shard="zero_pp_rank_1_mp_rank_00_optim_states.zt"

fresh() { rm -rf "$tmp/ck" && cp -r "$tmp/pristine" "$tmp/ck"; }
man="$tmp/ck/global_step4/zt_manifest.json"
damaged="global_step4/zt_manifest.json is damaged"
# edit_json FILE STATEMENT: runs the Python statement on the manifest m.
edit_json() {
    $ZT_PYTHON - "$1" "$2" <<'PY' || fail "editing $1"
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
}
# Recomputes the manifest's checksum with the test's own reader (zlib).
reseal() { $ZT_PYTHON tests/tools/ztcheck.py reseal "$@" || fail "resealing $1"; }
# The previous checkpoint still loads and continues to the same weights.
previous_loads() {
    expect 0 "resumed from $tmp/ck/global_step2" -- "${z[@]}" --steps 4 --load-dir "$tmp/ck" \
        --resume global_step2 --dump-params "$tmp/prev.bin"
    cmp "$tmp/full.bin" "$tmp/prev.bin" || fail "resume from global_step2 differs"
}

fresh
$ZT_PYTHON - "$tmp/ck/global_step4/$shard" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, 2)
    b = f.read(1)
    f.seek(-5, 2)
    f.write(bytes([b[0] ^ 0x01]))
PY
expect 2 "global_step4/$shard is corrupted: CRC-32" -- "${z[@]}" --steps 4 --load-dir "$tmp/ck" \
    --resume
previous_loads

fresh
truncate -s -100 "$tmp/ck/global_step4/$shard"
expect 2 "global_step4/$shard is .* bytes; the manifest says" -- "${z[@]}" --steps 4 \
    --load-dir "$tmp/ck" --resume
previous_loads

fresh
rm "$tmp/ck/global_step4/$shard"
expect 2 "global_step4/$shard is missing" -- "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
previous_loads

# A shard's checksum edited in the manifest: the manifest's own checksum
# finds the edit; recomputed, the shard's CRC-32 no longer matches.
fresh
sed -i '0,/"crc32": "[0-9a-f]*"/s//"crc32": "00000000"/' "$man"
expect 2 "$damaged: the CRC-32 of its content is [0-9a-f]*, its \"manifest_crc32\" says" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
reseal "$man"
shard0="zero_pp_rank_0_mp_rank_00_optim_states.zt"
expect 2 "global_step4/$shard0 is corrupted: CRC-32 .* the manifest says 00000000" -- "${z[@]}" \
    --steps 4 --load-dir "$tmp/ck" --resume
previous_loads

# One digit of a counter edited by hand: optimizer.step (Adam's bias
# correction: the run would go on with other weights) and the sample count.
# The checksum refuses both; resealed, the counters' relations do.
for edit in 's/"step": 4,/"step": 3,/' 's/"global_samples": 48,/"global_samples": 42,/'; do
    fresh
    sed -i "$edit" "$man"
    cmp -s "$man" "$tmp/pristine/global_step4/zt_manifest.json" && fail "sed $edit changed nothing"
    expect 2 "$damaged: the CRC-32 of its content" -- "${z[@]}" --steps 4 --load-dir "$tmp/ck" \
        --resume
    grep -q "hint: the checkpoint is damaged" "$tmp/out" || fail "no hint"
done
reseal "$man"
expect 2 "$damaged: \"training.global_samples\" is 42; expected 48 (global_steps x train_batch_size)" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
fresh
sed -i 's/"step": 4,/"step": 3,/' "$man" && reseal "$man"
expect 2 "$damaged: \"optimizer.step\" is 3; expected 4 (training.global_steps - training.skipped_steps)" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
# A loss history entry that is not a number (it used to become null).
fresh
edit_json "$man" 'm["history"]["loss"][1] = "2.3"' && reseal "$man"
expect 2 "$damaged: \"history.loss\[1\]\" is \"2.3\"; expected a number" -- "${z[@]}" --steps 4 \
    --load-dir "$tmp/ck" --resume
previous_loads

# DIR/latest holding a tag, a NUL and junk (it used to be cut at the NUL).
fresh
printf 'global_step4\0junk' >"$tmp/ck/latest"
expect 2 "checkpoint pointer $tmp/ck/latest is damaged: it holds a NUL byte at offset 12" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
expect 2 "checkpoint pointer $tmp/ck/latest is damaged" -- \
    timeout 30 ./zerotrain consolidate "$tmp/ck" --out "$tmp/latest-c.bin"
printf 'global_step4\n' >"$tmp/ck/latest"
expect 0 "resumed from $tmp/ck/global_step4" -- "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume

# A manifest of format 1 (written before the checksum existed: the same
# members without it) resumes with a notice, bit for bit; its values are
# still range-checked.
fresh
reseal "$tmp/ck/global_step2/zt_manifest.json" --drop
expect 0 "note: checkpoint manifest $tmp/ck/global_step2/zt_manifest.json has format version 1" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume global_step2 --dump-params "$tmp/v1.bin"
cmp "$tmp/full.bin" "$tmp/v1.bin" || fail "resume from a format-1 manifest differs"
edit_json "$tmp/ck/global_step2/zt_manifest.json" 'm["optimizer"]["step"] = 1'
expect 2 "global_step2/zt_manifest.json is damaged: \"optimizer.step\" is 1; expected 2" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume global_step2

# The fp16 loss scale behind a recomputed checksum: negative, zero and
# non-numeric scales are refused (a negative one used to be trained with);
# JSON has no infinity, so Python's Infinity and an overflowing 1e999 are not
# JSON at all.
cat >"$tmp/fp16.json" <<'JSON'
{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "fp16": {"enabled": true, "initial_scale_power": 8}, "zero_optimization": {"stage": 1}}
JSON
zh=(timeout 60 ./zerotrain --config "$tmp/fp16.json" "${mlp[@]}")
expect 0 "saved checkpoint $tmp/h/global_step2" -- "${zh[@]}" --steps 2 --save-dir "$tmp/h"
hman="$tmp/h/global_step2/zt_manifest.json"
grep -q '"dynamic": true' "$hman" || fail "the fp16 run saved no dynamic loss scaler"
cp "$hman" "$tmp/h.json"
for scale in -256.0 0.0 '"inf"' '"256"' null; do
    cp "$tmp/h.json" "$hman"
    edit_json "$hman" "m['loss_scaler']['cur_scale'] = json.loads('$scale')" && reseal "$hman"
    expect 2 "global_step2/zt_manifest.json is damaged: \"loss_scaler.cur_scale\" is $scale; expected a number > 0" -- \
        "${zh[@]}" --steps 3 --load-dir "$tmp/h" --resume
done
cp "$tmp/h.json" "$hman"
edit_json "$hman" "m['loss_scaler']['cur_scale'] = float('inf')"
expect 2 "global_step2/zt_manifest.json is not valid JSON" -- "${zh[@]}" --steps 3 \
    --load-dir "$tmp/h" --resume
cp "$tmp/h.json" "$hman"
sed -i 's/"cur_scale": 256.0/"cur_scale": 1e999/' "$hman"
grep -q '"cur_scale": 1e999' "$hman" || fail "no 1e999 in $hman"
expect 2 "global_step2/zt_manifest.json is not valid JSON" -- "${zh[@]}" --steps 3 \
    --load-dir "$tmp/h" --resume
cp "$tmp/h.json" "$hman"
expect 0 "resumed from $tmp/h/global_step2" -- "${zh[@]}" --steps 3 --load-dir "$tmp/h" --resume

# A manifest from a model of other dimensions (width 32) in place of this one,
# with its checksum recomputed: the shards are not what it describes.
fresh
"${z_io[@]}" --width 32 --layers 4 --steps 1 --save-dir "$tmp/other" >/dev/null 2>&1 ||
    fail "saving the width-32 model"
cp "$tmp/other/global_step1/zt_manifest.json" "$tmp/ck/global_step4/zt_manifest.json"
sed -i 's/"global_step1"/"global_step4"/' "$tmp/ck/global_step4/zt_manifest.json"
reseal "$man"
expect 2 "global_step4/$shard0 is [0-9]* bytes; the manifest says [0-9]*: the file is truncated or was replaced" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
previous_loads

# Flags that do not match the checkpoint: another model, other dimensions,
# another global batch.
fresh
expect 2 "zt_manifest.json holds mlp with layers 4; this run has 3" -- "${z_io[@]}" --width 48 \
    --layers 3 --steps 4 --load-dir "$tmp/ck" --resume
expect 2 "zt_manifest.json holds a mlp model; this run builds --model gptlite" -- \
    timeout 60 $ZT_MPIRUN -np 2 ./zerotrain --config "$tmp/cfg.json" --model gptlite \
    --data "$ZT_SHARED/data/tinyshakespeare/input.txt" --n-layer 1 --n-embd 16 --n-head 2 \
    --block-size 8 --device cpu --steps 4 --load-dir "$tmp/ck" --resume
expect 2 "train_batch_size 12; this run's is 24" -- timeout 60 $ZT_MPIRUN -np 2 ./zerotrain \
    --config "$tmp/cfg24.json" "${mlp[@]}" --steps 4 --load-dir "$tmp/ck" --resume

# A manifest that is not JSON; DIR/latest naming a tag that does not exist.
fresh
echo '{"format": "zerotrain-checkpoint",' >"$tmp/ck/global_step4/zt_manifest.json"
expect 2 "global_step4/zt_manifest.json is not valid JSON" -- "${z[@]}" --steps 4 \
    --load-dir "$tmp/ck" --resume
previous_loads
fresh
printf global_step7 >"$tmp/ck/latest"
expect 2 "checkpoint $tmp/ck/global_step7 does not exist" -- "${z[@]}" --steps 4 \
    --load-dir "$tmp/ck" --resume
mkdir "$tmp/empty"
expect 2 "no checkpoint to resume in $tmp/empty" -- "${z[@]}" --steps 4 --load-dir "$tmp/empty" \
    --resume

# Checkpoint files that are not regular files are refused by name at once (a
# FIFO used to block the open forever); a symlink loop is not a missing file;
# a file this user may not read is not reported as a damaged checkpoint.
fresh
rm "$tmp/ck/latest" && mkfifo "$tmp/ck/latest"
expect 2 "checkpoint pointer $tmp/ck/latest: is a FIFO (named pipe), not a regular file" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
fresh
rm "$tmp/ck/global_step4/zt_manifest.json" && mkfifo "$tmp/ck/global_step4/zt_manifest.json"
expect 2 "checkpoint manifest $tmp/ck/global_step4/zt_manifest.json: is a FIFO" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
previous_loads
fresh
rm "$tmp/ck/global_step4/$shard" && mkfifo "$tmp/ck/global_step4/$shard"
expect 2 "checkpoint shard $tmp/ck/global_step4/$shard: is a FIFO" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
expect 2 "checkpoint shard $tmp/ck/global_step4/$shard: is a FIFO" -- \
    timeout 30 ./zerotrain consolidate "$tmp/ck" --out "$tmp/fifo-c.bin"
previous_loads
fresh
ln -sfn latest "$tmp/ck/latest"
expect 2 "checkpoint pointer $tmp/ck/latest: is a symlink loop" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/ck" --resume
grep -q "does not exist" "$tmp/out" && fail "a symlink loop reported as missing"
ln -s "$tmp/dirloop" "$tmp/dirloop"
expect 2 "checkpoint directory $tmp/dirloop: is a symlink loop" -- \
    "${z[@]}" --steps 4 --load-dir "$tmp/dirloop" --resume
grep -q "does not exist" "$tmp/out" && fail "a symlink loop reported as missing"
if zt_unprivileged "permission denied on checkpoint files"; then
    fresh
    chmod -R a+rX "$tmp/ck" && chmod 644 "$tmp/cfg.json"
    chmod 000 "$tmp/ck/global_step4/$shard"
    expect 2 "permission denied: cannot read checkpoint shard $tmp/ck/global_step4/$shard" -- \
        timeout 60 "${unpriv[@]}" ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}" --steps 4 \
        --load-dir "$tmp/ck" --resume
    grep -q "hint: .*chmod a+r" "$tmp/out" || { cat "$tmp/out"; fail "no chmod hint"; }
    grep -q "damaged" "$tmp/out" && fail "a denied read reported as a damaged checkpoint"
    chmod 644 "$tmp/ck/global_step4/$shard"
    chmod 000 "$tmp/ck/global_step4/zt_manifest.json"
    mkdir -m 777 "$tmp/anyone"
    expect 2 "permission denied: cannot read checkpoint manifest" -- \
        timeout 60 "${unpriv[@]}" ./zerotrain consolidate "$tmp/ck" --out "$tmp/anyone/c.bin"
    grep -q "damaged" "$tmp/out" && fail "a denied read reported as a damaged checkpoint"
fi

# A save directory below a regular file fails before any training step.
touch "$tmp/file.txt"
expect 2 "cannot create checkpoint directory $tmp/file.txt/sub" -- "${z[@]}" --steps 4 \
    --save-dir "$tmp/file.txt/sub"
grep -q "step=1" "$tmp/out" && fail "trained although the save directory is unusable"

# The disk fills during the second save.
disk_full() { # dir [env...]: saves at 2 fit, the one at 4 does not
    local dir=$1
    shift
    local what="cannot write checkpoint file $dir/global_step4.partial/.*: No space left on device"
    expect 2 "$what" -- env "$@" "${z[@]}" --steps 4 --save-dir "$dir" --save-interval 2
    grep -q "saved checkpoint $dir/global_step2" "$tmp/out" || fail "the first save failed too"
    [ "$(cat "$dir/latest")" = global_step2 ] || fail "latest changed to $(cat "$dir/latest")"
    [ "$(cd "$dir" && echo *)" = "global_step2 latest" ] ||
        fail "left behind: $(cd "$dir" && echo *)"
    expect 0 "resumed from $dir/global_step2" -- "${z[@]}" --steps 4 --load-dir "$dir" --resume \
        --dump-params "$tmp/after-full.bin"
    cmp "$tmp/full.bin" "$tmp/after-full.bin" || fail "resume after a full disk differs"
}
# Each rank writes one shard (about 39 kB); rank 0 also the manifest.
disk_full "$tmp/sim" ZT_CKPT_FAIL_AFTER_BYTES=60000
echo "ok: simulated full disk (ZT_CKPT_FAIL_AFTER_BYTES)"
mkdir "$tmp/tmpfs"
if mount -t tmpfs -o size=160k tmpfs "$tmp/tmpfs" 2>/dev/null; then
    trap 'umount "$tmp/tmpfs" 2>/dev/null; rm -rf "$tmp"' EXIT
    disk_full "$tmp/tmpfs"
    echo "ok: a 160k tmpfs filled during a save"
else
    echo "note: cannot mount a tmpfs here; the simulated full disk stands in"
fi

# A crash mid-save leaves DIR/<tag>.partial: resume ignores it, the next save
# of that step replaces it.
fresh
mkdir "$tmp/ck/global_step6.partial"
echo junk >"$tmp/ck/global_step6.partial/$shard"
expect 0 "saved checkpoint $tmp/ck/global_step6" -- "${z[@]}" --steps 6 --save-dir "$tmp/ck" \
    --resume
[ ! -e "$tmp/ck/global_step6.partial" ] || fail "the stale partial directory survived"
[ "$(cat "$tmp/ck/latest")" = global_step6 ] || fail "latest is $(cat "$tmp/ck/latest")"

# Saving a step that already has a checkpoint (a run resumed from an earlier
# one) replaces it in one atomic exchange: no partial or old copy stays.
fresh
expect 0 "saved checkpoint $tmp/ck/global_step4" -- "${z[@]}" --steps 4 --save-dir "$tmp/ck" \
    --save-interval 2 --resume global_step2
[ "$(cd "$tmp/ck" && echo *)" = "global_step2 global_step4 latest" ] ||
    fail "after re-saving global_step4: $(cd "$tmp/ck" && echo *)"
$ZT_PYTHON tests/tools/ztcheck.py ckpt "$tmp/ck" --dump "$tmp/full.bin" ||
    fail "the re-saved global_step4"

# consolidate checks --out before reading the shards, and its hints name
# --out, not the --save-dir of a training run.
expect 2 "cannot write consolidated weights /nonexistent/dir/c.bin: directory /nonexistent/dir does not exist" -- \
    timeout 30 ./zerotrain consolidate "$tmp/ck" --out /nonexistent/dir/c.bin
grep -q -- "--save-dir" "$tmp/out" && fail "consolidate --out hints at --save-dir"
expect 2 "cannot write consolidated weights $tmp/ck: it is a directory" -- \
    timeout 30 ./zerotrain consolidate "$tmp/ck" --out "$tmp/ck"
mkdir "$tmp/c.bin.json"
expect 2 "cannot write tensor index $tmp/c.bin.json: it is a directory" -- \
    timeout 30 ./zerotrain consolidate "$tmp/ck" --out "$tmp/c.bin"
[ ! -e "$tmp/c.bin" ] || fail "consolidate left $tmp/c.bin behind"
rmdir "$tmp/c.bin.json"
if zt_unprivileged "consolidate --out into a directory without write permission"; then
    chmod -R a+rX "$tmp/ck"
    mkdir -m 555 "$tmp/ro"
    expect 2 "permission denied: cannot write consolidated weights $tmp/ro/c.bin" -- \
        timeout 30 "${unpriv[@]}" ./zerotrain consolidate "$tmp/ck" --out "$tmp/ro/c.bin"
    grep -q -- "--save-dir" "$tmp/out" && fail "consolidate --out hints at --save-dir"
    # A writable FILE in a read-only directory: the temporaries cannot be made.
    chmod 755 "$tmp/ro" && touch "$tmp/ro/old.bin" "$tmp/ro/old.bin.json"
    chmod 666 "$tmp/ro/old.bin" "$tmp/ro/old.bin.json" && chmod 555 "$tmp/ro"
    expect 2 "permission denied: cannot write consolidated weights $tmp/ro/old.bin" -- \
        timeout 30 "${unpriv[@]}" ./zerotrain consolidate "$tmp/ck" --out "$tmp/ro/old.bin"
    grep -q -- "--save-dir" "$tmp/out" && fail "consolidate --out hints at --save-dir"
fi

# Two jobs cannot save into one directory (they used to interleave their
# steps): the second is refused before it trains, naming the first's pid and
# host; the lock dies with the job that held it.
mkdir "$tmp/busy"
timeout 120 ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}" --steps 100000000 \
    --save-dir "$tmp/busy" >"$tmp/first.log" 2>&1 &
first=$!
stop_first() { kill "$first" 2>/dev/null || true; wait "$first" 2>/dev/null || true; }
for _ in $(seq 1 150); do
    [ -s "$tmp/busy/.zerotrain.lock" ] && break
    sleep 0.2
done
holder=$(cut -d' ' -f1 "$tmp/busy/.zerotrain.lock" 2>/dev/null || true)
[ -n "$holder" ] || { stop_first; cat "$tmp/first.log"; fail "the first job took no lock"; }
expect 2 "checkpoint directory $tmp/busy is in use by another zerotrain job (pid $holder on host $(hostname))" -- \
    "${z[@]}" --steps 4 --save-dir "$tmp/busy"
grep -q "step=" "$tmp/out" && { stop_first; fail "the second job trained"; }
stop_first
expect 0 "saved checkpoint $tmp/busy/global_step4" -- "${z[@]}" --steps 4 --save-dir "$tmp/busy"
# A holder that wrote nothing into the lock file (not a zerotrain job).
mkdir "$tmp/held"
$ZT_PYTHON -c '
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").close()
time.sleep(60)' "$tmp/held/.zerotrain.lock" "$tmp/held-ready" &
other=$!
for _ in $(seq 1 100); do
    [ -e "$tmp/held-ready" ] && break
    sleep 0.1
done
expect 2 "checkpoint directory $tmp/held is in use by another zerotrain job (its lock file" -- \
    "${z[@]}" --steps 4 --save-dir "$tmp/held"
kill "$other"
wait "$other" || true

# eval says how many validation samples --eval-iters read (it claimed all);
# a manifest whose vocabulary was edited is named when its tokenizer is
# built, and an id the tokenizer cannot decode names the checkpoint.
txt="$ZT_SHARED/data/tinyshakespeare/input.txt"
echo '{"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' \
    >"$tmp/gpt.json"
expect 0 "saved checkpoint $tmp/gpt/global_step1" -- timeout 60 ./zerotrain --config \
    "$tmp/gpt.json" --model gptlite --data "$txt" --n-layer 1 --n-embd 16 --n-head 2 \
    --block-size 8 --device cpu --steps 1 --save-dir "$tmp/gpt"
expect 0 "validation loss [0-9.]* (2 of the [0-9]* validation samples of $txt: --eval-iters 1)" -- \
    timeout 60 ./zerotrain eval --checkpoint "$tmp/gpt" --data "$txt" --eval-iters 1 --device cpu
expect 0 "(4 of the [0-9]* validation samples of $txt: --eval-iters 1)" -- timeout 60 \
    $ZT_MPIRUN -np 2 ./zerotrain eval --checkpoint "$tmp/gpt" --data "$txt" --eval-iters 1 \
    --device cpu
edit_vocab() { # dir vocab_size|keep: drops 30 characters of the stored vocabulary
    cp -r "$tmp/gpt" "$1"
    $ZT_PYTHON - "$1/global_step1/zt_manifest.json" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["tokenizer"]["vocabulary"] = m["tokenizer"]["vocabulary"][:-30]
if sys.argv[2] != "keep":
    m["tokenizer"]["vocab_size"] = int(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"))
PY
    reseal "$1/global_step1/zt_manifest.json"
}
edit_vocab "$tmp/gpt-vocab" keep
expect 2 "checkpoint manifest $tmp/gpt-vocab/global_step1/zt_manifest.json: \"tokenizer.vocab_size\" is 65, but the tokenizer (its \"tokenizer.vocabulary\") has 35 tokens" -- \
    timeout 60 ./zerotrain generate --checkpoint "$tmp/gpt-vocab" --length 50 --device cpu
# A tokenizer smaller than the model's vocabulary is a padded vocabulary
# (--vocab-size): sampling never draws the ids past the tokenizer's.
edit_vocab "$tmp/gpt-both" 35
expect 0 "generating 50 tokens from $tmp/gpt-both/global_step1" -- \
    timeout 60 ./zerotrain generate --checkpoint "$tmp/gpt-both" --length 50 --seed 1 --device cpu

# A manifest claiming n_embd 2^24 over the shards of n_embd 16, with a valid
# checksum: every reader refuses it as damaged before allocating for it
# (generate and eval said "not enough host memory", consolidate exited 0).
cp -r "$tmp/gpt" "$tmp/gpt-huge"
edit_json "$tmp/gpt-huge/global_step1/zt_manifest.json" 'm["model"]["n_embd"] = 2**24'
reseal "$tmp/gpt-huge/global_step1/zt_manifest.json"
huge="gpt-huge/global_step1/zt_manifest.json is damaged: its model arguments (gptlite: n_layer 1, n_embd 16777216, n_head 2, .*) build unit 0 (embed) of 1224736768 parameters; its layout and shards hold 1168"
for cmd in "generate --checkpoint $tmp/gpt-huge --length 5 --device cpu" \
    "eval --checkpoint $tmp/gpt-huge --data $txt --device cpu" \
    "consolidate $tmp/gpt-huge --out $tmp/huge.bin"; do
    # shellcheck disable=SC2086
    expect 2 "$huge" -- timeout 60 ./zerotrain $cmd
    grep -q "memory" "$tmp/out" && fail "$cmd: a damaged manifest reported as a memory shortage"
done
[ ! -e "$tmp/huge.bin" ] || fail "consolidate wrote the weights of a damaged manifest"
expect 2 "$huge" -- timeout 60 ./zerotrain --config "$tmp/gpt.json" --model gptlite --data "$txt" \
    --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --device cpu --steps 2 \
    --load-dir "$tmp/gpt-huge" --resume

# Usage errors.
expect 2 "--resume reads --load-dir DIR or --save-dir DIR" -- ./zerotrain --config "$tmp/cfg.json" \
    "${mlp[@]}" --resume
expect 2 "--keep-last needs --save-dir" -- ./zerotrain --config "$tmp/cfg.json" "${mlp[@]}" \
    --keep-last 2
expect 2 "zerotrain consolidate needs --out FILE" -- ./zerotrain consolidate "$tmp/ck"
expect 2 "checkpoint .* holds a mlp model" -- ./zerotrain generate --checkpoint "$tmp/ck" \
    --device cpu
expect 2 "global_step2/$shard is corrupted" -- bash -c "
    $ZT_PYTHON -c \"
import sys
with open('$tmp/ck/global_step2/$shard', 'r+b') as f:
    f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0x80]))\" &&
    ./zerotrain consolidate '$tmp/ck' --tag global_step2 --out '$tmp/c.bin'"
[ ! -e "$tmp/c.bin" ] && [ ! -e "$tmp/c.bin.tmp" ] || fail "consolidate left an output behind"

echo "PASS: checkpoint errors ($((SECONDS - t0)) s)"
