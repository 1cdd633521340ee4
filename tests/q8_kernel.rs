//! The CPU backend's integer kernel for Q8_0 weights (src/backend/cpu/q8.rs): x quantized to 7 bits per block of
//! 32, integer multiply-adds, per-block scales in f32.
//!
//! 1. Bit for bit against a scalar reference written from the definition (independent of the kernel's layout,
//!    tiling and SIMD): the integer sums are exact and the float steps are the same operations in the same order,
//!    so any difference is a bug (a wrong lane, pair, block or scale), not rounding.
//! 2. Against the f32-activation twin (`linear_packed`, which the GPU matches) within the bound that rounding x to
//!    7 bits allows, computed output by output.
//!
//! The wasm builds (SIMD128, relaxed SIMD) compute the same values; tests/browser/q8-kernel.test.mjs checks them
//! in Chromium against a JavaScript transcription of `reference` below.
//!
//! Awkward shapes: M 1–9 (every tile height and remainder), 12 (a sentence), 64/65/130 (cache blocks), N 1, 3, 5, 7
//! (partial column groups), 33, 384; K 32, 64, 384; bias and activations; on 3 threads.

use bertgpu::backend::cpu::matmul::linear_packed;
use bertgpu::backend::cpu::q8;
use bertgpu::backend::Activation;
use bertgpu::dtype::Dtype;
use bertgpu::weights::quant::{self, RowView, Q8_0_BLOCK_BYTES, QK};
use bertgpu::weights::{HostData, HostTensor};

mod common;
use common::{host, rand_vec};

/// The bound of test 2 is exact arithmetic's; the two sides also round their f32 sums differently (≈ K·2⁻²⁴ of
/// Σ|terms|, as the f32 matmul tests budget) and x's quantization step carries an f32 rounding of its own: a 1%
/// margin on the bound plus this absolute slack covers both.
const BOUND_MARGIN: f32 = 1.01;
const BOUND_ATOL: f32 = 1e-5;
/// GELU's slope is at most 1.13 (tanh, ReLU: 1), so an activation grows an input error by at most this factor.
const ACT_LIPSCHITZ: f32 = 1.13;

fn q8_weight(n: usize, k: usize, seed: u64) -> HostTensor {
    quant::quantize(&host(&[n, k], rand_vec(n * k, seed)), Dtype::Q8_0).unwrap()
}

fn bytes(w: &HostTensor) -> &[u8] {
    match &w.data {
        HostData::Q8_0(b) => b,
        _ => unreachable!(),
    }
}

/// `act(x · Wᵀ + b)` from the definition: for each output, for each block, the exact integer sum of products of
/// the quantized values, times (weight scale · x scale), accumulated in f32 in block order.
fn reference(x: &[f32], m: usize, k: usize, w: &HostTensor, n: usize, bias: Option<&[f32]>, act: Activation) -> Vec<f32> {
    let blocks = k / QK;
    let (mut xq, mut xd) = (vec![0i16; m * k], vec![0f32; m * blocks]);
    q8::quantize_rows(x, k, &mut xq, &mut xd);
    let wb = bytes(w);
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for b in 0..blocks {
                let blk = &wb[(j * blocks + b) * Q8_0_BLOCK_BYTES..][..Q8_0_BLOCK_BYTES];
                let ws = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                let isum: i32 = (0..QK).map(|l| blk[2 + l] as i8 as i32 * xq[i * k + b * QK + l] as i32).sum();
                acc += isum as f32 * (ws * xd[i * blocks + b]);
            }
            let v = acc + bias.map_or(0.0, |bb| bb[j]);
            out[i * n + j] = bertgpu::backend::cpu::matmul::activate(v, act);
        }
    }
    out
}

/// The kernel as the wasm CPU backend runs it (natively the backend dequantizes instead: `INT8_Q8_0`), bias and
/// activation included.
fn linear(x: &[f32], m: usize, k: usize, w: &HostTensor, bias: Option<&[f32]>, act: Activation) -> Vec<f32> {
    let n = w.shape[0];
    let q = q8::Q8Matrix::from_q8_0(bytes(w), n, k).unwrap();
    let mut out = vec![0f32; m * n];
    q8::linear_q8(x, m, k, &q, bias, act, &mut out);
    out
}

#[test]
fn integer_kernel_equals_the_scalar_definition_bit_for_bit() {
    let acts = [Activation::None, Activation::Gelu, Activation::Relu, Activation::Tanh];
    let mut cases = 0;
    // Three threads, so that the rows are split between them (whole tiles of 4 rows) on any machine.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    for (si, &m) in [1usize, 2, 3, 4, 5, 7, 9, 12, 64, 65, 130].iter().enumerate() {
        for (sj, &n) in [1usize, 3, 4, 5, 7, 33, 384].iter().enumerate() {
            for (sk, &k) in [32usize, 64, 384].iter().enumerate() {
                if m * n * k > 130 * 384 * 64 {
                    continue; // the largest shapes only at small K: the scalar reference is slow
                }
                let seed = (si * 100 + sj * 10 + sk) as u64;
                let x: Vec<f32> = rand_vec(m * k, seed).iter().map(|v| v * 3.0).collect();
                let w = q8_weight(n, k, seed + 1000);
                let bias = rand_vec(n, seed + 2000);
                let act = acts[cases % acts.len()];
                let b = (cases % 2 == 0).then_some(&bias[..]);
                let got = pool.install(|| linear(&x, m, k, &w, b, act));
                let want = reference(&x, m, k, &w, n, b, act);
                for (idx, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert!(g.to_bits() == r.to_bits(), "M {m} N {n} K {k} {act:?}: out[{idx}] = {g} vs {r}");
                }
                cases += 1;
            }
        }
    }
    assert!(cases > 150, "{cases} cases");
}

