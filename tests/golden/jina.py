#!/usr/bin/env python3
"""Goldens for JinaBERT v2 (jina-embeddings-v2-small/base-en, jina-reranker-v1), from a float64 PyTorch transcription
of its authors' modeling code: jinaai/jina-bert-implementation `modeling_bert.py` (the hub's remote code, which
config.json's `auto_map` names), as text-embeddings-inference copies it
(backends/python/server/text_embeddings_server/models/jinaBert_model.py: `JinaBertEncoder.rebuild_alibi_tensor`) and
as the Mosaic BERT code it comes from writes the gated block (`BertGatedLinearUnitMLP`). transformers has no JinaBERT
class and the hub is not reachable here, so the modules below restate that code plainly (torch.nn modules, an eager
softmax), in float64 over the float32 weights the checkpoints store:

- embeddings: word + token type, LayerNorm (no position table with `position_embedding_type: "alibi"`);
- self-attention: BERT's q/k/v (biases), scores / sqrt(d) + the padding mask + ALiBi, softmax, output dense +
  LayerNorm(x + residual); ALiBi's bias of head h is `slopes[h] * -1 * |j - i|`, the slopes from the ALiBi paper's
  `get_slopes` in Python floats, made a float32 tensor (`torch.Tensor(...)`) as the authors do;
- `JinaBertGLUMLP`: `gated_layers` Linear(H, 2I, bias=False), `act(out[..., :I]) * out[..., I:]` (act `nn.GELU()`
  for `feed_forward_type: "geglu"`, `nn.ReLU()` for `"reglu"`), `wo` Linear(I, H), `layernorm(h + residual)`;
- heads as BERT's: the pooler (dense + tanh on [CLS]) and `classifier` (JinaBertForSequenceClassification),
  `cls.predictions` (transform dense + gelu + LayerNorm, decoder tied to the word embeddings, bias) for
  JinaBertForMaskedLM. The fill-mask and text-classification pipelines' outputs are computed as transformers'
  pipelines compute them (fill_mask.py `postprocess`; softmax over the labels, best first).

Run from the repository root (needs torch, transformers 5.x for the tokenizer only, safetensors):

    /path/to/venv/bin/python tests/golden/jina.py

Writes, each with tests/models/tiny-classifier's WordPiece tokenizer and a config.json in the hub's keys
(`model_type: "bert"`, `position_embedding_type: "alibi"`, `feed_forward_type`, `auto_map`):
  tests/models/tiny-jina-model/        JinaBertModel (with its pooler): hidden 32, 4 heads (a power of two),
                                       feed-forward 64, geglu
  tests/models/tiny-jina-mlm/          JinaBertForMaskedLM: hidden 36, 6 heads (the slopes' other branch; head
                                       dim 6), feed-forward 48, geglu
  tests/models/tiny-jina-classifier/   JinaBertForSequenceClassification (jina-reranker-v1's class), as the masked
                                       LM's sizes but reglu, 3 labels
All have 2 layers and 64 positions.
  tests/golden/jina.json               per model: mean and [CLS] embeddings of a padded batch (3 to 48 tokens),
                                       fill-mask logits and predictions, classifier logits and pipeline; and how far
                                       the mean embeddings move without ALiBi and with the gated block's halves
                                       swapped (the tests' tolerances are far below both)
"""
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "jina.json")
TOKENIZER = os.path.join(H.MODELS, "tiny-classifier")
EMBED_TEXTS = [c["text"] for c in H.CLASSIFY_INPUTS] + H.NER_TEXTS + [H.QA_INPUTS[2]["context"][:230]]
IDS3 = {0: "negative", 1: "neutral", 2: "positive"}
AUTO_MAP = {
    "AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig",
    "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel",
    "AutoModelForMaskedLM": "jinaai/jina-bert-implementation--modeling_bert.JinaBertForMaskedLM",
    "AutoModelForSequenceClassification": "jinaai/jina-bert-implementation--modeling_bert.JinaBertForSequenceClassification",
}
DT = torch.float64


def config(vocab_size, heads, hidden, inter, feed_forward_type, arch, **kw):
    return dict(architectures=[arch], attention_probs_dropout_prob=0.0, attn_implementation="torch", auto_map=AUTO_MAP,
                classifier_dropout=None, emb_pooler="mean", feed_forward_type=feed_forward_type, hidden_act="gelu",
                hidden_dropout_prob=0.0, hidden_size=hidden, initializer_range=0.3, intermediate_size=inter,
                layer_norm_eps=1e-12, max_position_embeddings=H.MAX_POSITIONS, model_max_length=H.MAX_POSITIONS,
                model_type="bert", num_attention_heads=heads, num_hidden_layers=2, pad_token_id=0,
                position_embedding_type="alibi", type_vocab_size=2, vocab_size=vocab_size, **kw)


