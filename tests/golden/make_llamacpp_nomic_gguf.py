"""A tiny NomicBERT GGUF written the way llama.cpp's `convert_hf_to_gguf.py` (`NomicBertModel`) writes one, with
llama.cpp's own writer and its own tensor-name table.

Run: .venv/bin/python tests/golden/make_llamacpp_nomic_gguf.py
(needs `pip install gguf==0.19.0 numpy torch transformers safetensors`)
Writes tests/golden/llamacpp_tiny_nomic.gguf and tests/golden/llamacpp_tiny_nomic.json. The weights are
tests/models/tiny-nomic-model's; every tensor is named by gguf-py's `TensorNameMap` for `MODEL_ARCH.NOMIC_BERT` (what
llama.cpp's converter calls), so the file has llama.cpp's names, not ours: `token_embd_norm` (`emb_ln`), `attn_qkv`
(`Wqkv`), `ffn_up` (`fc11`), `ffn_gate` (`fc12`), ... The metadata is what that converter emits: `nomic-bert.*`
hyper-parameters with `nomic-bert.rope.freq_base`, mean pooling, the phantom-space vocabulary with token types; no
tokenizer.json, no config.json. Norms f32, embeddings f16, linear weights Q8_0/Q4_0/f16. The JSON holds what PyTorch
`transformers`' NomicBertModel computes on the file's decoded weights (BertTokenizer on the same vocabulary): token
ids and mean-pooled last hidden states, one text at a time.
"""
import json
import pathlib
import shutil
import tempfile

import numpy as np
import gguf
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize
from safetensors.numpy import load_file, save_file

here = pathlib.Path(__file__).parent
src = here.parent / "models" / "tiny-nomic-model"
cfg = json.loads((src / "config.json").read_text())
H, FF, L, HEADS = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
THETA = cfg["rope_parameters"]["rope_theta"]
vocab = (src / "vocab.txt").read_text().split("\n")[:-1]
special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
toktypes = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in vocab]
tokens = [t if t in special else (t[2:] if t.startswith("##") else "\u2581" + t) for t in vocab]

out_path = here / "llamacpp_tiny_nomic.gguf"
w = gguf.GGUFWriter(str(out_path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.NOMIC_BERT])
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(H)
w.add_feed_forward_length(FF)
w.add_head_count(HEADS)
w.add_block_count(L)
w.add_layer_norm_eps(cfg["layer_norm_eps"])
w.add_causal_attention(False)
w.add_pooling_type(gguf.PoolingType.MEAN)
w.add_rope_freq_base(THETA)
w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
w.add_tokenizer_model("bert")
w.add_token_list(tokens)
w.add_token_types(toktypes)
w.add_token_type_count(cfg["type_vocab_size"])
w.add_unk_token_id(vocab.index("[UNK]"))
w.add_sep_token_id(vocab.index("[SEP]"))
w.add_pad_token_id(vocab.index("[PAD]"))
w.add_bos_token_id(vocab.index("[CLS]"))
w.add_eos_token_id(vocab.index("[SEP]"))
w.add_mask_token_id(vocab.index("[MASK]"))

tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.NOMIC_BERT, L)
# How each GGUF tensor is stored: several types, so the reader decodes each (the rows are whole 32-blocks).
STORE = {"token_embd": T.F16, "token_types": T.F32, "attn_qkv": T.Q8_0, "attn_output": T.F16, "ffn_up": T.Q8_0,
         "ffn_gate": T.Q4_0, "ffn_down": T.Q8_0}
decoded = {}  # Hugging Face name → the values the file's reader must decode
for name, x in sorted(load_file(str(src / "model.safetensors")).items()):
    gname = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    assert gname is not None, f"llama.cpp has no nomic-bert name for {name}"
    kind = gname.split(".")[-2]
    qtype = T.F32 if x.ndim == 1 else STORE[kind]
    if qtype == T.F32:
        data, deq = x, x
    elif qtype == T.F16:
        data = x.astype(np.float16)
        deq = data.astype(np.float32)
    else:
        data = quantize(x, qtype)
        deq = dequantize(data, qtype).reshape(x.shape)
    w.add_tensor(gname, data, raw_dtype=qtype if qtype not in (T.F32, T.F16) else None)
    decoded[name] = np.ascontiguousarray(deq, dtype=np.float32)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()


def reference_embeddings():
    """NomicBertModel on the decoded weights (the checkpoint's own config.json), BertTokenizer on its vocabulary."""
    import torch
    import transformers
    from transformers import AutoModel, BertTokenizer

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        for f in ("config.json", "vocab.txt", "tokenizer_config.json"):
            shutil.copy(src / f, d / f)
        save_file(decoded, str(d / "model.safetensors"))
        model = AutoModel.from_pretrained(str(d)).eval()
        tok = BertTokenizer(str(d / "vocab.txt"), do_lower_case=True)
    out = []
    with torch.no_grad():
        for text in TEXTS:
            enc = tok(text, return_tensors="pt")
            hidden = model(**enc).last_hidden_state[0]  # (T, H)
            out.append({"text": text, "input_ids": enc["input_ids"][0].tolist(),
                        "mean_pooled": [float(v) for v in hidden.mean(0)]})
    return {"source": f"torch {torch.__version__}, transformers {transformers.__version__}", "texts": out}


# Whole words, subwords, punctuation, upper case, an unknown character; one long enough to turn the rotation far.
TEXTS = ["the cat sat on the mat", "a dog", "Hello, the cats sat on mats!",
         "a dog running on the mat, the cat sat on the dog, and the mat sat on the cat \u2603 again and again"]
(here / "llamacpp_tiny_nomic.json").write_text(json.dumps({"source": "gguf-py 0.19.0", "theta": THETA,
    "embeddings": reference_embeddings()}, indent=1) + "\n")
print("wrote", out_path, out_path.stat().st_size, "bytes")
