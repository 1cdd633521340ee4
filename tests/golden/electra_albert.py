#!/usr/bin/env python3
"""Goldens for ELECTRA and ALBERT, from PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's WordPiece vocabulary, inputs, helpers and
reference QA decoding, and tokens.py's tricky strings; needs torch, transformers 5.x, tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/electra_albert.py

ELECTRA (`modeling_electra.py`) is BERT's post-LN encoder under `electra.`, with embeddings of `embedding_size` E
and, when E differs from the hidden size H, `electra.embeddings_project` (E -> H) after their LayerNorm. Its heads:
the discriminator (`discriminator_predictions.dense` + hidden_act + `dense_prediction`: one "replaced" logit per
token), the generator's masked LM (`generator_predictions` H -> E + exact GELU + LayerNorm over E, then
`generator_lm_head` tied to the word embeddings), the sequence classifier (`classifier.dense` + exact GELU on the
first token, `classifier.out_proj`), token classification and QA. It uses BERT's WordPiece tokenizer: the tiny one
of heads.py, saved here as an ElectraTokenizer folder.

ALBERT (`modeling_albert.py`): factorised embeddings (E), `albert.encoder.embedding_hidden_mapping_in` (E -> H),
then ONE post-LN layer (`albert_layer_groups.0.albert_layers.0`) applied num_hidden_layers times. Its heads: the
masked LM (`predictions.dense` H -> E, hidden_act, LayerNorm over E, decoder tied to the word embeddings), the
pooler (`albert.pooler`, dense + tanh) and `classifier`, token classification and QA. Its tokenizer is a
SentencePiece Unigram model, trained here with the `tokenizers` library on the fortunes of tests/data and the
golden texts, and saved by transformers' AlbertTokenizer (lowercase, NFKD + accents stripped, `[CLS] A [SEP] B
[SEP]` with token types 0 and 1; `<pad> <unk> [CLS] [SEP] [MASK]` at ids 0..4 as albert-base-v2).

transformers 5.x's AlbertTokenizer leaves `token_type_ids` out of its output (its `model_input_names`, issue
huggingface/transformers#48128), so that a pair reaches the model with every segment id 0, unlike 4.x, the
tokenizer's own template and the way every ALBERT was trained and fine-tuned. The goldens use the segment ids (the
tokenizer's `model_input_names` restored to 4.x's), as bertgpu does.

The models are seeded random, hidden 32, 4 heads, feed-forward 64, 64 positions, written to:
  tests/models/tiny-electra-discriminator/  ElectraForPreTraining, E 16 (so embeddings_project), 2 layers,
                                            hidden_act gelu_new (the discriminator head's act follows it)
  tests/models/tiny-electra-generator/      ElectraForMaskedLM, E 16, hidden_act gelu_new (the generator head's
                                            GELU is the exact one whatever hidden_act says)
  tests/models/tiny-electra-classifier/     ElectraForSequenceClassification, 3 labels, hidden_act gelu_new (the
                                            head's GELU is exact)
  tests/models/tiny-electra-ner/            ElectraForTokenClassification
  tests/models/tiny-electra-qa/             ElectraForQuestionAnswering, E = H = 32: no embeddings_project
  tests/models/tiny-albert-mlm/             AlbertForMaskedLM, E 16, 3 passes of the shared layer, gelu_new
  tests/models/tiny-albert-classifier/      AlbertForSequenceClassification, 3 labels
  tests/models/tiny-albert-ner/             AlbertForTokenClassification
  tests/models/tiny-albert-qa/              AlbertForQuestionAnswering
  tests/golden/electra_albert.json          per family: token ids, type ids and offsets of tricky texts (ALBERT),
                                            mean and [CLS] embeddings, fill-mask logits and pipeline, classification
                                            logits and pipeline (pairs), token-classification logits, QA logits and
                                            answers, ELECTRA's discriminator logits
"""
import os
import shutil
import sys
import unicodedata

