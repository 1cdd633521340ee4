#!/usr/bin/env python3
"""Golden WordPiece vocabularies from Python's trainer, and a check that transformers loads a folder we trained.

1. Golden (run from the repository root):
       .venv/bin/python tests/golden/wordpiece.py
   trains `tokenizers.BertWordPieceTokenizer(lowercase=...).train_from_iterator(texts, vocab_size=..., min_frequency=...)`
   on the "text" fields of tests/data/fortunes-large/train.jsonl (440 quotations) for each setting of SETTINGS, RUNS
   times (20; WORDPIECE_RUNS=100 looks longer: the three settings gave one vocabulary set in 100 runs each, and
   uncased-1000 98 sets), and writes tests/golden/wordpiece.json, read by tests/wordpiece.rs.

   The trainer is not reproducible from run to run (the same Rust code in our crate and in Python): after the
   special tokens and the alphabet (code-point order) it numbers the `##c` pieces in the iteration order of a hash
   map with per-process random keys, and breaks ties between equally frequent merges by those numbers. So the golden
   keeps what every run agrees on, and this script asserts that they agree on it:
     - `prefix`: the special tokens and the alphabet, in id order;
     - `continuation`: the `##c` pieces of the alphabet (the ids right after the prefix), as a set;
     - `tokens`: the whole vocabulary as a set (the settings are ones whose cut-off falls on no tie: every run gives
       the same set; a setting where runs disagree is refused, and `unstable` lists such settings for the record);
     - `encodings`: held-out sentences (and a pair) through the trained vocabulary with BERT's post-processor
       (`BertWordPieceTokenizer(vocab)`, the class's own way to load a vocabulary), as tokens: WordPiece encodes by
       longest match, so the tokens depend only on the set.
   `vocab` is the first run's vocabulary in id order, for the record (ids past `continuation` differ between runs),
   and `distinct_orders` counts the different id orders the RUNS runs gave.

2. Round trip through transformers, of a folder `bertgpu train-tokenizer` wrote:
       cargo run --release --bin bertgpu -- train-tokenizer --data tests/data/fortunes-large/train.jsonl \
           --vocab-size 300 --min-frequency 2 --out /tmp/wp-uncased-300
       .venv/bin/python tests/golden/wordpiece.py --check /tmp/wp-uncased-300 uncased-300
   loads the folder with `BertTokenizerFast(tokenizer_file=DIR/tokenizer.json)` and with
   `AutoTokenizer.from_pretrained(DIR)` (tokenizer_config.json's class and flags), and checks: both give the golden's
   tokens for the setting's held-out sentences, ids as in DIR/vocab.txt, `[CLS] A [SEP] B [SEP]` with type ids 0/1,
   decode gives the (normalised) text back, the vocabulary is the golden's set, and save_pretrained + from_pretrained
   gives the same encodings again.
"""

import hashlib
import json
import os
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import BertWordPieceTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = "tests/data/fortunes-large/train.jsonl"
OUT = os.path.join(ROOT, "tests", "golden", "wordpiece.json")
RUNS = int(os.environ.get("WORDPIECE_RUNS", "20"))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# name → (vocab_size, min_frequency, lowercase); strip_accents follows lowercase (BertNormalizer's None).
SETTINGS = {
    "uncased-300": (300, 2, True),
    "cased-500": (500, 2, False),
    "uncased-200-min1": (200, 1, True),
}
# Settings whose vocabulary-size cut-off falls on a tie: runs give different sets. Measured, not golden.
UNSTABLE = {"uncased-1000": (1000, 2, True)}

# Held-out text: quotations of the test split, and lines that exercise the normaliser (accents, CJK, punctuation,
# control characters, capitals) and unknown characters.
HELD_OUT = [
    "Café Déjà Vu: naïve ÉCOLE façade!",
    "東京タワー and 北京 are far apart (12,345 km?)",
    "tab\there, a zero\u200bwidth space and a \x07bell",
    "Supercalifragilisticexpialidocious -- Mary Poppins",
]
PAIR = ("Where is the food?", "In the kitchen, of course.")


def texts(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def held_out():
    return texts("tests/data/fortunes-large/test.jsonl")[:4] + HELD_OUT


def train(corpus, vocab_size, min_frequency, lowercase):
    t = BertWordPieceTokenizer(lowercase=lowercase)
    t.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False)
    vocab = sorted(t.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab))), "ids must be 0..n"
    return [tok for tok, _ in vocab]


def structure(vocab):
    """(prefix, continuation): the special tokens + alphabet, then the `##c` pieces that follow them."""
    assert vocab[:5] == SPECIALS, vocab[:5]
    n = 5
    while n < len(vocab) and not vocab[n].startswith("##") and len(vocab[n]) == 1:
        n += 1
    m = n
    while m < len(vocab) and vocab[m].startswith("##") and len(vocab[m]) == 3:
        m += 1
    return vocab[:n], vocab[n:m]


