//! `linear` for Q8_0 weights with 7-bit activations: the integer kernel the CPU backend runs for Q8_0 matrices in
//! wasm (natively it keeps the dequantizing AVX2/FMA GEMM, which is faster there: `INT8_Q8_0` in the module above).
//!
//! As llama.cpp's CPU path for Q8_0 (`ggml_vec_dot_q8_0_q8_0`), each row of x is quantized per block of 32 values
//! (`d = amax / 63`, `q = round(x / d)`, so `q ∈ [−63, 63]`), and each output is `Σ_blocks d_w · d_x · Σ_{32} q_w ·
//! q_x`, the inner sums exact in 32-bit integers. 7 bits rather than 8 because relaxed SIMD's byte dot products
//! (`i16x8.relaxed_dot_i8x16_i7x16_s`: 16 multiply-adds in one x86 `pmaddubsw`) are only defined when one operand
//! fits in 7 bits; every build computes the same integers, so this kernel's results
//! are bit for bit the same natively, in SIMD128 and in relaxed SIMD. Against the f32-activation twin
//! ([`super::matmul::linear_packed`], which the GPU's `matmul_packed` matches) the only new error is the rounding of
//! x: `|Δ| ≤ Σ_blocks (amax_x / 126) · Σ_{32} |w|`, which `tests/q8_kernel.rs` checks output by output; MiniLM's
//! embeddings stay at cosine ≥ 0.998 of PyTorch's (`tests/browser/q8-kernel.test.mjs`).
//!
//! Why: the wasm CPU path has one core, and integer dot products do 8 (`i32x4.dot_i16x8_s`, SSE2's `pmaddwd`) or 16
//! (relaxed) multiply-adds per instruction where f32 does 4, reading a quarter of the weight bytes.
//!
//! Layout: at its first use a Q8_0 matrix `(N, K)` is repacked ([`Q8Matrix`]; a linear weight then keeps that form
//! only, a table both) into groups of 4 output columns; per group and block of 32 `k`, 128 bytes hold the 4
//! columns' values interleaved so that each 16-byte load feeds one dot product per row of x whose 4 lanes are the 4
//! columns (no horizontal sums):
//! - SIMD128 / SSE2 / scalar: `[c0 k0 k1, c1 k0 k1, c2 k0 k1, c3 k0 k1 | c0 k2 k3, …]` per 4 `k`s, widened to two
//!   `i16x8` and multiplied with splats of x's `(k, k+1)` pairs (x kept as i16).
//! - relaxed SIMD: `[c0 k0..k3, c1 k0..k3, c2 k0..k3, c3 k0..k3]`, multiplied with a splat of x's 4 values stored as
//!   `q + 64 ∈ [1, 127]` (the 7-bit operand) into i16 pair sums (`|Σ| ≤ 2 · 128 · 127 < 2¹⁵`: exact), widened by
//!   `i32x4.dot_i16x8_s` with a splat of 1s. (`i32x4.extadd_pairwise_i16x8_s` gives the same sums, but V8 lowers it
//!   to the same `vpmaddwd` against 1s it rebuilds each time, `vpcmpeqd` + `vpsrlw`, read with `node
//!   --experimental-wasm-relaxed-simd --print-wasm-code`; with the splat the 1s stay in a register, and the kernel
//!   took 0.83–0.88× the time, `bench/ab.mjs`.) The `64 · Σ q_w` the offset adds is subtracted by starting each
//!   block's sums at `−64 · Σ q_w`, precomputed per column and block. Or all in one, the fused
//!   `i32x4.relaxed_dot_i8x16_i7x16_add_s`: one `vpdpbusd` with AVX-VNNI and one `sdot` on ARM with the dot-product
//!   extension, but without AVX-VNNI V8 emits five instructions (the constant of ones rebuilt each time), and on a
//!   Zen 4 the kernel took 1.24–1.33× the time of the split form (`bench/ab.mjs`, MiniLM Q8_0 in Chromium; the split
//!   form then still widened with `extadd_pairwise`). Both give the same integers; which runs depends on how the
//!   engine lowers the fused instruction, which one probe tells apart ([`fused_dot`]). (Timing the two forms
//!   at the first Q8_0 matrix was tried: it chose the slower one in 1 page load of 3, likely the page's noise or V8
//!   still running baseline code for one of them.)
//!
//! The 4 columns' block scales follow as f32. Per block and tile of 4 rows × 4 columns the kernel converts the
//! integer sums once and accumulates them in f32.

use super::matmul::epilogue;
use super::par_chunks_mut;
use crate::backend::Activation;
use crate::weights::quant::{Q8_0_BLOCK_BYTES, QK};
use crate::{Error, Result};

