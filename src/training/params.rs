//! The trainable tensors every trainer of the encoder shares: a [`Param`] (a tensor with its names and whether it
//! decays) and the gradient list they fill ([`put`]). Below the encoder and its adapters, so that both name them.

use crate::backend::{Backend, Dtype};
use crate::Result;

/// One trainable tensor: `(rows, cols)` on the backend (a vector is `(1, n)`), under the Hugging Face names it
/// stands for. The fused query/key/value projection stands for three: rows `[query; key; value]`.
pub struct Param<T> {
    pub names: Vec<String>,
    pub tensor: T,
    pub rows: usize,
    pub cols: usize,
    /// Whether PyTorch stores it 2-D (a weight, an embedding table, even of one row: RoBERTa's token types), not 1-D
    /// (a bias, a LayerNorm parameter).
    pub matrix: bool,
    /// Whether AdamW's weight decay applies: not to biases and LayerNorm weights (transformers' Trainer).
    pub decay: bool,
    /// How the backend stores it: f32, or a frozen linear weight of a quantized base as the checkpoint stores it
    /// (f16, Q8_0, Q4_0; LoRA over it).
    pub stored: Dtype,
}

impl<T> Param<T> {
    /// Bytes it takes on the backend, as stored.
    pub fn bytes(&self) -> u64 {
        let (per, bytes) = self.stored.block();
        ((self.rows * self.cols).div_ceil(per) * bytes) as u64
    }
}

/// Stores a gradient, or adds it to the one already there (a parameter used by two forwards, e.g. the anchors and
/// the positives of an embedding pair).
pub fn put<B: Backend>(be: &B, grads: &mut [Option<B::Tensor>], i: usize, g: B::Tensor) -> Result<()> {
    grads[i] = Some(match grads[i].take() {
        None => g,
        Some(prev) => be.add(&prev, &g)?,
    });
    Ok(())
}
