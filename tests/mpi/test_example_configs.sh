#!/usr/bin/env bash
# The shipped example configs and the documentation's commands: every
# scripts/configs/*.json trains a small GPT-lite for 3 steps at np 2 without a
# warning (the sweep configs leave the batch "auto": the flag fills it), and
# every scripts/configs/ file, docs page and script the README and docs/ name
# exists, so no example points at a file the project does not ship.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

root=$(pwd)
data="$ZT_SHARED/data/tinyshakespeare/input.txt"
gpt=(--model gptlite --data "$data" --n-layer 2 --n-embd 32 --n-head 2 --block-size 32
     --dropout 0 --steps 3)
n=0
for c in scripts/configs/*.json; do
    extra=()
    grep -q '"train_batch_size": *"auto"' "$c" && extra=(--train-batch-size 16)
    # From the scratch directory: configs that log write relative paths.
    (cd "$tmp" && $ZT_MPIRUN -np 2 "$root/zerotrain" --config "$root/$c" "${gpt[@]}" "${extra[@]}") \
        >"$tmp/run.log" 2>&1 ||
        { cat "$tmp/run.log"; fail "$c does not train"; }
    grep -q "zerotrain: done: 3 steps" "$tmp/run.log" || { cat "$tmp/run.log"; fail "$c: no done line"; }
    if grep -i "warning" "$tmp/run.log" | grep -v "ignored\|wandb\|comet\|checkpoint" >/dev/null; then
        cat "$tmp/run.log"; fail "$c: a warning"
    fi
    n=$((n + 1))
done
echo "ok: $n shipped configs train at np 2 without a warning"

# Every repository path the README and docs/ name exists.
missing=$(grep -ohE '(scripts|docs|tests)/[A-Za-z0-9_./-]+\.(json|md|sh|py)' README.md docs/*.md |
          sort -u | while read -r f; do [ -e "$f" ] || echo "$f"; done)
[ -z "$missing" ] || fail "the documentation names files that do not exist: $missing"
links=$(grep -ohE '\]\((docs/)?[a-z0-9_-]+\.md' README.md docs/*.md | sed -E 's/^\]\(//' | sort -u)
for l in $links; do
    [ -e "$l" ] || [ -e "docs/$l" ] || fail "a link to $l, which does not exist"
done
echo "ok: every file and page the README and docs/ name exists"
