//! Which of its two forms of the byte dot product the relaxed-SIMD Q8_0 kernel runs (src/backend/cpu/q8.rs, whose
//! module docs say why there are two): the engine's, probed once per thread that asks, or one forced by the tests.

/// Whether the relaxed-SIMD kernel runs the fused dot product (see q8.rs's module docs): forced by
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
