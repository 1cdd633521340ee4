#!/usr/bin/env python3
"""Golden for turning fine-tuning examples into batches, as transformers' example scripts do.

Run from the repository root (needs transformers 5.x; no model is run, only tokenizers):

    .venv/bin/python tests/golden/finetune_data.py

It writes tests/golden/finetune_data.json, read by tests/finetune_data.rs (which checks src/training/data.rs against
it exactly: ids and labels are integers). Every batch is padded on the right to its longest row, as the scripts'
collators do without `pad_to_max_length` (`DataCollatorForTokenClassification`: pad id, token type 0, mask 0, label
-100; `DataCollatorWithPadding` likewise without labels to pad).

  ner       examples/pytorch/token-classification/run_ner.py, `tokenize_and_align_labels` with label_all_tokens=False:
            `tokenizer(tokens, truncation=True, max_length=L, is_split_into_words=True)`; the first piece of each
            word gets its tag's class, every other piece, the special tokens and the padding -100. Cases:
            tests/models/tiny-ner (BERT WordPiece; the label order is the config's label2id, as run_ner uses when
            the model's labels match the dataset's) and tests/models/tiny-roberta-ner (byte-level BPE; run_ner loads
            RoBERTa-family tokenizers with `add_prefix_space=True`, which this golden does too). L = 12, so the long
            example is cut in the middle of a word (its first piece keeps the tag) and loses its last words.
            `sorted_labels` is run_ner's `get_label_list` (sorted unique tags), its order for a model without labels.
  qa        examples/pytorch/question-answering/run_qa.py, `prepare_train_features` (pad_on_right):
            `tokenizer(question.lstrip(), context, truncation="only_second", max_length=32, stride=8,
            return_overflowing_tokens=True, return_offsets_mapping=True)`, each window labelled with the first
            answer's start/end token when the answer lies fully inside the window's context, else the CLS index.
            Cases: tests/models/tiny-qa (BERT) and tests/models/tiny-roberta-qa (`<s> q </s></s> c </s>`).
            `example` maps each window to its example (`overflow_to_sample_mapping`).
  sequence  examples/pytorch/text-classification/run_glue.py's tokenization (`tokenizer(text, text_pair,
            truncation=True, max_length=16)`, longest_first) on tests/models/tiny-classifier, single texts and pairs
            mixed. Labels: two label sets, `config` (every label is in the config's label2id: its ids) and `appearance`
            (a label the config lacks: the labels in order of first appearance, bertgpu's documented choice for
            classification heads — run_glue itself sorts them).

One deliberate difference from run_qa, recorded in the JSON: run_qa walks `token_start_index` forward over *all*
offsets (`while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char`), so when the
answer starts in the window's last context token the walk passes the final [SEP] (offset (0, 0)) and any padding, and
the start label lands on the last position of the row (run_qa's own comment: "we could go after the last offset if
the answer is the last word (edge case)"). bertgpu stops the walk at the window's last context token. `start` holds
that (the answer's first token); `start_run_qa` holds run_qa's value; the script asserts they differ only in that
edge case, which the example "edge" exercises.
"""

import json
import os

import transformers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")

NER_MAX_LENGTH = 12
QA_MAX_LENGTH = 32
QA_DOC_STRIDE = 8
SEQ_MAX_LENGTH = 16

NER_EXAMPLES = [
    # "Washington" → was ##h ##ing ##t ##on: one label on `was`, -100 on the four other pieces.
    {"tokens": ["John", "lives", "in", "Washington"], "tags": ["B-PER", "O", "O", "B-LOC"]},
    # One word that the pre-tokenizer splits on punctuation ("U.S." → u . s .): still one word, one label.
    {"tokens": ["Mary", "left", "the", "U.S."], "tags": ["B-PER", "O", "O", "B-LOC"]},
    # Long: at max_length 12 "Apple" is cut after its first piece (which keeps B-ORG) and the last words are lost.
    {
        "tokens": ["The", "unbelievable", "company", "Apple", "opened", "in", "Nairobi", "today"],
        "tags": ["O", "O", "O", "B-ORG", "O", "O", "B-LOC", "O"],
    },
    {"tokens": ["Zürich"], "tags": ["B-LOC"]},
]

LONG_CONTEXT = (
    "The old library stands in the centre of the town. It was built by the river in the year of the great flood, "
    "and for many years it was the only place where people could read books. Today the library is open every day, "
    "and children come after school to read"
)


def qa(question, context, answer=None, occurrence=0):
    """A SQuAD example; the answer's start is its `occurrence`-th match in the context."""
    if answer is None:
        return {"question": question, "context": context, "answers": {"text": [], "answer_start": []}}
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer, start + 1)
    return {"question": question, "context": context, "answers": {"text": [answer], "answer_start": [start]}}


