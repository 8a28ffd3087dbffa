#!/usr/bin/python3
"""Reference test for zerotrain's GPT-2 BPE tokenizer (data/bpe.c).

An independent GPT-2 encoder, written again here from OpenAI's gpt-2
encoder.py: bytes_to_unicode, the merges by rank, and the pre-tokenisation
pattern run by Python's own `re` engine, with \\p{L} and \\p{N} spelled out as
character classes built from unicodedata.category (the `regex` module is not
installed; `re`'s \\s is str.isspace(), as in zerotrain). It encodes a set of
tricky strings, a few hundred lines of tiny shakespeare and IMDB reviews and
the whole of tiny shakespeare, and compares the ids with zerotrain's
(build/tests/tokenize-tool), and checks that zerotrain decodes each back to the
same bytes.

    /usr/bin/python3 tests/reference/test_bpe.py [--zerotrain ./zerotrain] [--shared DIR]

Exit status 0 when everything matches, 1 on a mismatch (the first ones are
printed), 2 when the tool could not be built or run.
"""
import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = "build/tests/tokenize-tool"


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def category_class(prefixes):
    """The body of a `re` character class matching general categories that
    start with one of `prefixes`, as \\U ranges."""
    out, start, prev = [], None, None
    for cp in range(0x110000):
        if unicodedata.category(chr(cp))[0] in prefixes:
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            out.append((start, prev))
            start = None
    if start is not None:
        out.append((start, prev))
    return "".join("\\U%08x-\\U%08x" % (a, b) if a != b else "\\U%08x" % a for a, b in out)


def gpt2_pattern():
    letters, numbers = category_class("L"), category_class("N")
    return re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[" + letters + r"]+| ?[" + numbers
                      + r"]+| ?[^\s" + letters + numbers + r"]+|\s+(?!\S)|\s+")


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


class Encoder:
    """OpenAI gpt-2 encoder.py's Encoder, encode side."""

    def __init__(self, tokdir):
        with open(tokdir / "encoder.json", encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(tokdir / "vocab.bpe", encoding="utf-8") as f:
            merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.pat = gpt2_pattern()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in self.pat.findall(text):
            piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(piece))
        return ids


TRICKY = [
    "", "Hello world", " Hello", "hello", "Hello, world!", "a", " ", "  ", "\n", "\n\n",
    # unicode letters, CJK, emoji, combining marks, other scripts
    "café crème brûlée", "über Größe", "naïve résumé", "中文字符测试", "日本語のテキスト",
    "emoji 😀👍🏽 and 🇺🇸 flags", "e\u0301 combining", "Ελληνικά κείμενο", "русский текст",
    "עברית", "العربية", "हिन्दी", "한국어", "\U0001d400\U0001d401 math letters",
    # whitespace: runs, tabs, newlines, trailing, unicode spaces
    "a  b", "a   b", "a\tb", "a \tb", "a\t b", "a\n\nb", "a \n b", "trailing   ",
    "   leading", " \t\n mixed \r\n\r\n", "a\u00a0b", "a\u3000b", "x\u2028y", "x\u0085y",
    "a\x1cb\x1fc", "\t\tindent", "line1\nline2\n", "  \n  \n", "end\n",
    # digits and mixed
    "1234567890", "abc123def", "3.14159", "1,000,000", " 42", "42 apples", "x2y3z4",
    "\u0661\u0662\u0663 arabic digits", "\u2167 roman", "½ and ¾", "2nd 3rd 4th",
    # contractions, including the capitalised ones GPT-2 does not special-case
    "it's", "don't", "we're", "I've", "I'm", "we'll", "he'd", "IT'S", "DON'T", "WE'RE",
    "I'VE", "I'M", "WE'LL", "HE'D", "'s", "'", "''", "x''s", "rock 'n' roll", "'tis",
    "o'clock", "'ll've", "can't've", "’s curly",
    # punctuation runs, symbols, leading spaces
    "!!!", "?!?!", "...", "--", "<|endoftext|>", "a<|endoftext|>b", "<br /><br />",
    "$100.00", "@user #tag", "(parens) [brackets] {braces}", " ...and", "  !!", "~`^",
    "\x00nul", "a\x7fb", "©®™", "→←↑↓", " 😀😀",
    # long pieces
    "a" * 300, "ab" * 200, " " * 50 + "x", "!" * 100, "9" * 80,
]


