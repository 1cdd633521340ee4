//! Users' fine-tuning examples → the batches [`super::finetune::FineTuner`] takes, as transformers' example scripts
//! prepare them (checked token for token by `tests/finetune_data.rs` against `tests/golden/finetune_data.py`).
//!
//! - **Token classification** ([`TokenExample`]: `{"tokens": [...], "tags": [...]}`), as `run_ner.py`'s
//!   `tokenize_and_align_labels` with `label_all_tokens=False`: the pre-split words are tokenized with
//!   `is_split_into_words` ([`Tokenizer::encode_words`]; RoBERTa-family tokenizers with a prefix space per word, as
//!   run_ner loads them: [`Tokenizer::for_split_words`]) and truncated at the tokenizer's
//!   [`Tokenizer::max_length`]; the first piece of each word gets its tag's class, every other piece, the special
//!   tokens and the padding [`IGNORE`]. A word cut off by the truncation loses its label; a word cut in the middle
//!   keeps it on its first piece.
//! - **Extractive QA** ([`QaExample`]: SQuAD's `{"question", "context", "answers": {"text", "answer_start"}}`), as
//!   `run_qa.py`'s `prepare_train_features`: `[CLS] question [SEP] context [SEP]` windows (`only_second`
//!   truncation at `max_length`, consecutive windows overlapping by `doc_stride` context tokens), each labelled
//!   with the first answer's start and end token when the answer lies fully inside the window's context, else both
//!   with the CLS index. See [`qa_batch`] for the one place where we deliberately differ.
//! - **Sequence classification** ([`TextExample`]: `{"text", "label"}` or `{"text", "text_pair", "label"}`): the
//!   text (pair) truncated at [`Tokenizer::max_length`] (longest first), as `run_glue.py` tokenizes.
//!
//! Every batch is padded on the right to its longest row (pad id, token type 0, attention mask 0, label
//! [`IGNORE`]), as the scripts' collators pad without `pad_to_max_length`.
//!
//! The label sets: [`token_label_list`] (the config's `label2id`, else the sorted tags, as run_ner) and
//! [`sequence_label_list`] (the config's when complete, else order of first appearance).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::loss::IGNORE;
use crate::heads::qa;
use crate::tokenizer::{Batch, Encoded, Tokenizer};
use crate::{Error, Result};

/// run_qa's default window length (`max_seq_length`), capped by the tokenizer's [`Tokenizer::max_length`].
pub const QA_MAX_LENGTH: usize = qa::MAX_SEQ_LEN;
/// run_qa's default overlap between windows (`doc_stride`).
pub const QA_DOC_STRIDE: usize = qa::DOC_STRIDE;

/// One token-classification example: pre-split words and one tag per word (`{"tokens": [...], "tags": [...]}`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TokenExample {
    pub tokens: Vec<String>,
    pub tags: Vec<String>,
}

/// One SQuAD-style example. Other keys of the JSON (`id`, `title`) are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct QaExample {
    pub question: String,
    pub context: String,
    pub answers: QaAnswers,
}

/// SQuAD's answers: parallel lists of texts and their start in the context, in **characters** (Python string
/// indices). Empty lists: no answer in the context (SQuAD v2), every window is labelled with the CLS index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct QaAnswers {
    pub text: Vec<String>,
    pub answer_start: Vec<usize>,
}

/// One sequence-classification example: a text or a text pair and its label.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TextExample {
    pub text: String,
    #[serde(default)]
    pub text_pair: Option<String>,
    pub label: String,
}

/// A token-classification batch: the padded inputs and one label per token, `(b, t)` row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    pub batch: Batch,
    /// The class of the first piece of each word, [`IGNORE`] elsewhere (b·t).
    pub labels: Vec<i64>,
    /// The examples cut at the tokenizer's max length (their last words carry no label).
    pub truncated: Vec<usize>,
}

/// A QA batch: every window of every example, padded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QaBatch {
    pub batch: Batch,
    /// Answer start token per window (the CLS index when the answer is not fully inside the window).
    pub start: Vec<u32>,
    /// Answer end token per window (inclusive).
    pub end: Vec<u32>,
    /// Index of the example each window comes from (run_qa's `overflow_to_sample_mapping`).
    pub example: Vec<usize>,
    /// The windows themselves (offsets into their example's context, sequence ids), for mapping predictions back
    /// to the context ([`crate::heads::qa::decode`] takes one example's windows).
    pub windows: Vec<Encoded>,
}

/// A sequence-classification batch: the padded inputs and one class per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceBatch {
    pub batch: Batch,
    pub labels: Vec<u32>,
    /// The examples cut at the tokenizer's max length.
    pub truncated: Vec<usize>,
}