import torch
from transformers import (AlbertConfig, AlbertForMaskedLM, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                          AlbertForTokenClassification, AlbertTokenizer, AutoTokenizer, ElectraConfig,
                          ElectraForMaskedLM, ElectraForPreTraining, ElectraForQuestionAnswering,
                          ElectraForSequenceClassification, ElectraForTokenClassification, ElectraTokenizer)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import tokens as T  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "electra_albert.json")
USABLE = H.MAX_POSITIONS  # 64
VOCAB_SIZE = 600
ALBERT_SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
WITH_TYPES = ["input_ids", "token_type_ids", "attention_mask"]
EMBED_TEXTS = H.EMBED_TEXTS_INTL
CLASSIFY_INPUTS = H.CLASSIFY_INPUTS_INTL
# Replaced-token detection: sentences with a word swapped for an odd one, and a pair.
DISCRIMINATOR_INPUTS = [
    {"text": "the chef cooked the meal."},
    {"text": "the chef ate the meal."},
    {"text": "i went to the store yesterday.", "text_pair": "it was closed."},
]


def corpus():
    return H.tokenizer_corpus(H.FILL_MASK_TINY + EMBED_TEXTS + [x for d in CLASSIFY_INPUTS for x in d.values()],
                              T.CASES, "[MASK]")


def electra_tokenizer(d):
    """heads.py's tiny WordPiece vocabulary, saved as ELECTRA checkpoints save theirs."""
    src = os.path.join(H.MODELS, "tiny-pretraining")
    tok = ElectraTokenizer.from_pretrained(src)
    shutil.rmtree(d, ignore_errors=True)
    tok.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def albert_tokenizer(d):
    # AlbertTokenizer lowercases and strips accents before the model sees a text: train on what it will see.
    vocab = H.unigram_vocab([as_albert_sees(x) for x in corpus()], ALBERT_SPECIALS, VOCAB_SIZE)
    tok = AlbertTokenizer(vocab=vocab, model_max_length=USABLE)
    shutil.rmtree(d, ignore_errors=True)
    tok.save_pretrained(d)
    return with_types(AutoTokenizer.from_pretrained(d))


def as_albert_sees(text):
    """Lowercase, accents stripped (NFKD, combining marks dropped): the normalizer of AlbertTokenizer's defaults."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


def with_types(tok):
    """transformers 5's AlbertTokenizer drops the segment ids it computes (see the module doc): restore them."""
    tok.model_input_names = WITH_TYPES
    return tok


def electra_config(vocab_size, embedding_size=16, **kw):
    return ElectraConfig(
        vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=USABLE, type_vocab_size=2,
        initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
        layer_norm_eps=1e-12, **kw)


def albert_config(vocab_size, **kw):
    return AlbertConfig(
        vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=1,
        inner_group_num=1, num_attention_heads=4, intermediate_size=64, max_position_embeddings=USABLE,
        type_vocab_size=2, initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        classifier_dropout_prob=0.0, pad_token_id=0, bos_token_id=2, eos_token_id=3, layer_norm_eps=1e-12, **kw)


def perturb(model, seed):
    """heads.perturb (biases and LayerNorms off their 0/1 init), the token-type table too."""
    return H.perturb(model, seed, ("LayerNorm", "layer_norm", "token_type"))


def save(model, name, tok_dir):
    """heads.save, with whichever tokenizer files the family's tokenizer wrote."""
    files = [f for f in os.listdir(tok_dir)
             if f.startswith("tokenizer") or f in ("vocab.txt", "special_tokens_map.json")]
    return H.save(model, name, tok_dir, files)


def token_goldens(tok):
    out = []
    for c in T.CASES:
        max_length = c.get("max_length", USABLE)
        pair = c.get("text_pair") or None
        e = tok(c["text"], pair, truncation=True, max_length=max_length, return_offsets_mapping=True)
        out.append({"name": c["name"], "text": c["text"], "text_pair": c.get("text_pair"), "max_length": max_length,
                    "input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
                    "offsets": [list(o) for o in e["offset_mapping"]],
                    "decoded": tok.decode(e["input_ids"]),
                    "decoded_skip": tok.decode(e["input_ids"], skip_special_tokens=True)})
    return out


