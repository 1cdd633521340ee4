#!/usr/bin/env python3
"""Our LoRA adapters of NomicBERT and GTE loaded by peft: tests/golden/lora_peft_load.py's checks for the rotary
families, whose adapters name transformers' modules (`self_attn.q_proj`, `mlp.gate_proj`...) while their checkpoints
store those weights packed (`qkv_proj` / `Wqkv`, `up_gate_proj`; NomicBERT's `fc11`, `fc12`).

    BERTGPU_LORA_EXPORT=/tmp/lora-rotary cargo test --locked --test finetune_families lora
    /work/venv/bin/python tests/golden/lora_rotary_peft_load.py /tmp/lora-rotary

The same checks run on DeBERTa's case (`query_proj`, `value_proj`, rows of our fused q/k/v as well).

tests/finetune_families.rs writes DIR/<case>/ for each rotary case (and DeBERTa's) of its LoRA test (after 2 steps on the CPU):
adapter_config.json and adapter_model.safetensors (lora_peft::export_adapter), merged/ (lora_peft::merged through
rows::export_folder) and logits.json. For each, in float64:

  1. PeftModel.from_pretrained(base, DIR) loads every tensor of our adapter file (each peft parameter it names holds
     our values) and gives our logits;
  2. merge_and_unload() of that model saved by transformers (which packs q/k/v and up/gate back as the checkpoint
     stores them) equals our merged folder, tensor by tensor;
  3. from_pretrained(DIR/merged) gives our logits.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_peft_load import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1])
