//! Extractive question answering (`BertForQuestionAnswering`: the answer's start and end token): `qa_outputs` on
//! every row of the encoder's last hidden state `x (B*T, H)`, its backward, the loss and the accuracy.
//! DistilBERT's head drops `x` first (`DistilBertForQuestionAnswering`'s `qa_dropout`; the backward applies the
//! same mask to `dx`); the other families' heads have no dropout.
//! ```text
//! logits* = drop(x)·Wqaᵀ + bqa (B*T, 2)     start, end = columns 0, 1 as (B, T)
//! L = (mean_b CE(start_b, s_b) + mean_b CE(end_b, e_b)) / 2   (softmax over all T positions, as
//!     BertForQuestionAnswering)
//! ```
//! SQuAD's exact match and F1 over whole examples are [`super::metrics`]'.

use super::encoder::{apply_dropout, Encoder};
use super::loss::{argmax, mean_cross_entropy};
use crate::backend::{Activation, Backend, Dropout};
use crate::{Error, Result};

/// Refuses answer spans that do not fit a batch of `b` × `t` tokens (start ≤ end < t).
pub(super) fn check((b, t): (usize, usize), start: &[u32], end: &[u32]) -> Result<()> {
    if start.len() != b || end.len() != b {
        return Err(Error::Input(format!("{} starts and {} ends for a batch of {b}", start.len(), end.len())));
    }
    for (&s, &e) in start.iter().zip(end.iter()) {
        if s as usize >= t || e as usize >= t || s > e {
            return Err(Error::Input(format!(
                "answer span {s}..={e} is not inside the sequence of {t} tokens (start ≤ end < {t})"
            )));
        }
    }
    Ok(())
}

/// The logits `(B*T, 2)` of the encoder's output `last` (dropped by `drop` first, where the head has a dropout) and
/// the loss's gradient with respect to it; the head's parameters' gradients go into `grads`.
#[allow(clippy::too_many_arguments)]
pub(super) fn gradients<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor, (b, t): (usize, usize),
    qa: [usize; 2], (start, end): (&[u32], &[u32]), drop: Option<Dropout>, grads: &mut [Option<B::Tensor>])
    -> Result<(B::Tensor, B::Tensor)> {
    let last = apply_dropout(be, last, drop)?; // (B*T, H)
    let logits = be.linear(&last, enc.t(qa[0]), Some(enc.t(qa[1])), Activation::None)?; // (B*T, 2)
    // Column c of the logits as (B, T): logits · e_c, reshaped; back: d_c (B*T, 1) · (½ e_c)ᵀ, the ½
    // of the two losses' mean.
    let mut dlogits: Option<B::Tensor> = None;
    for (c, pos) in [(0usize, start), (1, end)] {
        let sel: Vec<f32> = (0..2).map(|k| if k == c { 1.0 } else { 0.0 }).collect();
        let col = be.matmul(&logits, false, &be.input(&sel, 2, 1)?, false)?; // (B*T, 1)
        let dcol = be.softmax_xent_grad(&be.reshape(&col, b, t)?, pos)?; // (B, T)
        let half: Vec<f32> = sel.iter().map(|v| v * 0.5).collect();
        let d = be.matmul(&be.reshape(&dcol, b * t, 1)?, false, &be.input(&half, 1, 2)?, false)?;
        dlogits = Some(match dlogits {
            None => d,
            Some(prev) => be.add(&prev, &d)?,
        });
    }
    let dlogits = dlogits.expect("two columns");
    let dlast = enc.linear_backward(be, &dlogits, &last, qa[0], qa[1], grads)?;
    Ok((logits, apply_dropout(be, dlast, drop)?)) // the same mask on the gradient
}

/// The logits `(B*T, 2)` of an evaluation forward's `last`.
pub(super) fn logits<B: Backend>(be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor, qa: [usize; 2]) -> Result<B::Tensor> {
    be.linear(last, enc.t(qa[0]), Some(enc.t(qa[1])), Activation::None)
}

/// (right, counted): the windows of a batch of `b` × `t` tokens whose best start and best end are both the target's.
pub(super) fn correct(logits: &[f32], (b, t): (usize, usize), start: &[u32], end: &[u32]) -> (usize, usize) {
    let right = (0..b)
        .filter(|&i| {
            let col = |c: usize| (0..t).map(|k| logits[(i * t + k) * 2 + c]).collect::<Vec<f32>>();
            argmax(&col(0)) == start[i] as usize && argmax(&col(1)) == end[i] as usize
        })
        .count();
    (right, b)
}

/// The mean of the start's and the end's cross-entropy over each window's `t` positions (read back), in f64.
pub(super) fn loss(logits: &[f32], t: usize, start: &[u32], end: &[u32]) -> f32 {
    let col = |c: usize| logits.iter().skip(c).step_by(2).copied().collect::<Vec<f32>>();
    let ce = |c: usize, pos: &[u32]| mean_cross_entropy(&col(c), t, pos.iter().map(|&p| Some(p)));
    (ce(0, start) + ce(1, end)) / 2.0
}
