#!/usr/bin/env python3
"""The benchmarks' byte corpus: seeded toy sentences (same bytes every run), BYTES long at least.
   toy_corpus.py OUT_FILE [BYTES]   (default 8,000,000)"""
import random
import sys

r = random.Random(1)
words = ("the a cat dog man child river house moon song bread sees likes finds wants carries "
         "paints follows today again with joy in morning old red").split()
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 8_000_000
with open(sys.argv[1], "w") as f:
    n = 0
    while n < limit:
        s = " ".join(r.choice(words) for _ in range(r.randint(4, 12))) + ".\n"
        f.write(s)
        n += len(s)
