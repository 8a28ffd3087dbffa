#!/usr/bin/env bash
# Regenerates the seed corpora of tests/fuzz/corpus/ from real inputs: the
# example configs and configs in the tests' shapes, slices of tiny shakespeare
# and of the IMDB CSV, a prefix of GPT-2's BPE files, and checkpoints written
# by `zerotrain --save-dir` (so ./zerotrain must be built). Run from anywhere;
# the harness headers (tests/fuzz/fuzz_*.c) describe each input format. Files
# named regress-* are fuzzer findings kept as regression inputs: they stay.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch
out=tests/fuzz/corpus
sep=$'\n--8<--\n'
data=$ZT_SHARED/data
mkdir -p "$out"/{config,data,tokenizer,ckpt}
find "$out" -type f ! -name 'regress-*' -delete

# config: the example configs, and one per feature the tests exercise.
cp scripts/configs/*.json "$out/config/"
put() { printf '%s' "$2" >"$out/$1"; }
put config/hjson.json '# comments and trailing commas, as in the wild
{
  "train_batch_size": 16, // derived GAS
  /* block */ "train_micro_batch_size_per_gpu": "auto",
  "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "betas": [0.9, 0.95],},},
}'
put config/offload-s3.json '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5, "total_num_steps": 50}},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
   "offload_param": {"device": "cpu"}, "stage3_param_persistence_threshold": 300,
   "stage3_prefetch_bucket_size": "auto", "zero_hpz_partition_size": 1}}'
put config/fp16.json '{"train_batch_size": 8, "gradient_accumulation_steps": 2,
 "fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3, "hysteresis": 2,
          "min_loss_scale": 1},
 "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "fp16",
 "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e3, "allgather_bucket_size": 2e3}}'
put config/bf16-ckpt.json '{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
 "activation_checkpointing": {"partition_activations": false, "number_checkpoints": 2,
                              "cpu_checkpointing": false},
 "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
   "cycle_first_step_size": 10, "cycle_momentum": false}},
 "optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9, "nesterov": true}},
 "zero_allow_untested_optimizer": true, "zero_optimization": {"stage": 1},
 "csv_monitor": {"enabled": true, "output_path": "runs/", "job_name": "fuzz"},
 "steps_per_print": 10, "wall_clock_breakdown": false}'
put config/mics.json '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
   "warmup_num_steps": 10, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01}},
 "zero_optimization": {"stage": 3, "mics_shard_size": 2, "overlap_comm": false,
   "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9}}'

# data: a mode byte (fuzz_data.c) and a file.
head -c 3000 "$data/tinyshakespeare/input.txt" >"$tmp/shk"
"$ZT_PYTHON" - "$data/imdb/imdb-2500.csv" "$tmp/imdb" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="", encoding="utf-8")))[:13]
csv.writer(open(sys.argv[2], "w", newline="", encoding="utf-8")).writerows(
    [rows[0]] + [[r[0][:160], r[1]] for r in rows[1:]])
PY
printf '\x0c' | cat - "$tmp/shk" >"$out/data/text-char-block4"
printf '\x0e' | cat - "$tmp/shk" >"$out/data/text-bpe-block4"
printf '\x1d' | cat - "$tmp/imdb" >"$out/data/imdb-byte-len8"
printf '\x1f' | cat - "$tmp/imdb" >"$out/data/imdb-bpe-len8"
printf '\x05%s' $'\xef\xbb\xbfid,sentiment,review\r\n1,positive,"a ""quoted"", review\nover lines"\r\n\r\n2,negative,plain <br /> text\r\n3,positive,x\r\n4,negative,y\r\n5,positive,z\r\n6,negative,w\r\n7,positive,v\r\n8,negative,u\r\n9,positive,t\r\n10,negative,s\r\n' \
    >"$out/data/csv-dialect-len2"