def classify(m, tok):
    """heads.classify with the segment ids, which both families' classifiers read."""
    return H.classify(m, tok, CLASSIFY_INPUTS, with_types=True)


def discriminator(m, tok):
    rows = []
    for inp in DISCRIMINATOR_INPUTS:
        e = tok(inp["text"], inp.get("text_pair"), return_tensors="pt")
        with torch.no_grad():
            logits = m(**e).logits[0]
        rows.append({**inp, "input_ids": e["input_ids"][0].tolist(), "logits": H.fl(logits)})
    return rows


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/electra_albert.rs"}

    # --- ELECTRA ----------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-electra-discriminator")
    tok = electra_tokenizer(tok_dir)
    V = len(tok)
    g = {}
    torch.manual_seed(41)
    m = perturb(ElectraForPreTraining(electra_config(V, architectures=["ElectraForPreTraining"],
                                                     hidden_act="gelu_new")), 141).eval()
    assert hasattr(m.electra, "embeddings_project")
    save(m, "tiny-electra-discriminator", tok_dir)
    g["embeddings"] = H.embeddings(m.electra, tok, EMBED_TEXTS)
    g["discriminator"] = discriminator(m, tok)
    torch.manual_seed(42)
    m = perturb(ElectraForMaskedLM(electra_config(V, architectures=["ElectraForMaskedLM"], hidden_act="gelu_new")),
                142).eval()
    save(m, "tiny-electra-generator", tok_dir)
    g["fill_mask"] = H.fill_mask(m, tok, H.FILL_MASK_TINY)
    torch.manual_seed(43)
    m = perturb(ElectraForSequenceClassification(electra_config(
        V, architectures=["ElectraForSequenceClassification"], id2label=ids3, hidden_act="gelu_new",
        label2id={v: k for k, v in ids3.items()})), 143).eval()
    save(m, "tiny-electra-classifier", tok_dir)
    g["classifier"] = classify(m, tok)
    torch.manual_seed(44)
    m = perturb(ElectraForTokenClassification(electra_config(
        V, architectures=["ElectraForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 144).eval()
    save(m, "tiny-electra-ner", tok_dir)
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(45)
    m = perturb(ElectraForQuestionAnswering(electra_config(V, embedding_size=32,
                                                           architectures=["ElectraForQuestionAnswering"])), 145).eval()
    assert not hasattr(m.electra, "embeddings_project")
    save(m, "tiny-electra-qa", tok_dir)
    g["qa"] = H.qa(m, tok)
    golden["electra"] = g

    # --- ALBERT -----------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-albert-mlm")
    tok = albert_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": token_goldens(tok)}
    torch.manual_seed(51)
    m = perturb(AlbertForMaskedLM(albert_config(V, architectures=["AlbertForMaskedLM"])), 151).eval()
    save(m, "tiny-albert-mlm", tok_dir)
    g["embeddings"] = H.embeddings(m.albert, tok, EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, H.FILL_MASK_TINY + ["Zürich is a [MASK] in Switzerland."])
    torch.manual_seed(52)
    m = perturb(AlbertForSequenceClassification(albert_config(
        V, architectures=["AlbertForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 152).eval()
    save(m, "tiny-albert-classifier", tok_dir)
    g["classifier"] = classify(m, tok)
    torch.manual_seed(53)
    m = perturb(AlbertForTokenClassification(albert_config(
        V, architectures=["AlbertForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 153).eval()
    save(m, "tiny-albert-ner", tok_dir)
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(54)
    m = perturb(AlbertForQuestionAnswering(albert_config(V, architectures=["AlbertForQuestionAnswering"])), 154).eval()
    save(m, "tiny-albert-qa", tok_dir)
    g["qa"] = H.qa(m, tok)
    golden["albert"] = g

    H.write_golden(OUT, golden)
    for fam in ("electra", "albert"):
        g = golden[fam]
        print(fam, "fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
        print(fam, "classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
        H.print_qa(g["qa"], fam)
    unk = golden["albert"]["tokens"]
    print("albert unk in token cases", sum(c["input_ids"].count(1) for c in unk), file=sys.stderr)


if __name__ == "__main__":
    main()
