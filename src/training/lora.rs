//! LoRA fine-tuning (Hu et al. 2021) as Hugging Face `peft` does it: the encoder's weights frozen, a low-rank
//! update trained beside each targeted linear, the task head trained whole (peft's `modules_to_save`).
//!
//! # The math
//!
//! A targeted linear `y = x·Wᵀ + b` (W `(out, in)`) becomes, with A `(r, in)`, B `(out, r)` and `s = alpha / r`:
//! ```text
//! u = x·Aᵀ (N, r)     y = x·Wᵀ + b + (u·S)·Bᵀ      S = s·I (r, r)
//! ```
//! Backward, from `dy`: `dB = dyᵀ·(u·S)`, `du = (dy·B)·S`, `dA = duᵀ·x`, and `dx` gains `du·A`; W and b get no
//! gradient. `u` is recomputed in the backward (`N·in·r` multiply-adds, small beside the linear's `N·in·out`) rather
//! than kept. Our query/key/value projection is one fused `(3H, H)` linear whose output columns are
//! `[query | key | value]`: an adapter on the query (key, value) uses B placed in rows `0..H` (`H..2H`, `2H..3H`) of a
//! `(3H, r)` zero matrix ([`Backend::scatter_rows`]); its gradient is that block's rows ([`Backend::gather_rows`]),
//! so the zero blocks are never parameters and never train. Where a checkpoint's module is itself packed, peft adapts
//! it whole and so do we: ModernBERT's `attn.Wqkv` `(3H, H)` and `mlp.Wi` `(2I, H)` (`[input; gate]`; the forward
//! reads it halves swapped, `Wi'`, and the adapter's B with it: `B' = B[perm]`, `dB = dB'[perm]`, the swap its own
//! inverse); JinaBERT's `mlp.gated_layers` `(2I, H)` (`[gated; non_gated]`, read swapped) likewise. ALBERT's one
//! layer runs at every pass: its adapters are on that layer once and run at every pass, and their gradients sum the
//! passes' (`params::put`), as peft's on the shared module.
//!
//! A starts as peft's `init_lora_weights=True`: `kaiming_uniform_(a=√5)`, i.e. U(−1/√in, 1/√in), here from the
//! seeded [`super::rng::SplitMix64`]; B starts at zero, so the model starts as the checkpoint. Trained: the adapters and the
//! head's last linear (the classifier, or `qa_outputs`); frozen, without gradients or AdamW moments: everything else,
//! the pooler included (peft's `modules_to_save` for SEQ_CLS is the classifier alone).
//!
//! The adapters on a [`super::finetune::FineTuner`], and peft's files, are [`super::lora_peft`]'s.

use super::params::{put, Param};
use crate::backend::Backend;
use crate::Result;

/// peft's `LoraConfig.lora_alpha` default, ours when none is given (the scale is `alpha / r`).
pub const DEFAULT_ALPHA: f32 = 8.0;

/// Which linears of each encoder layer get an adapter (each family's modules: `lora_peft`'s `target_modules`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum LoraTargets {
    /// The attention's query and value (peft's default `target_modules` for BERT); ModernBERT's packed `Wqkv` whole
    /// (queries, keys and values: one module).
    Qv,
    /// Every linear of the layers: query, key, value, attention.output.dense, intermediate.dense, output.dense
    /// (ModernBERT: `Wqkv`, `Wo` (the attention's and the MLP's), `Wi`; ALBERT: its shared layer's six; JinaBERT: the
    /// attention's four, `mlp.gated_layers`, `mlp.wo`).
    All,
    /// `All` and the embeddings' projection into the layers' width: ALBERT's `embedding_hidden_mapping_in`, ELECTRA's
    /// `embeddings_project` (peft's `target_modules` naming it beside the layers' modules); refused by a family
    /// without one.
    AllProjection,
}

/// LoRA's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoraOptions {
    /// The rank r.
    pub r: usize,
    pub alpha: f32,
    pub targets: LoraTargets,
    /// Export the weights merged (`W + (alpha/r)·B·A`) as a plain folder instead of the adapter.
    pub merge: bool,
}

impl LoraOptions {
    pub fn new(r: usize) -> LoraOptions {
        LoraOptions { r, alpha: DEFAULT_ALPHA, targets: LoraTargets::Qv, merge: false }
    }

    pub fn scale(&self) -> f32 {
        self.alpha / self.r as f32
    }

    /// peft's `target_modules` (module-name suffixes; `output.dense` alone would also match the attention's).
    pub fn target_modules(&self) -> &'static [&'static str] {
        match self.targets {
            LoraTargets::Qv => &["query", "value"],
            LoraTargets::All => &["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"],
            LoraTargets::AllProjection => &["query", "key", "value", "attention.output.dense", "intermediate.dense",
                "output.dense", "embeddings_project"],
        }
    }
}