def fuzz_strings(n, seed):
    alphabet = list("aAbZ09 '\t\n\r.,!?-srtvmld") + [
        "é", "ü", "中", "😀", "\u00a0", "\u2028", "\x1c", "\u0301", "½", "\u0661", "’", "  "]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def corpus_strings(shared):
    text = (shared / "tinyshakespeare/input.txt").read_text(encoding="utf-8")
    lines = text.split("\n")
    out = lines[:300]
    out += ["\n".join(lines[i:i + 40]) for i in range(1000, 5000, 200)]
    with open(shared / "imdb/imdb-2500.csv", encoding="utf-8", newline="") as f:
        reviews = [row["review"] for row in csv.DictReader(f)]
    out += reviews[:200]
    return out, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zerotrain", default="./zerotrain", help="unused: the tool is built here")
    ap.add_argument("--shared", default=os.environ.get("ZT_SHARED", str(REPO.parent / "shared")))
    args = ap.parse_args()
    shared = Path(args.shared) / "data"
    tokdir = shared / "gpt2-bpe"

    build = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), TOOL],
                           capture_output=True, text=True)
    if build.returncode != 0:
        print(build.stdout + build.stderr)
        print(f"cannot build {TOOL}")
        return 2

    t0 = time.time()
    enc = Encoder(tokdir)
    for s, want in [("Hello world", [15496, 995]), (" Hello", [18435])]:
        got = enc.encode(s)
        if got != want:
            print(f"the reference itself is wrong: {s!r} -> {got}, GPT-2 gives {want}")
            return 1
    corpus, whole = corpus_strings(shared)
    groups = [("tricky", TRICKY), ("fuzz", fuzz_strings(400, 1234)), ("corpus", corpus),
              ("tinyshakespeare whole file", [whole])]
    strings = [s for _, g in groups for s in g]
    want = [enc.encode(s) for s in strings]
    t_ref = time.time() - t0

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "strings.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in strings), encoding="ascii")
        t0 = time.time()
        run = subprocess.run([str(REPO / TOOL), str(tokdir), str(path)], capture_output=True,
                             text=True)
        t_zt = time.time() - t0
    if run.returncode != 0:
        print(run.stdout[-2000:] + run.stderr)
        print(f"{TOOL} failed with exit status {run.returncode}")
        return 2
    got = [json.loads(line) for line in run.stdout.splitlines()]
    if len(got) != len(strings):
        print(f"{TOOL} printed {len(got)} results for {len(strings)} strings")
        return 2

    bad = 0
    for s, w, g in zip(strings, want, got):
        if g["ids"] == w and g["roundtrip"]:
            continue
        bad += 1
        if bad <= 5:
            i = next((k for k, (a, b) in enumerate(zip(w, g["ids"])) if a != b),
                     min(len(w), len(g["ids"])))
            print(f"MISMATCH {s[:200]!r}{'...' if len(s) > 200 else ''}")
            print(f"  roundtrip: {g['roundtrip']}; first differing id at {i}")
            print(f"  reference: {w[max(0, i - 3):i + 8]}")
            print(f"  zerotrain: {g['ids'][max(0, i - 3):i + 8]}")
    total_ids = sum(len(w) for w in want)
    for name, g in groups:
        print(f"compared {len(g):4d} {name} strings")
    print(f"{len(strings)} strings, {total_ids} ids; reference {t_ref:.1f}s, "
          f"zerotrain tool {t_zt:.2f}s; Unicode {unicodedata.unidata_version}")
    if bad:
        print(f"FAIL: {bad} of {len(strings)} strings differ")
        return 1
    print("OK: zerotrain's GPT-2 BPE matches the reference and round-trips every string")
    return 0


if __name__ == "__main__":
    sys.exit(main())
