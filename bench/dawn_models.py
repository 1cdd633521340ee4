#!/usr/bin/env python3
"""The models bench/dawn.mjs runs: all-MiniLM-L6-v2's shape and bert-base's, with seeded weights (speed depends on
the shapes alone), each as a folder both libraries read:

    python bench/dawn_models.py [OUT]      # default bench/models/dawn; OUT/minilm, OUT/base

Each folder: config.json, model.safetensors (bertgpu's f32; bench/dawn.mjs makes its q8_0 GGUF with exportModel)
and MiniLM's tokenizer files, and transformers.js's layout: onnx/model.onnx (fp32, bench/export_onnx.py's export)
and onnx/model_quantized.onnx (its q8: int8 per output channel). The weights are PyTorch's seeded initialisation
repeated with a period of 12288 values in every tensor, so that xz packs a folder into a few MB
(bench/real_gpu_pack.sh dawn: the GPU machine reaches no registry and may bring 64 MiB); a product of them costs
the GPU what any other weights would. Needs torch, transformers, onnx, onnxruntime (this machine's, not CI).
"""
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "bench/models/dawn")
TOKENIZER = ROOT / "models/all-MiniLM-L6-v2"
PERIOD = 12288  # a multiple of every hidden size here (384, 768, 1536, 3072) and of Q8_0's 32-value blocks
SHAPES = {
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}

for name, shape in SHAPES.items():
    folder = out / name
    if (folder / "onnx/model_quantized.onnx").exists():
        print(f"dawn_models: {folder} is there")
        continue
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, hidden_act="gelu", **shape)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            flat = p.view(-1)
            if flat.numel() > PERIOD:
                reps = -(-flat.numel() // PERIOD)
                flat.copy_(flat[:PERIOD].clone().repeat(reps)[: flat.numel()])
    model.save_pretrained(folder, safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
        (folder / f).write_bytes((TOKENIZER / f).read_bytes())
    # transformers.js's files beside ours, from the same weights (export_onnx.py copies the folder's other files,
    # so it writes elsewhere and only its onnx/ is kept).
    tmp = out / f"{name}-export"
    subprocess.run([sys.executable, str(ROOT / "bench/export_onnx.py"), str(folder), str(tmp)], check=True)
    (tmp / "onnx").rename(folder / "onnx")
    shutil.rmtree(tmp)
    print(f"dawn_models: {folder}: {shape}")
