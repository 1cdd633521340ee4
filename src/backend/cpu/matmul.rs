//! `linear`: `act(x · wᵀ + bias)` with x `(M, K)`, w `(N, K)` (PyTorch's `(out, in)` layout), bias `(N)`.
//!
//! Natively the GEMM is `matrixmultiply::sgemm` (packed panels, cache blocking, AVX2/FMA/AVX-512 kernels picked at
//! run time) above [`SMALL_M`] rows. It takes arbitrary strides, so `wᵀ` is read in place (row stride 1, column
//! stride K) without a transposed copy. In wasm32, and natively for a few rows, [`gemm_nt_dot`] takes its place:
//! dot products along K of x's and W's rows as stored, in SIMD128 register tiles (matrixmultiply's SIMD128 kernel
//! keeps more accumulators than V8 has registers); in the relaxed-SIMD build its multiply-adds are fused
//! (`f32x4.relaxed_madd`: 1.25× the SIMD128 build's GMAC/s on MiniLM's shapes in Chromium, `bench/kernel.mjs`);
//! natively on a CPU with AVX its tiles hold two rows of x a register ([`dot_avx`], bit for bit the same sums).
//! On several threads (natively, and the threaded wasm build) the M rows are split into one block per thread; each
//! block is an independent GEMM writing its own rows of the output. A few rows (up to [`XB`]: a sentence) are split
//! by columns instead, so that each thread reads only its share of W. Bias and activation are applied per row right
//! after the block's GEMM, while it is still in cache; the gated feed-forward's product too (`rotary::linear_glu`).
//! (Many rows split by columns, so that the GEMM packs each row of W once, made BERT's forward 6% slower on a quiet
//! machine, 4 × 64 tokens on 2 threads: each thread then packs all of x; BENCHMARKS.md.)

#[cfg(target_arch = "x86_64")]
use super::dot_avx;
use super::simd as f4;
use super::{par_chunks_mut, par_column_blocks, scratch, threads};
use crate::backend::Activation;
use crate::weights::quant::RowView;

/// Below this many multiply-adds a GEMM is not worth splitting across threads.
pub(super) const PARALLEL_MIN_MACS: usize = 1 << 18;

/// Column blocks per thread when a few rows are split by columns ([`linear`]): a worker that starts late takes
/// fewer of them, where one block per thread would make the caller wait for it. MiniLM, one sentence on 2 threads
/// of the browser build, 0.84× the time of the split by rows (where each thread read all of W); with one block per
/// thread the split by columns gained nothing (`bench/ab.mjs`, BENCHMARKS.md).
pub(super) const CHUNKS_PER_THREAD: usize = 4;
/// f32 values of one dequantized weight panel (`P × K`): 3 MiB, reused for every panel. Wide enough that the GEMM
/// packing of x, repeated per panel, costs ~1/P of the panel's multiply-adds (MiniLM: P = 512 at K = 384 and 1536;
/// at 1 MiB, K = 1536 took 3 panels and 1.5× the f32 GEMM's CPU time).
const PANEL_FLOATS: usize = 768 * 1024;
/// Panel heights: a multiple of the widest GEMM micro-kernel (16 columns with AVX-512) between these bounds.
const PANEL_ALIGN: usize = 16;
const PANEL_MIN: usize = 64;
const PANEL_MAX: usize = 512;

/// `out (M, N) = act(x (M, K) · w (N, K)ᵀ + bias (N))`. Slices must have exactly these lengths (checked by the
/// caller).
#[allow(clippy::too_many_arguments)]
pub fn linear(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, bias: Option<&[f32]>, act: Activation, out: &mut [f32]) {
    assert!(x.len() == m * k && w.len() == n * k && out.len() == m * n);
    if m == 0 || n == 0 {
        return;
    }
    let threads = if m * n * k >= PARALLEL_MIN_MACS { threads() } else { 1 };
    let split = threads > 1 && m <= XB && n >= 4 * CHUNKS_PER_THREAD * threads;
    if split || (!DOT_KERNEL_ALL_M && m <= SMALL_M) {
        // Few rows (a sentence): the threads split W's rows (the output's columns), so each reads only its share
        // of W, in whole tiles of 4. (Natively up to `SMALL_M` rows on one thread too: one block, through `DotX`.)
        let step = if split { n.div_ceil(CHUNKS_PER_THREAD * threads).next_multiple_of(4) } else { n };
        let xd = DotX::new(x, m, k);
        return par_column_blocks(out, n, step, |mut c| {
            let (c0, c1) = c.range();
            // SAFETY: W's rows c0..c1 and x are in bounds (asserted above); `c` owns columns c0..c1 of all m rows
            // (row stride n).
            unsafe { xd.gemm(&w[c0 * k..c1 * k], c1 - c0, c.ptr(), n) };
            for i in 0..m {
                epilogue(c.row(i), c1 - c0, bias.map(|b| &b[c0..c1]), act);
            }
        });
    }
    let blocks = threads.min(m);
    let rows_per_block = m.div_ceil(blocks);
    par_chunks_mut(out, rows_per_block * n, |bi, c| {
        let r0 = bi * rows_per_block;
        let rows = c.len() / n;
        gemm_nt(&x[r0 * k..(r0 + rows) * k], rows, k, w, n, c);
        epilogue(c, n, bias, act);
    });
}

