"""The local inputs of bench/traceml/compare.sh, nothing downloaded: the tiny GPT-2 config and
word-level tokenizer of tests/python/test_public_scripts.py (2 layers, 32 wide, 32 tokens a
block) saved in FOLDER/tiny, and FOLDER/train.txt, LINES lines of 16 made-up words (seeded).
    python bench/traceml/prepare.py FOLDER [LINES]"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
from test_public_scripts import tiny_gpt2  # noqa: E402

folder = sys.argv[1]
lines = int(sys.argv[2]) if len(sys.argv) > 2 else 1600
os.makedirs(folder, exist_ok=True)
words = tiny_gpt2(os.path.join(folder, "tiny"))
rng = random.Random(0)
with open(os.path.join(folder, "train.txt"), "w") as f:
    for _ in range(lines):
        f.write(" ".join(rng.choice(words) for _ in range(16)) + "\n")
