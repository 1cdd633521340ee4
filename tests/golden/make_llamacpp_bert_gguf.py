"""A tiny BERT GGUF written the way llama.cpp's `convert_hf_to_gguf.py` writes one, with llama.cpp's own writer.

Run: .venv/bin/python tests/golden/make_llamacpp_bert_gguf.py
(needs `pip install gguf==0.19.0 numpy torch transformers`)
Writes tests/golden/llamacpp_tiny_bert.gguf and tests/golden/llamacpp_tiny_bert.json (values the reader must
recover, and what the model must compute: PyTorch `transformers`' BertModel and BertTokenizer, given the same
vocabulary and the dequantized weights, embed a few texts; mean pooling, as the file's `bert.pooling_type` says). The file has what llama.cpp's BertModel converter emits: `bert.*` hyper-parameters, the phantom-space
vocabulary in `tokenizer.ggml.tokens` with token types, llama.cpp tensor names, no tokenizer.json, no config.json,
no heads; F32 norms/biases, F16 embeddings, and Q8_0/Q4_0 linear weights.
"""
import json
import pathlib

import numpy as np
import gguf
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize

here = pathlib.Path(__file__).parent
rng = np.random.default_rng(7)
H, FF, L, HEADS, POS = 64, 128, 1, 2, 16
# WordPiece vocabulary (uncased), then llama.cpp's phantom-space form.
vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "the", "cat", "sat",
         "##s", "##ing", "on", "mat", ".", ",", "a", "dog", "run"]
V = len(vocab)
special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
toktypes = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in vocab]
tokens = [t if t in special else (t[2:] if t.startswith("##") else "\u2581" + t) for t in vocab]

w = gguf.GGUFWriter(str(here / "llamacpp_tiny_bert.gguf"), "bert")
w.add_context_length(POS)
w.add_embedding_length(H)
w.add_feed_forward_length(FF)
w.add_head_count(HEADS)
w.add_block_count(L)
w.add_layer_norm_eps(1e-12)
w.add_causal_attention(False)
w.add_pooling_type(gguf.PoolingType.MEAN)
w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
w.add_tokenizer_model("bert")
w.add_token_list(tokens)
w.add_token_types(toktypes)
w.add_token_type_count(2)
w.add_unk_token_id(2)
w.add_sep_token_id(4)
w.add_pad_token_id(0)
w.add_bos_token_id(3)  # llama.cpp records [CLS] as BOS and [SEP] as EOS
w.add_eos_token_id(4)
w.add_mask_token_id(5)

expected = {}
decoded = {}  # every tensor as the file's reader must decode it, for the PyTorch reference below
def add(name, shape, qtype):
    x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    if qtype == T.F32:
        data, deq = x, x
    elif qtype == T.F16:
        data = x.astype(np.float16)
        deq = data.astype(np.float32)
    else:
        data = quantize(x, qtype)
        deq = dequantize(data, qtype).reshape(shape)
    w.add_tensor(name, data, raw_dtype=qtype if qtype not in (T.F32, T.F16) else None)
    decoded[name] = deq.reshape(shape)
    # a few decoded values and a checksum of all of them, in PyTorch (row-major) order
    expected[name] = {"shape": list(shape), "type": qtype.name, "first": [float(v) for v in deq.reshape(-1)[:8]],
                      "sum": float(deq.astype(np.float64).sum())}

add("token_embd.weight", (V, H), T.F16)
add("token_types.weight", (2, H), T.F32)
add("position_embd.weight", (POS, H), T.F16)
add("token_embd_norm.weight", (H,), T.F32)
add("token_embd_norm.bias", (H,), T.F32)
for i in range(L):
    for n, q in (("attn_q", T.Q8_0), ("attn_k", T.Q8_0), ("attn_v", T.Q4_0), ("attn_output", T.Q8_0)):
        add(f"blk.{i}.{n}.weight", (H, H), q)
        add(f"blk.{i}.{n}.bias", (H,), T.F32)
    add(f"blk.{i}.attn_output_norm.weight", (H,), T.F32)
    add(f"blk.{i}.attn_output_norm.bias", (H,), T.F32)
    add(f"blk.{i}.ffn_up.weight", (FF, H), T.Q4_0)
    add(f"blk.{i}.ffn_up.bias", (FF,), T.F32)
    add(f"blk.{i}.ffn_down.weight", (H, FF), T.Q8_0)
    add(f"blk.{i}.ffn_down.bias", (H,), T.F32)
    add(f"blk.{i}.layer_output_norm.weight", (H,), T.F32)
    add(f"blk.{i}.layer_output_norm.bias", (H,), T.F32)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()


def reference_embeddings():
    """BertModel (no pooler) on the decoded weights, BertTokenizer on the WordPiece vocabulary: token ids and the
    mean of the last hidden state over each text's tokens (one text at a time: no padding)."""
    import tempfile

    import torch
    import transformers
    from transformers import BertConfig, BertModel, BertTokenizer

    torch.set_num_threads(2)
    hf = {"token_embd": "embeddings.word_embeddings", "token_types": "embeddings.token_type_embeddings",
          "position_embd": "embeddings.position_embeddings", "token_embd_norm": "embeddings.LayerNorm"}
    per_layer = {"attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
                 "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
                 "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm"}
    state = {}
    for name, x in decoded.items():
        parts = name.split(".")
        if parts[0] == "blk":
            key = f"encoder.layer.{parts[1]}.{per_layer[parts[2]]}.{parts[3]}"
        else:
            key = f"{hf[parts[0]]}.{parts[1]}"
        state[key] = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS, intermediate_size=FF,
                     max_position_embeddings=POS, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
                     pad_token_id=0)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tok = BertTokenizer(str(pathlib.Path(d) / "vocab.txt"), do_lower_case=True)
    out = []
    with torch.no_grad():
        for text in TEXTS:
            enc = tok(text, return_tensors="pt")
            hidden = model(**enc).last_hidden_state[0]  # (T, H)
            out.append({"text": text, "input_ids": enc["input_ids"][0].tolist(),
                        "mean_pooled": [float(v) for v in hidden.mean(0)]})
    return {"source": f"torch {torch.__version__}, transformers {transformers.__version__}", "texts": out}


# Whole words, subwords (`##s`, `##ing`), punctuation, an unknown character and an unknown word, upper case.
TEXTS = ["the cat sat on the mat", "a dog", "Hello, the cats sat on mats!", "a dog runing on the mat, running"]
(here / "llamacpp_tiny_bert.json").write_text(json.dumps({"source": f"gguf-py {gguf.__version__ if hasattr(gguf, '__version__') else '0.19.0'}",
    "vocab": vocab, "tensors": expected, "embeddings": reference_embeddings()}, indent=1) + "\n")
print("wrote", here / "llamacpp_tiny_bert.gguf", (here / "llamacpp_tiny_bert.gguf").stat().st_size, "bytes")