/// Column blocks of a gated product with many rows split by columns (`rotary::linear_glu`) start at multiples of
/// this: whole panels of the widest GEMM micro-kernel (16 columns with AVX-512).
pub(super) const WIDE_ALIGN: usize = 16;

/// `out (M, N) = act(x (M, K) · Wᵀ + bias (N))` with W `(N, K)` kept in its stored dtype (f16, Q8_0, Q4_0): the
/// CPU twin of the GPU's `matmul_packed` kernel.
///
/// W is walked in panels of P rows (P ≈ 3 MiB of f32 / K, 64..512): each panel is dequantized once into a scratch
/// buffer (exactly the values `HostTensor::to_f32` gives; rows in parallel) and multiplied with all M rows of x by
/// the f32 GEMM, the M rows split across threads as in [`linear`], each block writing columns n0..n0 + P of its
/// own rows. Dequantization costs `N·K` per call against the GEMM's `M·N·K`, and the f32 copy of W never exists as
/// a whole: memory holds the packed weight plus one panel. Natively, up to [`SMALL_M`] rows (a sentence) take
/// [`linear_rows_few`] instead: no panel, W decoded a few rows at a time inside each thread's block of columns.
#[allow(clippy::too_many_arguments)]
pub fn linear_packed(x: &[f32], m: usize, k: usize, w: &RowView<'_>, bias: Option<&[f32]>, act: Activation,
    out: &mut [f32]) {
    assert!(w.cols == k);
    linear_rows(x, m, k, w.rows, &|r, c| w.rows_into(r, c), bias, act, out)
}

/// [`linear_packed`] for an `(n, k)` W whose rows `decode(r, out)` writes as f32 (`out`: whole rows from `r`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_rows(x: &[f32], m: usize, k: usize, n: usize, decode: &(dyn Fn(usize, &mut [f32]) + Sync),
    bias: Option<&[f32]>, act: Activation, out: &mut [f32]) {
    assert!(x.len() == m * k && out.len() == m * n && bias.is_none_or(|b| b.len() == n));
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        return linear(x, m, 0, &[], n, bias, act, out);
    }
    if !DOT_KERNEL_ALL_M && m <= SMALL_M {
        return linear_rows_few(x, m, k, n, decode, bias, act, out);
    }
    let p = ((PANEL_FLOATS / k) / PANEL_ALIGN * PANEL_ALIGN).clamp(PANEL_MIN, PANEL_MAX).min(n);
    let mut panel = vec![0f32; p * k]; // (P, K): W[n0..n0 + P, :] as f32
    let blocks = if m * p * k >= PARALLEL_MIN_MACS { threads().min(m) } else { 1 };
    let rows_per_block = m.div_ceil(blocks);
    for n0 in (0..n).step_by(p) {
        let rows = p.min(n - n0);
        let panel = &mut panel[..rows * k];
        // Decode the panel, a few rows per task.
        let rows_per_task = (PANEL_MIN / 4).max(1);
        par_chunks_mut(panel, rows_per_task * k, |ci, c| decode(n0 + ci * rows_per_task, c));
        let panel = &*panel;
        par_chunks_mut(out, rows_per_block * n, |bi, c| {
            let (r0, mr) = (bi * rows_per_block, c.len() / n);
            // Columns n0..n0 + rows of this task's own rows (row stride n).
            gemm_nt_ld(&x[r0 * k..(r0 + mr) * k], mr, k, panel, rows, &mut c[n0..], n);
        });
    }
    par_chunks_mut(out, rows_per_block * n, |_, c| epilogue(c, n, bias, act));
}

