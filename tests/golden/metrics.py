#!/usr/bin/env python3
"""Golden for the fine-tuning validation metrics (src/training/metrics.rs), from their reference implementations.

Run from the repository root (needs seqeval 1.2.2: `.venv/bin/pip install seqeval==1.2.2`):

    .venv/bin/python tests/golden/metrics.py

It writes tests/golden/metrics.json:

  entity_f1  seqeval.metrics.f1_score (its default: conlleval chunking of IOB tags, micro average) of seeded random
             tag sequences over O / B-x / I-x of three types, malformed ones included (an I- after O or after
             another type, which seqeval counts as the start of an entity), one case per list of sentences.
  squad      exact match and F1 of predictions against gold answers, with the official SQuAD v2.0 evaluation
             script's functions (normalize_answer, compute_exact, compute_f1, the max over the gold answers, and no
             gold answer read as the one answer ""), restated below from that script. (v2.0 differs from v1.1 only
             where a side normalises to no tokens: v1.1's F1 is then 0, v2.0's is 1 if both are empty.)
"""
import collections
import json
import random
import re
import string

from seqeval.metrics import f1_score


def normalize_answer(s):
    # SQuAD v2.0 evaluate-v2.0.py (the same as v1.1's)
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def squad_f1(prediction, ground_truth):
    gold_toks = normalize_answer(ground_truth).split()
    pred_toks = normalize_answer(prediction).split()
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def squad_em(prediction, ground_truth):
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


rng = random.Random(0)
TAGS = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
entity = []
for case in range(40):
    gold, pred = [], []
    for _ in range(rng.randint(1, 4)):
        n = rng.randint(1, 12)
        g = [rng.choice(TAGS) for _ in range(n)]
        # Predictions: the gold tags with some flipped, so that some entities match.
        p = [t if rng.random() < 0.7 else rng.choice(TAGS) for t in g]
        gold.append(g)
        pred.append(p)
    entity.append({"gold": gold, "pred": pred, "f1": float(f1_score(gold, pred))})

squad = []
words = ["the", "Denver", "Broncos", "a", "team", "an", "apple", "Paris,", "France", "1879", "Einstein's", "theory"]
for case in range(40):
    pred = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
    golds = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
    if case % 5 == 0:
        golds.append(pred.upper() + "!")  # matches after normalisation... except for the case of non-ASCII letters
    if case % 7 == 3:
        golds = []  # unanswerable (SQuAD v2)
    scored = golds or [""]
    squad.append({"prediction": pred, "golds": golds,
                  "exact_match": float(max(squad_em(pred, g) for g in scored)),
                  "f1": float(max(squad_f1(pred, g) for g in scored))})

with open("tests/golden/metrics.json", "w") as f:
    json.dump({"entity_f1": entity, "squad": squad}, f, indent=0)
    f.write("\n")
print(f"wrote tests/golden/metrics.json: {len(entity)} entity cases, {len(squad)} squad cases")
