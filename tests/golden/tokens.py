#!/usr/bin/env python3
"""Golden token table: tricky strings -> token ids, type ids, tokens and offsets from Python `transformers`.

Run from the repository root (after scripts/fetch-models.sh), with torch-free Python that has `transformers`:
    .venv/bin/python tests/golden/tokens.py
Writes tests/golden/tokens.json, read by tests/tokenizer.rs and tests/cli.rs.

Reference call: AutoTokenizer(model folder)(text, text_pair, truncation=True, max_length=L,
return_offsets_mapping=True) with L = the model's max_position_embeddings (512) unless a case sets its own:
the truncation policy bertgpu documents (longest_first for pairs, no padding). Offsets are Python string
(character) indices. The script also checks that `transformers` gives the same result when it builds the tokenizer
from vocab.txt + tokenizer_config.json alone, so both of bertgpu's loading paths have one reference.
"""

import codecs
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

import tokenizers
import transformers
from transformers import AutoConfig, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["all-MiniLM-L6-v2", "splade-tiny"]

with contextlib.redirect_stdout(io.StringIO()):
    import this  # the Zen of Python (it prints itself on import): real prose for the long-text cases
zen = codecs.decode(this.s, "rot13")
zen_words = zen.split()

CASES = [
    # plain
    {"name": "plain", "text": "Hello, world! This is bertgpu."},
    {"name": "mask", "text": "The capital of France is [MASK]."},
    {"name": "specials_in_text", "text": "[CLS] tokens [SEP] inside [PAD] text [UNK] and [mask] lowercase"},
    {"name": "punctuation", "text": "don't stop... (really?!) #hashtag @user $100.50 3.14159 e-mail a/b\\c"},
    {"name": "url", "text": "See https://example.com/path?q=1&b=2#frag or mail x.y@z.org"},
    # accents and normalization
    {"name": "accents", "text": "Héllo wörld, café naïve résumé Ångström São Paulo"},
    {"name": "accents_upper", "text": "ÀÉÎÕÜ Ñ Ç ß ÆØÅ Œuvre"},
    {"name": "combining", "text": "e\u0301cole cafe\u0301 n\u0303"},
    {"name": "fullwidth", "text": "ＡＢＣ１２３ ｈｅｌｌｏ"},
    {"name": "ligatures_math", "text": "ﬁnance ﬂow x² + y² = z² ½ ⅓ ① ™ ©"},
    # scripts
    {"name": "cjk_chinese", "text": "你好世界，我爱北京天安门。"},
    {"name": "cjk_japanese", "text": "日本語のテキストとカタカナ"},
    {"name": "korean", "text": "한국어 텍스트 안녕하세요"},
    {"name": "mixed_cjk_latin", "text": "BERT模型在2018年发布by Google"},
    {"name": "cyrillic_greek", "text": "Привет мир! Γειά σου Κόσμε"},
    {"name": "arabic_hebrew", "text": "مرحبا بالعالم שלום עולם"},
    {"name": "indic_thai", "text": "नमस्ते दुनिया สวัสดีชาวโลก"},
    # emoji (outside the BMP: 2 UTF-16 units, 1 Python char)
    {"name": "emoji", "text": "I love 🤗 and 👍🏽 and 👨‍👩‍👧 family 🇫🇷!"},
    {"name": "emoji_glued", "text": "ok👍ok🤗🤗x"},
    # control and invisible characters
    {"name": "control", "text": "tab\there\nnew\rline\x00null\x07bell\x1bescape\x7fdel end"},
    {"name": "zero_width", "text": "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u2060wj"},
    {"name": "spaces", "text": "a\u00a0b\u2003c\u3000d\u2028e\u2029f"},
    {"name": "replacement_char", "text": "bad \ufffd byte \ufffd\ufffd here"},
    {"name": "only_control", "text": "\x00\x01\x02\u200b"},
    # lengths
    {"name": "empty", "text": ""},
    {"name": "whitespace_only", "text": "   \t\n  \r\n "},
    {"name": "single_char", "text": "a"},
    {"name": "long_word_100", "text": "x" * 100},
    {"name": "long_word_101", "text": "y" * 101 + " after"},
    {"name": "long_word_unicode", "text": "é" * 120 + " z"},
    {"name": "long_real_word", "text": "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"},
    {"name": "over_512_tokens", "text": " ".join(zen_words * 5)},
    {"name": "over_512_cjk", "text": "天地玄黄宇宙洪荒" * 80},
    {"name": "repeated_punct", "text": "!?" * 300},
    # pairs
    {"name": "pair_qa", "text": "What is the capital of France?", "text_pair": "Paris is the capital of France."},
    {"name": "pair_accents", "text": "Où est la gare?", "text_pair": "La gare est là-bas, près du café."},
    {"name": "pair_empty_first", "text": "", "text_pair": "only the second text"},
    {"name": "pair_empty_second", "text": "only the first text", "text_pair": ""},
    {"name": "pair_both_empty", "text": "", "text_pair": ""},
    {"name": "pair_emoji_cjk", "text": "🤗 emoji first", "text_pair": "中文第二句"},
    {"name": "pair_long_first", "text": " ".join(zen_words * 4), "text_pair": "A short second sentence."},
    {"name": "pair_long_second", "text": "A short question?", "text_pair": " ".join(zen_words * 4)},
    {"name": "pair_both_long", "text": " ".join(zen_words * 3), "text_pair": " ".join(reversed(zen_words * 3))},
    # a smaller limit, set explicitly
    {"name": "max16_single", "text": " ".join(zen_words[:40]), "max_length": 16},
    {"name": "max16_pair", "text": " ".join(zen_words[:20]), "text_pair": " ".join(zen_words[20:25]), "max_length": 16},
    {"name": "max16_pair_even", "text": " ".join(zen_words[:30]), "text_pair": " ".join(zen_words[30:60]), "max_length": 16},
]


