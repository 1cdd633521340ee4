#!/usr/bin/env python3
"""Golden for LoRA fine-tuning of ModernBERT and ALBERT: tests/golden/lora.py's run (read its docstring: peft's
get_peft_model on the float64 model, A and B overwritten from a seeded generator and recorded in `init`, the loss and
every trainable gradient at the start, five AdamW steps), on the batches of tests/golden/finetune_modernbert.json's
and tests/golden/finetune_families.json's cases and with transformers 5's own classes.

Run from the repository root (torch 2.x, transformers 5.x, peft; made with peft 0.21.2, whose `adapter_config.json`
has more keys than 0.13.2's: the test compares the settings both write):

    /work/venv/bin/python tests/golden/lora_modernbert_albert.py

It writes tests/golden/lora_modernbert_albert.json:

  modern_qv   tiny-modernbert-classifier  SEQ_CLS, r 4, lora_alpha 8, target_modules ["Wqkv"]
  modern_all  tiny-modernbert-ner         TOKEN_CLS, r 2, lora_alpha 3, every linear of the layers: ["Wqkv", "Wo",
                                          "Wi"] (`Wo`: the attention's and the MLP's)
  albert_qv   tiny-albert-classifier      SEQ_CLS, r 4, lora_alpha 8, ["query", "value"]
  albert_all  tiny-albert-ner             TOKEN_CLS, r 2, lora_alpha 3, every linear of the shared layer: ["query",
                                          "key", "value", "attention.dense", "ffn", "ffn_output"]
  albert_proj tiny-albert-classifier      SEQ_CLS, r 2, lora_alpha 3, albert_all's and the embeddings' projection:
                                          [..., "embedding_hidden_mapping_in"]
  electra_proj tiny-electra-ner           TOKEN_CLS, r 4, lora_alpha 8, every linear of the layers and the
                                          embeddings' projection (E 16 → H 32): [..., "embeddings_project"]

ModernBERT's linears are packed, and peft adapts the packed modules whole: an adapter on `attn.Wqkv` (queries, keys
and values together: "qv" here is the whole projection), one on `mlp.Wi` (`[input; gate]`, in that order). peft has
no default `target_modules` for either family. ModernBERT runs with tests/golden/finetune_modernbert.py's
`float64_softmax` (transformers' eager attention takes its softmax in float32). ALBERT's one layer runs at every pass,
and peft's adapter on it with it: one adapter per module, its gradient summed over the passes; its embeddings'
`embedding_hidden_mapping_in` (not a layer's linear) is targeted in albert_proj alone, as ELECTRA's
`embeddings_project` in electra_proj: the gradient reaches below the layers to that adapter.
"""
import json
import os
import sys

import torch
from transformers import (AlbertForSequenceClassification, AlbertForTokenClassification, ElectraForTokenClassification,
                          ModernBertForSequenceClassification, ModernBertForTokenClassification)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora as L  # noqa: E402
import finetune_modernbert as FM  # noqa: E402
import transformers.models.modernbert.modeling_modernbert as M  # noqa: E402

MODERN = os.path.join(L.ROOT, "tests", "golden", "finetune_modernbert.json")
FAMILIES = os.path.join(L.ROOT, "tests", "golden", "finetune_families.json")
OUT = os.path.join(L.ROOT, "tests", "golden", "lora_modernbert_albert.json")
MODERN_ALL = ["Wqkv", "Wo", "Wi"]
ALBERT_ALL = ["query", "key", "value", "attention.dense", "ffn", "ffn_output"]


def main():
    torch.set_num_threads(1)
    M.eager_attention_forward = FM.float64_softmax
    modern = json.load(open(MODERN))["cases"]
    families = json.load(open(FAMILIES))["cases"]
    cases = {
        "modern_qv": L.run("modern_qv", ModernBertForSequenceClassification, "tiny-modernbert-classifier",
                           modern["modern_classify"], "SEQ_CLS", 4, 8, ["Wqkv"], 15, types=False),
        "modern_all": L.run("modern_all", ModernBertForTokenClassification, "tiny-modernbert-ner", modern["modern_ner"],
                            "TOKEN_CLS", 2, 3, MODERN_ALL, 16, types=False),
        "albert_qv": L.run("albert_qv", AlbertForSequenceClassification, "tiny-albert-classifier",
                           families["albert_classify"], "SEQ_CLS", 4, 8, ["query", "value"], 17),
        "albert_all": L.run("albert_all", AlbertForTokenClassification, "tiny-albert-ner", families["albert_ner"],
                            "TOKEN_CLS", 2, 3, ALBERT_ALL, 18),
        "albert_proj": L.run("albert_proj", AlbertForSequenceClassification, "tiny-albert-classifier",
                             families["albert_classify"], "SEQ_CLS", 2, 3, ALBERT_ALL + ["embedding_hidden_mapping_in"],
                             19),
        "electra_proj": L.run("electra_proj", ElectraForTokenClassification, "tiny-electra-ner", families["electra_ner"],
                              "TOKEN_CLS", 4, 8, L.ALL + ["embeddings_project"], 20),
    }
    for name, c in cases.items():
        if name.endswith("_proj"):
            proj = {"albert_proj": "albert.encoder.embedding_hidden_mapping_in",
                    "electra_proj": "electra.embeddings_project"}[name]
            assert f"{proj}.lora_A.weight" in c["init"], f"{name}: no adapter on {proj}"
        if name.startswith("albert"):
            # One adapter per module of the shared layer, whatever the number of passes.
            layers = {n.split(".albert_layers.")[0] for n in c["init"] if ".albert_layers." in n}
            assert layers == {"albert.encoder.albert_layer_groups.0"}, layers
    L.write(OUT, cases, peft_version=True)


if __name__ == "__main__":
    main()