/// Output columns per group: the 4 lanes of a 128-bit vector.
const NR: usize = 4;
/// Rows of x per tile: with two column groups ([`pass`]), 8 integer + 8 float accumulators; the integer ones, the
/// weight vectors and temporaries fit in the 16 vector registers of SSE and of wasm engines on x86-64.
const MR: usize = 4;
/// Rows of x per cache block: its quantized rows (`MC · K` values, at most 192 KiB at K = 1536) stay in L2 while every
/// column group passes over them, and each group's `4 · K` bytes stay in L1 across the block's tiles.
const MC: usize = 64;
/// Bytes of one (group, block): 4 columns × 32 values.
const GROUP_BLOCK: usize = NR * QK;
/// Below this many multiply-adds the rows are not split across threads (natively).
const PARALLEL_MIN_MACS: usize = 1 << 18;
/// The largest quantized activation: 7 bits (see the module docs).
const ACT_MAX: f32 = 63.0;
/// Relaxed SIMD's 7-bit operand is x stored as `q + ACT_OFFSET ∈ [1, 127]`.
#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
const ACT_OFFSET: i32 = 64;

/// How the kernel keeps quantized x: `(k, k+1)` pairs as i16, or (relaxed SIMD) `q + 64` as u8.
#[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
type Xq = i16;
#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
type Xq = u8;

/// Where value `j` (of 32) of column `c` (of 4) sits in a (group, block)'s 128 bytes.
#[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
fn lane_byte(j: usize, c: usize) -> usize {
    let (t, within) = (j / 4, j % 4); // quad t, k = 4t + within
    t * 16 + (within / 2) * 8 + c * 2 + within % 2
}
#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
fn lane_byte(j: usize, c: usize) -> usize {
    (j / 4) * 16 + c * 4 + j % 4
}

/// A Q8_0 weight `(N, K)` repacked for [`linear_q8`]: same integers and scales, column-interleaved. It holds the
/// blocks' every value (the f16 scales are exact in f32), so the blocks need not be kept beside it
/// ([`Q8Matrix::rows_into`] decodes rows as they would).
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Matrix {
    n: usize,
    k: usize,
    /// `(groups, K / 32, 128)`: for group g, block b, the 4 columns' 32 values at [`lane_byte`]; columns past N are
    /// zeros.
    qs: Vec<i8>,
    /// `(groups, K / 32, 4)`: the block scales of the 4 columns (0 past N).
    scales: Vec<f32>,
    /// `(groups, K / 32, 4)`: `−64 · Σ q_w` of each column and block (relaxed SIMD only; empty otherwise).
    offsets: Vec<i32>,
}

impl Q8Matrix {
    /// Repacks `n` rows of `k` values stored as Q8_0 blocks (`bytes`: `n · k / 32` blocks of 34 bytes, row-major).
    pub fn from_q8_0(bytes: &[u8], n: usize, k: usize) -> Result<Q8Matrix> {
        if k % QK != 0 || bytes.len() != n * (k / QK) * Q8_0_BLOCK_BYTES {
            return Err(Error::Weights(format!(
                "a Q8_0 matrix ({n}, {k}) needs K a multiple of {QK} and {} bytes, got {}",
                n * (k / QK) * Q8_0_BLOCK_BYTES,
                bytes.len()
            )));
        }
        let blocks = k / QK;
        let groups = n.div_ceil(NR);
        let mut qs = vec![0i8; groups * blocks * GROUP_BLOCK];
        let mut scales = vec![0f32; groups * blocks * NR];
        for row in 0..n {
            let (g, c) = (row / NR, row % NR);
            for b in 0..blocks {
                let src = &bytes[(row * blocks + b) * Q8_0_BLOCK_BYTES..][..Q8_0_BLOCK_BYTES];
                scales[(g * blocks + b) * NR + c] = half::f16::from_le_bytes([src[0], src[1]]).to_f32();
                let dst = &mut qs[(g * blocks + b) * GROUP_BLOCK..][..GROUP_BLOCK];
                for (j, &q) in src[2..].iter().enumerate() {
                    dst[lane_byte(j, c)] = q as i8;
                }
            }
        }
        #[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
        let offsets = (0..groups * blocks * NR)
            .map(|i| {
                let (g, b, c) = (i / (blocks * NR), i / NR % blocks, i % NR);
                let block = &qs[(g * blocks + b) * GROUP_BLOCK..][..GROUP_BLOCK];
                -ACT_OFFSET * (0..QK).map(|j| block[lane_byte(j, c)] as i32).sum::<i32>()
            })
            .collect();
        #[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
        let offsets = Vec::new();
        Ok(Q8Matrix { n, k, qs, scales, offsets })
    }

