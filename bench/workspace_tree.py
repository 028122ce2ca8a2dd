#!/usr/bin/env python3
"""Makes the retained-workspace bench's source tree (bench/workspace.sh).

    workspace_tree.py DIR [FILES] [TOTAL_MIB] [EDITS]

Deterministic (seeded): FILES - 8 text files of 1-16 KiB, 50 to a
directory, two levels deep (`src/mNN/pNN/fNN.txt`), plus 8 binary files
under `assets/` that bring the total to TOTAL_MIB. Prints the EDITS text
files the bench's session edits (every FILES/EDITS-th), one per line,
relative to DIR.
"""
import os
import random
import sys

SEED = 28
BINARIES = 8
PER_DIR = 50


def main():
    root = sys.argv[1]
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    total = (int(sys.argv[3]) if len(sys.argv) > 3 else 200) << 20
    edits = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    rng = random.Random(SEED)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(2, 10)))
             for _ in range(2000)]
    # A corpus of source-like lines; each text file is a slice of it, cut
    # at line boundaries (at least three lines, so an edit of line 3 exists).
    lines, size = [], 0
    while size < 4 << 20:
        indent = "    " * rng.randint(0, 3)
        line = indent + " ".join(rng.choices(words, k=rng.randint(3, 12))) + ";\n"
        lines.append(line)
        size += len(line)
    corpus = "".join(lines)
    texts = files - BINARIES
    used = 0
    names = []
    for i in range(texts):
        d = os.path.join(root, "src", "m%02d" % (i // (PER_DIR * 10)), "p%02d" % ((i // PER_DIR) % 10))
        if i % PER_DIR == 0:
            os.makedirs(d, exist_ok=True)
        want = rng.randint(1024, 16 * 1024)
        start = corpus.find("\n", rng.randrange(0, len(corpus) - 32 * 1024)) + 1
        end = corpus.find("\n", start + want - 200) + 1
        body = corpus[start:end].encode()
        name = os.path.join(d, "f%02d.txt" % (i % PER_DIR))
        with open(name, "wb") as f:
            f.write(body)
        used += len(body)
        names.append(os.path.relpath(name, root))
    rest = total - used
    if rest < BINARIES:
        sys.exit("the text files already exceed the total")
    os.makedirs(os.path.join(root, "assets"), exist_ok=True)
    for b in range(BINARIES):
        n = rest // BINARIES + (rest % BINARIES if b == BINARIES - 1 else 0)
        with open(os.path.join(root, "assets", "blob%d.bin" % b), "wb") as f:
            left = n
            while left:
                k = min(left, 4 << 20)
                f.write(rng.randbytes(k))
                left -= k
    step = max(1, texts // edits)
    for name in names[::step][:edits]:
        print(name)


if __name__ == "__main__":
    main()