/// Reads examples from JSON lines (one object per line; blank lines skipped) or from one JSON array of them.
/// Keys the example type does not name are ignored. Errors name the line.
pub fn parse_jsonl<T: DeserializeOwned>(text: &str) -> Result<Vec<T>> {
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(text).map_err(|e| Error::Input(format!("examples (a JSON array): {e}")));
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| {
                Error::Input(format!("examples, line {}: {e}; each line must be one JSON object", n + 1))
            })
        })
        .collect()
}

/// The labels of a config's `label2id` in class order; `None` when it names none: empty, or transformers' default
/// `LABEL_0, LABEL_1, ...` (what `PretrainedConfig(num_labels=n)` writes for a model never told its labels).
fn config_labels(label2id: &BTreeMap<String, usize>) -> Result<Option<Vec<String>>> {
    let n = label2id.len();
    if n == 0 || (label2id.iter().all(|(l, &i)| *l == format!("LABEL_{i}")) && label2id.values().all(|&i| i < n)) {
        return Ok(None);
    }
    let mut labels = vec![None; n];
    for (label, &id) in label2id {
        match labels.get_mut(id) {
            Some(slot @ None) => *slot = Some(label.clone()),
            _ => {
                return Err(Error::Config(format!(
                    "label2id gives `{label}` the class {id}, but its {n} labels must have the classes 0..{} once each",
                    n - 1
                )))
            }
        }
    }
    Ok(Some(labels.into_iter().flatten().collect()))
}

fn no_examples(task: &str) -> Error {
    Error::Input(format!("{task}: no examples; give at least one"))
}

/// The label set of token classification, in class order: the config's `label2id` order when the checkpoint has
/// labels (a tag it lacks is an error: the head has no class for it), else the unique tags **sorted**, as
/// run_ner's `get_label_list` (`label2id` of `config.json`: [`crate::config::BertConfig::label2id`]; pass an empty
/// map for a checkpoint without labels). run_ner keeps the model's order only when its labels equal the data's as
/// sets (else it warns and sorts); here data using a subset of the model's labels keeps the model's classes too.
pub fn token_label_list(examples: &[TokenExample], label2id: &BTreeMap<String, usize>) -> Result<Vec<String>> {
    if examples.is_empty() {
        return Err(no_examples("token classification"));
    }
    let Some(labels) = config_labels(label2id)? else {
        let tags: BTreeSet<&String> = examples.iter().flat_map(|e| &e.tags).collect();
        return Ok(tags.into_iter().cloned().collect());
    };
    for (i, e) in examples.iter().enumerate() {
        if let Some(tag) = e.tags.iter().find(|t| !labels.contains(t)) {
            return Err(Error::Input(format!(
                "token classification: example {i}: the tag `{tag}` is not one of the model's labels ({}, from \
                 config.json's label2id); relabel the data, or fine-tune a checkpoint without labels",
                labels.join(", ")
            )));
        }
    }
    Ok(labels)
}

/// The label set of sequence classification, in class order: the config's `label2id` order when the checkpoint has
/// labels and every example's label is among them; otherwise the labels in order of **first appearance** in
/// `examples` — as `Model::train_head` orders them (run_glue instead sorts string labels).
pub fn sequence_label_list(examples: &[TextExample], label2id: &BTreeMap<String, usize>) -> Result<Vec<String>> {
    if examples.is_empty() {
        return Err(no_examples("sequence classification"));
    }
    if let Some(labels) = config_labels(label2id)? {
        if examples.iter().all(|e| labels.contains(&e.label)) {
            return Ok(labels);
        }
    }
    let mut labels: Vec<String> = Vec::new();
    for e in examples {
        if !labels.contains(&e.label) {
            labels.push(e.label.clone());
        }
    }
    Ok(labels)
}

fn class_of(labels: &[String]) -> HashMap<&str, usize> {
    labels.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect()
}