    /// Rows `r, r+1, …` of W decoded to f32 into `out` (`out.len()` a multiple of K): the values the Q8_0 blocks
    /// decode to (`q · d`, as `dequantize_q8_0`). Panics if the rows run past N (a programming error).
    pub fn rows_into(&self, r: usize, out: &mut [f32]) {
        let (k, blocks) = (self.k, self.k / QK);
        let n = if k == 0 { 0 } else { out.len() / k };
        assert!(out.len() == n * k && r + n <= self.n, "Q8Matrix::rows_into: rows {r}..{} of {}", r + n, self.n);
        for (row, y) in (r..r + n).zip(out.chunks_exact_mut(k.max(1))) {
            let (g, c) = (row / NR, row % NR);
            for (b, y) in y.chunks_exact_mut(QK).enumerate() {
                let d = self.scales[(g * blocks + b) * NR + c];
                let block = &self.qs[(g * blocks + b) * GROUP_BLOCK..][..GROUP_BLOCK];
                for (j, yj) in y.iter_mut().enumerate() {
                    *yj = block[lane_byte(j, c)] as f32 * d;
                }
            }
        }
    }

    /// Bytes it holds: 32 + 4 (scale) + 4 (offset, relaxed SIMD only) per 32 values (a Q8_0 block: 34).
    pub fn bytes(&self) -> usize {
        self.qs.len() + 4 * (self.scales.len() + self.offsets.len())
    }
}

/// `x` rows quantized per block of 32 (`xq (M, K)`, `xd (M, K/32)` the scales): `d = amax / 63`, `q = round(x /
/// d)` (as `x · (1 / d)`), rounding half to even (as llama.cpp's SIMD quantizers do). The definition the kernel
/// computes with, whatever form it keeps the values in.
pub fn quantize_rows(x: &[f32], k: usize, xq: &mut [i16], xd: &mut [f32]) {
    // SAFETY: `quantize_blocks` passes 32 values at `x` and 32 slots at `q`.
    quantize_blocks(x, k, xq, xd, |x, id, q| unsafe { v::round_32(x, id, q) });
}

/// [`quantize_rows`] into the form the relaxed-SIMD kernel reads: `q + 64` as u8.
#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
fn prepare_rows(x: &[f32], k: usize, xq: &mut [u8], xd: &mut [f32]) {
    // SAFETY: `quantize_blocks` passes 32 values at `x` and 32 slots at `q`.
    quantize_blocks(x, k, xq, xd, |x, id, q| unsafe { v::round_32_offset(x, id, q) });
}
#[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
use quantize_rows as prepare_rows;

/// The block loop of both forms: each block's scale into `xd`, and `round(values, 1 / d, out)` for its 32 values.
#[inline(always)]
fn quantize_blocks<T>(x: &[f32], k: usize, xq: &mut [T], xd: &mut [f32], round: impl Fn(*const f32, f32, *mut T)) {
    assert!(k % QK == 0 && xq.len() == x.len() && xd.len() * QK == x.len());
    for ((xb, qb), d) in x.chunks_exact(QK).zip(xq.chunks_exact_mut(QK)).zip(xd.iter_mut()) {
        // SAFETY: both blocks hold exactly QK = 32 values.
        let (dd, id) = unsafe { v::scale_of_32(xb.as_ptr()) };
        round(xb.as_ptr(), id, qb.as_mut_ptr());
        *d = dd;
    }
}

/// `(d, 1 / d)` for a block whose largest magnitude is `amax` (`(0, 0)` for an all-zero block).
#[inline(always)]
fn scale_of(amax: f32) -> (f32, f32) {
    let d = amax / ACT_MAX;
    (d, if d > 0.0 { 1.0 / d } else { 0.0 })
}

