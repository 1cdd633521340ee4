//! DeBERTa-v2/v3's relative positions (transformers `modeling_deberta_v2.py`: `DebertaV2Encoder.get_rel_embedding`,
//! `build_relative_position`, `make_log_bucket_position`, `DisentangledSelfAttention.disentangled_attention_bias`),
//! as data for the attention kernel's disentangled input (`Backend::attention_disentangled`).
//!
//! transformers computes, per layer and head, with `rel = LayerNorm(encoder.rel_embeddings)` `(2·span, H)` (the
//! LayerNorm when `norm_rel_ebd` says so), `posQ = query_proj(rel)` and `posK = key_proj(rel)` (`share_att_key`: the
//! layer's own projections, biases included):
//!
//! ```text
//! score(i, j) = (q_i·k_j + q_i·posK[r(i, j)] + k_j·posQ[r(i, j)]) / √(3d)
//! r(i, j)     = clamp(bucket(i − j) + span, 0, 2·span − 1)
//! ```
//!
//! (`c2p` gathers `Q·posKᵀ` at `c2p_pos[i, j] = r(i, j)`; `p2c` gathers `K·posQᵀ` at `p2c_pos[j, i] =
//! clamp(−bucket(j − i) + span)`, which is `r(i, j)` since the buckets are odd in the offset, then transposes.)
//!
//! Here, per forward: `r` depends on i − j only, so a `(1, 2T − 1)` table gives the row each offset reads, and of the
//! relative table only the rows a length T reaches, `lo..=hi` (at most 2T − 1 of them: the buckets are monotonic),
//! are uploaded, LayerNorm'd once at load on the host. Per layer, those rows go through the layer's fused q/k/v
//! projection (`(R, 3H)`, one small GEMM: `[posQ | posK | unused]`), and the kernel adds the two dot products per
//! score in the pass over the keys: no `(B, heads, T, T)` bias is ever formed. The positions are the same for every
//! sequence (right padding: a real token's offsets do not depend on the padded length), so a batch and each text
//! alone give the same rows. transformers also zeroes the embeddings of padding tokens (`embeddings * mask`); no real
//! token attends to them, so that changes nothing that is read.

use crate::backend::Backend;
use crate::config::{BertConfig, DebertaRelative};
use crate::weights::Weights;
use crate::Result;

/// The terms the attention of every layer adds to its scores: a bias by offset `(heads, 2T − 1)` (MPNet's relative
/// bias, JinaBERT's ALiBi), or DeBERTa's relative rows `table` `(R, H)` (each layer projects them) and `rows`
/// `(1, 2T − 1)`, the row of `table` each offset j − i + T − 1 reads.
pub enum PositionBias<T> {
    Relative(T),
    Disentangled { table: T, rows: T },
}

/// `encoder.rel_embeddings` LayerNorm'd, on the host.
pub struct Disentangled {
    table: Vec<f32>, // (2·span, H)
    hidden: usize,
    relative: DebertaRelative,
}

impl Disentangled {
    /// `w` at `encoder`; `None` without DeBERTa's relative attention.
    pub fn load(w: &Weights, cfg: &BertConfig) -> Result<Option<Self>> {
        let Some(relative) = cfg.deberta.as_ref().and_then(|d| d.relative) else { return Ok(None) };
        let h = cfg.hidden_size;
        let mut table = w.get("rel_embeddings.weight", &[2 * relative.span, h])?.to_f32()?;
        if relative.layer_norm {
            let (gamma, beta) = (w.get("LayerNorm.weight", &[h])?.to_f32()?, w.get("LayerNorm.bias", &[h])?.to_f32()?);
            for row in table.chunks_exact_mut(h) {
                // torch.nn.LayerNorm: biased variance; in f64 here, well within f32's rounding of the result.
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / h as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / h as f64;
                let inv = 1.0 / (var + cfg.layer_norm_eps as f64).sqrt();
                for ((v, g), b) in row.iter_mut().zip(&gamma).zip(&beta) {
                    *v = ((*v as f64 - mean) * inv * *g as f64 + *b as f64) as f32;
                }
            }
        }
        Ok(Some(Disentangled { table, hidden: h, relative }))
    }

    /// For a padded length `t`: the first and last rows of the table its offsets reach, and per offset column
    /// c = j − i + T − 1 the row it reads, counted from the first.
    pub fn rows(&self, t: usize) -> (usize, usize, Vec<f32>) {
        let t = t.max(1) as i64;
        // i − j = T − 1 − c: column 0 is the largest i − j, the last column the smallest.
        let (hi, lo) = (self.relative.row(t - 1), self.relative.row(1 - t));
        let index = (0..2 * t - 1).map(|c| (self.relative.row(t - 1 - c) - lo) as f32).collect();
        (lo, hi, index)
    }

    /// [`Self::rows`] on the backend: the table's rows `lo..=hi` `(R, H)` and the index `(1, 2T − 1)`.
    pub fn upload<B: Backend>(&self, backend: &B, t: usize) -> Result<PositionBias<B::Tensor>> {
        let (lo, hi, index) = self.rows(t);
        let h = self.hidden;
        let table = backend.input(&self.table[lo * h..(hi + 1) * h], hi + 1 - lo, h)?;
        let rows = backend.input(&index, 1, index.len())?;
        Ok(PositionBias::Disentangled { table, rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_the_offsets_of_a_length() {
        let relative = DebertaRelative { buckets: 8, max_relative_positions: 16, span: 8, layer_norm: false };
        let d = Disentangled { table: (0..16 * 2).map(|v| v as f32).collect(), hidden: 2, relative };
        let (lo, hi, index) = d.rows(3); // offsets i − j = 2, 1, 0, −1, −2 → rows 10, 9, 8, 7, 6
        assert_eq!((lo, hi), (6, 10));
        assert_eq!(index, vec![4.0, 3.0, 2.0, 1.0, 0.0]);
        let (lo, hi, index) = d.rows(60); // past max_relative_positions: the clamp at both ends
        assert_eq!((lo, hi, index.len()), (0, 15, 119));
        assert_eq!((index[0], index[59], index[118]), (15.0, 8.0, 0.0));
    }
}
