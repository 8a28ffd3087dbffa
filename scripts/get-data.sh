#!/usr/bin/env bash
# The data sets of the built-in models, from their public sources, checked
# against pinned sha256 sums, into datasets/ (or --dir DIR):
#
#   shakespeare  datasets/tinyshakespeare/input.txt   karpathy/char-rnn's tiny shakespeare
#   gpt2-bpe     datasets/gpt2-bpe/encoder.json, vocab.bpe   OpenAI's GPT-2 tokenizer files
#   imdb         datasets/imdb/imdb-2500.csv          2,500 IMDB reviews (review,sentiment)
#   aclimdb      datasets/aclImdb/                    the full Stanford IMDB set (84 MB download)
#
# With no NAME: shakespeare, gpt2-bpe and imdb. A file already in place with
# the right sum is kept. Where ../shared/data holds a file with the right sum
# (ZT_SHARED_DATA names another directory) it is linked, not downloaded.
# Without it, imdb is built from the Stanford tarball (aclimdb): 2,500 of its
# training reviews, a fixed choice made by scripts/imdb_sample.py, the same
# shape as the shared sample but not the same reviews.
#
# ZT_DATA_MIRROR=URL fetches every file as URL/<file name> instead (an
# internal mirror; file:// works); ZT_DATA_DIR is the default of --dir.
# --print prints the path of each NAME (what scripts pass to --data), nothing
# else on stdout.
# Needs curl or wget, sha256sum, tar and python3 (imdb without the shared copy).
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."
root=$(pwd)

