//! ALiBi (Press, Smith and Lewis, "Train Short, Test Long", 2021) in the symmetric form JinaBERT v2 uses
//! (jinaai/jina-bert-implementation `JinaBertEncoder.rebuild_alibi_tensor`): head h adds `−slope_h·|j − i|` to each
//! scaled score, before the mask and the softmax, in every layer. No position table and no rotation: the bias
//! depends on the offset only, so it is data of the one attention kernel, a `(heads, 2T − 1)` table by key offset
//! (`Backend::attention_biased`, MPNet's input; `relative.rs`, `window.rs` build theirs the same way), built on the
//! host once per forward from the padded length T. Right padding leaves a real token's offsets as they are alone.

use crate::backend::Backend;
use crate::config::{BertConfig, Positions};
use crate::Result;

/// The slopes of `n` heads as the authors compute them: in Python floats (f64), a geometric sequence from
/// `start = 2^(−2^(−(log2 n − 3)))` with ratio `start` when n is a power of two; otherwise the slopes of the power of
/// two below n, then every other slope of twice that power, the first n − that power of them.
pub fn slopes(n: usize) -> Vec<f64> {
    fn power_of_2(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (0..n).map(|i| start * start.powf(i as f64)).collect() // Python's `start * start**i`
    }
    if n == 0 {
        return Vec::new();
    }
    if n.is_power_of_two() {
        return power_of_2(n);
    }
    let c = 1usize << n.ilog2();
    let mut out = power_of_2(c);
    out.extend(slopes(2 * c).into_iter().step_by(2).take(n - c));
    out
}

/// The per-head slopes, negated, in f32: `torch.Tensor(slopes) * -1`.
pub struct Alibi {
    neg_slopes: Vec<f32>,
}

impl Alibi {
    /// `None` for the models without ALiBi.
    pub fn new(cfg: &BertConfig) -> Option<Alibi> {
        (cfg.positions == Positions::Alibi).then(|| Alibi::with_heads(cfg.num_attention_heads))
    }

    pub fn with_heads(heads: usize) -> Alibi {
        Alibi { neg_slopes: slopes(heads).into_iter().map(|s| -(s as f32)).collect() }
    }

    /// The `(heads, 2T − 1)` bias of a padded length `t`: column c of head h is `−slope_h · |c − (T − 1)|`, the f32
    /// product of the f32 slope and the integer distance, as PyTorch's `slopes * relative_position` gives it.
    pub fn host_table(&self, t: usize) -> Vec<f32> {
        let width = (2 * t).saturating_sub(1);
        self.neg_slopes
            .iter()
            .flat_map(|&s| (0..width).map(move |c| s * (c as i64 - (t as i64 - 1)).unsigned_abs() as f32))
            .collect()
    }

    /// [`Self::host_table`] on the backend, for `attention_biased`.
    pub fn upload<B: Backend>(&self, backend: &B, t: usize) -> Result<B::Tensor> {
        backend.input(&self.host_table(t), self.neg_slopes.len(), (2 * t).saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slopes of the ALiBi paper's reference code (`get_slopes`), printed by Python for 4, 6, 8 and 12 heads.
    #[test]
    fn slopes_as_the_paper() {
        assert_eq!(slopes(4), [0.25, 0.0625, 0.015625, 0.00390625]);
        assert_eq!(slopes(8), [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]);
        assert_eq!(slopes(6), [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
        let twelve = slopes(12);
        assert_eq!(&twelve[..8], &slopes(8)[..]);
        assert_eq!(&twelve[8..], [0.7071067811865476, 0.35355339059327384, 0.17677669529663692, 0.08838834764831849]);
        assert_eq!(slopes(2), [0.0625, 0.00390625]);
    }

    /// Each head's row is its slope times the distance, 0 on the diagonal, the same on both sides.
    #[test]
    fn table_is_minus_slope_times_distance() {
        let a = Alibi::with_heads(2); // slopes 2^-4... of n = 2: start 2^(-2^(-(1-3))) = 2^-4
        let t = a.host_table(3); // offsets -2..=2
        let s0 = -(2f64.powf(-4.0) as f32);
        let s1 = -(2f64.powf(-8.0) as f32);
        assert_eq!(t, [2.0 * s0, s0, 0.0, s0, 2.0 * s0, 2.0 * s1, s1, 0.0, s1, 2.0 * s1]);
        assert!(a.host_table(0).is_empty());
    }
}
