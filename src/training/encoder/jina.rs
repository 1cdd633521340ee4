//! What JinaBERT v2 changes in the trainable encoder (jinaai/jina-bert-implementation): ALiBi in place of a position
//! table, and `JinaBertGLUMLP` in place of BERT's feed-forward. Both are choices of [`super::Encoder`], read by its
//! forward and backward; the parameters are loaded in [`super::load`] under the checkpoint's names.
//!
//! # The math
//!
//! ALiBi: every layer's attention adds the constant `(heads, 2T − 1)` score bias of [`crate::model::alibi`]
//! (`Backend::attention_biased`); its backward (`Backend::attention_backward_biased`) reads the same bias and is
//! asked for no gradient of it, as ModernBERT's window.
//!
//! Gated feed-forward: `u = h1·Wgᵀ` `(R, 2I)` = `[gated | non_gated]` (`gated_layers`, no bias), `g = act(gated) ⊙
//! non_gated`, dropped out (`JinaBertGLUMLP.dropout`, stream [`GLU_STREAM`]` + l`), `o = g·Woᵀ + bo` (`wo`), then
//! `LN(o + h1)` (`layernorm`, no dropout after `wo`). `Backend::glu` computes `up ⊙ act(gate)` of `[up | gate]`, so
//! the forward reads `Wg' = swap(Wg)` and `u' = h1·Wg'ᵀ` = `[non_gated | gated]`, as ModernBERT's `Wi`
//! ([`super::gated`], which also swaps a LoRA adapter's B on `gated_layers`); the layer keeps `Wg'` for its backward.
//! Back: `du' = glu'(dg)`, `dWg = swap(du'ᵀ·h1)`, `dh1 = du'·Wg'`.

use super::gated::SwappedUp;
use super::rotary::GLU_STREAM;
use super::{apply_dropout, DropoutPlan, Saved};
use crate::backend::{Activation, Backend};
use crate::config::{BertConfig, Family};
use crate::model::alibi::Alibi;
use crate::Result;

/// JinaBERT's slopes and its `gated_layers` read with the halves swapped.
pub(super) struct Jina {
    alibi: Alibi,
    /// `u' = h1·Wg'ᵀ` and its backward.
    pub(super) up: SwappedUp,
}

impl Jina {
    /// `None` for the other families.
    pub(super) fn new(cfg: &BertConfig) -> Option<Jina> {
        let alibi = Alibi::new(cfg).filter(|_| cfg.family == Family::JinaBert)?;
        Some(Jina { alibi, up: SwappedUp::new(cfg.intermediate_size) })
    }

    /// ALiBi's `(heads, 2T − 1)` bias of a padded length `t`.
    pub(super) fn bias<B: Backend>(&self, be: &B, t: usize) -> Result<B::Tensor> {
        self.alibi.upload(be, t)
    }

    /// `g = act(gated) ⊙ non_gated` of layer `l`, dropped out.
    pub(super) fn glu<B: Backend>(&self, be: &B, u: &B::Tensor, act: Activation, l: usize, dropout: Option<DropoutPlan>)
        -> Result<B::Tensor> {
        let g = be.glu(u, act)?;
        apply_dropout(be, g, dropout.and_then(|d| d.site(d.hidden, GLU_STREAM + l as u32)))
    }

    /// Back through [`Self::glu`]: `dg` `(R, I)` → `du'` `(R, 2I)`.
    pub(super) fn glu_backward<B: Backend>(&self, be: &B, dg: &B::Tensor, u: &B::Tensor, act: Activation, l: usize,
        saved: &Saved<B::Tensor>) -> Result<B::Tensor> {
        match saved.dropout.and_then(|d| d.site(d.hidden, GLU_STREAM + l as u32)) {
            Some(m) => be.glu_backward(&be.dropout(dg, m)?, u, act),
            None => be.glu_backward(dg, u, act),
        }
    }
}
