#!/usr/bin/env python3
"""Token-classification (NER) and question-answering sets from real text: the attributed quotations of Debian's
`fortunes` package (fortune-mod's collection; apt-get install fortunes), labelled automatically from the attribution
line that ends many of them:

    Human kind cannot bear very much reality.
            -- T. S. Eliot, "Four Quartets: Burnt Norton"

    python3 scripts/finetune-datasets.py OUT_DIR [--seed S] [--train N] [--test N]

The rule (all of it is below):
  * A quotation is a block between lines holding a single `%`; blocks with a line starting with whitespace and `--`
    (the attribution) at the end are *attributed*, blocks without `--` anywhere are *unattributed*; the rest (a `--`
    inside the text, an attribution that fails the next rule) are dropped as ambiguous.
  * An attribution is kept when it is `NAME` or `NAME, "TITLE"` optionally followed by more (`, 1764`, `, III, 6`),
    where NAME is 1-4 words, each capitalised (`Mark`, `H.`, `O'Brien`) or one of the particles de/da/di/du/von/van/
    der/del/la/le, the first and the last capitalised, and not starting with an article (`The`, `A`, `An`): so
    `-- Chinese proverb`, `-- The Wall Street Journal`, `-- from "Mary Hartman"` are dropped.
  * The text of an example is the quotation and its attribution *without* the `--` marker, whitespace collapsed:
    `Human kind cannot bear very much reality. T. S. Eliot, "Four Quartets: Burnt Norton"`; 30-400 characters.
  * NER (`ner/{train,test}.jsonl`, {"tokens", "tags"}): words are runs of letters/digits (with inner apostrophes) and
    single punctuation marks; the author's words are B-PER/I-PER, the title's (without its quote marks) B-WORK/
    I-WORK, everything else O. A quarter of the examples are unattributed quotations (all O), so the model must
    tell an attribution from a name inside the quotation.
  * QA (`qa/{train,test}.jsonl`, SQuAD v2's {"id", "question", "context", "answers"}): the context is the same text;
    "Who said this?" answers the author, and "What work is this quoted from?" the title where the attribution has one;
    unattributed quotations ask "Who said this?" with no answer (SQuAD v2's empty answers).
  * Quotations are de-duplicated across files, shuffled with the seed and split into disjoint train and test
    quotations before the examples are made.

Standard library only. Prints the sizes.
"""
import argparse
import json
import os
import random
import re

FORTUNES = "/usr/share/games/fortunes"
CATEGORIES = ("people,politics,humorists,literature,men-women,wisdom,work,science,computers,love,education,art,"
              "songs-poems,law,food,sports,medicine,kids,drugs,news,ethnic,definitions,miscellaneous")
PARTICLES = {"de", "da", "di", "du", "von", "van", "der", "del", "la", "le"}
ARTICLES = {"The", "A", "An"}
NAME_WORD = re.compile(r"^[A-Z][A-Za-z'.\-]*$")
ATTRIBUTION = re.compile(r'^(?P<name>[^,"]+?)(?:,\s*"(?P<title>[^"]+?),?"(?P<rest>.*))?$')
WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z0-9]+)*|[^\sA-Za-z0-9]")


def collapse(s):
    return " ".join(s.split())


def parse(block):
    """(quotation, author, title or None) for an attributed block, (quotation, None, None) for an unattributed one,
    None for the rest."""
    lines = block.rstrip("\n").split("\n")
    cut = None
    for i in range(len(lines) - 1, 0, -1):
        if re.match(r"^\s+--\s", lines[i]):
            cut = i
            break
    if cut is None:
        if "--" in block:
            return None
        return collapse(block), None, None
    quote = collapse("\n".join(lines[:cut]))
    if "--" in quote:
        return None
    attribution = collapse(" ".join(lines[cut:]).strip()[2:])
    m = ATTRIBUTION.match(attribution)
    if not m:
        return None
    name, title = m.group("name").strip().rstrip("."), m.group("title")
    words = name.split()
    if not 1 <= len(words) <= 4 or words[0] in ARTICLES:
        return None
    if not all(NAME_WORD.match(w) or w in PARTICLES for w in words):
        return None
    if not (NAME_WORD.match(words[0]) and NAME_WORD.match(words[-1])):
        return None
    if m.group("title") is None and attribution.rstrip(".") != name:
        return None  # something after the name that is not a quoted title (`Jack Sharkey, The Addams Family`)
    return quote, name, (title.strip() if title else None)


