//! The rotary families' position table (transformers' `NomicBertRotaryEmbedding`, `GteRotaryEmbedding` with
//! `rope_type: "default"`; gte-*-en-v1.5's fixed NTK scaling, `BertConfig::rope_ntk_factor`): the inverse frequencies `f_i = 1 / theta^(2i/d)` and, per forward, the `(T, d)` table
//! of `cos(t·f_i)` then `sin(t·f_i)` for positions `0..T` that every layer's `Backend::rotary` reads. Computed on
//! the host in f32 in PyTorch's order (`inv_freq` from `theta ** (arange(0, d, 2) / d)`, then `t · f_i` rounded to
//! f32, then its cosine and sine), so the angles are PyTorch's to the rounding of `cos`/`sin` themselves; a GPU's
//! own `cos` of a large angle would not be.

use crate::backend::Backend;
use crate::config::{BertConfig, Positions};
use crate::weights::HostTensor;
use crate::Result;

/// The inverse frequencies of a rotary model.
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    /// `None` for the families with a position table.
    pub fn new(cfg: &BertConfig) -> Option<Rope> {
        let Positions::Rotary { theta } = cfg.positions else { return None };
        Some(Rope::scaled(theta, cfg.rope_ntk_factor, cfg.head_dim()))
    }

    /// The frequencies of `theta` for heads of `d` dimensions (ModernBERT's local layers have a theta of their own).
    pub fn with_theta(theta: f32, d: usize) -> Rope {
        Rope::scaled(theta, None, d)
    }

    /// ... with GTE's fixed NTK scaling by `ntk` where it is `Some`.
    fn scaled(theta: f32, ntk: Option<f32>, d: usize) -> Rope {
        // torch: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), all in f32. GTE's fixed NTK
        // scaling (its repositories' NTKScalingRotaryEmbedding): base = theta·s, then each divided by s^(2/d), the
        // Python float product and power rounded to f32 where they meet the f32 tensor.
        let (base, div) = match ntk {
            Some(s) => (((theta as f64) * (s as f64)) as f32, (s as f64).powf(2.0 / d as f64) as f32),
            None => (theta, 1.0),
        };
        let inv_freq = (0..d / 2).map(|i| 1.0 / base.powf((2 * i) as f32 / d as f32) / div).collect();
        Rope { inv_freq }
    }

    /// The `(T, d)` table for `seq` positions on the host.
    pub fn table(&self, seq: usize) -> Result<HostTensor> {
        let half = self.inv_freq.len();
        let mut out = vec![0f32; seq * 2 * half];
        for (t, row) in out.chunks_exact_mut(2 * half.max(1)).enumerate().take(seq) {
            for (i, &f) in self.inv_freq.iter().enumerate() {
                let angle = t as f32 * f;
                row[i] = angle.cos();
                row[half + i] = angle.sin();
            }
        }
        HostTensor::f32(vec![seq, 2 * half], out)
    }

    /// [`Self::table`] uploaded: one per forward, read by every layer.
    pub fn upload<B: Backend>(&self, backend: &B, seq: usize) -> Result<B::Tensor> {
        backend.upload(&self.table(seq)?)
    }
}
