//! Four f32 lanes: SSE natively (x86-64's baseline), SIMD128 in wasm32 (enabled in .cargo/config.toml), plain
//! arrays elsewhere. The kernels' shared vector type: the dot-product GEMM ([`super::matmul`]), attention's score
//! and weighted-sum tiles ([`super::attention`]) and the Q8_0 kernel's float lanes ([`super::q8`]) all use these, so
//! none of them imports another for its lanes.

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;
    pub type V = __m128;
    /// SAFETY (all): SSE is part of the x86-64 baseline; `load` reads 4 floats from `p`, which the caller
    /// guarantees are in bounds.
    #[inline(always)]
    pub unsafe fn load(p: *const f32) -> V {
        unsafe { _mm_loadu_ps(p) }
    }
    #[inline(always)]
    pub fn zero() -> V {
        unsafe { _mm_setzero_ps() }
    }
    #[inline(always)]
    pub fn mul_add(acc: V, a: V, b: V) -> V {
        unsafe { _mm_add_ps(acc, _mm_mul_ps(a, b)) }
    }
    #[inline(always)]
    pub fn to_array(v: V) -> [f32; 4] {
        let mut out = [0f32; 4];
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
        out
    }
    #[inline(always)]
    pub fn splat(x: f32) -> V {
        unsafe { _mm_set1_ps(x) }
    }
    #[inline(always)]
    pub fn mul(a: V, b: V) -> V {
        unsafe { _mm_mul_ps(a, b) }
    }
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        unsafe { _mm_add_ps(a, b) }
    }
    /// Lane-wise `if b > a { b } else { a }` (no NaNs here).
    #[inline(always)]
    pub fn max(a: V, b: V) -> V {
        unsafe { _mm_max_ps(b, a) }
    }
    /// SAFETY: writes 4 floats to `p`, which the caller guarantees are in bounds.
    #[inline(always)]
    pub unsafe fn store(p: *mut f32, v: V) {
        unsafe { _mm_storeu_ps(p, v) }
    }
    /// `[Σ a0, Σ a1, Σ a2, Σ a3]`, each sum `(x0 + x2) + (x1 + x3)`.
    #[inline(always)]
    pub fn hsum4(a0: V, a1: V, a2: V, a3: V) -> V {
        unsafe {
            let s01 = _mm_add_ps(_mm_unpacklo_ps(a0, a1), _mm_unpackhi_ps(a0, a1)); // a0₀+a0₂ a1₀+a1₂ a0₁+a0₃ a1₁+a1₃
            let s23 = _mm_add_ps(_mm_unpacklo_ps(a2, a3), _mm_unpackhi_ps(a2, a3));
            _mm_add_ps(_mm_movelh_ps(s01, s23), _mm_movehl_ps(s23, s01))
        }
    }
}
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod imp {
    use core::arch::wasm32::*;
    pub type V = v128;
    /// SAFETY: reads 4 floats from `p`, which the caller guarantees are in bounds (unaligned loads are fine).
    #[inline(always)]
    pub unsafe fn load(p: *const f32) -> V {
        unsafe { v128_load(p as *const v128) }
    }
    #[inline(always)]
    pub fn zero() -> V {
        f32x4_splat(0.0)
    }
    #[inline(always)]
    pub fn mul_add(acc: V, a: V, b: V) -> V {
        f32x4_add(acc, f32x4_mul(a, b))
    }
    #[inline(always)]
    pub fn to_array(v: V) -> [f32; 4] {
        [f32x4_extract_lane::<0>(v), f32x4_extract_lane::<1>(v), f32x4_extract_lane::<2>(v), f32x4_extract_lane::<3>(v)]
    }
    #[inline(always)]
    pub fn splat(x: f32) -> V {
        f32x4_splat(x)
    }
    #[inline(always)]
    pub fn mul(a: V, b: V) -> V {
        f32x4_mul(a, b)
    }
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        f32x4_add(a, b)
    }
    /// Lane-wise `if b > a { b } else { a }` (no NaNs here).
    #[inline(always)]
    pub fn max(a: V, b: V) -> V {
        f32x4_pmax(a, b)
    }
    /// SAFETY: writes 4 floats to `p`, which the caller guarantees are in bounds.
    #[inline(always)]
    pub unsafe fn store(p: *mut f32, v: V) {
        unsafe { v128_store(p as *mut v128, v) }
    }
    /// `acc + a·b` with relaxed SIMD's `f32x4.relaxed_madd`: one fused multiply-add where the engine has
    /// one (V8 on x86 with FMA3, ARM), else the multiply and the add (then equal to [`mul_add`]).
    #[cfg(feature = "relaxed-simd")]
    #[target_feature(enable = "relaxed-simd")]
    #[inline]
    pub fn fma(acc: V, a: V, b: V) -> V {
        f32x4_relaxed_madd(a, b, acc)
    }
    /// `[Σ a0, Σ a1, Σ a2, Σ a3]`, each sum `(x0 + x2) + (x1 + x3)`.
    #[inline(always)]
    pub fn hsum4(a0: V, a1: V, a2: V, a3: V) -> V {
        let s01 = f32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a0, a1), i32x4_shuffle::<2, 6, 3, 7>(a0, a1));
        let s23 = f32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a2, a3), i32x4_shuffle::<2, 6, 3, 7>(a2, a3));
        f32x4_add(i32x4_shuffle::<0, 1, 4, 5>(s01, s23), i32x4_shuffle::<2, 3, 6, 7>(s01, s23))
    }
}
#[cfg(not(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128"))))]
mod imp {
    pub type V = [f32; 4];
    /// SAFETY: reads 4 floats from `p`, which the caller guarantees are in bounds.
    #[inline(always)]
    pub unsafe fn load(p: *const f32) -> V {
        unsafe { [*p, *p.add(1), *p.add(2), *p.add(3)] }
    }
    #[inline(always)]
    pub fn zero() -> V {
        [0.0; 4]
    }
    #[inline(always)]
    pub fn mul_add(acc: V, a: V, b: V) -> V {
        std::array::from_fn(|l| acc[l] + a[l] * b[l])
    }
    #[inline(always)]
    pub fn to_array(v: V) -> [f32; 4] {
        v
    }
    #[inline(always)]
    pub fn splat(x: f32) -> V {
        [x; 4]
    }
    #[inline(always)]
    pub fn mul(a: V, b: V) -> V {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        std::array::from_fn(|l| a[l] + b[l])
    }
    /// Lane-wise `if b > a { b } else { a }` (no NaNs here).
    #[inline(always)]
    pub fn max(a: V, b: V) -> V {
        std::array::from_fn(|l| if b[l] > a[l] { b[l] } else { a[l] })
    }
    /// SAFETY: writes 4 floats to `p`, which the caller guarantees are in bounds.
    #[inline(always)]
    pub unsafe fn store(p: *mut f32, v: V) {
        for (l, x) in v.into_iter().enumerate() {
            unsafe { *p.add(l) = x };
        }
    }
    /// `[Σ a0, Σ a1, Σ a2, Σ a3]`, each sum `(x0 + x2) + (x1 + x3)`.
    #[inline(always)]
    pub fn hsum4(a0: V, a1: V, a2: V, a3: V) -> V {
        [a0, a1, a2, a3].map(|a| (a[0] + a[2]) + (a[1] + a[3]))
    }
}
pub use imp::*;
