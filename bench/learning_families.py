"""Does training learn as PyTorch's does, beyond BERT itself? (BENCHMARKS.md, "Learning beyond BERT")

Two checks, each bertgpu's CLI against the same recipe in PyTorch, seeds 0..S-1, means compared (shuffles and new
heads' initialisations differ between the two implementations; only the recipe is shared):

  classify FAMILY  sequence classification on tests/data/fortunes-large (8 topics of Debian's quotations, 440 train /
                   440 test), the held-out accuracy. FAMILY:
                   - bert: all-MiniLM-L6-v2 as it is (BertForSequenceClassification);
                   - xlm-roberta: the same weights as an XLM-R checkpoint (XLMRobertaForSequenceClassification: the
                     position table shifted one row for `padding_idx`, one token type, RoBERTa's classification head),
                     so that the XLM-R path (its positions, its head) is what trains;
                   - modernbert: a ModernBERT of 4 layers, 256 wide, seeded random weights (no pre-trained ModernBERT
                     can be had here), 10 epochs: learning from scratch, GeGLU, pre-norm, local and global layers.
  embed            all-MiniLM-L6-v2 trained on pairs (a quotation's first sentence, the rest of it) from
                   fortunes-large's train split with sentence-transformers' MultipleNegativesRankingLoss (scale 20)
                   against `bertgpu fine-tune --task embed`; the score is in-batch retrieval on the test split's
                   pairs: the share of first sentences whose own rest is the nearest (cosine) of 64.

Recipe on both sides: AdamW (weight decay 0.01, none on biases and norm weights), linear warm-up over 10% of the
steps then linear decay, gradients clipped at 1.0, batch 16, dropout off.

    cargo build --release --locked --bin bertgpu
    python bench/learning_families.py classify xlm-roberta [--epochs 3] [--lr 2e-4] [--seeds 3]
    python bench/learning_families.py embed [--epochs 1] [--lr 5e-5] [--seeds 3]

Needs torch, transformers and sentence-transformers. bertgpu runs on the CPU (BERTGPU_BIN: another binary); PyTorch
on TORCH_THREADS threads (default 2)."""
import argparse, json, os, re, shutil, statistics, sys, tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The recipe's loop, the CLI runner and torch's threads: bench/finetune_accuracy.py's.
from finetune_accuracy import BIN, ROOT, read, run, train  # noqa: E402
from finetune_accuracy import MODEL as MINILM  # noqa: E402

DATA = os.path.join(ROOT, "tests/data/fortunes-large")
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]
RETRIEVAL_POOL = 64


def copy_tokenizer(dst):
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(MINILM, f), dst)