def alibi_slopes(n):
    """The ALiBi paper's `get_slopes`, in Python floats (jina-bert-implementation's `_get_alibi_head_slopes`)."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi(heads, size, sign=1.0):
    """`rebuild_alibi_tensor`: (1, heads, T, T), `slopes * -1` (float32) times the integer distance |j - i|."""
    pos = torch.arange(size)
    rel = torch.abs(pos[None, :] - pos[:, None]).unsqueeze(0).expand(heads, -1, -1)
    slopes = torch.Tensor(alibi_slopes(heads)) * -1 * sign
    return (slopes.unsqueeze(1).unsqueeze(1) * rel).unsqueeze(0)


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c["pad_token_id"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, input_ids, token_type_ids):
        return self.LayerNorm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids))


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.heads, self.d = c["num_attention_heads"], h // c["num_attention_heads"]
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d).permute(0, 2, 1, 3)

    def forward(self, x, mask, bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        probs = torch.softmax(scores + mask + bias, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.shape[0], ctx.shape[1], -1)


class SelfOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttention(c)
        self.output = SelfOutput(c)

    def forward(self, x, mask, bias):
        return self.output(self.self(x, mask, bias), x)


class GLUMLP(nn.Module):
    """`JinaBertGLUMLP`: the FIRST half of `gated_layers` goes through the activation."""
    swapped = False  # the test of the golden's own sensitivity: the halves the other way round

    def __init__(self, c):
        super().__init__()
        self.i = c["intermediate_size"]
        self.gated_layers = nn.Linear(c["hidden_size"], 2 * self.i, bias=False)
        self.act = {"geglu": nn.GELU(), "reglu": nn.ReLU()}[c["feed_forward_type"]]
        self.wo = nn.Linear(self.i, c["hidden_size"])
        self.layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x):
        out = self.gated_layers(x)
        gated, non_gated = out[..., : self.i], out[..., self.i:]
        if GLUMLP.swapped:
            gated, non_gated = non_gated, gated
        return self.layernorm(self.wo(self.act(gated) * non_gated) + x)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.mlp = GLUMLP(c)

    def forward(self, x, mask, bias):
        return self.mlp(self.attention(x, mask, bias))


class Encoder(nn.Module):
    alibi_sign = 1.0  # 0.0: without ALiBi (the golden's own sensitivity)

    def __init__(self, c):
        super().__init__()
        self.heads = c["num_attention_heads"]
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, x, mask):
        bias = alibi(self.heads, x.shape[1], Encoder.alibi_sign).to(x.dtype)
        for layer in self.layer:
            x = layer(x, mask, bias)
        return x


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, hidden):
        return torch.tanh(self.dense(hidden[:, 0]))


class JinaBertModel(nn.Module):
    def __init__(self, c, pooler=True):
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)
        self.pooler = Pooler(c) if pooler else None

    def forward(self, input_ids, token_type_ids, attention_mask):
        # get_extended_attention_mask: 0 for real keys, the dtype's lowest for padding.
        mask = (1.0 - attention_mask[:, None, None, :].to(DT)) * torch.finfo(DT).min
        hidden = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
        return hidden, (self.pooler(hidden) if self.pooler is not None else None)


class Transform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x):
        return self.LayerNorm(nn.functional.gelu(self.dense(x)))


class Predictions(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transform = Transform(c)
        self.bias = nn.Parameter(torch.zeros(c["vocab_size"]))


class MLMHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.predictions = Predictions(c)


class JinaBertForMaskedLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = JinaBertModel(c, pooler=False)
        self.cls = MLMHead(c)

    def forward(self, **enc):
        hidden, _ = self.bert(**enc)
        p = self.cls.predictions
        return p.transform(hidden) @ self.bert.embeddings.word_embeddings.weight.T + p.bias  # decoder tied


class JinaBertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = JinaBertModel(c)
        self.classifier = nn.Linear(c["hidden_size"], len(c["id2label"]))

    def forward(self, **enc):
        _, pooled = self.bert(**enc)
        return self.classifier(pooled)


def build(cls, c, seed, **kw):
    """Seeded normal weights (std initializer_range), every bias and norm moved off 0/1 so that dropping one shows;
    rounded to float32 (what the checkpoint stores) and then computed in float64."""
    torch.manual_seed(seed)
    m = cls(c, **kw)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layernorm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(c["initializer_range"] * torch.randn(p.shape))
            p.copy_(p.float())
    return m.to(DT).eval()


def save(m, c, name, prefix=""):
    d = os.path.join(H.MODELS, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), os.path.join(d, f))
    sd = {prefix + k: v.to(torch.float32).contiguous() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    assert size < 200_000, f"{name}: {size} bytes is too big to commit"
    print(f"{name}: {sorted(sd)}", file=sys.stderr)


def encode(tok, texts, pairs=None):
    e = tok(texts, pairs, padding=True, return_tensors="pt")
    return {"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"], "attention_mask": e["attention_mask"]}


def embeddings(bert, tok):
    enc = encode(tok, EMBED_TEXTS)
    with torch.no_grad():
        hidden, _ = bert(**enc)
    mask = enc["attention_mask"].unsqueeze(-1).to(DT)
    mean = (hidden * mask).sum(1) / mask.sum(1)
    return [{"text": t, "input_ids": enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist(), "mean": H.fl(v),
             "cls": H.fl(hidden[i, 0])} for i, (t, v) in enumerate(zip(EMBED_TEXTS, mean))]


def moved(bert, tok, want, what):
    """How far the mean embeddings move with `what` broken (the tests must see far less than this)."""
    got = embeddings(bert, tok)
    return max(abs(a - b) for x, y in zip(want, got) for a, b in zip(x["mean"], y["mean"]))


def sensitivity(bert, tok, want):
    Encoder.alibi_sign = 0.0
    no_alibi = moved(bert, tok, want, "alibi")
    Encoder.alibi_sign = 1.0
    GLUMLP.swapped = True
    swapped = moved(bert, tok, want, "halves")
    GLUMLP.swapped = False
    return {"without_alibi_max_diff": no_alibi, "swapped_halves_max_diff": swapped}


def fill_mask(m, tok):
    rows = []
    for text in H.FILL_MASK_TINY:
        enc = encode(tok, [text])
        with torch.no_grad():
            logits = m(**enc)[0]
        ids = enc["input_ids"][0]
        mask_rows = (ids == tok.mask_token_id).nonzero().reshape(-1).tolist()
        single = len(mask_rows) == 1
        preds = []
        for r in mask_rows:
            values, tokens = logits[r].softmax(-1).topk(5)
            row = []
            for v, p in zip(values.tolist(), tokens.tolist()):
                t = ids.numpy().copy()
                t[r] = p
                t = t[t != tok.pad_token_id]
                row.append({"score": v, "token": p, "token_str": tok.decode([p]),
                            "sequence": tok.decode(t, skip_special_tokens=single)})
            preds.append(row)
        rows.append({"text": text, "input_ids": ids.tolist(), "mask_rows": mask_rows,
                     "mask_logits": [H.fl(logits[r]) for r in mask_rows], "predictions": preds,
                     "min_score_gap": min(H.min_gap([p["score"] for p in row]) for row in preds)})
    return rows


def classify(m, tok, c):
    rows = []
    for inp in H.CLASSIFY_INPUTS:
        enc = encode(tok, [inp["text"]], [inp["text_pair"]] if "text_pair" in inp else None)
        with torch.no_grad():
            logits = m(**enc)[0]
        scores = logits.softmax(-1)
        order = scores.argsort(descending=True).tolist()
        pipe = [{"label": c["id2label"][str(i)], "score": float(scores[i])} for i in order]
        rows.append({**inp, "input_ids": enc["input_ids"][0].tolist(), "token_type_ids": enc["token_type_ids"][0].tolist(),
                     "logits": H.fl(logits), "pipeline": pipe, "min_score_gap": H.min_gap([p["score"] for p in pipe])})
    return rows


def main():
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    V = len(tok)
    golden = {"tolerance_note": "float64 outputs of a transcription of jinaai/jina-bert-implementation over the "
                                "float32 checkpoints; compare with the tolerances named in tests/jina.rs"}

    c = config(V, 4, 32, 64, "geglu", "JinaBertModel")
    m = build(JinaBertModel, c, 81)
    save(m, c, "tiny-jina-model")
    g = {"heads": 4, "slopes": alibi_slopes(4), "embeddings": embeddings(m, tok)}
    g.update(sensitivity(m, tok, g["embeddings"]))
    golden["model"] = g

    c = config(V, 6, 36, 48, "geglu", "JinaBertForMaskedLM")
    m = build(JinaBertForMaskedLM, c, 82)
    save(m, c, "tiny-jina-mlm")
    g = {"heads": 6, "slopes": alibi_slopes(6), "embeddings": embeddings(m.bert, tok), "fill_mask": fill_mask(m, tok)}
    g.update(sensitivity(m.bert, tok, g["embeddings"]))
    golden["mlm"] = g

    c = config(V, 6, 36, 48, "reglu", "JinaBertForSequenceClassification", id2label={str(k): v for k, v in IDS3.items()},
               label2id={v: k for k, v in IDS3.items()})
    m = build(JinaBertForSequenceClassification, c, 83)
    save(m, c, "tiny-jina-classifier", prefix="")
    golden["classifier"] = {"heads": 6, "embeddings": embeddings(m.bert, tok), "classifier": classify(m, tok, c)}

    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes", file=sys.stderr)
    for k in ("model", "mlm"):
        print(k, "without ALiBi the mean embeddings move by", golden[k]["without_alibi_max_diff"],
              "; with the halves swapped by", golden[k]["swapped_halves_max_diff"], file=sys.stderr)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in golden["mlm"]["fill_mask"]), file=sys.stderr)
    print("classifier min score gap", min(e["min_score_gap"] for e in golden["classifier"]["classifier"]), file=sys.stderr)


if __name__ == "__main__":
    main()