def example_text(quote, author, title):
    """The text, and the character spans of the author and the title in it."""
    if author is None:
        return quote, None, None
    text = f"{quote} {author}"
    a = (len(quote) + 1, len(text))
    t = None
    if title is not None:
        text += f', "'
        t = (len(text), len(text) + len(title))
        text += f'{title}"'
    return text, a, t


def ner_example(text, spans):
    tokens, tags = [], []
    for m in WORD.finditer(text):
        tag = "O"
        for kind, span in spans:
            if span and span[0] <= m.start() and m.end() <= span[1]:
                tag = ("B-" if m.start() == span[0] or not tags or tags[-1] == "O" else "I-") + kind
        tokens.append(m.group())
        tags.append(tag)
    return {"tokens": tokens, "tags": tags}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--train", type=int, default=400, help="quotations in the training split")
    ap.add_argument("--test", type=int, default=240, help="quotations in the test split")
    a = ap.parse_args()
    attributed, unattributed, seen = [], [], set()
    for cat in CATEGORIES.split(","):
        with open(os.path.join(FORTUNES, cat), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for block in raw.split("\n%\n"):
            p = parse(block.strip("%\n"))
            if p is None or p[0] in seen:
                continue
            seen.add(p[0])
            text = example_text(*p)[0]
            if 30 <= len(text) <= 400:
                (attributed if p[1] else unattributed).append(p)
    rng = random.Random(a.seed)
    attributed.sort()
    unattributed.sort()
    rng.shuffle(attributed)
    rng.shuffle(unattributed)
    splits = {}
    n_att = {"train": a.train * 3 // 4, "test": a.test * 3 // 4}
    off_a = off_u = 0
    for split, n in (("train", a.train), ("test", a.test)):
        na = n_att[split]
        rows = attributed[off_a:off_a + na] + unattributed[off_u:off_u + n - na]
        off_a += na
        off_u += n - na
        rng.shuffle(rows)
        splits[split] = rows
    for split, rows in splits.items():
        ner, qa = [], []
        for i, (quote, author, title) in enumerate(rows):
            text, a_span, t_span = example_text(quote, author, title)
            ner.append(ner_example(text, [("PER", a_span), ("WORK", t_span)]))

            def q(kind, question, span):
                ans = ({"text": [text[span[0]:span[1]]], "answer_start": [span[0]]} if span
                       else {"text": [], "answer_start": []})
                qa.append({"id": f"{split}-{i}-{kind}", "question": question, "context": text, "answers": ans})

            q("who", "Who said this?", a_span)
            if title is not None:
                q("work", "What work is this quoted from?", t_span)
        os.makedirs(os.path.join(a.out_dir, "ner"), exist_ok=True)
        os.makedirs(os.path.join(a.out_dir, "qa"), exist_ok=True)
        for task, data in (("ner", ner), ("qa", qa)):
            with open(os.path.join(a.out_dir, task, f"{split}.jsonl"), "w") as f:
                for r in data:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
        n_per = sum(t == "B-PER" for e in ner for t in e["tags"])
        n_work = sum(t == "B-WORK" for e in ner for t in e["tags"])
        n_empty = sum(not e["answers"]["text"] for e in qa)
        print(f"{split}: {len(ner)} NER examples ({n_per} PER, {n_work} WORK), {len(qa)} QA questions "
              f"({n_empty} without an answer)")
    print(f"pool: {len(attributed)} attributed, {len(unattributed)} unattributed quotations; written to {a.out_dir}")


if __name__ == "__main__":
    main()