def make_xlm_roberta(dst):
    """all-MiniLM-L6-v2's encoder as a bare XLMRobertaModel checkpoint (pad 0, so real positions start at row 1)."""
    cfg = json.load(open(os.path.join(MINILM, "config.json")))
    sd = load_file(os.path.join(MINILM, "model.safetensors"))
    out = {}
    for k, v in sd.items():
        k = k[len("bert."):] if k.startswith("bert.") else k
        if k.startswith("pooler."):
            continue  # RoBERTa's classification head has its own dense on <s>
        if k == "embeddings.position_embeddings.weight":
            v = torch.cat([torch.zeros_like(v[:1]), v])  # row padding_idx = 0, then BERT's rows
        if k == "embeddings.token_type_embeddings.weight":
            v = v[:1]
        out["roberta." + k] = v.contiguous()
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    keep = ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
            "layer_norm_eps", "vocab_size", "initializer_range"]
    xcfg = {k: cfg[k] for k in keep}
    xcfg.update(model_type="xlm-roberta", architectures=["XLMRobertaModel"], pad_token_id=0, bos_token_id=101,
                eos_token_id=102, type_vocab_size=1, max_position_embeddings=cfg["max_position_embeddings"] + 1,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    json.dump(xcfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    copy_tokenizer(dst)


def make_modernbert(dst):
    """A seeded random ModernBERT (4 layers, 256 wide, a window of 32 on 3 layers of 4) with MiniLM's vocabulary."""
    from transformers import ModernBertConfig, ModernBertModel
    torch.manual_seed(1234)
    cfg = ModernBertConfig(vocab_size=30522, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                           num_attention_heads=4, global_attn_every_n_layers=4, local_attention=32,
                           max_position_embeddings=512, pad_token_id=0, bos_token_id=101, eos_token_id=102,
                           cls_token_id=101, sep_token_id=102, attention_dropout=0.0, mlp_dropout=0.0,
                           embedding_dropout=0.0, classifier_dropout=0.0)
    ModernBertModel(cfg).save_pretrained(dst)
    copy_tokenizer(dst)


FAMILIES = {"bert": None, "xlm-roberta": make_xlm_roberta, "modernbert": make_modernbert}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def torch_classify(model_dir, family, rows, test, epochs, lr, seed):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    labels = list(dict.fromkeys(e["label"] for e in rows))
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    extra = {} if family == "modernbert" else NO_DROPOUT
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=len(labels), **extra)

    def loss_of(chunk):
        enc = tok([e["text"] for e in chunk], truncation=True, max_length=128, padding=True, return_tensors="pt")
        return model(**enc, labels=torch.tensor([labels.index(e["label"]) for e in chunk])).loss

    train(model, rows, epochs, lr, seed, loss_of)
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(test), 64):
            chunk = test[i:i + 64]
            enc = tok([e["text"] for e in chunk], truncation=True, max_length=128, padding=True, return_tensors="pt")
            pred = model(**enc).logits.argmax(-1).tolist()
            right += sum(labels[p] == e["label"] for p, e in zip(pred, chunk))
    return right / len(test)


def ours_classify(model_dir, train_path, test, epochs, lr, seed):
    with tempfile.TemporaryDirectory() as d:
        run([BIN, "fine-tune", "--task", "classify", "--model", model_dir, "--data", train_path, "--out", d,
             "--epochs", str(epochs), "--lr", str(lr), "--batch-size", "16", "--warmup", "0.1", "--weight-decay", "0.01",
             "--validation-split", "0", "--seed", str(seed), "--device", "cpu", "--no-dropout", "--max-length", "128"])
        inp = "".join(json.dumps({"text": e["text"]}) + "\n" for e in test)
        out = run([BIN, "classify", "--model", d, "--device", "cpu"], input=inp.encode())
    preds = [json.loads(l)[0]["label"] for l in out.stdout.decode().splitlines()]
    assert len(preds) == len(test)
    return sum(p == e["label"] for p, e in zip(preds, test)) / len(test)


def pairs(rows):
    """(first sentence, the rest) of each quotation with at least two sentences of 15+ characters."""
    out = []
    for e in rows:
        parts = re.split(r"(?<=[.!?])\s+", e["text"], maxsplit=1)
        if len(parts) == 2 and len(parts[0]) >= 15 and len(parts[1]) >= 15:
            out.append({"anchor": parts[0], "positive": parts[1]})
    return out


def retrieval(a, p):
    """Share of anchors whose own positive is the most similar in each pool of RETRIEVAL_POOL pairs."""
    right = n = 0
    for i in range(0, len(a) - RETRIEVAL_POOL + 1, RETRIEVAL_POOL):
        A, P = a[i:i + RETRIEVAL_POOL], p[i:i + RETRIEVAL_POOL]
        A = A / np.linalg.norm(A, axis=1, keepdims=True)
        P = P / np.linalg.norm(P, axis=1, keepdims=True)
        right += int((np.argmax(A @ P.T, axis=1) == np.arange(len(A))).sum())
        n += len(A)
    return right / n