#[test]
fn integer_kernel_is_within_the_activation_rounding_bound_of_the_f32_twin() {
    for (m, n, k, act) in [(1, 384, 384, Activation::None), (7, 33, 1536, Activation::None), (65, 130, 64, Activation::Gelu),
        (12, 1536, 384, Activation::Gelu), (33, 5, 384, Activation::Tanh)] {
        let x: Vec<f32> = rand_vec(m * k, 7 * m as u64).iter().map(|v| v * 4.0).collect();
        let w = q8_weight(n, k, 11 * n as u64);
        let bias = rand_vec(n, 3);
        let got = linear(&x, m, k, &w, Some(&bias), act);
        let mut twin = vec![0f32; m * n];
        linear_packed(&x, m, k, &RowView::new(&w).unwrap(), Some(&bias), act, &mut twin);
        let wf = w.to_f32().unwrap();
        let slope = if act == Activation::None { 1.0 } else { ACT_LIPSCHITZ };
        let mut worst = 0f32;
        for i in 0..m {
            for j in 0..n {
                // |Δ| ≤ Σ_blocks (amax_x / 126) · Σ_block |w|: each x moves by at most half its block's step.
                let bound: f32 = (0..k / QK)
                    .map(|b| {
                        let xs = &x[i * k + b * QK..][..QK];
                        let ws = &wf[j * k + b * QK..][..QK];
                        xs.iter().fold(0f32, |a, v| a.max(v.abs())) / 126.0 * ws.iter().map(|v| v.abs()).sum::<f32>()
                    })
                    .sum();
                let (g, t) = (got[i * n + j], twin[i * n + j]);
                let limit = slope * bound * BOUND_MARGIN + BOUND_ATOL;
                assert!((g - t).abs() <= limit, "M {m} N {n} K {k}: out[{i}, {j}] = {g} vs twin {t}, bound {limit}");
                worst = worst.max((g - t).abs() / limit);
            }
        }
        // The bound is a worst case; typical errors are a small fraction of it (they partly cancel).
        eprintln!("M {m} N {n} K {k} {act:?}: worst |Δ| at {:.1}% of the bound", worst * 100.0);
    }
}

#[test]
fn activations_are_quantized_as_q8_0_defines() {
    // Random rows, a zero block, a block with one large value, and a block whose scale is exactly 1 (amax 63)
    // holding values on .5 steps, which round to even.
    let k = 128;
    let mut x: Vec<f32> = rand_vec(3 * k, 5).iter().map(|v| v * 10.0).collect();
    x[..QK].fill(0.0);
    x[QK + 3] = 1000.0;
    for (j, v) in x[2 * QK..3 * QK].iter_mut().enumerate() {
        *v = j as f32 - 15.5;
    }
    x[3 * QK - 1] = 63.0;
    let (mut xq, mut xd) = (vec![0i16; x.len()], vec![0f32; x.len() / QK]);
    q8::quantize_rows(&x, k, &mut xq, &mut xd);
    for (b, (xb, qb)) in x.chunks(QK).zip(xq.chunks(QK)).enumerate() {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 63.0;
        assert_eq!(xd[b].to_bits(), d.to_bits(), "block {b} scale");
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (l, (&v, &q)) in xb.iter().zip(qb).enumerate() {
            let t = v * id;
            // Round half to even, from the definition.
            let fl = t.floor();
            let want = if t - fl > 0.5 || (t - fl == 0.5 && fl % 2.0 != 0.0) { fl + 1.0 } else { fl };
            assert_eq!(q as f32, want, "block {b} value {l}: {v} · {id}");
        }
    }
    assert_eq!(&xq[2 * QK..2 * QK + 4], &[-16, -14, -14, -12], "ties to even");
}

#[test]
fn repacking_refuses_bytes_that_do_not_hold_the_shape() {
    let w = q8_weight(3, 64, 1);
    assert!(q8::Q8Matrix::from_q8_0(bytes(&w), 3, 64).is_ok());
    let e = q8::Q8Matrix::from_q8_0(&bytes(&w)[1..], 3, 64).unwrap_err().to_string();
    assert!(e.contains("needs K a multiple of 32 and 204 bytes, got 203"), "{e}");
    assert!(q8::Q8Matrix::from_q8_0(bytes(&w), 6, 32).is_ok()); // same bytes, other shape: still whole blocks
    assert!(q8::Q8Matrix::from_q8_0(bytes(&w), 2, 48).is_err());
}
