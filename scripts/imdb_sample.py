#!/usr/bin/env python3
"""A fixed sample of the aclImdb training reviews as a CSV the classifier reads.

usage: imdb_sample.py ACLIMDB_DIR OUT.csv N

Takes the N reviews of ACLIMDB_DIR/train/{pos,neg} whose file names
("pos/123_9.txt") have the smallest sha256, in that order: a pure function of
the files, the same with any Python, and about half positive. Writes the
header "review,sentiment" and one row per review (RFC 4180 quoting, CRLF line
ends, labels positive/negative), the layout of ../shared/data/imdb.
Standard library only.
"""
import csv
import hashlib
import os
import sys


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    root, out, n = argv[1], argv[2], int(argv[3])
    names = []
    for label in ("pos", "neg"):
        folder = os.path.join(root, "train", label)
        if not os.path.isdir(folder):
            sys.exit(f"imdb_sample.py: {folder} is not a directory (an aclImdb tree?)")
        names += [f"{label}/{f}" for f in os.listdir(folder) if f.endswith(".txt")]
    if len(names) < n:
        sys.exit(f"imdb_sample.py: {root}/train has {len(names)} reviews, fewer than {n}")
    names.sort(key=lambda s: hashlib.sha256(s.encode()).hexdigest())
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\r\n")
        w.writerow(["review", "sentiment"])
        for name in names[:n]:
            with open(os.path.join(root, "train", name), encoding="utf-8") as r:
                text = r.read().strip()
            w.writerow([text, "positive" if name.startswith("pos/") else "negative"])


if __name__ == "__main__":
    main(sys.argv)