def torch_embed(rows, test, epochs, lr, seed):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    torch.manual_seed(seed)
    model = SentenceTransformer(MINILM, device="cpu")
    model.max_seq_length = 128
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    for m in model.modules():  # dropout off, as on our side
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    train(model, rows, epochs, lr, seed,
          lambda chunk: loss_fn([model.preprocess([e[k] for e in chunk]) for k in ("anchor", "positive")], None))
    model.eval()
    enc = lambda k: model.encode([e[k] for e in test], batch_size=64, convert_to_numpy=True)
    return retrieval(enc("anchor"), enc("positive"))


def bertgpu_vectors(model_dir, texts):
    inp = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    out = run([BIN, "embed", "--model", model_dir, "--device", "cpu"], input=inp.encode())
    return np.array([json.loads(l)["embedding"] for l in out.stdout.decode().splitlines()], dtype=np.float64)


def ours_embed(train_path, test, epochs, lr, seed):
    with tempfile.TemporaryDirectory() as d:
        if epochs:
            run([BIN, "fine-tune", "--task", "embed", "--model", MINILM, "--data", train_path, "--out", d,
                 "--epochs", str(epochs), "--lr", str(lr), "--batch-size", "16", "--warmup", "0.1",
                 "--weight-decay", "0.01", "--validation-split", "0", "--seed", str(seed), "--device", "cpu",
                 "--no-dropout", "--max-length", "128"])
        model = d if epochs else MINILM
        return retrieval(bertgpu_vectors(model, [e["anchor"] for e in test]),
                         bertgpu_vectors(model, [e["positive"] for e in test]))


def table(rows, seeds):
    print("| run | per seed | mean |")
    print("|---|---|---|")
    for name, fn in rows:
        accs = [fn(s) for s in range(seeds)]
        print(f"| {name} | {', '.join(f'{a:.3f}' for a in accs)} | {statistics.mean(accs):.3f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["classify", "embed"])
    ap.add_argument("family", nargs="?", default="bert", choices=list(FAMILIES))
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    train_path, test_path = os.path.join(DATA, "train.jsonl"), os.path.join(DATA, "test.jsonl")
    with tempfile.TemporaryDirectory() as work:
        if a.check == "classify":
            epochs = a.epochs or (10 if a.family == "modernbert" else 3)
            lr = a.lr or (1e-3 if a.family == "modernbert" else 2e-4)
            model = MINILM
            if FAMILIES[a.family]:
                model = os.path.join(work, a.family)
                FAMILIES[a.family](model)
            train, test = read(train_path), read(test_path)
            print(f"{a.family} on fortunes-large ({len(train)} train / {len(test)} test), {epochs} epochs, lr {lr}, "
                  f"batch 16, seeds 0..{a.seeds - 1}: held-out accuracy")
            table([("PyTorch", lambda s: torch_classify(model, a.family, train, test, epochs, lr, s)),
                   ("bertgpu", lambda s: ours_classify(model, train_path, test, epochs, lr, s))], a.seeds)
        else:
            epochs, lr = a.epochs or 1, a.lr or 5e-5
            train, test = pairs(read(train_path)), pairs(read(test_path))
            path = os.path.join(work, "pairs.jsonl")
            with open(path, "w") as f:
                f.writelines(json.dumps(e) + "\n" for e in train)
            print(f"all-MiniLM-L6-v2, pairs from fortunes-large ({len(train)} train / {len(test)} test), {epochs} "
                  f"epochs, lr {lr}, batch 16, seeds 0..{a.seeds - 1}: in-batch retrieval among {RETRIEVAL_POOL}")
            print(f"before training (bertgpu's vectors): {ours_embed(path, test, 0, lr, 0):.3f}")
            table([("sentence-transformers, MultipleNegativesRankingLoss", lambda s: torch_embed(train, test, epochs, lr, s)),
                   ("bertgpu fine-tune --task embed", lambda s: ours_embed(path, test, epochs, lr, s))], a.seeds)


if __name__ == "__main__":
    main()
