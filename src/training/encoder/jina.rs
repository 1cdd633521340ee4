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
//! the forward reads `Wg' = swap(Wg)` (its halves swapped by `Backend::gather_rows`, the swap its own inverse) and
//! `u' = h1·Wg'ᵀ` = `[non_gated | gated]`. Back: `du' = glu'(dg)`, `dWg = swap(du'ᵀ·h1)`, `dh1 = du'·Wg'`.
//!
//! LoRA on `gated_layers` (peft's adapter on the module, B `(2I, r)` in its `[gated; non_gated]` order): the forward
//! adds `s·(h1·Aᵀ)·B'ᵀ` with `B' = swap(B)` to `u'`, and B's gradient is `swap(dB')`, as ModernBERT's `Wi`
//! ([`super::super::lora`]).

use super::rotary::GLU_STREAM;
use super::{apply_dropout, swap_halves, DropoutPlan, Encoder, Saved};
use crate::backend::{Activation, Backend};
use crate::config::{BertConfig, Family};
use crate::model::alibi::Alibi;
use crate::training::params::put;
use crate::Result;

/// JinaBERT's slopes and the row order that swaps `gated_layers`' halves.
pub(super) struct Jina {
    alibi: Alibi,
    swap: Vec<u32>,
}

impl Jina {
    /// `None` for the other families.
    pub(super) fn new(cfg: &BertConfig) -> Option<Jina> {
        let alibi = Alibi::new(cfg).filter(|_| cfg.family == Family::JinaBert)?;
        Some(Jina { alibi, swap: swap_halves(cfg.intermediate_size) })
    }

    /// ALiBi's `(heads, 2T − 1)` bias of a padded length `t`.
    pub(super) fn bias<B: Backend>(&self, be: &B, t: usize) -> Result<B::Tensor> {
        self.alibi.upload(be, t)
    }

    /// `u' = h1·Wg'ᵀ` `(R, 2I)` = `[non_gated | gated]` from `gated_layers` `w` `(2I, H)`.
    /// With a LoRA adapter on `gated_layers`, its update too (its B's rows swapped likewise: `Adapter::perm`).
    pub(super) fn up<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, h1: &T, w: usize) -> Result<T> {
        let wg = be.gather_rows(enc.t(w), &self.swap)?; // (2I, H): [non_gated; gated]
        let u = be.linear(h1, &wg, None, Activation::None)?;
        match &enc.lora {
            Some(lo) => lo.forward(be, &enc.params, h1, w, u),
            None => Ok(u),
        }
    }

    /// Back through [`Self::up`]: `du'` `(R, 2I)` → `dh1` `(R, H)`, `dWg` into `grads`.
    pub(super) fn up_backward<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, du: &T, h1: &T, w: usize,
        grads: &mut [Option<T>]) -> Result<T> {
        if enc.trains(w) {
            let dwg = be.matmul(du, true, h1, false)?; // (2I, H), swapped
            put(be, grads, w, be.gather_rows(&dwg, &self.swap)?)?;
        }
        let wg = be.gather_rows(enc.t(w), &self.swap)?;
        let dh1 = be.matmul(du, false, &wg, false)?; // (R, 2I)·(2I, H)
        match enc.lora.as_ref().map(|lo| lo.backward(be, &enc.params, du, h1, w, grads)).transpose()?.flatten() {
            Some(d) => be.add(&dh1, &d),
            None => Ok(dh1),
        }
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