/// Integer and float lanes: SSE2 natively (x86-64's baseline), SIMD128 in wasm32, plain arrays elsewhere. Every
/// variant computes the same values bit for bit: the integer sums are exact, and the float steps are the same
/// conversions, products and sums in the same order.
mod v {
    #[cfg(target_arch = "x86_64")]
    mod imp {
        use std::arch::x86_64::*;
        pub type I = __m128i;
        pub type F = __m128;
        // SAFETY (all): SSE2 is part of the x86-64 baseline; loads read 8 (`load_widen8`) or 4 (`splat_pair`) bytes
        // at `p`, which callers guarantee are in bounds.
        /// 8 bytes at `p` sign-extended to 16 bits.
        #[inline(always)]
        pub unsafe fn load_widen8(p: *const i8) -> I {
            unsafe {
                let v = _mm_loadl_epi64(p as *const I);
                _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8)
            }
        }
        /// Two i16 at `p`, repeated in every 32-bit lane.
        #[inline(always)]
        pub unsafe fn splat_pair(p: *const i16) -> I {
            unsafe { _mm_set1_epi32((p as *const i32).read_unaligned()) }
        }
        #[inline(always)]
        pub fn izero() -> I {
            unsafe { _mm_setzero_si128() }
        }
        /// `acc + Σ pairs a·b` per 32-bit lane.
        #[inline(always)]
        pub fn dot_add(acc: I, a: I, b: I) -> I {
            unsafe { _mm_add_epi32(acc, _mm_madd_epi16(a, b)) }
        }
        #[inline(always)]
        pub fn fsplat(v: f32) -> F {
            unsafe { _mm_set1_ps(v) }
        }
        /// `acc + float(i) · s`.
        #[inline(always)]
        pub fn scale_add(acc: F, i: I, s: F) -> F {
            unsafe { _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(i), s)) }
        }
        #[inline(always)]
        pub fn fmul(a: F, b: F) -> F {
            unsafe { _mm_mul_ps(a, b) }
        }
        /// Lane l: the largest `|x[4i + l]|` of 32 floats. SAFETY: `x` points at 32 floats.
        #[inline(always)]
        pub unsafe fn abs_max_32(x: *const f32) -> F {
            unsafe {
                let sign = _mm_set1_ps(-0.0);
                let mut m = _mm_setzero_ps();
                for i in 0..8 {
                    m = _mm_max_ps(m, _mm_andnot_ps(sign, _mm_loadu_ps(x.add(4 * i))));
                }
                m
            }
        }
        /// `q[i] = round_half_even(x[i] · id)` for 32 values. SAFETY: `x`, `q` point at 32 values.
        #[inline(always)]
        pub unsafe fn round_32(x: *const f32, id: f32, q: *mut i16) {
            unsafe {
                let s = _mm_set1_ps(id);
                for i in 0..4 {
                    // cvtps rounds in the current mode: nearest, ties to even.
                    let lo = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(x.add(8 * i)), s));
                    let hi = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(x.add(8 * i + 4)), s));
                    _mm_storeu_si128(q.add(8 * i) as *mut I, _mm_packs_epi32(lo, hi));
                }
            }
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod imp {
        use core::arch::wasm32::*;
        pub type I = v128;
        pub type F = v128;
        // SAFETY (all): loads read 16 or 4 bytes at `p`, which callers guarantee are in bounds (unaligned is fine).
        #[cfg(feature = "relaxed-simd")]
        #[inline(always)]
        pub unsafe fn load_i8(p: *const i8) -> I {
            unsafe { v128_load(p as *const v128) }
        }
        /// One instruction (`i16x8.load8x8_s`): no shuffle to reach the high half of a 16-byte load.
        #[cfg(not(feature = "relaxed-simd"))]
        #[inline(always)]
        pub unsafe fn load_widen8(p: *const i8) -> I {
            unsafe { i16x8_load_extend_i8x8(p) }
        }
        #[cfg(not(feature = "relaxed-simd"))]
        #[inline(always)]
        pub unsafe fn splat_pair(p: *const i16) -> I {
            unsafe { v128_load32_splat(p as *const u32) }
        }
        #[cfg(not(feature = "relaxed-simd"))]
        #[inline(always)]
        pub fn izero() -> I {
            i32x4_splat(0)
        }
        #[cfg(not(feature = "relaxed-simd"))]
        #[inline(always)]
        pub fn dot_add(acc: I, a: I, b: I) -> I {
            i32x4_add(acc, i32x4_dot_i16x8(a, b))
        }
        #[inline(always)]
        pub fn fsplat(v: f32) -> F {
            f32x4_splat(v)
        }
        #[inline(always)]
        pub fn scale_add(acc: F, i: I, s: F) -> F {
            f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(i), s))
        }
        #[inline(always)]
        pub fn fmul(a: F, b: F) -> F {
            f32x4_mul(a, b)
        }
        #[inline(always)]
        pub unsafe fn abs_max_32(x: *const f32) -> F {
            unsafe {
                // pmax (a < b ? b : a) is one instruction on x86; max's NaN rules cost several, and |x| has no NaN
                // worth keeping (a NaN activation is already a broken model).
                let mut m = f32x4_splat(0.0);
                for i in 0..8 {
                    m = f32x4_pmax(m, f32x4_abs(v128_load(x.add(4 * i) as *const v128)));
                }
                m
            }
        }
        /// `round_half_even(x[i] · s)` for 8 values at `x`, as i16. Adding 1.5 · 2²³ rounds a product (|·| ≤ 63 here)
        /// to the nearest integer, ties to even, which then sits in the sum's low mantissa bits: the integer
        /// subtraction of the constant's bits gives it as i32. The same integers as `f32x4.nearest` +
        /// `i32x4.trunc_sat_f32x4_s` for every |v| < 2²², in 2 instructions where V8 emits 8 (its saturating
        /// conversion is 7 on x86); x quantization took 3.5% of a one-sentence forward (`bench/profile.mjs`).
        #[inline(always)]
        unsafe fn round_8(x: *const f32, s: v128) -> v128 {
            const ROUND: f32 = 12_582_912.0;
            let r = |p: *const f32| unsafe {
                let t = f32x4_add(f32x4_mul(v128_load(p as *const v128), s), f32x4_splat(ROUND));
                i32x4_sub(t, i32x4_splat(ROUND.to_bits() as i32))
            };
            // SAFETY: the caller's 8 values.
            i16x8_narrow_i32x4(r(x), r(unsafe { x.add(4) }))
        }
        #[inline(always)]
        pub unsafe fn round_32(x: *const f32, id: f32, q: *mut i16) {
            unsafe {
                let s = f32x4_splat(id);
                for i in 0..4 {
                    v128_store(q.add(8 * i) as *mut v128, round_8(x.add(8 * i), s));
                }
            }
        }
        /// As `round_32`, stored as `q + 64` in u8 (`q ∈ [−63, 63]`).
        #[cfg(feature = "relaxed-simd")]
        #[inline(always)]
        pub unsafe fn round_32_offset(x: *const f32, id: f32, q: *mut u8) {
            unsafe {
                let s = f32x4_splat(id);
                let off = i16x8_splat(super::super::ACT_OFFSET as i16);
                let mut h = [i16x8_splat(0); 4];
                for (i, h) in h.iter_mut().enumerate() {
                    *h = i16x8_add(round_8(x.add(8 * i), s), off);
                }
                v128_store(q as *mut v128, u8x16_narrow_i16x8(h[0], h[1]));
                v128_store(q.add(16) as *mut v128, u8x16_narrow_i16x8(h[2], h[3]));
            }
        }
        /// `acc + Σ_4 w·x` per 32-bit lane, x's bytes in [0, 127]: fused (one relaxed instruction) or split (pair
        /// sums in i16, widened by a dot product with 1s: module docs, and added); the same integers.
        #[cfg(feature = "relaxed-simd")]
        #[target_feature(enable = "relaxed-simd")]
        #[inline]
        pub fn dot4_add<const FUSED: bool>(acc: I, w: I, x: I) -> I {
            if FUSED {
                i32x4_relaxed_dot_i8x16_i7x16_add(w, x, acc)
            } else {
                i32x4_add(acc, i32x4_dot_i16x8(i16x8_relaxed_dot_i8x16_i7x16(w, x), i16x8_splat(1)))
            }
        }
        #[cfg(feature = "relaxed-simd")]
        #[inline(always)]
        pub unsafe fn splat_quad(p: *const u8) -> I {
            unsafe { v128_load32_splat(p as *const u32) }
        }
        #[cfg(feature = "relaxed-simd")]
        #[inline(always)]
        pub unsafe fn load_i32(p: *const i32) -> I {
            unsafe { v128_load(p as *const v128) }
        }
    }
    #[cfg(not(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128"))))]
    mod imp {
        pub type I = [i32; 4];
        pub type F = [f32; 4];
        // SAFETY (all): loads read 16 or 4 bytes at `p`, which callers guarantee are in bounds.
        #[inline(always)]
        pub unsafe fn load_widen8(p: *const i8) -> [i16; 8] {
            let v = unsafe { (p as *const [i8; 8]).read_unaligned() };
            v.map(|b| b as i16)
        }
        #[inline(always)]
        pub unsafe fn splat_pair(p: *const i16) -> [i16; 8] {
            let (a, b) = unsafe { (*p, *p.add(1)) };
            std::array::from_fn(|l| if l % 2 == 0 { a } else { b })
        }
        #[inline(always)]
        pub fn izero() -> I {
            [0; 4]
        }
        #[inline(always)]
        pub fn dot_add(acc: I, a: [i16; 8], b: [i16; 8]) -> I {
            std::array::from_fn(|l| acc[l] + a[2 * l] as i32 * b[2 * l] as i32 + a[2 * l + 1] as i32 * b[2 * l + 1] as i32)
        }
        #[inline(always)]
        pub fn fsplat(v: f32) -> F {
            [v; 4]
        }
        #[inline(always)]
        pub fn scale_add(acc: F, i: I, s: F) -> F {
            std::array::from_fn(|l| acc[l] + i[l] as f32 * s[l])
        }
        #[inline(always)]
        pub fn fmul(a: F, b: F) -> F {
            std::array::from_fn(|l| a[l] * b[l])
        }
        #[inline(always)]
        pub unsafe fn abs_max_32(x: *const f32) -> F {
            let xs = unsafe { std::slice::from_raw_parts(x, 32) };
            std::array::from_fn(|l| (0..8).fold(0f32, |a, i| a.max(xs[4 * i + l].abs())))
        }
        #[inline(always)]
        pub unsafe fn round_32(x: *const f32, id: f32, q: *mut i16) {
            let (xs, qs) = unsafe { (std::slice::from_raw_parts(x, 32), std::slice::from_raw_parts_mut(q, 32)) };
            for (q, &v) in qs.iter_mut().zip(xs) {
                *q = (v * id).round_ties_even() as i16;
            }
        }
    }
    pub use imp::*;
    // The float lanes are simd.rs's (the same vector type per target).
    pub use super::super::simd::{load as load_f, to_array, zero as fzero};

    /// The block's `(d, 1 / d)` from its largest magnitude. SAFETY: `x` points at 32 floats.
    #[inline(always)]
    pub unsafe fn scale_of_32(x: *const f32) -> (f32, f32) {
        let [a, b, c, d] = to_array(unsafe { abs_max_32(x) });
        super::scale_of(a.max(b).max(c.max(d)))
    }
}

