//! Integer and float lanes: SSE2 natively (x86-64's baseline), SIMD128 in wasm32, plain arrays elsewhere. Every
//! variant computes the same values bit for bit: the integer sums are exact, and the float steps are the same
//! conversions, products and sums in the same order.

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