def encodings(vocab, lowercase):
    tok = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
    out = [{"text": s, "tokens": tok.encode(s).tokens} for s in held_out()]
    e = tok.encode(*PAIR)
    out.append({"text": PAIR[0], "pair": PAIR[1], "tokens": e.tokens, "type_ids": e.type_ids})
    return out


def make_golden():
    corpus = texts(CORPUS)
    golden = {
        "python_tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "corpus": CORPUS,
        "runs": RUNS,
        "settings": {},
        "unstable": {},
    }
    for name, (vocab_size, min_frequency, lowercase) in SETTINGS.items():
        runs = [train(corpus, vocab_size, min_frequency, lowercase) for _ in range(RUNS)]
        first = runs[0]
        prefix, continuation = structure(first)
        for v in runs:
            p, c = structure(v)
            assert p == prefix, f"{name}: the prefix differs between runs"
            assert set(c) == set(continuation), f"{name}: the ## pieces differ between runs"
            assert set(v) == set(first), f"{name}: runs give different vocabularies (a tie at the cut-off)"
        encs = encodings(first, lowercase)
        for v in runs[1:3]:
            assert [e["tokens"] for e in encodings(v, lowercase)] == [e["tokens"] for e in encs], name
        orders = {hashlib.sha256("\n".join(v).encode()).hexdigest() for v in runs}
        golden["settings"][name] = {
            "vocab_size": vocab_size,
            "min_frequency": min_frequency,
            "lowercase": lowercase,
            "size": len(first),
            "prefix": prefix,
            "continuation": sorted(continuation),
            "tokens": sorted(first),
            "distinct_orders": len(orders),
            "vocab": first,
            "encodings": encs,
        }
        print(f"{name}: {len(first)} tokens, prefix {len(prefix)}, ## pieces {len(continuation)}, "
              f"{len(orders)} id orders in {RUNS} runs")
    for name, (vocab_size, min_frequency, lowercase) in UNSTABLE.items():
        runs = [train(corpus, vocab_size, min_frequency, lowercase) for _ in range(RUNS)]
        sets = {frozenset(v) for v in runs}
        golden["unstable"][name] = {"vocab_size": vocab_size, "min_frequency": min_frequency, "lowercase": lowercase,
                                    "distinct_sets": len(sets)}
        print(f"{name}: {len(sets)} different vocabularies in {RUNS} runs")
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT} (tokenizers {tokenizers.__version__}, transformers {transformers.__version__})")


def check_folder(folder, name):
    from transformers import AutoTokenizer, BertTokenizerFast

    with open(OUT, encoding="utf-8") as f:
        setting = json.load(f)["settings"][name]
    with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
        vocab = f.read().split("\n")[:-1]
    assert set(vocab) == set(setting["tokens"]), "the folder's vocabulary is not the golden's set"
    assert vocab[: len(setting["prefix"])] == setting["prefix"], "the special tokens and alphabet are out of order"
    ids = {t: i for i, t in enumerate(vocab)}

    def check(tok, label):
        for e in setting["encodings"]:
            enc = tok(e["text"], e.get("pair"))
            got = tok.convert_ids_to_tokens(enc["input_ids"])
            assert got == e["tokens"], f"{label}: {e['text']!r}: {got} != {e['tokens']}"
            assert enc["input_ids"] == [ids[t] for t in got], f"{label}: ids are not vocab.txt's"
            if "type_ids" in e:
                assert enc["token_type_ids"] == e["type_ids"], f"{label}: type ids {enc['token_type_ids']}"
        text = "the food is in the kitchen, of course."
        again = tok.decode(tok(text)["input_ids"], skip_special_tokens=True)
        assert again == text, f"{label}: decode gave {again!r}"
        assert tok.mask_token == "[MASK]" and tok.pad_token_id == ids["[PAD]"], label
        print(f"{label}: ok ({len(setting['encodings'])} encodings)")

    check(BertTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json")), "BertTokenizerFast(tokenizer_file)")
    auto = AutoTokenizer.from_pretrained(folder)
    assert auto.model_max_length == 512, auto.model_max_length
    check(auto, f"AutoTokenizer.from_pretrained ({type(auto).__name__})")
    with tempfile.TemporaryDirectory() as tmp:
        auto.save_pretrained(tmp)
        check(AutoTokenizer.from_pretrained(tmp), "save_pretrained + from_pretrained")
    print(f"{folder}: transformers {transformers.__version__} loads it as the golden setting {name}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check_folder(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 1:
        make_golden()
    else:
        sys.exit(__doc__)
