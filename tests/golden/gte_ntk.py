#!/usr/bin/env python3
"""Golden for GTE's fixed NTK scaling of the rotation: Alibaba-NLP's gte-base-en-v1.5 and gte-large-en-v1.5 configs
say `"rope_scaling": {"type": "ntk", "factor": 2.0}`, which their repositories' own modeling code (the "new" model
type, `NTKScalingRotaryEmbedding` without `mixed_b`) runs at every position as the inverse frequencies

    inv_freq_i = 1 / (theta·s)^(2i/d) / s^(2/d)

(its cache is built for `max_position_embeddings · s` positions, always above `max_position_embeddings`, so the
scaled frequencies are the ones used). transformers' own `GteModel` has no `ntk` rope type (it raises KeyError), so
the golden is transformers' GteModel with its `inv_freq` replaced by the formula above, the one change that code
makes. Run from the repository root after rotary.py (needs torch, transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/gte_ntk.py

Writes tests/models/tiny-gte-ntk/ (GteModel's weights, config.json under the hub's keys: `model_type: "new"`,
`rope_theta`, `rope_scaling`) and tests/golden/gte_ntk.json: the mean and [CLS] embeddings of a padded batch, and
how far the mean embeddings move when the scaling is left out (the tests' tolerance is far below).
"""
import json
import os
import sys

import torch
from transformers import AutoTokenizer, GteModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import rotary as R  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "gte_ntk.json")
THETA = 500.0
FACTOR = 2.0


def ntk_inv_freq(d):
    base = THETA * FACTOR
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    return inv_freq / FACTOR ** (2 / d)


def main():
    tok = AutoTokenizer.from_pretrained(R.TOKENIZER)
    torch.manual_seed(71)
    m = R.perturb(GteModel(R.gte_config(len(tok), architectures=["GteModel"])), 171).eval()
    assert m.config.rope_parameters["rope_theta"] == THETA
    plain = H.embeddings(m, tok, R.EMBED_TEXTS)
    d = m.rotary_emb.inv_freq.shape[0] * 2
    with torch.no_grad():
        m.rotary_emb.inv_freq.copy_(ntk_inv_freq(d))
        if hasattr(m.rotary_emb, "original_inv_freq"):
            m.rotary_emb.original_inv_freq = m.rotary_emb.inv_freq.clone()
    scaled = H.embeddings(m, tok, R.EMBED_TEXTS)
    moved = max(abs(a - b) for x, y in zip(plain, scaled) for a, b in zip(x["mean"], y["mean"]))
    out = R.save(m, "tiny-gte-ntk")
    path = os.path.join(out, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    # The hub's key set (Alibaba-NLP/new-impl's NewConfig): the type, the class, theta and the scaling at the top.
    cfg.pop("rope_parameters", None)
    cfg.update({"model_type": "new", "architectures": ["NewModel"], "position_embedding_type": "rope",
                "rope_theta": THETA, "rope_scaling": {"type": "ntk", "factor": FACTOR},
                "layer_norm_type": "layer_norm", "logn_attention_scale": False, "pack_qkv": True})
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=2)
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/rotary.rs",
              "theta": THETA, "factor": FACTOR, "inv_freq": ntk_inv_freq(d).tolist(),
              "embeddings": scaled, "without_scaling_max_diff": moved}
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}; without the scaling the mean embeddings move by {moved}", file=sys.stderr)


if __name__ == "__main__":
    main()
