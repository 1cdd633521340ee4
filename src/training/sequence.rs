//! Sequence classification (`BertForSequenceClassification`: one label per text or text pair): the pooler and the
//! classifier on `[CLS]` after the encoder's last hidden state `x (B*T, H)`, their backward, the loss and the
//! accuracy.
//! ```text
//! cls* = x[b·T]   z* = cls·Wpᵀ + bp   pooled* = tanh(z)   logits = pooled·Wcᵀ + bc   (B, C)
//! L = mean_b CE(logits_b, y_b)
//! ```

use super::encoder::{apply_dropout, Encoder};
use super::loss::{argmax, mean_cross_entropy};
use crate::backend::{Activation, Backend, Dropout};
use crate::{Error, Result};

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
/// gradient with respect to `last`; the head's parameters' gradients go into `grads`. `head_drop`: dropout on the
/// pooled vector the classifier reads (a training forward's).
#[allow(clippy::too_many_arguments)]
pub(super) fn gradients<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor, (b, t): (usize, usize),
    pool: [usize; 2], classifier: [usize; 2], y: &[u32], head_drop: Option<Dropout>, grads: &mut [Option<B::Tensor>])
    -> Result<(B::Tensor, B::Tensor)> {
    let undrop = |d: B::Tensor| apply_dropout(be, d, head_drop);
    let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
    let cls = be.gather_rows(&last, &rows)?; // (B, H)
    let z = be.linear(&cls, enc.t(pool[0]), Some(enc.t(pool[1])), Activation::None)?;
    let pooled = apply_dropout(be, be.activation(&z, Activation::Tanh)?, head_drop)?;
    let logits = be.linear(&pooled, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)?;
    let dz = be.softmax_xent_grad(&logits, y)?; // (B, C)
    let dpooled = undrop(enc.linear_backward(be, &dz, &pooled, classifier[0], classifier[1], grads)?)?;
    let dz = be.activation_grad(&dpooled, &z, Activation::Tanh)?;
    let dcls = enc.linear_backward(be, &dz, &cls, pool[0], pool[1], grads)?;
    Ok((logits, be.scatter_rows(&dcls, &rows, b * t)?))
}

/// The logits `(B, C)` of an evaluation forward's `last`.
pub(super) fn logits<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor, (b, t): (usize, usize),
    pool: [usize; 2], classifier: [usize; 2]) -> Result<B::Tensor> {
    let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
    let cls = be.gather_rows(last, &rows)?;
    let pooled = be.linear(&cls, enc.t(pool[0]), Some(enc.t(pool[1])), Activation::Tanh)?;
    be.linear(&pooled, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)
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