/// Rows of W that [`linear_rows_few`] decodes at a time: one register tile's width of W in [`gemm_nt_dot`] (4 rows,
/// 24 KiB at K = 1536), multiplied while it is in L1.
const STRIP: usize = 4;

/// [`linear_rows`] for a few rows natively (up to [`SMALL_M`], where every product takes [`gemm_nt_dot`]): W's rows
/// (the output's columns) are split across threads in blocks as in [`linear`], and each block decodes [`STRIP`]
/// rows of W at a time into its thread's scratch and multiplies them at once. One parallel loop a product, where the
/// panels took two a panel (the decode, then the GEMM with the rows split, in which each thread read the whole panel
/// and the caller waited for the late one: MiniLM on one sentence ran no faster on 2 threads than on 1), and no
/// panel's round trip through L2. Each output is the same dot product of the same decoded values as through a panel
/// (blocks and strips start at multiples of 4, so the N mod 4 columns that the kernel takes one at a time are the
/// same), so the result is bit for bit the same.
#[allow(clippy::too_many_arguments)]
fn linear_rows_few(x: &[f32], m: usize, k: usize, n: usize, decode: &(dyn Fn(usize, &mut [f32]) + Sync),
    bias: Option<&[f32]>, act: Activation, out: &mut [f32]) {
    let threads = if m * n * k >= PARALLEL_MIN_MACS { threads() } else { 1 };
    let step = if threads > 1 { n.div_ceil(CHUNKS_PER_THREAD * threads).next_multiple_of(STRIP) } else { n };
    let xd = DotX::new(x, m, k);
    par_column_blocks(out, n, step, |mut c| {
        let (c0, c1) = c.range();
        let base = c.ptr();
        scratch::with(|w| {
            if w.len() < STRIP * k {
                w.resize(STRIP * k, 0.0);
            }
            for j in (c0..c1).step_by(STRIP) {
                let rows = STRIP.min(c1 - j);
                let w = &mut w[..rows * k];
                decode(j, w);
                // SAFETY: x holds m·k floats and w rows·k (asserted by the caller, sliced here); `c` owns columns
                // c0..c1 of all m rows (row stride n), of which this writes j..j + rows.
                unsafe { xd.gemm(w, rows, base.add(j - c0), n) };
            }
        });
        for i in 0..m {
            epilogue(c.row(i), c1 - c0, bias.map(|b| &b[c0..c1]), act);
        }
    });
}

/// `c (M, N) = a (M, K) · b (N, K)ᵀ`, all row-major and contiguous.
pub fn gemm_nt(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: &mut [f32]) {
    gemm_nt_ld(a, m, k, b, n, c, n);
}

/// Up to this many rows of x, [`gemm_nt_ld`] takes dot products of contiguous rows ([`gemm_nt_dot`]) natively
/// instead of the packed GEMM: `matrixmultiply` packs the whole of W (N·K, read with stride K since W is stored
/// `(N, K)`) on every call, which for a few rows costs more than the multiplication (81% of a one-sentence forward
/// was packing). MiniLM, one thread, best of 40: 14 tokens 38 ms with the dot-product kernel (52 ms with the GEMM),
/// 17 tokens 55 ms with the GEMM.
pub(super) const SMALL_M: usize = 16;

/// Whether every GEMM takes [`gemm_nt_dot`]: in wasm, where `matrixmultiply`'s SIMD128 micro-kernel (8 × 8 outputs:
/// 16 accumulators, more than the 16 vector registers V8 has on x86 once its operands are counted) spent 87% of a
/// MiniLM forward; natively its AVX2/AVX-512 kernels are faster and it keeps the GEMM above `SMALL_M` rows.
const DOT_KERNEL_ALL_M: bool = cfg!(target_arch = "wasm32");

/// `c[i·ldc + j] = Σ_l a[i·K + l]·b[j·K + l]` for i < M, j < N (a `(M, K)`, b `(N, K)` row-major; `ldc ≥ N`).
pub fn gemm_nt_ld(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: &mut [f32], ldc: usize) {
    assert!(ldc >= n && (m == 0 || c.len() >= (m - 1) * ldc + n));
    // SAFETY: the assert bounds every c[i·ldc + j] for i < m, j < n inside `c`, which is borrowed exclusively.
    unsafe { gemm_nt_raw(a, m, k, b, n, c.as_mut_ptr(), ldc) }
}

