//! Sentence embeddings (sentence-transformers' bi-encoder: mean pooling, L2-normalised) trained on (anchor,
//! positive) pairs with the other pairs' positives as negatives: the pooling, `MultipleNegativesRankingLoss` with its
//! gradient, and its accuracy (anchors whose own positive scores highest). The encoder's forward and backward around
//! them are [`super::finetune::FineTuner::embedding_gradients`]'.

use crate::backend::Backend;
use crate::tokenizer::Batch;
use crate::Result;

/// `MultipleNegativesRankingLoss`'s default scale: cosine similarities are multiplied by it before the softmax.
pub const MNRL_SCALE: f32 = 20.0;

/// Mean over each sequence's real tokens of `last (B*T, H)` → `(B, H)`, as a product with the `(B, B*T)` matrix
/// of `1/len` weights (its transpose is the backward), as sentence-transformers' Pooling (mode mean).
pub(super) fn pooled<B: Backend>(be: &B, last: &B::Tensor, batch: &Batch) -> Result<B::Tensor> {
    be.matmul(&pool_matrix(be, batch)?, false, last, false)
}

/// The `(B, B*T)` matrix of [`pooled`]: row b holds `1/len` at sequence b's real tokens.
pub(super) fn pool_matrix<B: Backend>(be: &B, batch: &Batch) -> Result<B::Tensor> {
    let (b, t) = (batch.b, batch.t);
    let mut m = vec![0f32; b * b * t];
    for i in 0..b {
        let mask = &batch.attention_mask[i * t..(i + 1) * t];
        let n = mask.iter().filter(|&&v| v != 0).count().max(1) as f32;
        for (j, &v) in mask.iter().enumerate() {
            if v != 0 {
                m[i * b * t + i * t + j] = 1.0 / n;
            }
        }
    }
    be.input(&m, b, b * t)
}

/// MultipleNegativesRankingLoss of `n` anchor and positive vectors `(n, h)` (row-major), in f64: the loss, its
/// gradients with respect to both sets of (unnormalised) vectors, and the anchors whose own positive scores highest.
pub(super) struct Mnrl {
    pub loss: f32,
    pub da: Vec<f32>,
    pub dp: Vec<f32>,
    pub right: usize,
}

pub(super) fn mnrl(a: &[f32], p: &[f32], n: usize, h: usize) -> Mnrl {
    let unit = |x: &[f32]| -> (Vec<f64>, f64) {
        let norm = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt().max(1e-12);
        (x.iter().map(|&v| v as f64 / norm).collect(), norm)
    };
    let (ua, na): (Vec<Vec<f64>>, Vec<f64>) = a.chunks_exact(h).map(unit).unzip();
    let (up, np): (Vec<Vec<f64>>, Vec<f64>) = p.chunks_exact(h).map(unit).unzip();
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
    let s = MNRL_SCALE as f64;
    let (mut loss, mut right) = (0f64, 0usize);
    let mut ds = vec![vec![0f64; n]; n];
    for i in 0..n {
        let row: Vec<f64> = (0..n).map(|j| s * dot(&ua[i], &up[j])).collect();
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|&v| (v - mx).exp()).sum();
        loss += z.ln() + mx - row[i];
        right += (0..n).all(|j| j == i || row[j] < row[i]) as usize;
        for j in 0..n {
            ds[i][j] = ((row[j] - mx).exp() / z - (i == j) as u8 as f64) / n as f64;
        }
    }
    let back = |u: &[Vec<f64>], other: &[Vec<f64>], norms: &[f64], transpose: bool| -> Vec<f32> {
        let mut out = Vec::with_capacity(n * h);
        for i in 0..n {
            let du: Vec<f64> = (0..h)
                .map(|c| (0..n).map(|j| s * if transpose { ds[j][i] } else { ds[i][j] } * other[j][c]).sum())
                .collect();
            let proj = dot(&u[i], &du);
            out.extend((0..h).map(|c| ((du[c] - u[i][c] * proj) / norms[i]) as f32));
        }
        out
    };
    let (da, dp) = (back(&ua, &up, &na, false), back(&up, &ua, &np, true));
    Mnrl { loss: (loss / n as f64) as f32, da, dp, right }
}
