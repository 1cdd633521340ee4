//! ModernBERT's local layers (`ModernBertAttention` with `layer_types[i] == "sliding_attention"`): each query sees
//! the keys at most `half = local_attention // 2` positions away (transformers'
//! `sliding_window_bidirectional_overlay`: `abs(q_idx - kv_idx) <= sliding_window`), and the queries and keys turn
//! by the local theta. The window is data of the one attention kernel, not a kernel of its own: a `(heads, 2T − 1)`
//! score bias by key offset (`Backend::attention_biased`, MPNet's input), 0 inside the window and [`OUTSIDE`]
//! beyond it, built once per forward from the padded length T as the relative table is (`relative.rs`).

use super::rotary::Rope;
use crate::backend::{Backend, UNIFORM_ADDED};
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::Result;

/// The bias of a key outside the window: the value the GPU kernels' online softmax starts its maximum from
/// (`NEG` in shaders/lib/attention.wgsl), so a key beyond the window weighs exp(−1e30 − s) = 0 against any key
/// inside it (the query itself always is), as transformers' `finfo.min` does. Finite, not −∞: a padded query
/// whose window holds no real key averages its keys on both backends alike (all scores −1e30), where −∞ would give
/// NaN on the CPU and zeros on the GPU. Such rows are padding; nothing real reads them.
pub const OUTSIDE: f32 = -1.0e30;

/// The local layers' window and rotation.
pub struct Window {
    half: usize,
    heads: usize,
    rope: Rope,
}

/// What the local layers read per forward: their rotary table `(T, d)` and the window's bias `(heads, 2T − 1)`.
pub struct WindowTensors<T> {
    pub rope: T,
    pub bias: T,
}

impl Window {
    /// `None` for the models whose layers all attend to every key.
    pub fn new(cfg: &BertConfig) -> Option<Window> {
        let w = cfg.sliding_window.as_ref()?;
        Some(Window { half: w.half, heads: cfg.num_attention_heads, rope: Rope::with_theta(w.theta, cfg.head_dim()) })
    }

    /// The `(heads, 2T − 1)` bias of a padded length `t`: column c holds offset j − i = c − (T − 1), 0 where
    /// |j − i| ≤ half, else [`OUTSIDE`]; the same for every head.
    pub fn host_table(&self, t: usize) -> Vec<f32> {
        let width = (2 * t).saturating_sub(1);
        let row: Vec<f32> = (0..width)
            .map(|c| if (c as i64 - (t as i64 - 1)).unsigned_abs() as usize <= self.half { 0.0 } else { OUTSIDE })
            .collect();
        row.repeat(self.heads)
    }

    /// The local layers' attention mask `(B, T)` for training: the batch's (1.0 real, 0.0 padding), each padded query
    /// whose window holds no real key marked [`UNIFORM_ADDED`]. transformers adds `finfo.min` to every score of such
    /// a row (the window's and the padding's mask are one), which rounds them all to `finfo.min`: its softmax is 1/T
    /// over every key, where [`OUTSIDE`] would average the real keys only. Question answering's loss reads those
    /// rows' logits.
    pub fn training_mask(&self, batch: &Batch) -> Vec<f32> {
        let (t, m) = (batch.t, &batch.attention_mask);
        (0..batch.b * t)
            .map(|r| {
                let (b, i) = (r / t, r % t);
                let seen = m[b * t + i.saturating_sub(self.half)..b * t + (i + self.half + 1).min(t)].iter().any(|&v| v != 0);
                match (m[r] != 0, seen) {
                    (true, _) => 1.0,
                    (false, true) => 0.0,
                    (false, false) => UNIFORM_ADDED,
                }
            })
            .collect()
    }

    /// The local layers' tensors for a padded length `t`.
    pub fn upload<B: Backend>(&self, backend: &B, t: usize) -> Result<WindowTensors<B::Tensor>> {
        Ok(WindowTensors {
            rope: self.rope.upload(backend, t)?,
            bias: backend.input(&self.host_table(t), self.heads, (2 * t).saturating_sub(1))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |j − i| ≤ half inside, per head; the widths of short lengths.
    #[test]
    fn table_is_the_window() {
        let w = Window { half: 2, heads: 2, rope: Rope::with_theta(10.0, 4) };
        let t = w.host_table(4); // offsets -3..=3
        let o = OUTSIDE;
        assert_eq!(t, [o, 0.0, 0.0, 0.0, 0.0, 0.0, o, o, 0.0, 0.0, 0.0, 0.0, 0.0, o]);
        assert_eq!(w.host_table(1), [0.0, 0.0]);
        assert!(w.host_table(0).is_empty());
    }

    /// A padded query is marked exactly when no real key is within `half` of it.
    #[test]
    fn training_mask_marks_the_windowless_padded_queries() {
        let w = Window { half: 2, heads: 1, rope: Rope::with_theta(10.0, 4) };
        let batch = Batch { input_ids: vec![0; 14], token_type_ids: vec![0; 14], b: 2, t: 7,
            attention_mask: vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0] };
        let a = UNIFORM_ADDED;
        assert_eq!(w.training_mask(&batch), [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, a, a, a]);
    }
}