QA_EXAMPLES = [
    qa("Where does the fox live?", "The fox lives in the forest near the river.", "the forest"),
    # 6 windows at 32/8; the answer lies fully inside only one of them, the others are labelled CLS.
    qa("Who comes after school?", LONG_CONTEXT, "children"),
    # Leading whitespace on the question (run_qa strips it); the answer lies in the overlap of two windows.
    qa("   Where was the library built?", LONG_CONTEXT, "by the river"),
    # The answer is the context's last token: run_qa's start walk runs past the context (see the module doc).
    qa("What is near the fox?", "The fox lives near the river", "river"),
    # SQuAD v2: no answer, every window is labelled CLS.
    qa("What colour is the fox?", LONG_CONTEXT),
    # Characters of two bytes before the answer: answer_start counts characters (Python string indices).
    qa("Where does Zoë live?", "Zoë the café owner lives in Zürich by the lake.", "Zürich"),
]

SEQ_EXAMPLES = [
    {"text": "I loved this film, it was wonderful.", "label": "positive"},
    {"text": "Terrible.", "label": "negative"},
    # A pair longer than 16 tokens: longest_first truncation.
    {
        "text": "The plot was fine but the acting felt rather wooden",
        "text_pair": "Was the film good?",
        "label": "neutral",
    },
    {"text": "Short one", "text_pair": "and a second text", "label": "positive"},
]
# The same texts with a label the config lacks ("mixed"): labels in order of first appearance.
SEQ_LABELS_APPEARANCE = ["positive", "negative", "mixed", "positive"]


def pad_rows(rows, pad):
    t = max(len(r) for r in rows)
    return [r + [pad] * (t - len(r)) for r in rows]


def ner_case(model, label_list, extra_kwargs):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(MODELS, model), **extra_kwargs)
    label_to_id = {l: i for i, l in enumerate(label_list)}
    tokens = [e["tokens"] for e in NER_EXAMPLES]
    # --- run_ner.py, tokenize_and_align_labels (label_all_tokens=False), padding=False ---
    tokenized = tokenizer(tokens, truncation=True, max_length=NER_MAX_LENGTH, is_split_into_words=True)
    labels = []
    for i, label in enumerate(e["tags"] for e in NER_EXAMPLES):
        word_ids = tokenized.word_ids(batch_index=i)
        previous_word_idx = None
        label_ids = []
        for word_idx in word_ids:
            if word_idx is None:
                label_ids.append(-100)
            elif word_idx != previous_word_idx:
                label_ids.append(label_to_id[label[word_idx]])
            else:
                label_ids.append(-100)
            previous_word_idx = word_idx
        labels.append(label_ids)
    # --- DataCollatorForTokenClassification ---
    out = {
        "model": model,
        "max_length": NER_MAX_LENGTH,
        "input_ids": pad_rows(tokenized["input_ids"], tokenizer.pad_token_id),
        "token_type_ids": pad_rows(tokenized.get("token_type_ids", [[0] * len(r) for r in tokenized["input_ids"]]), 0),
        "attention_mask": pad_rows(tokenized["attention_mask"], 0),
        "labels": pad_rows(labels, -100),
        "tokens": [tokenized.tokens(i) for i in range(len(tokens))],
        "truncated": truncated(tokenizer(tokens, is_split_into_words=True)["input_ids"], NER_MAX_LENGTH),
    }
    assert out["truncated"], "no example was truncated"
    return out


def truncated(untruncated_ids, max_length):
    """The examples that truncation at max_length cuts."""
    return [i for i, ids in enumerate(untruncated_ids) if len(ids) > max_length]


def get_label_list(labels):
    """run_ner.py's get_label_list: the sorted unique tags."""
    unique_labels = set()
    for label in labels:
        unique_labels = unique_labels | set(label)
    label_list = list(unique_labels)
    label_list.sort()
    return label_list


