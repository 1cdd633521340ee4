#!/usr/bin/env python3
"""Our LoRA adapters of ModernBERT, ALBERT and ELECTRA loaded by peft: tests/golden/lora_peft_load.py's checks for the
cases of tests/lora_modernbert_albert.rs, whose adapters sit on ModernBERT's packed modules whole (`attn.Wqkv`,
`mlp.Wi` in its `[input; gate]` order, ...), on ALBERT's one shared layer, and (albert_proj, electra_proj) on the
embeddings' projection too (`embedding_hidden_mapping_in`, `embeddings_project`).

    BERTGPU_LORA_EXPORT=/tmp/lora-more cargo test --locked --test lora_modernbert_albert on_the_cpu
    /work/venv/bin/python tests/golden/lora_modernbert_albert_peft_load.py /tmp/lora-more

For each DIR/<case> (after the golden's 5 AdamW steps on the CPU: adapter_config.json, adapter_model.safetensors,
merged/ and logits.json), in float64:

  1. PeftModel.from_pretrained(base, DIR) loads every tensor of our adapter file (each peft parameter it names holds
     our values) and gives our logits (a token task's at the real tokens: ModernBERT's padded queries whose window
     holds no real key are not transformers' there, and nothing reads them);
  2. merge_and_unload() of that model saved by transformers equals our merged folder, tensor by tensor;
  3. from_pretrained(DIR/merged) gives our logits.

ModernBERT runs with tests/golden/finetune_modernbert.py's `float64_softmax` (transformers' eager attention takes its
softmax in float32, where a fully masked row becomes NaN).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_modernbert as FM  # noqa: E402
import lora_peft_load  # noqa: E402
import transformers.models.modernbert.modeling_modernbert as M  # noqa: E402

if __name__ == "__main__":
    M.eager_attention_forward = FM.float64_softmax
    lora_peft_load.main(sys.argv[1], real_tokens_only=True)
