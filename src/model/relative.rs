//! MPNet's relative position bias (`MPNetEncoder.compute_position_bias`): T5's bidirectional buckets of the offset
//! j − i between key and query (32 buckets, exact below 8 steps, logarithmic up to 128), each bucket a learned value
//! per head (`encoder.relative_attention_bias`, `(32, heads)`). Computed once per forward from the padded length T
//! and added to every layer's scores through the attention kernel's bias input (`Backend::attention_biased`): as a
//! `(heads, 2T − 1)` table, since the bias depends on j − i only. transformers numbers the offsets over the padded
//! sequence (`arange(T)`), as here; padded keys are masked, so padding changes nothing a real token reads.

use crate::backend::Backend;
use crate::config::BertConfig;
use crate::weights::Weights;
use crate::Result;

/// transformers' `max_distance`: offsets of this many steps or more share the last bucket of their side.
const MAX_DISTANCE: f32 = 128.0;

/// The bucket of offset `rel` = j − i (`MPNetEncoder.relative_position_bucket`, num_buckets 32): keys after the query
/// (j > i) take buckets 16.., keys before it 0..16; within a side, |rel| < 8 is its own bucket and larger offsets
/// share logarithmic ones up to 15. In f32 as PyTorch computes it, truncated toward 0.
pub fn bucket(rel: i64, buckets: usize) -> usize {
    let half = buckets / 2;
    let max_exact = half / 2;
    let n = -rel;
    let side = if n < 0 { half } else { 0 };
    let n = n.unsigned_abs() as usize;
    if n < max_exact {
        return side + n;
    }
    let exact = max_exact as f32;
    let large = exact + ((n as f32 / exact).ln() / (MAX_DISTANCE / exact).ln() * (half - max_exact) as f32);
    side + (large as usize).min(half - 1)
}

/// `encoder.relative_attention_bias` on the host: `(buckets, heads)`, tiny, so each forward builds its table here.
pub struct RelativeBias {
    table: Vec<f32>,
    buckets: usize,
    heads: usize,
}

impl RelativeBias {
    /// `w` at `encoder`; `None` for the families without a relative bias.
    pub fn load(w: &Weights, cfg: &BertConfig) -> Result<Option<Self>> {
        let (buckets, heads) = (cfg.relative_attention_buckets, cfg.num_attention_heads);
        if buckets == 0 {
            return Ok(None);
        }
        let table = w.get("relative_attention_bias.weight", &[buckets, heads])?.to_f32()?;
        Ok(Some(RelativeBias { table, buckets, heads }))
    }

    /// The `(heads, 2T − 1)` bias of a padded length `t`: column c of head h is the bias of offset j − i = c − (T − 1).
    pub fn host_table(&self, t: usize) -> Vec<f32> {
        let width = (2 * t).saturating_sub(1);
        let cols: Vec<usize> = (0..width).map(|c| bucket(c as i64 - (t as i64 - 1), self.buckets)).collect();
        (0..self.heads).flat_map(|h| cols.iter().map(move |&b| self.table[b * self.heads + h])).collect()
    }

    /// [`Self::host_table`] on the backend, for `attention_biased`.
    pub fn upload<B: Backend>(&self, backend: &B, t: usize) -> Result<B::Tensor> {
        backend.input(&self.host_table(t), self.heads, (2 * t).saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' buckets at the edges of its ranges (printed by `MPNetEncoder.relative_position_bucket`).
    #[test]
    fn buckets_as_transformers() {
        let want = [(-129, 15), (-128, 15), (-127, 15), (-65, 14), (-64, 14), (-63, 13), (-33, 12), (-32, 12),
            (-31, 11), (-17, 10), (-16, 10), (-15, 9), (-8, 8), (-7, 7), (0, 0), (1, 17), (7, 23), (8, 24), (15, 25),
            (16, 26), (17, 26), (31, 27), (32, 28), (33, 28), (63, 29), (64, 30), (65, 30), (127, 31), (128, 31),
            (129, 31), (5000, 31), (-5000, 15)];
        for (rel, b) in want {
            assert_eq!(bucket(rel, 32), b, "offset {rel}");
        }
    }

    #[test]
    fn table_is_per_head_and_offset() {
        let r = RelativeBias { table: (0..64).map(|v| v as f32).collect(), buckets: 32, heads: 2 };
        let t = r.host_table(3); // offsets -2..=2
        assert_eq!(t.len(), 2 * 5);
        let want0: Vec<f32> = [-2i64, -1, 0, 1, 2].iter().map(|&o| (bucket(o, 32) * 2) as f32).collect();
        assert_eq!(&t[..5], &want0[..]);
        assert_eq!(t[5 + 2], 1.0, "head 1, offset 0: bucket 0's second column");
        assert!(r.host_table(0).is_empty());
    }
}