/// Token-classification batch of `examples` (run_ner's `tokenize_and_align_labels`, `label_all_tokens=False`),
/// truncated at `tok`'s max length; `labels` is the label set in class order ([`token_label_list`]). A
/// RoBERTa-family tokenizer is copied once per call ([`Tokenizer::for_split_words`]): prepare the whole data set in
/// one call and cut it into training batches afterwards (`rows::rows_from_batch`).
pub fn token_batch(tok: &Tokenizer, examples: &[TokenExample], labels: &[String]) -> Result<TokenBatch> {
    let task = "token classification";
    if examples.is_empty() {
        return Err(no_examples(task));
    }
    let class = class_of(labels);
    let tok = tok.for_split_words();
    let mut encoded = Vec::with_capacity(examples.len());
    let mut rows: Vec<Vec<i64>> = Vec::with_capacity(examples.len());
    let mut truncated = Vec::new();
    for (i, e) in examples.iter().enumerate() {
        let fail = |what: String| Error::Input(format!("{task}: example {i}: {what}"));
        if e.tokens.is_empty() {
            return Err(fail("`tokens` is empty; give at least one word".into()));
        }
        if e.tokens.len() != e.tags.len() {
            return Err(fail(format!(
                "{} tokens but {} tags; give one tag per word",
                e.tokens.len(),
                e.tags.len()
            )));
        }
        if let Some(w) = e.tokens.iter().position(|w| w.trim().is_empty()) {
            return Err(fail(format!("word {w} is empty or whitespace; it has no token to carry its tag")));
        }
        let ids: Vec<i64> = e
            .tags
            .iter()
            .map(|t| {
                class.get(t.as_str()).map(|&c| c as i64).ok_or_else(|| {
                    fail(format!("the tag `{t}` is not in the label set ({})", labels.join(", ")))
                })
            })
            .collect::<Result<_>>()?;
        let enc = tok.encode_words(&e.tokens).map_err(|err| fail(err.to_string()))?;
        // The first piece of each word gets its word's tag; later pieces and the special tokens IGNORE.
        let mut previous = None;
        let row = enc
            .word_ids
            .iter()
            .map(|&w| {
                let label = match w {
                    Some(w) if Some(w) != previous => ids[w as usize],
                    _ => IGNORE,
                };
                previous = w;
                label
            })
            .collect();
        if enc.truncated {
            truncated.push(i);
        }
        rows.push(row);
        encoded.push(enc);
    }
    let batch = tok.batch(&encoded);
    let mut labels = vec![IGNORE; batch.b * batch.t];
    for (r, row) in rows.iter().enumerate() {
        labels[r * batch.t..r * batch.t + row.len()].copy_from_slice(row);
    }
    Ok(TokenBatch { batch, labels, truncated })
}

/// QA training batch of `examples`, as run_qa's `prepare_train_features`: the question (leading whitespace
/// stripped, as run_qa does) and the context in windows of at most `max_length` tokens (capped by `tok`'s max
/// length, as run_qa caps `max_seq_length` by the model's), consecutive windows sharing `doc_stride` context tokens
/// (run_qa's defaults: [`QA_MAX_LENGTH`], [`QA_DOC_STRIDE`]). Each window is labelled with the first answer's
/// first and last token when the answer's characters lie inside the window's context tokens, else both with the
/// CLS index (0).
///
/// The windows are [`crate::heads::qa::windows`], the inference windows: both are transformers'
/// `tokenizer(question, context, truncation="only_second", max_length, stride, return_overflowing_tokens=True)`.
/// Only the defaults differ: inference sizes windows with [`crate::heads::qa::window_params`] (the pipeline's
/// `min(384, max_length)` tokens, overlap at most half a window), training takes them as arguments (run_qa's
/// 384/128, and a stride that leaves no room is an error, not shrunk).
///
/// One deliberate difference from run_qa: its start walk (`while offsets[i][0] <= start_char: i += 1`) is not
/// stopped at the end of the context, so when the answer starts in the window's last context token it walks over
/// the final `[SEP]` (offset `(0, 0)`) and any padding, and labels the row's last position (run_qa's comment: "we
/// could go after the last offset if the answer is the last word (edge case)"). Here the walk stops at the last
/// context token, which is then the start label.
pub fn qa_batch(tok: &Tokenizer, examples: &[QaExample], max_length: usize, doc_stride: usize) -> Result<QaBatch> {
    let task = "qa";
    if examples.is_empty() {
        return Err(no_examples(task));
    }
    let max_length = max_length.min(tok.max_length());
    if max_length < tok.min_max_length() {
        return Err(Error::Input(format!(
            "{task}: windows of {max_length} tokens cannot hold the special tokens, a question and a context; use a \
             max_length of at least {}",
            tok.min_max_length()
        )));
    }
    if doc_stride + tok.min_max_length() > max_length {
        return Err(Error::Input(format!(
            "{task}: a doc_stride of {doc_stride} leaves no room in windows of {max_length} tokens (with the special \
             tokens and a question); use a doc_stride below {}",
            (max_length + 1).saturating_sub(tok.min_max_length())
        )));
    }
    let cls_id = tok.cls().id;
    let mut out = QaBatch {
        batch: Batch::default(),
        start: Vec::new(),
        end: Vec::new(),
        example: Vec::new(),
        windows: Vec::new(),
    };
    for (i, e) in examples.iter().enumerate() {
        let fail = |what: String| Error::Input(format!("{task}: example {i}: {what}"));
        if e.question.trim().is_empty() {
            return Err(fail("the question is empty".into()));
        }
        if e.context.trim().is_empty() {
            return Err(fail("the context is empty".into()));
        }
        let answer = check_answers(&e.answers, &e.context).map_err(fail)?;
        let windows = qa::windows(tok, e.question.trim_start(), &e.context, max_length, doc_stride)
            .map_err(|err| fail(err.to_string()))?;
        for w in windows {
            let cls = w.ids.iter().position(|&id| id == cls_id).unwrap_or(0);
            let (s, t) = answer.and_then(|a| span_in_window(&w, a)).unwrap_or((cls, cls));
            out.start.push(s as u32);
            out.end.push(t as u32);
            out.example.push(i);
            out.windows.push(w);
        }
    }
    out.batch = tok.batch(&out.windows);
    Ok(out)
}

