#!/usr/bin/env python3
"""The house rules a reader relies on, checked on the source tree:

  - includes name their folder from the repository root ("engine/zero/stage.h"),
    so every quoted include must be a path that exists from the root;
  - no circular includes between folders: the folder graph (folder A -> folder
    B when a file in A includes a header in B) has no cycle;
  - no hand-written source file is over 900 lines (the generated unicode tables
    are exempt);
  - the trainer asks the stage policy instead of testing stage numbers: at most
    3 comparisons of `stage` with 0-3 in engine/train/.

Prints the folder graph and every violation; exits 1 on any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 900
GENERATED = {"data/unicode_tables.c"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
STAGE_CMP = re.compile(r"stage *(==|<|>|>=|<=|!=) *[0-3]")


def sources():
    out = subprocess.check_output(["git", "ls-files"], cwd=ROOT, text=True).split()
    return [f for f in out if re.search(r"\.(c|h|cu|cuh|cc)$", f) and os.path.isfile(os.path.join(ROOT, f))]


def main():
    errors = []
    edges = {}
    for f in sources():
        text = open(os.path.join(ROOT, f), errors="replace").read()
        src = os.path.dirname(f)
        for inc in INCLUDE.findall(text):
            if not os.path.isfile(os.path.join(ROOT, inc)):
                errors.append(f"{f}: #include \"{inc}\" does not name a file from the repository root")
                continue
            dst = os.path.dirname(inc)
            if dst != src:
                edges.setdefault(src, set()).add(dst)
        n = text.count("\n")
        if n > MAX_LINES and f not in GENERATED:
            errors.append(f"{f}: {n} lines (more than {MAX_LINES}: split it by job)")
    # Cycles: depth-first search over the folder graph.
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                errors.append("circular includes between folders: " + " -> ".join(cyc))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    trainer = [f for f in sources() if f.startswith("engine/train/")]
    cmps = sum(len(STAGE_CMP.findall(open(os.path.join(ROOT, f)).read())) for f in trainer)
    if cmps > 3:
        errors.append(f"engine/train/ compares stage numbers {cmps} times (at most 3: ask the stage policy)")
    for src in sorted(edges):
        print(f"{src or '.'} -> {', '.join(sorted(edges[src]))}")
    print(f"stage comparisons in engine/train/: {cmps}")
    for e in errors:
        print("FAIL: " + e)
    if errors:
        return 1
    print("ok: includes name their folder, folders include no cycle, files within "
          f"{MAX_LINES} lines, trainer asks the stage policy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