/// The integer sums of one block for a tile: rows `xq[0..R]` (stride `k`) times `G` column groups, the 128 bytes
/// of group `gi` at `wq[gi]` (and, relaxed SIMD, its 4 offsets at `wo[gi]`). Each splat of x feeds all `G` groups.
///
/// SAFETY: `xq` holds `R` rows of `k` values from the block's start, each `wq[gi]` 128 bytes (and, relaxed, each
/// `wo[gi]` 4 offsets).
#[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
#[inline(always)]
unsafe fn block_sums<const R: usize, const G: usize, const FUSED: bool>(xq: *const Xq, k: usize, wq: [*const i8; G],
    _wo: [*const i32; G]) -> [[v::I; R]; G] {
    use v::*;
    // Per half-quad (8 bytes of each group: pairs (k, k+1) of 4 columns), the groups' widened weights, then each
    // row's splat against all of them: 2R accumulators, G weights and one splat live at a time, which V8 keeps in
    // registers (a whole quad at once, 8 splats and 4 weights, spilled 4 accumulators to the stack).
    let mut ia = [[izero(); R]; G];
    for h in 0..QK / 2 {
        // SAFETY: h < 16 keeps the reads inside the block the caller guarantees (8 bytes of W at 8h, the pair of x
        // at 2h).
        unsafe {
            let w: [I; G] = std::array::from_fn(|gi| load_widen8(wq[gi].add(h * 8)));
            for r in 0..R {
                let x = splat_pair(xq.add(r * k + h * 2));
                for gi in 0..G {
                    ia[gi][r] = dot_add(ia[gi][r], x, w[gi]);
                }
            }
        }
    }
    ia
}
#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
#[target_feature(enable = "relaxed-simd")]
#[inline]
unsafe fn block_sums<const R: usize, const G: usize, const FUSED: bool>(xq: *const Xq, k: usize, wq: [*const i8; G],
    wo: [*const i32; G]) -> [[v::I; R]; G] {
    use v::*;
    // SAFETY: as documented.
    let mut ia: [[I; R]; G] = std::array::from_fn(|gi| [unsafe { load_i32(wo[gi]) }; R]);
    for t in 0..QK / 4 {
        // SAFETY: t < 8 keeps the reads inside the block the caller guarantees.
        unsafe {
            let w: [I; G] = std::array::from_fn(|gi| load_i8(wq[gi].add(t * 16)));
            for r in 0..R {
                let x = splat_quad(xq.add(r * k + t * 4));
                for gi in 0..G {
                    ia[gi][r] = dot4_add::<FUSED>(ia[gi][r], w[gi], x);
                }
            }
        }
    }
    ia
}

