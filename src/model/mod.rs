//! The BERT encoder, one struct per Hugging Face module (`transformers/models/bert/modeling_bert.py`), written
//! once against [`crate::backend::Backend`]: nothing here assumes the CPU (the GPU backend records the ops and only
//! `read` runs them).
//!
//! Every module has `load(w, cfg, backend)` — `w` already prefixed to the module's own path, as in the checkpoint —
//! and `forward`. Activations are `(B*T, H)` row-major matrices (sequence `b`'s token `t` at row `b*T + t`).
//!
//! Lowest first: `embeddings.rs` (word, position and token-type embeddings), `relative.rs` (MPNet's relative position
//! bias), `alibi.rs` (JinaBERT's ALiBi as a score bias), `rotary.rs` (the rotary families' table of cosines and sines), `window.rs` (ModernBERT's sliding window as
//! a score bias, with its own rotary table), `disentangled.rs` (DeBERTa's relative positions), `layer.rs` (one
//! encoder layer, post-LN or pre-LN), `bert.rs` (the whole encoder).

pub mod alibi;
mod bert;
pub mod disentangled;
mod embeddings;
mod layer;
pub mod relative;
pub mod rotary;
pub mod window;

pub use bert::{BertEncoder, BertModel};
pub use embeddings::BertEmbeddings;
pub use layer::{BertAttention, BertIntermediate, BertLayer, BertOutput, BertSelfAttention, BertSelfOutput, LayerInputs, Local};

use crate::backend::Backend;
use crate::config::BertConfig;
use crate::weights::Weights;
use crate::Result;

/// A LayerNorm's gamma and beta `(n)` (`weight`/`bias`, or the legacy `gamma`/`beta`), uploaded; β zeros where the
/// model's norms have none (ModernBERT's `norm_bias: false`, `nn.LayerNorm(bias=False)`).
pub(crate) fn load_layernorm<B: Backend>(w: &Weights, n: usize, cfg: &BertConfig, backend: &B)
    -> Result<(B::Tensor, B::Tensor)> {
    let gamma = backend.upload(w.get("weight", &[n])?)?;
    let beta = match cfg.norm_bias {
        true => backend.upload(w.get("bias", &[n])?)?,
        false => backend.input(&vec![0.0; n], 1, n)?,
    };
    Ok((gamma, beta))
}

/// `nn.LayerNorm`: γ, β `(H)` and ε, on a row-wise `LN(x + residual)`.
pub struct LayerNorm<B: Backend> {
    gamma: B::Tensor, // (H)
    beta: B::Tensor,  // (H)
    eps: f32,
}

impl<B: Backend> LayerNorm<B> {
    /// `w` at the norm (`…LayerNorm`, ModernBERT's `attn_norm`...).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (gamma, beta) = load_layernorm(w, cfg.hidden_size, cfg, backend)?;
        Ok(LayerNorm { gamma, beta, eps: cfg.layer_norm_eps })
    }

    /// x `(M, H)`, residual `(M, H)` → `LN(x + residual)` `(M, H)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, residual: Option<&B::Tensor>) -> Result<B::Tensor> {
        backend.layernorm(x, residual, &self.gamma, &self.beta, self.eps)
    }
}