# tokenizer: encoder.json, vocab.bpe and a text (fuzz_tokenizer.c); the
# first 300 merges of GPT-2's files, <|endoftext|> renumbered after them.
"$ZT_PYTHON" - "$data/gpt2-bpe" "$out/tokenizer/gpt2-300" "$sep" <<'PY'
import json, sys
src, dst, sep = sys.argv[1:]
enc = json.load(open(f"{src}/encoder.json", encoding="utf-8"))
merges = open(f"{src}/vocab.bpe", encoding="utf-8").read().split("\n")[1:301]
keep = {k: v for k, v in enc.items() if v < 256 + len(merges)}
assert all("".join(m.split(" ")) in keep for m in merges)
keep["<|endoftext|>"] = len(keep)
text = "First Citizen:\nWe are accounted poor citizens, the patricians good. 1234 isn't é\u00e9 \u4e2d\n"
with open(dst, "w", encoding="utf-8") as f:
    f.write(json.dumps(keep, ensure_ascii=False) + sep + "#version: 0.2\n" + "\n".join(merges)
            + "\n" + sep + text)
PY
{ printf '{"a": 0, "b": 1, "<|endoftext|>": 2}%s' "$sep"; printf 'a b%sab' "$sep"; } \
    >"$out/tokenizer/too-small"

# ckpt: manifests and shards of real saves at step 5 (the harness's tag).
cat >"$tmp/adam.json" <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "fp16": {"enabled": true, "initial_scale_power": 8}, "zero_optimization": {"stage": 2}}
JSON
cat >"$tmp/sgd.json" <<'JSON'
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 1e-2, "momentum": 0.9}},
 "zero_optimization": {"stage": 1}}
JSON
printf 'review,sentiment\n' >"$tmp/imdb.csv"
for i in $(seq 20); do
    printf '"review %d, fine",positive\nbad %d,negative\n' "$i" "$i" >>"$tmp/imdb.csv"
done
mlp=(--model mlp --width 8 --layers 2 --in-size 4 --out-size 2)
save() { # name np config args...: a save at step 5 into $tmp/name
    local name=$1 np=$2 cfg=$3
    shift 3
    $ZT_MPIRUN -np "$np" ./zerotrain --config "$tmp/$cfg.json" --device cpu --steps 5 \
        --save-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
}
save mlp-np1 1 sgd "${mlp[@]}"
save mlp-np2-fp16 2 adam "${mlp[@]}"
save gpt-char 1 sgd --model gptlite --data "$tmp/shk" --n-layer 1 --n-embd 8 --n-head 2 \
    --block-size 8
save cls-byte 1 sgd --model classifier --data "$tmp/imdb.csv" --n-layer 1 --embed-dim 8 \
    --n-head 2 --hidden-dim 8 --max-len 8
for name in mlp-np1 mlp-np2-fp16 gpt-char cls-byte; do
    d=$tmp/$name/global_step5
    { cat "$d/zt_manifest.json"; printf '%s' "$sep"; cat "$d/zero_pp_rank_0_mp_rank_00_optim_states.zt"; } \
        >"$out/ckpt/$name"
done
# A shard header alone, and a `latest` that names no tag.
{ printf '%s' "$sep"; head -c 128 "$tmp/mlp-np1/global_step5/zero_pp_rank_0_mp_rank_00_optim_states.zt"; } \
    >"$out/ckpt/header-only"
{ cat "$tmp/mlp-np1/global_step5/zt_manifest.json"; printf '%s%s../etc\n' "$sep" "$sep"; } \
    >"$out/ckpt/bad-latest"
{ cat "$tmp/mlp-np1/global_step5/zt_manifest.json"; printf '%s%sglobal_step5\0junk' "$sep" "$sep"; } \
    >"$out/ckpt/latest-nul"
# The same saves in format 1 (no manifest checksum, as the previous version
# wrote them): mutations of these reach the value checks behind the checksum.
for name in mlp-np2-fp16 gpt-char cls-byte; do
    d=$tmp/$name/global_step5
    "$ZT_PYTHON" tests/tools/ztcheck.py reseal "$d/zt_manifest.json" --drop
    { cat "$d/zt_manifest.json"; printf '%s' "$sep"; cat "$d/zero_pp_rank_0_mp_rank_00_optim_states.zt"; } \
        >"$out/ckpt/$name-v1"
done
# A safetensors file in the shard's place (the harness parses that part as one too).
./zerotrain consolidate "$tmp/mlp-np1" --out "$tmp/mlp.safetensors" --format safetensors >/dev/null
{ printf '{}%s' "$sep"; cat "$tmp/mlp.safetensors"; } >"$out/ckpt/safetensors-mlp"
du -sh "$out"/*
