//! The dot-product GEMM's register tiles on 256-bit AVX registers (x86-64, AVX detected at run time): natively the
//! products of a few rows ([`super::matmul`]'s `DotX`), f32 and dequantized weights alike.
//!
//! Each register holds the 4-lane partial sums of two rows of x side by side, so one multiply and one add do what
//! the SSE kernel (`matmul::dot_tile`) does with two of each. Every lane computes exactly the SSE kernel's sum: a
//! multiply, then an add (no fused multiply-add), over every fourth element of K, folded by [`f4::hsum4`] in the
//! same order, then the same scalar K mod 4 tail. So the results are bit for bit the SSE kernel's, on a CPU with
//! AVX or without: a text embeds the same either way. x's rows are interleaved in pairs once per product
//! ([`interleave`]), so that a pair's 4 + 4 lanes are one load.

use std::arch::x86_64::*;

use super::simd as f4;

/// Whether this CPU (and the OS, which must save the 256-bit registers) has AVX.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx")
}

/// x `(M, K)`'s rows in pairs, 4 lanes of one row and then the same 4 of the next: pair p's K positions
/// `4s..4s + 4` at `(p·K4/4 + s)·8`, K4 = K rounded down to a multiple of 4 (the tail stays in x). An odd M's last
/// pair ends in zeros.
pub fn interleave(x: &[f32], m: usize, k: usize) -> Vec<f32> {
    let k4 = k / 4 * 4;
    let mut out = vec![0f32; m.div_ceil(2) * 2 * k4];
    for (i, row) in x.chunks_exact(k).take(m).enumerate() {
        for (s, v) in row[..k4].chunks_exact(4).enumerate() {
            let at = ((i / 2) * k4 / 4 + s) * 8 + (i % 2) * 4;
            out[at..at + 4].copy_from_slice(v);
        }
    }
    out
}

/// `c[i·ldc + j] = Σ_l x[i·K + l]·b[j·K + l]` for i < M and j < N, N a multiple of 4 (the caller takes the other
/// columns), `xi` = [`interleave`]`(x, m, k)`. Tiles of 2 pairs of x's rows × 4 rows of W: 8 accumulators, fed by 2
/// loads of x and 4 of W (each 4 floats broadcast to both halves) per 8 multiplies and 8 adds.
///
/// SAFETY: the CPU has AVX ([`available`]); `c.add(i·ldc + j)` for i < m, j < n are valid for writes that nothing
/// else reads or writes meanwhile.
#[target_feature(enable = "avx")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_nt(x: &[f32], xi: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: *mut f32, ldc: usize) {
    let (k4, pairs) = (k / 4 * 4, m.div_ceil(2));
    assert!(x.len() >= m * k && xi.len() == pairs * 2 * k4 && b.len() >= n * k && n % 4 == 0 && ldc >= n);
    for j in (0..n).step_by(4) {
        let w = &b[j * k..(j + 4) * k]; // rows j..j+4 of W
        // SAFETY (both): AVX and the output's rows and columns j..j + 4 ≤ n, as the caller guarantees.
        let mut p = 0;
        while p + 2 <= pairs {
            unsafe { store(&tile::<2>(&xi[p * 2 * k4..(p + 2) * 2 * k4], k4, w, k), p, x, m, k, w, c.add(j), ldc) };
            p += 2;
        }
        if p < pairs {
            unsafe { store(&tile::<1>(&xi[p * 2 * k4..], k4, w, k), p, x, m, k, w, c.add(j), ldc) };
        }
    }
}

/// Folds the tile of pairs `p0..p0 + P` into its rows' 4 outputs (rows past M are padding) and adds the K mod 4
/// tail, as `dot_tile` does: `c[i·ldc..][..4]` for row i.
///
/// SAFETY: the CPU has AVX; `c.add(i·ldc)..+4` is writable for every row i < m of the tile.
#[target_feature(enable = "avx")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn store<const P: usize>(acc: &[[__m256; 4]; P], p0: usize, x: &[f32], m: usize, k: usize, w: &[f32],
    c: *mut f32, ldc: usize) {
    let k4 = k / 4 * 4;
    for (q, a) in acc.iter().enumerate() {
        for h in 0..2 {
            let i = 2 * (p0 + q) + h;
            if i >= m {
                return;
            }
            let s = if h == 0 {
                f4::hsum4(_mm256_castps256_ps128(a[0]), _mm256_castps256_ps128(a[1]), _mm256_castps256_ps128(a[2]),
                    _mm256_castps256_ps128(a[3]))
            } else {
                f4::hsum4(_mm256_extractf128_ps::<1>(a[0]), _mm256_extractf128_ps::<1>(a[1]),
                    _mm256_extractf128_ps::<1>(a[2]), _mm256_extractf128_ps::<1>(a[3]))
            };
            let mut o = f4::to_array(s);
            for l in k4..k {
                for (cc, v) in o.iter_mut().enumerate() {
                    *v += x[i * k + l] * w[cc * k + l];
                }
            }
            // SAFETY: row i < m of the tile, as the caller guarantees.
            unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), c.add(i * ldc), 4) };
        }
    }
}

/// `P` pairs of interleaved rows of x (`xi`: from the first pair's, at least P·2·K4 floats) times the 4 rows of `w` (4·K floats): per pair and row
/// of W, the 4-lane partial sums of the pair's first row (low half) and second row (high half).
///
/// SAFETY: the CPU has AVX.
#[target_feature(enable = "avx")]
#[inline]
unsafe fn tile<const P: usize>(xi: &[f32], k4: usize, w: &[f32], k: usize) -> [[__m256; 4]; P] {
    assert!(xi.len() >= P * 2 * k4 && w.len() == 4 * k && k4 <= k);
    let (xp, wp) = (xi.as_ptr(), w.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 4]; P];
    let mut l = 0;
    while l < k4 {
        // SAFETY: l + 4 ≤ k4 ≤ k, so each load of W reads 4 floats inside row c < 4, and each load of x 8 floats
        // inside pair q < P's block.
        unsafe {
            let (w0, w1, w2, w3) =
                (_mm_loadu_ps(wp.add(l)), _mm_loadu_ps(wp.add(k + l)), _mm_loadu_ps(wp.add(2 * k + l)), _mm_loadu_ps(wp.add(3 * k + l)));
            let wv = [_mm256_set_m128(w0, w0), _mm256_set_m128(w1, w1), _mm256_set_m128(w2, w2), _mm256_set_m128(w3, w3)];
            for (q, a) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(xp.add(q * 2 * k4 + 2 * l));
                for (ac, &wc) in a.iter_mut().zip(&wv) {
                    *ac = _mm256_add_ps(*ac, _mm256_mul_ps(xv, wc));
                }
            }
        }
        l += 4;
    }
    acc
}