/// One tile: rows `xq[0..R]` (each `K` values, stride `k`) times `G` column groups; returns the 4 columns of each
/// group and row.
///
/// SAFETY: `xq` holds `R` rows of `k` values, `xd` their `R · k / 32` scales (stride `k / 32`), each `wq[gi]` its
/// group's `k / 32 · 128` bytes, `ws[gi]` its `k / 32 · 4` scales, `wo[gi]` its offsets (relaxed SIMD; unread
/// otherwise).
#[cfg_attr(all(target_arch = "wasm32", feature = "relaxed-simd"), target_feature(enable = "relaxed-simd"), inline)]
#[cfg_attr(not(all(target_arch = "wasm32", feature = "relaxed-simd")), inline(always))]
unsafe fn tile<const R: usize, const G: usize, const FUSED: bool>(xq: *const Xq, xd: *const f32, k: usize,
    wq: [*const i8; G], ws: [*const f32; G], wo: [*const i32; G]) -> [[[f32; 4]; R]; G] {
    use v::*;
    let blocks = k / QK;
    let mut acc = [[fzero(); R]; G];
    for b in 0..blocks {
        // SAFETY: b < K/32 keeps every read inside the bounds the caller guarantees.
        let ia = unsafe {
            block_sums::<R, G, FUSED>(xq.add(b * QK), k, wq.map(|p| p.add(b * GROUP_BLOCK)), wo.map(|p| p.wrapping_add(b * NR)))
        };
        for r in 0..R {
            let d = fsplat(unsafe { *xd.add(r * blocks + b) });
            for gi in 0..G {
                // SAFETY: as above.
                let s = unsafe { load_f(ws[gi].add(b * NR)) };
                acc[gi][r] = scale_add(acc[gi][r], ia[gi][r], fmul(s, d));
            }
        }
    }
    acc.map(|a| a.map(to_array))
}

