//! DeBERTa-v2/v3's disentangled attention as trained parameters (the inference side and the math of the scores:
//! [`crate::model::disentangled`]): the relative table `encoder.rel_embeddings.weight` `(2·span, H)` and, with
//! `norm_rel_ebd: "layer_norm"`, its LayerNorm `encoder.LayerNorm`, one pair every layer reads
//! (`DebertaV2Encoder.get_rel_embedding` runs once per forward), so their gradients are the sums of every layer's.
//!
//! Forward, per padded length T: the rows `lo..=hi` of the table that T's offsets reach are gathered
//! (`Backend::gather_rows`), LayerNorm'd (`rel = LN(rows)`, `(R, H)`), and each layer projects them with its own
//! query/key/value weights, biases included (`share_att_key`: `pos_l = drop(rel)·Wqkvᵀ + bqkv`, `(R, 3H)`, the
//! value third unread), for `Backend::attention_disentangled` (with dropout: `Backend::attention_dropout_disentangled`)
//! with the row index `(1, 2T − 1)`. `drop` is `DisentangledSelfAttention.pos_dropout` (the hidden probability) on
//! the table each layer reads, stream [`pos_stream`]`(l)`.
//!
//! Back, per layer: `Backend::attention_backward_disentangled` gives `dpos_l` `(R, 3H)`; through the projection
//! (the layer's weight and bias get `dpos_lᵀ·drop(rel)` and its column sums beside their other gradient, LoRA
//! adapters on the projection theirs) to `drel_l`, back through the dropout; summed over the layers, then back
//! through the LayerNorm and scattered to the rows `lo..=hi` of the table (`Backend::scatter_rows`; rows no offset of
//! T reaches get zero).

use super::Encoder;
use crate::backend::{Backend, Dropout};
use crate::config::{BertConfig, DebertaRelative};
use crate::weights::Weights;
use crate::Result;

/// The relative table's parameter, its LayerNorm's (γ, β) if any, and the bucketing.
#[derive(Clone, Copy)]
pub(super) struct DisIdx {
    table: usize,
    norm: Option<[usize; 2]>,
    relative: DebertaRelative,
}

/// What a forward keeps: the rows read, their LayerNorm's input and output, and the row index every layer used.
pub(super) struct DisSaved<T> {
    rows: Vec<u32>,
    raw: T,
    pub rel: T,
    pub index: T,
}

/// The dropout stream of layer `l`'s `pos_dropout`, apart from the encoder's `3l + 1..=3l + 3` and the sequence
/// head's two (`u32::MAX` and `u32::MAX − 1`).
pub(super) fn pos_stream(l: usize) -> u32 {
    u32::MAX - 2 - l as u32
}

impl DisIdx {
    /// The table's parameter.
    pub fn table(&self) -> usize {
        self.table
    }

    /// The table of `w` (the family's root, under BERT's names) as parameters of `enc`, named by `name` (BERT's
    /// name → the family's); `None` without DeBERTa's relative attention.
    pub fn load<B: Backend<Tensor = T>, T>(be: &B, enc: &mut Encoder<T>, cfg: &BertConfig, w: &Weights,
        name: &dyn Fn(&str) -> Result<String>) -> Result<Option<DisIdx>> {
        let Some(relative) = cfg.deberta.as_ref().and_then(|d| d.relative) else { return Ok(None) };
        let (h, e) = (cfg.hidden_size, w.pp("encoder"));
        let rows = 2 * relative.span;
        let t = super::get(&e, "rel_embeddings.weight", &[rows, h])?;
        // An `nn.Embedding` weight: transformers' Trainer decays it; the LayerNorm's parameters it does not.
        let table = enc.push(be, vec![name("encoder.rel_embeddings.weight")?], &t, rows, h, true)?;
        let norm = match relative.layer_norm {
            true => Some([
                enc.push(be, vec![name("encoder.LayerNorm.weight")?], &super::get(&e, "LayerNorm.weight", &[h])?, 1, h, false)?,
                enc.push(be, vec![name("encoder.LayerNorm.bias")?], &super::get(&e, "LayerNorm.bias", &[h])?, 1, h, false)?,
            ]),
            false => None,
        };
        Ok(Some(DisIdx { table, norm, relative }))
    }

    /// The table's rows for padded length `t`, LayerNorm'd, and the row index `(1, 2T − 1)` counted from the first.
    pub fn forward<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, t: usize) -> Result<DisSaved<T>> {
        let t = t.max(1) as i64;
        // Column c = j − i + T − 1 is the offset i − j = T − 1 − c: column 0 the largest, so the highest row.
        let (hi, lo) = (self.relative.row(t - 1), self.relative.row(1 - t));
        let index: Vec<f32> = (0..2 * t - 1).map(|c| (self.relative.row(t - 1 - c) - lo) as f32).collect();
        let rows: Vec<u32> = (lo as u32..=hi as u32).collect();
        let raw = be.gather_rows(enc.t(self.table), &rows)?;
        let rel = match self.norm {
            Some([g, b]) => be.layernorm(&raw, None, enc.t(g), enc.t(b), enc.config.layer_norm_eps)?,
            None => be.gather_rows(&raw, &(0..rows.len() as u32).collect::<Vec<_>>())?,
        };
        let index = be.input(&index, 1, index.len())?;
        Ok(DisSaved { rows, raw, rel, index })
    }

    /// The summed gradient of every layer's `rel` `(R, H)` → the table's (and its LayerNorm's) into `grads`.
    pub fn backward<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, saved: &DisSaved<T>, drel: T,
        grads: &mut [Option<T>]) -> Result<()> {
        let draw = match self.norm {
            Some([g, b]) => {
                let (dx, dg, db) = be.layernorm_backward(&drel, &saved.raw, enc.t(g), enc.config.layer_norm_eps)?;
                super::put(be, grads, g, dg)?;
                super::put(be, grads, b, db)?;
                dx
            }
            None => drel,
        };
        let total = enc.params[self.table].rows;
        super::put(be, grads, self.table, be.scatter_rows(&draw, &saved.rows, total)?)
    }
}

/// Layer `l`'s table through its `pos_dropout` (`d`: the forward's site, `None` without one).
pub(super) fn dropped<B: Backend>(be: &B, rel: &B::Tensor, d: Option<Dropout>) -> Result<Option<B::Tensor>> {
    d.map(|d| be.dropout(rel, d)).transpose()
}