/// [`gemm_nt_ld`] through a pointer to `c`: a task's block of columns of a shared output.
///
/// SAFETY: `c.add(i·ldc + j)` for i < m, j < n are valid for writes that nothing else reads or writes meanwhile.
pub(super) unsafe fn gemm_nt_raw(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: *mut f32, ldc: usize) {
    assert!(a.len() >= m * k && b.len() >= n * k && ldc >= n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            // SAFETY: the caller's guarantee, for row i's n columns.
            unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), n).fill(0.0) };
        }
        return;
    }
    if DOT_KERNEL_ALL_M || m <= SMALL_M {
        // SAFETY: the caller's guarantee.
        return unsafe { gemm_nt_dot(a, m, k, b, n, c, ldc) };
    }
    // SAFETY: the assert above bounds every index the strides reach in a and b (a[i*k + l], b[j*k + l] for i < m,
    // j < n, l < k); the caller's guarantee covers c[i*ldc + j].
    unsafe {
        matrixmultiply::sgemm(
            m, k, n, 1.0,
            a.as_ptr(), k as isize, 1,
            b.as_ptr(), 1, k as isize,
            0.0,
            c, ldc as isize, 1,
        );
    }
}

/// x of a product with few rows, prepared once for the [`gemm_nt_dot`] products of its blocks of W (the few-row
/// paths of [`linear`] and [`linear_rows`]): natively on a CPU with AVX, x's rows interleaved in pairs for
/// [`dot_avx`]'s tiles (twice the SSE kernel's lanes a multiply and an add, bit for bit its results).
pub(super) struct DotX<'a> {
    x: &'a [f32],
    m: usize,
    k: usize,
    #[cfg(target_arch = "x86_64")]
    pairs: Option<Vec<f32>>,
}

impl<'a> DotX<'a> {
    pub(super) fn new(x: &'a [f32], m: usize, k: usize) -> DotX<'a> {
        assert!(x.len() >= m * k);
        #[cfg(target_arch = "x86_64")]
        let pairs = (m <= SMALL_M && k > 0 && dot_avx::available()).then(|| dot_avx::interleave(x, m, k));
        DotX {
            x,
            m,
            k,
            #[cfg(target_arch = "x86_64")]
            pairs,
        }
    }

    /// [`gemm_nt_raw`] of x and `b (n, K)`: the AVX tiles where x was interleaved (the N mod 4 last columns, which
    /// the SSE kernel too takes one at a time, through it).
    ///
    /// SAFETY: as [`gemm_nt_raw`]'s.
    pub(super) unsafe fn gemm(&self, b: &[f32], n: usize, c: *mut f32, ldc: usize) {
        let (x, m, k) = (self.x, self.m, self.k);
        #[cfg(target_arch = "x86_64")]
        if let Some(xi) = &self.pairs {
            assert!(b.len() >= n * k && ldc >= n);
            let n4 = n / 4 * 4;
            // SAFETY: `pairs` exists only where the CPU has AVX; the caller's guarantee covers columns 0..n.
            unsafe {
                dot_avx::gemm_nt(x, xi, m, k, b, n4, c, ldc);
                if n4 < n {
                    gemm_nt_dot(x, m, k, &b[n4 * k..], n - n4, c.add(n4), ldc);
                }
            }
            return;
        }
        // SAFETY: the caller's guarantee.
        unsafe { gemm_nt_raw(x, m, k, b, n, c, ldc) }
    }
}

/// Rows of x per block of [`gemm_nt_dot`]: the block (`XB · K` floats, 384 KiB at K = 1536) stays in L2 while every
/// group of 4 rows of W passes over it.
pub(super) const XB: usize = 64;

/// The dot-product GEMM: both operands are read as stored, along K (no packing, so no per-call cost but the
/// multiply-adds). A register tile is 2 rows of x × 4 rows of W: 8 accumulators of 4 lanes, each a partial dot
/// product over every fourth element of K, fed by 6 loads per 8 multiply-adds (the 4 rows of W, 4·K floats, stay
/// in L1 while the block of x passes); at the end [`f4::hsum4`] folds each row's four accumulators into the 4
/// outputs in a fixed order, and the K mod 4 tail is added in scalar.
///
/// SAFETY: as [`gemm_nt_raw`]'s, and `a`, `b` hold `m · k`, `n · k` floats.
#[cfg_attr(all(target_arch = "wasm32", feature = "relaxed-simd"), target_feature(enable = "relaxed-simd"))]
unsafe fn gemm_nt_dot(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: *mut f32, ldc: usize) {
    // SAFETY (every write below): row i < m, columns j..j + 4 ≤ n or j < n, as the caller guarantees.
    let put = |i: usize, j: usize, v: &[f32]| unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr(), c.add(i * ldc + j), v.len())
    };
    let k4 = k / 4 * 4;
    for i0 in (0..m).step_by(XB) {
        let i1 = (i0 + XB).min(m);
        let mut j = 0;
        while j + 4 <= n {
            let w = &b[j * k..(j + 4) * k]; // rows j..j+4 of W
            let mut i = i0;
            while i + 2 <= i1 {
                let out = dot_tile::<2>(&a[i * k..(i + 2) * k], k, k4, w);
                for (r, o) in out.iter().enumerate() {
                    put(i + r, j, o);
                }
                i += 2;
            }
            if i < i1 {
                let [o] = dot_tile::<1>(&a[i * k..(i + 1) * k], k, k4, w);
                put(i, j, &o);
            }
            j += 4;
        }
        // The last N mod 4 rows of W, one at a time.
        for j in j..n {
            let w = &b[j * k..(j + 1) * k];
            for i in i0..i1 {
                let x = &a[i * k..(i + 1) * k];
                let mut acc = f4::zero();
                for l in (0..k4).step_by(4) {
                    // SAFETY: l + 4 ≤ k4 ≤ k bounds both rows.
                    acc = unsafe { f4::mul_add(acc, f4::load(x.as_ptr().add(l)), f4::load(w.as_ptr().add(l))) };
                }
                let z = f4::zero();
                let mut v = f4::to_array(f4::hsum4(acc, z, z, z))[0];
                for l in k4..k {
                    v += x[l] * w[l];
                }
                put(i, j, &[v]);
            }
        }
    }
}

