#!/usr/bin/env python3
"""Goldens for the vectors beside the one dense vector per text: SPLADE sparse vectors (sentence-transformers'
`SparseEncoder`), per-token vectors (`SentenceTransformer.encode(output_value="token_embeddings")`) and the int8,
uint8, binary and ubinary encodings of `quantize_embeddings`, all from sentence-transformers itself.

Run from the repository root after scripts/fetch-models.sh (needs torch, transformers 5.x, sentence-transformers):

    /path/to/venv/bin/python tests/golden/vectors.py

The sparse stack in tests/models/st-stacks/splade-log1p-short/ (modules.json naming the MLMTransformer and a
SpladePooling with the log1p_relu activation, a max_seq_length of 12, a query prompt) is written here and laid over
the real splade-tiny (models/splade-tiny) as the tests lay it; the per-token stacks are tests/golden/sentence.py's,
laid over all-MiniLM-L6-v2. Writes:

  tests/golden/vectors.json   sparse: per case the texts' {indices, values} (indices ascending);
                              tokens: per case the texts' token ids and their vectors (float32 as JSON doubles);
                              quantized: the float32 vectors given to quantize_embeddings and what it returns for
                              each precision, with the ranges taken from the vectors themselves and given explicitly
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, SparseEncoder
from sentence_transformers.util import quantize_embeddings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINILM = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
SPLADE = os.path.join(ROOT, "models", "splade-tiny")
STACKS = os.path.join(ROOT, "tests", "models", "st-stacks")
OUT = os.path.join(ROOT, "tests", "golden", "vectors.json")

TEXTS = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank, while the farmer watches from his old "
    "wooden porch and drinks a cup of coffee.",
    "Paris",
    "How do I embed a sentence in the browser?",
]
SPARSE_STACK = "splade-log1p-short"


def write_sparse_stack():
    d = os.path.join(STACKS, SPARSE_STACK)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "1_SpladePooling"))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
        {"idx": 1, "name": "1", "path": "1_SpladePooling",
         "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
    ]
    with open(os.path.join(d, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    with open(os.path.join(d, "1_SpladePooling", "config.json"), "w") as f:
        json.dump({"pooling_strategy": "max", "activation_function": "log1p_relu", "word_embedding_dimension": 30522},
                  f, indent=2)
    with open(os.path.join(d, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 12, "do_lower_case": False}, f, indent=2)
    with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
        json.dump({"model_type": "SparseEncoder", "prompts": {"query": "query: "}, "default_prompt_name": None,
                   "similarity_fn_name": "dot"}, f, indent=2)
    return d


def laid_over(stack_dir, base, into):
    for f in os.listdir(base):
        if os.path.isfile(os.path.join(base, f)) and f not in ("modules.json", "sentence_bert_config.json",
                                                                "config_sentence_transformers.json"):
            os.symlink(os.path.join(base, f), os.path.join(into, f))
    for entry in os.listdir(stack_dir):
        src = os.path.join(stack_dir, entry)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(into, entry))


def sparse(rows):
    out = []
    for row in rows:
        dense = row.to_dense().float().numpy() if row.is_sparse else np.asarray(row, dtype=np.float32)
        idx = np.nonzero(dense)[0]
        out.append({"indices": [int(i) for i in idx], "values": [float(dense[i]) for i in idx]})
    return out


def floats(a):
    return [[float(x) for x in row] for row in np.asarray(a, dtype=np.float32)]


def tokens(model, texts, **kw):
    vecs = model.encode(texts, output_value="token_embeddings", convert_to_numpy=False, **kw)
    prompt = model.prompts.get(kw["prompt_name"], "") if kw.get("prompt_name") else \
        model.prompts.get(model.default_prompt_name, "") if model.default_prompt_name else ""
    enc = model.tokenize([prompt + t for t in texts])
    out = []
    for i, v in enumerate(vecs):
        ids = enc["input_ids"][i][enc["attention_mask"][i] == 1]
        assert len(ids) == v.shape[0], (len(ids), v.shape)
        out.append({"ids": [int(x) for x in ids], "vectors": floats(v.float().numpy())})
    return out


def main():
    torch.manual_seed(0)
    golden = {"note": "sentence-transformers' SparseEncoder.encode (splade-tiny), SentenceTransformer.encode "
                      "output_value=token_embeddings (all-MiniLM-L6-v2), quantize_embeddings; float32",
              "texts": TEXTS, "sparse": {}, "tokens": {}}
    stack = write_sparse_stack()
    m = SparseEncoder(SPLADE, device="cpu")
    m.eval()
    golden["sparse"]["plain"] = sparse(m.encode(TEXTS))
    with tempfile.TemporaryDirectory() as tmp:
        laid_over(stack, SPLADE, tmp)
        m = SparseEncoder(tmp, device="cpu")
        m.eval()
        golden["sparse"][SPARSE_STACK] = sparse(m.encode(TEXTS))
        golden["sparse"][SPARSE_STACK + " prompt query"] = sparse(m.encode(TEXTS, prompt_name="query"))
        golden["sparse"][SPARSE_STACK + " max_active_dims 5"] = sparse(m.encode(TEXTS, max_active_dims=5))
    print("sparse:", {k: [len(r["indices"]) for r in v] for k, v in golden["sparse"].items()}, file=sys.stderr)

    m = SentenceTransformer(MINILM, device="cpu")
    golden["tokens"]["plain"] = tokens(m, TEXTS)
    floats_in = m.encode(TEXTS + ["A second look at the same question.", "Nothing to see here."],
                         convert_to_numpy=True)
    for name, kw in [("mean-short", {}), ("meansqrt-noprompt", {}), ("meansqrt-noprompt", {"prompt_name": "passage"})]:
        with tempfile.TemporaryDirectory() as tmp:
            laid_over(os.path.join(STACKS, name), MINILM, tmp)
            m = SentenceTransformer(tmp, device="cpu")
            key = name + (" prompt " + kw["prompt_name"] if kw else "")
            golden["tokens"][key] = tokens(m, TEXTS, **kw)
    print("tokens:", {k: [len(r["ids"]) for r in v] for k, v in golden["tokens"].items()}, file=sys.stderr)

    ranges = np.vstack((floats_in.min(axis=0) - 0.01, floats_in.max(axis=0) + 0.02)).astype(np.float32)
    q = {"input": floats(floats_in), "ranges": floats(ranges), "from_input": {}, "with_ranges": {}}
    for p in ["int8", "uint8", "binary", "ubinary"]:
        q["from_input"][p] = quantize_embeddings(floats_in, precision=p).astype(np.int64).tolist()
        q["with_ranges"][p] = quantize_embeddings(floats_in, precision=p, ranges=ranges).astype(np.int64).tolist()
    golden["quantized"] = q
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
