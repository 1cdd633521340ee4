//! Token classification (`BertForTokenClassification`: one label per token, −100 where no loss is taken): the
//! classifier on every row of the encoder's last hidden state `x (B*T, H)`, its backward, the loss and the accuracy.
//! ```text
//! logits* = x·Wcᵀ + bc (B*T, C)       L = mean over labelled tokens CE (label −100: ignored)
//! ```

use super::encoder::{apply_dropout, Encoder};
use super::loss::{argmax, mean_cross_entropy, IGNORE};
use crate::backend::{Activation, Backend, Dropout};
use crate::{Error, Result};

/// Refuses labels that do not fit a batch of `b` × `t` tokens or a classifier of `labels` classes, and a batch
/// without a labelled token.
pub(super) fn check(labels: usize, (b, t): (usize, usize), y: &[i64]) -> Result<()> {
    if y.len() != b * t {
        return Err(Error::Input(format!("{} token labels for a batch of {b} × {t} tokens", y.len())));
    }
    if let Some(l) = y.iter().find(|&&l| l != IGNORE && !(0..labels as i64).contains(&l)) {
        return Err(Error::Input(format!("token label {l} is outside the classifier's {labels} classes")));
    }
    if y.iter().all(|&l| l == IGNORE) {
        return Err(Error::Input("no token of the batch has a label (all are -100)".into()));
    }
    Ok(())
}

/// The logits `(B*T, C)` of the encoder's output `last` and the loss's gradient with respect to it; the head's
/// parameters' gradients go into `grads`. `head_drop`: dropout on the classifier's input (a training forward's).
#[allow(clippy::too_many_arguments)]
pub(super) fn gradients<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor, (b, t): (usize, usize),
    classifier: [usize; 2], y: &[i64], head_drop: Option<Dropout>, grads: &mut [Option<B::Tensor>])
    -> Result<(B::Tensor, B::Tensor)> {
    let undrop = |d: B::Tensor| apply_dropout(be, d, head_drop);
    let last = apply_dropout(be, last, head_drop)?;
    let logits = be.linear(&last, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)?;
    // The mean over labelled tokens: the softmax gradient of those rows alone (it divides by their
    // count), scattered back among the ignored ones' zeros.
    let rows: Vec<u32> = (0..b * t).filter(|&r| y[r] != IGNORE).map(|r| r as u32).collect();
    let labels: Vec<u32> = rows.iter().map(|&r| y[r as usize] as u32).collect();
    let dz = be.softmax_xent_grad(&be.gather_rows(&logits, &rows)?, &labels)?;
    let dlogits = be.scatter_rows(&dz, &rows, b * t)?;
    let dlast = enc.linear_backward(be, &dlogits, &last, classifier[0], classifier[1], grads)?;
    Ok((logits, undrop(dlast)?))
}

/// The logits `(B*T, C)` of an evaluation forward's `last`.
pub(super) fn logits<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor, classifier: [usize; 2])
    -> Result<B::Tensor> {
    be.linear(last, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)
}

/// (right, counted): the labelled tokens whose top class is their label.
pub(super) fn correct(logits: &[f32], labels: usize, y: &[i64]) -> (usize, usize) {
    let pairs = logits.chunks_exact(labels).zip(y.iter()).filter(|(_, &l)| l != IGNORE);
    let (mut right, mut n) = (0, 0);
    for (r, &l) in pairs {
        right += (argmax(r) == l as usize) as usize;
        n += 1;
    }
    (right, n)
}

/// The mean cross-entropy over the labelled tokens of the logits (read back), in f64.
pub(super) fn loss(logits: &[f32], labels: usize, y: &[i64]) -> f32 {
    mean_cross_entropy(logits, labels, y.iter().map(|&l| (l != IGNORE).then_some(l as u32)))
}