def qa_case(model, expect_edge):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(MODELS, model))
    assert tokenizer.padding_side == "right"
    questions = [e["question"].lstrip() for e in QA_EXAMPLES]
    contexts = [e["context"] for e in QA_EXAMPLES]
    # --- run_qa.py, prepare_train_features (pad_on_right), padding=False ---
    tokenized = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=QA_MAX_LENGTH,
        stride=QA_DOC_STRIDE,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    sample_mapping = tokenized["overflow_to_sample_mapping"]
    offset_mapping = tokenized["offset_mapping"]
    starts, ends, starts_run_qa = [], [], []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        if tokenizer.cls_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.cls_token_id)
        elif tokenizer.bos_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.bos_token_id)
        else:
            cls_index = 0
        sequence_ids = tokenized.sequence_ids(i)
        answers = QA_EXAMPLES[sample_mapping[i]]["answers"]
        if len(answers["answer_start"]) == 0:
            starts.append(cls_index)
            ends.append(cls_index)
            starts_run_qa.append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        token_start_index = 0
        while sequence_ids[token_start_index] != 1:
            token_start_index += 1
        token_end_index = len(input_ids) - 1
        while sequence_ids[token_end_index] != 1:
            token_end_index -= 1
        context_end = token_end_index
        if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
            starts.append(cls_index)
            ends.append(cls_index)
            starts_run_qa.append(cls_index)
            continue
        # run_qa's walk, over all offsets
        s = token_start_index
        while s < len(offsets) and offsets[s][0] <= start_char:
            s += 1
        starts_run_qa.append(s - 1)
        # bertgpu's: the same walk, stopped at the window's last context token
        s = token_start_index
        while s <= context_end and offsets[s][0] <= start_char:
            s += 1
        starts.append(s - 1)
        while offsets[token_end_index][1] >= end_char:
            token_end_index -= 1
        ends.append(token_end_index + 1)
        if starts[-1] != starts_run_qa[-1]:
            assert starts[-1] == context_end, "run_qa and bertgpu differ outside the edge case"
    # (RoBERTa's vocabulary splits "river" into Ġ ri ver, so there the answer does not start in the last token.)
    assert any(a != b for a, b in zip(starts, starts_run_qa)) == expect_edge, "the edge case is (not) exercised"
    windows_per_example = [sample_mapping.count(i) for i in range(len(QA_EXAMPLES))]
    assert max(windows_per_example) >= 3, windows_per_example
    return {
        "model": model,
        "max_length": QA_MAX_LENGTH,
        "doc_stride": QA_DOC_STRIDE,
        "input_ids": pad_rows(tokenized["input_ids"], tokenizer.pad_token_id),
        "token_type_ids": pad_rows(tokenized.get("token_type_ids", [[0] * len(r) for r in tokenized["input_ids"]]), 0),
        "attention_mask": pad_rows(tokenized["attention_mask"], 0),
        "start": starts,
        "end": ends,
        "start_run_qa": starts_run_qa,
        "example": list(sample_mapping),
        "offsets": [[list(o) for o in offs] for offs in offset_mapping],
        "tokens": [tokenized.tokens(i) for i in range(len(tokenized["input_ids"]))],
    }


def seq_case(model):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(MODELS, model))
    config = transformers.AutoConfig.from_pretrained(os.path.join(MODELS, model))
    rows = [
        tokenizer(e["text"], e.get("text_pair"), truncation=True, max_length=SEQ_MAX_LENGTH) for e in SEQ_EXAMPLES
    ]
    cut = truncated([tokenizer(e["text"], e.get("text_pair"))["input_ids"] for e in SEQ_EXAMPLES], SEQ_MAX_LENGTH)
    assert any("text_pair" in SEQ_EXAMPLES[i] for i in cut), "no pair was truncated"
    appearance = list(dict.fromkeys(SEQ_LABELS_APPEARANCE))
    return {
        "model": model,
        "max_length": SEQ_MAX_LENGTH,
        "input_ids": pad_rows([r["input_ids"] for r in rows], tokenizer.pad_token_id),
        "token_type_ids": pad_rows([r["token_type_ids"] for r in rows], 0),
        "attention_mask": pad_rows([r["attention_mask"] for r in rows], 0),
        "truncated": cut,
        "config_label_list": [config.id2label[i] for i in range(len(config.id2label))],
        "config_labels": [config.label2id[e["label"]] for e in SEQ_EXAMPLES],
        "appearance_label_list": appearance,
        "appearance_labels": [appearance.index(l) for l in SEQ_LABELS_APPEARANCE],
    }


def dumps(value, indent=""):
    """JSON with one list of scalars or of pairs (a row) per line."""
    inner = indent + " "
    if isinstance(value, list) and value and all(isinstance(v, list) and len(v) == 2 for v in value):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def main():
    ner_config = transformers.AutoConfig.from_pretrained(os.path.join(MODELS, "tiny-ner"))
    ner_labels = [ner_config.id2label[i] for i in range(len(ner_config.id2label))]
    assert sorted(ner_labels) != ner_labels  # so the config order and the sorted order tell apart
    out = {
        "transformers": transformers.__version__,
        "ner_examples": NER_EXAMPLES,
        "ner_config_labels": ner_labels,
        "sorted_labels": get_label_list(e["tags"] for e in NER_EXAMPLES),
        "ner": [
            ner_case("tiny-ner", ner_labels, {}),
            ner_case("tiny-roberta-ner", ner_labels, {"add_prefix_space": True}),
        ],
        "qa_examples": QA_EXAMPLES,
        "qa": [qa_case("tiny-qa", True), qa_case("tiny-roberta-qa", False)],
        "seq_examples": SEQ_EXAMPLES,
        "seq_labels_appearance": SEQ_LABELS_APPEARANCE,
        "sequence": seq_case("tiny-classifier"),
    }
    path = os.path.join(ROOT, "tests", "golden", "finetune_data.json")
    with open(path, "w") as f:
        f.write(dumps(out) + "\n")
    for case in out["qa"]:
        print(case["model"], "windows per example:", [case["example"].count(i) for i in range(len(QA_EXAMPLES))],
              "start", case["start"], "end", case["end"], "run_qa start", case["start_run_qa"])
    print("wrote", path)


if __name__ == "__main__":
    main()
