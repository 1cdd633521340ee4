//! ModernBERT's task heads (transformers `ModernBertForSequenceClassification`, `ModernBertForTokenClassification`,
//! `ModernBertForQuestionAnswering`):
//! `ModernBertPredictionHead` (`head.dense`, with a bias where `classifier_bias` says; `classifier_activation`;
//! `head.norm`, with β where `norm_bias` says), then `classifier`, after the encoder's last hidden state
//! `x (B*T, H)`; their backward.
//! ```text
//! sequence:  p* = x[b·T] (`classifier_pooling: cls`) or Σ_t m_bt·x_bt / Σ_t m_bt (`mean`)     (B, H)
//! head:      z* = p·Wdᵀ (+ bd)    a* = act(z)    h* = LN(a)    logits = h·Wcᵀ + bc
//! token:     the head on every row, then the token classifier (`super::token`)
//! qa:        the head on every row, then `classifier` (2, H) as the span head (`super::qa`)
//! ```
//! Back: `dh = dlogits·Wc`, `da = LN'(dh)`, `dz = act'(dz)·…`, `dp = dz·Wd`, and to `x` through the pooling's
//! transpose (`Backend::scatter_rows` of the first rows, or the pooling matrix's transpose). A training forward drops
//! `h` before the classifier (`classifier_dropout`, stream `HEAD_STREAM`), and the backward `dh` with the same mask.

use super::embedding;
use super::encoder::{apply_dropout, get, Encoder, Norm};
use super::loss::IGNORE;
use super::rng::SplitMix64;
use crate::backend::{Activation, Backend, Dropout};
use crate::config::BertConfig;
use crate::sentence::Pooling;
use crate::tokenizer::Batch;
use crate::weights::{HostTensor, Weights};
use crate::{Error, Result};

/// `head`'s parameters and activation, and the sequence classifier's pooling.
#[derive(Clone, Copy, Debug)]
pub(super) struct ModernHead {
    dense: usize,
    dense_b: Option<usize>,
    norm: Norm,
    act: Activation,
    mean: bool,
}

struct HeadSaved<T> {
    z: T,
    a: T,
}

impl ModernHead {
    /// The checkpoint's `head` (under `root`), or a new one: `head.dense` ~ N(0, initializer_range) with a zero
    /// bias, `head.norm` γ = 1, β = 0.
    pub(super) fn load<B: Backend>(be: &B, enc: &mut Encoder<B::Tensor>, cfg: &BertConfig, root: &Weights,
        rng: &mut SplitMix64) -> Result<ModernHead> {
        let m = cfg.modernbert.as_ref().ok_or_else(|| Error::Config("a ModernBERT config without its heads' keys".into()))?;
        let h = cfg.hidden_size;
        let p = root.pp("head");
        let fresh = !p.contains("dense.weight");
        let tensor = |name: &str, shape: &[usize], init: &dyn Fn() -> Vec<f32>| -> Result<HostTensor> {
            match fresh {
                true => HostTensor::f32(shape.to_vec(), init()),
                false => get(&p, name, shape),
            }
        };
        let dw = match fresh {
            true => HostTensor::f32(vec![h, h], super::init::normal(rng, h * h, cfg.initializer_range))?,
            false => get(&p, "dense.weight", &[h, h])?,
        };
        let dense = enc.push(be, vec!["head.dense.weight".into()], &dw, h, h, true)?;
        let dense_b = match m.classifier_bias {
            true => Some(enc.push(be, vec!["head.dense.bias".into()], &tensor("dense.bias", &[h], &|| vec![0.0; h])?, 1, h, false)?),
            false => None,
        };
        let g = enc.push(be, vec!["head.norm.weight".into()], &tensor("norm.weight", &[h], &|| vec![1.0; h])?, 1, h, false)?;
        let b = match cfg.norm_bias {
            true => Some(enc.push(be, vec!["head.norm.bias".into()], &tensor("norm.bias", &[h], &|| vec![0.0; h])?, 1, h, false)?),
            false => None,
        };
        Ok(ModernHead { dense, dense_b, norm: Norm { g, b }, act: m.classifier_activation, mean: m.classifier_pooling == Pooling::Mean })
    }

