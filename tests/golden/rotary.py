#!/usr/bin/env python3
"""Goldens for the rotary encoders NomicBERT and GTE, from PyTorch `transformers` (`models/nomic_bert`,
`models/gte`: both in transformers 5, no remote code).

Both are BERT's post-LN layers with rotary position embeddings on the queries and keys (no position table) and a
gated feed-forward `down(act(gate(x)) · up(x))`: NomicBERT with SiLU (SwiGLU) and no biases in the layers, GTE with
GELU (GeGLU), biases on the attention projections and the down projection only. Run from the repository root after
heads.py (it reuses its WordPiece tokenizer from tests/models/tiny-classifier and its helpers; needs torch,
transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/rotary.py

The models are seeded random, hidden 32, 2 layers, 4 heads (head dim 8), feed-forward 64, 64 positions, written to:
  tests/models/tiny-nomic-model/        NomicBertModel, as transformers saves it
  tests/models/tiny-nomic-hub/          the same weights and config as nomic-ai's hub repos write them (config.json
                                        with `n_embd`, `rotary_emb_base`...; `encoder.layers.{i}.attn.Wqkv`, `mlp.fc11`
                                        ...): transformers' own conversion mapping (`conversion_mapping.py`, "nomic_bert")
                                        run backwards, and checked by loading it back into NomicBertModel
  tests/models/tiny-nomic-mlm/          NomicBertForMaskedLM
  tests/models/tiny-nomic-classifier/   NomicBertForSequenceClassification (its pooler: dense + tanh), 3 labels
  tests/models/tiny-nomic-ner/          NomicBertForTokenClassification
  tests/models/tiny-gte-model/          GteModel, type_vocab_size 0 (no token-type table, as gte-base-en-v1.5)
  tests/models/tiny-gte-mlm/            GteForMaskedLM (`lm_head`: dense + GELU + layer_norm + decoder)
  tests/models/tiny-gte-classifier/     GteForSequenceClassification, type_vocab_size 2 (pairs' segments are read)
  tests/models/tiny-gte-ner/            GteForTokenClassification
  tests/golden/rotary.json              per family: mean and [CLS] embeddings of a padded batch (texts of 3 to 48
                                        tokens), fill-mask logits and pipeline, classification logits and pipeline,
                                        token-classification logits; and how far the embeddings move with an
                                        infinite theta, which leaves one pair per head turning (the tests'
                                        tolerances are far below)
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoTokenizer, GteConfig, GteForMaskedLM, GteForSequenceClassification,
                          GteForTokenClassification, GteModel, NomicBertConfig, NomicBertForMaskedLM,
                          NomicBertForSequenceClassification, NomicBertForTokenClassification, NomicBertModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "rotary.json")
TOKENIZER = os.path.join(H.MODELS, "tiny-classifier")
EMBED_TEXTS = [c["text"] for c in H.CLASSIFY_INPUTS] + H.NER_TEXTS + [
    H.QA_INPUTS[2]["context"][:230],
]
FILL_MASK = H.FILL_MASK_TINY
IDS3 = {0: "negative", 1: "neutral", 2: "positive"}
NER_LABELS = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))


def common(vocab_size, **kw):
    return dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=H.MAX_POSITIONS, initializer_range=0.3,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0, layer_norm_eps=1e-5, **kw)


def nomic_config(vocab_size, **kw):
    # rope_theta 100: with head dim 8 the slowest pair turns by 100^(-6/8) ≈ 0.03 rad a position, so that every pair
    # turns visibly over 48 positions.
    return NomicBertConfig(**common(vocab_size, type_vocab_size=2, hidden_act="silu",
                                    rope_parameters={"rope_type": "default", "rope_theta": 100.0}, **kw))


def gte_config(vocab_size, type_vocab_size=0, **kw):
    return GteConfig(**common(vocab_size, type_vocab_size=type_vocab_size, hidden_act="gelu",
                              rope_parameters={"rope_type": "default", "rope_theta": 500.0}, **kw))


def perturb(model, seed):
    """heads.perturb, for both families' norm names (`LayerNorm`, `*_layernorm`, `layer_norm`) and the token-type
    table."""
    return H.perturb(model, seed, ("LayerNorm", "layernorm", "layer_norm", "token_type"))


def save(model, name):
    return H.save(model, name, TOKENIZER)


def without_rotation(encoder, tok, want):
    """How far the mean embeddings move when theta is infinite: every frequency but the first (theta ** 0 = 1) is 0,
    so only each head's first pair of dimensions turns. The tests run the same theta and expect the same move."""
    with torch.no_grad():
        d = encoder.rotary_emb.inv_freq.shape[0] * 2
        encoder.rotary_emb.inv_freq.copy_(1.0 / (float("inf") ** (torch.arange(0, d, 2, dtype=torch.float) / d)))
        assert encoder.rotary_emb.inv_freq.tolist() == [1.0] + [0.0] * (d // 2 - 1)
    got = H.embeddings(encoder, tok, EMBED_TEXTS)
    return max(abs(a - b) for x, y in zip(want, got) for a, b in zip(x["mean"], y["mean"]))


def nomic_hub(model, name):
    """`model` (a NomicBertModel) as nomic-ai's hub repositories store it: the reverse of transformers' "nomic_bert"
    conversion mapping (Wqkv = [q; k; v] rows, fc11 = up, fc12 = gate, emb_ln, norm1/norm2) and the hub's config
    keys. Checked by loading it back."""
    d = save(model, name)
    sd = load_file(os.path.join(d, "model.safetensors"))
    out = {}
    for k, v in sd.items():
        k2 = k.replace("embeddings.LayerNorm", "emb_ln")
        k2 = k2.replace("layers.", "encoder.layers.", 1) if k2.startswith("layers.") else k2
        for a, b in (("self_attn.o_proj", "attn.out_proj"), ("mlp.up_proj", "mlp.fc11"), ("mlp.gate_proj", "mlp.fc12"),
                     ("mlp.down_proj", "mlp.fc2"), ("post_attention_layernorm", "norm1"),
                     ("post_mlp_layernorm", "norm2")):
            k2 = k2.replace(a, b)
        if ".self_attn.q_proj." in k2:
            base = k2.replace(".self_attn.q_proj.", ".attn.Wqkv.")
            parts = [sd[k.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            out[base] = torch.cat(parts, 0).contiguous()
            continue
        if ".self_attn.k_proj." in k2 or ".self_attn.v_proj." in k2:
            continue
        out[k2] = v.contiguous()
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c = model.config
    hub = {
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "activation_function": "swiglu",
        "n_embd": c.hidden_size, "n_head": c.num_attention_heads, "n_inner": c.intermediate_size,
        "n_layer": c.num_hidden_layers, "n_positions": c.max_position_embeddings, "vocab_size": c.vocab_size,
        "type_vocab_size": c.type_vocab_size, "layer_norm_epsilon": c.layer_norm_eps,
        "rotary_emb_base": c.rope_parameters["rope_theta"], "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False, "rotary_scaling_factor": None, "qkv_proj_bias": False,
        "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False, "causal": False, "use_rms_norm": False,
        "pad_token_id": 0, "initializer_range": c.initializer_range,
    }
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(hub, fh, indent=2)
    return d, out


def main():
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    V = len(tok)
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/rotary.rs"}

    # --- NomicBERT ------------------------------------------------------------------------------------------------
    g = {}
    torch.manual_seed(51)
    m = perturb(NomicBertModel(nomic_config(V, architectures=["NomicBertModel"])), 151).eval()
    save(m, "tiny-nomic-model")
    g["model_embeddings"] = H.embeddings(m, tok, EMBED_TEXTS)
    _, hub_sd = nomic_hub(m, "tiny-nomic-hub")
    # The hub layout holds the same numbers: every tensor of the transformers file is found in it.
    assert sum(v.numel() for v in hub_sd.values()) == sum(p.numel() for p in m.state_dict().values()
                                                          if p.dtype.is_floating_point), "hub layout lost tensors"
    g["without_rotation_max_diff"] = without_rotation(m, tok, g["model_embeddings"])
    torch.manual_seed(52)
    m = perturb(NomicBertForMaskedLM(nomic_config(V, architectures=["NomicBertForMaskedLM"])), 152).eval()
    save(m, "tiny-nomic-mlm")
    g["embeddings"] = H.embeddings(m.nomic_bert, tok, EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, FILL_MASK)
    torch.manual_seed(53)
    m = perturb(NomicBertForSequenceClassification(nomic_config(
        V, architectures=["NomicBertForSequenceClassification"], id2label=IDS3,
        label2id={v: k for k, v in IDS3.items()})), 153).eval()
    save(m, "tiny-nomic-classifier")
    g["classifier"] = H.classify(m, tok, with_types=True)
    torch.manual_seed(54)
    m = perturb(NomicBertForTokenClassification(nomic_config(
        V, architectures=["NomicBertForTokenClassification"], id2label=NER_LABELS,
        label2id={v: k for k, v in NER_LABELS.items()})), 154).eval()
    save(m, "tiny-nomic-ner")
    g["ner"] = H.token_logits(m, tok)
    golden["nomic"] = g

    # --- GTE ------------------------------------------------------------------------------------------------------
    g = {}
    torch.manual_seed(61)
    m = perturb(GteModel(gte_config(V, architectures=["GteModel"])), 161).eval()
    save(m, "tiny-gte-model")
    g["model_embeddings"] = H.embeddings(m, tok, EMBED_TEXTS)
    g["without_rotation_max_diff"] = without_rotation(m, tok, g["model_embeddings"])
    torch.manual_seed(62)
    m = perturb(GteForMaskedLM(gte_config(V, architectures=["GteForMaskedLM"])), 162).eval()
    save(m, "tiny-gte-mlm")
    g["embeddings"] = H.embeddings(m.gte, tok, EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, FILL_MASK)
    torch.manual_seed(63)
    m = perturb(GteForSequenceClassification(gte_config(
        V, type_vocab_size=2, architectures=["GteForSequenceClassification"], id2label=IDS3,
        label2id={v: k for k, v in IDS3.items()})), 163).eval()
    save(m, "tiny-gte-classifier")
    g["classifier"] = H.classify(m, tok, with_types=True)
    torch.manual_seed(64)
    m = perturb(GteForTokenClassification(gte_config(
        V, architectures=["GteForTokenClassification"], id2label=NER_LABELS,
        label2id={v: k for k, v in NER_LABELS.items()})), 164).eval()
    save(m, "tiny-gte-ner")
    g["ner"] = H.token_logits(m, tok)
    golden["gte"] = g

    H.write_golden(OUT, golden)
    for fam in ("nomic", "gte"):
        g = golden[fam]
        print(fam, "fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
        print(fam, "classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
        print(fam, "longest embed text", max(len(e["input_ids"]) for e in g["embeddings"]), "tokens", file=sys.stderr)
        print(fam, "with theta = inf the mean embeddings move by", g["without_rotation_max_diff"], file=sys.stderr)
    for name in ("tiny-nomic-model", "tiny-nomic-mlm", "tiny-gte-model", "tiny-gte-mlm", "tiny-gte-classifier"):
        with open(os.path.join(H.MODELS, name, "model.safetensors"), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            print(name, "tensors:", sorted(json.loads(fh.read(n))), file=sys.stderr)


if __name__ == "__main__":
    main()
