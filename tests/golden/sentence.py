#!/usr/bin/env python3
"""Goldens for sentence-transformers' modules (Pooling in each mode, Dense, Normalize, max_seq_length, prompts), from
sentence-transformers itself (`SentenceTransformer.encode`).

Run from the repository root after scripts/fetch-models.sh (needs torch, transformers 5.x, sentence-transformers):

    /path/to/venv/bin/python tests/golden/sentence.py

Each stack in tests/models/st-stacks/<name>/ holds only sentence-transformers' files (modules.json, each module's
folder, sentence_bert_config.json, config_sentence_transformers.json): laid over the real all-MiniLM-L6-v2
(models/all-MiniLM-L6-v2: its config.json, model.safetensors and tokenizer files, not committed), it is a
sentence-transformers model as its authors would have saved it. This script writes the stacks (a Dense layer's
weights seeded), lays each over the checkpoint in a temporary folder as the tests do (tests/common/sentence.rs),
and records what `SentenceTransformer(folder).encode` gives:

  tests/golden/sentence.json   per stack: the texts, the vectors (float32 as JSON doubles), and where the stack has
                               prompts the vectors with each prompt; with truncate_dim (renormalised where the stack
                               normalises, as bertgpu's `dimensions` does)
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINILM = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
STACKS = os.path.join(ROOT, "tests", "models", "st-stacks")
OUT = os.path.join(ROOT, "tests", "golden", "sentence.json")
# The checkpoint's own files, laid under every stack (the tests link the same list).
BASE_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
              "special_tokens_map.json"]

TEXTS = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank, while the farmer watches from his old "
    "wooden porch and drinks a cup of coffee.",
    "Paris",
    "How do I embed a sentence in the browser?",
]
HIDDEN = 384
TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}


def pooling(mode, include_prompt=True):
    # The legacy boolean form, as most checkpoints on the hub have it; `include_prompt` as sentence-transformers
    # writes it.
    cfg = {"word_embedding_dimension": HIDDEN}
    for m, key in [("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                   ("max", "pooling_mode_max_tokens"), ("mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"),
                   ("weightedmean", "pooling_mode_weightedmean_tokens"), ("lasttoken", "pooling_mode_lasttoken")]:
        cfg[key] = m == mode
    cfg["include_prompt"] = include_prompt
    return cfg


# name → (modules after the Transformer, max_seq_length, prompts, default prompt name, dims to truncate to)
# A module is ("Pooling", config) | ("Dense", in, out, bias, activation, seed) | ("Normalize",).
STACK_SPECS = {
    # bge's way: [CLS] then Normalize, with a query prompt.
    "cls-normalize": ([("Pooling", pooling("cls")), ("Normalize",)], 512,
                      {"query": "Represent this sentence for searching relevant passages: ", "document": ""},
                      None, [64]),
    # LaBSE's and distiluse's way: a Dense layer with tanh after mean pooling.
    "mean-dense-normalize": ([("Pooling", pooling("mean")), ("Dense", HIDDEN, 64, True,
                              "torch.nn.modules.activation.Tanh", 1), ("Normalize",)], 256, None, None, [16]),
    "max": ([("Pooling", pooling("max"))], 256, None, None, []),
    # A max_seq_length below the tokenizer's (the long text is cut at 16 tokens).
    "mean-short": ([("Pooling", pooling("mean")), ("Normalize",)], 16, None, None, []),
    "weightedmean-dense-identity": ([("Pooling", pooling("weightedmean")), ("Dense", HIDDEN, 48, False,
                                     "torch.nn.modules.linear.Identity", 2)], 256, None, None, []),
    # The prompt left out of the pooling, and used by default.
    "meansqrt-noprompt": ([("Pooling", pooling("mean_sqrt_len_tokens", include_prompt=False))], 256,
                          {"query": "query: ", "passage": "passage: "}, "query", []),
    "lasttoken-normalize": ([("Pooling", pooling("lasttoken")), ("Normalize",)], 256, None, None, []),
}


def write_stack(name, spec):
    modules, max_len, prompts, default_prompt, _ = spec
    d = os.path.join(STACKS, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    entries = [TRANSFORMER]
    for i, m in enumerate(modules, start=1):
        kind = m[0]
        path = f"{i}_{kind}"
        entries.append({"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"})
        if kind == "Pooling":
            os.makedirs(os.path.join(d, path))
            with open(os.path.join(d, path, "config.json"), "w") as f:
                json.dump(m[1], f, indent=2)
        elif kind == "Dense":
            _, n_in, n_out, bias, act, seed = m
            os.makedirs(os.path.join(d, path))
            g = torch.Generator().manual_seed(seed)
            tensors = {"linear.weight": (torch.randn(n_out, n_in, generator=g) / n_in ** 0.5).contiguous()}
            if bias:
                tensors["linear.bias"] = (0.1 * torch.randn(n_out, generator=g)).contiguous()
            save_file(tensors, os.path.join(d, path, "model.safetensors"))
            with open(os.path.join(d, path, "config.json"), "w") as f:
                json.dump({"in_features": n_in, "out_features": n_out, "bias": bias, "activation_function": act},
                          f, indent=2)
    with open(os.path.join(d, "modules.json"), "w") as f:
        json.dump(entries, f, indent=2)
    with open(os.path.join(d, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": max_len, "do_lower_case": False}, f, indent=2)
    if prompts is not None:
        with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
            json.dump({"prompts": prompts, "default_prompt_name": default_prompt, "similarity_fn_name": "cosine"},
                      f, indent=2)
    return d


def laid_over(stack_dir, into):
    for f in BASE_FILES:
        os.symlink(os.path.join(MINILM, f), os.path.join(into, f))
    for entry in os.listdir(stack_dir):
        src = os.path.join(stack_dir, entry)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(into, entry))


def vectors(a):
    return [[float(x) for x in row] for row in np.asarray(a, dtype=np.float32)]


def main():
    torch.manual_seed(0)
    golden = {"note": "SentenceTransformer.encode on all-MiniLM-L6-v2 with each stack of tests/models/st-stacks; "
                      "float32", "texts": TEXTS, "stacks": {}}
    for name, spec in STACK_SPECS.items():
        stack_dir = write_stack(name, spec)
        with tempfile.TemporaryDirectory() as tmp:
            laid_over(stack_dir, tmp)
            model = SentenceTransformer(tmp, device="cpu")
            model.eval()
            normalizes = any(m[0] == "Normalize" for m in spec[0])
            entry = {"default": vectors(model.encode(TEXTS, convert_to_numpy=True)), "normalizes": normalizes,
                     "max_seq_length": spec[1]}
            if spec[2]:
                entry["prompts"] = {p: vectors(model.encode(TEXTS, prompt_name=p, convert_to_numpy=True))
                                    for p in spec[2]}
            entry["truncated"] = {}
            for dims in spec[4]:
                v = model.encode(TEXTS, truncate_dim=dims, convert_to_numpy=True).astype(np.float64)
                if normalizes:
                    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
                entry["truncated"][str(dims)] = vectors(v)
            golden["stacks"][name] = entry
            print(name, "width", len(entry["default"][0]), file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
