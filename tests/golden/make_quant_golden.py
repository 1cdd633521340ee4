"""Golden Q8_0/Q4_0 bytes from llama.cpp's own Python quantizers (the `gguf` package, gguf-py).

Run: .venv/bin/python tests/golden/make_quant_golden.py   (needs `pip install gguf==0.19.0 numpy`)
Writes tests/golden/quant_blocks.json: the f32 inputs (as bit patterns, so nothing is lost in decimal) and the
encoded bytes (hex) that `src/weights/quant.rs` must reproduce bit for bit.
"""
import json
import pathlib

import numpy as np
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

rng = np.random.default_rng(20261122)
blocks = [
    rng.standard_normal(32) * 0.05,            # typical weights
    rng.standard_normal(32) * 3.0,
    rng.uniform(-1, 1, 32) * 1e-6,            # scale below f16's normal range
    np.zeros(32),                              # all zero: d = 0
    np.linspace(-8, 7.5, 32),                  # exact halves relative to the step
    np.concatenate([[2.0, -2.0], rng.uniform(-1, 1, 30)]),  # tie on magnitude: the first wins (Q4_0 sign)
    np.concatenate([[-2.0, 2.0], rng.uniform(-1, 1, 30)]),
    rng.standard_normal(32) * 60000.0,         # near f16's max
]
x = np.concatenate(blocks).astype(np.float32)
out = {
    "source": "gguf-py 0.19.0 gguf.quants.quantize (numpy port of ggml's quantize_row_*_ref)",
    "input_f32_bits": [int(v) for v in x.view(np.uint32)],
    "q8_0_hex": quantize(x.reshape(1, -1), GGMLQuantizationType.Q8_0).tobytes().hex(),
    "q4_0_hex": quantize(x.reshape(1, -1), GGMLQuantizationType.Q4_0).tobytes().hex(),
}
path = pathlib.Path(__file__).with_name("quant_blocks.json")
path.write_text(json.dumps(out, indent=0) + "\n")
print(f"wrote {path} ({path.stat().st_size} bytes)")