/// `out (M, N) = act(x (M, K) · Wᵀ + bias (N))` for a repacked Q8_0 `W`, x quantized per block of 32.
pub fn linear_q8(x: &[f32], m: usize, k: usize, w: &Q8Matrix, bias: Option<&[f32]>, act: Activation, out: &mut [f32]) {
    let n = w.n;
    assert!(w.k == k && x.len() == m * k && out.len() == m * n && bias.is_none_or(|b| b.len() == n));
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return epilogue(out, n, bias, act);
    }
    let blocks = k / QK;
    let tasks = if m * n * k >= PARALLEL_MIN_MACS { super::threads().min(m.div_ceil(MR)) } else { 1 };
    let rows_per_task = m.div_ceil(tasks).next_multiple_of(MR).min(m);
    par_chunks_mut(out, rows_per_task * n, |ti, c| {
        let (r0, rows) = (ti * rows_per_task, c.len() / n);
        let mut xq: Vec<Xq> = vec![0; rows * k];
        let mut xd = vec![0f32; rows * blocks];
        prepare_rows(&x[r0 * k..(r0 + rows) * k], k, &mut xq, &mut xd);
        // SAFETY: xq/xd hold the task's `rows` rows; `c` is their output rows.
        unsafe { pass(&xq, &xd, rows, k, w, c) };
        epilogue(c, n, bias, act);
    });
}

/// Every column group over the task's quantized rows `xq (rows, K)`, `xd (rows, K/32)`, into `c (rows, N)`: row blocks
/// of [`MC`], tiles of [`MR`] rows × two column groups (8 columns: each splat of x feeds twice the multiply-adds; a
/// last odd group alone). Two groups took 0.84–0.93× the time of one in the SIMD128 build, 0.90× in the relaxed one
/// (MiniLM 8 × 128, `bench/ab.mjs`).
/// Its own function so that the relaxed-SIMD build can enable the feature for the kernel alone (the rest of the
/// crate and its dependencies compile as in the SIMD128 build; the f32 GEMM is the one other kernel with it).
///
/// SAFETY: `xq.len() == rows · k`, `xd.len() == rows · k / 32`, `c.len() == rows · w.n`, `w.k == k`.
unsafe fn pass(xq: &[Xq], xd: &[f32], rows: usize, k: usize, w: &Q8Matrix, c: &mut [f32]) {
    // SAFETY: the caller's guarantees.
    unsafe {
        // (`cfg!`: the other builds compile one form.)
        if cfg!(all(target_arch = "wasm32", feature = "relaxed-simd")) && fused_dot() {
            pass_form::<true>(xq, xd, rows, k, w, c)
        } else {
            pass_form::<false>(xq, xd, rows, k, w, c)
        }
    }
}

/// [`pass`] with the dot product's form fixed (relaxed SIMD; the other builds have one form).
///
/// SAFETY: as [`pass`].
#[cfg_attr(all(target_arch = "wasm32", feature = "relaxed-simd"), target_feature(enable = "relaxed-simd"))]
unsafe fn pass_form<const FUSED: bool>(xq: &[Xq], xd: &[f32], rows: usize, k: usize, w: &Q8Matrix, c: &mut [f32]) {
    let (n, blocks) = (w.n, k / QK);
    let groups = n.div_ceil(NR);
    let group = |g: usize| {
        let wq = w.qs[g * blocks * GROUP_BLOCK..][..blocks * GROUP_BLOCK].as_ptr();
        let ws = w.scales[g * blocks * NR..][..blocks * NR].as_ptr();
        // Empty unless relaxed SIMD, and then never read.
        let wo = if w.offsets.is_empty() { std::ptr::null() } else { w.offsets[g * blocks * NR..][..blocks * NR].as_ptr() };
        (wq, ws, wo)
    };
    for mc in (0..rows).step_by(MC) {
        let mc_end = (mc + MC).min(rows);
        let mut g = 0;
        while g < groups {
            let pair = g + 1 < groups;
            let ((wq0, ws0, wo0), (wq1, ws1, wo1)) = (group(g), group(if pair { g + 1 } else { g }));
            let mut i = mc;
            while i < mc_end {
                let r = MR.min(mc_end - i);
                let (xp, dp) = (xq[i * k..].as_ptr(), xd[i * blocks..].as_ptr());
                // Rows i..i + R of x, groups g (and g + 1): their columns of c.
                let mut put = |gi: usize, j: usize, v: [f32; 4]| {
                    let col = (g + gi) * NR;
                    let cols = NR.min(n - col);
                    c[(i + j) * n + col..][..cols].copy_from_slice(&v[..cols]);
                };
                // SAFETY: rows i..i + r < rows of xq/xd exist (r ≤ mc_end - i); the groups' slices were cut to
                // length above.
                unsafe {
                    macro_rules! run {
                        ($r:literal) => {
                            if pair {
                                let t = tile::<$r, 2, FUSED>(xp, dp, k, [wq0, wq1], [ws0, ws1], [wo0, wo1]);
                                for (gi, rows) in t.into_iter().enumerate() {
                                    rows.into_iter().enumerate().for_each(|(j, v)| put(gi, j, v));
                                }
                            } else {
                                let [t] = tile::<$r, 1, FUSED>(xp, dp, k, [wq0], [ws0], [wo0]);
                                t.into_iter().enumerate().for_each(|(j, v)| put(0, j, v));
                            }
                        };
                    }
                    match r {
                        4 => run!(4),
                        3 => run!(3),
                        2 => run!(2),
                        _ => run!(1),
                    }
                }
                i += r;
            }
            g += if pair { 2 } else { 1 };
        }
    }
}

