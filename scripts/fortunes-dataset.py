#!/usr/bin/env python3
"""A labelled text-classification dataset from Debian's `fortunes` package (real quotations nobody here wrote):
one label per fortune file (category), a fixed-seed held-out split.

    python3 scripts/fortunes-dataset.py OUT_DIR [--per-class N] [--seed S] [--categories a,b,c] [--test-fraction F]

Reads /usr/share/games/fortunes/<category> (apt-get install fortunes), where quotations are separated by lines
holding a single `%`. Each quotation's whitespace is collapsed to single spaces; quotations shorter than 20 or longer
than 400 characters are dropped (one-word entries and long stories); the first N per category after a seeded
shuffle are kept. Writes OUT_DIR/train.jsonl and OUT_DIR/test.jsonl ({"text", "label"} lines; 80/20 per category
by default, `--test-fraction` to change it, so both splits are balanced) and prints their sizes. Standard library only.
"""
import argparse
import json
import os
import random

FORTUNES = "/usr/share/games/fortunes"
DEFAULT_CATEGORIES = "computers,food,law,love,sports"


def quotes(category):
    path = os.path.join(FORTUNES, category)
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    out = []
    for block in raw.split("\n%\n"):
        text = " ".join(block.replace("%", " ").split())
        if 20 <= len(text) <= 400:
            out.append(text)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--per-class", type=int, default=140)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--categories", default=DEFAULT_CATEGORIES)
    ap.add_argument("--test-fraction", type=float, default=0.2)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    train, test = [], []
    for cat in a.categories.split(","):
        qs = sorted(set(quotes(cat)))
        rng.shuffle(qs)
        qs = qs[: a.per_class]
        cut = int(round(len(qs) * (1 - a.test_fraction)))
        train += [{"text": t, "label": cat} for t in qs[:cut]]
        test += [{"text": t, "label": cat} for t in qs[cut:]]
    rng.shuffle(train)
    rng.shuffle(test)
    os.makedirs(a.out_dir, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(a.out_dir, f"{name}.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(train)} train, {len(test)} test examples in {a.out_dir} ({a.categories})")


if __name__ == "__main__":
    main()
