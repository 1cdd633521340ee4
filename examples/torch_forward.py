"""PyTorch reference timing beside `bertgpu bench` (BENCHMARKS.md): python examples/torch_forward.py MODEL_DIR REPS.
all-MiniLM-L6-v2 BertModel forward + mean pool, batch 8 x 128, fp32 on the CPU. Prints the median ms."""
import sys, time, statistics
import torch
from transformers import BertModel

model_dir, reps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = BertModel.from_pretrained(model_dir).eval()
ids = torch.randint(1000, 29000, (8, 128))
ids[:, 0], ids[:, -1] = 101, 102
mask = torch.ones_like(ids)
times = []
with torch.inference_mode():
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        dt = (time.perf_counter() - t0) * 1e3
        if rep > 0:
            times.append(dt)
print(statistics.median(times))
