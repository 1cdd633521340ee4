"""PyTorch's time for the step `examples/train_bench.rs` times (BENCHMARKS.md, "Fine-tuning"): one AdamW step of
BertForSequenceClassification over every parameter, float32 on the CPU, dropout off (bertgpu trains without it),
gradients clipped at 1.0. Same texts, batch and length.

    python examples/torch_train_step.py models/all-MiniLM-L6-v2 [batch 16] [seq 64] [steps 5]

Prints one JSON line with the median ms per step (the first step is not counted)."""
import json, statistics, sys, time

import torch
from transformers import AutoTokenizer, BertForSequenceClassification

TEXT = ("The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, and a "
        "sentence embedding model turns every one of these words into vectors that capture meaning. ")
model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
b, seq, steps = (int(sys.argv[i]) if len(sys.argv) > i else d for i, d in ((2, 16), (3, 64), (4, 5)))
tok = AutoTokenizer.from_pretrained(model_dir)
texts = [f"{i} {TEXT * (1 + seq // 16)}" for i in range(b)]
enc = tok(texts, truncation=True, max_length=seq, padding=True, return_tensors="pt")
assert enc["input_ids"].shape == (b, seq)
labels = torch.tensor([i % 4 for i in range(b)])
torch.manual_seed(0)
model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=4, hidden_dropout_prob=0.0,
                                                      attention_probs_dropout_prob=0.0)
model.train()
no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm.weight" in n]
decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm.weight" in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=2e-5)
times = []
for s in range(steps + 1):
    t0 = time.perf_counter()
    loss = model(**enc, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if s > 0:
        times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"backend": f"pytorch {torch.__version__} cpu ({torch.get_num_threads()} threads)", "batch": b,
                  "seq": seq, "steps": steps, "ms_per_step": round(statistics.median(times), 1)}))
