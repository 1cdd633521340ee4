//! Task heads on top of the encoder's hidden states `(B*T, H)`, one struct per Hugging Face module
//! (`transformers/models/bert/modeling_bert.py`), and the host-side post-processing of each task.
//!
//! Every head runs on the device through [`crate::backend::Backend`] ops and is built to keep the read-back small:
//! fill-mask gathers the `[MASK]` rows before projecting onto the vocabulary, the pooler gathers the `[CLS]` rows,
//! token classification and QA project onto a handful of labels. The outputs follow the Hugging Face pipelines'
//! field names (`score`, `token_str`, `entity_group`, ...).
//!
//! | module | HF classes | weights |
//! |---|---|---|
//! | [`masked_lm`] | `BertPredictionHeadTransform`, `BertLMPredictionHead`, `BertOnlyNSPHead` | `cls.predictions.*`, `cls.seq_relationship.*` |
//! | [`pooler`] | `BertPooler` | `bert.pooler.dense.*` |
//! | [`classifier`] | the `classifier` of `BertForSequenceClassification` | `classifier.*` |
//! | [`token_classifier`] | the `classifier` of `BertForTokenClassification` | `classifier.*` |
//! | [`qa`] | `qa_outputs` of `BertForQuestionAnswering` | `qa_outputs.*` |
//! | [`discriminator`] | `ElectraDiscriminatorPredictions` of `ElectraForPreTraining` | `discriminator_predictions.*` |
//! | [`sentence`] | sentence-transformers' `Pooling`, `Dense`, `Normalize` | `{path}/model.safetensors`'s `linear.*` |
//!
//! [`quantize`] encodes embeddings in fewer bits as sentence-transformers' `quantize_embeddings` does.
//!
//! The other families' heads are found under BERT's names (`crate::weights`), except where a head has no BERT
//! twin: RoBERTa's and ELECTRA's sequence classifiers (`classifier.dense`, `classifier.out_proj`) and ELECTRA's
//! discriminator. ALBERT's sentence-order head (`sop_classifier`) is not read.

pub mod classifier;
pub mod discriminator;
pub mod masked_lm;
pub mod pooler;
pub mod qa;
pub mod quantize;
pub mod sentence;
pub mod token_classifier;

use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::weights::Weights;
use crate::{Error, Result};

/// How token vectors become one sentence vector: sentence-transformers' pooling modes ([`crate::sentence`]).
pub use crate::sentence::Pooling;

/// `v / max(‖v‖₂, 1e-12)`, as `torch.nn.functional.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12) as f32;
    v.iter_mut().for_each(|x| *x /= n);
}

/// The task heads a checkpoint carries, loaded with the encoder (so the host weights can be dropped afterwards).
/// A head the file lacks keeps the error that explains why; the error is returned when its task is asked for.
pub struct Heads<B: Backend> {
    masked_lm: Result<masked_lm::BertLMPredictionHead<B>>,
    next_sentence: Result<(pooler::BertPooler<B>, masked_lm::BertOnlyNSPHead<B>)>,
    sequence: Result<classifier::SequenceClassifier<B>>,
    token: Result<token_classifier::TokenClassifier<B>>,
    qa: Result<qa::QaHead<B>>,
    discriminator: Result<discriminator::DiscriminatorHead<B>>,
}

/// A stored load error, handed out again (crate errors are not `Clone`: io errors are reduced to their text).
fn again(e: &Error) -> Error {
    match e {
        Error::Config(s) => Error::Config(s.clone()),
        Error::Weights(s) => Error::Weights(s.clone()),
        Error::Input(s) => Error::Input(s.clone()),
        Error::Gpu(s) => Error::Gpu(s.clone()),
        Error::Gguf(s) => Error::Gguf(s.clone()),
        Error::Tokenizer(s) => Error::Tokenizer(s.clone()),
        Error::Shape { name, got, expected } => {
            Error::Shape { name: name.clone(), got: got.clone(), expected: expected.clone() }
        }
        other => Error::Weights(other.to_string()),
    }
}

