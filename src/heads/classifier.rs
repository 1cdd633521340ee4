//! Sequence classification (`BertForSequenceClassification`): the pooler, then `classifier` `(num_labels, H)`
//! (RoBERTa's `RobertaClassificationHead`: `classifier.dense` + tanh on the `<s>` token, then `classifier.out_proj`;
//! ELECTRA's `ElectraClassificationHead` the same with the exact GELU; ALBERT's pooler is `albert.pooler` + tanh;
//! ModernBERT's first token or mean over the mask (`classifier_pooling`), then its `head`, then `classifier`);
//! on the host a softmax (single-label) or a sigmoid per label (`problem_type: multi_label_classification`), labels
//! from `id2label`, sorted best first.

use serde::Serialize;

use super::masked_lm::BertPredictionHeadTransform;
use super::pooler::BertPooler;
use super::{sigmoid, softmax, Linear, Pooling};
use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::Weights;
use crate::{Error, Result};

/// How logits become scores, chosen as the transformers text-classification pipeline chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreFunction {
    /// Labels are exclusive: `softmax` over them.
    Softmax,
    /// Labels are independent (multi-label) or there is a single output: `sigmoid` of each.
    Sigmoid,
}

impl ScoreFunction {
    pub fn for_config(cfg: &BertConfig) -> ScoreFunction {
        if cfg.problem_type.as_deref() == Some("multi_label_classification") || cfg.id2label.len() == 1 {
            ScoreFunction::Sigmoid
        } else {
            ScoreFunction::Softmax
        }
    }

    pub fn apply(self, logits: &[f32]) -> Vec<f32> {
        match self {
            ScoreFunction::Softmax => softmax(logits),
            ScoreFunction::Sigmoid => logits.iter().map(|&x| sigmoid(x)).collect(),
        }
    }
}

/// One `{label, score}` of the classification output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

/// The label names of a classification head, in class order, from `id2label`; a clear error when the config does
/// not name them (transformers would invent `LABEL_0`, ..., which tells a user nothing).
pub fn labels_from_config(cfg: &BertConfig, task: &str) -> Result<Vec<String>> {
    if cfg.id2label.is_empty() {
        return Err(Error::Config(format!(
            "config.json has no `id2label`, so the {task} labels are unknown: add e.g. \
             \"id2label\": {{\"0\": \"negative\", \"1\": \"positive\"}} with one entry per output of the classifier"
        )));
    }
    // BertConfig::validate has checked the keys are 0..n-1.
    Ok((0..cfg.id2label.len()).map(|i| cfg.label(i)).collect())
}

/// Loads `classifier.weight` `(num_labels, H)` / `classifier.bias`, explaining a disagreement with `id2label`.
pub(crate) fn load_label_linear<B: Backend>(w: &Weights, cfg: &BertConfig, labels: usize, backend: &B)
    -> Result<Linear<B>> {
    if !w.contains("weight") {
        return Err(Error::Weights(format!(
            "this checkpoint has no classification head (`{}.weight` is missing): use a checkpoint fine-tuned for \
             the task (architectures: {:?})",
            w.prefix(),
            cfg.architectures
        )));
    }
    Linear::load(w, labels, cfg.hidden_size, backend).map_err(|e| match e {
        Error::Shape { name, got, .. } => Error::Config(format!(
            "config.json's id2label names {labels} labels but `{name}` has shape {got:?} (one row per label): make \
             id2label list exactly one label per classifier output"
        )),
        e => e,
    })
}

/// Rejects a text pair when the model has a single token type (`type_vocab_size: 1`): it was never trained on
/// pairs, and segment id 1 does not exist in its embedding table. A family without token types (DistilBERT, RoBERTa,
/// a DeBERTa-v3 with `type_vocab_size` 0) reads pairs as `[CLS] A [SEP] B [SEP]` (`<s> A </s></s> B </s>`), all of type 0, as transformers feeds it.
pub fn check_pair_allowed(cfg: &BertConfig, has_pair: bool, task: &str) -> Result<()> {
    if has_pair && cfg.has_token_types() && cfg.type_vocab_size < 2 {
        return Err(Error::Input(format!(
            "{task}: this model takes single texts only (config.json has type_vocab_size {}), but a text_pair was \
             given; send {{\"text\": ...}} alone",
            cfg.type_vocab_size
        )));
    }
    Ok(())
}

