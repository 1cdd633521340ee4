//! The BERT encoder, one struct per Hugging Face module (`transformers/models/bert/modeling_bert.py`), written
//! once against [`crate::backend::Backend`]: nothing here assumes the CPU (the GPU backend records the ops and only
//! `read` runs them).
//!
//! Every module has `load(w, cfg, backend)` — `w` already prefixed to the module's own path, as in the checkpoint —
//! and `forward`. Activations are `(B*T, H)` row-major matrices (sequence `b`'s token `t` at row `b*T + t`).
//!
//! Lowest first: `embeddings.rs` (word, position and token-type embeddings), `relative.rs` (MPNet's relative position
//! bias), `rotary.rs` (the rotary families' table of cosines and sines), `disentangled.rs` (DeBERTa's relative
//! positions), `layer.rs` (one encoder layer), `bert.rs` (the whole encoder).

mod bert;
pub mod disentangled;
mod embeddings;
mod layer;
pub mod relative;
pub mod rotary;

pub use bert::{BertEncoder, BertModel};
pub use embeddings::BertEmbeddings;
pub use layer::{BertAttention, BertIntermediate, BertLayer, BertOutput, BertSelfAttention, BertSelfOutput, LayerInputs};

use crate::backend::Backend;
use crate::weights::Weights;
use crate::Result;

/// A LayerNorm's gamma and beta `(n)` (`weight`/`bias`, or the legacy `gamma`/`beta`), uploaded.
pub(crate) fn load_layernorm<B: Backend>(w: &Weights, n: usize, backend: &B) -> Result<(B::Tensor, B::Tensor)> {
    let gamma = backend.upload(w.get("weight", &[n])?)?;
    let beta = backend.upload(w.get("bias", &[n])?)?;
    Ok((gamma, beta))
}
