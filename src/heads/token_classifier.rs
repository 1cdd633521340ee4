//! Token classification (`BertForTokenClassification`): `classifier` `(num_labels, H)` on every token, then on the
//! host the token-classification pipeline's post-processing (`transformers/pipelines/token_classification.py`):
//! softmax per token, special tokens and the "O" label skipped, and with `simple` aggregation adjacent tokens of the
//! same entity type (B-X then I-X ..., word pieces included) grouped into spans.

use serde::Serialize;

use super::classifier::{labels_from_config, load_label_linear};
use super::masked_lm::BertPredictionHeadTransform;
use super::{softmax, Linear};
use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::tokenizer::{Encoded, Tokenizer};
use crate::weights::Weights;
use crate::{Error, Result};

/// Labels the pipeline leaves out of its output (transformers' default `ignore_labels`).
pub const IGNORE_LABELS: [&str; 1] = ["O"];

/// How per-token predictions become the output list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum Aggregation {
    /// One entry per token: `{entity, score, index, word, start, end}`.
    None,
    /// Adjacent tokens with the same entity type grouped: `{entity_group, score, word, start, end}`, the score the
    /// mean of the tokens' scores.
    Simple,
}

impl std::str::FromStr for Aggregation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Aggregation::None),
            "simple" => Ok(Aggregation::Simple),
            other => Err(Error::Input(format!("aggregation `{other}` is not supported; use `none` or `simple`"))),
        }
    }
}

/// One output entry. With [`Aggregation::None`] `entity` and `index` are set; with [`Aggregation::Simple`]
/// `entity_group` is. `start`/`end` are character offsets into the text.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenEntity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_group: Option<String>,
    pub score: f32,
    /// The token's position in the tokenized input (`[CLS]` is 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub word: String,
    pub start: usize,
    pub end: usize,
}

/// `BertForTokenClassification` minus the encoder.
pub struct TokenClassifier<B: Backend> {
    /// ModernBERT's `head` (dense, `classifier_activation`, norm) before the classifier.
    pub head: Option<BertPredictionHeadTransform<B>>,
    pub classifier: Linear<B>, // (num_labels, H)
    pub labels: Vec<String>,
}

impl<B: Backend> TokenClassifier<B> {
    /// `w` at the root of the checkpoint (`classifier.*`; ModernBERT's `head.*` too).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let labels = labels_from_config(cfg, "token classification")?;
        let classifier = load_label_linear(&w.pp("classifier"), cfg, labels.len(), backend)?;
        Ok(TokenClassifier { head: BertPredictionHeadTransform::before_classifier(w, cfg, backend)?, classifier, labels })
    }

    /// hidden `(B*T, H)` → logits `(B*T, num_labels)`; small enough to read back whole.
    pub fn forward(&self, backend: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        match &self.head {
            Some(head) => self.classifier.forward(backend, &head.forward(backend, hidden)?, Activation::None),
            None => self.classifier.forward(backend, hidden, Activation::None),
        }
    }

    /// The pipeline output of one text: `enc` its encoding, `logits` `(enc.len(), num_labels)` (padding rows of
    /// the batch already dropped).
    pub fn postprocess(&self, tok: &Tokenizer, text: &str, enc: &Encoded, logits: &[f32], aggregation: Aggregation)
        -> Result<Vec<TokenEntity>> {
        postprocess(tok, &self.labels, text, enc, logits, aggregation)
    }
}

/// The characters `[start, end)` of `text` (offsets are in characters, not bytes).
fn char_slice(text: &str, start: usize, end: usize) -> String {
    text.chars().skip(start).take(end.saturating_sub(start)).collect()
}

/// Joins WordPiece tokens back into text with the tokenizer's decoder (`convert_tokens_to_string`).
fn tokens_to_string(tok: &Tokenizer, tokens: Vec<String>) -> Result<String> {
    match tok.inner().get_decoder() {
        Some(d) => {
            use tokenizers::Decoder;
            d.decode(tokens).map_err(|e| Error::Input(format!("cannot join tokens into text: {e}")))
        }
        None => Ok(tokens.join(" ").replace(" ##", "")),
    }
}

/// "B-PER" → ("B", "PER"); "I-PER" → ("I", "PER"); anything else is a continuation of itself ("O" → ("I", "O")),
/// as transformers' `get_tag`.
fn tag(label: &str) -> (&str, &str) {
    if let Some(t) = label.strip_prefix("B-") {
        ("B", t)
    } else if let Some(t) = label.strip_prefix("I-") {
        ("I", t)
    } else {
        ("I", label)
    }
}

/// See [`TokenClassifier::postprocess`].
pub fn postprocess(tok: &Tokenizer, labels: &[String], text: &str, enc: &Encoded, logits: &[f32],
    aggregation: Aggregation) -> Result<Vec<TokenEntity>> {
    let n = labels.len();
    if logits.len() != enc.len() * n {
        return Err(Error::Input(format!(
            "token classification: {} logits for {} tokens × {n} labels",
            logits.len(),
            enc.len()
        )));
    }
    let unk = tok.unk().id;
    // Per token: the best label, its probability, the token string (the text itself for [UNK]).
    let mut entities = Vec::new();
    for i in 0..enc.len() {
        if enc.special_tokens_mask[i] == 1 {
            continue;
        }
        let probs = softmax(&logits[i * n..(i + 1) * n]);
        let best = super::top_k(&probs, 1)[0];
        let (start, end) = enc.offsets[i];
        let word = if enc.ids[i] == unk { char_slice(text, start, end) } else { enc.tokens[i].clone() };
        entities.push(TokenEntity {
            entity: Some(labels[best].clone()),
            entity_group: None,
            score: probs[best],
            index: Some(i),
            word,
            start,
            end,
        });
    }
    let ignored = |label: &str| IGNORE_LABELS.contains(&label);
    if aggregation == Aggregation::None {
        entities.retain(|e| !e.entity.as_deref().is_some_and(ignored));
        return Ok(entities);
    }

    // Simple: group adjacent tokens whose type matches and that do not start a new entity (a "B-"), "O" runs
    // included (they are dropped after grouping, as in transformers).
    let mut groups: Vec<Vec<&TokenEntity>> = Vec::new();
    for e in &entities {
        let label = e.entity.as_deref().unwrap_or("");
        let continues = groups.last().and_then(|g| g.last()).is_some_and(|last| {
            let (bi, t) = tag(label);
            let (_, last_t) = tag(last.entity.as_deref().unwrap_or(""));
            t == last_t && bi != "B"
        });
        match groups.last_mut() {
            Some(g) if continues => g.push(e),
            _ => groups.push(vec![e]),
        }
    }
    let mut out = Vec::new();
    for g in groups {
        let first = g[0].entity.as_deref().unwrap_or("");
        // entity_group: the first token's label without its "B-"/"I-" prefix (split on the first '-').
        let group = first.split_once('-').map(|(_, t)| t).unwrap_or(first).to_string();
        if ignored(&group) {
            continue;
        }
        let score = (g.iter().map(|e| e.score as f64).sum::<f64>() / g.len() as f64) as f32;
        out.push(TokenEntity {
            entity: None,
            entity_group: Some(group),
            score,
            index: None,
            word: tokens_to_string(tok, g.iter().map(|e| e.word.clone()).collect())?,
            start: g[0].start,
            end: g[g.len() - 1].end,
        });
    }
    Ok(out)
}