# tokenizer_config.json variants over all-MiniLM-L6-v2's vocab.txt: the normalizer flags bertgpu's vocab.txt path
# must honour (their results on an uncased vocabulary are mostly [UNK], which still tells the flags apart).
VARIANTS = {
    "cased": {"do_lower_case": False},
    "keep_accents": {"strip_accents": False},
    "cased_strip_accents": {"do_lower_case": False, "strip_accents": True},
    "no_chinese_split": {"tokenize_chinese_chars": False},
}
VARIANT_CASES = ["plain", "mask", "accents", "accents_upper", "combining", "cjk_chinese", "cjk_japanese",
                 "mixed_cjk_latin", "emoji", "control", "pair_accents", "pair_emoji_cjk", "long_word_unicode"]


def run(tok, case, default_max):
    args = [case["text"]] + ([case["text_pair"]] if "text_pair" in case else [])
    enc = tok(*args, truncation=True, max_length=case.get("max_length", default_max), return_offsets_mapping=True)
    return {
        "input_ids": enc["input_ids"],
        "token_type_ids": enc["token_type_ids"],
        "tokens": tok.convert_ids_to_tokens(enc["input_ids"]),
        "offsets": [list(o) for o in enc["offset_mapping"]],
    }


def main():
    out = {
        "generator": "tests/golden/tokens.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "cases": CASES,
        "models": {},
    }
    for name in MODELS:
        folder = os.path.join(ROOT, "models", name)
        max_len = AutoConfig.from_pretrained(folder).max_position_embeddings
        tok = AutoTokenizer.from_pretrained(folder)
        # Same tokenizer rebuilt from vocab.txt + tokenizer_config.json only (splade-tiny ships no vocab.txt:
        # write one from tokenizer.json's vocabulary, in id order).
        with tempfile.TemporaryDirectory() as tmp:
            vocab = tok.get_vocab()
            with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as f:
                for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
                    f.write(t + "\n")
            shutil.copy(os.path.join(folder, "tokenizer_config.json"), tmp)
            tok_vocab = AutoTokenizer.from_pretrained(tmp)
            results = []
            for case in CASES:
                r = run(tok, case, max_len)
                r2 = run(tok_vocab, case, max_len)
                if r != r2:
                    sys.exit(f"{name}/{case['name']}: tokenizer.json and vocab.txt disagree in transformers itself")
                results.append(r)
        specials = {k: [getattr(tok, k), tok.convert_tokens_to_ids(getattr(tok, k))]
                    for k in ["cls_token", "sep_token", "pad_token", "unk_token", "mask_token"]}
        out["models"][name] = {"max_length": max_len, "special_tokens": specials, "results": results}
    folder = os.path.join(ROOT, "models", MODELS[0])
    base_config = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    by_name = {c["name"]: c for c in CASES}
    out["variants"] = {}
    for vname, over in VARIANTS.items():
        config = dict(base_config, **over)
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(folder, "vocab.txt"), tmp)
            with open(os.path.join(tmp, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)
            tok = AutoTokenizer.from_pretrained(tmp)
            results = {n: run(tok, by_name[n], 512) for n in VARIANT_CASES}
        out["variants"][vname] = {"vocab_of": MODELS[0], "tokenizer_config": config, "results": results}
    path = os.path.join(ROOT, "tests", "golden", "tokens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(CASES)} cases x {len(MODELS)} models)")


if __name__ == "__main__":
    main()
