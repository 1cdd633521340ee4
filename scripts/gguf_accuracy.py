"""Accuracy of quantized all-MiniLM-L6-v2 GGUFs, measured in PyTorch (no bertgpu code involved in the forward).

Usage: .venv/bin/python scripts/gguf_accuracy.py MODEL_DIR FILE.gguf [FILE.gguf ...]
       (needs torch, transformers, and `pip install gguf==0.19.0` — llama.cpp's reader, an independent check that
       our files are valid GGUF)

For each file: llama.cpp's reader loads it, every tensor is dequantized by llama.cpp's numpy code, mapped back
to Hugging Face names and loaded into `transformers.BertModel`; mean-pooled, normalized sentence embeddings are
compared with the f32 model's by cosine. With `--variants`, also re-quantizes the word embeddings of each file
at other precisions to show what that one choice costs.
"""
import sys

import numpy as np
import torch
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from transformers import AutoTokenizer, BertModel

SENTENCES = [
    # the sentences of tests/golden/model.py
    "Hello world!",
    "Résumé of a naïve café owner in Zürich, written in 2024 — with emoji 🙂 and CJK 東京.",
    "BERT encodes every token of a sentence with bidirectional self-attention; mean pooling over the real tokens "
    "(never the padding) gives a sentence embedding that can be compared with cosine similarity, which is what "
    "semantic search, clustering and deduplication use. This sentence is long on purpose so that the batch has "
    "plenty of padding for the shorter ones.",
    "a",
    # more, of other kinds
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street.",
    "Quantum computers exploit superposition and entanglement.",
    "I love pizza",
    "The stock market fell sharply after the announcement of new tariffs on imported steel.",
    "Where is the nearest train station?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He said nothing, and the silence stretched between them like a held breath.",
    "def f(x): return x * 2",
    "Berlin is the capital of Germany.",
    "ok",
    "Les chats dorment beaucoup pendant la journée.",
]

LAYER = {"attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
         "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
         "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm"}
EMB = {"token_embd": "embeddings.word_embeddings", "position_embd": "embeddings.position_embeddings",
       "token_types": "embeddings.token_type_embeddings", "token_embd_norm": "embeddings.LayerNorm"}


def hf_name(g):
    mod, param = g.rsplit(".", 1)
    if mod in EMB:
        return f"{EMB[mod]}.{param}"
    if mod.startswith("blk."):
        _, n, sub = mod.split(".", 2)
        return f"encoder.layer.{n}.{LAYER[sub]}.{param}"
    return g


def load(path):
    r = GGUFReader(path)
    out, types = {}, {}
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape.tolist())]  # GGUF ne → PyTorch order
        x = dequantize(t.data, t.tensor_type).reshape(shape)
        out[hf_name(t.name)] = torch.from_numpy(np.array(x, dtype=np.float32))
        types[hf_name(t.name)] = t.tensor_type.name
    return out, types


def embed(model, tok):
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    e = (h * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(e, dim=-1)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    variants = "--variants" in sys.argv
    model_dir, files = args[0], args[1:]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir).eval()
    ref = embed(model, tok)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    for f in files:
        sd, types = load(f)
        cases = [("as stored", sd)]
        if variants:
            w = base["embeddings.word_embeddings.weight"].numpy()
            for q in (T.F16, T.Q8_0, T.Q4_0):
                alt = dict(sd)
                if q == T.F16:
                    alt["embeddings.word_embeddings.weight"] = torch.from_numpy(w.astype(np.float16).astype(np.float32))
                else:
                    alt["embeddings.word_embeddings.weight"] = torch.from_numpy(dequantize(quantize(w, q), q).reshape(w.shape))
                cases.append((f"word embeddings {q.name}", alt))
        for label, state in cases:
            missing = model.load_state_dict({**base, **state}, strict=True)
            cos = (embed(model, tok) * ref).sum(-1)
            print(f"{f} [{label}]: min cosine {cos.min():.6f}  mean {cos.mean():.6f}  "
                  f"(word embeddings {types.get('embeddings.word_embeddings.weight')}, "
                  f"query {types.get('encoder.layer.0.attention.self.query.weight')})")
            print("    per sentence:", " ".join(f"{c:.4f}" for c in cos.tolist()))
        model.load_state_dict(base)


if __name__ == "__main__":
    main()