/// One adapter: its A and B parameters, the base weight it adds to, and for the fused projection the rows of the
/// fused output it covers `(first, total)`.
pub struct Adapter {
    /// The module under transformers' names, e.g. `bert.encoder.layer.0.attention.self.query`.
    pub module: String,
    pub a: usize,
    pub b: usize,
    pub weight: usize,
    pub(super) rows: Option<(usize, usize)>,
    /// The order of B's rows in the output the forward computes, where it differs from the module's own (ModernBERT's
    /// `Wi' = swap(Wi)`): the forward reads `B' = B[perm]`, and B's gradient is `dB'[perm]` (the permutation is its own
    /// inverse). B stays in the module's order, which peft's file and the merge use.
    pub(super) perm: Option<Vec<u32>>,
}

/// The adapters of an encoder and which parameters train.
pub struct Lora<T> {
    pub opts: LoraOptions,
    pub adapters: Vec<Adapter>,
    /// Per parameter, whether it trains.
    pub(super) trains: Vec<bool>,
    /// `S = s·I (r, r)`.
    pub(super) scale: T,
}

impl<T> Lora<T> {
    /// Whether parameter `i` trains (the adapters and the head's `modules_to_save`).
    pub fn trains(&self, i: usize) -> bool {
        self.trains.get(i).copied().unwrap_or(false)
    }

    /// Whether an adapter sits on weight `w`.
    pub fn adapts(&self, w: usize) -> bool {
        self.adapters.iter().any(|a| a.weight == w)
    }

    /// B, or B placed in its rows of the fused output `(total, r)`, or B's rows in the forward's order.
    fn placed<B: Backend<Tensor = T>>(&self, be: &B, params: &[Param<T>], ad: &Adapter) -> Result<Option<T>> {
        if let Some(perm) = &ad.perm {
            return Ok(Some(be.gather_rows(&params[ad.b].tensor, perm)?));
        }
        let Some((first, total)) = ad.rows else { return Ok(None) };
        let rows: Vec<u32> = (first..first + params[ad.b].rows).map(|r| r as u32).collect();
        Ok(Some(be.scatter_rows(&params[ad.b].tensor, &rows, total)?))
    }

    /// `y + s·(x·Aᵀ)·Bᵀ` over the adapters on weight `w`.
    pub fn forward<B: Backend<Tensor = T>>(&self, be: &B, params: &[Param<T>], x: &T, w: usize, mut y: T) -> Result<T> {
        for ad in self.adapters.iter().filter(|a| a.weight == w) {
            let us = be.matmul(&be.matmul(x, false, &params[ad.a].tensor, true)?, false, &self.scale, false)?;
            let placed = self.placed(be, params, ad)?;
            let d = be.matmul(&us, false, placed.as_ref().unwrap_or(&params[ad.b].tensor), true)?;
            y = be.add(&y, &d)?;
        }
        Ok(y)
    }

    /// Back through the adapters on weight `w`: their gradients into `grads`; returns their part of `dx` (`None`
    /// when `w` has none).
    pub fn backward<B: Backend<Tensor = T>>(&self, be: &B, params: &[Param<T>], dy: &T, x: &T, w: usize,
        grads: &mut [Option<T>]) -> Result<Option<T>> {
        let mut dx: Option<T> = None;
        for ad in self.adapters.iter().filter(|a| a.weight == w) {
            let us = be.matmul(&be.matmul(x, false, &params[ad.a].tensor, true)?, false, &self.scale, false)?;
            let placed = self.placed(be, params, ad)?;
            let db = be.matmul(dy, true, &us, false)?; // (out or total, r)
            let db = match ad.rows {
                Some((first, _)) => {
                    let rows: Vec<u32> = (first..first + params[ad.b].rows).map(|r| r as u32).collect();
                    be.gather_rows(&db, &rows)?
                }
                None => db,
            };
            let db = match &ad.perm {
                Some(perm) => be.gather_rows(&db, perm)?, // back to the module's order
                None => db,
            };
            put(be, grads, ad.b, db)?;
            let dus = be.matmul(dy, false, placed.as_ref().unwrap_or(&params[ad.b].tensor), false)?; // (N, r)
            let du = be.matmul(&dus, false, &self.scale, false)?; // S is symmetric
            put(be, grads, ad.a, be.matmul(&du, true, x, false)?)?; // (r, in)
            let d = be.matmul(&du, false, &params[ad.a].tensor, false)?;
            dx = Some(match dx {
                Some(prev) => be.add(&prev, &d)?,
                None => d,
            });
        }
        Ok(dx)
    }
}
