#!/usr/bin/env python3
"""PyTorch CPU embedding throughput, the twin of examples/cpu_bench.rs (same texts, same batch shape).

python bench/torch_cpu.py models/all-MiniLM-L6-v2 [batch] [seq] [iters] [threads]
Times forward + mean pooling + normalisation (tokenization excluded), prints one JSON line.
"""
import json
import sys
import time

import torch
from transformers import AutoModel, AutoTokenizer

TEXT = ("The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, and a "
        "sentence embedding model turns every one of these words into vectors that capture meaning. ")

path = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
batch, seq, iters, threads = (int(a) for a in (sys.argv[2:6] + ["8", "128", "20", "2"][len(sys.argv[2:6]):]))
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path).eval()
texts = [f"{i} {TEXT * (1 + seq // 16)}" for i in range(batch)]
enc = tok(texts, padding=True, truncation=True, max_length=seq, return_tensors="pt")
assert tuple(enc["input_ids"].shape) == (batch, seq)


def embed():
    with torch.inference_mode():
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, dim=1)


for _ in range(2):
    embed()
times = []
for _ in range(iters):
    t0 = time.perf_counter()
    embed()
    times.append(time.perf_counter() - t0)
times.sort()
median = times[len(times) // 2]
print(json.dumps({"impl": f"pytorch-{torch.__version__}", "threads": threads, "batch": batch, "seq": seq,
                  "iters": iters, "median_ms": round(median * 1e3, 2), "best_ms": round(times[0] * 1e3, 2),
                  "embeddings_per_s": round(batch / median, 1)}))