/// `R` rows of x (`x`: R·K floats) times the 4 rows of `w` (4·K floats): `out[r][c] = x_r · w_c`.
#[cfg_attr(all(target_arch = "wasm32", feature = "relaxed-simd"), target_feature(enable = "relaxed-simd"), inline)]
#[cfg_attr(not(all(target_arch = "wasm32", feature = "relaxed-simd")), inline(always))]
fn dot_tile<const R: usize>(x: &[f32], k: usize, k4: usize, w: &[f32]) -> [[f32; 4]; R] {
    use f4::{hsum4, load, to_array, zero};
    #[cfg(all(target_arch = "wasm32", feature = "relaxed-simd"))]
    use f4::fma as mul_add;
    #[cfg(not(all(target_arch = "wasm32", feature = "relaxed-simd")))]
    use f4::mul_add;
    assert!(x.len() == R * k && w.len() == 4 * k && k4 <= k);
    let mut acc = [[zero(); 4]; R];
    let (xp, wp) = (x.as_ptr(), w.as_ptr());
    let mut l = 0;
    while l < k4 {
        // SAFETY: l + 4 ≤ k4 ≤ k, so every load reads 4 floats inside row r < R of x or row c < 4 of w.
        unsafe {
            let wv = [load(wp.add(l)), load(wp.add(k + l)), load(wp.add(2 * k + l)), load(wp.add(3 * k + l))];
            for r in 0..R {
                let xv = load(xp.add(r * k + l));
                for c in 0..4 {
                    acc[r][c] = mul_add(acc[r][c], xv, wv[c]);
                }
            }
        }
        l += 4;
    }
    std::array::from_fn(|r| {
        let mut o = to_array(hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        for l in k4..k {
            for (c, v) in o.iter_mut().enumerate() {
                *v += x[r * k + l] * w[c * k + l];
            }
        }
        o
    })
}

/// Adds the bias to every row of `c (rows, n)` and applies the activation.
pub(crate) fn epilogue(c: &mut [f32], n: usize, bias: Option<&[f32]>, act: Activation) {
    for row in c.chunks_exact_mut(n) {
        if let Some(b) = bias {
            for (v, &bb) in row.iter_mut().zip(b) {
                *v += bb;
            }
        }
        // One loop per activation, so each is a straight-line body the compiler can vectorise.
        match act {
            Activation::None => {}
            Activation::Gelu => row.iter_mut().for_each(|v| *v = super::fastmath::gelu(*v)),
            Activation::Silu => row.iter_mut().for_each(|v| *v = activate(*v, Activation::Silu)),
            _ => row.iter_mut().for_each(|v| *v = activate(*v, act)),
        }
    }
}

/// One activation, in f32, as PyTorch computes it.
pub fn activate(x: f32, act: Activation) -> f32 {
    match act {
        Activation::None => x,
        // 0.5·x·(1 + erf(x/√2)): torch.nn.functional.gelu(approximate="none").
        // erf from `fastmath`: the loop in `epilogue` vectorises, where libm's erff is a scalar call per element.
        Activation::Gelu => super::fastmath::gelu(x),
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): transformers' NewGELUActivation.
        Activation::GeluTanh => {
            const SQRT_2_OVER_PI: f32 = 0.797_884_6;
            0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Relu => x.max(0.0),
        Activation::Tanh => x.tanh(),
        // x·σ(x) = x / (1 + e^−x): torch.nn.functional.silu. e^−x from `fastmath` (relative error ≤ 2e-7), so that
        // the loops in `epilogue` and the gated product vectorise, where libm's expf is a scalar call per element.
        Activation::Silu => x / (1.0 + super::fastmath::exp(-x)),
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_close, rand_vec};
    use super::*;

    /// The GEMM sums K products in a different order than the reference loop (blocked, FMA); with |values| < 1 the
    /// rounding difference grows like √K·ε·|row|·|col|, far below this for K ≤ 513.
    const GEMM_ATOL: f32 = 1e-5;
    const GEMM_RTOL: f32 = 1e-5;

    fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, bias: Option<&[f32]>, act: Activation) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for l in 0..k {
                    s += x[i * k + l] as f64 * w[j * k + l] as f64;
                }
                let s = s as f32 + bias.map_or(0.0, |b| b[j]);
                out[i * n + j] = activate(s, act);
            }
        }
        out
    }

    #[test]
    fn linear_matches_reference_on_awkward_shapes() {
        for &(m, k, n) in &[(1, 1, 1), (7, 33, 5), (33, 7, 513), (513, 33, 7), (1, 513, 33), (65, 129, 130), (2, 0, 3)] {
            for (ai, act) in [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh, Activation::Silu]
                .into_iter()
                .enumerate()
            {
                let x = rand_vec(m * k, 1 + ai as u64);
                let w = rand_vec(n * k, 2);
                let b = rand_vec(n, 3);
                let mut out = vec![f32::NAN; m * n];
                linear(&x, m, k, &w, n, Some(&b), act, &mut out);
                let want = reference(&x, m, k, &w, n, Some(&b), act);
                assert_close(&out, &want, GEMM_ATOL, GEMM_RTOL, &format!("linear {m}x{k}x{n} {act:?}"));
                linear(&x, m, k, &w, n, None, act, &mut out);
                let want = reference(&x, m, k, &w, n, None, act);
                assert_close(&out, &want, GEMM_ATOL, GEMM_RTOL, &format!("linear no bias {m}x{k}x{n} {act:?}"));
            }
        }
    }

    /// `linear_packed` (panels of dequantized rows, each multiplied with row blocks of x) against the f64 reference
    /// on the same dequantized weights. The dequantized values are exact (an f16 scale times a small integer fits
    /// f32), so only the GEMM's f32 summation differs: the f32 tolerance, scaled with K beyond 64 because that
    /// rounding error grows with the number of terms (K = 1536 here, where the panel is narrower than N).
    #[test]
    fn linear_packed_matches_reference() {
        use crate::dtype::Dtype;
        use crate::weights::quant::{quantize, to_f16};
        use crate::weights::HostTensor;
        // N spans one panel, two panels with a ragged last one (K = 384: panels of 512 rows), and a narrow panel.
        for &(m, k, n) in &[(1, 32, 1), (7, 64, 33), (33, 384, 513), (129, 32, 7), (2, 1536, 40)] {
            let wt = HostTensor::f32(vec![n, k], rand_vec(n * k, 5)).unwrap();
            for packed in [to_f16(&wt).unwrap(), quantize(&wt, Dtype::Q8_0).unwrap(), quantize(&wt, Dtype::Q4_0).unwrap()] {
                let deq = packed.to_f32().unwrap();
                let view = RowView::new(&packed).unwrap();
                for (ai, act) in [Activation::None, Activation::Gelu, Activation::Tanh].into_iter().enumerate() {
                    let x = rand_vec(m * k, 6 + ai as u64);
                    let b = rand_vec(n, 7);
                    let bias = (ai != 1).then_some(&b[..]);
                    let mut out = vec![f32::NAN; m * n];
                    linear_packed(&x, m, k, &view, bias, act, &mut out);
                    let want = reference(&x, m, k, &deq, n, bias, act);
                    let what = format!("linear_packed {} {m}x{k}x{n} {act:?}", packed.data.dtype());
                    assert_close(&out, &want, GEMM_ATOL * (k as f32 / 64.0).max(1.0), GEMM_RTOL, &what);
                }
            }
        }
    }

    /// The dot-product kernel (all of wasm's GEMMs, natively up to `SMALL_M` rows) and the dispatch of
    /// `gemm_nt_ld` against the f64 reference: M on both sides of `SMALL_M`, odd and even, past one block of x
    /// (`XB`); K below, at and off a multiple of the lane count; N off a multiple of 4; a strided output (`ldc > N`).
    #[test]
    fn dot_kernel_matches_the_reference() {
        let shapes = [(1, 1, 1), (1, 384, 1536), (3, 7, 5), (16, 33, 9), (17, 384, 130), (5, 1536, 7), (2, 8, 4),
            (65, 36, 11), (130, 384, 20), (7, 3, 6)];
        type Gemm = fn(&[f32], usize, usize, &[f32], usize, &mut [f32], usize);
        fn dot(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, c: &mut [f32], ldc: usize) {
            assert!(a.len() >= m * k && b.len() >= n * k && ldc >= n && c.len() >= (m - 1) * ldc + n);
            // SAFETY: asserted above.
            unsafe { gemm_nt_dot(a, m, k, b, n, c.as_mut_ptr(), ldc) }
        }
        for (name, gemm) in [("gemm_nt_dot", dot as Gemm), ("gemm_nt_ld", gemm_nt_ld)] {
            for &(m, k, n) in &shapes {
                let x = rand_vec(m * k, 11);
                let w = rand_vec(n * k, 12);
                let want = reference(&x, m, k, &w, n, None, Activation::None);
                let ldc = n + 3;
                let mut c = vec![f32::NAN; m * ldc];
                gemm(&x, m, k, &w, n, &mut c, ldc);
                let got: Vec<f32> = c.chunks(ldc).flat_map(|r| r[..n].to_vec()).collect();
                let atol = GEMM_ATOL * (k as f32 / 64.0).max(1.0);
                assert_close(&got, &want, atol, GEMM_RTOL, &format!("{name} {m}x{k}x{n}"));
                assert!(c.chunks(ldc).all(|r| r[n..].iter().all(|v| v.is_nan())), "{name} writes only its N columns");
            }
        }
    }

    /// Few rows on several threads: the output's columns split between them (`par_column_blocks`), with ragged
    /// last blocks and N off a multiple of 4. Against the reference, and against one thread bit for bit where both
    /// take the dot-product kernel (each output is the same dot product either way).
    #[test]
    fn few_rows_split_by_columns_equal_one_thread() {
        for &(m, k, n) in &[(1, 384, 1536), (12, 384, 387), (16, 1536, 384), (40, 64, 130)] {
            let (x, w, b) = (rand_vec(m * k, 21), rand_vec(n * k, 22), rand_vec(n, 23));
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let mut out = vec![f32::NAN; m * n];
                    linear(&x, m, k, &w, n, Some(&b), Activation::Gelu, &mut out);
                    out
                })
            };
            let (one, three) = (run(1), run(3));
            let want = reference(&x, m, k, &w, n, Some(&b), Activation::Gelu);
            let atol = GEMM_ATOL * (k as f32 / 64.0).max(1.0);
            assert_close(&three, &want, atol, GEMM_RTOL, &format!("linear {m}x{k}x{n} on 3 threads"));
            if m <= SMALL_M {
                assert!(one.iter().zip(&three).all(|(a, b)| a.to_bits() == b.to_bits()), "{m}x{k}x{n}: 3 threads ≠ 1");
            }
        }
    }

    /// A few rows through `linear_packed` (natively W decoded 4 rows at a time and the output's columns split between
    /// the threads, `linear_rows_few`) give bit for bit what `linear` gives on the dequantized W, on 1 and 3 threads:
    /// each output is the same dot product of the same values, as it was through the panels. N off a multiple of 4,
    /// below one strip, and across blocks of columns; M odd, even, 1 and `SMALL_M`.
    #[test]
    fn few_rows_packed_equal_f32_on_the_decoded_weights() {
        use crate::dtype::Dtype;
        use crate::weights::quant::{quantize, to_f16};
        use crate::weights::HostTensor;
        for &(m, k, n) in &[(1, 384, 1536), (15, 384, 387), (SMALL_M, 1536, 384), (3, 32, 2), (7, 64, 130)] {
            let wt = HostTensor::f32(vec![n, k], rand_vec(n * k, 31)).unwrap();
            let (x, b) = (rand_vec(m * k, 32), rand_vec(n, 33));
            for packed in [quantize(&wt, Dtype::Q8_0).unwrap(), quantize(&wt, Dtype::Q4_0).unwrap(), to_f16(&wt).unwrap()] {
                let (deq, view) = (packed.to_f32().unwrap(), RowView::new(&packed).unwrap());
                for threads in [1, 3] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let (got, want) = pool.install(|| {
                        let (mut got, mut want) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                        linear_packed(&x, m, k, &view, Some(&b), Activation::Gelu, &mut got);
                        linear(&x, m, k, &deq, n, Some(&b), Activation::Gelu, &mut want);
                        (got, want)
                    });
                    let what = format!("{} {m}x{k}x{n} on {threads} threads", packed.data.dtype());
                    assert_eq!(got.len(), m * n, "{what}");
                    assert!(want.iter().all(|v| v.is_finite()), "{what}: every output written");
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: packed ≠ f32");
                }
            }
        }
    }

    /// The AVX tiles (`DotX` natively, where x is interleaved in pairs) against the SSE kernel bit for bit: M odd and
    /// even (an odd M's last pair is padding), K below, at and off a multiple of 4, N off a multiple of 4 (the last
    /// columns through the SSE kernel), a strided output; and nothing outside the N columns written.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_tiles_equal_the_sse_kernel() {
        if !dot_avx::available() {
            eprintln!("no AVX on this CPU: the SSE kernel runs alone");
            return;
        }
        for &(m, k, n) in &[(1, 384, 8), (2, 3, 4), (3, 7, 5), (15, 384, 1155), (SMALL_M, 1537, 9), (5, 36, 3)] {
            let (x, w) = (rand_vec(m * k, 41), rand_vec(n * k, 42));
            let ldc = n + 3;
            let (mut got, mut want) = (vec![f32::NAN; m * ldc], vec![f32::NAN; m * ldc]);
            let xd = DotX::new(&x, m, k);
            assert!(xd.pairs.is_some(), "{m}x{k}x{n}: AVX takes a few rows");
            // SAFETY: x, w hold m·k, n·k floats and each output m rows of ldc ≥ n.
            unsafe {
                xd.gemm(&w, n, got.as_mut_ptr(), ldc);
                gemm_nt_dot(&x, m, k, &w, n, want.as_mut_ptr(), ldc);
            }
            assert!(want.chunks(ldc).all(|r| r[..n].iter().all(|v| v.is_finite())), "{m}x{k}x{n}: every output");
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{m}x{k}x{n}: AVX ≠ SSE");
        }
    }

    #[test]
    fn activations_match_pytorch_values() {
        // torch.nn.functional.gelu(torch.tensor([-3., -1., -0.5, 0., 0.5, 1., 3.]))
        let xs = [-3.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
        let gelu = [-0.004050225, -0.15865526, -0.15426877, 0.0, 0.34573123, 0.8413447, 2.9959497];
        // gelu(approximate="tanh")
        let tanh = [-0.003637433, -0.158808, -0.154286, 0.0, 0.345714, 0.841192, 2.9963627];
        for i in 0..xs.len() {
            assert!((activate(xs[i], Activation::Gelu) - gelu[i]).abs() < 1e-6, "gelu({})", xs[i]);
            assert!((activate(xs[i], Activation::GeluTanh) - tanh[i]).abs() < 1e-6, "gelu_tanh({})", xs[i]);
        }
        assert_eq!(activate(-2.0, Activation::Relu), 0.0);
    }
}