/// Labels with their scores, best first (ties keep the labels' order), the best `top_k` or all: the output of every
/// classifier, the checkpoint's and a trained head.
pub fn rank_labels(labels: &[String], scores: Vec<f32>, top_k: Option<usize>) -> Vec<LabelScore> {
    let mut out: Vec<LabelScore> =
        labels.iter().zip(scores).map(|(l, s)| LabelScore { label: l.clone(), score: s }).collect();
    out.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal));
    out.truncate(top_k.unwrap_or(usize::MAX));
    out
}

/// What a sequence classifier reads the hidden states through, to `(B, H)`.
pub enum Pooler<B: Backend> {
    /// BERT's pooler (RoBERTa's and ELECTRA's `classifier.dense`, DistilBERT's `pre_classifier`) on the first token.
    Bert(BertPooler<B>),
    /// ModernBERT's: the first token ([`Pooling::Cls`]) or the mean over the attention mask ([`Pooling::Mean`]),
    /// then `head` (dense, `classifier_activation`, norm).
    Head { pooling: Pooling, head: BertPredictionHeadTransform<B> },
}

/// `BertForSequenceClassification` minus the encoder: pooler + `classifier`.
pub struct SequenceClassifier<B: Backend> {
    pub pooler: Pooler<B>,
    pub classifier: Linear<B>, // (num_labels, H)
    pub labels: Vec<String>,
    pub score: ScoreFunction,
}

impl<B: Backend> SequenceClassifier<B> {
    /// `w` at the root of the checkpoint (`bert.pooler.*`, `classifier.*`; RoBERTa and ELECTRA: `classifier.dense.*`,
    /// `classifier.out_proj.*`). Their head is read under its own names only: their `classifier.*` without
    /// `dense`/`out_proj` is a token classifier's.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (pooler_at, classifier_at) = if cfg.family.has_classification_head_module() {
            ("classifier", "classifier.out_proj")
        } else if cfg.modernbert.is_some() {
            // ModernBERT's `head`: BERT's masked-LM transform, the one module it is (weights::modernbert).
            ("cls.predictions.transform", "classifier")
        } else {
            ("bert.pooler", "classifier")
        };
        // Before the labels: a base model (no classifier) is the common case, and its fix is not id2label.
        if !w.contains(&format!("{classifier_at}.weight")) {
            return Err(Error::Weights(format!(
                "this checkpoint has no sequence-classification head (`{classifier_at}.weight` is missing; \
                 architectures: {:?}): train one on this model (trainHead in JavaScript, `bertgpu train-head`) or load \
                 one (loadHead, `--head FILE`)",
                cfg.architectures
            )));
        }
        let labels = labels_from_config(cfg, "classification")?;
        let classifier = load_label_linear(&w.pp(classifier_at), cfg, labels.len(), backend)?;
        let pooler = match &cfg.modernbert {
            Some(m) => Pooler::Head {
                pooling: m.classifier_pooling,
                head: BertPredictionHeadTransform::load(&w.pp(pooler_at), cfg, backend)?,
            },
            None => Pooler::Bert(BertPooler::load(&w.pp(pooler_at), cfg, backend)?),
        };
        Ok(SequenceClassifier {
            pooler,
            classifier,
            labels,
            score: ScoreFunction::for_config(cfg),
        })
    }

    /// hidden `(B*T, H)` of `batch` → logits `(B, num_labels)`.
    pub fn forward(&self, backend: &B, hidden: &B::Tensor, batch: &Batch) -> Result<B::Tensor> {
        let pooled = match &self.pooler {
            Pooler::Bert(p) => p.forward(backend, hidden, batch.b, batch.t)?, // (B, H)
            Pooler::Head { pooling, head } => {
                let x = match pooling {
                    // `(last_hidden_state * attention_mask.unsqueeze(-1)).sum(dim=1) / attention_mask.sum(...)`
                    Pooling::Mean => backend.mean_pool(hidden, &backend.mask(batch)?, batch.b, batch.t)?,
                    _ => backend.gather_rows(hidden, &(0..batch.b).map(|b| (b * batch.t) as u32).collect::<Vec<_>>())?,
                }; // (B, H)
                head.forward(backend, &x)?
            }
        };
        self.classifier.forward(backend, &pooled, Activation::None)
    }

    /// One row of logits → `{label, score}` best first, the best `top_k` or all.
    pub fn postprocess(&self, logits: &[f32], top_k: Option<usize>) -> Vec<LabelScore> {
        rank_labels(&self.labels, self.score.apply(logits), top_k)
    }
}
