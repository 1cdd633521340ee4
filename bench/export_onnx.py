#!/usr/bin/env python3
"""The ONNX model transformers.js runs in bench/browser.mjs, made from the same checkpoint bertgpu loads.

python bench/export_onnx.py [models/all-MiniLM-L6-v2] [bench/models/all-MiniLM-L6-v2]
python bench/export_onnx.py bench/models/all-mpnet-base-v2      (the output folder is the checkpoint's own)

Writes the layout transformers.js expects of a local model: config.json, tokenizer.json, tokenizer_config.json,
onnx/model.onnx (fp32: torch.onnx.export of the checkpoint's AutoModel (BertModel, MPNetModel) in eval() mode,
TorchScript exporter, dynamic batch and length; the inputs the tokenizer makes: MPNet has no token_type_ids) and onnx/model_quantized.onnx (its `dtype: "q8"`: onnxruntime's dynamic quantization, int8 weights per
output channel, as the Hugging Face hub's q8 exports). Checks the fp32 export against PyTorch before writing it.
Needs torch, transformers, onnx, onnxruntime (session only; CI never runs the benchmark).
"""
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from transformers import AutoModel, AutoTokenizer

src = Path(sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2")
# Without a second argument: bench/models/all-MiniLM-L6-v2 for the default, else the checkpoint's own folder.
out = Path(sys.argv[2] if len(sys.argv) > 2 else "bench/models/all-MiniLM-L6-v2" if len(sys.argv) == 1 else src)
(out / "onnx").mkdir(parents=True, exist_ok=True)

# eval(): no dropout in the graph; eager attention: the sdpa path traces its mask with the example's shapes
model = AutoModel.from_pretrained(src, attn_implementation="eager").eval()
tok = AutoTokenizer.from_pretrained(src)
enc = tok(["a first sentence", "and a second, longer sentence to pad against"], padding=True, return_tensors="pt")
# The tokenizer's inputs, in its order (transformers.js feeds a session the inputs its graph names).
names = [n for n in ["input_ids", "attention_mask", "token_type_ids"] if n in tok.model_input_names]
dims = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
dims["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
fp32 = out / "onnx" / "model.onnx"


class Wrapped(torch.nn.Module):
    """Positional inputs in the order of `names` (BertModel.forward's own order differs between versions)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, *inputs):
        return self.bert(**dict(zip(names, inputs)), return_dict=True).last_hidden_state


# The wrapper in eval() too: the exporter restores the module's mode after tracing, recursively.
with torch.no_grad():
    want = model(**enc).last_hidden_state.numpy()
    torch.onnx.export(Wrapped(model).eval(), tuple(enc[n] for n in names), str(fp32), input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes=dims, opset_version=17, dynamo=False)
got = ort.InferenceSession(str(fp32)).run(["last_hidden_state"], {n: enc[n].numpy() for n in names})[0]
err = float(np.abs(got - want).max())
assert err < 1e-4, f"ONNX export differs from PyTorch by {err}"
quantize_dynamic(str(fp32), str(out / "onnx" / "model_quantized.onnx"), per_channel=True, weight_type=QuantType.QInt8)
for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
    # Not onto itself, where the output folder is the checkpoint's.
    if (src / f).exists() and not ((out / f).exists() and (out / f).samefile(src / f)):
        shutil.copy(src / f, out / f)
sizes = {p.name: p.stat().st_size for p in (out / "onnx").iterdir()}
print(f"export_onnx: {out} (max |onnx - torch| {err:.2e}); {sizes}")
