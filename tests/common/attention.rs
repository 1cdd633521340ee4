//! The attention tests' setup: padded masks (tests/dropout.rs too), and central differences of a loss of two inputs
//! (qkv and a bias or a relative table) against the backward's gradients, on the CPU twin
//! (tests/attention_bias_backward.rs, tests/attention_disentangled_backward.rs). The tolerances stay with each test,
//! beside what they measured.

use super::rand_vec;

/// A `(b, t)` attention mask with right padding: sequence `i` has `lens[i]` real tokens (1), the rest padding (0).
pub fn padded_mask(b: usize, t: usize, lens: &[usize]) -> Vec<f32> {
    let mut mask = vec![0f32; b * t];
    for (bi, &l) in lens.iter().enumerate() {
        mask[bi * t..bi * t + l].fill(1.0);
    }
    mask
}

/// `n` deterministic values in [-1, 1) ([`rand_vec`]) held in f64: a point to step from, so that `x ± step` is
/// exact and only the f32 forward rounds.
pub fn rand_f64(n: usize, seed: u64) -> Vec<f64> {
    rand_vec(n, seed).iter().map(|&v| v as f64).collect()
}

/// `x` rounded to f32, for a backend's input.
pub fn f32s(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

/// The scalar loss `Σ w ⊙ y` of an output `y`, accumulated in f64: its gradient in `y` is `w`.
pub fn weighted_sum(y: &[f32], w: &[f32]) -> f64 {
    y.iter().zip(w).map(|(&a, &c)| a as f64 * c as f64).sum()
}

/// The step of [`worst_fd_errors`]' central differences: the f32 forward's rounding (≈ 1e-7 per output) is divided
/// by 2·step, the truncation is O(step²); each test's `FD_ATOL` bounds the sum.
pub const FD_STEP: f64 = 1e-2;

/// The central difference of `loss(x, y)` along every coordinate of `x` and then of `y` (step [`FD_STEP`]) against
/// the analytic gradients `dx` and `dy`: the largest `|fd − analytic|` over `x`, and over `y`.
pub fn worst_fd_errors(x: &[f64], y: &[f64], loss: impl Fn(&[f64], &[f64]) -> f64, dx: &[f32], dy: &[f32])
    -> (f64, f64) {
    assert_eq!((dx.len(), dy.len()), (x.len(), y.len()), "a gradient per input value");
    let along = |v: &[f64], i: usize, at: &dyn Fn(&[f64]) -> f64| {
        let (mut up, mut down) = (v.to_vec(), v.to_vec());
        up[i] += FD_STEP;
        down[i] -= FD_STEP;
        (at(&up) - at(&down)) / (2.0 * FD_STEP)
    };
    let worst_x = (0..x.len()).map(|i| (along(x, i, &|v| loss(v, y)) - dx[i] as f64).abs()).fold(0f64, f64::max);
    let worst_y = (0..y.len()).map(|i| (along(y, i, &|v| loss(x, v)) - dy[i] as f64).abs()).fold(0f64, f64::max);
    (worst_x, worst_y)
}
