//! MPNet's relative position bias as a trained parameter: `encoder.relative_attention_bias.weight` `(buckets,
//! heads)`, one table that every layer's attention reads (`MPNetEncoder.compute_position_bias` runs once per
//! forward), so its gradient is the sum of every layer's.
//!
//! The forward spreads the table over the offsets j − i of a padded length T with a one-hot matrix `O` `(buckets,
//! 2T − 1)`, `O[k][c] = 1` where offset `c − (T − 1)` falls in bucket `k` (the host-computed buckets inference uses,
//! [`crate::model::relative::bucket`]): `bias = tableᵀ·O` `(heads, 2T − 1)`, the input of
//! `Backend::attention_biased` (each entry one product with 1, so exactly the table's value). Back: each layer's
//! `Backend::attention_backward_biased` gives `dbias` `(heads, 2T − 1)` (the softmax input's gradient summed over
//! the sequences and the (query, key) pairs of each offset), and the table's gradient is `O·dbiasᵀ` `(buckets,
//! heads)`: every offset's gradient into its bucket's row, summed over the layers by
//! [`super::super::params::put`].

use super::Encoder;
use crate::backend::Backend;
use crate::config::BertConfig;
use crate::model::relative::bucket;
use crate::weights::Weights;
use crate::Result;

/// The table's parameter and its bucket count.
#[derive(Clone, Copy)]
pub(super) struct RelIdx {
    pub table: usize,
    buckets: usize,
}

/// What a forward keeps: the bias `(heads, 2T − 1)` every layer added, and the one-hot `O` `(buckets, 2T − 1)`.
pub(super) struct RelSaved<T> {
    pub bias: T,
    onehot: T,
}

impl RelIdx {
    /// The table of `w` (the family's root) as a parameter of `enc`, named as the family names it; `None` for the
    /// families without one.
    pub fn load<B: Backend<Tensor = T>, T>(be: &B, enc: &mut Encoder<T>, cfg: &BertConfig, w: &Weights,
        name: String) -> Result<Option<RelIdx>> {
        let (buckets, heads) = (cfg.relative_attention_buckets, cfg.num_attention_heads);
        if buckets == 0 {
            return Ok(None);
        }
        let t = super::get(&w.pp("encoder"), "relative_attention_bias.weight", &[buckets, heads])?;
        // An `nn.Embedding` weight: transformers' Trainer decays it.
        let table = enc.push(be, vec![name], &t, buckets, heads, true)?;
        Ok(Some(RelIdx { table, buckets }))
    }

    /// `O` `(buckets, 2T − 1)` of a padded length `t`.
    fn onehot(&self, t: usize) -> Vec<f32> {
        let width = (2 * t).saturating_sub(1);
        let mut o = vec![0f32; self.buckets * width];
        for c in 0..width {
            o[bucket(c as i64 - (t as i64 - 1), self.buckets) * width + c] = 1.0;
        }
        o
    }

    /// The `(heads, 2T − 1)` bias of padded length `t` from the table `table`.
    pub fn forward<B: Backend>(&self, be: &B, table: &B::Tensor, t: usize) -> Result<RelSaved<B::Tensor>> {
        let onehot = be.input(&self.onehot(t), self.buckets, (2 * t).saturating_sub(1))?;
        let bias = be.matmul(table, true, &onehot, false)?; // (heads, buckets)·(buckets, 2T − 1)
        Ok(RelSaved { bias, onehot })
    }
}

impl<T> RelSaved<T> {
    /// A layer's `dbias` `(heads, 2T − 1)` → the table's gradient `(buckets, heads)`.
    pub fn table_grad<B: Backend<Tensor = T>>(&self, be: &B, dbias: &T) -> Result<T> {
        be.matmul(&self.onehot, false, dbias, true)
    }
}
