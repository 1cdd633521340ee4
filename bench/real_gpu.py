"""PyTorch's side of the real-GPU run (bench/real_gpu.sh; BENCHMARKS.md, "A real GPU"). Needs torch and
transformers with CUDA; no network (the models are made here, with seeded random weights, in the shapes of the
checkpoints: speed depends only on the shapes).

    python bench/real_gpu.py models OUT TOKENIZER_DIR    # OUT/minilm (all-MiniLM-L6-v2's config), OUT/base (bert-base),
                                                         # OUT/deberta (DeBERTa-v3 at MiniLM's shape)
    python bench/real_gpu.py forward MODEL B T REPS      # embed's work in PyTorch CUDA f32: JSON line, median ms
    python bench/real_gpu.py train MODEL B T STEPS       # one AdamW step of BertForSequenceClassification, CUDA f32
    python bench/real_gpu.py compare MODEL TEXTS OURS    # cosine of our embeddings (JSON lines) with PyTorch's

Timings are f32 with TF32 off (PyTorch's default for matmuls), so they compare like with like: our kernels compute
in f32. Each is the median of REPS after one untimed warm-up, with `torch.cuda.synchronize()` around each."""
import json, shutil, statistics, sys, time
from pathlib import Path

import torch
from transformers import (AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel, DebertaV2Config,
                          DebertaV2Model)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only to try the script without a GPU
WORDS = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]


def make_models(out: Path, tok_dir: Path):
    shapes = {
        "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
        "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    }
    models = {name: lambda shape=shape: BertModel(BertConfig(vocab_size=30522, max_position_embeddings=512,
                                                             hidden_act="gelu", **shape), add_pooling_layer=False)
              for name, shape in shapes.items()}
    # DeBERTa-v3 at MiniLM's shape (bench/family_shapes.py's): no absolute positions, 256 buckets over 512 positions,
    # c2p + p2c. Against minilm: DeBERTa's forward ÷ BERT's of the same size, on the kernels calibrated here.
    shapes["deberta"] = shapes["minilm"]
    models["deberta"] = lambda: DebertaV2Model(DebertaV2Config(
        vocab_size=30522, max_position_embeddings=514, type_vocab_size=0, pad_token_id=0, relative_attention=True,
        position_buckets=256, max_relative_positions=512, norm_rel_ebd="layer_norm", share_att_key=True,
        pos_att_type=["p2c", "c2p"], position_biased_input=False, layer_norm_eps=1e-7,
        architectures=["DebertaV2Model"], **shapes["minilm"]))
    for name, shape in shapes.items():
        torch.manual_seed(0)
        models[name]().save_pretrained(out / name, safe_serialization=True)
        for f in TOKENIZER_FILES:
            if (tok_dir / f).exists():
                shutil.copy(tok_dir / f, out / name / f)
        print(f"made {out / name}: {shape}")


def texts(b: int, t: int):
    return [f"{i} " + " ".join([WORDS] * (t // 8 + 2)) for i in range(b)]


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps: int):
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), max(times)


def forward(model_dir: str, b: int, t: int, reps: int):
    """What `bertgpu bench` times: tokenize, forward, mean pool, normalise, read back."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False).to(DEV).eval()
    batch = texts(b, t)

    def run():
        enc = tok(batch, truncation=True, max_length=t, padding=True, return_tensors="pt").to(DEV)
        assert enc["input_ids"].shape == (b, t)
        with torch.inference_mode():
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"][..., None].float()
            e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        return e.cpu()

    med, lo, hi = timed(run, reps)
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "model": model_dir,
                      "batch": b, "seq": t, "reps": reps, "ms": round(med, 3), "min": round(lo, 3), "max": round(hi, 3)}))


def train(model_dir: str, b: int, t: int, steps: int):
    """The step examples/train_bench.rs times: dropout off, AdamW, no decay on biases/LayerNorm, clip at 1.0."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    enc = tok(texts(b, t), truncation=True, max_length=t, padding=True, return_tensors="pt").to(DEV)
    labels = torch.tensor([i % 4 for i in range(b)], device=DEV)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=4, hidden_dropout_prob=0.0,
                                                          attention_probs_dropout_prob=0.0).to(DEV).train()
    nd = lambda n: n.endswith("bias") or "LayerNorm.weight" in n
    opt = torch.optim.AdamW([
        {"params": [p for n, p in model.named_parameters() if not nd(n)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if nd(n)], "weight_decay": 0.0}], lr=2e-5)

    def step():
        opt.zero_grad()
        loss = model(**enc, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    med, lo, hi = timed(step, steps)
    print(json.dumps({"torch_train": model_dir, "batch": b, "seq": t, "steps": steps, "ms_per_step": round(med, 2)}))


def compare(model_dir: str, texts_file: str, ours_file: str):
    lines = [l for l in Path(texts_file).read_text().splitlines() if l.strip()]
    ours = [json.loads(l)["embedding"] for l in Path(ours_file).read_text().splitlines() if l.strip()]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False).to(DEV).eval().double()
    cos = []
    with torch.inference_mode():
        for line, mine in zip(lines, ours, strict=True):
            enc = tok(line, return_tensors="pt").to(DEV)
            h = model(**enc).last_hidden_state[0].mean(0)
            cos.append(torch.nn.functional.cosine_similarity(h, torch.tensor(mine, device=DEV, dtype=h.dtype), dim=0).item())
    print(json.dumps({"compare": ours_file, "sentences": len(cos), "min_cosine": min(cos),
                      "worst_1_minus_cos": max(1 - c for c in cos)}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "models":
        make_models(Path(args[0]), Path(args[1]))
    elif cmd == "forward":
        forward(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif cmd == "train":
        train(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif cmd == "compare":
        compare(*args)
    else:
        sys.exit(f"unknown command {cmd}")
