//! Deterministic pseudo-random data and comparisons for the op tests.

/// xorshift-based values in [-1, 1): reproducible, no dependency.
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` everywhere, reporting the worst index.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let mut worst = (0usize, f32::NEG_INFINITY);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let excess = (g - w).abs() - (atol + rtol * w.abs());
        let excess = if excess.is_nan() { f32::INFINITY } else { excess };
        if excess > worst.1 {
            worst = (i, excess);
        }
    }
    let i = worst.0;
    assert!(worst.1 <= 0.0, "{what}: worst index {i}: got {} want {} (atol {atol}, rtol {rtol})", got[i], want[i]);
}