dest=${ZT_DATA_DIR:-$root/datasets}
print=no
names=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dest=${2:?--dir needs a directory}; shift 2
               case "$dest" in /*) ;; *) dest=$caller/$dest ;; esac ;;
        --print) print=yes; shift ;;
        -h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        shakespeare|gpt2-bpe|imdb|aclimdb) names+=("$1"); shift ;;
        all) names+=(shakespeare gpt2-bpe imdb); shift ;;
        *) echo "get-data.sh: unknown data set or flag '$1' (shakespeare, gpt2-bpe, imdb, aclimdb, all, --dir DIR, --print)" >&2; exit 2 ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=(shakespeare gpt2-bpe imdb)
shared=${ZT_SHARED_DATA:-$root/../shared/data}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

SHAKESPEARE_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
SHAKESPEARE_SHA=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
GPT2_URL=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main
ENCODER_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
VOCAB_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ACLIMDB_URL=https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz
ACLIMDB_SHA=c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe
IMDB_SAMPLE_SHA=27eb2025b12430a31ade5f433f204a2ccfaad0d15e962c5f832848e6fd4c46da

say() {
    if [ "$print" = yes ]; then echo "$*" >&2; else echo "$*"; fi
}
die() { echo "get-data.sh: error: $*" >&2; exit 1; }

sum_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch URL SHA OUT: download to OUT (atomically), refusing a wrong sum.
fetch() {
    local url=$1 sha=$2 out=$3
    [ -n "${ZT_DATA_MIRROR:-}" ] && url="${ZT_DATA_MIRROR%/}/$(basename "$url")"
    mkdir -p "$(dirname "$out")"
    local part="$out.part"
    say "get-data.sh: downloading $url"
    if command -v curl >/dev/null; then
        curl -fL --retry 2 -sS -o "$part" "$url" || { rm -f "$part"; die "cannot download $url (no network? set ZT_DATA_MIRROR or copy the file to $out)"; }
    elif command -v wget >/dev/null; then
        wget -q -O "$part" "$url" || { rm -f "$part"; die "cannot download $url (no network? set ZT_DATA_MIRROR or copy the file to $out)"; }
    else
        die "neither curl nor wget is installed (apt-get install curl)"
    fi
    local got
    got=$(sum_of "$part")
    if [ "$got" != "$sha" ]; then
        rm -f "$part"
        die "$url has sha256 $got, expected $sha: not used"
    fi
    mv -f "$part" "$out"
}

# want REL SHA URL: DEST/REL with the right sum, from what is there, the shared
# copy, or the network.
want() {
    local rel=$1 sha=$2 url=$3 out="$dest/$1"
    if [ -e "$out" ]; then
        [ "$(sum_of "$out")" = "$sha" ] && return 0
        say "get-data.sh: $out has the wrong sha256: replacing it"
        rm -f "$out"
    fi
    if [ -f "$shared/$rel" ] && [ "$(sum_of "$shared/$rel")" = "$sha" ]; then
        mkdir -p "$(dirname "$out")"
        ln -s "$(cd "$(dirname "$shared/$rel")" && pwd)/$(basename "$rel")" "$out"
        say "get-data.sh: $out -> the shared copy"
        return 0
    fi
    [ -f "$shared/$rel" ] && say "get-data.sh: $shared/$rel has the wrong sha256: downloading instead"
    fetch "$url" "$sha" "$out"
}

aclimdb() {
    [ -d "$dest/aclImdb/train/pos" ] && [ -d "$dest/aclImdb/test/neg" ] && return 0
    local tgz="$dest/aclImdb_v1.tar.gz"
    if [ ! -f "$tgz" ] || [ "$(sum_of "$tgz")" != "$ACLIMDB_SHA" ]; then
        rm -f "$tgz"
        fetch "$ACLIMDB_URL" "$ACLIMDB_SHA" "$tgz"
    fi
    say "get-data.sh: extracting $tgz"
    rm -rf "$dest/aclImdb.part"
    mkdir -p "$dest/aclImdb.part"
    tar -xzf "$tgz" -C "$dest/aclImdb.part"
    rm -rf "$dest/aclImdb"
    mv "$dest/aclImdb.part/aclImdb" "$dest/aclImdb"
    rm -rf "$dest/aclImdb.part" "$tgz"
}

imdb() {
    local out="$dest/imdb/imdb-2500.csv"
    if [ -e "$out" ] && [ "$(sum_of "$out")" = "$IMDB_SAMPLE_SHA" ]; then return 0; fi
    if [ -f "$shared/imdb/imdb-2500.csv" ] && [ "$(sum_of "$shared/imdb/imdb-2500.csv")" = "$IMDB_SAMPLE_SHA" ]; then
        want imdb/imdb-2500.csv "$IMDB_SAMPLE_SHA" "-"
        return 0
    fi
    # Built from the tarball: its sum is pinned, the sample is a pure function of it.
    [ -f "$out" ] && [ -f "$out.from-aclimdb" ] && return 0
    aclimdb
    mkdir -p "$dest/imdb"
    rm -f "$out"
    python3 "$root/scripts/imdb_sample.py" "$dest/aclImdb" "$out.part" 2500
    mv "$out.part" "$out"
    touch "$out.from-aclimdb"
    say "get-data.sh: $out: 2,500 reviews sampled from aclImdb/train"
}

for name in "${names[@]}"; do
    case "$name" in
        shakespeare)
            want tinyshakespeare/input.txt "$SHAKESPEARE_SHA" "$SHAKESPEARE_URL"
            if [ "$print" = yes ]; then echo "$dest/tinyshakespeare/input.txt"; fi ;;
        gpt2-bpe)
            want gpt2-bpe/encoder.json "$ENCODER_SHA" "$GPT2_URL/encoder.json"
            want gpt2-bpe/vocab.bpe "$VOCAB_SHA" "$GPT2_URL/vocab.bpe"
            if [ "$print" = yes ]; then echo "$dest/gpt2-bpe"; fi ;;
        imdb)
            imdb
            if [ "$print" = yes ]; then echo "$dest/imdb/imdb-2500.csv"; fi ;;
        aclimdb)
            aclimdb
            if [ "$print" = yes ]; then echo "$dest/aclImdb"; fi ;;
    esac
done
[ "$print" = yes ] || echo "get-data.sh: ready in $dest: ${names[*]}"