    fn forward<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, x: &B::Tensor) -> Result<(B::Tensor, HeadSaved<B::Tensor>)> {
        let z = be.linear(x, enc.t(self.dense), self.dense_b.map(|b| enc.t(b)), Activation::None)?;
        let a = be.activation(&z, self.act)?;
        let h = enc.norm(be, &a, self.norm)?;
        Ok((h, HeadSaved { z, a }))
    }

    fn backward<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, dh: &B::Tensor, x: &B::Tensor,
        s: &HeadSaved<B::Tensor>, grads: &mut [Option<B::Tensor>]) -> Result<B::Tensor> {
        let da = enc.norm_backward(be, dh, &s.a, self.norm, grads)?;
        let dz = be.activation_grad(&da, &s.z, self.act)?;
        enc.linear_backward(be, &dz, x, self.dense, self.dense_b, grads)
    }

    /// The sequence classifier's input `(B, H)` from the last hidden state, and the pooling matrix where it means.
    fn pool<B: Backend>(&self, be: &B, last: &B::Tensor, batch: &Batch) -> Result<(B::Tensor, Option<B::Tensor>)> {
        if self.mean {
            let p = embedding::pool_matrix(be, batch)?; // (B, B*T)
            return Ok((be.matmul(&p, false, last, false)?, Some(p)));
        }
        let rows: Vec<u32> = (0..batch.b).map(|i| (i * batch.t) as u32).collect();
        Ok((be.gather_rows(last, &rows)?, None))
    }

    /// Sequence classification: the logits `(B, C)` and the loss's gradient with respect to `last`; the head's and
    /// the classifier's gradients into `grads`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sequence_gradients<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor,
        batch: &Batch, classifier: [usize; 2], y: &[u32], head_drop: Option<Dropout>, grads: &mut [Option<B::Tensor>])
        -> Result<(B::Tensor, B::Tensor)> {
        let (pooled, matrix) = self.pool(be, &last, batch)?;
        let (h, saved) = self.forward(be, enc, &pooled)?;
        let hd = apply_dropout(be, h, head_drop)?; // `classifier_dropout`
        let logits = be.linear(&hd, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)?;
        let dz = be.softmax_xent_grad(&logits, y)?; // (B, C)
        let dh = apply_dropout(be, enc.linear_backward(be, &dz, &hd, classifier[0], classifier[1], grads)?, head_drop)?;
        let dpooled = self.backward(be, enc, &dh, &pooled, &saved, grads)?;
        let dlast = match matrix {
            Some(p) => be.matmul(&p, true, &dpooled, false)?, // (B*T, H)
            None => {
                let rows: Vec<u32> = (0..batch.b).map(|i| (i * batch.t) as u32).collect();
                be.scatter_rows(&dpooled, &rows, batch.b * batch.t)?
            }
        };
        Ok((logits, dlast))
    }

    /// The sequence classifier's logits `(B, C)` of an evaluation forward's `last`.
    pub(super) fn sequence_logits<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor, batch: &Batch,
        classifier: [usize; 2]) -> Result<B::Tensor> {
        let (h, _) = self.forward(be, enc, &self.pool(be, last, batch)?.0)?;
        be.linear(&h, enc.t(classifier[0]), Some(enc.t(classifier[1])), Activation::None)
    }

    /// Token classification: the head on every row, then [`super::token::gradients`]; the logits `(B*T, C)` and
    /// the gradient with respect to `last`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn token_gradients<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor,
        bt: (usize, usize), classifier: [usize; 2], y: &[i64], head_drop: Option<Dropout>, grads: &mut [Option<B::Tensor>])
        -> Result<(B::Tensor, B::Tensor)> {
        debug_assert!(y.iter().any(|&l| l != IGNORE));
        let (h, saved) = self.forward(be, enc, &last)?;
        let (logits, dh) = super::token::gradients(be, enc, h, bt, classifier, y, head_drop, grads)?;
        Ok((logits, self.backward(be, enc, &dh, &last, &saved, grads)?))
    }

    /// Question answering (`ModernBertForQuestionAnswering`): the head on every row, dropped (`classifier_dropout`),
    /// then [`super::qa::gradients`] with `classifier` as the span head; the logits `(B*T, 2)` and the gradient with
    /// respect to `last`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn qa_gradients<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: B::Tensor,
        bt: (usize, usize), classifier: [usize; 2], (start, end): (&[u32], &[u32]), head_drop: Option<Dropout>,
        grads: &mut [Option<B::Tensor>]) -> Result<(B::Tensor, B::Tensor)> {
        let (h, saved) = self.forward(be, enc, &last)?;
        let hd = apply_dropout(be, h, head_drop)?;
        let (logits, dh) = super::qa::gradients(be, enc, hd, bt, classifier, (start, end), None, grads)?;
        let dh = apply_dropout(be, dh, head_drop)?;
        Ok((logits, self.backward(be, enc, &dh, &last, &saved, grads)?))
    }

    /// The span head's logits `(B*T, 2)` of an evaluation forward's `last`.
    pub(super) fn qa_logits<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor,
        classifier: [usize; 2]) -> Result<B::Tensor> {
        let (h, _) = self.forward(be, enc, last)?;
        super::qa::logits(be, enc, &h, classifier)
    }

    /// The token classifier's logits `(B*T, C)` of an evaluation forward's `last`.
    pub(super) fn token_logits<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, last: &B::Tensor,
        classifier: [usize; 2]) -> Result<B::Tensor> {
        let (h, _) = self.forward(be, enc, last)?;
        super::token::logits(be, enc, &h, classifier)
    }
}
