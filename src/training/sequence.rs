//! Sequence classification (`BertForSequenceClassification` and its relatives: one label per text or text pair): a
//! dense layer and an activation on the first token (`[CLS]`, `<s>`), then the classifier, after the encoder's last
//! hidden state `x (B*T, H)`; their backward, the loss and the accuracy.
//! ```text
//! cls* = drop₀(x[b·T])   z* = cls·Wpᵀ + bp   pooled* = drop(act(z))   logits = pooled·Wcᵀ + bc   (B, C)
//! L = mean_b CE(logits_b, y_b)
//! ```
//! The families differ in names and two choices ([`SequenceHead`]): BERT's pooler (`pooler.dense` + tanh, then
//! `classifier`), DistilBERT's `pre_classifier` + ReLU, RoBERTa's `RobertaClassificationHead` (`classifier.dense` +
//! tanh + `classifier.out_proj`) and ELECTRA's `ElectraClassificationHead` (the same with the exact GELU); the last
//! two drop the first token's vector before their dense layer too (`drop₀`, at the classifier's probability), as
//! DeBERTa's `ContextPooler` does (at its `pooler_dropout`; its classifier's dropout is `cls_dropout`).

use super::encoder::{apply_dropout, Encoder};
use super::loss::{argmax, mean_cross_entropy};
use crate::backend::{Activation, Backend, Dropout};
use crate::{Error, Result};

/// The head's parameters and its family's choices.
#[derive(Clone, Copy, Debug)]
pub(super) struct SequenceHead {
    /// The dense layer on the first token: weight `(H, H)` and bias.
    pub pool: [usize; 2],
    /// The classifier: weight `(C, H)` and bias.
    pub classifier: [usize; 2],
    pub labels: usize,
    /// After the dense layer (`config::Family::pooler_activation`).
    pub act: Activation,
    /// Whether the first token's vector is dropped before the dense layer (RoBERTa's and ELECTRA's heads).
    pub drop_first: bool,
    /// ModernBERT's `head` in place of the dense layer (`pool` then names `head.dense` alone, unread).
    pub modern: Option<super::modern_head::ModernHead>,
}

/// The stream of the dropout before the dense layer (`drop₀`), apart from the classifier input's.
pub(super) const FIRST_STREAM: u32 = super::encoder::HEAD_STREAM - 1;

/// Refuses labels that do not fit a batch of `b` texts or a classifier of `labels` classes.
pub(super) fn check(labels: usize, b: usize, y: &[u32]) -> Result<()> {
    if y.len() != b {
        return Err(Error::Input(format!("{} labels for a batch of {b} texts", y.len())));
    }
    if let Some(l) = y.iter().find(|&&l| l as usize >= labels) {
        return Err(Error::Input(format!("label {l} is outside the classifier's {labels} classes")));
    }
    Ok(())
}

/// The logits `(B, C)` of the encoder's output `last (B*T, H)` for a batch of `b` × `t` tokens, and the loss's
/// gradient with respect to `last`; the head's parameters' gradients go into `grads`. A training forward's dropouts:
/// `head_drop` on the pooled vector the classifier reads, `first_drop` ([`FIRST_STREAM`]) on the first token's vector
/// (`drop₀`).
#[allow(clippy::too_many_arguments)]
pub(super) fn gradients<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor, (b, t): (usize, usize),
    head: SequenceHead, y: &[u32], (head_drop, first_drop): (Option<Dropout>, Option<Dropout>),
    grads: &mut [Option<B::Tensor>]) -> Result<(B::Tensor, B::Tensor)> {
    let SequenceHead { pool, classifier, act, .. } = head;
    let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
    let cls = apply_dropout(be, be.gather_rows(&last, &rows)?, first_drop)?; // (B, H)
    let z = be.linear(&cls, enc.t(pool[0]), Some(enc.t(pool[1])), Activation::None)?;
    let pooled = apply_dropout(be, be.activation(&z, act)?, head_drop)?;
    let logits = be.linear(&pooled, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)?;
    let dz = be.softmax_xent_grad(&logits, y)?; // (B, C)
    let dpooled = apply_dropout(be, enc.linear_backward(be, &dz, &pooled, classifier[0], classifier[1], grads)?, head_drop)?;
    let dz = be.activation_grad(&dpooled, &z, act)?;
    let dcls = apply_dropout(be, enc.linear_backward(be, &dz, &cls, pool[0], pool[1], grads)?, first_drop)?;
    Ok((logits, be.scatter_rows(&dcls, &rows, b * t)?))
}

/// The logits `(B, C)` of an evaluation forward's `last`.
pub(super) fn logits<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor, (b, t): (usize, usize),
    head: SequenceHead) -> Result<B::Tensor> {
    let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
    let cls = be.gather_rows(last, &rows)?;
    let pooled = be.linear(&cls, enc.t(head.pool[0]), Some(enc.t(head.pool[1])), head.act)?;
    be.linear(&pooled, enc.t(head.classifier[0]), Some(enc.t(head.classifier[1])), Activation::None)
}

/// (right, counted): the sequences whose top class is their label.
pub(super) fn correct(logits: &[f32], labels: usize, y: &[u32]) -> (usize, usize) {
    let right = logits.chunks_exact(labels).zip(y.iter()).filter(|(r, &l)| argmax(r) == l as usize).count();
    (right, y.len())
}

/// The mean cross-entropy of the logits (read back), in f64.
pub(super) fn loss(logits: &[f32], labels: usize, y: &[u32]) -> f32 {
    mean_cross_entropy(logits, labels, y.iter().map(|&l| Some(l)))
}