impl<B: Backend> Heads<B> {
    /// `w` at the checkpoint root. Never fails: each head's absence is recorded.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Heads<B> {
        let w = &w.for_family(cfg.family);
        Heads {
            masked_lm: masked_lm::BertLMPredictionHead::load(&w.pp("cls.predictions"), cfg, backend),
            next_sentence: masked_lm::BertOnlyNSPHead::load(&w.pp("cls.seq_relationship"), cfg, backend)
                .and_then(|nsp| Ok((pooler::BertPooler::load(&w.pp("bert.pooler"), cfg, backend)?, nsp))),
            sequence: classifier::SequenceClassifier::load(w, cfg, backend),
            token: token_classifier::TokenClassifier::load(w, cfg, backend),
            qa: qa::QaHead::load(w, cfg, backend),
            discriminator: discriminator::DiscriminatorHead::load(w, cfg, backend),
        }
    }

    pub fn masked_lm(&self) -> Result<&masked_lm::BertLMPredictionHead<B>> {
        self.masked_lm.as_ref().map_err(again)
    }
    pub fn next_sentence(&self) -> Result<&(pooler::BertPooler<B>, masked_lm::BertOnlyNSPHead<B>)> {
        self.next_sentence.as_ref().map_err(again)
    }
    pub fn sequence_classifier(&self) -> Result<&classifier::SequenceClassifier<B>> {
        self.sequence.as_ref().map_err(again)
    }
    pub fn token_classifier(&self) -> Result<&token_classifier::TokenClassifier<B>> {
        self.token.as_ref().map_err(again)
    }
    pub fn qa(&self) -> Result<&qa::QaHead<B>> {
        self.qa.as_ref().map_err(again)
    }
    pub fn discriminator(&self) -> Result<&discriminator::DiscriminatorHead<B>> {
        self.discriminator.as_ref().map_err(again)
    }
}

/// A linear layer `y = x·Wᵀ + b` loaded from `<prefix>.weight` `(out, in)` and `<prefix>.bias` `(out)`, where it has
/// one (ModernBERT's `head.dense` and `decoder` have one only where its config says).
pub struct Linear<B: Backend> {
    pub weight: B::Tensor,       // (out, in)
    pub bias: Option<B::Tensor>, // (out)
    pub out_features: usize,
}

impl<B: Backend> Linear<B> {
    /// `w` is positioned at the layer (e.g. `w.pp("classifier")`).
    pub fn load(w: &Weights, out_features: usize, in_features: usize, backend: &B) -> Result<Self> {
        Self::load_with(w, out_features, in_features, true, backend)
    }

    /// [`Self::load`] of a layer with a bias or without one (`bias`).
    pub fn load_with(w: &Weights, out_features: usize, in_features: usize, bias: bool, backend: &B) -> Result<Self> {
        Ok(Linear {
            weight: backend.upload_shared(&w.get_shared("weight", &[out_features, in_features])?)?,
            bias: bias.then(|| backend.upload(w.get("bias", &[out_features])?)).transpose()?,
            out_features,
        })
    }

    /// `act(x·Wᵀ + b)`: x `(M, in)` → `(M, out)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, act: Activation) -> Result<B::Tensor> {
        backend.linear(x, &self.weight, self.bias.as_ref(), act)
    }
}

/// Numerically stable softmax of one row of logits (max subtracted first), in f64 for the sums.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits.iter().map(|&x| ((x - max) as f64).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|&e| (e / sum) as f32).collect()
}

/// `1 / (1 + e^-x)`, the per-label probability of a multi-label classifier.
pub fn sigmoid(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

/// The indices of the `k` largest values, largest first (ties keep the lower index first, as `torch.topk` on CPU
/// tends to; ties in real scores are rare enough not to matter).
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    let k = k.min(values.len());
    // A partial selection first: the vocabulary can be 30k+ entries and k is usually 5.
    if k < idx.len() && k > 0 {
        idx.select_nth_unstable_by(k - 1, |&a, &b| cmp_desc(values[a], values[b], a, b));
        idx.truncate(k);
    }
    idx.sort_by(|&a, &b| cmp_desc(values[a], values[b], a, b));
    idx.truncate(k);
    idx
}

fn cmp_desc(va: f32, vb: f32, a: usize, b: usize) -> std::cmp::Ordering {
    vb.partial_cmp(&va).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_survives_large_logits() {
        let p = softmax(&[1000.0, 999.0, -1000.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((p[0] - 1.0 / (1.0 + (-1.0f64).exp()) as f32).abs() < 1e-6);
        assert_eq!(p[2], 0.0);
    }

    #[test]
    fn top_k_orders_and_clamps() {
        assert_eq!(top_k(&[0.1, 0.5, 0.3, 0.5], 3), vec![1, 3, 2]);
        assert_eq!(top_k(&[0.1, 0.5], 10), vec![1, 0]);
        assert!(top_k(&[0.1], 0).is_empty());
    }

    #[test]
    fn sigmoid_values() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert!((sigmoid(2.0) - 0.880_797).abs() < 1e-6);
    }
}