/// Whether the relaxed-SIMD kernel runs the fused dot product (see the module docs): forced by
/// [`force_fused_dot`], else true unless the engine has no byte dot product (`form::saturating_lowering`).
/// `false` in the other builds, which have one form.
pub fn fused_dot() -> bool {
    #[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
    {
        use std::sync::atomic::Ordering::Relaxed;
        // 1 split, 2 fused: forced, else the engine's, probed by every thread that finds it unprobed (the same
        // answer; see `CHOSEN`).
        let mut f = form::FORCED.load(Relaxed);
        if f == 0 {
            f = form::CHOSEN.load(Relaxed);
        }
        if f == 0 {
            f = 1 + !form::saturating_lowering() as u8;
            form::CHOSEN.store(f, Relaxed);
        }
        f == 2
    }
    #[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
    false
}

/// Fixes the form [`fused_dot`] returns (`None`: back to the engine's); for tests, which check both forms.
pub fn force_fused_dot(fused: Option<bool>) {
    #[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
    form::FORCED.store(fused.map_or(0, |f| 1 + f as u8), std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
    let _ = fused;
}

#[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
mod form {
    use core::arch::wasm32::*;
    use std::sync::atomic::AtomicU8;

    /// 0: the engine's choice, 1: split, 2: fused.
    pub(super) static FORCED: AtomicU8 = AtomicU8::new(0);
    /// The engine's choice once probed: 0 not yet, 1 split, 2 fused. An atomic, not a `OnceLock`: the first Q8_0
    /// product of a threaded page asks from every thread at once (inside the parallel items), and a `OnceLock`'s
    /// loser waits with `memory.atomic.wait32`, which traps on a browser's main thread. That trap left the call's
    /// promise unsettled for good: a page hung on its first sentence (2 of 16 fresh 2-thread pages of
    /// `bench/latency.mjs --alone 2`). See threads.rs, "Nothing an item runs may wait".
    pub(super) static CHOSEN: AtomicU8 = AtomicU8::new(0);

    /// Whether the engine runs `i32x4.relaxed_dot_i8x16_i7x16_add_s` as x86 without AVX-VNNI: `pmaddubsw` (its i16
    /// pair sums saturate) + `pmaddwd` + `paddd`, five instructions with V8's constant, where the split form is
    /// faster. Told apart by the one input where the relaxed semantics allow different results, the 7-bit operand
    /// with its top bit set: `Σ_4 127 · b` with b's bytes all 0xFF is 2 · 32767 per lane through `pmaddubsw` (b read
    /// as unsigned, each pair saturated); AVX-VNNI's unsigned bytes give 4 · 127 · 255, signed ones (ARM's `sdot`)
    /// 4 · 127 · −1, and those take the fused form, as does any engine not seen here.
    pub fn saturating_lowering() -> bool {
        // Volatile reads: the compiler (and wasm-opt) must not evaluate the relaxed instruction themselves.
        // SAFETY: reads of two constants through valid references.
        let (a, b) = unsafe { (std::ptr::read_volatile(&127i8), std::ptr::read_volatile(&-1i8)) };
        probe(i8x16_splat(a), i8x16_splat(b)) == [2 * 32767; 4]
    }

    #[target_feature(enable = "relaxed-simd")]
    fn probe(a: v128, b: v128) -> [i32; 4] {
        let r = i32x4_relaxed_dot_i8x16_i7x16_add(a, b, i32x4_splat(0));
        [i32x4_extract_lane::<0>(r), i32x4_extract_lane::<1>(r), i32x4_extract_lane::<2>(r), i32x4_extract_lane::<3>(r)]
    }
}