/// Checks every answer against the context; returns the first one's `[start, end)` in characters, if any.
fn check_answers(answers: &QaAnswers, context: &str) -> std::result::Result<Option<(usize, usize)>, String> {
    if answers.text.len() != answers.answer_start.len() {
        return Err(format!(
            "`answers` has {} texts but {} answer_start values; give one start per text",
            answers.text.len(),
            answers.answer_start.len()
        ));
    }
    let n = context.chars().count();
    for (k, (text, &start)) in answers.text.iter().zip(&answers.answer_start).enumerate() {
        if text.is_empty() {
            return Err(format!("answer {k} is empty; give the answer's text as it appears in the context"));
        }
        let len = text.chars().count();
        let found: String = context.chars().skip(start).take(len).collect();
        if start + len > n || found != *text {
            return Err(format!(
                "answer {k} `{text}` is not at character {start} of the context (there: `{found}`); answer_start \
                 counts characters (not bytes) from 0, and the text must match the context exactly"
            ));
        }
    }
    Ok(answers.answer_start.first().map(|&s| (s, s + answers.text[0].chars().count())))
}

/// run_qa's token span of the answer `[start_char, end_char)` in one window, or `None` if the window's context
/// tokens do not cover it.
fn span_in_window(w: &Encoded, (start_char, end_char): (usize, usize)) -> Option<(usize, usize)> {
    let cs = w.sequence_ids.iter().position(|&s| s == Some(1))?;
    let ce = w.sequence_ids.iter().rposition(|&s| s == Some(1))?;
    let off = &w.offsets;
    if !(off[cs].0 <= start_char && off[ce].1 >= end_char) {
        return None;
    }
    // The last context token starting at or before the answer (run_qa's walk, stopped at the context's end).
    let mut s = cs;
    while s <= ce && off[s].0 <= start_char {
        s += 1;
    }
    // The first token of the run of context tokens ending at or after the answer's end.
    let mut e = ce;
    while e > cs && off[e - 1].1 >= end_char {
        e -= 1;
    }
    Some((s - 1, e))
}

/// Sequence-classification batch of `examples` (single texts and pairs may be mixed), each truncated at `tok`'s max
/// length (pairs longest first); `labels` is the label set in class order ([`sequence_label_list`]).
pub fn sequence_batch(tok: &Tokenizer, examples: &[TextExample], labels: &[String]) -> Result<SequenceBatch> {
    let task = "sequence classification";
    if examples.is_empty() {
        return Err(no_examples(task));
    }
    let class = class_of(labels);
    let mut encoded = Vec::with_capacity(examples.len());
    let mut classes = Vec::with_capacity(examples.len());
    let mut truncated = Vec::new();
    for (i, e) in examples.iter().enumerate() {
        let fail = |what: String| Error::Input(format!("{task}: example {i}: {what}"));
        if e.text.trim().is_empty() {
            return Err(fail("the text is empty".into()));
        }
        let c = class.get(e.label.as_str()).ok_or_else(|| {
            fail(format!("the label `{}` is not in the label set ({})", e.label, labels.join(", ")))
        })?;
        let enc = tok.encode(&e.text, e.text_pair.as_deref()).map_err(|err| fail(err.to_string()))?;
        if enc.truncated {
            truncated.push(i);
        }
        classes.push(*c as u32);
        encoded.push(enc);
    }
    Ok(SequenceBatch { batch: tok.batch(&encoded), labels: classes, truncated })
}
