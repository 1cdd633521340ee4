//! `exp` and `erf` for the CPU backend's hot loops (attention softmax, GELU), written branch-free so that a loop
//! over a slice vectorises (SIMD128 in wasm32, AVX2 natively). The scalar library calls they replace (`expf`,
//! `erff`) cannot vectorise and, in wasm, cost ~25% of a BERT forward. Both are within a few f32 ulps of the exact
//! functions (tests below measure it against f64), far inside the model's tolerances (1e-4 on logits against
//! PyTorch) and as accurate as the GPU kernels' own approximations.

/// `e^x` for `x ≤ 88` (larger x saturate at `e^88`); inputs below -87.3 give `e^-87.3` ≈ 1.2e-38 rather
/// than a denormal. Cephes' `expf`: `x = n·ln2 + r` with `|r| ≤ ln2/2`, a degree-6 polynomial for `e^r`, and
/// `2^n` built from its exponent bits. Relative error ≤ 2e-7.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for |n| ≤ 128.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding and subtracting it rounds to the nearest integer (ties to even) with plain arithmetic.
    const ROUND: f32 = 12_582_912.0;
    // Compare-and-select rather than f32::max/min or clamp, and no float → int cast (Rust's saturating `as` is
    // scalar code): both keep the function vectorisable. IEEE maxNum/minNum have no wasm instruction, so LLVM calls
    // libm's fmaxf lane by lane for them; a select becomes f32x4.pmin/pmax. (A NaN input stays NaN.)
    let x = if x < -87.3 { -87.3 } else { x };
    let x = if x > 88.0 { 88.0 } else { x };
    let t = x * LOG2E + ROUND; // ROUND + n, exactly: n sits in the low mantissa bits of t
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let er = p * r * r + r + 1.0;
    // 2ⁿ: n is an integer in [-126, 127] here, so (n + 127) is a valid biased exponent; n = bits(t) − bits(ROUND).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    er * f32::from_bits(biased << 23)
}

/// The error function. Eigen's (and XLA's) single-precision rational approximation: `erf(x) = x·P(x²)/Q(x²)` on
/// `[-4, 4]`, where f32 `erf` is ±1 beyond. Absolute error ≤ 2e-7.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // Selects, not clamp: see `exp`.
    let x = if x < -4.0 { -4.0 } else { x };
    let x = if x > 4.0 { 4.0 } else { x };
    let x2 = x * x;
    let mut p = -2.726_142_3e-10;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_600_0e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329_2e-3;
    q = q * x2 - 1.426_473_9e-2;
    x * p / q
}

/// Exact GELU, `0.5·x·(1 + erf(x/√2))`, on [`erf`].
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// exp: a few ulps relative (Cephes states 2e-7 over its domain); measured worst below.
    const EXP_RTOL: f64 = 3e-7;
    /// erf: Eigen's approximation is accurate to a few f32 ulps of 1 in absolute terms.
    const ERF_ATOL: f64 = 5e-7;

    fn grid(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * i as f32 / n as f32)
    }

    #[test]
    fn exp_matches_f64_over_the_softmax_range() {
        let mut worst = 0f64;
        for x in grid(-87.0, 88.0, 400_000).chain([0.0, -0.0, 1.0, -1.0, 1e-8, -1e-8, 88.0, -87.3]) {
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
            assert!(rel <= EXP_RTOL, "exp({x}) = {} vs {want}: relative error {rel}", exp(x));
        }
        eprintln!("exp worst relative error {worst:.2e}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) > 0.0 && exp(-1000.0) < 1e-37, "saturates low, no NaN");
        assert!(exp(f32::NEG_INFINITY) < 1e-37);
    }

    #[test]
    fn erf_matches_libm_and_f64() {
        let mut worst = 0f64;
        for x in grid(-6.0, 6.0, 400_000).chain([0.0, -0.0, 1e-7, -1e-7, 4.0, -4.0, 100.0, -100.0]) {
            let want = libm::erf(x as f64);
            let err = (erf(x) as f64 - want).abs();
            worst = worst.max(err);
            assert!(err <= ERF_ATOL, "erf({x}) = {} vs {want}: error {err}", erf(x));
        }
        eprintln!("erf worst absolute error {worst:.2e}");
        assert_eq!(erf(0.0), 0.0);
        assert!((erf(f32::INFINITY) as f64 - 1.0).abs() <= ERF_ATOL && (erf(f32::NEG_INFINITY) as f64 + 1.0).abs() <= ERF_ATOL);
        assert!(!erf(f32::NAN).is_finite(), "NaN stays NaN");
        // GELU against torch.nn.functional.gelu at the same points as the matmul tests.
        let xs = [-3.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
        let torch = [-0.004050225, -0.15865526, -0.15426877, 0.0, 0.34573123, 0.8413447, 2.9959497];
        for (x, t) in xs.iter().zip(torch) {
            assert!((gelu(*x) - t).abs() < 1e-6, "gelu({x}) = {} vs {t}", gelu(*x));
        }
    }
}
